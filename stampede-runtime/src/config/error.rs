//! What a refused configuration says: the message, and where the setting came from.
use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration the runtime refuses: what is wrong, and where (file, line, key; or the
/// environment variable; or the builder call).
///
/// ```
/// use stampede_runtime::Runtime;
/// let err = Runtime::builder().admission("db", 0, std::time::Duration::from_secs(1)).build().unwrap_err();
/// assert_eq!(err.key(), Some("admission.db.limit"));
/// assert_eq!(err.to_string(), "runtime builder: `admission.db.limit`: limit must be at least 1");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(Box<Refusal>);

/// Boxed, so `stampede::Error` (which carries a `ConfigError`) and every `Result` of it
/// stay small: a fresh hit writes that `Result`, and a refused configuration is rare.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal {
    at: At,
    message: String,
}

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct At {
    source: Source,
    /// 1-based, in a file.
    pub(crate) line: Option<usize>,
    column: Option<usize>,
    /// The dotted key in a file, the variable's name in the environment.
    pub(crate) key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    File(PathBuf),
    Environment,
    Code,
    Process,
}

impl At {
    pub(super) fn file(path: &Path, text: &str, offset: Option<usize>, key: Option<String>) -> At {
        let (line, column) = match offset {
            Some(offset) => {
                let before = &text[..offset.min(text.len())];
                let line_start = before.rfind('\n').map_or(0, |i| i + 1);
                (
                    Some(before.matches('\n').count() + 1),
                    Some(before[line_start..].chars().count() + 1),
                )
            }
            None => (None, None),
        };
        At {
            source: Source::File(path.to_owned()),
            line,
            column,
            key,
        }
    }

    pub(super) fn env(variable: &str) -> At {
        At::keyed(Source::Environment, variable.to_owned())
    }

    pub(super) fn code(key: String) -> At {
        At::keyed(Source::Code, key)
    }

    fn keyed(source: Source, key: String) -> At {
        At {
            source,
            line: None,
            column: None,
            key: Some(key),
        }
    }

    pub(super) fn process() -> At {
        At {
            source: Source::Process,
            line: None,
            column: None,
            key: None,
        }
    }
}

impl ConfigError {
    /// An error of the process's configuration as a whole, not of one setting.
    pub(crate) fn in_process(message: impl Into<String>) -> Self {
        ConfigError::new(At::process(), message)
    }

    pub(super) fn new(at: At, message: impl Into<String>) -> Self {
        ConfigError(Box::new(Refusal {
            at,
            message: message.into(),
        }))
    }

    /// The file at fault, when it is a file.
    pub fn path(&self) -> Option<&Path> {
        match &self.0.at.source {
            Source::File(path) => Some(path),
            _ => None,
        }
    }

    /// The line in that file (1-based).
    pub fn line(&self) -> Option<usize> {
        self.0.at.line
    }

    /// The dotted key in the file (`functions.user-profile.fresh`), the environment
    /// variable, or the builder setting at fault.
    pub fn key(&self) -> Option<&str> {
        self.0.at.key.as_deref()
    }

    /// What is wrong, without the location.
    pub fn message(&self) -> &str {
        &self.0.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.at.source {
            Source::File(path) => {
                write!(f, "{}", path.display())?;
                if let Some(line) = self.0.at.line {
                    write!(f, ":{line}")?;
                }
                if let Some(column) = self.0.at.column {
                    write!(f, ":{column}")?;
                }
                f.write_str(": ")?;
            }
            Source::Environment => f.write_str("environment variable ")?,
            Source::Code => f.write_str("runtime builder: ")?,
            Source::Process => f.write_str("stampede runtime: ")?,
        }
        if let Some(key) = &self.0.at.key {
            write!(f, "`{key}`: ")?;
        }
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for ConfigError {}

//! The TOML file: the same serde models as the code and the environment, unknown keys
//! refused, and error messages that name the file, the line and the dotted key.
//!
//! ```toml
//! [backend]
//! kind = "memory"
//! [admission.db]
//! limit = 20
//! queue_timeout = "500ms"
//! [functions."user-profile"]
//! fresh = "30s"
//! ```
use super::{AdmissionLayer, At, BackendLayer, ConfigError, Layer, Located, Overrides};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use toml::de::{DeTable, DeValue};

/// What a file sets, each setting with its line.
pub(crate) struct Settings {
    pub(crate) backend: Located<BackendLayer>,
    pub(crate) admissions: Vec<(Arc<str>, Located<AdmissionLayer>)>,
    pub(crate) functions: Vec<(Arc<str>, Located<Overrides>)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    #[serde(default)]
    backend: BackendLayer,
    #[serde(default)]
    admission: BTreeMap<String, AdmissionLayer>,
    #[serde(default)]
    functions: BTreeMap<String, Overrides>,
}

/// Reads `text`, the contents of the file at `path`.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Settings, ConfigError> {
    let keys = Keys::of(text);
    let document: Document = toml::from_str(text).map_err(|error| {
        let span = error.span();
        let key = span.as_ref().and_then(|span| keys.around(span));
        let message = with_spellings(error.message().trim_end());
        let at = At::file(path, text, span.map(|s| s.start), key);
        ConfigError::new(at, message)
    })?;
    let locate = |table: String| {
        let keys = &keys;
        move |key: &str| {
            let dotted = if key.is_empty() {
                table.clone()
            } else {
                format!("{table}.{key}")
            };
            At::file(path, text, keys.offset(&dotted), Some(dotted))
        }
    };
    fn located<T: Layer>(value: T, locate: impl Fn(&str) -> At) -> Located<T> {
        let table = locate("");
        Located::new(value, Some(table), locate)
    }
    let table = |kind: &str, name: &str| format!("{kind}.{}", toml_key(name));
    Ok(Settings {
        backend: located(document.backend, locate("backend".to_owned())),
        admissions: (document.admission.into_iter())
            .map(|(name, admission)| {
                let at = locate(table("admission", &name));
                (Arc::from(name), located(admission, at))
            })
            .collect(),
        functions: (document.functions.into_iter())
            .map(|(name, overrides)| {
                let at = locate(table("functions", &name));
                (Arc::from(name), located(overrides, at))
            })
            .collect(),
    })
}

/// serde's refusal of a key written twice names the setting, not what was written: when
/// the second was the setting's other spelling, say so.
fn with_spellings(message: &str) -> String {
    let twice = message
        .strip_prefix("duplicate field `")
        .and_then(|rest| rest.strip_suffix('`'));
    let alias = Overrides::ALIASES
        .iter()
        .find(|(_, key)| Some(*key) == twice);
    match alias {
        Some((alias, key)) => {
            format!("{message}: `{key}` and `{alias}` are one setting; keep one")
        }
        None => message.to_owned(),
    }
}

/// Every key of a file by its dotted path, with the spans of the key and of its value,
/// from a second, span-keeping parse: serde says what is wrong and where, this says
/// which key that is, and where a key the runtime later refuses was written.
struct Keys(Vec<Written>);

/// One key of the file: its dotted path, and the spans of its name and of its value.
struct Written {
    path: String,
    key: Range<usize>,
    value: Range<usize>,
}

impl Keys {
    fn of(text: &str) -> Keys {
        let mut keys = Vec::new();
        if let Ok(document) = DeTable::parse(text) {
            collect(document.get_ref(), "", &mut keys);
        }
        Keys(keys)
    }

    /// The deepest key whose name, else whose value, holds `span`.
    fn around(&self, span: &Range<usize>) -> Option<String> {
        let within = |outer: &Range<usize>| outer.start <= span.start && span.end <= outer.end;
        let deepest = |holds: &dyn Fn(&Written) -> bool| {
            (self.0.iter().filter(|k| holds(k)))
                .max_by_key(|k| k.path.len())
                .map(|k| k.path.clone())
        };
        deepest(&|k| within(&k.key)).or_else(|| deepest(&|k| within(&k.value)))
    }

    /// Where the value of `dotted` starts (a table's: its name).
    fn offset(&self, dotted: &str) -> Option<usize> {
        let written = self.0.iter().find(|k| k.path == dotted)?;
        // A `[table]` header's value starts before its name: point at the name.
        Some(written.key.start.max(written.value.start))
    }
}

fn collect(table: &DeTable<'_>, prefix: &str, keys: &mut Vec<Written>) {
    for (key, value) in table.iter() {
        let path = match prefix {
            "" => toml_key(key.get_ref()),
            _ => format!("{prefix}.{}", toml_key(key.get_ref())),
        };
        keys.push(Written {
            path: path.clone(),
            key: key.span(),
            value: value.span(),
        });
        if let DeValue::Table(inner) = value.get_ref() {
            collect(inner, &path, keys);
        }
    }
}

/// `name` as TOML writes a key: bare when it can be, quoted otherwise.
pub(crate) fn toml_key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if bare {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

#[cfg(test)]
mod tests;

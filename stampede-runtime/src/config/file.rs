//! The TOML file: its schema, checked by serde (`deny_unknown_fields`, typed values that
//! validate their own ranges), and error messages that name the file, the key and the line.
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
use super::{duration, range, At, Backend, ConfigError, Overrides};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// What a file sets, in the order the runtime builder applies it.
pub(crate) struct Settings {
    pub(crate) backend: Option<Backend>,
    pub(crate) admissions: Vec<(Arc<str>, usize, Option<Duration>)>,
    pub(crate) functions: Vec<(Arc<str>, Overrides, Option<At>)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    backend: Option<BackendTable>,
    #[serde(default)]
    admission: BTreeMap<String, AdmissionTable>,
    #[serde(default)]
    functions: BTreeMap<String, FunctionTable>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackendTable {
    kind: Kind,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdmissionTable {
    limit: Limit,
    queue_timeout: Option<Length>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionTable {
    fresh: Option<NonZero>,
    stale: Option<Length>,
    stale_if_error: Option<Length>,
    jitter: Option<Jitter>,
    xfetch_beta: Option<Beta>,
    timeout: Option<NonZero>,
    capacity: Option<Capacity>,
    enabled: Option<bool>,
    admission: Option<Spanned<String>>,
}

/// Reads `text`, the contents of the file at `path`.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Settings, ConfigError> {
    let document: Document = toml::from_str(text).map_err(|error| {
        let span = error.span();
        let key = span.as_ref().and_then(|span| key_at(text, span));
        let message = error.message().trim_end().to_owned();
        let at = At::file(path, text, span.map(|s| s.start), key);
        ConfigError::new(at, message)
    })?;
    let admissions = document
        .admission
        .into_iter()
        .map(|(name, table)| {
            (
                Arc::from(name),
                table.limit.0,
                table.queue_timeout.map(|t| t.0),
            )
        })
        .collect();
    let functions = document
        .functions
        .into_iter()
        .map(|(name, table)| {
            let reference = table.admission.as_ref().map(|admission| {
                let key = format!("functions.{}.admission", toml_key(&name));
                At::file(path, text, Some(admission.span().start), Some(key))
            });
            let overrides = Overrides {
                fresh: table.fresh.map(|d| d.0),
                stale: table.stale.map(|d| d.0),
                stale_if_error: table.stale_if_error.map(|d| d.0),
                jitter: table.jitter.map(|j| j.0),
                xfetch_beta: table.xfetch_beta.map(|b| b.0),
                timeout: table.timeout.map(|d| d.0),
                capacity: table.capacity.map(|c| c.0),
                enabled: table.enabled,
                admission: table.admission.map(|a| Arc::from(a.into_inner())),
            };
            (Arc::from(name), overrides, reference)
        })
        .collect();
    Ok(Settings {
        backend: document.backend.map(|b| b.kind.0),
        admissions,
        functions,
    })
}

/// The dotted key at `span` (the key itself, or the value it names), found in a second,
/// span-keeping parse: serde reports where, this says what.
fn key_at(text: &str, span: &Range<usize>) -> Option<String> {
    let document = DeTable::parse(text).ok()?;
    let path = path_to(document.get_ref(), span)?;
    Some(
        path.iter()
            .map(|k| toml_key(k))
            .collect::<Vec<_>>()
            .join("."),
    )
}

fn path_to(table: &DeTable<'_>, span: &Range<usize>) -> Option<Vec<String>> {
    let within = |outer: Range<usize>| outer.start <= span.start && span.end <= outer.end;
    let mut enclosing = None;
    for (key, value) in table.iter() {
        let name = || key.get_ref().to_string();
        if within(key.span()) {
            return Some(vec![name()]);
        }
        if let DeValue::Table(inner) = value.get_ref() {
            if let Some(mut path) = path_to(inner, span) {
                path.insert(0, name());
                return Some(path);
            }
        }
        if within(value.span()) {
            // A table that holds the span but none of whose keys does: a missing key.
            enclosing = Some(vec![name()]);
            if !matches!(value.get_ref(), DeValue::Table(_)) {
                return enclosing;
            }
        }
    }
    enclosing
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

/// `"memory"`; the shared-store kinds are named so their error can say when they arrive.
struct Kind(Backend);

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let kind = String::deserialize(deserializer)?;
        Backend::from_kind(&kind)
            .map(Kind)
            .map_err(de::Error::custom)
    }
}

/// Any duration, zero included (`stale = "0s"` turns the stale window off).
struct Length(Duration);

/// A duration above zero.
struct NonZero(Duration);

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string like \"500ms\", \"30s\" or \"1m30s\"")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        duration::parse(text).map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Length {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(DurationVisitor).map(Length)
    }
}

impl<'de> Deserialize<'de> for NonZero {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let duration = deserializer.deserialize_str(DurationVisitor)?;
        range::non_zero(duration)
            .map(NonZero)
            .map_err(de::Error::custom)
    }
}

/// Implements `Deserialize` for a newtype over `$raw`, checked by `range::$check`.
macro_rules! checked {
    ($name:ident, $raw:ty, $check:path) => {
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let raw = <$raw>::deserialize(deserializer)?;
                $check(raw).map($name).map_err(de::Error::custom)
            }
        }
    };
}

/// An admission limit, `1..=MAX_LIMIT`.
struct Limit(usize);
checked!(Limit, i64, range::limit);

/// In-memory entries, at least one.
struct Capacity(u64);
checked!(Capacity, i64, range::capacity);

/// The ± fraction of `fresh`, `0.0..=0.5`.
struct Jitter(f64);
checked!(Jitter, f64, range::jitter);

/// XFetch's β, finite and above zero.
struct Beta(f64);
checked!(Beta, f64, range::beta);

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Settings, ConfigError> {
        parse(Path::new("stampede.toml"), text)
    }

    #[test]
    fn the_documented_file_reads_into_settings() {
        let settings = parse_text(
            r#"
[backend]
kind = "memory"
[admission.db]
limit = 20
queue_timeout = "500ms"
[functions."user-profile"]
fresh = "30s"
stale = "1m"
stale_if_error = "1h"
jitter = 0.1
xfetch_beta = 1
timeout = "2s"
capacity = 500
enabled = false
admission = "db"
"#,
        )
        .unwrap();
        assert_eq!(settings.backend, Some(Backend::Memory));
        assert_eq!(
            settings.admissions,
            vec![(Arc::from("db"), 20, Some(Duration::from_millis(500)))]
        );
        let (name, overrides, reference) = &settings.functions[0];
        assert_eq!(&**name, "user-profile");
        assert_eq!(
            overrides,
            &Overrides::new()
                .fresh(Duration::from_secs(30))
                .stale(Duration::from_secs(60))
                .stale_if_error(Duration::from_secs(3_600))
                .jitter(0.1)
                .xfetch_beta(1.0)
                .timeout(Duration::from_secs(2))
                .capacity(500)
                .enabled(false)
                .admission("db")
        );
        let reference = reference.as_ref().unwrap();
        assert_eq!(reference.line, Some(16));
        assert_eq!(
            reference.key.as_deref(),
            Some("functions.user-profile.admission")
        );
    }

    #[test]
    fn an_empty_file_sets_nothing() {
        let settings = parse_text("").unwrap();
        assert!(settings.backend.is_none());
        assert!(settings.admissions.is_empty() && settings.functions.is_empty());
    }

    #[test]
    fn keys_are_written_as_toml_writes_them() {
        assert_eq!(toml_key("user-profile"), "user-profile");
        assert_eq!(toml_key("app::load_profile"), "\"app::load_profile\"");
    }
}

//! `STAMPEDE_*` environment overrides, applied over the file, so an unchanged binary
//! changes behaviour through its environment alone. Each variable is one key of the
//! file's tables, read by the same serde model (the value as the text of that key).
//!
//! | variable | sets |
//! |---|---|
//! | `STAMPEDE_CONFIG` | the TOML file to read first |
//! | `STAMPEDE_BACKEND` | `[backend] kind` |
//! | `STAMPEDE_REDIS_<KEY>` | `[backend] <key>` (`URL`, `NODES` comma-separated, `PREFIX`, …) |
//! | `STAMPEDE_ADMISSION_<NAME>_<KEY>` | `[admission.<name>] <key>` |
//! | `STAMPEDE_FUNCTION_<NAME>_<KEY>` | `[functions."<name>"] <key>` |
//!
//! `<NAME>` is the name upper-cased with every character other than a letter or digit
//! written `_` (`user-profile` is `USER_PROFILE`); `<KEY>` is the key upper-cased.
use super::RuntimeBuilder;
use super::{AdmissionLayer, At, BackendLayer, ConfigError, Layer, Located, Overrides};
use serde::de::value::{Error as ValueError, MapDeserializer, SeqDeserializer};
use serde::de::{self, Deserialize, Deserializer, IntoDeserializer, Visitor};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::Arc;

/// The variable that names the file.
pub(crate) const CONFIG: &str = "STAMPEDE_CONFIG";
const BACKEND: &str = "STAMPEDE_BACKEND";
const REDIS: &str = "STAMPEDE_REDIS_";
const ADMISSION: &str = "STAMPEDE_ADMISSION_";
pub(crate) const FUNCTION: &str = "STAMPEDE_FUNCTION_";

/// `name` as it appears inside a variable's name.
pub(crate) fn env_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Why two function names cannot both be configured.
pub(crate) fn collision(one: &str, other: &str) -> String {
    let both = env_name(one);
    format!("the functions `{one}` and `{other}` are both `{both}` in environment variables, so `{FUNCTION}{both}_*` could mean either; rename one")
}

/// Applies the variables among `vars` that are stampede's: the file first, then the rest
/// in name order, so the outcome does not depend on the environment's order.
pub(crate) fn apply(
    mut builder: RuntimeBuilder,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<RuntimeBuilder, ConfigError> {
    let mut ours = BTreeMap::new();
    for (key, value) in vars {
        // A name that is not Unicode cannot be one of ours.
        let Some(key) = key.to_str().filter(|k| k.starts_with("STAMPEDE_")) else {
            continue;
        };
        let value = value
            .into_string()
            .map_err(|_| ConfigError::new(At::env(key), "the value is not valid UTF-8"))?;
        ours.insert(key.to_owned(), value);
    }
    if let Some(path) = ours.remove(CONFIG) {
        builder = builder.read_file(path.as_ref(), Some(CONFIG))?;
    }
    for (variable, value) in &ours {
        apply_one(&mut builder, variable, value)
            .map_err(|why| ConfigError::new(At::env(variable), why))?;
    }
    Ok(builder)
}

fn apply_one(builder: &mut RuntimeBuilder, variable: &str, value: &str) -> Result<(), String> {
    let at = |_: &str| At::env(variable);
    if variable == BACKEND {
        let layer = read::<BackendLayer>("kind", value)?;
        builder.backend.merge(Located::new(layer, None, at));
    } else if let Some(key) = variable.strip_prefix(REDIS) {
        let key = key.to_ascii_lowercase();
        let Some(&key) = (BackendLayer::KEYS.iter()).find(|&&k| k == key && k != "kind") else {
            return Err(expected(REDIS, "", BackendLayer::KEYS));
        };
        let layer = read::<BackendLayer>(key, value)?;
        builder.backend.merge(Located::new(layer, None, at));
    } else if let Some(rest) = variable.strip_prefix(ADMISSION) {
        let (name, key) = split(rest, AdmissionLayer::KEYS)?;
        let layer = read::<AdmissionLayer>(key, value)?;
        let name = match builder.admissions.keys().find(|n| env_name(n) == name) {
            Some(defined) => defined.clone(),
            // Not in the file or the code: the variables define it, named in lower case.
            None => Arc::from(name.to_ascii_lowercase()),
        };
        let located = Located::new(layer, Some(At::env(variable)), at);
        builder.admissions.entry(name).or_default().merge(located);
    } else if let Some(rest) = variable.strip_prefix(FUNCTION) {
        let (name, key) = split(rest, Overrides::KEYS)?;
        let overrides = read::<Overrides>(key, value)?;
        let located = Located::new(overrides, Some(At::env(variable)), at);
        let entry = builder.env_functions.entry(name.to_owned()).or_default();
        entry.merge(located);
    } else if variable != CONFIG {
        // STAMPEDE_* is also where test harnesses put their switches: say so, don't fail.
        tracing::warn!(target: "stampede", variable, "not a stampede setting; ignored");
    }
    Ok(())
}

/// The table `T` with only `key` set, from the variable's text.
fn read<'a, T: Deserialize<'a>>(key: &'a str, value: &'a str) -> Result<T, String> {
    let table = MapDeserializer::<_, ValueError>::new(std::iter::once((key, Text(value))));
    T::deserialize(table).map_err(|error| error.to_string())
}

/// `<NAME>_<KEY>` into its name and one of `keys`.
fn split<'a>(rest: &'a str, keys: &[&'static str]) -> Result<(&'a str, &'static str), String> {
    keys.iter()
        .filter_map(|&key| {
            let name = rest
                .strip_suffix(&key.to_ascii_uppercase())?
                .strip_suffix('_')?;
            (!name.is_empty()).then_some((name, key))
        })
        // STALE_IF_ERROR before a name ending in _STALE_IF with key ERROR: the longest key wins.
        .max_by_key(|(_, key)| key.len())
        .ok_or_else(|| expected("", "a name and then ", keys))
}

fn expected(prefix: &str, what: &str, keys: &[&str]) -> String {
    let keys: Vec<_> = (keys.iter())
        .filter(|k| **k != "kind")
        .map(|k| format!("{prefix}_{}", k.to_ascii_uppercase()).replace("__", "_"))
        .collect();
    format!("expected {what}one of {}", keys.join(", "))
}

/// A variable's text, read as whatever the model's field asks for: a number, a boolean,
/// a duration string, a comma-separated list.
struct Text<'a>(&'a str);

impl<'de> IntoDeserializer<'de, ValueError> for Text<'de> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

macro_rules! parsed {
    ($($method:ident => $visit:ident: $ty:ty, $what:literal;)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
            match self.0.trim().parse::<$ty>() {
                Ok(value) => visitor.$visit(value),
                Err(_) => Err(de::Error::custom(format!(concat!("`{}` is not ", $what), self.0))),
            }
        }
    )*};
}

impl<'de> Deserializer<'de> for Text<'de> {
    type Error = ValueError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        visitor.visit_borrowed_str(self.0)
    }

    parsed! {
        deserialize_bool => visit_bool: bool, "`true` or `false`";
        deserialize_u32 => visit_u32: u32, "a whole number";
        deserialize_u64 => visit_u64: u64, "a whole number";
        deserialize_i64 => visit_i64: i64, "a whole number";
        deserialize_f64 => visit_f64: f64, "a number";
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        visitor.visit_some(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ValueError> {
        let items = self.0.split(',').map(str::trim).filter(|s| !s.is_empty());
        visitor.visit_seq(SeqDeserializer::new(items.map(Text)))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ValueError> {
        visitor.visit_enum(self.0.into_deserializer())
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i128 u8 u16 u128 f32 char str string bytes byte_buf unit unit_struct
        newtype_struct tuple tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Backend, Runtime};
    use std::time::Duration;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn names_become_variable_names() {
        assert_eq!(env_name("user-profile"), "USER_PROFILE");
        assert_eq!(env_name("app::load.v2"), "APP__LOAD_V2");
    }

    #[test]
    fn variables_set_admissions_and_function_overrides() {
        let builder = Runtime::builder().admission("db-main", 20, Duration::from_secs(1));
        let builder = apply(
            builder,
            vars(&[
                ("STAMPEDE_ADMISSION_DB_MAIN_LIMIT", "8"),
                ("STAMPEDE_ADMISSION_SEARCH_LIMIT", "3"),
                ("STAMPEDE_ADMISSION_SEARCH_QUEUE_TIMEOUT", "250ms"),
                ("STAMPEDE_FUNCTION_USER_PROFILE_FRESH", "30s"),
                ("STAMPEDE_FUNCTION_USER_PROFILE_STALE_IF_ERROR", "5m"),
                ("STAMPEDE_FUNCTION_USER_PROFILE_ENABLED", "false"),
                ("STAMPEDE_FUNCTION_USER_PROFILE_ADMISSION", "search"),
                ("STAMPEDE_REQUIRE_REDIS", "1"),
                ("PATH", "/bin"),
            ]),
        )
        .unwrap();
        let db = &builder.admissions[&Arc::from("db-main")].value;
        assert_eq!(
            (db.limit, db.queue_timeout),
            (Some(8), Some(Duration::from_secs(1)))
        );
        let search = &builder.admissions[&Arc::from("search")].value;
        assert_eq!(
            (search.limit, search.queue_timeout),
            (Some(3), Some(Duration::from_millis(250)))
        );
        assert_eq!(
            builder.env_functions["USER_PROFILE"].value,
            Overrides::new()
                .fresh(Duration::from_secs(30))
                .stale_if_error(Duration::from_secs(300))
                .enabled(false)
                .admission("search")
        );
        assert!(builder.build().is_ok());
    }

    #[test]
    fn bad_variables_are_errors_naming_the_variable() {
        let cases = [
            (
                "STAMPEDE_FUNCTION_X_FRESH",
                "soon",
                "`soon` is not a duration",
            ),
            (
                "STAMPEDE_FUNCTION_X_FRESH",
                "0s",
                "must be greater than zero",
            ),
            (
                "STAMPEDE_FUNCTION_X_JITTER",
                "0.9",
                "jitter must be a fraction of fresh from 0.0 to 0.5",
            ),
            (
                "STAMPEDE_FUNCTION_X_CAPACITY",
                "-1",
                "`-1` is not a whole number",
            ),
            (
                "STAMPEDE_FUNCTION_X_CAPACITY",
                "99999999999999999999",
                "is not a whole number",
            ),
            (
                "STAMPEDE_FUNCTION_X_CAPACITY",
                "2000000000",
                "capacity must be at most 1000000000",
            ),
            (
                "STAMPEDE_FUNCTION_X_LEASE",
                "0s",
                "lease must be greater than zero",
            ),
            (
                "STAMPEDE_REDIS_RESPONSE_TIMEOUT",
                "0ms",
                "response_timeout must be greater than zero",
            ),
            (
                "STAMPEDE_REDIS_TIMEOUT",
                "1s",
                "expected one of STAMPEDE_REDIS_URL, STAMPEDE_REDIS_NODES",
            ),
            (
                "STAMPEDE_FUNCTION_X_ENABLED",
                "no",
                "`no` is not `true` or `false`",
            ),
            (
                "STAMPEDE_FUNCTION_X_FRSH",
                "1s",
                "expected a name and then one of _FRESH, _STALE",
            ),
            (
                "STAMPEDE_ADMISSION_DB_LIMIT",
                "0",
                "limit must be at least 1",
            ),
            (
                "STAMPEDE_ADMISSION_DB_SIZE",
                "4",
                "one of _LIMIT, _QUEUE_TIMEOUT",
            ),
            (
                "STAMPEDE_BACKEND",
                "redis",
                "backend kind `redis` needs a `url`",
            ),
            (
                "STAMPEDE_REDIS_URL",
                "redis://127.0.0.1",
                "with the \"memory\" kind would be ignored",
            ),
        ];
        for (key, value, expected) in cases {
            let error = apply(Runtime::builder(), vars(&[(key, value)]))
                .and_then(RuntimeBuilder::build)
                .unwrap_err();
            let message = error.to_string();
            assert_eq!(error.key(), Some(key));
            assert!(
                message.starts_with(&format!("environment variable `{key}`: ")),
                "{message}"
            );
            assert!(message.contains(expected), "{key}={value}: {message}");
        }
    }

    #[test]
    fn every_function_key_has_a_variable_lease_and_coalesce_included() {
        let builder = apply(
            Runtime::builder(),
            vars(&[
                ("STAMPEDE_FUNCTION_F_LEASE", "5s"),
                ("STAMPEDE_FUNCTION_F_COALESCE", "false"),
                ("STAMPEDE_FUNCTION_F_FAIL_SAFE_THROTTLE", "1m 30s"),
                ("STAMPEDE_FUNCTION_F_XFETCH_BETA", "2"),
            ]),
        )
        .unwrap();
        assert_eq!(
            builder.env_functions["F"].value,
            Overrides::new()
                .lease(Duration::from_secs(5))
                .coalesce(false)
                .fail_safe_throttle(Duration::from_secs(90))
                .xfetch_beta(2.0)
        );
        for key in Overrides::KEYS {
            let variable = format!("STAMPEDE_FUNCTION_F_{}", key.to_ascii_uppercase());
            let error = apply(Runtime::builder(), vars(&[(&variable, "?")]))
                .and_then(RuntimeBuilder::build)
                .unwrap_err();
            assert_eq!(error.key(), Some(variable.as_str()), "{key} is read");
        }
    }

    #[test]
    fn redis_variables_fill_the_backend_table() {
        let builder = apply(
            Runtime::builder(),
            vars(&[
                (
                    "STAMPEDE_REDIS_NODES",
                    "redis://10.0.0.1:6379, redis://10.0.0.2:6379",
                ),
                ("STAMPEDE_REDIS_PREFIX", "shop"),
                ("STAMPEDE_REDIS_BREAKER_COOLDOWN", "2s"),
            ]),
        )
        .unwrap();
        let settings = builder.backend.value.resolve().unwrap();
        assert_eq!(
            settings.nodes,
            ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"]
        );
        assert_eq!(settings.prefix, "shop");
        assert_eq!(settings.breaker_cooldown, Duration::from_secs(2));
        assert_eq!(settings.max_value_bytes, 8 * 1024 * 1024, "the default");
        // Nodes without a shared kind would be ignored: refused, under the variable.
        let error = builder.clone().build().unwrap_err();
        assert_eq!(error.key(), Some("STAMPEDE_REDIS_NODES"));
        assert!(error.message().contains("\"memory\" kind"), "{error}");
        let settings = apply(builder, vars(&[("STAMPEDE_BACKEND", "tiered")]))
            .unwrap()
            .backend
            .value
            .resolve()
            .unwrap();
        assert_eq!(
            settings.available(),
            Ok(Backend::tiered_cluster([
                "redis://10.0.0.1:6379",
                "redis://10.0.0.2:6379"
            ]))
        );
    }

    #[test]
    fn cluster_nodes_must_be_urls_and_exclude_a_url() {
        let error = apply(
            Runtime::builder(),
            vars(&[
                ("STAMPEDE_BACKEND", "redis"),
                ("STAMPEDE_REDIS_NODES", "10.0.0.1:6379"),
            ]),
        )
        .and_then(RuntimeBuilder::build)
        .unwrap_err();
        assert_eq!(error.key(), Some("STAMPEDE_REDIS_NODES"));
        assert!(error.message().contains("redis://"), "{error}");
        let error = apply(
            Runtime::builder(),
            vars(&[
                ("STAMPEDE_BACKEND", "redis"),
                ("STAMPEDE_REDIS_URL", "redis://10.0.0.9:6379"),
                ("STAMPEDE_REDIS_NODES", "redis://10.0.0.1:6379"),
            ]),
        )
        .and_then(RuntimeBuilder::build)
        .unwrap_err();
        assert!(error.message().contains("not both"), "{error}");
    }
}

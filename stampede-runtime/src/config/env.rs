//! `STAMPEDE_*` environment overrides, applied over the file, so an unchanged binary
//! changes behaviour through its environment alone.
//!
//! | variable | sets |
//! |---|---|
//! | `STAMPEDE_CONFIG` | the TOML file to read first |
//! | `STAMPEDE_BACKEND` | `[backend] kind` |
//! | `STAMPEDE_REDIS_URL` | refused until the shared-store backend arrives |
//! | `STAMPEDE_ADMISSION_<NAME>_LIMIT`, `_QUEUE_TIMEOUT` | `[admission.<name>]` |
//! | `STAMPEDE_FUNCTION_<NAME>_<KEY>` | `[functions."<name>"] <key>` |
//!
//! `<NAME>` is the name upper-cased with every character other than a letter or digit
//! written `_` (`user-profile` is `USER_PROFILE`); `<KEY>` is a function key upper-cased.
use super::{duration, range, At, Backend, ConfigError, Overrides, RuntimeBuilder};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::Arc;

/// The variable that names the file.
pub(crate) const CONFIG: &str = "STAMPEDE_CONFIG";
const ADMISSION: &str = "STAMPEDE_ADMISSION_";
const FUNCTION: &str = "STAMPEDE_FUNCTION_";
const ADMISSION_KEYS: [&str; 2] = ["LIMIT", "QUEUE_TIMEOUT"];
const FUNCTION_KEYS: [&str; 9] = [
    "FRESH",
    "STALE",
    "STALE_IF_ERROR",
    "JITTER",
    "XFETCH_BETA",
    "TIMEOUT",
    "CAPACITY",
    "ENABLED",
    "ADMISSION",
];

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
    for (key, value) in ours {
        builder = apply_one(builder, &key, &value)?;
    }
    Ok(builder)
}

fn apply_one(
    mut builder: RuntimeBuilder,
    key: &str,
    value: &str,
) -> Result<RuntimeBuilder, ConfigError> {
    let fail = |message: String| ConfigError::new(At::env(key), message);
    if key == "STAMPEDE_BACKEND" {
        builder.backend = Backend::from_kind(value).map_err(fail)?;
    } else if key == "STAMPEDE_REDIS_URL" {
        return Err(fail(Backend::from_kind("redis").unwrap_err()));
    } else if let Some(rest) = key.strip_prefix(ADMISSION) {
        let (name, setting) = split(rest, &ADMISSION_KEYS).map_err(fail)?;
        let name = match builder.admissions.keys().find(|n| env_name(n) == name) {
            Some(defined) => defined.clone(),
            // Not in the file or the code: the variables define it, named in lower case.
            None => Arc::from(name.to_ascii_lowercase()),
        };
        let spec = builder
            .admissions
            .entry(name)
            .or_insert_with(|| super::AdmissionSpec::new(At::env(key)));
        match setting {
            "LIMIT" => spec.limit = Some(number(value).and_then(range::limit).map_err(fail)?),
            _ => spec.queue_timeout = Some(duration::parse(value).map_err(fail)?),
        }
    } else if let Some(rest) = key.strip_prefix(FUNCTION) {
        let (name, setting) = split(rest, &FUNCTION_KEYS).map_err(fail)?;
        let mut overrides = Overrides::new();
        match setting {
            "FRESH" => {
                let fresh = duration::parse(value).and_then(range::non_zero);
                overrides.fresh = Some(fresh.map_err(fail)?);
            }
            "STALE" => overrides.stale = Some(duration::parse(value).map_err(fail)?),
            "STALE_IF_ERROR" => {
                overrides.stale_if_error = Some(duration::parse(value).map_err(fail)?)
            }
            "JITTER" => {
                overrides.jitter = Some(float(value).and_then(range::jitter).map_err(fail)?)
            }
            "XFETCH_BETA" => {
                overrides.xfetch_beta = Some(float(value).and_then(range::beta).map_err(fail)?)
            }
            "TIMEOUT" => {
                let timeout = duration::parse(value).and_then(range::non_zero);
                overrides.timeout = Some(timeout.map_err(fail)?);
            }
            "CAPACITY" => {
                overrides.capacity = Some(number(value).and_then(range::capacity).map_err(fail)?)
            }
            "ENABLED" => overrides.enabled = Some(boolean(value).map_err(fail)?),
            _ => {
                if value.is_empty() {
                    return Err(fail("the admission name must not be empty".to_owned()));
                }
                overrides.admission = Some(Arc::from(value));
            }
        }
        let entry = builder.env_functions.entry(name.to_owned()).or_default();
        if overrides.admission.is_some() {
            entry.admission_at = Some(At::env(key));
        }
        entry.overrides.merge(&overrides);
    } else if key != CONFIG {
        // STAMPEDE_* is also where test harnesses put their switches: say so, don't fail.
        tracing::warn!(target: "stampede", variable = key, "not a stampede setting; ignored");
    }
    Ok(builder)
}

/// `<NAME>_<KEY>` into its name and one of `keys`.
fn split<'a>(rest: &'a str, keys: &[&'static str]) -> Result<(&'a str, &'static str), String> {
    keys.iter()
        .filter_map(|&key| {
            let name = rest.strip_suffix(key)?.strip_suffix('_')?;
            (!name.is_empty()).then_some((name, key))
        })
        // STALE_IF_ERROR before a name ending in _STALE_IF with key ERROR: the longest key wins.
        .max_by_key(|(_, key)| key.len())
        .ok_or_else(|| {
            format!(
                "expected a name and then one of {}",
                keys.iter()
                    .map(|k| format!("_{k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

fn number(value: &str) -> Result<i64, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("`{value}` is not a whole number"))
}

fn float(value: &str) -> Result<f64, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("`{value}` is not a number"))
}

fn boolean(value: &str) -> Result<bool, String> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("`{value}` is not `true` or `false`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Runtime;
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
        let db = &builder.admissions[&Arc::from("db-main")];
        assert_eq!(
            (db.limit, db.queue_timeout),
            (Some(8), Some(Duration::from_secs(1)))
        );
        let search = &builder.admissions[&Arc::from("search")];
        assert_eq!(
            (search.limit, search.queue_timeout),
            (Some(3), Some(Duration::from_millis(250)))
        );
        assert_eq!(
            builder.env_functions["USER_PROFILE"].overrides,
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
            ("STAMPEDE_FUNCTION_X_JITTER", "0.9", "0.9 is out of range"),
            ("STAMPEDE_FUNCTION_X_CAPACITY", "-1", "-1 is out of range"),
            (
                "STAMPEDE_FUNCTION_X_ENABLED",
                "no",
                "`no` is not `true` or `false`",
            ),
            (
                "STAMPEDE_FUNCTION_X_FRSH",
                "1s",
                "expected a name and then one of _FRESH",
            ),
            ("STAMPEDE_ADMISSION_DB_LIMIT", "0", "0 is out of range"),
            (
                "STAMPEDE_ADMISSION_DB_SIZE",
                "4",
                "one of _LIMIT, _QUEUE_TIMEOUT",
            ),
            (
                "STAMPEDE_BACKEND",
                "redis",
                "arrives with the shared-store backend",
            ),
            (
                "STAMPEDE_REDIS_URL",
                "redis://127.0.0.1",
                "arrives with the shared-store backend",
            ),
        ];
        for (key, value, expected) in cases {
            let error = apply(Runtime::builder(), vars(&[(key, value)])).unwrap_err();
            let message = error.to_string();
            assert_eq!(error.key(), Some(key));
            assert!(
                message.starts_with(&format!("environment variable `{key}`: ")),
                "{message}"
            );
            assert!(message.contains(expected), "{key}={value}: {message}");
        }
    }
}

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
use super::{AdmissionLayer, At, BackendLayer, ConfigError, Layer, Layers, Located, Overrides};
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
pub(super) fn apply(
    layers: &mut Layers,
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<(), ConfigError> {
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
        layers.read_file(path.as_ref(), Some(CONFIG))?;
    }
    for (variable, value) in &ours {
        apply_one(layers, variable, value)
            .map_err(|why| ConfigError::new(At::env(variable), why))?;
    }
    Ok(())
}

fn apply_one(layers: &mut Layers, variable: &str, value: &str) -> Result<(), String> {
    let at = |_: &str| At::env(variable);
    if variable == BACKEND {
        let layer = read::<BackendLayer>("kind", value)?;
        layers.backend.merge(Located::new(layer, None, at));
    } else if let Some(key) = variable.strip_prefix(REDIS) {
        let key = key.to_ascii_lowercase();
        let Some(&key) = (BackendLayer::KEYS.iter()).find(|&&k| k == key && k != "kind") else {
            return Err(expected(REDIS, "", BackendLayer::KEYS));
        };
        let layer = read::<BackendLayer>(key, value)?;
        layers.backend.merge(Located::new(layer, None, at));
    } else if let Some(rest) = variable.strip_prefix(ADMISSION) {
        let (name, key) = split(rest, &spellings::<AdmissionLayer>())?;
        let layer = read::<AdmissionLayer>(key, value)?;
        let name = match layers.admissions.keys().find(|n| env_name(n) == name) {
            Some(defined) => defined.clone(),
            // Not in the file or the code: the variables define it, named in lower case.
            None => Arc::from(name.to_ascii_lowercase()),
        };
        let located = Located::new(layer, Some(At::env(variable)), at);
        layers.admissions.entry(name).or_default().merge(located);
    } else if let Some(rest) = variable.strip_prefix(FUNCTION) {
        let (name, key) = split(rest, &spellings::<Overrides>())?;
        let overrides = read::<Overrides>(key, value)?;
        let entry = layers.env_functions.entry(name.to_owned()).or_default();
        // Only a key's second spelling sets a setting another variable set: neither may
        // win by the order of their names.
        for key in overrides.set_keys() {
            if let Some(other) = entry.at.get(key).and_then(|at| at.key.as_deref()) {
                return Err(format!(
                    "`{other}` sets the same setting (`{key}`); keep one of the two"
                ));
            }
        }
        let located = Located::new(overrides, Some(At::env(variable)), at);
        entry.merge(located);
    } else if variable != CONFIG {
        // STAMPEDE_* is also where test harnesses put their switches: say so, don't fail.
        tracing::warn!(target: "stampede", variable, "not a stampede setting; ignored");
    }
    Ok(())
}

/// The `[backend]` table with only `key` set, from its text (as a variable gives it).
pub(super) fn backend_key(key: &str, value: &str) -> Result<BackendLayer, String> {
    let Some(&key) = (BackendLayer::KEYS.iter()).find(|&&k| k == key) else {
        let keys = BackendLayer::KEYS.join(", ");
        return Err(format!(
            "`{key}` is not a backend setting; expected one of {keys}"
        ));
    };
    read::<BackendLayer>(key, value)
}

/// The table `T` with only `key` set, from the variable's text.
fn read<'a, T: Deserialize<'a>>(key: &'a str, value: &'a str) -> Result<T, String> {
    let table = MapDeserializer::<_, ValueError>::new(std::iter::once((key, Text(value))));
    T::deserialize(table).map_err(|error| error.to_string())
}

/// Every key of `T` and every second spelling of one.
fn spellings<T: Layer>() -> Vec<&'static str> {
    let aliases = T::ALIASES.iter().map(|(alias, _)| *alias);
    T::KEYS.iter().copied().chain(aliases).collect()
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
mod tests;

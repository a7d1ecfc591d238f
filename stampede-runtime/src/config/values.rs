//! Values the file and the environment write as text or numbers: durations, read by the
//! grammar the attribute reads, counts, and XFetch.
use crate::xfetch::XFetch;
use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::time::Duration;

/// `#[serde(deserialize_with)]` for an optional duration written as a string.
pub(crate) fn duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    deserializer.deserialize_str(DurationVisitor).map(Some)
}

/// [`duration`] for a setting whose absence has a meaning of its own.
pub(crate) fn some_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<Duration>>, D::Error> {
    duration(deserializer).map(Some)
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string like \"500ms\", \"30s\" or \"1m 30s\"")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        stampede_settings::parse_duration(text).map_err(E::custom)
    }
}

/// `#[serde(deserialize_with)]` for an optional count (entries, permits, failures, bytes):
/// a negative number is refused in words rather than as a type mismatch.
pub(crate) fn count<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    let count = deserializer.deserialize_u64(CountVisitor)?;
    T::try_from(count)
        .map(Some)
        .map_err(|_| de::Error::custom(format!("{count} is too large")))
}

struct CountVisitor;

impl Visitor<'_> for CountVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number")
    }

    fn visit_u64<E: de::Error>(self, count: u64) -> Result<u64, E> {
        Ok(count)
    }

    fn visit_i64<E: de::Error>(self, count: i64) -> Result<u64, E> {
        u64::try_from(count).map_err(|_| {
            E::custom(format!(
                "{count} is below zero; write a whole number of at least 1"
            ))
        })
    }
}

/// `#[serde(deserialize_with)]` for XFetch: `true` (β = 1.0), `false` (off), or β itself,
/// a number (0: off), checked here so a refusal points at the value as written (the key
/// has two spellings, `xfetch` and `xfetch_beta`). The environment's text reads the same.
pub(crate) fn xfetch<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<XFetch>, D::Error> {
    deserializer.deserialize_any(XFetchVisitor).map(Some)
}

struct XFetchVisitor;

impl XFetchVisitor {
    fn beta<E: de::Error>(beta: f64) -> Result<XFetch, E> {
        let beta = stampede_settings::xfetch_beta("β", beta).map_err(E::custom)?;
        Ok(beta.map_or(XFetch::Off, XFetch::Beta))
    }
}

impl Visitor<'_> for XFetchVisitor {
    type Value = XFetch;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("`true`, `false` or β, a number (0 turns XFetch off)")
    }

    fn visit_bool<E: de::Error>(self, on: bool) -> Result<XFetch, E> {
        Ok(XFetch::from(on))
    }

    fn visit_f64<E: de::Error>(self, beta: f64) -> Result<XFetch, E> {
        Self::beta(beta)
    }

    fn visit_i64<E: de::Error>(self, beta: i64) -> Result<XFetch, E> {
        Self::beta(beta as f64)
    }

    fn visit_u64<E: de::Error>(self, beta: u64) -> Result<XFetch, E> {
        Self::beta(beta as f64)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<XFetch, E> {
        match text.trim() {
            "true" => Ok(XFetch::from(true)),
            "false" => Ok(XFetch::from(false)),
            number => match number.parse::<f64>() {
                Ok(beta) => Self::beta(beta),
                Err(_) => Err(E::invalid_value(de::Unexpected::Str(text), &self)),
            },
        }
    }
}

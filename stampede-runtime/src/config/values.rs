//! Values the file and the environment write as text or numbers: durations, read by the
//! grammar the attribute reads, and counts.
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

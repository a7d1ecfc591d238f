//! Durations in the file and the environment, read by the grammar the attribute reads.
use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::time::Duration;

/// `#[serde(deserialize_with)]` for an optional duration written as a string.
pub(crate) fn option<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    deserializer.deserialize_str(DurationVisitor).map(Some)
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

//! The grammar and ranges of stampede's settings, declared once: the `#[cached]`
//! attribute checks them at compile time, and the runtime's policy builder, its TOML file
//! and its environment variables check them at run time, with the same words.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod duration;
mod range;

/// The duration grammar's examples, checked against every entry point that reads it (the
/// attribute, the file, the environment) by each one's tests.
#[doc(hidden)]
pub mod examples {
    /// Text and the milliseconds it means.
    pub const DURATIONS: &[(&str, u64)] = &[
        ("500ms", 500),
        ("30s", 30_000),
        ("1m30s", 90_000),
        ("1h 1m", 3_660_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("1s250ms", 1_250),
        ("1_000ms", 1_000),
        (" 3s ", 3_000),
        ("0s", 0),
    ];
    /// Text that is not a duration, and the reason given.
    pub const NOT_DURATIONS: &[(&str, &str)] = &[
        ("", "it is empty"),
        ("30", "the unit is missing (as in \"30s\")"),
        ("1 minute", "`minute` is not a unit"),
        ("1 s", "`s` must follow its number without a space"),
        ("1m 30", "the unit is missing"),
        ("30x", "`x` is not a unit"),
        ("30sec", "`sec` is not a unit"),
        ("s", "a number must come before each unit"),
        ("_1s", "a number must come before each unit"),
        ("1.5s", "`.` is not a unit"),
        ("-1s", "a number must come before each unit"),
        ("99999999999999999999s", "it is too long"),
        ("99999999999999999d", "it is too long"),
    ];
}

pub use duration::parse_duration;
pub use range::{
    admission_limit, batch_window, capacity, horizon, hot_keys, jitter, max_batch, positive,
    within_horizon, xfetch_beta, HORIZON, HORIZON_TEXT, MAX_BATCH, MAX_BATCH_WINDOW, MAX_CAPACITY,
    MAX_HOT_KEYS, MAX_JITTER, MAX_LIMIT,
};

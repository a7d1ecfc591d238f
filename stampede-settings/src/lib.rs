//! The grammar and ranges of stampede's settings, declared once: the `#[cached]`
//! attribute checks them at compile time, and the runtime's policy builder, its TOML file
//! and its environment variables check them at run time, with the same words.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod duration;
mod range;

pub use duration::parse_duration;
pub use range::{
    admission_limit, capacity, horizon, jitter, positive, within_horizon, xfetch_beta, HORIZON,
    HORIZON_TEXT, MAX_CAPACITY, MAX_JITTER, MAX_LIMIT,
};

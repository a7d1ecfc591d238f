//! The engine behind stampede: a cache whose misses load through an origin once per key,
//! that serves stale values while one refresh runs, and refreshes hot keys early (XFetch).
//!
//! Users normally reach it through the `stampede` facade and its `#[cached]` attribute;
//! [`Cache`] is the same engine without the macro.
//!
//! | | [`Cache::load`] (detached) | [`Cache::load_inline`] (inline with takeover) |
//! |---|---|---|
//! | for origins that | own everything (`'static + Send`) | borrow (`&self`, `&PgPool`) |
//! | the leader's origin runs | in the leading caller's task while it waits; as a Tokio task of its own once it stops waiting | in the leading caller's task |
//! | a waiting caller times out or is dropped | the load goes on and fills the cache | the load goes on and fills the cache |
//! | the leading caller times out or is dropped | the load goes on and fills the cache | its origin call stops; one waiter takes over |
//! | the origin panics | every waiter gets `Error::OriginPanicked` | the panic reaches the leader's caller; one waiter takes over |
//! | stale-window and XFetch refresh | in the background; every caller gets the current value | in the caller that triggers it; every other caller gets the current value |
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod admission;
mod any_key;
mod bounds;
mod cache;
mod cache_if;
mod clock;
mod config;
mod deadline;
mod envelope;
mod error;
mod failure;
mod flight;
mod handle;
mod hearing;
mod hot_keys;
#[doc(hidden)]
pub mod macro_support;
mod memory;
mod negative;
mod per_call;
mod policy;
mod runtime;
mod shared;
#[cfg(feature = "simulation")]
#[doc(hidden)]
pub mod simulation;
mod stats;
mod tags;
mod task;
#[cfg(feature = "metrics")]
mod telemetry;
mod warmup;
mod xfetch;

pub use bounds::{CacheError, CacheKey, CacheValue, LocalValue, SourceVersion};
pub use cache::{Batcher, Cache, CacheBuilder};
pub use clock::Clock;
pub use config::{Backend, ConfigError, Overrides, DEFAULT_QUEUE_TIMEOUT};
pub use error::{Error, OriginError};
pub use handle::{ExpressionKey, Handle, KeyOf, LeaderMode};
pub use hot_keys::{HotKey, DEFAULT_HOT_KEYS};
pub use per_call::{
    acknowledged, bypass, bypass_blocking, priority, refresh, refresh_blocking, Acknowledged,
    PerCall, Prioritized,
};
pub use policy::{Consistency, Priority};
pub use policy::{Policy, PolicyBuilder, PolicyError};
pub use runtime::{invalidate_tag, Runtime, RuntimeBuilder};
pub use stats::{BackendStats, FleetAdmissionStats, Stats};
pub use warmup::{warmup, WarmupReport, WARMUP_CONCURRENCY};
pub use xfetch::XFetch;

//! stampede: make existing `async fn`s safe to cache under heavy load.
//!
//! A hot key that expires costs one origin call per process, not one per request: misses
//! of one key share one load ([`Cache::load`]), stale values are served while one refresh
//! runs, and XFetch refreshes hot keys before they expire. See the README for the
//! behaviour in full and the leader-mode table.
#![forbid(unsafe_code)]

pub use stampede_runtime::*;

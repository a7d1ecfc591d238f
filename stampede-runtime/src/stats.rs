//! Per-cache counters and their snapshot.
use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of one cache's counters since it was built.
///
/// ```
/// let stats = stampede_runtime::Stats::default();
/// assert_eq!(stats.origin_calls, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Calls answered with a fresh value.
    pub fresh_hits: u64,
    /// Calls answered with a stale value (stale window, fail-safe fallback, or a timed-out
    /// caller given the last value).
    pub stale_hits: u64,
    /// Calls that found nothing servable and waited for a load.
    pub misses: u64,
    /// Misses that joined a load another caller was already running.
    pub coalesced: u64,
    /// Times the origin was called.
    pub origin_calls: u64,
    /// Refreshes XFetch started before the value stopped being fresh.
    pub early_refreshes: u64,
    /// Origin calls that failed or panicked.
    pub refresh_errors: u64,
    /// Failed loads answered with the last value under `stale_if_error`.
    pub fallbacks: u64,
    /// Callers whose deadline passed.
    pub timeouts: u64,
    /// Loads running right now.
    pub in_flight: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) fresh_hits: Counter,
    pub(crate) stale_hits: Counter,
    pub(crate) misses: Counter,
    pub(crate) coalesced: Counter,
    pub(crate) origin_calls: Counter,
    pub(crate) early_refreshes: Counter,
    pub(crate) refresh_errors: Counter,
    pub(crate) fallbacks: Counter,
    pub(crate) timeouts: Counter,
}

impl Counters {
    pub(crate) fn snapshot(&self, in_flight: usize) -> Stats {
        Stats {
            fresh_hits: self.fresh_hits.get(),
            stale_hits: self.stale_hits.get(),
            misses: self.misses.get(),
            coalesced: self.coalesced.get(),
            origin_calls: self.origin_calls.get(),
            early_refreshes: self.early_refreshes.get(),
            refresh_errors: self.refresh_errors.get(),
            fallbacks: self.fallbacks.get(),
            timeouts: self.timeouts.get(),
            in_flight: in_flight as u64,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    pub(crate) fn bump(&self) {
        // Counts only; nothing is ordered by them.
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

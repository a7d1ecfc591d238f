//! A cached value with the deadlines that say how it may be served.
use crate::clock::Instant;
use crate::policy::Policy;
use std::time::Duration;

/// Where a value stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Served as is (XFetch may still start an early refresh).
    Fresh,
    /// Served at once while one refresh runs.
    Stale,
    /// Not served; only a failing origin may still fall back to it (see `keep_until`).
    Expired,
}

#[derive(Debug, Clone)]
pub(crate) struct Envelope<V> {
    pub(crate) value: V,
    /// When the origin produced the value; a fail-safe re-arm keeps it, so the age of a
    /// stale value served is measured from here.
    pub(crate) loaded_at: Instant,
    pub(crate) fresh_until: Instant,
    pub(crate) stale_until: Instant,
    /// The last moment the value may be served at all: `stale_until`, or later when
    /// `stale_if_error` lets it stand in for a failing origin. The memory store drops the
    /// entry here.
    pub(crate) keep_until: Instant,
    /// How long the recompute that produced the value took, in seconds (XFetch's δ).
    pub(crate) delta: f64,
    /// Write order within one cache; a re-armed fallback keeps its original generation.
    pub(crate) generation: u64,
    /// Served by the fail-safe after the origin failed, not by a successful load.
    pub(crate) rearmed: bool,
    /// The version of the source the value was read at, when the cache tracks one.
    pub(crate) source_version: Option<u64>,
}

impl<V> Envelope<V> {
    /// A freshly loaded value. `u` in [0, 1) draws the jitter: fresh × (1 ± jitter).
    pub(crate) fn fill(
        value: V,
        now: Instant,
        policy: &Policy,
        delta: f64,
        generation: u64,
        u: f64,
    ) -> Self {
        let spread = 1.0 + policy.jitter() * (2.0 * u - 1.0);
        let fresh = policy.fresh().mul_f64(spread);
        let fresh_until = now + fresh;
        let stale_until = fresh_until + policy.stale();
        let keep_until = match policy.stale_if_error() {
            Some(bound) => stale_until.max(fresh_until + bound),
            None => stale_until,
        };
        Envelope {
            value,
            loaded_at: now,
            fresh_until,
            stale_until,
            keep_until,
            delta,
            generation,
            rearmed: false,
            source_version: None,
        }
    }

    /// How long ago the origin produced the value.
    pub(crate) fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.loaded_at)
    }

    pub(crate) fn state(&self, now: Instant) -> State {
        if now < self.fresh_until {
            State::Fresh
        } else if now < self.stale_until {
            State::Stale
        } else {
            State::Expired
        }
    }

    /// The same value served for another `throttle` after the origin failed, so a failing
    /// origin is retried once per throttle instead of on every request. No jitter: the
    /// bound is `keep_until`, which never moves.
    pub(crate) fn rearm(&self, now: Instant, throttle: Duration) -> Self
    where
        V: Clone,
    {
        let fresh_until = (now + throttle).min(self.keep_until);
        Envelope {
            value: self.value.clone(),
            loaded_at: self.loaded_at,
            fresh_until,
            stale_until: self.stale_until.max(fresh_until),
            keep_until: self.keep_until,
            delta: self.delta,
            generation: self.generation,
            rearmed: true,
            source_version: self.source_version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::builder("t")
            .fresh(Duration::from_secs(10))
            .stale(Duration::from_secs(5))
            .stale_if_error(Duration::from_secs(60))
            .jitter(0.2)
            .build()
            .unwrap()
    }

    #[test]
    fn state_moves_from_fresh_to_stale_to_expired() {
        let now = Instant::from_nanos(1_000_000_000);
        let env = Envelope::fill("v", now, &policy(), 0.1, 1, 0.5);
        assert_eq!(env.state(now), State::Fresh);
        assert_eq!(env.state(now + Duration::from_millis(9_999)), State::Fresh);
        assert_eq!(env.state(now + Duration::from_secs(10)), State::Stale);
        assert_eq!(env.state(now + Duration::from_millis(14_999)), State::Stale);
        assert_eq!(env.state(now + Duration::from_secs(15)), State::Expired);
        assert_eq!(env.keep_until, now + Duration::from_secs(70));
    }

    #[test]
    fn jitter_spreads_fresh_by_the_fraction_both_ways() {
        let now = Instant::from_nanos(1_000_000_000);
        let low = Envelope::fill((), now, &policy(), 0.0, 1, 0.0);
        let high = Envelope::fill((), now, &policy(), 0.0, 1, 1.0);
        assert_eq!(low.fresh_until, now + Duration::from_secs(8));
        assert_eq!(high.fresh_until, now + Duration::from_secs(12));
        assert_eq!(high.stale_until, now + Duration::from_secs(17));
    }

    #[test]
    fn rearm_extends_by_the_throttle_without_passing_keep_until() {
        let now = Instant::from_nanos(1_000_000_000);
        let env = Envelope::fill("v", now, &policy(), 0.1, 7, 0.5);
        let later = now + Duration::from_secs(20);
        let again = env.rearm(later, Duration::from_secs(5));
        assert_eq!(again.state(later), State::Fresh);
        assert_eq!(again.fresh_until, later + Duration::from_secs(5));
        assert_eq!((again.generation, again.rearmed), (7, true));
        assert_eq!(
            again.age(later),
            Duration::from_secs(20),
            "aged from the load"
        );
        let near_end = now + Duration::from_secs(68);
        assert_eq!(
            env.rearm(near_end, Duration::from_secs(5)).fresh_until,
            env.keep_until
        );
    }
}

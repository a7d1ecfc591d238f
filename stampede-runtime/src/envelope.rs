//! A cached value with the deadlines that say how it may be served.
use crate::clock::Instant;
use crate::policy::Policy;
use crate::tags::TagStamp;
use std::sync::Arc;
use std::time::Duration;

/// A mark: served by the fail-safe (see [`Envelope::rearmed`]).
pub(crate) const REARMED: u8 = 1;
/// A mark: the value has tags (see [`Envelope::tags`]).
pub(crate) const TAGGED: u8 = 2;
/// A mark: a tiered copy of what the shared store holds, served only while the replica's
/// hearing lease holds (see `hearing.rs`).
pub(crate) const HEARD: u8 = 4;

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
    /// `stale_if_error` lets it stand in for a failing origin. Memory drops the
    /// entry here.
    pub(crate) keep_until: Instant,
    /// How long the recompute that produced the value took, in seconds (XFetch's δ).
    pub(crate) delta: f64,
    /// Write order within one cache; a re-armed fallback keeps its original generation.
    pub(crate) generation: u64,
    /// What sets the value apart from a plain one, which a fresh hit serves after one
    /// compare of this byte: [`REARMED`] (served by the fail-safe after the origin
    /// failed, not by a successful load), [`TAGGED`] (its tags are checked first),
    /// [`HEARD`] (a tiered copy: the hearing lease is checked first).
    pub(crate) marks: u8,
    /// The version of the source the value was read at, when the cache tracks one.
    pub(crate) source_version: Option<u64>,
    /// The versions of the entry's tags when it was stored (a cache with tags only).
    pub(crate) tags: Option<Arc<TagStamp>>,
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
            marks: 0,
            source_version: None,
            tags: None,
        }
    }

    /// Served by the fail-safe after the origin failed, not by a successful load.
    pub(crate) fn rearmed(&self) -> bool {
        self.marks & REARMED != 0
    }

    /// Neither re-armed nor tagged: a fresh hit serves it as is.
    #[inline(always)]
    pub(crate) fn plain(&self) -> bool {
        self.marks == 0
    }

    /// A copy that notices keep current: served only while the hearing lease holds.
    pub(crate) fn heard(&self) -> bool {
        self.marks & HEARD != 0
    }

    /// Carries the versions of its tags, checked before it is served.
    pub(crate) fn tag(&mut self, stamp: Arc<TagStamp>) {
        self.tags = Some(stamp);
        self.marks |= TAGGED;
    }

    /// Whether no tag of the value moved since it was stored (a value without tags: yes).
    pub(crate) fn tags_current(&self) -> bool {
        self.tags.as_ref().is_none_or(|stamp| stamp.current())
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
            marks: self.marks | REARMED,
            source_version: self.source_version,
            tags: self.tags.clone(),
        }
    }
}

#[cfg(test)]
mod tests;

//! What memory keeps of a value on a shared backend, and for how long: a copy that
//! notices reach, or one no invalidation may reach, served only for the degraded bound.
use super::Inner;
use crate::bounds::{CacheError, CacheKey, LocalValue};
use crate::clock::Instant;
use crate::envelope::{Envelope, HEARD};
use crate::memory::Memory;
use crate::policy::Consistency;
use crate::policy::Policy;
use crate::shared::tier::{Found, Tier};
use std::sync::Weak;

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// What memory keeps of a value on this cache's backend: everything on the memory
    /// backend; on a shared one, a tiered copy of what the store holds, a copy of a value
    /// the store cannot hold (too large), and a copy of a value loaded or written while
    /// the store could not be reached, served only for the degraded bound
    /// (`degraded_ttl`, by default the stale window): no invalidation may reach it.
    pub(super) fn memory_copy(
        &self,
        key: &K,
        found: Option<&Found<K, V>>,
        envelope: Envelope<V>,
        standing: Standing,
    ) -> Option<Envelope<V>> {
        let (Some(tier), Some(found)) = (self.tier(), found) else {
            return Some(envelope);
        };
        let standing = match standing {
            _ if found.read.is_none() => Standing::Unheard,
            _ if found.too_large => Standing::Own,
            standing => standing,
        };
        // A copy is only as good as the notices that would drop it: while the subscription
        // is down (at start-up, until it first subscribes, or after it dropped) an
        // invalidation elsewhere would go unheard, so the store's value is read again each
        // time, and one it cannot hold is kept only for the degraded bound.
        let since = found.watching.since();
        let hears = since != 0 && since == tier.hearing();
        let envelope = match standing {
            Standing::Stored if !tier.keeps_memory || !hears => return None,
            // Nothing a notice would reach: degraded, or nothing for an acknowledged cache.
            Standing::Own if !hears => self.unheard_copy(envelope)?,
            Standing::Unheard => self.unheard_copy(envelope)?,
            // Kept current by notices, so served only while they are known to arrive
            // (the hearing lease).
            Standing::Stored | Standing::Own => Envelope {
                marks: envelope.marks | HEARD,
                ..envelope
            },
        };
        let fence = found.read.as_ref().map_or(0, |read| read.fence);
        // Not heard (the subscription changed since the load began): bookkept as a copy
        // that relies on no notice, as a degraded one is, dropped when the listener hears
        // of the change.
        let _heard = tier.copied(&found.key, key, fence, envelope.generation, since);
        Some(envelope)
    }

    /// What memory keeps of a value no notice reaches (loaded or written while the store
    /// could not be read, or too large for it while notices were not heard; an insert whose
    /// invalidation failed): a degraded copy, or nothing for a cache whose writes are
    /// acknowledged (such a copy would outlive an acknowledged write elsewhere).
    pub(super) fn unheard_copy(&self, envelope: Envelope<V>) -> Option<Envelope<V>> {
        let Some(tier) = self.tier() else {
            return Some(envelope);
        };
        if self.policy.consistency() == Consistency::Acknowledged {
            return None;
        }
        Some(self.degraded(envelope, tier))
    }

    /// `envelope`, servable no longer than the degraded bound from now, as a fail-safe
    /// value (`stale_if_error`) neither: no invalidation reaches it, so a failing origin
    /// is no reason to serve it past the bound (it was served as the last good value, at
    /// times seconds after another replica's invalidation had returned).
    pub(super) fn degraded(&self, mut envelope: Envelope<V>, tier: &Tier<K, V>) -> Envelope<V> {
        let bound = tier.replica.degraded_ttl.unwrap_or(self.policy.stale());
        let until = self.clock.now() + bound;
        envelope.stale_until = envelope.stale_until.min(until);
        envelope.fresh_until = envelope.fresh_until.min(envelope.stale_until);
        envelope.keep_until = envelope.keep_until.min(until);
        envelope
    }

    /// The value the shared store held, when `stale_if_error` lets it stand in for a
    /// failing origin (the redis backend keeps no memory to fall back on).
    pub(super) fn shared_last_good(
        &self,
        found: Option<&mut Found<K, V>>,
        now: Instant,
    ) -> Option<Envelope<V>> {
        self.policy.stale_if_error()?;
        found?.envelope.take().filter(|last| now < last.keep_until)
    }
}

/// What memory may keep of a loaded value, by what the shared store holds of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// The store holds it (or it was read from there).
    Stored,
    /// The store cannot hold it (too large); notices still reach the copy.
    Own,
    /// The store could not be read or did not answer: an invalidation may not reach it.
    Unheard,
}

/// A cache's memory. On a shared backend, memory tells the cache's side of the store of
/// each copy it lets go of, so the notices' bookkeeping holds every copy memory does.
pub(super) fn new_memory<K: CacheKey, V: LocalValue, E: CacheError>(
    policy: &Policy,
    real_time: bool,
    shared: bool,
    cache: &Weak<Inner<K, V, E>>,
) -> Memory<K, V> {
    if !shared {
        return Memory::new(policy, real_time);
    }
    let cache = cache.clone();
    Memory::with_dropped(policy, real_time, move |key, generation| {
        if let Some(tier) = cache.upgrade().as_deref().and_then(Inner::connected_tier) {
            tier.dropped(key, generation);
        }
    })
}

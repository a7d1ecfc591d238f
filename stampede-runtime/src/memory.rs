//! The embedded store: moka holding typed envelopes, no serialization.
//!
//! moka's own expiry is one time-to-live per cache, the longest an envelope of this policy
//! can be served (`fresh × (1 + jitter)` plus the longer of the stale and stale-if-error
//! windows), so dead entries leave memory without a per-entry timer. Whether an entry may
//! be served is decided by its envelope's deadlines, never by moka; a per-entry expiry
//! (moka's `Expiry`) measured 25 ns more per hit (see the benchmark notes in
//! `docs/performance.md`).
//!
//! moka holds each envelope as `Arc<dyn Any>`, not as `Arc<Envelope<V>>`: moka is generic
//! over what it holds, and its code compiled once per value type was nearly half of
//! what each cached function with a value type of its own added to a build. Holding them
//! untyped, moka is compiled once per key type instead; a hit pays one type-id compare to
//! get its envelope back.
//!
//! Keys are hashed with foldhash instead of moka's default SipHash: about 130 fewer
//! instructions per lookup of a `u64` key. Its seeds come from the operating system's
//! random source (through std's `RandomState`) once per process and once per cache, so
//! which keys collide cannot be worked out from the outside.
use crate::envelope::Envelope;
use crate::policy::Policy;
use foldhash::fast::SeedableRandomState;
use foldhash::SharedSeed;
use std::any::Any;
#[cfg(not(feature = "simulation"))]
use std::collections::hash_map::RandomState;
#[cfg(not(feature = "simulation"))]
use std::hash::BuildHasher;
use std::hash::Hash;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// moka refuses a time-to-live past 1,000 years; a century is "forever" here.
const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Told of each entry memory lets go of: its key and generation.
type Dropped<K> = Box<dyn Fn(&K, u64) + Send + Sync>;

/// An envelope as moka holds it: an `Arc<Envelope<V>>` of the memory's own `V`, and
/// nothing else ever.
type Held = Arc<dyn Any + Send + Sync>;

pub(crate) struct Memory<K, V> {
    /// Behind an `Arc`: moka clones what it returns, and a hit needs the value and two
    /// deadlines, not a copy of every field of the envelope. Untyped (see the module's
    /// comment); [`typed`] gives each its type back.
    entries: moka::sync::Cache<K, Held, SeedableRandomState>,
    /// The value type every envelope in `entries` holds.
    value: std::marker::PhantomData<fn() -> V>,
    /// The replica's hearing lease, once a tiered cache connected to the shared store:
    /// what a heard copy is served under.
    lease: std::sync::OnceLock<Arc<crate::hearing::HearingLease>>,
}

impl<K, V> Memory<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// `real_time`: the cache's clock follows real time, as moka's expiry does. Under a
    /// clock tests pause, moka's expiry would drop entries the cache still deems fresh,
    /// so there only `capacity` bounds memory.
    pub(crate) fn new(policy: &Policy, real_time: bool) -> Self {
        Self::build(policy, real_time, None)
    }

    /// As [`new`](Self::new), telling `dropped` of each entry memory lets go of by itself
    /// or by an invalidation (its key and generation; not when a newer value replaces
    /// it), including one it declined to admit: what keeps a copy's bookkeeping no
    /// longer than the copy.
    pub(crate) fn with_dropped(
        policy: &Policy,
        real_time: bool,
        dropped: impl Fn(&K, u64) + Send + Sync + 'static,
    ) -> Self {
        Self::build(policy, real_time, Some(Box::new(dropped)))
    }

    fn build(policy: &Policy, real_time: bool, dropped: Option<Dropped<K>>) -> Self {
        let builder = moka::sync::Cache::builder().max_capacity(policy.capacity());
        let builder = match lifetime(policy, real_time) {
            Some(lifetime) => builder.time_to_live(lifetime),
            None => builder,
        };
        let builder = match dropped {
            Some(dropped) => builder.eviction_listener(move |key: Arc<K>, held: Held, cause| {
                if cause != moka::notification::RemovalCause::Replaced
                    && let Some(envelope) = held.downcast_ref::<Envelope<V>>()
                {
                    dropped(&key, envelope.generation);
                }
            }),
            None => builder,
        };
        Memory {
            entries: builder.build_with_hasher(seeded_hasher()),
            value: std::marker::PhantomData,
            lease: std::sync::OnceLock::new(),
        }
    }

    /// Heard copies are served under `lease` from now on (a tiered cache connected).
    pub(crate) fn hear_under(&self, lease: Arc<crate::hearing::HearingLease>) {
        let _ = self.lease.set(lease);
    }

    /// The envelope held for `key`, shared with the store: what the hit path reads.
    #[inline(always)]
    pub(crate) fn get_arc(&self, key: &K) -> Option<Arc<Envelope<V>>> {
        self.get_unchecked(key)
            .filter(|held| self.unless_retired(key, held))
    }

    /// The envelope held for `key`, its tags not checked: for the hit path, which serves
    /// only a plain one ([`Envelope::plain`]) and checks the others.
    #[inline(always)]
    pub(crate) fn get_unchecked(&self, key: &K) -> Option<Arc<Envelope<V>>> {
        self.entries.get(key).and_then(typed)
    }

    /// Whether `held` may be served as far as its tags and the hearing lease go; one whose
    /// tag moved is dropped. A heard copy past the lease stays (a renewal makes it
    /// servable again, every notice before it applied) but is not served now.
    pub(crate) fn unless_retired(&self, key: &K, held: &Envelope<V>) -> bool {
        if held.heard() && !self.lease.get().is_some_and(|lease| lease.holds()) {
            return false;
        }
        match &held.tags {
            Some(stamp) if !stamp.current() => {
                self.retire(key);
                false
            }
            _ => true,
        }
    }

    /// An entry one of whose tags moved: never served again.
    #[cold]
    fn retire(&self, key: &K) {
        self.entries.invalidate(key);
    }

    /// The envelope held for `key`, a copy of its own.
    pub(crate) fn get(&self, key: &K) -> Option<Envelope<V>> {
        self.get_arc(key).map(|shared| Envelope::clone(&shared))
    }

    pub(crate) fn insert(&self, key: K, envelope: Envelope<V>) {
        self.entries.insert(key, Arc::new(envelope) as Held);
    }

    /// How many values memory holds, after moka's pending maintenance (so entries that
    /// expired or were evicted are not counted). Off the hit path: stats only.
    pub(crate) fn entry_count(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.entry_count()
    }

    pub(crate) fn invalidate(&self, key: &K) {
        self.entries.invalidate(key);
    }

    /// Replaces `key`'s envelope with `replace(current)` if it is still the one of
    /// `generation`; `true` if it did. Atomic with inserts of the same key.
    pub(crate) fn replace_if(
        &self,
        key: &K,
        generation: u64,
        replace: impl FnOnce(&Envelope<V>) -> Envelope<V>,
    ) -> bool
    where
        K: Clone,
    {
        let mut replace = Some(replace);
        let mut replacement = |held: &Held| {
            let held = held.downcast_ref::<Envelope<V>>()?;
            if held.generation != generation {
                return None;
            }
            Some(Arc::new(replace.take()?(held)) as Held)
        };
        replace_with(&self.entries, key.clone(), &mut replacement)
    }

    pub(crate) fn invalidate_all(&self) {
        self.entries.invalidate_all();
    }
}

/// Puts `replacement(held)` in place of `key`'s entry, if there is one and it gives one;
/// `true` if it did. Apart from [`Memory::replace_if`] and given a `dyn` closure, so moka's
/// compute is compiled once per key type, not once per value type as well.
fn replace_with<K>(
    entries: &moka::sync::Cache<K, Held, SeedableRandomState>,
    key: K,
    replacement: &mut dyn FnMut(&Held) -> Option<Held>,
) -> bool
where
    K: Hash + Eq + Send + Sync + 'static,
{
    use moka::ops::compute::Op;
    let mut replaced = false;
    entries.entry(key).and_compute_with(|held| {
        match held.and_then(|held| replacement(held.value())) {
            Some(new) => {
                replaced = true;
                Op::Put(new)
            }
            None => Op::Nop,
        }
    });
    replaced
}

/// The envelope `held` is, typed again. Memory holds `Envelope<V>`s of its own `V` only,
/// so this never answers `None` but for a mistake, which would read as a miss.
#[inline(always)]
fn typed<V: Send + Sync + 'static>(held: Held) -> Option<Arc<Envelope<V>>> {
    held.downcast::<Envelope<V>>().ok()
}

/// The longest an entry of `policy` stays in memory: the longest it can be served. `None`
/// under a clock tests pause, where moka's expiry would drop entries the cache still
/// deems fresh (so there only the capacity bounds memory).
pub(crate) fn lifetime(policy: &Policy, real_time: bool) -> Option<Duration> {
    let longest_fresh = policy.fresh().mul_f64(1.0 + policy.jitter());
    let after_fresh = policy
        .stale()
        .max(policy.stale_if_error().unwrap_or_default());
    real_time.then(|| longest_fresh.saturating_add(after_fresh).min(CENTURY))
}

/// A hasher for one cache (or one map of its own): a seed of its own on top of the
/// process's shared seed.
pub(crate) fn seeded_hasher() -> SeedableRandomState {
    static SHARED: OnceLock<SharedSeed> = OnceLock::new();
    // A simulation's runs share one process: the first must not lay out the others.
    #[cfg(feature = "simulation")]
    let shared = SHARED.get_or_init(|| SharedSeed::from_u64(0x5eed));
    #[cfg(not(feature = "simulation"))]
    let shared = SHARED.get_or_init(|| SharedSeed::from_u64(random_u64()));
    SeedableRandomState::with_seed(random_u64(), shared)
}

/// 64 unpredictable bits: std's `RandomState` keys SipHash from the operating system's
/// random source, and no one outside the process sees the keys or this output.
#[cfg(not(feature = "simulation"))]
fn random_u64() -> u64 {
    RandomState::new().hash_one(0x5eed_u64)
}

/// In a simulation, the thread's seeded generator: the same seed lays memory out the same.
#[cfg(feature = "simulation")]
fn random_u64() -> u64 {
    fastrand::u64(..)
}

#[cfg(test)]
mod tests;

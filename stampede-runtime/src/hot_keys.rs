//! The keys that cost the origin most: a bounded top-K per cache, so one key driving most
//! of the backing store's load shows up even when the cache-wide miss rate looks fine.
//!
//! A space-saving sketch (Metwally, Agrawal, El Abbadi, 2005) of the misses and origin
//! calls: `k` entries; an event for a key not among them replaces the entry with the
//! fewest events, which it inherits as its count (and as its `error`). Any key with more
//! than `1/k` of the events is guaranteed to be held, and a key held since its first event
//! has exact counts. The per-key fields (`misses`, `origin_calls`, `coalesced`) count from
//! the moment the key entered, so a key that came in by replacing another may have had
//! earlier events the sketch did not see.
//!
//! Only the miss path records here (under one lock, next to the flight registry's), except
//! for fresh hits, which are sampled: one in [`HIT_SAMPLE`] bumps of the cache's hit
//! counter (whose previous value the bump returns anyway) records its key, and a key's
//! `hits` is that sample times [`HIT_SAMPLE`]: an estimate.
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// One in this many fresh hits of a cache is attributed to its key (a power of two).
pub(crate) const HIT_SAMPLE: u64 = 64;

/// How many keys a cache keeps in its top-K unless the policy says otherwise.
pub const DEFAULT_HOT_KEYS: usize = 32;

/// One of a cache's hottest keys ([`Cache::hot_keys`](crate::Cache::hot_keys)).
///
/// `Serialize` when the key is, for exporting.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct HotKey<K> {
    /// The key.
    pub key: K,
    /// Fresh hits, estimated: one in 64 hits of the cache is attributed to its key, and
    /// this is that sample times 64 (0 for a key hit fewer than ~64 times).
    pub hits: u64,
    /// Calls that found nothing servable and waited for a load (coalesced ones included).
    pub misses: u64,
    /// Origin calls made for this key.
    pub origin_calls: u64,
    /// Misses that joined a load another caller was already running.
    pub coalesced: u64,
    /// How long the last origin call for this key took (its recompute time).
    pub last_recompute: Option<Duration>,
    /// How many of its misses and origin calls it may have had before it entered the
    /// top-K (the count of the key it replaced): 0 for a key held since its first.
    pub error: u64,
}

/// A cache's top-K; `k = 0` keeps nothing and takes no lock.
pub(crate) struct HotKeys<K> {
    k: usize,
    sketch: Mutex<Sketch<K>>,
}

struct Sketch<K> {
    entries: Vec<HotKey<K>>,
    at: HashMap<K, usize>,
}

impl<K> HotKey<K> {
    /// What the sketch ranks by: misses and origin calls, inherited ones included.
    fn count(&self) -> u64 {
        self.error + self.misses + self.origin_calls
    }
}

#[derive(Clone, Copy)]
enum Event {
    Miss,
    Coalesced,
    OriginCall(Duration),
    SampledHit,
}

impl<K: Hash + Eq + Clone> HotKeys<K> {
    pub(crate) fn new(k: usize) -> Self {
        HotKeys {
            k,
            sketch: Mutex::new(Sketch {
                entries: Vec::with_capacity(k),
                at: HashMap::with_capacity(k),
            }),
        }
    }

    pub(crate) fn miss(&self, key: &K) {
        self.record(key, Event::Miss);
    }

    pub(crate) fn coalesced(&self, key: &K) {
        self.record(key, Event::Coalesced);
    }

    pub(crate) fn origin_call(&self, key: &K, took: Duration) {
        self.record(key, Event::OriginCall(took));
    }

    /// One fresh hit in [`HIT_SAMPLE`], drawn by the hit counter; off the hit's path.
    #[cold]
    #[inline(never)]
    pub(crate) fn sampled_hit(&self, key: &K) {
        self.record(key, Event::SampledHit);
    }

    fn record(&self, key: &K, event: Event) {
        if self.k == 0 {
            return;
        }
        let mut sketch = self.sketch.lock().unwrap_or_else(PoisonError::into_inner);
        let index = match sketch.at.get(key) {
            Some(&index) => index,
            // Hits and joins rank nothing: only a key that costs the origin enters.
            None if matches!(event, Event::SampledHit | Event::Coalesced) => return,
            None => sketch.admit(key, self.k),
        };
        let hot = &mut sketch.entries[index];
        match event {
            Event::Miss => hot.misses += 1,
            Event::OriginCall(took) => {
                hot.origin_calls += 1;
                hot.last_recompute = Some(took);
            }
            Event::Coalesced => hot.coalesced += 1,
            Event::SampledHit => hot.hits += HIT_SAMPLE,
        }
    }

    /// Most origin calls first, then most misses.
    pub(crate) fn top(&self) -> Vec<HotKey<K>> {
        let sketch = self.sketch.lock().unwrap_or_else(PoisonError::into_inner);
        let mut top = sketch.entries.clone();
        drop(sketch);
        top.sort_by(|a, b| {
            (b.origin_calls, b.misses, b.hits).cmp(&(a.origin_calls, a.misses, a.hits))
        });
        top
    }
}

impl<K: Hash + Eq + Clone> Sketch<K> {
    /// A slot for `key`: a free one, or the one with the fewest events, whose count the
    /// newcomer inherits.
    fn admit(&mut self, key: &K, k: usize) -> usize {
        let fresh = |inherited: u64| HotKey {
            key: key.clone(),
            hits: 0,
            misses: 0,
            origin_calls: 0,
            coalesced: 0,
            last_recompute: None,
            error: inherited,
        };
        if self.entries.len() < k {
            self.entries.push(fresh(0));
            self.at.insert(key.clone(), self.entries.len() - 1);
            return self.entries.len() - 1;
        }
        // k is small (32 by default): a scan costs less than keeping a heap in order.
        let (index, least) = (self.entries.iter().enumerate())
            .map(|(index, hot)| (index, hot.count()))
            .min_by_key(|&(_, count)| count)
            .expect("k > 0 entries");
        let replaced = std::mem::replace(&mut self.entries[index], fresh(least));
        self.at.remove(&replaced.key);
        self.at.insert(key.clone(), index);
        index
    }
}

#[cfg(test)]
mod tests;

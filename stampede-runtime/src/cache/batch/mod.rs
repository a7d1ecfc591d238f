//! Batch loads: many keys in one call, one origin call for the keys nobody has.
//!
//! Each key of a batch is an ordinary load of its own (its lookup, its flight, its lease
//! on a shared store, its fences, its deadline, its stale and fail-safe windows), whose
//! origin, instead of loading the key, hands it to the batch's gather (`gather.rs`) and waits. The
//! gather asks the batch origin once for every key handed to it:
//!
//! ```text
//! each key:  lookup -> fresh: answered, never asked for
//!                   -> a load: join the key's flight (another batch's or a single-key
//!                      call's: its answer), the shared store (a value, or another
//!                      replica's lease: wait for it), else the key's origin -> gather
//! gather:    every key of the call answered, handed over, or parked (waiting on a
//!            load elsewhere: a flight, another replica's lease, an admission permit)
//!            -> one origin call for the keys handed over (chunks of `max_batch`)
//! late keys: handed over after that (a refresh of a stale key, a parked load that
//!            loads itself after all, a single-key call through a `Batcher`) wait out
//!            `batch_window` from the first of them, then go together
//! running:   while an origin call of the gather runs, keys due wait `batch_window` for
//!            more and go together (bounded: an origin that waits for more keys of its
//!            own batch never waits for itself), unless `max_batch` of them wait
//! ```
//!
//! Parking is heard through `park::parked`, which the load's waiting steps call while the
//! batch polls that key's load (`Tracked`).
//!
//! A key the origin's map leaves out is *not found*: its load answers `None`, stored like
//! any value (`cache_if(Option::is_some)` keeps it out), so a hot missing id costs one
//! origin call per `fresh`. An origin error fails only the keys of its chunk, and each of
//! those loads treats it as its own failure (its stale value under `stale_if_error`).
//!
//! - `mod.rs` (here): the loads a caller asks for, and the batchers calls share.
//! - `gather.rs`: the pool of keys handed over, and the origin calls that take them.
//! - `park.rs`: how a key's load tells its gather it waits elsewhere, or ended.
mod gather;
mod park;

pub(super) use park::parked;

use super::leader::{boxed, Detached};
use super::{Cache, Lookup, Unanswered};
use crate::bounds::{CacheError, CacheKey, LocalValue};
use futures_util::stream::{FuturesUnordered, StreamExt};
use gather::{Call, Gather, Origin, Ticket};
use park::{Park, Tracked};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, Option<V>, E> {
    /// Returns the value of every key of `keys` that has one, loading those nobody has in
    /// one call of `origin`, which returns the values it found by key.
    ///
    /// Each key is an entry of its own, loaded as [`Cache::load`] would: fresh keys are
    /// answered from the cache; a key already loading (in another batch, or a single-key
    /// call of this cache; on a shared store, under another replica's lease) is joined;
    /// only the rest go to `origin`, together, in calls of at most
    /// [`Policy::max_batch`](crate::Policy::max_batch) keys. A key `origin` leaves out of
    /// its map is not found: absent from the answer, and kept as `None` like any value
    /// (unless the policy's `cache_if` refuses `None`), so it is not asked for again until
    /// it expires. Like [`Cache::load`], the origin outlives its callers.
    ///
    /// Counters are per key: [`Stats::origin_calls`](crate::Stats::origin_calls) counts
    /// the keys loaded, not the calls of `origin`.
    ///
    /// An error of `origin` fails the keys of that call only; the answer is the first
    /// error of any requested key (after each key's `stale_if_error`), else every value.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = Policy::builder("price").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, Option<u64>> = Cache::new(policy);
    /// let prices = |ids: Vec<u64>| async move {
    ///     // One query for every id nobody has: `where id = any($1)`. Id 3 is not there.
    ///     Ok(ids.into_iter().filter(|id| *id != 3).map(|id| (id, id * 100)).collect())
    /// };
    /// let found = cache.load_many([1, 2, 3], prices).await.unwrap();
    /// assert_eq!(found, HashMap::from([(1, 100), (2, 200)]));
    /// // 1 and 2 are cached, and 3 is known to be missing: only 4 is asked for.
    /// let found = cache.load_many([1, 3, 4], prices).await.unwrap();
    /// assert_eq!(found.len(), 2);
    /// // Origin calls are counted per key loaded: 1, 2 and 3, then 4.
    /// assert_eq!(cache.stats().origin_calls, 4);
    /// # }
    /// ```
    pub async fn load_many<I, F, Fut>(&self, keys: I, origin: F) -> Result<HashMap<K, V>, E>
    where
        I: IntoIterator<Item = K>,
        F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
    {
        let (found, loads) = self.looked_up(keys);
        let inner = &self.inner;
        let gather = Gather::new(
            origin,
            inner.policy.max_batch(),
            inner.policy.batch_window(),
            inner.map_error,
            inner.policy.name().clone(),
        );
        self.load_through(&gather, found, loads).await
    }

    /// Each key once: fresh values at once (absent ones need nothing), the rest to load.
    #[allow(clippy::type_complexity)]
    fn looked_up(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> (HashMap<K, V>, Vec<(K, Unanswered<Option<V>>)>) {
        let mut found = HashMap::new();
        let mut loads = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            if !seen.insert(key.clone()) {
                continue;
            }
            match self.lookup(&key) {
                Lookup::Fresh(Some(value)) => {
                    found.insert(key, value);
                }
                Lookup::Fresh(None) => {}
                Lookup::Load(unanswered) => loads.push((key, unanswered)),
            }
        }
        (found, loads)
    }

    /// The keys of one call that need a load (`loads`, beside those `found` fresh), each
    /// loaded with an origin that hands the key to `gather`.
    async fn load_through<F>(
        &self,
        gather: &Arc<Gather<K, V, E, F>>,
        mut found: HashMap<K, V>,
        loads: Vec<(K, Unanswered<Option<V>>)>,
    ) -> Result<HashMap<K, V>, E>
    where
        F: Origin<K, V, E>,
    {
        if loads.is_empty() {
            return Ok(found);
        }
        let call = Arc::new(Call(std::sync::atomic::AtomicUsize::new(loads.len())));
        let mut running: FuturesUnordered<_> = loads
            .into_iter()
            .map(|(key, unanswered)| {
                let ticket = Ticket::of(&call);
                let origin = gather.clone().origin_of(ticket.clone());
                let load =
                    self.load_found::<Detached, _, _>(key.clone(), unanswered, boxed(origin));
                let gather: Arc<dyn Park> = gather.clone();
                let load = Tracked {
                    load: Box::pin(load),
                    key: (gather, ticket),
                    done: false,
                };
                async move { (key, load.await) }
            })
            .collect();
        let mut failed = None;
        while let Some((key, answer)) = running.next().await {
            // Without a runtime, the origin calls that no task can run are run here.
            while let Some(asked) = gather.stashed() {
                gather.call(asked).await;
            }
            match answer {
                Ok(Some(value)) => {
                    found.insert(key, value);
                }
                Ok(None) => {}
                Err(error) => {
                    failed.get_or_insert(error);
                }
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(found),
        }
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, Option<V>, E> {
    /// A door for single keys onto a batch origin (the DataLoader pattern): concurrent
    /// [`Batcher::load`]s that miss within the policy's
    /// [`batch_window`](crate::Policy::batch_window) (from the first of them) go to
    /// `origin` together, so 50 tasks asking for 50 ids cost one origin call. Each key is
    /// still a load of its own, joined, fenced and kept as [`Cache::load_many`] keeps it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = Policy::builder("price").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, Option<u64>> = Cache::new(policy);
    /// let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    /// let counted = calls.clone();
    /// let price = cache.batcher(move |ids: Vec<u64>| {
    ///     counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ///     async move { Ok(ids.into_iter().map(|id| (id, id * 100)).collect()) }
    /// });
    /// let (one, two) = tokio::join!(price.load(1), price.load(2));
    /// assert_eq!((one.unwrap(), two.unwrap()), (Some(100), Some(200)));
    /// assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
    /// # }
    /// ```
    pub fn batcher<F, Fut>(&self, origin: F) -> Batcher<K, V, E, F>
    where
        F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
    {
        let inner = &self.inner;
        Batcher {
            cache: self.clone(),
            // No keys of its own to wait for: every key is a late one.
            gather: Gather::new(
                origin,
                inner.policy.max_batch(),
                inner.policy.batch_window(),
                inner.map_error,
                inner.policy.name().clone(),
            ),
        }
    }
}

/// The gathers of one cache that calls share, by group, each held while a batcher of it
/// lives.
pub(super) type Groups =
    HashMap<crate::any_key::AnyKey, std::sync::Weak<dyn std::any::Any + Send + Sync>>;

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, Option<V>, E> {
    /// The batcher of `group` (for a `batch` function: its other keyed arguments), made
    /// with `make`'s origin unless one of the group is in use: calls of a group share
    /// their origin calls, and single keys gather with them.
    #[doc(hidden)]
    pub fn batcher_for<G, F, Fut>(&self, group: G, make: impl FnOnce() -> F) -> Batcher<K, V, E, F>
    where
        G: std::hash::Hash + Eq + Send + Sync + 'static,
        F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
    {
        let mut groups = self.inner.batches.lock().unwrap_or_else(|e| e.into_inner());
        let group = crate::any_key::AnyKey::new(group);
        let running = groups
            .get(&group)
            .and_then(std::sync::Weak::upgrade)
            .and_then(|gather| gather.downcast::<Gather<K, V, E, F>>().ok());
        let gather = match running {
            Some(gather) => gather,
            None => {
                let inner = &self.inner;
                let gather = Gather::new(
                    make(),
                    inner.policy.max_batch(),
                    inner.policy.batch_window(),
                    inner.map_error,
                    inner.policy.name().clone(),
                );
                // Groups no call uses any more go when another arrives.
                groups.retain(|_, gather| gather.strong_count() > 0);
                let shared: Arc<dyn std::any::Any + Send + Sync> = gather.clone();
                groups.insert(group, Arc::downgrade(&shared));
                gather
            }
        };
        Batcher {
            cache: self.clone(),
            gather,
        }
    }
}

/// Single-key loads that share origin calls: see [`Cache::batcher`].
pub struct Batcher<K, V, E, F> {
    cache: Cache<K, Option<V>, E>,
    gather: Arc<Gather<K, V, E, F>>,
}

impl<K, V, E, F, Fut> Batcher<K, V, E, F>
where
    K: CacheKey,
    V: LocalValue,
    E: CacheError,
    F: Fn(Vec<K>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HashMap<K, V>, E>> + Send + 'static,
{
    /// [`Cache::load_many`] through this batcher's origin: the keys nobody has share origin
    /// calls with the other calls through it. Keys due while one of its origin calls runs
    /// wait up to the batch window for more, so a busy origin gets fewer, larger calls.
    pub async fn load_many(&self, keys: impl IntoIterator<Item = K>) -> Result<HashMap<K, V>, E> {
        let (found, loads) = self.cache.looked_up(keys);
        self.cache.load_through(&self.gather, found, loads).await
    }

    /// `key`'s value (`None`: the origin did not find it), loaded, when nothing servable
    /// is cached, in one origin call with the other keys asked for within the window.
    pub async fn load(&self, key: K) -> Result<Option<V>, E> {
        match self.cache.lookup(&key) {
            Lookup::Fresh(value) => Ok(value),
            Lookup::Load(unanswered) => {
                let origin = self.gather.clone().origin_of(Ticket::single());
                self.cache
                    .load_found::<Detached, _, _>(key, unanswered, boxed(origin))
                    .await
            }
        }
    }
}

impl<K, V, E, F> std::fmt::Debug for Batcher<K, V, E, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;

//! Writes a caller asks for: a value put in the cache (write-through), and a load that
//! calls the origin whatever the cache holds (a forced refresh). Both store through the
//! fences, as every load does.
use super::leader::{bind, Called};
use super::load::Purpose;
use super::tagging::{ValueFrom, Written};
use super::{Cache, Inner};
use crate::bounds::{CacheError, CacheKey, LocalValue, SourceVersion};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::policy::Consistency;
use crate::shared::store::{Invalidated, LeaseFor, WriteThrough};
use crate::shared::tier::Tier;
use futures_util::FutureExt;
use std::future::Future;
use std::sync::Arc;

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, V, E> {
    /// Puts `value` in the cache for `key` (write-through): in memory and, on a shared
    /// backend, in the shared store for every replica. Loads of `key` already running,
    /// here or on another replica, read the origin before this write, so they are fenced
    /// out first, as by [`Cache::invalidate`]: they still answer their callers, but none
    /// can store its older value over this one.
    ///
    /// An insert and an invalidation of the key obey the order they began in: one that
    /// began after this insert began (`invalidate`, `invalidate_at` past this value's
    /// version, a tag it carries), here or on another replica, wins even when this
    /// insert's write reaches the shared store after it; this insert then stores nothing
    /// and still returns `Ok`. So it does when the store lost its record of this insert's
    /// own invalidation meanwhile (Redis restarted without its data, or evicted the key's
    /// fence), which may have taken such an invalidation with it.
    ///
    /// [`Error::Backend`] when the shared store could not take the fence: the value is in
    /// this process's memory, and the invalidation is queued (see [`Cache::invalidate`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = Policy::builder("write-through").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, String> = Cache::new(policy);
    /// cache.insert(7, "seven".to_owned()).await.unwrap();
    /// let value = cache.load(7, || async { unreachable!("a hit") }).await.unwrap();
    /// assert_eq!(value, "seven");
    /// # }
    /// ```
    ///
    /// Longer than a screen: a write-through is the steps of a load without the origin (fence,
    /// publish, memory, notice), kept in the order a load takes them.
    pub async fn insert(&self, key: K, value: V) -> Result<(), Error> {
        let inner = &self.inner;
        if !inner.policy.enabled() {
            return Ok(());
        }
        let began = (inner.tags_began(), inner.clock.precise());
        // The value is as new as the call: its age counts from here, not from after the
        // invalidation (which, acknowledged, may wait out a hearing lease).
        let now = inner.clock.now();
        inner.invalidate_here(&key);
        let invalidated = inner.invalidate_shared(&key).await;
        // Where it began, in the store's fences: its own invalidation's fence is at most
        // the server's milliseconds then × 1024 (plus the raises of that millisecond), less
        // the time since it began (an estimate never after its start).
        let write_through = invalidated.as_ref().ok().copied().flatten().map(|own| {
            let since = inner.clock.precise().saturating_duration_since(began.1);
            let since_ms = u64::try_from(since.as_millis()).unwrap_or(u64::MAX);
            WriteThrough {
                own,
                began: (own / 1024)
                    .saturating_sub(since_ms + 1)
                    .saturating_mul(1024),
            }
        });
        let fenced = invalidated.map(drop);
        // A load of its own, so an invalidation from here on keeps this value out too.
        if !inner.policy.caches(&value) {
            // A value the policy never stores (`cache_if`): the key is only cleared.
            if fenced.is_ok() {
                inner.acknowledge(&key).await;
            }
            return fenced;
        }
        let leader = inner.flights.start(&key);
        // The lease whatever is stored, as a refresh takes it: the value goes out under
        // the newest fence, past the one this insert just raised. Not when the store did
        // not take the invalidation: unguarded, the value could land after a later write
        // of the key had returned; it stays here, as a value loaded without the store.
        let mut found = match fenced {
            Ok(()) => inner.find_shared(&key, LeaseFor::Refresh, None, None).await,
            Err(_) => None,
        };
        if let Some(found) = found.as_mut() {
            found.write_through = write_through;
        }
        let answer = Ok(value.clone());
        let mut envelope = Envelope::fill(
            value,
            now,
            &inner.policy,
            0.0,
            inner.next_generation(),
            fastrand::f64(),
        );
        // Its source version, as a load's: a write-through of an older row than an
        // invalidation has seen is refused by the key's mark, not stored over it.
        envelope.source_version = inner.version_of(&envelope.value);
        let envelope = match inner
            .publish(
                &key,
                found.as_mut(),
                envelope,
                began,
                ValueFrom::Caller,
                None,
            )
            .await
        {
            Written::Kept(envelope) => envelope,
            Written::TagMoved => None,
        };
        let envelope = match &fenced {
            Ok(()) => envelope,
            Err(_) => envelope.and_then(|envelope| inner.unheard_copy(envelope)),
        };
        // Nobody joins this load: its answer only completes the flight.
        let _ = inner.settle(Some(leader), answer, envelope);
        if fenced.is_ok() {
            inner.acknowledge(&key).await;
        }
        fenced
    }

    /// Calls the origin for `key` whatever the cache holds, and stores what it returns as
    /// any load does (the shared store too, under the fence its read returned). It does
    /// not join a running load, whose origin call may have started before the caller
    /// asked; callers of `key` meanwhile keep getting the current value or join their own
    /// load. It goes through the admission semaphore and keeps the policy's deadline,
    /// and a kept error ([`PolicyBuilder::cache_errors`](crate::PolicyBuilder::cache_errors))
    /// does not answer it.
    pub async fn refresh<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.refresh_keyed(key, move |_| origin()).await
    }

    /// [`Cache::refresh`] with an origin that receives the key.
    pub async fn refresh_keyed<F, Fut>(&self, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let inner = &self.inner;
        if !inner.policy.enabled() {
            return Box::pin(inner.call_direct(&key, origin)).await;
        }
        let reload = inner.reload(key.clone(), origin);
        Box::pin(inner.within_deadline(&key, reload)).await
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// A load that skips what memory and the shared store hold: the leader's steps of a
    /// load (`load.rs`) on a flight of its own. Loads of the key already running started
    /// before it, so they are fenced out first, here and (by taking the key's lease from
    /// whoever holds it) on every replica: none can store over what this one returns. Its
    /// own ticket and fence are taken before the origin is called, so an invalidation
    /// while it runs keeps its value out.
    async fn reload<F, Fut>(self: &Arc<Self>, key: K, origin: F) -> Result<V, E>
    where
        F: FnOnce(&K) -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        self.flights.invalidate(&key);
        let leader = self.flights.start(&key);
        let origin = bind(origin, &key);
        let origin = || origin().map(Called::Returned);
        self.lead(key, leader, origin, Purpose::Force).await
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Cache<K, V, E> {
    /// Drops `key`'s value, in this process at once and, on a shared backend, in every
    /// replica: the key's fence in Redis is raised and tiered nodes drop their copies. A
    /// load of `key` already running, here or on another replica, still answers its
    /// waiters but does not store its result, which was computed before the invalidation;
    /// the next call loads anew.
    ///
    /// [`Error::Backend`] when the shared store could not take it: it applied here and is
    /// queued, and replayed before this replica reads the shared store again.
    pub async fn invalidate(&self, key: &K) -> Result<(), Error> {
        // Fence first: a load that stores before the fence moves is removed just after.
        self.inner.invalidate_here(key);
        self.inner.invalidate_shared(key).await?;
        self.inner.acknowledge(key).await;
        Ok(())
    }

    /// Drops `key`'s value because its source changed at `source_version`, unless that
    /// change is already known: an invalidation below the highest version invalidated
    /// before for this key (its mark) arrived late and changes nothing; one at or below the
    /// version the stored value was read at (see
    /// [`CacheBuilder::source_version`](crate::CacheBuilder::source_version)) keeps that
    /// value, and on a shared backend still retires every copy and load read before it
    /// (another replica's memory may hold an older version); one exactly at the mark
    /// applies again, so a retried call is harmless. So invalidations
    /// delivered out of order cannot delete a value refreshed from a newer source, and a
    /// value read at a version older than the newest invalidation is answered to its
    /// callers but not stored.
    ///
    /// On a shared backend the store decides, for every replica; it keeps the marks for
    /// 24 hours after a key's last invalidation, and compares versions exactly. In memory
    /// the cache keeps the same marks itself. [`Error::Backend`] when the shared store
    /// could not take it: the value was dropped here, and the invalidation is queued with
    /// its version and replayed before this replica reads the shared store again.
    ///
    /// The version is a `u64` or an `i64` (see [`SourceVersion`]). A negative `i64` is
    /// no version the store can order: the call applies as [`Cache::invalidate`] does
    /// (the value goes, no mark moves), and a warning names the cache.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stampede_runtime::{Cache, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let policy = Policy::builder("prices").fresh(Duration::from_secs(60)).build().unwrap();
    /// let cache: Cache<u64, (u64, u64)> = Cache::builder(policy)
    ///     .source_version(|&(_, version)| version)
    ///     .build();
    /// cache.load(1, || async { Ok((250, 42)) }).await.unwrap(); // read at version 42
    /// cache.invalidate_at(&1, 41).await.unwrap(); // late: the value is newer
    /// assert_eq!(cache.peek(&1), Some((250, 42)));
    /// cache.invalidate_at(&1, 43).await.unwrap();
    /// assert_eq!(cache.peek(&1), None);
    /// # }
    /// ```
    pub async fn invalidate_at(
        &self,
        key: &K,
        source_version: impl SourceVersion,
    ) -> Result<(), Error> {
        let source_version = match source_version.ordered() {
            Ok(version) => version,
            Err(negative) => {
                tracing::warn!(
                    target: "stampede",
                    cache = %self.inner.policy.name(),
                    version = negative,
                    "a negative source version cannot be ordered: invalidated as by `invalidate`"
                );
                return self.invalidate(key).await;
            }
        };
        let inner = &self.inner;
        if inner.shared.is_some() {
            return inner.invalidate_shared_at(key, source_version).await;
        }
        if inner.raise_mark(key, source_version) {
            inner.invalidate_here(key);
        }
        Ok(())
    }

    /// Drops every value of this cache, with the same rule for running loads as
    /// [`Cache::invalidate`]: in this process at once and, on a shared backend, in every
    /// replica. The shared store is scanned for this cache's entries (`SCAN` on every
    /// master, so it costs time in proportion to the store's keys) and each one is
    /// invalidated as by key: its fence raised, its value dropped, tiered copies told.
    ///
    /// [`Error::Backend`] when the shared store could not take it all: it applied here;
    /// entries it listed but could not invalidate are queued like single invalidations,
    /// and if it could not list them, nothing is queued and the call should be repeated.
    pub async fn invalidate_all(&self) -> Result<(), Error> {
        self.inner.flights.invalidate_all();
        self.inner.memory.invalidate_all();
        if let Some(known) = &self.inner.known_errors {
            known.clear();
        }
        self.inner.invalidate_all_shared().await?;
        self.inner.acknowledge_all().await;
        Ok(())
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// An invalidation's failure on the shared side, naming this cache.
    fn backend_error(&self, message: String) -> Error {
        Error::Backend {
            cache: self.policy.name().clone(),
            message,
        }
    }

    /// The tier an invalidation goes through: none without a shared backend, an error
    /// when there is no connection to it (none is made outside a Tokio runtime).
    fn invalidation_tier(&self) -> Result<Option<&Arc<Tier<K, V>>>, Error> {
        if self.shared.is_none() {
            return Ok(None);
        }
        self.tier().map(Some).ok_or_else(|| {
            self.backend_error("no connection to the shared store (none is made outside a Tokio runtime); applied in this process only".into())
        })
    }

    /// An invalidation's part in this process: the key's running loads fenced out (they
    /// answer their callers but store nothing), its memory copy and a kept error dropped.
    pub(super) fn invalidate_here(&self, key: &K) {
        self.flights.invalidate(key);
        self.memory.invalidate(key);
        self.forget_error(key);
    }

    /// The shared side of an invalidation ([`Cache::invalidate`], an insert's): the fence
    /// the store raised the key's to, when it did (`None` without a shared store).
    ///
    /// The caller fenced the key's loads and dropped its copy before; both happen again
    /// once the store has answered. A load that began in between read the store before
    /// the invalidation reached it and may keep what it read, and no notice undoes that
    /// here (a replica does not hear its own): seed 20835591, where a tiered replica
    /// served the retired value from memory after its own `invalidate` returned.
    pub(super) async fn invalidate_shared(&self, key: &K) -> Result<Option<u64>, Error> {
        let Some(tier) = self.invalidation_tier()? else {
            return Ok(None);
        };
        let backend = |message: String| self.backend_error(message);
        let entry = tier.entry_key(key).map_err(|error| {
            backend(format!("the key cannot be written for the shared store ({error}); applied in this process only"))
        })?;
        tier.forget(&entry);
        let invalidated = tier.replica.invalidate(entry.clone()).await;
        self.invalidate_here(key);
        tier.forget(&entry);
        let invalidated = invalidated.map_err(|error| {
            backend(format!("{error}; applied in this process and queued, to be replayed before this replica reads the shared store again"))
        })?;
        Ok(match invalidated {
            Invalidated::Fenced { fence } => Some(fence),
            Invalidated::Late => None,
        })
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// Whether this write waits for every tiered replica to drop what it retires: the
    /// cache's consistency, or one call's ([`crate::acknowledged`]). Only a tiered cache
    /// keeps copies another replica's write must reach.
    fn acknowledging(&self, tier: &Tier<K, V>) -> bool {
        tier.keeps_memory
            && (self.policy.consistency() == Consistency::Acknowledged
                || crate::per_call::acknowledging())
    }

    /// [`Inner::acknowledge`] after an `invalidate_all`: its notices went out from every
    /// master, so on a cluster the ask, sent from one, may pass some of them on the bus.
    pub(super) async fn acknowledge_all(&self) {
        let Some(tier) = self.connected_tier() else {
            return;
        };
        if self.acknowledging(tier) {
            (tier.replica)
                .wait_for_acknowledgements(self.policy.name())
                .await;
        }
    }

    /// After a write of `key` the store took (an invalidation, an insert's publish): when
    /// it is acknowledged, waits until no tiered replica can serve what it retired (see
    /// `crate::hearing`, `shared/acknowledgement.rs`). Last, so the write's own steps
    /// follow each other as closely as unacknowledged ones do.
    pub(super) async fn acknowledge(&self, key: &K) {
        let Some(tier) = self.connected_tier() else {
            return;
        };
        if !self.acknowledging(tier) {
            return;
        }
        if let Ok(entry) = tier.entry_key(key) {
            tier.replica.wait_for_acknowledgements(entry.value()).await;
        }
    }

    /// The shared side of [`Cache::invalidate_at`]: the store decides whether it is late.
    /// When the store cannot decide, the value is dropped here (the side that can only cost
    /// a reload) and the invalidation queued.
    pub(super) async fn invalidate_shared_at(&self, key: &K, version: u64) -> Result<(), Error> {
        let backend = |message: String| Error::Backend {
            cache: self.policy.name().clone(),
            message,
        };
        let Some(tier) = self.tier() else {
            self.invalidate_here(key);
            return Err(backend(
                "no connection to the shared store (none is made outside a Tokio runtime); applied in this process only".into(),
            ));
        };
        let entry = match tier.entry_key(key) {
            Ok(entry) => entry,
            Err(error) => {
                self.invalidate_here(key);
                return Err(backend(format!("the key cannot be written for the shared store ({error}); applied in this process only")));
            }
        };
        match tier.replica.invalidate_at(entry.clone(), version).await {
            // Late or not, the store raised the fence: this replica's copy and loads go
            // too, as it hears no notice of its own. Late, the store's value is as new as
            // the change, but a copy here may be older (lease-less loads share a fence).
            Ok(Invalidated::Fenced { .. } | Invalidated::Late) => {
                self.invalidate_here(key);
                tier.forget(&entry);
                self.acknowledge(key).await;
                Ok(())
            }
            Err(error) => {
                self.invalidate_here(key);
                tier.forget(&entry);
                Err(backend(format!("{error}; applied in this process and queued, to be replayed before this replica reads the shared store again")))
            }
        }
    }
}

impl<K: CacheKey, V: LocalValue, E: CacheError> Inner<K, V, E> {
    /// This cache's part of `invalidate_all` on the shared store.
    pub(super) async fn invalidate_all_shared(&self) -> Result<(), Error> {
        let Some(tier) = self.invalidation_tier()? else {
            return Ok(());
        };
        tier.invalidate_all().await.map(drop).map_err(|error| {
            self.backend_error(format!("{error}; applied in this process; entries the shared store listed and could not take are queued, and if it could not list them call again"))
        })
    }
}

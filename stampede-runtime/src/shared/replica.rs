//! One replica's side of the shared store ([`Replica`], one per runtime): its connection,
//! its wire format, and what it owes the store but could not send yet.
//!
//! What a replica owes, kept until the store takes it:
//! - **Invalidations** (one per key, merged: the highest source version, and whether any
//!   came without one). A read of a key whose invalidation is still owed sends that
//!   invalidation first, so no replica serves from the store a value it was told to drop;
//!   reads of other keys do not wait for it.
//! - **Sweeps**: an `invalidate_all` whose scan could not reach every shard. Until it is
//!   replayed, reads of that cache's keys on those shards fail (the loader loads in this
//!   process), since any value there may be one the sweep was meant to remove.
//! - **Lease releases**: a lease this replica may hold but no load will end (its load
//!   failed or was dropped, or the reply that granted it was lost), released by its token.
//! - **Tag invalidations** (kept in the runtime's tag book, see `tags.rs`): until the store
//!   takes one, entries carrying the tag are retired here and no load stores one.
//!
//! A background task on the background threads sends what is owed: at once when something is
//! added, and every [`REPLAY_PERIOD`] while anything remains, in batches sent concurrently,
//! so the work is linear in what is owed and no caller waits for all of it.
use super::acknowledgement::Hearer;
use super::background;
use super::keys::EntryKey;
#[cfg(feature = "redis")]
use super::redis::access::Access;
#[cfg(feature = "redis")]
use super::redis::{RedisConfig, RedisStore};
use super::store::{Invalidated, LeaseRequest, LeaseToken, Read, SharedStore, StoreError};
use super::wire::Wire;
use crate::config::backend::BackendSettings;
use crate::tags::TagBook;
use futures_util::{StreamExt, TryStreamExt};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// How often what is owed is retried, at most.
const REPLAY_PERIOD: Duration = Duration::from_millis(250);
/// Invalidations sent per batch, and how many at once.
const BATCH: usize = 1024;
const AT_ONCE: usize = 32;

/// One replica's shared store and what it owes it.
pub(crate) struct Replica {
    store: Arc<dyn SharedStore>,
    pub(crate) wire: Wire,
    pub(crate) prefix: String,
    /// How long a value loaded while the store could not be read stays servable in memory
    /// (`None`: the cache's stale window).
    pub(crate) degraded_ttl: Option<Duration>,
    owed: Mutex<Owed>,
    /// Set while anything is owed: a read checks this, not the mutex.
    pending: AtomicBool,
    /// Wakes the replayer when something is added.
    added: Arc<Notify>,
    /// The runtime's tag versions, kept current by the store's notices.
    pub(crate) tags: Arc<TagBook>,
    /// Acknowledged writes: every replica listed as hearing answered, or one's hearing
    /// lease was waited out instead.
    pub(crate) acknowledged_writes: AtomicU64,
    pub(crate) writes_waited_out: AtomicU64,
}

#[derive(Default)]
struct Owed {
    /// By value key: each key once, however often it was invalidated meanwhile.
    keys: BTreeMap<String, Owed1>,
    /// By pattern.
    sweeps: BTreeMap<String, Sweep>,
    /// By value key and token.
    releases: BTreeMap<(String, LeaseToken), Release>,
    /// Stamps each entry, so one sent is removed only if nothing merged into it since.
    stamp: u64,
}

/// A key's invalidations the store has not taken yet, merged.
#[derive(Clone)]
struct Owed1 {
    key: EntryKey,
    plain: bool,
    version: Option<u64>,
    stamp: u64,
}

#[derive(Clone)]
struct Sweep {
    pattern: String,
    /// Every value key of the cache starts with this.
    prefix: String,
    /// The shards left to sweep; `None`: all of them.
    shards: Option<Vec<String>>,
    stamp: u64,
}

#[derive(Clone)]
struct Release {
    key: EntryKey,
    /// Owed because the reply that granted it was lost (counted when released).
    orphan: bool,
}

impl Replica {
    /// Connects lazily (only settings Redis cannot use, or no Tokio runtime, fail here)
    /// and starts sending what is owed in the background.
    pub(crate) fn start(
        settings: &BackendSettings,
        tags: Arc<TagBook>,
    ) -> Result<Arc<Self>, StoreError> {
        let mut replica = Self::connect(settings)?;
        replica.tags = tags;
        // Tags invalidated before there was a connection are sent first thing.
        replica.pending = AtomicBool::new(replica.tags.has_owed());
        let replica = Arc::new(replica);
        let period = settings.breaker_cooldown.min(REPLAY_PERIOD);
        let added = replica.added.clone();
        background::spawn(keep_replaying(Arc::downgrade(&replica), added, period));
        background::spawn(tags::keep_versions(
            replica.tags.clone(),
            replica.store.tag_events(),
        ));
        Ok(replica)
    }

    /// Never reached through a runtime: its configuration check refuses the Redis kinds
    /// in this build first. The one store this crate can connect to needs the feature.
    #[cfg(not(feature = "redis"))]
    fn connect(_: &BackendSettings) -> Result<Self, StoreError> {
        Err(StoreError::Backend(
            "this build of stampede has no Redis client: enable its `redis` feature \
             (on by default)"
                .into(),
        ))
    }

    /// Whether `settings` describe a shared store this build can connect to: URLs it
    /// parses, files it reads, TLS it has; the key at fault when not.
    pub(crate) fn check(settings: &BackendSettings) -> Result<(), (&'static str, String)> {
        #[cfg(feature = "redis")]
        Access::from_settings(settings)?;
        #[cfg(not(feature = "redis"))]
        let _ = settings;
        Ok(())
    }

    #[cfg(feature = "redis")]
    fn connect(settings: &BackendSettings) -> Result<Self, StoreError> {
        let access = Access::from_settings(settings)
            .map_err(|(key, why)| StoreError::Backend(format!("`{key}`: {why}")))?;
        let mut config = RedisConfig::over(access);
        config.prefix = settings.prefix.clone();
        config.response_timeout = settings.response_timeout;
        config.connect_timeout = settings.connect_timeout;
        config.breaker_failures = settings.breaker_failures;
        config.breaker_cooldown = settings.breaker_cooldown;
        config.hearing_lease = settings.hearing_lease;
        config.keeps_hearing = settings.kind == crate::config::backend::Kind::Tiered;
        let store = RedisStore::connect(config)?;
        let max_value = usize::try_from(settings.max_value_bytes).unwrap_or(usize::MAX);
        let mut replica = Self::over(
            Arc::new(store),
            Wire::new(max_value),
            settings.prefix.clone(),
        );
        replica.degraded_ttl = settings.degraded_ttl;
        Ok(replica)
    }

    pub(crate) fn over(store: Arc<dyn SharedStore>, wire: Wire, prefix: String) -> Self {
        Replica {
            store,
            wire,
            prefix,
            degraded_ttl: None,
            owed: Mutex::new(Owed::default()),
            pending: AtomicBool::new(false),
            added: Arc::new(Notify::new()),
            tags: TagBook::new(true),
            acknowledged_writes: AtomicU64::new(0),
            writes_waited_out: AtomicU64::new(0),
        }
    }

    pub(crate) fn store(&self) -> &dyn SharedStore {
        &*self.store
    }

    fn owed(&self) -> MutexGuard<'_, Owed> {
        self.owed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A read of `key` (taking its lease, if asked and free), once what this replica owes
    /// for that key has been taken. A read that asked for the lease and got no answer may
    /// have been granted it: the lease is released by its token once Redis answers again.
    pub(crate) async fn read(
        self: &Arc<Self>,
        key: &EntryKey,
        lease: Option<LeaseRequest>,
    ) -> Result<Read, StoreError> {
        if self.pending.load(Ordering::Acquire) {
            self.pay_owed_for(key).await?;
        }
        let read = self.store.read(key, lease).await;
        if let (Err(error), Some(request)) = (&read, lease)
            && error.may_have_run()
        {
            self.release(key.clone(), request.token, true);
        }
        read
    }

    /// Whether anything is owed to the store (an invalidation it could not take yet).
    pub(crate) fn owes(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Sends `key`'s owed invalidation, if any; fails while a sweep of its cache is owed.
    async fn pay_owed_for(&self, key: &EntryKey) -> Result<(), StoreError> {
        let (entry, swept) = {
            let owed = self.owed();
            let entry = owed.keys.get(key.value()).cloned();
            let sweeps: Vec<Sweep> = (owed.sweeps.values())
                .filter(|sweep| key.value().starts_with(&sweep.prefix))
                .cloned()
                .collect();
            (entry, sweeps)
        };
        for sweep in swept {
            let blocks = sweep
                .shards
                .as_ref()
                .is_none_or(|shards| shards.contains(&self.store.shard_of(key)));
            if blocks {
                return Err(StoreError::Backend(
                    "an invalidate_all of this cache is still to be replayed".into(),
                ));
            }
        }
        if let Some(entry) = entry {
            entry.send(&*self.store).await?;
            self.taken(&entry);
        }
        Ok(())
    }

    /// Raises `key`'s fence and drops its value; when the store cannot take it now, the
    /// invalidation is owed and the error returned.
    pub(crate) async fn invalidate(&self, key: EntryKey) -> Result<Invalidated, StoreError> {
        let taken = self.store.invalidate(&key).await;
        if taken.is_err() {
            self.owe_invalidation(key, true, None);
        }
        taken
    }

    /// Waits until no replica can serve what a write Redis took retired: every replica
    /// whose hearing lease may run acknowledged everything sent to it before now (the
    /// write's notice, published on `near`'s node, among it), or its lease ran out, after
    /// which it serves no copy it has not heard about. When the registry cannot be read,
    /// every lease is waited out.
    pub(crate) async fn wait_for_acknowledgements(&self, near: &str) {
        let acks = self.store.acknowledgements();
        let hearers = match self.store.ask_acknowledgements(near, &acks).await {
            Ok(hearers) => hearers,
            Err(error) => {
                tracing::debug!(target: "stampede", %error, "acknowledgements not asked for: waiting out the hearing lease");
                return self.wait_out_hearing().await;
            }
        };
        // The margin covers the coarse clock a hit reads (a tick late) and clocks running
        // at slightly different rates. This replica applied the write before it was sent.
        let margin = self.acknowledgement_margin();
        let own = self.store.replica();
        let hearers: Vec<Hearer> = (hearers.into_iter())
            .filter(|hearer| hearer.replica != own)
            .map(|hearer| Hearer {
                ends: hearer.ends + margin,
                ..hearer
            })
            .collect();
        let counter = match acks.wait(&hearers).await {
            true => &self.acknowledged_writes,
            false => &self.writes_waited_out,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits until every replica's hearing lease, as it stood when a write was taken, ran
    /// out: for when the registry of hearers cannot be read.
    async fn wait_out_hearing(&self) {
        let lease = self.store.hearing_lease().lease();
        background::sleep(lease + self.acknowledgement_margin()).await;
        self.writes_waited_out.fetch_add(1, Ordering::Relaxed);
    }

    fn acknowledgement_margin(&self) -> Duration {
        self.store.hearing_lease().lease() / 20 + Duration::from_millis(2)
    }

    /// [`Replica::invalidate`] for a change at `source_version`: the store decides whether
    /// it arrived late. When the store cannot take it now, it is owed with its version.
    pub(crate) async fn invalidate_at(
        &self,
        key: EntryKey,
        source_version: u64,
    ) -> Result<Invalidated, StoreError> {
        let taken = self.store.invalidate_at(&key, source_version).await;
        if taken.is_err() {
            self.owe_invalidation(key, false, Some(source_version));
        }
        taken
    }

    /// Invalidates every entry whose keys match `pattern` (one cache's; its value keys
    /// start with `prefix`), each as [`Replica::invalidate`] does. Shards the scan could not
    /// reach are owed a sweep, entries it found but could not invalidate their own
    /// invalidations. The number of entries invalidated.
    pub(crate) async fn invalidate_all(
        &self,
        pattern: &str,
        prefix: &str,
    ) -> Result<usize, StoreError> {
        let scan = self.store.entries(pattern, None).await;
        let swept = self.invalidate_found(scan.found).await;
        match scan.failed {
            None => swept,
            Some(failure) => {
                self.owe_sweep(pattern, prefix, failure.shards);
                Err(failure.error)
            }
        }
    }

    /// Invalidates `found`, owing each one the store did not take.
    async fn invalidate_found(&self, found: Vec<EntryKey>) -> Result<usize, StoreError> {
        let store = &*self.store;
        let count = found.len();
        let failed: Vec<(EntryKey, StoreError)> = futures_util::stream::iter(found)
            .map(|key| async move {
                let taken = store.invalidate(&key).await;
                taken.err().map(|error| (key, error))
            })
            .buffer_unordered(AT_ONCE)
            .filter_map(std::future::ready)
            .collect()
            .await;
        let Some((_, error)) = failed.first().cloned() else {
            return Ok(count);
        };
        for (key, _) in failed {
            self.owe_invalidation(key, true, None);
        }
        Err(error)
    }

    /// Releases the lease `token` names on `key`, now in the background, or later if the
    /// store does not take it now. `orphan`: the reply that granted it was lost.
    pub(crate) fn release(self: &Arc<Self>, key: EntryKey, token: LeaseToken, orphan: bool) {
        let replica = self.clone();
        background::spawn(async move {
            match replica.store.release(&key, token).await {
                Ok(released) => {
                    if released && orphan {
                        replica.store.count_orphan_released();
                    }
                }
                Err(_) => {
                    let mut owed = replica.owed();
                    owed.releases
                        .insert((key.value().to_owned(), token), Release { key, orphan });
                    replica.pending.store(true, Ordering::Release);
                }
            }
        });
    }

    /// Invalidations, sweeps and tag invalidations waiting for the store.
    pub(crate) fn queued(&self) -> usize {
        let owed = self.owed();
        owed.keys.len() + owed.sweeps.len() + self.tags.owed().len()
    }

    fn owe_invalidation(&self, key: EntryKey, plain: bool, version: Option<u64>) {
        let mut owed = self.owed();
        owed.stamp += 1;
        let stamp = owed.stamp;
        let merged = match owed.keys.remove(key.value()) {
            Some(earlier) => Owed1 {
                key,
                plain: earlier.plain || plain,
                version: earlier.version.max(version),
                stamp,
            },
            None => Owed1 {
                key,
                plain,
                version,
                stamp,
            },
        };
        owed.keys.insert(merged.key.value().to_owned(), merged);
        self.added_locked();
    }

    fn owe_sweep(&self, pattern: &str, prefix: &str, shards: Option<Vec<String>>) {
        let mut owed = self.owed();
        owed.stamp += 1;
        let stamp = owed.stamp;
        let shards = match (
            owed.sweeps.remove(pattern).map(|sweep| sweep.shards),
            shards,
        ) {
            (Some(None), _) | (_, None) => None,
            (Some(Some(mut earlier)), Some(more)) => {
                earlier.extend(more);
                earlier.sort();
                earlier.dedup();
                Some(earlier)
            }
            (None, shards) => shards,
        };
        owed.sweeps.insert(
            pattern.to_owned(),
            Sweep {
                pattern: pattern.to_owned(),
                prefix: prefix.to_owned(),
                shards,
                stamp,
            },
        );
        self.added_locked();
    }

    fn added_locked(&self) {
        self.pending.store(true, Ordering::Release);
        self.added.notify_one();
    }

    /// The store took `entry`: forget it, unless another invalidation merged into it since.
    fn taken(&self, entry: &Owed1) {
        let mut owed = self.owed();
        if owed.keys.get(entry.key.value()).map(|e| e.stamp) == Some(entry.stamp) {
            owed.keys.remove(entry.key.value());
        }
        self.still_pending(&owed);
    }

    fn still_pending(&self, owed: &Owed) {
        let pending = !(owed.keys.is_empty() && owed.sweeps.is_empty() && owed.releases.is_empty())
            || self.tags.has_owed();
        self.pending.store(pending, Ordering::Release);
    }

    /// Sends what is owed, releases first (replicas wait on them); stops after the first
    /// kind of work with a failure, which leaves the rest for the next round.
    ///
    /// Longer than a screen: each kind of owed work (releases, tags, keys, sweeps) is sent in
    /// its order, with the rule for what stays owed beside it.
    async fn replay(&self) {
        // A tag the store did not take is left for the next round; the rest still goes.
        let _ = self.replay_tags().await;
        let releases: Vec<((String, LeaseToken), Release)> = {
            let owed = self.owed();
            owed.releases
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        // Every release is sent, each apart from the others: on a slow network one whose
        // answer is always late (it reached Redis, and is sent again) would otherwise hold
        // back every release behind it for as long as the network stays slow, while Redis
        // answers this replica's other calls (seed 53847654: a lease whose grant reply was
        // lost, held 3.9 s behind another key's release).
        let failed = futures_util::stream::iter(releases)
            .map(|((value, token), release)| async move {
                let released = self.store.release(&release.key, token).await.ok()?;
                if released && release.orphan {
                    self.store.count_orphan_released();
                }
                self.owed().releases.remove(&(value, token));
                Some(())
            })
            .buffer_unordered(AT_ONCE)
            .filter(|sent| std::future::ready(sent.is_none()))
            .count()
            .await;
        if failed > 0 {
            return;
        }
        loop {
            let batch: Vec<Owed1> = self.owed().keys.values().take(BATCH).cloned().collect();
            if batch.is_empty() {
                break;
            }
            let store = &*self.store;
            let sent = futures_util::stream::iter(batch.into_iter().map(Ok))
                .try_for_each_concurrent(AT_ONCE, |entry| async move {
                    entry.send(store).await?;
                    self.taken(&entry);
                    Ok::<(), StoreError>(())
                })
                .await;
            if sent.is_err() {
                return;
            }
        }
        let sweeps: Vec<Sweep> = self.owed().sweeps.values().cloned().collect();
        for sweep in sweeps {
            let scan = (self.store)
                .entries(&sweep.pattern, sweep.shards.as_deref())
                .await;
            let swept = self.invalidate_found(scan.found).await;
            let mut owed = self.owed();
            let unchanged = owed.sweeps.get(&sweep.pattern).map(|s| s.stamp) == Some(sweep.stamp);
            if unchanged {
                match (scan.failed, swept) {
                    (None, Ok(_)) => {
                        owed.sweeps.remove(&sweep.pattern);
                    }
                    (Some(failure), _) => {
                        if let Some(left) = owed.sweeps.get_mut(&sweep.pattern) {
                            left.shards = failure.shards;
                        }
                    }
                    // Swept; what it found and could not invalidate is owed on its own.
                    (None, Err(_)) => {
                        owed.sweeps.remove(&sweep.pattern);
                    }
                }
            }
        }
        let owed = self.owed();
        self.still_pending(&owed);
    }
}

impl Owed1 {
    /// The versioned invalidation first, so the mark rises even when a plain one follows.
    async fn send(&self, store: &dyn SharedStore) -> Result<(), StoreError> {
        if let Some(version) = self.version {
            store.invalidate_at(&self.key, version).await?;
        }
        if self.plain {
            store.invalidate(&self.key).await?;
        }
        Ok(())
    }
}

/// Sends what `weak` owes whenever something is added, and every `period` while
/// anything is left, until the replica is dropped (it holds no strong reference while it
/// waits).
async fn keep_replaying(weak: Weak<Replica>, added: Arc<Notify>, period: Duration) {
    loop {
        let Some(replica) = weak.upgrade() else {
            return;
        };
        if replica.pending.load(Ordering::Acquire) {
            replica.replay().await;
        }
        drop(replica);
        let _ = tokio::time::timeout(period, added.notified()).await;
    }
}

mod tags;

//! What a cache needs to put its values in the shared store: the replica's connection
//! ([`Remote`], one per runtime), and per cache the serde codec its types allow
//! ([`Codec`]) and the bookkeeping of its memory copies ([`Tier`]).
//!
//! Memory copies and the shared store must never disagree for longer than a notice takes:
//! - a tiered node keeps a copy of what it loaded or read; a notice from another node
//!   (a publish or an invalidation of that key) drops it, so the next call re-reads;
//! - a node that lost its subscription may have missed notices: it drops every copy, and
//!   again once subscribed (copies made in the gap are unconfirmed);
//! - the redis backend keeps no copies, except while the store is unreachable (degraded:
//!   memory and in-process coalescing only); those go with the first notice or
//!   subscription change.
//!
//! Invalidations the store could not take wait in [`Remote`]'s queue, one per key, and
//! are replayed before this replica reads the store again: no replica serves a value from
//! the store that it was told to drop.
use super::keys::{EntryKey, KeyError};
use super::lease::HeldLease;
use super::redis::{RedisConfig, RedisStore};
use super::shared::{
    Invalidated, Lease, LeaseRequest, Published, Read, SharedStore, StoreError, Wake,
};
use super::wire::{Header, Wire, WireError};
use crate::clock::Instant;
use crate::config::backend::BackendSettings;
use crate::envelope::Envelope;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

/// One replica's shared store: its connections, its wire format and its queue of
/// invalidations not yet taken.
pub(crate) struct Remote {
    store: Arc<dyn SharedStore>,
    wire: Wire,
    prefix: String,
    /// By value key: each key once, however often it was invalidated meanwhile.
    queued: Mutex<HashMap<String, Queued>>,
    /// Set while `queued` is not empty: a read checks this, not the mutex.
    pending: AtomicBool,
    /// One replay at a time, so no read overtakes a replay in progress.
    replaying: tokio::sync::Mutex<()>,
}

impl Remote {
    /// Connects lazily (only settings Redis cannot use, or no Tokio runtime, fail here)
    /// and starts replaying queued invalidations in the background, so they reach the
    /// store soon after it is back even if this replica never reads it again.
    pub(crate) fn start(settings: &BackendSettings) -> Result<Arc<Self>, StoreError> {
        let remote = Arc::new(Self::connect(settings)?);
        let period = settings.breaker_cooldown.min(REPLAY_PERIOD);
        drop(tokio::spawn(keep_replaying(
            Arc::downgrade(&remote),
            period,
        )));
        Ok(remote)
    }

    fn connect(settings: &BackendSettings) -> Result<Self, StoreError> {
        let mut config = match (&settings.url, settings.nodes.as_slice()) {
            (Some(url), []) => RedisConfig::new(url.clone()),
            (None, nodes @ [_, ..]) => RedisConfig::cluster(nodes.iter().cloned()),
            _ => {
                return Err(StoreError::Backend(
                    "a shared store needs one Redis url or a list of cluster nodes".into(),
                ))
            }
        };
        config.prefix = settings.prefix.clone();
        config.response_timeout = settings.response_timeout;
        config.connect_timeout = settings.connect_timeout;
        config.breaker_failures = settings.breaker_failures;
        config.breaker_cooldown = settings.breaker_cooldown;
        let store = RedisStore::connect(config)?;
        let max_value = usize::try_from(settings.max_value_bytes).unwrap_or(usize::MAX);
        Ok(Self::over(
            Arc::new(store),
            Wire::new(max_value),
            settings.prefix.clone(),
        ))
    }

    fn over(store: Arc<dyn SharedStore>, wire: Wire, prefix: String) -> Self {
        Remote {
            store,
            wire,
            prefix,
            queued: Mutex::new(HashMap::new()),
            pending: AtomicBool::new(false),
            replaying: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn store(&self) -> &dyn SharedStore {
        &*self.store
    }

    /// A read of `key` (taking its lease, if asked and free), once every queued
    /// invalidation has been taken.
    pub(crate) async fn read(
        &self,
        key: &EntryKey,
        lease: Option<LeaseRequest>,
    ) -> Result<Read, StoreError> {
        self.replay().await?;
        self.store.read(key, lease).await
    }

    /// Raises `key`'s fence and drops its value; when the store cannot take it now, the
    /// invalidation is queued and the error returned.
    pub(crate) async fn invalidate(&self, key: EntryKey) -> Result<(), StoreError> {
        let taken = match self.replay().await {
            Ok(()) => self.store.invalidate(&key).await.map(drop),
            Err(error) => Err(error),
        };
        if taken.is_err() {
            self.queue([Queued::plain(key)]);
        }
        taken
    }

    /// [`Remote::invalidate`] for a change at `source_version`: the store decides whether
    /// it arrived late. When the store cannot take it now, it is queued with its version
    /// and the error returned.
    pub(crate) async fn invalidate_at(
        &self,
        key: EntryKey,
        source_version: u64,
    ) -> Result<Invalidated, StoreError> {
        let taken = match self.replay().await {
            Ok(()) => self.store.invalidate_at(&key, source_version).await,
            Err(error) => Err(error),
        };
        if taken.is_err() {
            self.queue([Queued::at(key, source_version)]);
        }
        taken
    }

    /// Invalidates every entry whose keys match `pattern` (one cache's), each as
    /// [`Remote::invalidate`] does: its fence raised, so a load running anywhere does not
    /// store, its value dropped, tiered nodes told. Entries the store found but could not
    /// take are queued like single invalidations; a scan that failed leaves nothing to
    /// queue, and says so. The number of entries found.
    pub(crate) async fn invalidate_all(&self, pattern: &str) -> Result<usize, StoreError> {
        use futures_util::StreamExt;
        self.replay().await?;
        let entries = self.store.entries(pattern).await?;
        let found = entries.len();
        let store = &*self.store;
        let failed: Vec<(EntryKey, StoreError)> = futures_util::stream::iter(entries)
            .map(|key| async move {
                let taken = store.invalidate(&key).await;
                taken.err().map(|error| (key, error))
            })
            .buffer_unordered(16)
            .filter_map(std::future::ready)
            .collect()
            .await;
        let mut failed = failed.into_iter();
        match failed.next() {
            None => Ok(found),
            Some((key, error)) => {
                self.queue(
                    std::iter::once(key)
                        .chain(failed.map(|(key, _)| key))
                        .map(Queued::plain),
                );
                Err(error)
            }
        }
    }

    /// Invalidations waiting for the store.
    pub(crate) fn queued(&self) -> usize {
        self.queued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn queue(&self, entries: impl IntoIterator<Item = Queued>) {
        let mut queued = self.queued.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in entries {
            let value = entry.key.value().to_owned();
            let merged = match queued.remove(&value) {
                Some(other) => other.merge(entry),
                None => entry,
            };
            queued.insert(value, merged);
        }
        self.pending.store(!queued.is_empty(), Ordering::Release);
    }

    /// Sends the queued invalidations, oldest first is not needed: each key's is one.
    async fn replay(&self) -> Result<(), StoreError> {
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        let _one = self.replaying.lock().await;
        let entries: Vec<Queued> = {
            let mut queued = self.queued.lock().unwrap_or_else(PoisonError::into_inner);
            self.pending.store(false, Ordering::Release);
            queued.drain().map(|(_, entry)| entry).collect()
        };
        let mut entries = entries.into_iter();
        while let Some(entry) = entries.next() {
            if let Err(error) = entry.send(&*self.store).await {
                self.queue(std::iter::once(entry).chain(entries));
                return Err(error);
            }
        }
        Ok(())
    }
}

/// A key's invalidations the store has not taken yet, merged: the highest source version
/// (so the mark still rises to it) and whether any came without one.
struct Queued {
    key: EntryKey,
    plain: bool,
    version: Option<u64>,
}

impl Queued {
    fn plain(key: EntryKey) -> Self {
        Queued {
            key,
            plain: true,
            version: None,
        }
    }

    fn at(key: EntryKey, version: u64) -> Self {
        Queued {
            key,
            plain: false,
            version: Some(version),
        }
    }

    fn merge(self, other: Queued) -> Queued {
        Queued {
            key: self.key,
            plain: self.plain || other.plain,
            version: self.version.max(other.version),
        }
    }

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

/// How often queued invalidations are retried, at most.
const REPLAY_PERIOD: Duration = Duration::from_millis(250);

async fn keep_replaying(remote: Weak<Remote>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(remote) = remote.upgrade() else {
            return;
        };
        if remote.pending.load(Ordering::Acquire) {
            // A failure leaves them queued for the next round.
            let _ = remote.replay().await;
        }
    }
}

/// The serde operations of one cache's key and value types, captured where the types
/// are known to allow them, so the loader needs no serde bounds.
pub(crate) struct Codec<K, V> {
    key: fn(&str, &str, u32, &K) -> Result<EntryKey, KeyError>,
    encode: fn(&Wire, &Header, &V) -> Result<Vec<u8>, WireError>,
    decode: fn(&Wire, &[u8]) -> Decoded<V>,
}

type Decoded<V> = Result<(Header, V), WireError>;

impl<K, V> Clone for Codec<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for Codec<K, V> {}

impl<K: Serialize, V: Serialize + DeserializeOwned + 'static> Codec<K, V> {
    pub(crate) fn new() -> Self {
        Codec {
            key: |prefix, name, version, key| EntryKey::new(prefix, name, version, key),
            encode: |wire, header, value| wire.encode(header, value),
            decode: |wire, bytes| wire.decode(bytes),
        }
    }
}

/// What a cache found in the shared store before calling its origin.
pub(crate) struct Found<V> {
    pub(crate) key: EntryKey,
    /// The server's clock and the key's fence at the read: the publish goes under it.
    pub(crate) read: Option<Read>,
    /// The stored value, as a memory envelope, if one decoded.
    pub(crate) envelope: Option<Envelope<V>>,
    /// The key's lease, when this read took it: the publish consumes it, anything else
    /// gives it back.
    pub(crate) lease: Option<HeldLease>,
}

impl<V> Found<V> {
    /// Another replica holds the key's lease, for this much longer at most.
    pub(crate) fn held_by(&self) -> Option<Duration> {
        match self.read.as_ref()?.lease {
            Lease::HeldBy { remaining } => Some(remaining),
            _ => None,
        }
    }
}

/// One cache's side of the shared store.
pub(crate) struct Tier<K, V> {
    pub(crate) remote: Arc<Remote>,
    codec: Codec<K, V>,
    name: Arc<str>,
    version: u32,
    /// Tiered: memory copies are kept. Redis: only while the store is unreachable.
    pub(crate) keeps_memory: bool,
    /// Value key → key of each memory copy, so a notice naming the value key finds it.
    copies: moka::sync::Cache<String, K>,
}

impl<K, V> Tier<K, V>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    pub(crate) fn new(
        remote: Arc<Remote>,
        codec: Codec<K, V>,
        name: Arc<str>,
        version: u32,
        keeps_memory: bool,
        capacity: u64,
    ) -> Self {
        Tier {
            remote,
            codec,
            name,
            version,
            keeps_memory,
            copies: moka::sync::Cache::new(capacity),
        }
    }

    pub(crate) fn entry_key(&self, key: &K) -> Result<EntryKey, KeyError> {
        (self.codec.key)(&self.remote.prefix, &self.name, self.version, key)
    }

    /// Remembers a memory copy of `key`, for the notices that will drop it.
    pub(crate) fn copied(&self, entry: &EntryKey, key: &K) {
        self.copies.insert(entry.value().to_owned(), key.clone());
    }

    /// The key of the memory copy a notice names, forgotten.
    pub(crate) fn noticed(&self, value_key: &str) -> Option<K> {
        self.copies.remove(value_key)
    }

    pub(crate) fn forget_copies(&self) {
        self.copies.invalidate_all();
    }

    /// Invalidates every entry of this cache in the shared store; see
    /// [`Remote::invalidate_all`].
    pub(crate) async fn invalidate_all(&self) -> Result<usize, StoreError> {
        let pattern = EntryKey::cache_pattern(&self.remote.prefix, &self.name, self.version);
        self.forget_copies();
        self.remote.invalidate_all(&pattern).await
    }

    /// The entry `key` addresses in the shared store. `None` when the key cannot be
    /// addressed (its `Serialize` failed): the cache then works from memory.
    pub(crate) fn address(&self, key: &K) -> Option<EntryKey> {
        match self.entry_key(key) {
            Ok(entry) => Some(entry),
            Err(error) => {
                tracing::warn!(target: "stampede", cache = %self.name, %error, "key cannot be written for the shared store; served from memory");
                None
            }
        }
    }

    /// Resolves on the next notice naming `entry`, or at once when notices are not
    /// flowing. Register it before a read, so a publish right after the read still wakes.
    pub(crate) fn watch(&self, entry: &EntryKey) -> tokio::sync::oneshot::Receiver<Wake> {
        self.remote.store.watch(entry)
    }

    /// Reads `entry` from the shared store, taking its lease when `lease` asks and the
    /// store grants it. A failed read is `Found { read: None, .. }` (degraded).
    pub(crate) async fn find(
        &self,
        entry: EntryKey,
        lease: Option<LeaseRequest>,
        now: Instant,
        generation: u64,
    ) -> Found<V> {
        let read = match self.remote.read(&entry, lease).await {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(target: "stampede", cache = %self.name, %error, "shared store unreachable; loading in this process");
                return Found {
                    key: entry,
                    read: None,
                    envelope: None,
                    lease: None,
                };
            }
        };
        let lease = match read.lease {
            Lease::Granted { fence } => {
                Some(HeldLease::new(self.remote.clone(), entry.clone(), fence))
            }
            _ => None,
        };
        let envelope = read.envelope.as_deref().and_then(|bytes| {
            match (self.codec.decode)(&self.remote.wire, bytes) {
                Ok((header, value)) => Some(to_memory(
                    &header,
                    value,
                    read.clock.now_ms(),
                    now,
                    generation,
                )),
                Err(error) => {
                    tracing::warn!(target: "stampede", key = %entry, %error, "unusable envelope in the shared store, treated as a miss");
                    self.remote.store.count_decode_failure();
                    None
                }
            }
        });
        Found {
            key: entry,
            read: Some(read),
            envelope,
            lease,
        }
    }

    /// Publishes `envelope` under the fence of `read` (the lease's, when the read took
    /// it), with the source version the value carries. `None` when it was not written
    /// (it could not be encoded, or the store did not answer): memory may keep it. A
    /// publish the store answered consumes the lease, stored or refused.
    pub(crate) async fn publish(
        &self,
        entry: &EntryKey,
        read: &Read,
        lease: Option<HeldLease>,
        envelope: &Envelope<V>,
        now: Instant,
    ) -> Option<Published> {
        let server_now = read.clock.now_ms();
        let header = to_wire(envelope, server_now, now, read.fence);
        let bytes = match (self.codec.encode)(&self.remote.wire, &header, &envelope.value) {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!(target: "stampede", key = %entry, %error, "value not written to the shared store");
                return None;
            }
        };
        let publication = super::shared::Publication {
            fence: read.fence,
            envelope: bytes,
            keep_until_ms: header.keep_until_ms,
            source_version: envelope.source_version,
        };
        match self.remote.store.publish(entry, publication).await {
            Ok(published) => {
                if let Some(lease) = lease {
                    lease.published();
                }
                if matches!(
                    published,
                    Published::RefusedByFence | Published::RefusedBySourceVersion
                ) {
                    tracing::debug!(target: "stampede", key = %entry, outcome = ?published, "publish refused: a newer load or an invalidation got there first");
                }
                Some(published)
            }
            Err(error) => {
                // It may have run: the lease goes back (only if still ours) when dropped.
                tracing::debug!(target: "stampede", key = %entry, %error, "value not written to the shared store");
                None
            }
        }
    }
}

/// A stored envelope on this cache's clock. Deadlines already past land on `now`.
fn to_memory<V>(
    header: &Header,
    value: V,
    server_now: u64,
    now: Instant,
    generation: u64,
) -> Envelope<V> {
    let at = |ms: u64| now + Duration::from_millis(ms.saturating_sub(server_now));
    Envelope {
        value,
        // Its age counts from here: this clock cannot express moments before its start.
        loaded_at: now,
        fresh_until: at(header.fresh_until_ms),
        stale_until: at(header.stale_until_ms),
        keep_until: at(header.keep_until_ms),
        delta: header.delta,
        generation,
        rearmed: false,
        source_version: header.source_version,
    }
}

/// A memory envelope's deadlines in server milliseconds.
fn to_wire<V>(envelope: &Envelope<V>, server_now: u64, now: Instant, fence: u64) -> Header {
    let ms = |at: Instant| {
        let ahead = at.saturating_duration_since(now).as_millis();
        server_now.saturating_add(u64::try_from(ahead).unwrap_or(u64::MAX))
    };
    Header {
        fresh_until_ms: ms(envelope.fresh_until),
        stale_until_ms: ms(envelope.stale_until),
        keep_until_ms: ms(envelope.keep_until),
        loaded_at_ms: server_now,
        delta: envelope.delta,
        fence,
        source_version: envelope.source_version,
    }
}

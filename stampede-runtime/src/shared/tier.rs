//! One cache's side of the shared store ([`Tier`]), with the serde codec its types allow
//! and what a read found (`found.rs`), and the bookkeeping that keeps this
//! replica's memory and running loads in line with other replicas' notices.
//!
//! Memory and the shared store must never disagree for longer than a notice takes:
//! - a tiered node keeps a copy of what it loaded or read; a notice from another node
//!   (a publish or an invalidation of that key) drops it, so the next call re-reads;
//! - a load of a key is registered from before its first read to its end; a notice from
//!   another node naming that key under a fence above the one the load read means the
//!   load started before a newer write: it is detached, as a local invalidation detaches
//!   it (its callers get its value, calls after the notice start a new load, and memory
//!   does not keep it). A notice that arrives while the read is still on its way is
//!   caught the same way;
//! - a node that lost its subscription may have missed notices: it drops every copy of
//!   what the store holds, and again once subscribed, when it also detaches every running
//!   load that began before; until then (and from start-up until it first subscribes) it
//!   keeps no such copy and reads the store again each time. Each subscription has an
//!   epoch, recorded by every load when it begins and by every copy it makes: a copy or
//!   load that began under the new subscription heard every notice and is kept, however
//!   late this cache's listener hears that the subscription came up. Copies made while
//!   the store was unreachable never relied on notices: the degraded bound limits them;
//! - every copy memory holds is in the notices' bookkeeping: memory tells the tier of
//!   each copy it lets go of, and the bookkeeping has no capacity of its own to evict by;
//! - the redis backend keeps no copies, except of values loaded while the store could not
//!   be read (degraded) or too large to share; those obey the same notices, and a
//!   degraded one is served only for the degraded bound, since an invalidation it could
//!   not hear may have passed.
mod deadlines;
mod found;
mod loading;

use deadlines::to_wire;

pub(crate) use found::{Codec, Found, Wrote};
pub(crate) use loading::Loading;
use loading::Loads;

use super::keys::{EntryKey, KeyError};
use super::lease::HeldLease;
use super::replica::Replica;
use super::store::{Lease, LeaseRequest, Notice, NoticeKind, Published, Read, StoreError, Wake};
use super::wire::WireError;
use crate::clock::Instant;
use crate::envelope::Envelope;
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How much longer a copy's bookkeeping may outlive the longest a memory copy lives.
const COPY_MARGIN: Duration = Duration::from_secs(60);

/// One cache's side of the shared store.
pub(crate) struct Tier<K, V> {
    pub(crate) replica: Arc<Replica>,
    codec: Codec<K, V>,
    name: Arc<str>,
    version: u32,
    /// Tiered: memory copies are kept. Redis: only while the store is unreachable.
    pub(crate) keeps_memory: bool,
    /// Value key → each memory copy: so a notice naming the value key finds it, and one
    /// no newer leaves it. Not bounded by a capacity of its own: an entry leaves when
    /// memory lets go of its copy ([`Tier::dropped`]), so every copy memory holds can be
    /// found (a bookkeeping that evicted on its own would leave copies deaf to notices).
    copies: moka::sync::Cache<String, MemoryCopy>,
    /// Value key → the loads of it running now.
    loading: Mutex<BTreeMap<String, Loads<K>>>,
    /// Value key → until when another replica is left to refresh it (its lease was held
    /// and its holder not due to be taken over before then), how long that holder will
    /// have held the lease by then, and the stale deadline of the value it was left to
    /// refresh (the wait was judged against that value: it holds for no other). A notice
    /// for the key ends it early.
    held_elsewhere: moka::sync::Cache<String, LeftToHolder>,
}

/// A refresh left to the replica holding the lease: see [`Tier::leave_to_holder`].
#[derive(Clone, Copy)]
struct LeftToHolder {
    until: Instant,
    held_after: Duration,
    stale_until: Instant,
}

/// What a notice needs to find a memory copy and judge it. The key is kept as any type,
/// so the table is one type for every cache (its code compiled once: see `any_key`).
#[derive(Clone)]
struct MemoryCopy {
    key: Arc<dyn Any + Send + Sync>,
    /// The fence its value was read or written under.
    fence: u64,
    /// The memory envelope's generation, to tell this copy from a newer one of the key.
    generation: u64,
    /// The subscription epoch its load began under (0: none was up).
    since: u64,
}

/// The key a memory copy was made of (always of its tier's key type).
fn key_of<K: Clone + 'static>(copy: &MemoryCopy) -> Option<K> {
    copy.key.downcast_ref::<K>().cloned()
}

impl<K, V> Tier<K, V>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    pub(crate) fn new(
        replica: Arc<Replica>,
        codec: Codec<K, V>,
        name: Arc<str>,
        version: u32,
        keeps_memory: bool,
        capacity: u64,
        lifetime: Option<Duration>,
    ) -> Self {
        // The copies outlive no memory entry by much: one memory never stored (a load
        // detached after its copy was noted) is dropped by time.
        let copies = moka::sync::Cache::builder();
        let copies = match lifetime {
            Some(lifetime) => copies.time_to_live(lifetime.saturating_add(COPY_MARGIN)),
            None => copies,
        };
        // Whatever ends a copy's bookkeeping (a notice, memory letting go, a newer copy,
        // its time), its bucket no longer needs to be heard for it.
        let store = replica.clone();
        let copies =
            copies.eviction_listener(move |value_key: Arc<String>, copy: MemoryCopy, _| {
                if copy.since != 0 {
                    store.store().copy_gone(&value_key);
                }
            });
        Tier {
            replica,
            codec,
            name,
            version,
            keeps_memory,
            copies: copies.build(),
            loading: Mutex::new(BTreeMap::new()),
            held_elsewhere: moka::sync::Cache::new(capacity),
        }
    }

    pub(crate) fn entry_key(&self, key: &K) -> Result<EntryKey, KeyError> {
        (self.codec.key)(&self.replica.prefix, &self.name, self.version, key)
    }

    /// Remembers a memory copy of `key` (of envelope `generation`) read or written under
    /// `fence` by a load that began under subscription epoch `since`, for the notices
    /// that will drop it. `false` when this replica does not hear the key's notices under
    /// that epoch now: the copy is remembered as one that relies on none.
    pub(crate) fn copied(
        &self,
        entry: &EntryKey,
        key: &K,
        fence: u64,
        generation: u64,
        since: u64,
    ) -> bool {
        // A copy that relies on notices keeps its key's bucket subscribed while it lives
        // (its bookkeeping's eviction listener lets go of it). Counted before the check,
        // so the bucket cannot go idle in between (a demoted copy holds no load's
        // `Listening`).
        let store = self.replica.store();
        if since != 0 {
            store.copy_kept(entry);
        }
        let heard = since != 0 && since == self.hearing() && self.hears(entry);
        if since != 0 && !heard {
            store.copy_gone(entry.value());
        }
        let since = if heard { since } else { 0 };
        let copy = MemoryCopy {
            key: Arc::new(key.clone()),
            fence,
            generation,
            since,
        };
        self.copies.insert(entry.value().to_owned(), copy);
        heard
    }

    /// Memory let go of its copy of `key` of envelope `generation` (evicted, expired,
    /// declined, invalidated): its bookkeeping goes too, unless a newer copy replaced it.
    pub(crate) fn dropped(&self, key: &K, generation: u64) {
        use moka::ops::compute::Op;
        let Ok(entry) = self.entry_key(key) else {
            return;
        };
        self.copies
            .entry(entry.value().to_owned())
            .and_compute_with(|held| match held {
                Some(held) if held.value().generation == generation => Op::Remove,
                _ => Op::Nop,
            });
    }

    /// The key of the memory copy `notice` (from another replica) outdates, forgotten, with
    /// the subscription epoch the copy's load began under and the fence it was read or
    /// written under: a publish or an invalidation
    /// under a fence above the copy's. The notice of the very write a copy was read from,
    /// arriving after the read, leaves it: dropping its bookkeeping there would leave the
    /// copy deaf to the invalidation that follows.
    pub(crate) fn noticed(&self, notice: &Notice) -> Option<(K, u64, u64)> {
        self.held_elsewhere.invalidate(&notice.key);
        if notice.kind == NoticeKind::Released {
            return None;
        }
        let copy = self.copies.get(&notice.key)?;
        if notice.fence <= copy.fence {
            return None;
        }
        self.copies
            .remove(&notice.key)
            .and_then(|copy| Some((key_of(&copy)?, copy.since, copy.fence)))
    }

    /// Forgets the memory copy of `entry`, whatever its fence: this replica is dropping
    /// or replacing it itself.
    pub(crate) fn forget(&self, entry: &EntryKey) {
        self.held_elsewhere.invalidate(entry.value());
        self.copies.invalidate(entry.value());
    }

    pub(crate) fn forget_copies(&self) {
        self.copies.invalidate_all();
        self.held_elsewhere.invalidate_all();
    }

    /// Forgets every memory copy that relies on notices (read from the store or written
    /// to it, under a fence) made by a load that began before subscription epoch
    /// `before`, and returns their keys, for memory to drop: notices may have been
    /// missed. A copy made while the store could not be reached (fence 0) never heard
    /// notices; the degraded bound already limits it, and it stays.
    pub(crate) fn forget_heard_copies(&self, before: u64) -> Vec<K> {
        self.held_elsewhere.invalidate_all();
        let mut heard: Vec<(std::sync::Arc<String>, K)> = self
            .copies
            .iter()
            .filter(|(_, copy)| copy.fence > 0 && copy.since < before)
            .filter_map(|(entry, copy)| Some((entry, key_of(&copy)?)))
            .collect();
        // In key order, not moka's: the same run drops them (and lets go of their
        // buckets) in the same order, which a simulation's seed relies on.
        heard.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        heard
            .into_iter()
            .map(|(entry, key)| {
                self.copies.invalidate(entry.as_str());
                key
            })
            .collect()
    }

    /// Until when another replica is left to refresh `entry`'s value that is stale at
    /// `stale_until`, and how long its holder will have held the lease by then. Nothing
    /// for any other value: a wait judged against a value since replaced (its holder
    /// published, or this refresh is of a newer copy) would take a new holder's lease over
    /// on the old value's deadline.
    pub(crate) fn held_elsewhere(
        &self,
        entry: &EntryKey,
        stale_until: Instant,
    ) -> Option<(Instant, Duration)> {
        let left = self.held_elsewhere.get(entry.value())?;
        (left.stale_until == stale_until).then_some((left.until, left.held_after))
    }

    /// Leaves the refresh of `entry`'s value that is stale at `stale_until` to the replica
    /// holding its lease until `until`, by when it will have held the lease for
    /// `held_after`: a refresh after that takes it over.
    pub(crate) fn leave_to_holder(
        &self,
        entry: &EntryKey,
        stale_until: Instant,
        until: Instant,
        held_after: Duration,
    ) {
        let left = LeftToHolder {
            until,
            held_after,
            stale_until,
        };
        self.held_elsewhere.insert(entry.value().to_owned(), left);
    }

    /// Invalidates every entry of this cache in the shared store; see
    /// [`Replica::invalidate_all`].
    pub(crate) async fn invalidate_all(&self) -> Result<usize, StoreError> {
        let pattern = EntryKey::cache_pattern(&self.replica.prefix, &self.name, self.version);
        let prefix = EntryKey::cache_prefix(&self.replica.prefix, &self.name, self.version);
        self.forget_copies();
        self.replica.invalidate_all(&pattern, &prefix).await
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

    /// Whether this replica hears `entry`'s notices now (its bucket is subscribed under
    /// the current subscription).
    pub(crate) fn hears(&self, entry: &EntryKey) -> bool {
        self.replica.store().hears(entry)
    }

    /// Resolves on the next notice naming `entry`, or at once when notices are not
    /// flowing. Register it before a read, so a publish right after the read still wakes.
    pub(crate) fn watch(&self, entry: &EntryKey) -> tokio::sync::oneshot::Receiver<Wake> {
        self.replica.store().watch(entry)
    }

    /// The subscription epoch while notices flow, 0 while they do not: a memory copy made
    /// by a load that began under another epoch may have missed the notice that drops it.
    pub(crate) fn hearing(&self) -> u64 {
        self.replica.store().hearing()
    }

    /// Whether notices flow, to wait for them to.
    pub(crate) fn subscription(&self) -> crate::shared::subscribed::SubscribedWatch {
        self.replica.store().subscription()
    }

    /// Reads `entry` from the shared store for the load `watching` registered, taking its
    /// lease when `lease` asks and the store grants it. A failed read is
    /// `Found { read: None, .. }` (degraded).
    pub(crate) async fn find(
        &self,
        entry: EntryKey,
        lease: Option<LeaseRequest>,
        now: Instant,
        generation: u64,
        watching: Loading<K, V>,
    ) -> Found<K, V> {
        let read = match self.replica.read(&entry, lease).await {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(target: "stampede", cache = %self.name, %error, "shared store unreachable; loading in this process");
                return Found {
                    key: entry,
                    read: None,
                    envelope: None,
                    lease: None,
                    too_large: false,
                    watching,
                    refresh: false,
                    write_through: None,
                };
            }
        };
        self.take_read(entry, read, lease, now, generation, watching)
            .await
    }

    /// What another replica's publish `notice` carried, as the read it saves would have
    /// found it, for a waiter whose last read found the key's fence at `read_fence`.
    /// `None` when a read must decide instead: no envelope rode along, the notice is this
    /// replica's own or older than that read (a late notice of a value since
    /// invalidated), invalidations are owed, or no recent server clock can judge it.
    pub(crate) fn read_in_notice(&self, notice: &Notice, read_fence: u64) -> Option<Read> {
        let value = notice.value.as_ref()?;
        if notice.own || notice.kind != NoticeKind::Published || self.replica.owes() {
            return None;
        }
        // The holder publishes under the fence the waiter's read saw, or a newer one.
        if notice.fence < read_fence {
            return None;
        }
        Some(Read {
            clock: self.replica.store().clock()?,
            envelope: Some(value.to_vec()),
            fence: notice.fence,
            lease: Lease::NotTaken,
            incarnation: String::new(),
        })
    }

    /// The second half of [`Tier::find`]: what `read` found, for the load `watching`
    /// registered.
    pub(crate) async fn take_read(
        &self,
        entry: EntryKey,
        read: Read,
        lease: Option<LeaseRequest>,
        now: Instant,
        generation: u64,
        watching: Loading<K, V>,
    ) -> Found<K, V> {
        watching.saw(read.fence);
        let (read, envelope, too_large) =
            (self.current(&entry, read, lease, now, generation, &watching)).await;
        let lease = match (read.lease, lease) {
            (Lease::Granted { .. }, Some(request)) => Some(HeldLease::new(
                self.replica.clone(),
                entry.clone(),
                request.token,
            )),
            _ => None,
        };
        Found {
            key: entry,
            read: Some(read),
            envelope,
            lease,
            too_large,
            watching,
            refresh: false,
            write_through: None,
        }
    }

    /// Publishes `envelope` under the fence `found`'s read returned (the lease's, when the
    /// read took it), with the source version the value carries. A publish the store
    /// answered ends the lease, stored or refused.
    ///
    /// Longer than a screen: encoding, the size check, the fenced write and what the answer
    /// means for the lease are one sequence.
    pub(crate) async fn publish(
        &self,
        found: &mut Found<K, V>,
        envelope: &Envelope<V>,
        now: Instant,
    ) -> Wrote {
        let Some(read) = &found.read else {
            return Wrote::Unconfirmed;
        };
        let server_now = read.clock.now_ms();
        let header = to_wire(envelope, server_now, now, read.fence);
        let tags = envelope.tags.as_ref().map_or(&[][..], |stamp| stamp.tags());
        let (bytes, wrote) = match (self.codec.encode)(
            &self.replica.wire,
            &header,
            tags,
            &envelope.value,
        ) {
            Ok(bytes) => (bytes, None),
            Err(WireError::Oversized { len, limit }) => {
                tracing::warn!(target: "stampede", key = %found.key, len, limit, "value too large to share (max_value_bytes): every replica loads it itself");
                (self.replica.wire.too_large(&header), Some(Wrote::TooLarge))
            }
            Err(error) => {
                tracing::warn!(target: "stampede", key = %found.key, %error, "value not written to the shared store");
                return Wrote::Unconfirmed;
            }
        };
        let publication = super::store::Publication {
            fence: read.fence,
            token: found.lease.as_ref().map(HeldLease::token),
            envelope: bytes,
            keep_until_ms: header.keep_until_ms,
            source_version: envelope.source_version,
            recompute: Duration::try_from_secs_f64(envelope.delta).unwrap_or_default(),
            incarnation: read.incarnation.clone(),
            write_through: found.write_through,
        };
        match self.replica.store().publish(&found.key, publication).await {
            Ok(published) => {
                if let Some(lease) = found.lease.take() {
                    lease.published();
                }
                match published {
                    Published::RefusedByFence
                    | Published::RefusedAfterRestart
                    | Published::RefusedBySourceVersion => {
                        tracing::debug!(target: "stampede", key = %found.key, outcome = ?published, "publish refused: a newer load or an invalidation got there first");
                        Wrote::Refused
                    }
                    Published::OutOfMemory => Wrote::Unconfirmed,
                    Published::Stored | Published::AlreadyExpired => wrote.unwrap_or(Wrote::Stored),
                }
            }
            Err(error) => {
                // It may have run: the lease goes back (only if still ours) when dropped.
                tracing::debug!(target: "stampede", key = %found.key, %error, "value not written to the shared store");
                Wrote::Unconfirmed
            }
        }
    }
}

impl<K, V> Drop for Tier<K, V> {
    /// The copies' eviction listener lets go of each copy's bucket; a cache dropped
    /// while its runtime lives on would otherwise keep them subscribed for good.
    fn drop(&mut self) {
        self.copies.invalidate_all();
        self.copies.run_pending_tasks();
    }
}

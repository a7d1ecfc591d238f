//! The seam between the loader and a store shared by every replica.
//!
//! A shared store works in bytes (envelopes from [`wire`](super::wire)) at keys from
//! [`keys`](super::keys); every call is bounded by the backend's response timeout and
//! answers `Err(StoreError)` rather than waiting longer, so a slow or dead store costs a
//! caller at most one timeout before the loader falls back to memory and its own flight.
//!
//! # The protocol
//! - [`SharedStore::read`] returns the envelope, the server's clock, the key's fence and,
//!   if asked, a lease: taken with a new fence only when nothing servable is there (or
//!   always, for a refresh), so a value published a moment ago is returned instead. The
//!   replica names its lease with a token of its own, so a read whose reply was lost
//!   (a timeout, a dropped connection) can still be released by that token, and a read
//!   sent again gets the same lease back instead of waiting on itself.
//! - A lease held by another replica is a hint, never a promise: a holder that has not
//!   published for as long as the key's recompute time makes plausible has gone quiet,
//!   and the next read that asks takes the lease over (a new fence, so the old holder's
//!   late publish is refused).
//! - [`SharedStore::publish`] writes an envelope only if the key's fence is still the one
//!   the load started under: no newer lease, no invalidation since. A refused publish
//!   costs nothing but the write; its callers still get their value.
//! - [`SharedStore::invalidate`] raises the fence and deletes the value, so a load that
//!   started before it, on any replica, cannot store its result afterwards.
//!   [`SharedStore::invalidate_at`] deletes it only for a source version above both the
//!   key's high-water mark and the stored value's own version: one below the mark
//!   changes nothing, and one at or below the stored value's version keeps the value but
//!   still raises the fence (copies elsewhere may be older than the value).
//! - [`SharedStore::watch`] and [`SharedStore::events`] deliver the notices every
//!   publish, invalidation and lease release sends on the key's bucket channel (the key
//!   and its fence; a publish of a small value carries the value too, so a replica
//!   waiting for it answers without reading again). A replica hears the buckets it
//!   [listens](SharedStore::listen) to.
//!
//! # Time
//! Envelope deadlines are server milliseconds. The loader computes them from the
//! [`ServerClock`] its read returned plus local monotonic time elapsed since, rather than
//! inside the publish script: the envelope stays one opaque byte string built in one
//! place, and the estimate can only lag the server's clock (by the read's return trip),
//! which makes values fresh a few milliseconds shorter, never longer. The store's expiry
//! (PX) is computed inside the publish script from the server's own `TIME`.
use crate::clock::StoreInstant as Instant;
use futures_util::future::BoxFuture;
use std::fmt;
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};

use super::acknowledgement::{Acknowledgements, Hearer};
use super::keys::EntryKey;
use super::subscribed::SubscribedWatch;
use crate::hearing::HearingLease;

/// A failure of the shared store. The loader treats it as a miss (or skips the write) and
/// counts it; it never fails a caller that the origin can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreError {
    /// No answer within the response timeout.
    Timeout(Duration),
    /// The circuit breaker is open: the store was not asked.
    Unavailable,
    /// The store answered with an error, or the connection failed.
    Backend(String),
}

impl StoreError {
    /// Whether the store may have done what it was asked (the request may have reached it
    /// and only its answer was lost); a refused call was never sent.
    pub(crate) fn may_have_run(&self) -> bool {
        !matches!(self, StoreError::Unavailable)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout(after) => {
                write!(f, "no answer from the shared store within {after:?}")
            }
            StoreError::Unavailable => {
                f.write_str("the shared store is unavailable (circuit open)")
            }
            StoreError::Backend(message) => write!(f, "shared store error: {message}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// When a read should take the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseFor {
    /// A miss: only if nothing servable (fresh or stale) is stored.
    Miss,
    /// A stale-window or early refresh: whatever is stored.
    Refresh,
    /// A forced refresh: whatever is stored and whoever holds it, so every load that
    /// started before it is fenced out.
    Force,
}

/// A replica's name for one lease it asks for: random, so no other replica's matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LeaseToken(pub(crate) u64);

impl LeaseToken {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        LeaseToken(fastrand::u64(..))
    }

    /// A token whose first 8 hex digits are those of `replica`'s id (the rest random), so
    /// a replica waiting on the lease can tell whose it is: what it reports as the owner.
    pub(crate) fn of_replica(replica: &str) -> Self {
        let tag = replica
            .get(..8)
            .and_then(|tag| u32::from_str_radix(tag, 16).ok())
            .unwrap_or_default();
        LeaseToken(u64::from(tag) << 32 | u64::from(fastrand::u32(..)))
    }

    /// The replica tag of a token written by [`LeaseToken::of_replica`].
    pub(crate) fn replica(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A replica's name for one permit of a fleet-wide admission (see
/// [`SharedStore::take_permits`]): its replica tag, then 64 random bits, so two loads'
/// tokens never meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PermitToken {
    replica: u32,
    random: u64,
}

impl PermitToken {
    /// A token tagged with the first 8 hex digits of `replica`'s id.
    pub(crate) fn of_replica(replica: &str) -> Self {
        let replica = replica
            .get(..8)
            .and_then(|tag| u32::from_str_radix(tag, 16).ok())
            .unwrap_or_default();
        PermitToken {
            replica,
            random: fastrand::u64(..),
        }
    }
}

impl fmt::Display for PermitToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}{:016x}", self.replica, self.random)
    }
}

/// A read's request for the key's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseRequest {
    pub(crate) purpose: LeaseFor,
    /// How long the lease holds if its owner never publishes or releases it.
    pub(crate) ttl: Duration,
    pub(crate) token: LeaseToken,
    /// Take the lease from a holder silent (no beat) for this long: lost, stalled, dead.
    pub(crate) quiet_after: Option<Duration>,
    /// Take the lease from a holder that has held it this long, beating or not.
    pub(crate) held_after: Option<Duration>,
    /// The recompute time this replica expects, recorded in a granted lease for the
    /// replicas that wait on it.
    pub(crate) recompute: Option<Duration>,
}

/// What a read found about the key's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Not asked for, not needed because a servable value is there, or not writable
    /// (the store's memory is full).
    NotTaken,
    /// Ours: load, then publish (or release) with this fence. `took_over`: from another
    /// replica that had held it too long without publishing.
    Granted { fence: u64, took_over: bool },
    /// Another replica is loading.
    HeldBy(Holder),
}

/// Another replica's hold on a key's lease, as a read saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    /// Until the lease lapses by its TTL.
    pub(crate) remaining: Duration,
    /// Since it was granted (or taken over).
    pub(crate) held_for: Duration,
    /// Since its holder's last sign of life (see [`SharedStore::beat`]).
    pub(crate) silent_for: Duration,
    /// The recompute time its holder expected, if it knew one.
    pub(crate) recompute: Option<Duration>,
    /// The holder's replica, as its lease token names it (see [`LeaseToken::of_replica`]).
    pub(crate) replica: Option<u32>,
}

/// The server's clock at a read, carried forward with local monotonic time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerClock {
    server_ms: u64,
    at: Instant,
}

impl ServerClock {
    pub(crate) fn new(server_ms: u64, at: Instant) -> Self {
        Self { server_ms, at }
    }

    /// The server's Unix milliseconds when its clock was read.
    pub(crate) fn read_ms(&self) -> u64 {
        self.server_ms
    }

    /// How long ago the server's clock was read.
    pub(crate) fn age(&self) -> std::time::Duration {
        self.at.elapsed()
    }

    /// The server's Unix milliseconds now, estimated from the local monotonic clock.
    pub(crate) fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.at.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.server_ms.saturating_add(elapsed)
    }
}

/// One read of a key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Read {
    pub(crate) clock: ServerClock,
    /// The stored envelope's bytes, if any string is stored there.
    pub(crate) envelope: Option<Vec<u8>>,
    /// The key's fence now: publish under it when no lease was taken.
    pub(crate) fence: u64,
    pub(crate) lease: Lease,
    /// The server's run id at the read (empty when the read did not ask): a publish under
    /// this read's fence is refused by a server that restarted since.
    pub(crate) incarnation: String,
}

/// A value to publish.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Publication {
    /// The fence of the lease or of the read the load started from.
    pub(crate) fence: u64,
    /// The lease this publish ends, if the load holds one.
    pub(crate) token: Option<LeaseToken>,
    pub(crate) envelope: Vec<u8>,
    /// The envelope's `keep_until`: the store's expiry.
    pub(crate) keep_until_ms: u64,
    /// The source version the value was read at, if the cache tracks one.
    pub(crate) source_version: Option<u64>,
    /// How long the load took, kept with the key's fence for the replicas that will wait
    /// on its next lease.
    pub(crate) recompute: Duration,
    /// The run id of the server that the load's read found (see [`Read::incarnation`]).
    pub(crate) incarnation: String,
    /// A write-through's own invalidation: the fence it raised, and the fence its start
    /// stands at (the server's milliseconds then, × 1024). Refused after any other
    /// invalidation at or above that start: a write that began before an invalidation is
    /// the older one.
    pub(crate) write_through: Option<WriteThrough>,
}

/// Where a write-through (an insert) began, in fences (see [`Publication::write_through`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteThrough {
    /// The fence its own invalidation raised the key's to.
    pub(crate) own: u64,
    /// The fence of its start: no invalidation at or above it may have come before it.
    pub(crate) began: u64,
}

/// What became of a publication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Published {
    Stored,
    /// A newer lease or an invalidation raised the fence since the load started.
    RefusedByFence,
    /// The server restarted (or failed over) since the load read: its fence proves nothing.
    RefusedAfterRestart,
    /// An invalidation named a source version above the value's.
    RefusedBySourceVersion,
    /// `keep_until` had passed by the server's clock: nothing to store.
    AlreadyExpired,
    /// The store's memory is full (`noeviction`): nothing stored.
    OutOfMemory,
}

/// What an invalidation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalidated {
    /// The value was dropped and the fence raised to this.
    Fenced { fence: u64 },
    /// A source version at or below what the store has seen: it arrived late.
    Late,
}

/// What a scan for a cache's entries found, and what it could not scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    pub(crate) found: Vec<EntryKey>,
    pub(crate) failed: Option<ScanFailure>,
}

/// The part of a scan that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanFailure {
    /// The shards not scanned; `None`: the shards could not even be listed.
    pub(crate) shards: Option<Vec<String>>,
    pub(crate) error: StoreError,
}

/// A notice from some replica (this one included): on a key's bucket channel, or a
/// tag's on the prefix's channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    pub(crate) kind: NoticeKind,
    /// The value key ([`EntryKey::value`]).
    pub(crate) key: String,
    pub(crate) fence: u64,
    /// Sent by this store instance (a replica ignores its own notices).
    pub(crate) own: bool,
    /// A publish's envelope, when it was small enough to ride along: a waiter answers
    /// from it without reading the key again.
    pub(crate) value: Option<std::sync::Arc<[u8]>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoticeKind {
    /// A value was stored.
    Published,
    /// The value was dropped and the fence raised.
    Invalidated,
    /// A lease was given up without a value: a waiter may take it now.
    Released,
    /// A tag's version rose: `key` is the tag, `fence` its new version.
    Tag,
}

/// A replica's request for permits of a fleet-wide admission (see
/// [`SharedStore::take_permits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PermitRequest {
    /// The admission's name.
    pub(crate) admission: std::sync::Arc<str>,
    /// Permits held at once, fleet-wide.
    pub(crate) limit: usize,
    /// How long a permit holds unless renewed: a dead holder's comes back after this.
    pub(crate) ttl: Duration,
    /// How long this replica's waiting loads count in the other replicas' shares unless
    /// it asks again.
    pub(crate) wait_ttl: Duration,
    /// A permit given back in the same call (a load ended while this replica's loads
    /// wait).
    pub(crate) returned: Option<PermitToken>,
    /// One token per waiting load, in the order they queued.
    pub(crate) tokens: Vec<PermitToken>,
}

/// What a [`PermitRequest`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Permits {
    /// The tokens granted: those granted already (a call sent again), then new ones in
    /// the order they were asked for.
    pub(crate) granted: Vec<PermitToken>,
    /// This replica's fair share of the limit now (max-min fair over what each replica
    /// holds and waits for).
    pub(crate) share: usize,
    /// Permits held fleet-wide after the call.
    pub(crate) held: usize,
}

/// What the notice subscription reports to whoever keeps copies in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreEvent {
    Notice(Notice),
    /// The subscription dropped: notices may have been missed, memory copies are
    /// unconfirmed until [`StoreEvent::Subscribed`].
    SubscriptionLost,
    /// Subscribed (again): notices flow, under this epoch (see [`SharedStore::hearing`]).
    /// Copies and loads whose reads began under an earlier epoch may have missed a
    /// notice; those that began under this one did not.
    Subscribed(u64),
    /// A marker after everything sent before it (see [`Passage`]): a listener takes it
    /// ([`Passage::taken`]) and goes on.
    ///
    /// [`Passage`]: crate::shared::acknowledgement::Passage
    /// [`Passage::taken`]: crate::shared::acknowledgement::Passage::taken
    Passage(std::sync::Arc<crate::shared::acknowledgement::Passage>),
}

/// A load's hold on its key's notices ([`SharedStore::listen`]).
pub(crate) struct Listening {
    epoch: u64,
    _hold: Box<dyn Send + Sync>,
}

impl Listening {
    pub(crate) fn new(epoch: u64, hold: Box<dyn Send + Sync>) -> Self {
        Self { epoch, _hold: hold }
    }

    /// The subscription epoch the key is heard under (0: it is not).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// Why a [`SharedStore::watch`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wake {
    Notice(Notice),
    /// The subscription dropped: re-read now, a notice may have been lost.
    SubscriptionLost,
}

/// A shared store's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StoreStats {
    /// Reads that found an envelope.
    pub(crate) hits: u64,
    /// Reads that found nothing.
    pub(crate) misses: u64,
    /// Calls that reached Redis and failed or timed out (calls the open breaker refused
    /// are not counted: `degraded` measures them).
    pub(crate) errors: u64,
    /// Stored envelopes that could not be decoded.
    pub(crate) decode_failures: u64,
    pub(crate) notices_sent: u64,
    pub(crate) notices_received: u64,
    /// Notice buckets this replica subscribes to (in use or kept for memory copies).
    pub(crate) notice_buckets: usize,
    /// Notices flow: the subscription is up.
    pub(crate) subscribed: bool,
    /// Calls that timed out whose answer came within the grace that followed.
    pub(crate) late_answers: u64,
    /// Leases released by their token after the reply that granted them was lost.
    pub(crate) orphans_released: u64,
    pub(crate) breaker: BreakerState,
    /// How often the breaker opened.
    pub(crate) breaker_opened: u64,
    /// Total time the breaker stayed open or half-open.
    pub(crate) degraded: Duration,
    /// A recent failure that points at a setting (credentials, a permission, TLS, the
    /// Sentinels), with what to change.
    pub(crate) problem: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum BreakerState {
    #[default]
    Closed,
    Open,
    HalfOpen,
}

/// A store every replica shares. Object safe: the runtime picks the backend at run time.
pub(crate) trait SharedStore: Send + Sync + 'static {
    fn read<'a>(
        &'a self,
        key: &'a EntryKey,
        lease: Option<LeaseRequest>,
    ) -> BoxFuture<'a, Result<Read, StoreError>>;

    fn publish<'a>(
        &'a self,
        key: &'a EntryKey,
        publication: Publication,
    ) -> BoxFuture<'a, Result<Published, StoreError>>;

    fn invalidate<'a>(
        &'a self,
        key: &'a EntryKey,
    ) -> BoxFuture<'a, Result<Invalidated, StoreError>>;

    fn invalidate_at<'a>(
        &'a self,
        key: &'a EntryKey,
        source_version: u64,
    ) -> BoxFuture<'a, Result<Invalidated, StoreError>>;

    /// Asks every replica that hears it to acknowledge what was sent to it before (a
    /// write's notice among it: the ask goes out from the node that published it, the one
    /// owning `near`), and lists the replicas whose hearing leases may still run, each
    /// with the moment its lease ends at the latest. `acks` collects the answers.
    fn ask_acknowledgements<'a>(
        &'a self,
        near: &'a str,
        acks: &'a Acknowledgements,
    ) -> BoxFuture<'a, Result<Vec<Hearer>, StoreError>>;

    /// A new registration for the acknowledgements of one write.
    fn acknowledgements(&self) -> Acknowledgements;

    /// This replica's hearing lease: whether its heard copies may be served now.
    fn hearing_lease(&self) -> std::sync::Arc<HearingLease>;

    /// Gives the lease back without publishing (the load failed, or its grant's reply was
    /// lost); only its holder's token releases it. `true` if it was released.
    fn release<'a>(
        &'a self,
        key: &'a EntryKey,
        token: LeaseToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// A sign of life from the holder of the lease `token` names, while its load runs:
    /// `true` while the lease is still its own.
    fn beat<'a>(
        &'a self,
        key: &'a EntryKey,
        token: LeaseToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Permits of a fleet-wide admission, in one call: gives back `request.returned`,
    /// then grants some of `request.tokens` (never past the limit or this replica's fair
    /// share) and records the rest as waiting.
    fn take_permits(&self, request: PermitRequest) -> BoxFuture<'_, Result<Permits, StoreError>>;

    /// Keeps a permit alive for another `ttl`: `true` while it is still the token's (a
    /// holder silent past its TTL has lost it).
    fn renew_permit<'a>(
        &'a self,
        admission: &'a str,
        token: PermitToken,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Gives a permit back: `true` if it was still the token's.
    fn give_permit<'a>(
        &'a self,
        admission: &'a str,
        token: PermitToken,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Raises `tag`'s version above every one it had (the server's clock in
    /// microseconds, or one more) and announces it; kept `keep` after this.
    fn invalidate_tag<'a>(
        &'a self,
        tag: &'a str,
        keep: Duration,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// The versions of `tags`, in order (0 for a tag never invalidated, or forgotten).
    fn tag_versions<'a>(
        &'a self,
        tags: &'a [std::sync::Arc<str>],
    ) -> BoxFuture<'a, Result<Vec<u64>, StoreError>>;

    /// Every entry that has a key matching `pattern` (see [`EntryKey::cache_pattern`]),
    /// on the given shards (every shard with `None`): what a cache-wide invalidation must
    /// reach. A shard that cannot be scanned does not stop the others.
    fn entries<'a>(&'a self, pattern: &'a str, shards: Option<&'a [String]>)
        -> BoxFuture<'a, Scan>;

    /// The shard `key` lives on (`""` for a single server).
    fn shard_of(&self, key: &EntryKey) -> String;

    /// Whether every key lives on one server, so one clock stamps all of them (not a
    /// cluster's several masters).
    fn one_server(&self) -> bool;

    /// Makes this replica hear `key`'s notices from now on, before a load's first read:
    /// the returned [`Listening`] holds it until dropped, and names the subscription
    /// epoch the key is heard under (0 when it is not: no subscription, or none
    /// confirmed in time).
    fn listen<'a>(&'a self, key: &'a EntryKey) -> BoxFuture<'a, Listening>;

    /// Whether `key`'s notices reach this replica now: its bucket is confirmed under the
    /// current subscription.
    fn hears(&self, key: &EntryKey) -> bool;

    /// A memory copy of `key` relies on its notices from now until [`SharedStore::copy_gone`]
    /// names its value key. Call it while a [`Listening`] of the key is held.
    fn copy_kept(&self, key: &EntryKey);

    /// A copy [`SharedStore::copy_kept`] counted is gone.
    fn copy_gone(&self, value_key: &str);

    /// Resolves on the next notice for `key`, or when the subscription drops. Register
    /// before re-reading, so a publish between the read and the wait is not missed.
    /// While the subscription is down it resolves at once with `SubscriptionLost`: a
    /// waiter must then wait out the lease (bounded) instead of re-reading in a loop.
    fn watch(&self, key: &EntryKey) -> oneshot::Receiver<Wake>;

    /// Every key notice (tags' go to [`SharedStore::tag_events`]) and subscription
    /// change, for the caches' listeners. A receiver that falls
    /// behind gets `Lagged`: notices were skipped, so it must treat it as a lost
    /// subscription.
    fn events(&self) -> broadcast::Receiver<StoreEvent>;

    /// Every tag notice and subscription change, for the runtime's tag book: the same
    /// as [`SharedStore::events`] but for tags instead of keys.
    fn tag_events(&self) -> broadcast::Receiver<StoreEvent>;

    /// Whether the notice subscription is up, to wait for it to come up.
    fn subscription(&self) -> SubscribedWatch;

    /// The server's clock as of the latest read, while it is recent enough to judge a
    /// value by (never behind the server).
    fn clock(&self) -> Option<ServerClock>;

    /// This replica's id: 16 hex digits, random per connection, in its notices and (the
    /// first 8) in its lease tokens.
    fn replica(&self) -> &str;

    /// The epoch of the subscription while notices flow, 0 while they do not. Each
    /// subscription gets a higher epoch than the last, so a read of a key whose bucket
    /// [`SharedStore::listen`] confirmed under epoch `e` has heard every notice of that
    /// key since as long as the epoch is still `e`: unlike the
    /// flag, this tells a copy made after the subscription came up from one made before
    /// it, whichever order a listener hears of them.
    fn hearing(&self) -> u64;

    /// Records an envelope the loader read but could not decode.
    fn count_decode_failure(&self);

    /// Records a lease released by its token after the reply that granted it was lost.
    fn count_orphan_released(&self);

    fn stats(&self) -> StoreStats;
}

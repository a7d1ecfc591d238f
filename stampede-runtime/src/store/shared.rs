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
//!   always, for a refresh), so a value published a moment ago is returned instead.
//! - [`SharedStore::publish`] writes an envelope only if the key's fence is still the one
//!   the load started under: no newer lease, no invalidation since. A refused publish
//!   costs nothing but the write; its callers still get their value.
//! - [`SharedStore::invalidate`] raises the fence and deletes the value, so a load that
//!   started before it, on any replica, cannot store its result afterwards.
//!   [`SharedStore::invalidate_at`] does so only for a source version above both the
//!   key's high-water mark and the stored value's own version: a late invalidation
//!   changes nothing.
//! - [`SharedStore::watch`] and [`SharedStore::events`] deliver the slim notices every
//!   publish and invalidation sends (the key and its fence, never the value).
//!
//! # Time
//! Envelope deadlines are server milliseconds. The loader computes them from the
//! [`ServerClock`] its read returned plus local monotonic time elapsed since, rather than
//! inside the publish script: the envelope stays one opaque byte string built in one
//! place, and the estimate can only lag the server's clock (by the read's return trip),
//! which makes values fresh a few milliseconds shorter, never longer. The store's expiry
//! (PX) is computed inside the publish script from the server's own `TIME`.
use futures_util::future::BoxFuture;
use std::fmt;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, oneshot};

use super::keys::EntryKey;
use super::wire::{Header, Wire};
use serde::de::DeserializeOwned;

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
}

/// A read's request for the key's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseRequest {
    pub(crate) purpose: LeaseFor,
    /// How long the lease holds if its owner never publishes or releases it.
    pub(crate) ttl: Duration,
}

/// What a read found about the key's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Not asked for, or not needed because a servable value is there.
    NotTaken,
    /// Ours: load, then publish (or release) with this fence.
    Granted { fence: u64 },
    /// Another replica is loading; its lease lapses after `remaining`.
    HeldBy { remaining: Duration },
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
}

/// A value to publish.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Publication {
    /// The fence of the lease or of the read the load started from.
    pub(crate) fence: u64,
    pub(crate) envelope: Vec<u8>,
    /// The envelope's `keep_until`: the store's expiry.
    pub(crate) keep_until_ms: u64,
    /// The source version the value was read at, if the cache tracks one.
    pub(crate) source_version: Option<u64>,
}

/// What became of a publication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Published {
    Stored,
    /// A newer lease or an invalidation raised the fence since the load started.
    RefusedByFence,
    /// An invalidation named a source version above the value's.
    RefusedBySourceVersion,
    /// `keep_until` had passed by the server's clock: nothing to store.
    AlreadyExpired,
}

/// What an invalidation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invalidated {
    /// The value was dropped and the fence raised to this.
    Fenced { fence: u64 },
    /// A source version at or below what the store has seen: it arrived late.
    Late,
}

/// A notice from some replica (this one included) on the prefix's channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    pub(crate) kind: NoticeKind,
    /// The value key ([`EntryKey::value`]).
    pub(crate) key: String,
    pub(crate) fence: u64,
    /// Sent by this store instance (a replica ignores its own notices).
    pub(crate) own: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoticeKind {
    /// A value was stored.
    Published,
    /// The value was dropped and the fence raised.
    Invalidated,
    /// A lease was given up without a value: a waiter may take it now.
    Released,
}

/// What the notice subscription reports to whoever keeps copies in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreEvent {
    Notice(Notice),
    /// The subscription dropped: notices may have been missed, memory copies are
    /// unconfirmed until [`StoreEvent::Subscribed`].
    SubscriptionLost,
    /// Subscribed (again): notices flow.
    Subscribed,
}

/// Why a [`SharedStore::watch`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wake {
    Notice(Notice),
    /// The subscription dropped: re-read now, a notice may have been lost.
    SubscriptionLost,
}

/// A shared store's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SharedStats {
    /// Reads that found an envelope.
    pub(crate) hits: u64,
    /// Reads that found nothing.
    pub(crate) misses: u64,
    /// Calls that reached Redis and failed or timed out (calls the open breaker refused
    /// are not counted: `degraded` measures them).
    pub(crate) errors: u64,
    /// Stored envelopes that could not be decoded ([`decode_envelope`]).
    pub(crate) decode_failures: u64,
    pub(crate) notices_sent: u64,
    pub(crate) notices_received: u64,
    /// Notices flow: the subscription is up.
    pub(crate) subscribed: bool,
    pub(crate) breaker: BreakerState,
    /// How often the breaker opened.
    pub(crate) breaker_opened: u64,
    /// Total time the breaker stayed open or half-open.
    pub(crate) degraded: Duration,
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

    /// Gives the lease back without publishing (the load failed); only its owner's fence
    /// releases it. `true` if it was released.
    fn release<'a>(
        &'a self,
        key: &'a EntryKey,
        fence: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Every entry that has a key matching `pattern` (see [`EntryKey::cache_pattern`]),
    /// on every node: what a cache-wide invalidation must reach.
    fn entries<'a>(&'a self, pattern: &'a str) -> BoxFuture<'a, Result<Vec<EntryKey>, StoreError>>;

    /// Resolves on the next notice for `key`, or when the subscription drops. Register
    /// before re-reading, so a publish between the read and the wait is not missed.
    /// While the subscription is down it resolves at once with `SubscriptionLost`: a
    /// waiter must then wait out the lease (bounded) instead of re-reading in a loop.
    fn watch(&self, key: &EntryKey) -> oneshot::Receiver<Wake>;

    /// Every notice and subscription change, for tiered nodes. A receiver that falls
    /// behind gets `Lagged`: notices were skipped, so it must treat it as a lost
    /// subscription.
    fn events(&self) -> broadcast::Receiver<StoreEvent>;

    /// Records an envelope the loader read but could not decode.
    fn count_decode_failure(&self);

    fn stats(&self) -> SharedStats;
}

/// Decodes an envelope read from `store`; bytes that are not a usable envelope are a miss,
/// logged at warn level and counted, never a panic.
pub(crate) fn decode_envelope<V: DeserializeOwned + 'static>(
    store: &dyn SharedStore,
    wire: &Wire,
    key: &EntryKey,
    bytes: &[u8],
) -> Option<(Header, V)> {
    match wire.decode(bytes) {
        Ok(decoded) => Some(decoded),
        Err(error) => {
            tracing::warn!(key = %key, %error, "unusable envelope in the shared store, treated as a miss");
            store.count_decode_failure();
            None
        }
    }
}

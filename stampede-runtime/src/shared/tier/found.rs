//! What one cache's side of the shared store works with: the serde codec its types allow
//! ([`Codec`]), what a read found ([`Found`]: the bytes decoded, and retired when one of
//! their tags moved) and what became of a publish ([`Wrote`]).
use super::super::keys::{EntryKey, KeyError};
use super::super::lease::HeldLease;
use super::super::store::{Holder, Lease, LeaseFor, LeaseRequest, Read, WriteThrough};
use super::super::wire::TagVersion;
use super::super::wire::{Decoded, Header, Wire, WireError};
use super::deadlines::to_memory;
use super::{Loading, Tier};
use crate::clock::Instant;
use crate::envelope::Envelope;
use crate::tags::{TagStamp, Verdict};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The serde operations of one cache's key and value types, captured where the types
/// are known to allow them, so the loader needs no serde bounds.
pub(crate) struct Codec<K, V> {
    pub(super) key: fn(&str, &str, u32, &K) -> Result<EntryKey, KeyError>,
    pub(super) encode: Encode<V>,
    pub(super) decode: fn(&Wire, &[u8]) -> Result<Decoded<V>, WireError>,
}

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
            encode: |wire, header, tags, value| wire.encode(header, tags, value),
            decode: |wire, bytes| wire.decode(bytes),
        }
    }
}

/// How a value is written into an envelope, with its header and tags.
type Encode<V> = fn(&Wire, &Header, &[TagVersion], &V) -> Result<Vec<u8>, WireError>;

/// What a cache found in the shared store before calling its origin.
pub(crate) struct Found<K, V> {
    pub(crate) key: EntryKey,
    /// The server's clock and the key's fence at the read: the publish goes under it.
    /// `None`: the store could not be read (degraded).
    pub(crate) read: Option<Read>,
    /// The stored value, as a memory envelope, if one decoded.
    pub(crate) envelope: Option<Envelope<V>>,
    /// The key's lease, when this read took it: the publish ends it, anything else gives
    /// it back.
    pub(crate) lease: Option<HeldLease>,
    /// The value is too large to share: each replica loads it and keeps its own copy.
    pub(crate) too_large: bool,
    /// This load, registered for the notices that detach it.
    pub(crate) watching: Loading<K, V>,
    /// A refresh's read (stale-window, early or forced), not a miss's.
    pub(crate) refresh: bool,
    /// A write-through's: where it began, so a later invalidation refuses its publish.
    pub(crate) write_through: Option<WriteThrough>,
}

impl<K, V> Found<K, V> {
    /// Another replica holds the key's lease.
    pub(crate) fn holder(&self) -> Option<Holder> {
        match self.read.as_ref()?.lease {
            Lease::HeldBy(holder) => Some(holder),
            _ => None,
        }
    }

    /// This read took the lease over from a holder that had gone quiet.
    pub(crate) fn took_over(&self) -> bool {
        matches!(
            self.read.as_ref().map(|read| read.lease),
            Some(Lease::Granted {
                took_over: true,
                ..
            })
        )
    }
}

/// What became of a publish, for what memory keeps of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrote {
    /// Stored (or already past its time there): every replica can read it.
    Stored,
    /// Refused: a newer load or an invalidation got there first. Nobody keeps it.
    Refused,
    /// Nobody knows: no answer, or memory full.
    Unconfirmed,
    /// Too large to share: other replicas were told to load it themselves.
    TooLarge,
}

impl<K, V> Tier<K, V> {
    /// What `read` found, as a memory envelope, unless its tags retired it (and whether
    /// it says the value is too large to share). A value its tags retired is a miss: for
    /// the fleet to load it once, the lease is taken as a refresh takes it (the retired
    /// value still stands there), with a read that then stands for the first.
    pub(super) async fn current(
        &self,
        entry: &EntryKey,
        read: Read,
        lease: Option<LeaseRequest>,
        now: Instant,
        generation: u64,
        watching: &Loading<K, V>,
    ) -> (Read, Option<Envelope<V>>, bool) {
        let (mut envelope, too_large) = self.decode(entry, &read, now, generation);
        let Some(tagged) = envelope.take_if(|envelope| envelope.tags.is_some()) else {
            return (read, envelope, too_large);
        };
        if let Some(current) = self.unless_retired(tagged).await {
            return (read, Some(current), too_large);
        }
        let again = match (read.lease, lease) {
            (Lease::NotTaken, Some(request)) if request.purpose == LeaseFor::Miss => LeaseRequest {
                purpose: LeaseFor::Refresh,
                ..request
            },
            _ => return (read, None, too_large),
        };
        let Ok(reread) = self.replica.read(entry, Some(again)).await else {
            return (read, None, too_large);
        };
        watching.saw(reread.fence);
        let (mut envelope, too_large) = self.decode(entry, &reread, now, generation);
        if let Some(tagged) = envelope.take_if(|envelope| envelope.tags.is_some()) {
            envelope = self.unless_retired(tagged).await;
        }
        (reread, envelope, too_large)
    }

    /// What `read` holds, as a memory envelope (its tags not yet checked), and whether it
    /// says the value is too large to share.
    pub(super) fn decode(
        &self,
        entry: &EntryKey,
        read: &Read,
        now: Instant,
        generation: u64,
    ) -> (Option<Envelope<V>>, bool) {
        let Some(bytes) = read.envelope.as_deref() else {
            return (None, false);
        };
        match (self.codec.decode)(&self.replica.wire, bytes) {
            Ok((header, tags, value)) => {
                let mut envelope = to_memory(&header, value, read.clock.now_ms(), now, generation);
                if !tags.is_empty() {
                    envelope.tag(TagStamp::recorded(&self.replica.tags, tags));
                }
                (Some(envelope), false)
            }
            Err(WireError::TooLargeToShare { stale_until_ms }) => {
                (None, stale_until_ms > read.clock.now_ms())
            }
            Err(error) => {
                tracing::warn!(target: "stampede", key = %entry, %error, "unusable envelope in the shared store, treated as a miss");
                self.replica.store().count_decode_failure();
                (None, false)
            }
        }
    }

    /// `envelope` unless one of its tags moved past the version it recorded; tags this
    /// replica does not know are read from the store first (one that cannot be read
    /// retires the value here: it is loaded instead of served unchecked).
    ///
    /// While the hearing lease does not hold, the book may have missed a move (a
    /// subscription lost without a word): the store's versions decide instead.
    pub(super) async fn unless_retired(&self, envelope: Envelope<V>) -> Option<Envelope<V>> {
        let stamp = envelope.tags.clone()?;
        if !self.replica.store().hearing_lease().holds() {
            if self.replica.tags.check(&stamp) == Verdict::Retired {
                return None;
            }
            let names: Vec<std::sync::Arc<str>> =
                stamp.tags().iter().map(|(tag, _)| tag.clone()).collect();
            let versions = self.replica.store().tag_versions(&names).await.ok()?;
            let moved = (stamp.tags().iter().zip(&versions))
                .any(|((_, recorded), &now)| now > *recorded || (now == 0 && *recorded > 0));
            return (!moved).then_some(envelope);
        }
        for _ in 0..2 {
            match self.replica.tags.check(&stamp) {
                Verdict::Current => return Some(envelope),
                Verdict::Retired => return None,
                Verdict::Unknown(tags) => self.replica.tag_versions(&tags).await.ok()?,
            };
        }
        None
    }
}

//! What one cache's side of the shared store works with: the serde codec its types allow
//! ([`Codec`]), what a read found ([`Found`]) and what became of a publish ([`Wrote`]).
use super::super::keys::{EntryKey, KeyError};
use super::super::lease::HeldLease;
use super::super::store::{Holder, Lease, Read};
use super::super::wire::TagVersion;
use super::super::wire::{Decoded, Header, Wire, WireError};
use super::Loading;
use crate::envelope::Envelope;
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

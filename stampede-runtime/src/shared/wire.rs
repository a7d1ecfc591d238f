//! The shared-store envelope: how a value and its deadlines travel through Redis.
//!
//! ```text
//! offset  size  field
//!      0     4  magic "STPD" (refuses bytes that are not ours)
//!      4     1  format version (3); an unknown one is a miss, never a guess
//!      5     8  fresh_until   Unix ms, big-endian  ┐ server time (see `shared`),
//!     13     8  stale_until   Unix ms              │ so replicas with skewed clocks
//!     21     8  keep_until    Unix ms (= the PX)   │ agree on what is fresh
//!     29     8  loaded_at     Unix ms              ┘
//!     37     8  delta         f64 seconds, the recompute time XFetch weighs
//!     45     8  fence         u64, the lease or read fence the value was published under
//!     53     1  flags: 1 a source version follows; 2 the value was too large to share;
//!                 4 the entry's tags follow the header
//!     54    20  source version, 20 ASCII decimal digits (zeros when absent)
//!     74     8  the value type's fingerprint (see `fingerprint`)
//!     82     …  with flag 4: the tags, a u16 count, then each tag as a u16 length, its
//!               UTF-8 bytes and its version (u64) when the entry was stored
//!      …     …  the value: bincode 2 (serde, standard config)
//! ```
//! A build that knows no tags reads flag 4 as unknown: a miss, never a value served
//! without the check its tags ask for.
//! An envelope flagged "too large" carries no value: the replica that loaded it could not
//! write it under `max_value_bytes`, and tells the others so (until its `stale_until`)
//! that they load it themselves at once instead of waiting in line for a lease whose
//! holder will never publish.
//!
//! The header has a fixed size and big-endian integers because the Lua scripts read it:
//! `stale_until` to tell whether anything servable is there, `fence` to restart a lost
//! fence counter above it, the source version to ignore late invalidations. The source
//! version is decimal text because Lua numbers are doubles: the scripts compare it in two
//! 10-digit halves, exact for every `u64`, where a double would round above 2^53.
//!
//! bincode's bytes carry no types, so a value written by a build whose value type differs
//! could decode without an error and mean something else; the fingerprint turns that into
//! a miss. Decoding never panics and never trusts a length it has not checked: bytes of
//! the wrong magic, version, size or type are a [`WireError`], which the caller counts and logs at
//! warn level and treats as a miss.
use super::fingerprint;
use bincode::config::{self, Configuration, Limit};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use std::sync::Arc;

const MAGIC: &[u8; 4] = b"STPD";
/// Bumped whenever the layout above changes; old replicas then miss instead of misreading.
pub(crate) const FORMAT_VERSION: u8 = 3;
const HAS_VERSION: u8 = 1;
const TOO_LARGE: u8 = 2;
const TAGGED: u8 = 4;
/// At most this many tags, each at most this many bytes, travel with an entry.
const MAX_TAGS: usize = 1024;
const MAX_TAG_BYTES: usize = u16::MAX as usize;
pub(crate) const HEADER_LEN: usize = 82;
/// The largest value a shared store accepts unless configured otherwise.
pub(crate) const DEFAULT_MAX_VALUE_BYTES: usize = 8 << 20;
/// bincode's own allocation bound; the configured limit is checked against the bytes first.
const BINCODE_LIMIT: usize = 1 << 30;

fn bincode_config<const LIMIT: usize>(
) -> Configuration<config::BigEndian, config::Varint, Limit<LIMIT>> {
    config::standard().with_big_endian().with_limit::<LIMIT>()
}

/// Decodes a value of `body.len()` bytes under the smallest bincode limit at or above it.
///
/// bincode allocates what a string's or a byte buffer's length prefix claims once the
/// claim is within its limit, and fails for want of bytes only after. Through serde those
/// claims are all it counts, and a value's claims add up to at most its own length, so
/// the body's length is a limit no valid value exceeds. The limit is a type parameter,
/// hence the steps: corrupt bytes allocate at most 16 times the body (64 KiB at least).
fn decode_value<V: DeserializeOwned>(body: &[u8]) -> Result<(V, usize), WireError> {
    const STEP: usize = 16;
    const SMALL: usize = 64 << 10;
    let decoded = match body.len() {
        len if len <= SMALL => bincode::serde::decode_from_slice(body, bincode_config::<SMALL>()),
        len if len <= SMALL * STEP => {
            bincode::serde::decode_from_slice(body, bincode_config::<{ SMALL * STEP }>())
        }
        len if len <= SMALL * STEP * STEP => {
            bincode::serde::decode_from_slice(body, bincode_config::<{ SMALL * STEP * STEP }>())
        }
        _ => bincode::serde::decode_from_slice(body, bincode_config::<BINCODE_LIMIT>()),
    };
    decoded.map_err(|e| WireError::Value(e.to_string()))
}

/// Everything about an entry except its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Header {
    pub(crate) fresh_until_ms: u64,
    pub(crate) stale_until_ms: u64,
    pub(crate) keep_until_ms: u64,
    pub(crate) loaded_at_ms: u64,
    /// How long the recompute took, in seconds (XFetch's δ).
    pub(crate) delta: f64,
    pub(crate) fence: u64,
    /// The version of the source the value was read at, when the cache tracks one.
    pub(crate) source_version: Option<u64>,
}

/// Why bytes found in the shared store are not a usable envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireError {
    Truncated {
        len: usize,
    },
    NotAnEnvelope,
    UnknownVersion(u8),
    CorruptHeader(&'static str),
    Oversized {
        len: usize,
        limit: usize,
    },
    /// bincode refused the value: corrupt bytes or a value of another type.
    Value(String),
    /// The value decoded but left bytes over: written as another type.
    TrailingBytes(usize),
    /// No value: the replica that loaded it found it too large to share, and readers
    /// load it themselves until `stale_until_ms`.
    TooLargeToShare {
        stale_until_ms: u64,
    },
    /// The tags after the header do not parse.
    CorruptTags,
    /// Written as a value type of another shape (a build with other code).
    OtherType {
        found: u64,
        expected: u64,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated { len } => write!(f, "{len} bytes, shorter than the header"),
            WireError::NotAnEnvelope => f.write_str("no envelope magic number"),
            WireError::UnknownVersion(v) => write!(f, "unknown envelope format version {v}"),
            WireError::CorruptHeader(what) => write!(f, "corrupt envelope header: {what}"),
            WireError::Oversized { len, limit } => {
                write!(f, "value of {len} bytes over the {limit}-byte limit")
            }
            WireError::Value(e) => write!(f, "value does not decode: {e}"),
            WireError::CorruptTags => f.write_str("the entry's tags do not parse"),
            WireError::TrailingBytes(n) => write!(f, "value leaves {n} bytes undecoded"),
            WireError::TooLargeToShare { .. } => {
                f.write_str("the value was too large to share; each replica loads it")
            }
            WireError::OtherType { found, expected } => write!(
                f,
                "value written as another type (fingerprint {found:016x}, this build's is {expected:016x})"
            ),
        }
    }
}

impl std::error::Error for WireError {}

/// Encodes and decodes envelopes with a bound on the value's size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wire {
    max_value_bytes: usize,
}

impl Default for Wire {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_VALUE_BYTES)
    }
}

impl Wire {
    pub(crate) fn new(max_value_bytes: usize) -> Self {
        Self {
            max_value_bytes: max_value_bytes.min(BINCODE_LIMIT),
        }
    }

    /// The envelope's bytes; a value over the limit is refused here too, so one replica
    /// cannot store what every other replica would refuse to read.
    pub(crate) fn encode<V: Serialize + DeserializeOwned + 'static>(
        &self,
        header: &Header,
        tags: &[TagVersion],
        value: &V,
    ) -> Result<Vec<u8>, WireError> {
        let mut bytes = Vec::with_capacity(HEADER_LEN + 64);
        let flags = if tags.is_empty() { 0 } else { TAGGED };
        write_header(&mut bytes, header, flags, fingerprint::of::<V>());
        if !tags.is_empty() {
            write_tags(&mut bytes, tags)?;
        }
        let start = bytes.len();
        bincode::serde::encode_into_std_write(value, &mut bytes, bincode_config::<BINCODE_LIMIT>())
            .map_err(|e| WireError::Value(e.to_string()))?;
        let len = bytes.len() - start;
        if len > self.max_value_bytes {
            return Err(WireError::Oversized {
                len,
                limit: self.max_value_bytes,
            });
        }
        Ok(bytes)
    }

    /// An envelope without a value, saying the value was too large to share: other
    /// replicas load it themselves instead of waiting for a lease.
    pub(crate) fn too_large(&self, header: &Header) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER_LEN);
        write_header(&mut bytes, header, TOO_LARGE, 0);
        bytes
    }

    /// The header alone, for decisions that do not need the value.
    pub(crate) fn header(&self, bytes: &[u8]) -> Result<Header, WireError> {
        let Some(head) = bytes.get(..HEADER_LEN) else {
            if bytes.len() >= MAGIC.len() && &bytes[..MAGIC.len()] != MAGIC {
                return Err(WireError::NotAnEnvelope);
            }
            return Err(WireError::Truncated { len: bytes.len() });
        };
        if &head[..4] != MAGIC {
            return Err(WireError::NotAnEnvelope);
        }
        if head[4] != FORMAT_VERSION {
            return Err(WireError::UnknownVersion(head[4]));
        }
        let u64_at = |at: usize| u64::from_be_bytes(head[at..at + 8].try_into().expect("8 bytes"));
        let delta = f64::from_bits(u64_at(37));
        if !delta.is_finite() || delta < 0.0 {
            return Err(WireError::CorruptHeader(
                "delta is not a finite, non-negative duration",
            ));
        }
        let digits = std::str::from_utf8(&head[54..74])
            .ok()
            .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse::<u64>().ok())
            .ok_or(WireError::CorruptHeader(
                "source version is not 20 decimal digits",
            ))?;
        if head[53] & !(HAS_VERSION | TOO_LARGE | TAGGED) != 0 {
            return Err(WireError::CorruptHeader("unknown flags"));
        }
        let source_version = (head[53] & HAS_VERSION != 0).then_some(digits);
        let header = Header {
            fresh_until_ms: u64_at(5),
            stale_until_ms: u64_at(13),
            keep_until_ms: u64_at(21),
            loaded_at_ms: u64_at(29),
            delta,
            fence: u64_at(45),
            source_version,
        };
        if !(header.fresh_until_ms <= header.stale_until_ms
            && header.stale_until_ms <= header.keep_until_ms)
        {
            return Err(WireError::CorruptHeader("deadlines out of order"));
        }
        Ok(header)
    }

    /// The header, the entry's tags and the value; any fault is an error, never a panic.
    pub(crate) fn decode<V: DeserializeOwned + 'static>(
        &self,
        bytes: &[u8],
    ) -> Result<Decoded<V>, WireError> {
        let header = self.header(bytes)?;
        if bytes[53] & TOO_LARGE != 0 {
            return Err(WireError::TooLargeToShare {
                stale_until_ms: header.stale_until_ms,
            });
        }
        let found = u64::from_be_bytes(bytes[74..HEADER_LEN].try_into().expect("8 bytes"));
        let expected = fingerprint::of::<V>();
        if found != expected {
            return Err(WireError::OtherType { found, expected });
        }
        let (tags, body) = if bytes[53] & TAGGED != 0 {
            read_tags(&bytes[HEADER_LEN..]).ok_or(WireError::CorruptTags)?
        } else {
            (Vec::new(), &bytes[HEADER_LEN..])
        };
        if body.len() > self.max_value_bytes {
            return Err(WireError::Oversized {
                len: body.len(),
                limit: self.max_value_bytes,
            });
        }
        let (value, read) = decode_value(body)?;
        if read != body.len() {
            return Err(WireError::TrailingBytes(body.len() - read));
        }
        Ok((header, tags, value))
    }
}

/// A tag and its version when the entry was stored.
pub(crate) type TagVersion = (Arc<str>, u64);

/// What [`Wire::decode`] reads: the header, the entry's tags with their versions, the value.
pub(crate) type Decoded<V> = (Header, Vec<TagVersion>, V);

/// The tags section (see the layout above).
fn write_tags(bytes: &mut Vec<u8>, tags: &[TagVersion]) -> Result<(), WireError> {
    let too_many = tags.len() > MAX_TAGS || tags.iter().any(|(tag, _)| tag.len() > MAX_TAG_BYTES);
    if too_many {
        return Err(WireError::CorruptTags);
    }
    bytes.extend_from_slice(&(tags.len() as u16).to_be_bytes());
    for (tag, version) in tags {
        bytes.extend_from_slice(&(tag.len() as u16).to_be_bytes());
        bytes.extend_from_slice(tag.as_bytes());
        bytes.extend_from_slice(&version.to_be_bytes());
    }
    Ok(())
}

/// The tags section and the bytes after it; `None` if it does not parse.
fn read_tags(mut rest: &[u8]) -> Option<(Vec<TagVersion>, &[u8])> {
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (taken, left) = (rest.len() >= n).then(|| rest.split_at(n))?;
        *rest = left;
        Some(taken)
    }
    let count = u16::from_be_bytes(take(&mut rest, 2)?.try_into().ok()?) as usize;
    if count > MAX_TAGS {
        return None;
    }
    let mut tags = Vec::with_capacity(count);
    for _ in 0..count {
        let len = u16::from_be_bytes(take(&mut rest, 2)?.try_into().ok()?) as usize;
        let tag = std::str::from_utf8(take(&mut rest, len)?).ok()?;
        let version = u64::from_be_bytes(take(&mut rest, 8)?.try_into().ok()?);
        tags.push((Arc::from(tag), version));
    }
    Some((tags, rest))
}

/// Writes the fixed-size header (see the layout above).
fn write_header(bytes: &mut Vec<u8>, header: &Header, flags: u8, fingerprint: u64) {
    bytes.extend_from_slice(MAGIC);
    bytes.push(FORMAT_VERSION);
    for ms in [
        header.fresh_until_ms,
        header.stale_until_ms,
        header.keep_until_ms,
        header.loaded_at_ms,
    ] {
        bytes.extend_from_slice(&ms.to_be_bytes());
    }
    bytes.extend_from_slice(&header.delta.to_be_bytes());
    bytes.extend_from_slice(&header.fence.to_be_bytes());
    let has_version = if header.source_version.is_some() {
        HAS_VERSION
    } else {
        0
    };
    bytes.push(flags | has_version);
    bytes.extend_from_slice(version_digits(header.source_version.unwrap_or(0)).as_bytes());
    bytes.extend_from_slice(&fingerprint.to_be_bytes());
    debug_assert_eq!(bytes.len(), HEADER_LEN);
}

/// A source version as the scripts compare it: 20 decimal digits, zero-padded.
pub(crate) fn version_digits(version: u64) -> String {
    format!("{version:020}")
}

#[cfg(test)]
mod tests;

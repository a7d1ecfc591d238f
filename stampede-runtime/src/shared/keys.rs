//! Keys in the shared store: `prefix:3:{name:v<version>:<encoded key>}`.
//!
//! Every replica of every build must compute the same Redis key for the same cache entry,
//! and two different entries must never share one (that would serve one user's value to
//! another). So keys are not hashed: the key value is written out by a serde
//! [`Serializer`](serde::Serializer) whose output depends only on the serde calls the key's type makes.
//!
//! # Layout
//! ```text
//! stampede:3:{user-profile:v1:acme:42}          the value (a wire envelope)
//! stampede:3:{user-profile:v1:acme:42}:lease    who is loading it now
//! stampede:3:{user-profile:v1:acme:42}:fence    the fence, and the source-version mark
//! stampede:3:notices                            tag notices; every replica listens
//! stampede:3:notices:2a7                        one of 4,096 buckets of key notices
//! ```
//! `3` is the layout of keys, envelopes and notices ([`LAYOUT`]): a change to any bumps
//! it, so builds of different layouts never read each other's entries as the same key,
//! nor publish notices where the other does not listen.
//! Redis Cluster hashes only the text between the first `{` and the next `}` (the hash
//! tag), so the value and its derived keys share one slot and one Lua script may touch
//! them all. The prefix, the name and the key are escaped, so no `{` or `}` can move the
//! tag and no `:` can shift a segment.
//!
//!
//! The key value itself is encoded by `encoder` (one value of a key type to one string,
//! decodable only one way, so distinct keys never encode alike).
mod encoder;

use serde::ser::{self, Serialize};
use std::fmt::{self, Write};

/// The cache entry a key addresses, with the keys derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EntryKey {
    value: String,
}

/// The layout of keys and envelopes, written into every key.
pub(crate) const LAYOUT: u32 = 3;

impl EntryKey {
    /// `prefix:3:{name:v<version>:<encoded key>}`.
    pub(crate) fn new<K: Serialize + ?Sized>(
        prefix: &str,
        name: &str,
        version: u32,
        key: &K,
    ) -> Result<Self, KeyError> {
        let mut value = String::with_capacity(prefix.len() + name.len() + 24);
        escape_into(&mut value, prefix);
        write!(value, ":{LAYOUT}:{{").expect("writing to a String");
        escape_into(&mut value, name);
        write!(value, ":v{version}:").expect("writing to a String");
        encoder::encode(&mut value, key)?;
        value.push('}');
        Ok(Self { value })
    }

    /// What every value key of one cache (`name`, `version`) under `prefix` starts with.
    pub(crate) fn cache_prefix(prefix: &str, name: &str, version: u32) -> String {
        let mut fixed = String::new();
        escape_into(&mut fixed, prefix);
        write!(fixed, ":{LAYOUT}:{{").expect("writing to a String");
        escape_into(&mut fixed, name);
        write!(fixed, ":v{version}:").expect("writing to a String");
        fixed
    }

    /// A `SCAN MATCH` pattern for every key of every entry of one cache (`name`,
    /// `version`) under `prefix`.
    pub(crate) fn cache_pattern(prefix: &str, name: &str, version: u32) -> String {
        let fixed = Self::cache_prefix(prefix, name, version);
        let mut pattern = String::with_capacity(fixed.len() + 8);
        for c in fixed.chars() {
            // Glob syntax that escaping for keys leaves bare.
            if matches!(c, '*' | '?' | '\\' | '^') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push('*');
        pattern
    }

    /// The entry a stored key (a value key, or its lease or fence) belongs to. Braces
    /// inside names and keys are escaped, so the first `}` closes the hash tag.
    pub(crate) fn of_stored(stored: &str) -> Option<Self> {
        let close = stored.find('}')?;
        let (value, rest) = stored.split_at(close + 1);
        matches!(rest, "" | ":lease" | ":fence").then(|| Self {
            value: value.to_owned(),
        })
    }

    /// The value's key: it holds the wire envelope.
    pub(crate) fn value(&self) -> &str {
        &self.value
    }

    /// The lease: the fence and token of the replica loading the entry now, with a TTL.
    pub(crate) fn lease(&self) -> String {
        format!("{}:lease", self.value)
    }

    /// The fence counter, raised by every lease and every invalidation, and the highest
    /// source version an invalidation has named (one key, so they are lost together).
    pub(crate) fn fence(&self) -> String {
        format!("{}:fence", self.value)
    }
}

impl fmt::Display for EntryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.value)
    }
}

/// The key holding `tag`'s version: `prefix:3:tag:{<tag>}`, a slot of its own per tag.
pub(crate) fn tag_key(prefix: &str, tag: &str) -> String {
    slot_key(prefix, "tag", tag)
}

/// The hash holding a fleet-wide admission's permits: `prefix:3:admission:{<name>}`, one
/// slot per admission (see `redis/lua/permits.lua`).
pub(crate) fn admission_key(prefix: &str, admission: &str) -> String {
    slot_key(prefix, "admission", admission)
}

/// The hash of the replicas whose hearing leases may still run: `prefix:3:hearing`
/// (see `redis/lua/hearing.lua`).
pub(crate) fn hearing_key(prefix: &str) -> String {
    let mut key = String::new();
    escape_into(&mut key, prefix);
    write!(key, ":{LAYOUT}:hearing").expect("writing to a String");
    key
}

/// `prefix:3:<kind>:{<name>}`: `name` as the key's hash tag, so on a cluster each lives
/// on the master of its own slot.
fn slot_key(prefix: &str, kind: &str, name: &str) -> String {
    let mut key = String::new();
    escape_into(&mut key, prefix);
    write!(key, ":{LAYOUT}:{kind}:{{").expect("writing to a String");
    escape_into(&mut key, name);
    key.push('}');
    key
}

/// The pub/sub channel on which every replica sharing `prefix` announces new values and
/// invalidations.
pub(crate) fn notice_channel(prefix: &str) -> String {
    let mut channel = String::new();
    escape_into(&mut channel, prefix);
    write!(channel, ":{LAYOUT}:notices").expect("writing to a String");
    channel
}

/// A key type whose `Serialize` failed (a custom impl returned an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyError(String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the cache key could not be encoded: {}", self.0)
    }
}

impl std::error::Error for KeyError {}

impl ser::Error for KeyError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        KeyError(msg.to_string())
    }
}

/// Characters with a meaning in the encoding; a string never contains them unescaped.
const STRUCTURAL: &[u8] = b"%:{}()[],=~+'#! ";

pub(super) fn escape_into(out: &mut String, text: &str) {
    escape_with(out, text, STRUCTURAL);
}

pub(super) fn escape_with(out: &mut String, text: &str, structural: &[u8]) {
    for &byte in text.as_bytes() {
        if byte.is_ascii_graphic() && !structural.contains(&byte) {
            out.push(byte as char);
        } else {
            write!(out, "%{byte:02X}").expect("writing to a String");
        }
    }
}

#[cfg(test)]
mod tests;

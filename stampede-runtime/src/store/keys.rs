//! Shared-store keys: `prefix:{name:v<version>:<encoded key>}`.
//!
//! Every replica of every build must compute the same Redis key for the same cache entry,
//! and two different entries must never share one (that would serve one user's value to
//! another). So keys are not hashed: the key value is written out by a serde
//! [`Serializer`](serde::Serializer) whose output depends only on the serde calls the key's type makes.
//!
//! # Layout
//! ```text
//! stampede:{user-profile:v1:acme:42}          the value (a wire envelope)
//! stampede:{user-profile:v1:acme:42}:lease    who is loading it now
//! stampede:{user-profile:v1:acme:42}:fence    the fence counter (raised by leases and invalidations)
//! stampede:{user-profile:v1:acme:42}:ver      the source-version high-water mark
//! ```
//! Redis Cluster hashes only the text between the first `{` and the next `}` (the hash
//! tag), so the value and its derived keys share one slot and one Lua script may touch
//! them all. The prefix, the name and the key are escaped, so no `{` or `}` can move the
//! tag and no `:` can shift a segment.
//!
//! # Encoding (one value of a key type → one string, and back only one way)
//! | serde shape | encoding | example |
//! |---|---|---|
//! | string, char | text, escaped; `'`-marked if it would read as a number or bool | `acme`, `'42` |
//! | bool, integer | decimal | `true`, `42`, `-7` |
//! | float | Rust's `{:?}`, which always has `.`, `e`, `inf` or `NaN` | `1.0`, `2.5e-8` |
//! | bytes | `#` and lowercase hex | `#00ff` |
//! | unit, unit struct, empty tuple | `()` | `()` |
//! | `None` / `Some(x)` | `~` / `+x` | `~`, `+acme` |
//! | newtype struct | its field (transparent) | `UserId(42)` → `42` |
//! | tuple, tuple struct, struct at the top | fields joined by `:` | `acme:42`, `tenant=acme:id=42` |
//! | the same, nested | `(a,b)`, `(tenant=acme,id=42)` | `acme:(1,2)` |
//! | sequence | `[a,b]` | `[1,2,3]` |
//! | map | `[k=v,…]`, entries sorted by encoded key (so `HashMap` order does not matter) | `[a=1,b=2]` |
//! | enum variant | `!Name`, `Name(x)`, `Name(a,b)`, `Name(f=a)` | `!Admin`, `User(42)` |
//!
//! Escaping writes `%` and two uppercase hex digits for every byte of a string outside
//! printable ASCII and for every structural character: `% : { } ( ) [ ] , = ~ + ' # !`
//! and space. So an encoded string contains no structural character except its optional
//! leading `'` marker, every compound's parts can be split at its top-level separators,
//! and decoding is unambiguous: that is why distinct keys of one type never encode alike.
//! Strings that would read as a number or a bool (`"42"`, `"1e5"`, `"true"`, `""`) get
//! the `'` marker, so even a `#[serde(untagged)]` enum over `String` and `u64` keeps `"42"`
//! apart from `42`, and a unit variant's name carries the `!` mark, so `Role::Admin` and
//! `"Admin"` under one `#[serde(untagged)]` enum stay apart too.
//!
//! The encoding can only tell apart what the key's `Serialize` tells apart: it must be
//! injective. `#[serde(untagged)] enum K { A(u64), B(u64) }` makes the same serde calls
//! for `A(1)` and `B(1)`, so they share one entry; so do `#[serde(skip)]` fields and
//! hand-written impls that drop information. Such keys need a tag.
use serde::ser::{self, Serialize};
use std::fmt::{self, Write};

/// The cache entry a key addresses, with the keys derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EntryKey {
    value: String,
}

impl EntryKey {
    /// `prefix:{name:v<version>:<encoded key>}`.
    pub(crate) fn new<K: Serialize + ?Sized>(
        prefix: &str,
        name: &str,
        version: u32,
        key: &K,
    ) -> Result<Self, KeyError> {
        let mut value = String::with_capacity(prefix.len() + name.len() + 24);
        escape_into(&mut value, prefix);
        value.push_str(":{");
        escape_into(&mut value, name);
        write!(value, ":v{version}:").expect("writing to a String");
        key.serialize(&mut Encoder {
            out: &mut value,
            depth: 0,
        })?;
        value.push('}');
        Ok(Self { value })
    }

    /// A `SCAN MATCH` pattern for every key of every entry of one cache (`name`,
    /// `version`) under `prefix`.
    pub(crate) fn cache_pattern(prefix: &str, name: &str, version: u32) -> String {
        let mut fixed = String::new();
        escape_into(&mut fixed, prefix);
        fixed.push_str(":{");
        escape_into(&mut fixed, name);
        write!(fixed, ":v{version}:").expect("writing to a String");
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

    /// The entry a stored key (a value key, or its lease, fence or version mark) belongs
    /// to. Braces inside names and keys are escaped, so the first `}` closes the hash tag.
    pub(crate) fn of_stored(stored: &str) -> Option<Self> {
        let close = stored.find('}')?;
        let (value, rest) = stored.split_at(close + 1);
        matches!(rest, "" | ":lease" | ":fence" | ":ver").then(|| Self {
            value: value.to_owned(),
        })
    }

    /// The value's key: it holds the wire envelope.
    pub(crate) fn value(&self) -> &str {
        &self.value
    }

    /// The lease: the fence of the replica loading the entry now, with a TTL.
    pub(crate) fn lease(&self) -> String {
        format!("{}:lease", self.value)
    }

    /// The fence counter: raised by every lease and every invalidation.
    pub(crate) fn fence(&self) -> String {
        format!("{}:fence", self.value)
    }

    /// The highest source version an invalidation has named.
    pub(crate) fn source_version(&self) -> String {
        format!("{}:ver", self.value)
    }
}

impl fmt::Display for EntryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.value)
    }
}

/// The pub/sub channel on which every replica sharing `prefix` announces new values and
/// invalidations.
pub(crate) fn notice_channel(prefix: &str) -> String {
    let mut channel = String::new();
    escape_into(&mut channel, prefix);
    channel.push_str(":notices");
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

fn escape_into(out: &mut String, text: &str) {
    for &byte in text.as_bytes() {
        if byte.is_ascii_graphic() && !STRUCTURAL.contains(&byte) {
            out.push(byte as char);
        } else {
            write!(out, "%{byte:02X}").expect("writing to a String");
        }
    }
}

/// Whether `text`, written bare, could be read as a bool or a number.
fn reads_as_scalar(text: &str) -> bool {
    text.is_empty() || text == "true" || text == "false" || text.parse::<f64>().is_ok()
}

struct Encoder<'a> {
    out: &'a mut String,
    /// 0 for the key itself: its tuple or struct fields are joined by `:` to stay readable.
    depth: usize,
}

impl<'a> Encoder<'a> {
    fn nested(&mut self) -> Encoder<'_> {
        Encoder {
            out: self.out,
            depth: self.depth + 1,
        }
    }

    fn display(&mut self, value: impl fmt::Display) -> Result<(), KeyError> {
        write!(self.out, "{value}").expect("writing to a String");
        Ok(())
    }

    /// Opens a tuple or struct: bare and `:`-joined at the top, parenthesized inside.
    fn fields(self, len: usize) -> Fields<'a> {
        let top = self.depth == 0;
        if len == 0 {
            self.out.push_str("()");
        } else if !top {
            self.out.push('(');
        }
        Fields {
            encoder: self,
            first: true,
            separator: if top { ':' } else { ',' },
            close: if top || len == 0 { None } else { Some(')') },
        }
    }

    /// Opens a tuple or struct variant: `Name(a,b)`, `Name(f=a)`, at any depth.
    fn variant_fields(self, variant: &str) -> Fields<'a> {
        escape_into(self.out, variant);
        self.out.push('(');
        Fields {
            encoder: self,
            first: true,
            separator: ',',
            close: Some(')'),
        }
    }
}

/// The parts of a tuple, struct, sequence or variant, written as they come.
struct Fields<'a> {
    encoder: Encoder<'a>,
    first: bool,
    separator: char,
    close: Option<char>,
}

impl Fields<'_> {
    fn part<T: Serialize + ?Sized>(
        &mut self,
        name: Option<&str>,
        value: &T,
    ) -> Result<(), KeyError> {
        if !self.first {
            self.encoder.out.push(self.separator);
        }
        self.first = false;
        if let Some(name) = name {
            escape_into(self.encoder.out, name);
            self.encoder.out.push('=');
        }
        value.serialize(&mut self.encoder.nested())
    }

    fn end(self) -> Result<(), KeyError> {
        if let Some(close) = self.close {
            self.encoder.out.push(close);
        }
        Ok(())
    }
}

/// A map's entries, sorted by encoded key before they are written.
struct Entries<'a> {
    encoder: Encoder<'a>,
    entries: Vec<(String, String)>,
    key: Option<String>,
}

impl<'a> ser::Serializer for &'a mut Encoder<'_> {
    type Ok = ();
    type Error = KeyError;
    type SerializeSeq = Fields<'a>;
    type SerializeTuple = Fields<'a>;
    type SerializeTupleStruct = Fields<'a>;
    type SerializeTupleVariant = Fields<'a>;
    type SerializeMap = Entries<'a>;
    type SerializeStruct = Fields<'a>;
    type SerializeStructVariant = Fields<'a>;

    fn serialize_bool(self, v: bool) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_i8(self, v: i8) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_i16(self, v: i16) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_i32(self, v: i32) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_i64(self, v: i64) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_i128(self, v: i128) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_u8(self, v: u8) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_u16(self, v: u16) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_u32(self, v: u32) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_f32(self, v: f32) -> Result<(), KeyError> {
        // Debug keeps a `.`, an exponent, `inf` or `NaN`, so a float never reads as an integer.
        self.display(format_args!("{v:?}"))
    }
    fn serialize_f64(self, v: f64) -> Result<(), KeyError> {
        self.display(format_args!("{v:?}"))
    }
    fn serialize_char(self, v: char) -> Result<(), KeyError> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), KeyError> {
        if reads_as_scalar(v) {
            self.out.push('\'');
        }
        escape_into(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), KeyError> {
        self.out.push('#');
        for byte in v {
            write!(self.out, "{byte:02x}").expect("writing to a String");
        }
        Ok(())
    }
    fn serialize_none(self) -> Result<(), KeyError> {
        self.out.push('~');
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), KeyError> {
        self.out.push('+');
        value.serialize(&mut self.nested())
    }
    fn serialize_unit(self) -> Result<(), KeyError> {
        self.out.push_str("()");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), KeyError> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), KeyError> {
        // Marked: bare, `Admin` would read the same as the string "Admin".
        self.out.push('!');
        escape_into(self.out, variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), KeyError> {
        // Transparent: `UserId(42)` reads as `42`; the key type is fixed per cache anyway.
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), KeyError> {
        escape_into(self.out, variant);
        self.out.push('(');
        value.serialize(&mut self.nested())?;
        self.out.push(')');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Fields<'a>, KeyError> {
        self.out.push('[');
        Ok(Fields {
            encoder: Encoder {
                out: self.out,
                depth: self.depth,
            },
            first: true,
            separator: ',',
            close: Some(']'),
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().fields(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().fields(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().variant_fields(variant))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Entries<'a>, KeyError> {
        Ok(Entries {
            encoder: self.reborrow(),
            entries: Vec::new(),
            key: None,
        })
    }
    fn serialize_struct(self, _name: &'static str, len: usize) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().fields(len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().variant_fields(variant))
    }
}

impl Encoder<'_> {
    fn reborrow(&mut self) -> Encoder<'_> {
        Encoder {
            out: self.out,
            depth: self.depth,
        }
    }
}

impl ser::SerializeSeq for Fields<'_> {
    type Ok = ();
    type Error = KeyError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), KeyError> {
        self.part(None, value)
    }
    fn end(self) -> Result<(), KeyError> {
        Fields::end(self)
    }
}

impl ser::SerializeTuple for Fields<'_> {
    type Ok = ();
    type Error = KeyError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), KeyError> {
        self.part(None, value)
    }
    fn end(self) -> Result<(), KeyError> {
        Fields::end(self)
    }
}

impl ser::SerializeTupleStruct for Fields<'_> {
    type Ok = ();
    type Error = KeyError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), KeyError> {
        self.part(None, value)
    }
    fn end(self) -> Result<(), KeyError> {
        Fields::end(self)
    }
}

impl ser::SerializeTupleVariant for Fields<'_> {
    type Ok = ();
    type Error = KeyError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), KeyError> {
        self.part(None, value)
    }
    fn end(self) -> Result<(), KeyError> {
        Fields::end(self)
    }
}

impl ser::SerializeStruct for Fields<'_> {
    type Ok = ();
    type Error = KeyError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), KeyError> {
        self.part(Some(name), value)
    }
    fn end(self) -> Result<(), KeyError> {
        Fields::end(self)
    }
}

impl ser::SerializeStructVariant for Fields<'_> {
    type Ok = ();
    type Error = KeyError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<(), KeyError> {
        self.part(Some(name), value)
    }
    fn end(self) -> Result<(), KeyError> {
        Fields::end(self)
    }
}

impl Entries<'_> {
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<String, KeyError> {
        let mut out = String::new();
        value.serialize(&mut Encoder {
            out: &mut out,
            depth: self.encoder.depth + 1,
        })?;
        Ok(out)
    }
}

impl ser::SerializeMap for Entries<'_> {
    type Ok = ();
    type Error = KeyError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), KeyError> {
        self.key = Some(self.encode(key)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), KeyError> {
        let key = self
            .key
            .take()
            .ok_or_else(|| <KeyError as ser::Error>::custom("a map value without its key"))?;
        let value = self.encode(value)?;
        self.entries.push((key, value));
        Ok(())
    }
    fn end(mut self) -> Result<(), KeyError> {
        self.entries.sort();
        let out = self.encoder.out;
        out.push('[');
        for (i, (key, value)) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(key);
            out.push('=');
            out.push_str(value);
        }
        out.push(']');
        Ok(())
    }
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;

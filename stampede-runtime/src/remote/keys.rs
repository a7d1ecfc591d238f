//! Shared-store keys: `prefix:2:{name:v<version>:<encoded key>}`.
//!
//! Every replica of every build must compute the same Redis key for the same cache entry,
//! and two different entries must never share one (that would serve one user's value to
//! another). So keys are not hashed: the key value is written out by a serde
//! [`Serializer`](serde::Serializer) whose output depends only on the serde calls the key's type makes.
//!
//! # Layout
//! ```text
//! stampede:2:{user-profile:v1:acme:42}          the value (a wire envelope)
//! stampede:2:{user-profile:v1:acme:42}:lease    who is loading it now
//! stampede:2:{user-profile:v1:acme:42}:fence    the fence, and the source-version mark
//! stampede:2:notices                            the channel every replica listens on
//! ```
//! `2` is the layout of keys and envelopes ([`LAYOUT`]): a change to either bumps it, so
//! builds of different layouts never read each other's entries as the same key.
//! Redis Cluster hashes only the text between the first `{` and the next `}` (the hash
//! tag), so the value and its derived keys share one slot and one Lua script may touch
//! them all. The prefix, the name and the key are escaped, so no `{` or `}` can move the
//! tag and no `:` can shift a segment.
//!
//! # Encoding (one value of a key type → one string, and back only one way)
//! | serde call | encoding | example |
//! |---|---|---|
//! | `u64` | decimal | `42` |
//! | any other integer | decimal and its type | `7u8`, `-7i64`, `1u128` |
//! | `f64`, `f32` | Rust's `{:?}` (always with `.`, `e`, `inf` or `NaN`); `f32` marked | `1.0`, `2.5e-8`, `1.0f32` |
//! | bool | `true`, `false` | `true` |
//! | string | text, escaped; `'`-marked if it could read as a number or a bool | `acme`, `'42`, `'-1` |
//! | char | between `'`s | `'a'` |
//! | bytes | `#` and lowercase hex | `#00ff` |
//! | unit | `()` | `()` |
//! | `None` / `Some(x)` | `~` / `+x` | `~`, `+acme` |
//! | tuple at the top | its fields joined by `:` | `acme:42` |
//! | tuple inside, or of one field | `(a,b)`, `(a)`; empty `(,)` | `acme:(1,2)` |
//! | unit, newtype, tuple struct | `Name()`, `Name(x)`, `Name(a,b)`; empty `Name(,)` | `UserId(42)` |
//! | struct | `Name(f=a,g=b)`; empty `Name(=)` | `Query(tenant=acme,page=~)` |
//! | enum variant | `!`, the enum's name, `.`, the variant's, then as a struct | `!Role.Admin`, `!Role.User(42)` |
//! | sequence | `[a,b]` | `[1,2,3]` |
//! | map | `[k=v,…]`, entries sorted by encoded key (so `HashMap` order does not matter); empty `[=]` | `[a=1,b=2]` |
//!
//! Escaping writes `%` and two uppercase hex digits for every byte of a string outside
//! printable ASCII and for every structural character: `% : { } ( ) [ ] , = ~ + ' # !`
//! and space (and `.` in names). So an encoded string contains no structural character
//! except its optional leading `'` marker, every compound's parts can be split at its
//! top-level separators, and each form starts or ends differently from every other:
//! decoding is unambiguous, which is why distinct keys never encode alike.
//!
//! That holds for whatever the key's `Serialize` tells apart, which includes every
//! `#[derive(Serialize)]` shape: `#[serde(untagged)] enum K { A(u8), B(u64) }` writes
//! `1u8` and `1`, `char` and `String` write `'a'` and `a`, two structs with the same
//! fields write their own names. What `Serialize` itself drops (`#[serde(skip)]` fields,
//! a hand-written impl that writes two values alike) no encoding can bring back.
use serde::ser::{self, Serialize};
use std::fmt::{self, Write};

/// The cache entry a key addresses, with the keys derived from it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EntryKey {
    value: String,
}

/// The layout of keys and envelopes, written into every key.
pub(crate) const LAYOUT: u32 = 2;

impl EntryKey {
    /// `prefix:2:{name:v<version>:<encoded key>}`.
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
        key.serialize(&mut Encoder {
            out: &mut value,
            depth: 0,
        })?;
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

fn escape_into(out: &mut String, text: &str) {
    escape_with(out, text, STRUCTURAL);
}

/// A struct's, enum's, variant's or field's name: `.` also separates an enum's name from
/// its variant's, so it is escaped too.
fn escape_name(out: &mut String, name: &str) {
    escape_with(out, name, NAME_STRUCTURAL);
}

const NAME_STRUCTURAL: &[u8] = b"%:{}()[],=~+'#! .";

fn escape_with(out: &mut String, text: &str, structural: &[u8]) {
    for &byte in text.as_bytes() {
        if byte.is_ascii_graphic() && !structural.contains(&byte) {
            out.push(byte as char);
        } else {
            write!(out, "%{byte:02X}").expect("writing to a String");
        }
    }
}

/// Whether `text`, written bare, could be read as a bool or a number: every number's
/// encoding starts with a digit or `-`, or is a float's `inf` or `NaN`.
fn reads_as_scalar(text: &str) -> bool {
    let first = text.bytes().next();
    first.is_none_or(|b| b.is_ascii_digit() || b == b'-')
        || text == "true"
        || text == "false"
        || text.parse::<f64>().is_ok()
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

    /// An integer of a type other than `u64`, with its type: `7u8`, `-7i64`.
    fn typed(&mut self, value: impl fmt::Display, ty: &str) -> Result<(), KeyError> {
        write!(self.out, "{value}{ty}").expect("writing to a String");
        Ok(())
    }

    /// Opens a tuple: `:`-joined at the top when it has two fields or more, else
    /// parenthesized (`(a)`, `(,)` when empty).
    fn tuple(self, len: usize) -> Fields<'a> {
        if self.depth == 0 && len >= 2 {
            return Fields {
                encoder: self,
                first: true,
                separator: ':',
                close: None,
                empty: "",
            };
        }
        self.out.push('(');
        self.parenthesized(",")
    }

    /// Opens a named compound, `Name(…)`: a struct, a tuple struct or, with `!` and its
    /// enum's name before it, a variant. `empty` is what its parentheses hold when it has
    /// no fields: `,` for a tuple form, `=` for a struct form.
    fn named(self, variant_of: Option<&str>, name: &str, empty: &'static str) -> Fields<'a> {
        if let Some(enum_name) = variant_of {
            self.out.push('!');
            escape_name(self.out, enum_name);
            self.out.push('.');
        }
        escape_name(self.out, name);
        self.out.push('(');
        self.parenthesized(empty)
    }

    fn parenthesized(self, empty: &'static str) -> Fields<'a> {
        Fields {
            encoder: self,
            first: true,
            separator: ',',
            close: Some(')'),
            empty,
        }
    }
}

/// The parts of a tuple, struct, sequence or variant, written as they come.
struct Fields<'a> {
    encoder: Encoder<'a>,
    first: bool,
    separator: char,
    close: Option<char>,
    /// Written before the close when there were no parts, so an empty compound of one
    /// kind never reads like another's.
    empty: &'static str,
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
            escape_name(self.encoder.out, name);
            self.encoder.out.push('=');
        }
        value.serialize(&mut self.encoder.nested())
    }

    fn end(self) -> Result<(), KeyError> {
        if self.first {
            self.encoder.out.push_str(self.empty);
        }
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
        self.typed(v, "i8")
    }
    fn serialize_i16(self, v: i16) -> Result<(), KeyError> {
        self.typed(v, "i16")
    }
    fn serialize_i32(self, v: i32) -> Result<(), KeyError> {
        self.typed(v, "i32")
    }
    fn serialize_i64(self, v: i64) -> Result<(), KeyError> {
        self.typed(v, "i64")
    }
    fn serialize_i128(self, v: i128) -> Result<(), KeyError> {
        self.typed(v, "i128")
    }
    fn serialize_u8(self, v: u8) -> Result<(), KeyError> {
        self.typed(v, "u8")
    }
    fn serialize_u16(self, v: u16) -> Result<(), KeyError> {
        self.typed(v, "u16")
    }
    fn serialize_u32(self, v: u32) -> Result<(), KeyError> {
        self.typed(v, "u32")
    }
    fn serialize_u64(self, v: u64) -> Result<(), KeyError> {
        self.display(v)
    }
    fn serialize_u128(self, v: u128) -> Result<(), KeyError> {
        self.typed(v, "u128")
    }
    fn serialize_f32(self, v: f32) -> Result<(), KeyError> {
        self.typed(format_args!("{v:?}"), "f32")
    }
    fn serialize_f64(self, v: f64) -> Result<(), KeyError> {
        // Debug keeps a `.`, an exponent, `inf` or `NaN`, so a float never reads as an integer.
        self.display(format_args!("{v:?}"))
    }
    fn serialize_char(self, v: char) -> Result<(), KeyError> {
        self.out.push('\'');
        escape_into(self.out, v.encode_utf8(&mut [0; 4]));
        self.out.push('\'');
        Ok(())
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
    fn serialize_unit_struct(self, name: &'static str) -> Result<(), KeyError> {
        escape_name(self.out, name);
        self.out.push_str("()");
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), KeyError> {
        // Marked: bare, `Admin` would read the same as the string "Admin".
        self.out.push('!');
        escape_name(self.out, name);
        self.out.push('.');
        escape_name(self.out, variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), KeyError> {
        // Named: under an untagged enum, `UserId(42)` and `42` are different keys.
        let mut fields = self.reborrow().named(None, name, ",");
        ser::SerializeTupleStruct::serialize_field(&mut fields, value)?;
        Fields::end(fields)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), KeyError> {
        let mut fields = self.reborrow().named(Some(name), variant, ",");
        ser::SerializeTupleVariant::serialize_field(&mut fields, value)?;
        Fields::end(fields)
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Fields<'a>, KeyError> {
        self.out.push('[');
        Ok(Fields {
            encoder: self.reborrow(),
            first: true,
            separator: ',',
            close: Some(']'),
            empty: "",
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().tuple(len))
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().named(None, name, ","))
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().named(Some(name), variant, ","))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Entries<'a>, KeyError> {
        Ok(Entries {
            encoder: self.reborrow(),
            entries: Vec::new(),
            key: None,
        })
    }
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().named(None, name, "="))
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Fields<'a>, KeyError> {
        Ok(self.reborrow().named(Some(name), variant, "="))
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
        if self.entries.is_empty() {
            // Not `[]`, an empty sequence's.
            out.push('=');
        }
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
mod tests;

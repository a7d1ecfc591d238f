//! The key encoding: one value of a key type to one string, and back only one way.
//!
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
use super::{escape_into, escape_with, KeyError};
use serde::ser::{self, Serialize};
use std::fmt::{self, Write};

/// Writes `key`'s encoding into `out`.
pub(super) fn encode<K: Serialize + ?Sized>(out: &mut String, key: &K) -> Result<(), KeyError> {
    key.serialize(&mut Encoder { out, depth: 0 })
}

/// A struct's, enum's, variant's or field's name: `.` also separates an enum's name from
/// its variant's, so it is escaped too.
fn escape_name(out: &mut String, name: &str) {
    escape_with(out, name, NAME_STRUCTURAL);
}

const NAME_STRUCTURAL: &[u8] = b"%:{}()[],=~+'#! .";

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

//! Serialising to JSON text byte for byte as `serde_json::to_vec` does,
//! with strings copied up to their next byte to escape in one piece
//! ([`super::scan`]) instead of looked at byte by byte.
//!
//! It is what [`crate::Emitter::emit_json`] runs. Numbers, escapes and
//! byte arrays are written by serde_json's own [`CompactFormatter`], so
//! they cannot differ. What this serializer does not do as serde_json
//! does — a map key that is not a string, serde_json's raw values and
//! arbitrary-precision numbers, any error a `Serialize` impl raises —
//! makes it give up ([`Fallback`]); [`to_writer`] then runs serde_json
//! itself, whose output or error is the answer. Tested byte for byte
//! against serde_json (`tests` below).

use super::Fallback;
use super::scan::{first_to_escape, short_has_escape};
use serde::ser::{self, Impossible, Serialize};
use serde_json::ser::{CharEscape, CompactFormatter, Formatter};

/// Appends `value`'s JSON text to `out`: what `serde_json::to_writer`
/// appends, or its error (then `out` is as it was).
pub(crate) fn to_writer<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> Result<(), serde_json::Error> {
    let mark = out.len();
    if value.serialize(&mut Serializer { out }).is_ok() {
        return Ok(());
    }
    out.truncate(mark);
    serde_json::to_writer(&mut *out, value).inspect_err(|_| out.truncate(mark))
}

/// Appends `text` as a JSON string literal, quotes included: each run of
/// bytes up to the next one to escape found by [`first_to_escape`] (the
/// whole string, most often) and copied in one piece.
pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    if bytes.len() < 16 && !short_has_escape(bytes) {
        // A short clean string (most keys): checked without a loop.
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    loop {
        let at = first_to_escape(bytes, start);
        out.extend_from_slice(&bytes[start..at]);
        let Some(&byte) = bytes.get(at) else {
            break;
        };
        write_escape(out, byte);
        start = at + 1;
    }
    out.push(b'"');
}

/// Appends the escape of `byte` (one [`first_to_escape`] stops at), as
/// serde_json writes it.
fn write_escape(out: &mut Vec<u8>, byte: u8) {
    let escape = match byte {
        b'"' => CharEscape::Quote,
        b'\\' => CharEscape::ReverseSolidus,
        0x08 => CharEscape::Backspace,
        0x0c => CharEscape::FormFeed,
        b'\n' => CharEscape::LineFeed,
        b'\r' => CharEscape::CarriageReturn,
        b'\t' => CharEscape::Tab,
        control => CharEscape::AsciiControl(control),
    };
    // Writing into a Vec cannot fail.
    let _ = CompactFormatter.write_char_escape(out, escape);
}

/// The serializer: appends to `out`.
struct Serializer<'o> {
    out: &'o mut Vec<u8>,
}

/// Writes a number with serde_json's formatter (into a Vec: cannot fail).
macro_rules! write_number {
    ($method:ident, $write:ident, $type:ty) => {
        fn $method(self, value: $type) -> Result<(), Fallback> {
            let _ = CompactFormatter.$write(self.out, value);
            Ok(())
        }
    };
}

impl<'s, 'o> ser::Serializer for &'s mut Serializer<'o> {
    type Ok = ();
    type Error = Fallback;
    type SerializeSeq = Compound<'s, 'o>;
    type SerializeTuple = Compound<'s, 'o>;
    type SerializeTupleStruct = Compound<'s, 'o>;
    type SerializeTupleVariant = Compound<'s, 'o>;
    type SerializeMap = Compound<'s, 'o>;
    type SerializeStruct = Compound<'s, 'o>;
    type SerializeStructVariant = Compound<'s, 'o>;

    fn serialize_bool(self, value: bool) -> Result<(), Fallback> {
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
        Ok(())
    }

    write_number!(serialize_i8, write_i8, i8);
    write_number!(serialize_i16, write_i16, i16);
    write_number!(serialize_i32, write_i32, i32);
    write_number!(serialize_i64, write_i64, i64);
    write_number!(serialize_i128, write_i128, i128);
    write_number!(serialize_u8, write_u8, u8);
    write_number!(serialize_u16, write_u16, u16);
    write_number!(serialize_u32, write_u32, u32);
    write_number!(serialize_u64, write_u64, u64);
    write_number!(serialize_u128, write_u128, u128);

    fn serialize_f32(self, value: f32) -> Result<(), Fallback> {
        match value.is_finite() {
            true => drop(CompactFormatter.write_f32(self.out, value)),
            false => self.out.extend_from_slice(b"null"),
        }
        Ok(())
    }

    fn serialize_f64(self, value: f64) -> Result<(), Fallback> {
        match value.is_finite() {
            true => drop(CompactFormatter.write_f64(self.out, value)),
            false => self.out.extend_from_slice(b"null"),
        }
        Ok(())
    }

    fn serialize_char(self, value: char) -> Result<(), Fallback> {
        write_str(self.out, value.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, value: &str) -> Result<(), Fallback> {
        write_str(self.out, value);
        Ok(())
    }

    fn serialize_bytes(self, value: &[u8]) -> Result<(), Fallback> {
        let _ = CompactFormatter.write_byte_array(self.out, value);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), Fallback> {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Fallback> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Fallback> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Fallback> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Fallback> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Fallback> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Fallback> {
        self.begin_variant(variant);
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Compound<'s, 'o>, Fallback> {
        Ok(Compound::open(self, b'[', b']', false))
    }

    fn serialize_tuple(self, len: usize) -> Result<Compound<'s, 'o>, Fallback> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Compound<'s, 'o>, Fallback> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'s, 'o>, Fallback> {
        self.begin_variant(variant);
        Ok(Compound::open(self, b'[', b']', true))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Compound<'s, 'o>, Fallback> {
        Ok(Compound::open(self, b'{', b'}', false))
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Compound<'s, 'o>, Fallback> {
        // serde_json's raw values and arbitrary-precision numbers are
        // structs with private names: written as serde_json writes them.
        if name.starts_with("$serde_json::") {
            return Err(Fallback);
        }
        self.serialize_map(Some(len))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Compound<'s, 'o>, Fallback> {
        self.begin_variant(variant);
        Ok(Compound::open(self, b'{', b'}', true))
    }
}

impl Serializer<'_> {
    /// `{"variant":`, the start of an enum variant with content.
    fn begin_variant(&mut self, variant: &str) {
        self.out.push(b'{');
        write_str(self.out, variant);
        self.out.push(b':');
    }
}

/// An array or object being written.
struct Compound<'s, 'o> {
    serializer: &'s mut Serializer<'o>,
    /// The byte that closes it.
    close: u8,
    /// Whether it is an enum variant's content (then `}` closes the
    /// variant's object too).
    in_variant: bool,
    first: bool,
}

impl<'s, 'o> Compound<'s, 'o> {
    fn open(serializer: &'s mut Serializer<'o>, open: u8, close: u8, in_variant: bool) -> Self {
        serializer.out.push(open);
        Compound {
            serializer,
            close,
            in_variant,
            first: true,
        }
    }

    /// Writes the comma before every element but the first.
    fn next(&mut self) {
        if !std::mem::take(&mut self.first) {
            self.serializer.out.push(b',');
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Fallback> {
        self.next();
        value.serialize(&mut *self.serializer)
    }

    fn key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Fallback> {
        self.next();
        key.serialize(KeySerializer {
            out: self.serializer.out,
        })?;
        self.serializer.out.push(b':');
        Ok(())
    }

    fn close(self) -> Result<(), Fallback> {
        self.serializer.out.push(self.close);
        if self.in_variant {
            self.serializer.out.push(b'}');
        }
        Ok(())
    }
}

impl ser::SerializeSeq for Compound<'_, '_> {
    type Ok = ();
    type Error = Fallback;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Fallback> {
        self.element(value)
    }

    fn end(self) -> Result<(), Fallback> {
        self.close()
    }
}

impl ser::SerializeTuple for Compound<'_, '_> {
    type Ok = ();
    type Error = Fallback;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Fallback> {
        self.element(value)
    }

    fn end(self) -> Result<(), Fallback> {
        self.close()
    }
}

impl ser::SerializeTupleStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Fallback;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Fallback> {
        self.element(value)
    }

    fn end(self) -> Result<(), Fallback> {
        self.close()
    }
}

impl ser::SerializeTupleVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Fallback;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Fallback> {
        self.element(value)
    }

    fn end(self) -> Result<(), Fallback> {
        self.close()
    }
}

impl ser::SerializeMap for Compound<'_, '_> {
    type Ok = ();
    type Error = Fallback;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Fallback> {
        self.key(key)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Fallback> {
        value.serialize(&mut *self.serializer)
    }

    fn end(self) -> Result<(), Fallback> {
        self.close()
    }
}

impl ser::SerializeStruct for Compound<'_, '_> {
    type Ok = ();
    type Error = Fallback;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Fallback> {
        self.key(key)?;
        value.serialize(&mut *self.serializer)
    }

    fn end(self) -> Result<(), Fallback> {
        self.close()
    }
}

impl ser::SerializeStructVariant for Compound<'_, '_> {
    type Ok = ();
    type Error = Fallback;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Fallback> {
        self.key(key)?;
        value.serialize(&mut *self.serializer)
    }

    fn end(self) -> Result<(), Fallback> {
        self.close()
    }
}

/// A map key: strings (and what serde_json writes as one: a char, a unit
/// variant, a newtype around a string) are written here; any other key
/// goes to serde_json ([`Fallback`]), which quotes numbers and booleans
/// or refuses the key.
struct KeySerializer<'o> {
    out: &'o mut Vec<u8>,
}

/// A key serde_json writes its own way.
macro_rules! key_elsewhere {
    ($($method:ident($($type:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $type),*) -> Result<(), Fallback> {
            Err(Fallback)
        })*
    };
}

impl ser::Serializer for KeySerializer<'_> {
    type Ok = ();
    type Error = Fallback;
    type SerializeSeq = Impossible<(), Fallback>;
    type SerializeTuple = Impossible<(), Fallback>;
    type SerializeTupleStruct = Impossible<(), Fallback>;
    type SerializeTupleVariant = Impossible<(), Fallback>;
    type SerializeMap = Impossible<(), Fallback>;
    type SerializeStruct = Impossible<(), Fallback>;
    type SerializeStructVariant = Impossible<(), Fallback>;

    fn serialize_str(self, value: &str) -> Result<(), Fallback> {
        write_str(self.out, value);
        Ok(())
    }

    fn serialize_char(self, value: char) -> Result<(), Fallback> {
        write_str(self.out, value.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), Fallback> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), Fallback> {
        value.serialize(self)
    }

    key_elsewhere!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
    );

    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<(), Fallback> {
        Err(Fallback)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), Fallback> {
        Err(Fallback)
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, Fallback> {
        Err(Fallback)
    }

    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, Fallback> {
        Err(Fallback)
    }

    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, Fallback> {
        Err(Fallback)
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, Fallback> {
        Err(Fallback)
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, Fallback> {
        Err(Fallback)
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, Fallback> {
        Err(Fallback)
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, Fallback> {
        Err(Fallback)
    }
}

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;

//! Deserialising JSON text exactly as `serde_json::from_slice` does, with
//! the common values read on a shorter path.
//!
//! It is what [`crate::Record::value_json`] runs. In a plugin, serde_json's
//! reader looks at each byte of a string through a table and then checks
//! the string's UTF-8 again; both were ~20 % of the README-style plugin's
//! CPU (lab note `docs/perf/2026-12-07-serde-plugin-path.md`). Here:
//!
//! * a string is scanned eight bytes at a time ([`super::scan`]); one
//!   without escapes or bytes beyond ASCII is borrowed without a UTF-8
//!   check (ASCII is UTF-8), any other is checked or handed to serde_json;
//! * an integer is read from its digits; a number with a fraction, an
//!   exponent or more digits than 64 bits hold is read by serde_json from
//!   its text, so that floats round exactly as serde_json rounds them;
//! * everything else (enums, bytes, raw values, 128-bit integers) is read
//!   by serde_json from the value's text, once this reader has found
//!   where it ends.
//!
//! The visitor sees the calls serde_json's reader would make
//! (`visit_u64` for a non-negative integer, `visit_borrowed_str` for a
//! string without escapes, ...). Anything this reader does not accept —
//! malformed JSON, a value of a type the visitor refuses, a map key that
//! is not read as a string — makes it give up ([`Fallback`]):
//! [`from_slice`] then runs serde_json on the whole value, whose result or
//! error (with its wording and position) is the answer. Tested against
//! serde_json on values, records and malformed text (`tests`).

use super::Fallback;
use super::scan::first_special;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer as _, Visitor};
use serde_json::de::SliceRead;
use std::sync::atomic::{AtomicU8, Ordering};

/// Nesting deeper than this is left to serde_json (whose limit is 128).
const MAX_DEPTH: u32 = 100;

/// The name serde_json gives the newtype of its raw values.
const RAW_VALUE: &str = "$serde_json::private::RawValue";

/// Deserialises `input` as `serde_json::from_slice` does (the same value,
/// or the same error).
pub(crate) fn from_slice<'a, T: Deserialize<'a>>(input: &'a [u8]) -> Result<T, serde_json::Error> {
    if reads_numbers_as_serde_json() {
        let mut reader = Reader {
            input,
            at: 0,
            depth: 0,
        };
        if let Ok(value) = T::deserialize(&mut reader)
            && reader.peek().is_none()
        {
            return Ok(value);
        }
    }
    serde_json::from_slice(input)
}

/// What [`reads_numbers_as_serde_json`] found: not asked yet, yes, no.
/// (A component instance has one thread; atomics cost a plain load there.)
static NUMBERS_AS_SERDE_JSON: AtomicU8 = AtomicU8::new(NOT_ASKED);
const NOT_ASKED: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

/// Whether serde_json hands a visitor integers as integers. With its
/// `arbitrary_precision` feature (which any crate of the plugin may turn
/// on) it hands them as a map instead: this reader then stays out of the
/// way. Asked of serde_json once.
fn reads_numbers_as_serde_json() -> bool {
    match NUMBERS_AS_SERDE_JSON.load(Ordering::Relaxed) {
        YES => true,
        NO => false,
        _ => {
            let yes = serde_json_reads_integers();
            NUMBERS_AS_SERDE_JSON.store(if yes { YES } else { NO }, Ordering::Relaxed);
            yes
        }
    }
}

/// Whether serde_json gives a visitor `1` with `visit_u64`.
fn serde_json_reads_integers() -> bool {
    struct IsInteger(bool);
    impl<'de> Deserialize<'de> for IsInteger {
        fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(IsIntegerVisitor)
        }
    }
    struct IsIntegerVisitor;
    impl<'de> Visitor<'de> for IsIntegerVisitor {
        type Value = IsInteger;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an integer")
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<IsInteger, E> {
            Ok(IsInteger(true))
        }
    }
    matches!(serde_json::from_slice(b"1"), Ok(IsInteger(true)))
}

/// A number as read: an integer, or the text serde_json reads.
enum Number<'a> {
    Unsigned(u64),
    Negative(i64),
    Text(&'a [u8]),
}

/// A string as read: borrowed, or its JSON text (quotes included) when it
/// has escapes, for serde_json to decode.
enum Text<'a> {
    Plain(&'a str),
    Escaped(&'a [u8]),
}

/// Reads one JSON value from `input[at..]`.
struct Reader<'a> {
    input: &'a [u8],
    at: usize,
    depth: u32,
}

impl<'a> Reader<'a> {
    /// The next byte after whitespace (the position moved to it).
    fn peek(&mut self) -> Option<u8> {
        while let Some(&byte) = self.input.get(self.at) {
            match byte {
                b' ' | b'\n' | b'\t' | b'\r' => self.at += 1,
                _ => return Some(byte),
            }
        }
        None
    }

    /// Steps over `literal` (`null`, `true`, `false`) where it stands.
    fn literal(&mut self, literal: &[u8]) -> Result<(), Fallback> {
        match self.input.get(self.at..self.at + literal.len()) {
            Some(found) if found == literal => {
                self.at += literal.len();
                Ok(())
            }
            _ => Err(Fallback),
        }
    }

    /// Reads the string that starts here (at its `"`).
    fn string(&mut self) -> Result<Text<'a>, Fallback> {
        let start = self.at;
        let mut at = start + 1;
        let mut ascii = true;
        let mut escaped = false;
        loop {
            at = first_special(self.input, at);
            match self.input.get(at) {
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    at += 2;
                }
                Some(&byte) if byte >= 0x80 => {
                    ascii = false;
                    at += 1;
                }
                // A control character, or no closing quote.
                _ => return Err(Fallback),
            }
        }
        self.at = at + 1;
        let contents = self.input.get(start + 1..at).ok_or(Fallback)?;
        if escaped {
            return Ok(Text::Escaped(&self.input[start..self.at]));
        }
        if ascii {
            // SAFETY: every byte of `contents` is below 0x80 (the scan
            // stops at any other), and ASCII is UTF-8.
            return Ok(Text::Plain(unsafe {
                std::str::from_utf8_unchecked(contents)
            }));
        }
        std::str::from_utf8(contents)
            .map(Text::Plain)
            .map_err(|_| Fallback)
    }

    /// Reads the number that starts here (at its `-` or first digit).
    fn number(&mut self) -> Result<Number<'a>, Fallback> {
        let start = self.at;
        let negative = self.input.get(self.at) == Some(&b'-');
        if negative {
            self.at += 1;
        }
        let digits_start = self.at;
        let mut value: u64 = 0;
        match self.input.get(self.at) {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                // Eight digits a step while there are eight (a loop turn
                // costs an epoch check in a guest), then one at a time.
                // Wraps only past 19 digits, which are not used below
                // (checked arithmetic on `u64` is a 128-bit multiply call
                // in a 32-bit WebAssembly guest).
                while let Some(eight) = self.input.get(self.at..self.at + 8).and_then(eight_digits)
                {
                    value = value.wrapping_mul(100_000_000).wrapping_add(eight);
                    self.at += 8;
                }
                while let Some(&digit @ b'0'..=b'9') = self.input.get(self.at) {
                    value = value.wrapping_mul(10).wrapping_add(u64::from(digit - b'0'));
                    self.at += 1;
                }
            }
            _ => return Err(Fallback),
        }
        // Up to 19 digits always fit in 64 bits; longer ones (some fit,
        // most become floats) are read by serde_json.
        let value = (self.at - digits_start <= 19).then_some(value);
        let mut integer = true;
        if self.input.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.digits()?;
            integer = false;
        }
        if let Some(b'e' | b'E') = self.input.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.input.get(self.at) {
                self.at += 1;
            }
            self.digits()?;
            integer = false;
        }
        if let Some(b'0'..=b'9') = self.input.get(self.at) {
            // A leading zero followed by digits: not JSON.
            return Err(Fallback);
        }
        let text = &self.input[start..self.at];
        Ok(match (integer, value, negative) {
            (true, Some(value), false) => Number::Unsigned(value),
            // Zero negated is a float to serde_json (-0.0): read by it.
            (true, Some(value), true) if value != 0 => match 0i64.checked_sub_unsigned(value) {
                Some(negative) => Number::Negative(negative),
                None => Number::Text(text),
            },
            _ => Number::Text(text),
        })
    }

    /// Steps over one or more digits.
    fn digits(&mut self) -> Result<(), Fallback> {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.input.get(self.at) {
            self.at += 1;
        }
        if self.at == start {
            return Err(Fallback);
        }
        Ok(())
    }

    /// Steps over the value that starts here, checking it, and returns its
    /// text.
    fn skip_value(&mut self) -> Result<&'a [u8], Fallback> {
        let start = self.at;
        match self.peek().ok_or(Fallback)? {
            b'n' => self.literal(b"null")?,
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'-' | b'0'..=b'9' => {
                self.number()?;
            }
            b'"' => {
                self.string()?;
            }
            b'[' => {
                self.enter()?;
                let mut first = true;
                while self.next_element(&mut first)? {
                    self.skip_value()?;
                }
                self.close(b']')?;
            }
            b'{' => {
                self.enter()?;
                let mut first = true;
                while self.next_key(&mut first)? {
                    self.string()?;
                    self.colon()?;
                    self.skip_value()?;
                }
                self.close(b'}')?;
            }
            _ => return Err(Fallback),
        }
        Ok(self.input[start..self.at].trim_ascii_start())
    }

    /// Steps into an array or object (at its opening byte).
    fn enter(&mut self) -> Result<(), Fallback> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Fallback);
        }
        self.at += 1;
        Ok(())
    }

    /// Steps over the `]` or `}` that closes what [`Reader::enter`]
    /// entered (every element read: anything else is an error).
    fn close(&mut self, byte: u8) -> Result<(), Fallback> {
        if self.peek() != Some(byte) {
            return Err(Fallback);
        }
        self.at += 1;
        self.depth -= 1;
        Ok(())
    }

    /// Whether another element of an array follows (then at its start).
    fn next_element(&mut self, first: &mut bool) -> Result<bool, Fallback> {
        self.next(first, b']')
    }

    /// Whether another field of an object follows (then at its key).
    fn next_key(&mut self, first: &mut bool) -> Result<bool, Fallback> {
        if !self.next(first, b'}')? {
            return Ok(false);
        }
        match self.peek() {
            Some(b'"') => Ok(true),
            _ => Err(Fallback),
        }
    }

    /// Steps over the comma before every element but the first; `false`
    /// at `end`.
    fn next(&mut self, first: &mut bool, end: u8) -> Result<bool, Fallback> {
        match self.peek() {
            Some(byte) if byte == end => return Ok(false),
            Some(b',') if !*first => {
                self.at += 1;
                if self.peek() == Some(end) {
                    // A trailing comma.
                    return Err(Fallback);
                }
            }
            Some(_) if *first => {}
            _ => return Err(Fallback),
        }
        *first = false;
        Ok(true)
    }

    /// Steps over the `:` after a key.
    fn colon(&mut self) -> Result<(), Fallback> {
        match self.peek() {
            Some(b':') => {
                self.at += 1;
                Ok(())
            }
            _ => Err(Fallback),
        }
    }

    /// Hands the value that starts here to serde_json's reader (`read`:
    /// the method the visitor asked for).
    fn by_serde_json<V>(
        &mut self,
        read: impl FnOnce(&mut serde_json::Deserializer<SliceRead<'a>>) -> serde_json::Result<V>,
    ) -> Result<V, Fallback> {
        let text = self.skip_value()?;
        by_serde_json(text, read)
    }

    /// A number to `visitor`, as serde_json's reader gives it.
    fn visit_number<V: Visitor<'a>>(&mut self, visitor: V) -> Result<V::Value, Fallback> {
        match self.number()? {
            Number::Unsigned(value) => visitor.visit_u64(value),
            Number::Negative(value) => visitor.visit_i64(value),
            Number::Text(text) => by_serde_json(text, |d| d.deserialize_any(visitor)),
        }
    }

    /// A string to `visitor`, as serde_json's reader gives it.
    fn visit_string<V: Visitor<'a>>(&mut self, visitor: V) -> Result<V::Value, Fallback> {
        match self.string()? {
            Text::Plain(text) => visitor.visit_borrowed_str(text),
            Text::Escaped(text) => by_serde_json(text, |d| d.deserialize_str(visitor)),
        }
    }

    /// An array to `visitor`; the reader then checks it was read whole.
    fn visit_array<V: Visitor<'a>>(&mut self, visitor: V) -> Result<V::Value, Fallback> {
        self.enter()?;
        let value = visitor.visit_seq(Elements {
            reader: self,
            first: true,
        })?;
        self.close(b']')?;
        Ok(value)
    }

    /// An object to `visitor`; the reader then checks it was read whole.
    fn visit_object<V: Visitor<'a>>(&mut self, visitor: V) -> Result<V::Value, Fallback> {
        self.enter()?;
        let value = visitor.visit_map(Fields {
            reader: self,
            first: true,
        })?;
        self.close(b'}')?;
        Ok(value)
    }
}

/// The value of `chunk` (eight bytes) if all eight are ASCII digits, the
/// first the most significant: tested and converted a word at a time
/// (the conversion is simdjson's `parse_eight_digits_unrolled`).
fn eight_digits(chunk: &[u8]) -> Option<u64> {
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    let mut word = [0u8; 8];
    word.copy_from_slice(chunk);
    let word = u64::from_le_bytes(word);
    // Each byte 0x30..=0x39: high nibble 3, and still 3 after adding 6.
    let digits = word & HIGH_NIBBLES == ZEROS
        && word.wrapping_add(0x0606_0606_0606_0606) & HIGH_NIBBLES == ZEROS;
    if !digits {
        return None;
    }
    let mut value = word - ZEROS;
    value = value.wrapping_mul(10).wrapping_add(value >> 8);
    let pairs = 0x0000_00FF_0000_00FF;
    value = (value & pairs)
        .wrapping_mul(100 + (1_000_000 << 32))
        .wrapping_add(((value >> 16) & pairs).wrapping_mul(1 + (10_000 << 32)))
        >> 32;
    Some(value)
}

/// serde_json's reader on `text` (one whole value): the visitor gets the
/// calls it would get from serde_json reading the whole document.
fn by_serde_json<'a, V>(
    text: &'a [u8],
    read: impl FnOnce(&mut serde_json::Deserializer<SliceRead<'a>>) -> serde_json::Result<V>,
) -> Result<V, Fallback> {
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    let value = read(&mut deserializer).map_err(|_| Fallback)?;
    deserializer.end().map_err(|_| Fallback)?;
    Ok(value)
}

/// The methods that take a number: serde_json gives any number to the
/// visitor as it reads it (the visitor converts or refuses).
macro_rules! numbers {
    ($($method:ident),*) => {
        $(fn $method<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
            match self.peek() {
                Some(b'-' | b'0'..=b'9') => self.visit_number(visitor),
                _ => Err(Fallback),
            }
        })*
    };
}

impl<'a> de::Deserializer<'a> for &mut Reader<'a> {
    type Error = Fallback;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.peek().ok_or(Fallback)? {
            b'n' => self.literal(b"null").and_then(|()| visitor.visit_unit()),
            b't' => self
                .literal(b"true")
                .and_then(|()| visitor.visit_bool(true)),
            b'f' => self
                .literal(b"false")
                .and_then(|()| visitor.visit_bool(false)),
            b'-' | b'0'..=b'9' => self.visit_number(visitor),
            b'"' => self.visit_string(visitor),
            b'[' => self.visit_array(visitor),
            b'{' => self.visit_object(visitor),
            _ => Err(Fallback),
        }
    }

    fn deserialize_bool<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.peek() {
            Some(b't' | b'f') => self.deserialize_any(visitor),
            _ => Err(Fallback),
        }
    }

    numbers!(
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_f32,
        deserialize_f64
    );

    fn deserialize_i128<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.by_serde_json(|d| d.deserialize_i128(visitor))
    }

    fn deserialize_u128<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.by_serde_json(|d| d.deserialize_u128(visitor))
    }

    fn deserialize_char<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.peek() {
            Some(b'"') => self.visit_string(visitor),
            _ => Err(Fallback),
        }
    }

    fn deserialize_string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.by_serde_json(|d| d.deserialize_bytes(visitor))
    }

    fn deserialize_byte_buf<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.by_serde_json(|d| d.deserialize_byte_buf(visitor))
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.peek() {
            Some(b'n') => self.literal(b"null").and_then(|()| visitor.visit_none()),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.peek() {
            Some(b'n') => self.literal(b"null").and_then(|()| visitor.visit_unit()),
            _ => Err(Fallback),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        if name == RAW_VALUE {
            return self.by_serde_json(|d| d.deserialize_newtype_struct(name, visitor));
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.peek() {
            Some(b'[') => self.visit_array(visitor),
            _ => Err(Fallback),
        }
    }

    fn deserialize_tuple<V: Visitor<'a>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.peek() {
            Some(b'{') => self.visit_object(visitor),
            _ => Err(Fallback),
        }
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        match self.peek() {
            Some(b'{') => self.visit_object(visitor),
            Some(b'[') => self.visit_array(visitor),
            _ => Err(Fallback),
        }
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        self.by_serde_json(|d| d.deserialize_enum(name, variants, visitor))
    }

    fn deserialize_identifier<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.skip_value()?;
        visitor.visit_unit()
    }
}

/// The elements of an array, for a visitor.
struct Elements<'r, 'a> {
    reader: &'r mut Reader<'a>,
    first: bool,
}

impl<'a> de::SeqAccess<'a> for Elements<'_, 'a> {
    type Error = Fallback;

    fn next_element_seed<T: DeserializeSeed<'a>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Fallback> {
        if !self.reader.next_element(&mut self.first)? {
            return Ok(None);
        }
        seed.deserialize(&mut *self.reader).map(Some)
    }
}

/// The fields of an object, for a visitor.
struct Fields<'r, 'a> {
    reader: &'r mut Reader<'a>,
    first: bool,
}

impl<'a> de::MapAccess<'a> for Fields<'_, 'a> {
    type Error = Fallback;

    fn next_key_seed<K: DeserializeSeed<'a>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Fallback> {
        if !self.reader.next_key(&mut self.first)? {
            return Ok(None);
        }
        seed.deserialize(Key {
            reader: &mut *self.reader,
        })
        .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value, Fallback> {
        self.reader.colon()?;
        seed.deserialize(&mut *self.reader)
    }
}

/// The methods a key is not read by here: serde_json reads a key as a
/// number or a boolean when the visitor asks for one, and has its own
/// ways with the others; such keys go to it ([`Fallback`]).
macro_rules! refused_keys {
    ($($method:ident),*) => {
        $(fn $method<V: Visitor<'a>>(self, _visitor: V) -> Result<V::Value, Fallback> {
            Err(Fallback)
        })*
    };
}

/// An object's key, read as a string (see [`refused_keys`]).
struct Key<'r, 'a> {
    reader: &'r mut Reader<'a>,
}

impl<'a> de::Deserializer<'a> for Key<'_, 'a> {
    type Error = Fallback;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.reader.visit_string(visitor)
    }

    fn deserialize_str<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.reader.visit_string(visitor)
    }

    fn deserialize_string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.reader.visit_string(visitor)
    }

    fn deserialize_identifier<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.reader.visit_string(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.reader.string()?;
        visitor.visit_unit()
    }

    refused_keys!(
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_map
    );

    fn deserialize_unit_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _visitor: V,
    ) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _visitor: V,
    ) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_tuple<V: Visitor<'a>>(
        self,
        _len: usize,
        _visitor: V,
    ) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _len: usize,
        _visitor: V,
    ) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;

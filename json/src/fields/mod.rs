//! Reading a few fields of a JSON record without building the whole value:
//! a window needs a key and a number per record, a source an event time, at
//! hundreds of thousands of records per second. simdjson's pass
//! ([`crate::scan`]) does the work where it can; serde_json decides the rest.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use sluice_wire::projected::same_name;
use smallvec::SmallVec;

use crate::scan::{self, FieldNames, JsonDocument, ScannedField};

/// A field's value, as far as keys, numbers and event times care.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// An integer (within i64).
    Int(i64),
    /// Any other number.
    Float(f64),
    /// A string.
    Str(String),
    /// Anything else (object, array, bool, null, or an integer beyond i64).
    Other(Value),
}

impl FieldValue {
    /// The key bytes this value stands for: a string's UTF-8, else its JSON.
    pub fn key_bytes(&self) -> Vec<u8> {
        match self {
            FieldValue::Str(s) => s.as_bytes().to_vec(),
            FieldValue::Int(i) => itoa::Buffer::new().format(*i).as_bytes().to_vec(),
            FieldValue::Float(f) => Value::from(*f).to_string().into_bytes(),
            FieldValue::Other(v) => v.to_string().into_bytes(),
        }
    }

    /// The value as JSON (for messages that show what was found).
    pub fn to_json(&self) -> Value {
        match self {
            FieldValue::Int(i) => Value::from(*i),
            FieldValue::Float(f) => Value::from(*f),
            FieldValue::Str(s) => Value::String(s.clone()),
            FieldValue::Other(v) => v.clone(),
        }
    }
}

/// `a.b`, `a` or `/a/b` as a JSON pointer.
pub fn json_pointer(field: &str) -> String {
    if field.starts_with('/') {
        field.to_string()
    } else {
        format!("/{}", field.replace('.', "/"))
    }
}

fn from_value(value: Value) -> FieldValue {
    match value {
        Value::String(s) => FieldValue::Str(s),
        Value::Number(n) if n.is_i64() => FieldValue::Int(n.as_i64().unwrap_or_default()),
        Value::Number(n) if n.is_f64() => FieldValue::Float(n.as_f64().unwrap_or_default()),
        other => FieldValue::Other(other),
    }
}

/// Where a field is: a top-level name (fast path) or a JSON pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldPath {
    /// A top-level field.
    Top(String),
    /// A nested field, as a JSON pointer.
    Pointer(String),
}

impl FieldPath {
    /// `name`, `a.b` or `/a/b`.
    pub fn parse(field: &str) -> FieldPath {
        let pointer = json_pointer(field);
        let rest = &pointer[1..];
        if rest.contains('/') || rest.contains('~') {
            FieldPath::Pointer(pointer)
        } else {
            FieldPath::Top(rest.to_string())
        }
    }
}

impl AsRef<FieldPath> for FieldPath {
    fn as_ref(&self) -> &FieldPath {
        self
    }
}

/// Extracts the values of `paths` (owned or borrowed, so that callers keep
/// their paths and build no list per record) from a JSON document; `None`
/// for a field that is missing. Fails if the document is not JSON (or,
/// with top-level paths only, not an object).
pub fn extract<P: AsRef<FieldPath>>(
    document: &[u8],
    paths: &[P],
) -> Result<Vec<Option<FieldValue>>, String> {
    let mut found = Vec::with_capacity(paths.len());
    extract_into(document, paths, &mut found)?;
    Ok(found)
}

/// [`extract`] appending to `found` (one value per path; nothing on an
/// error), so that a caller reading many records keeps one list.
///
/// With top-level paths only (the common case) this is one pass over the
/// document that checks its syntax and builds nothing but the values asked
/// for: keys are compared where they lie in the document (copied only when
/// they hold escapes), other values are skipped.
pub fn extract_into<'d, P: AsRef<FieldPath>>(
    document: impl Into<JsonDocument<'d>>,
    paths: &[P],
    found: &mut Vec<Option<FieldValue>>,
) -> Result<(), String> {
    let document = document.into();
    match scan_names(paths, &[]) {
        Some(names) => extract_with_names(document, &names, paths, found, None).map(|_| ()),
        None => fill_appended(found, paths.len(), |slots| {
            extract_parsed(document, paths, slots)
        }),
    }
}

/// The names [`extract_with_names`] takes for `paths` and `span_names`
/// (laid out for [`scan`]), or `None` if a path is not
/// [`FieldPath::Top`].
pub fn scan_names<P: AsRef<FieldPath>>(paths: &[P], span_names: &[String]) -> Option<FieldNames> {
    let mut names = FieldNames::new();
    for path in paths {
        let FieldPath::Top(name) = path.as_ref() else {
            return None;
        };
        names.push(name);
    }
    for name in span_names {
        names.push(name);
    }
    Some(names)
}

/// [`extract_into_with_spans`] (or, without spans, [`extract_into`]) for
/// top-level `paths`, with `names` their [`scan_names`] (and the spans'
/// names): a caller reading many documents lays the names out once.
pub fn extract_with_names<'d, P: AsRef<FieldPath>>(
    document: impl Into<JsonDocument<'d>>,
    names: &FieldNames,
    paths: &[P],
    found: &mut Vec<Option<FieldValue>>,
    mut spans: Option<Spans<'_>>,
) -> Result<usize, String> {
    let document = document.into();
    let start = found.len();
    found.resize_with(start + paths.len(), || None);
    if let Some(entries) = scan_top_level_simd(document, names, &mut found[start..], spans.as_mut())
    {
        return Ok(entries);
    }
    found.truncate(start);
    fill_appended(found, paths.len(), |slots| {
        let text = utf8_text(document.bytes())?;
        scan_top_level(text, paths, slots, spans)
            .map_err(|e| format!("value is not a JSON object: {e}"))
    })
}

/// Appends `count` empty slots to `found` and fills them with `fill`; on
/// an error `found` is left as it was.
fn fill_appended<T>(
    found: &mut Vec<Option<FieldValue>>,
    count: usize,
    fill: impl FnOnce(&mut [Option<FieldValue>]) -> Result<T, String>,
) -> Result<T, String> {
    let start = found.len();
    found.extend(std::iter::repeat_with(|| None).take(count));
    let result = fill(&mut found[start..]);
    if result.is_err() {
        found.truncate(start);
    }
    result
}

/// Fills `found` (one slot per path, some nested) from `document`, parsed
/// whole.
fn extract_parsed<P: AsRef<FieldPath>>(
    document: JsonDocument<'_>,
    paths: &[P],
    found: &mut [Option<FieldValue>],
) -> Result<(), String> {
    let value: Value =
        serde_json::from_slice(document.bytes()).map_err(|e| format!("value is not JSON: {e}"))?;
    for (slot, path) in found.iter_mut().zip(paths) {
        let value = match path.as_ref() {
            FieldPath::Top(name) => value.get(name.as_str()),
            FieldPath::Pointer(pointer) => value.pointer(pointer),
        };
        *slot = value.cloned().map(from_value);
    }
    Ok(())
}

/// Where top-level fields' JSON text lies in a document: the names asked
/// for and, per name, the `(start, end)` byte range of its (last) value, or
/// `None` if the object has no such field.
pub struct Spans<'s> {
    /// The field names.
    pub names: &'s [String],
    /// One slot per name, filled by [`extract_into_with_spans`].
    pub found: &'s mut [Option<(usize, usize)>],
}

/// [`extract_into`] for top-level `paths` that also finds where the fields
/// `spans.names` lie in the document (their JSON text, for a plugin on the
/// projected path), in the same pass. Returns how many fields the object
/// has. Fails (filling nothing) if the document is not one JSON object in
/// UTF-8 (all of it, skipped strings too, as a plugin's own parse checks
/// it) or a path is not [`FieldPath::Top`].
pub fn extract_into_with_spans<'d, P: AsRef<FieldPath>>(
    document: impl Into<JsonDocument<'d>>,
    paths: &[P],
    found: &mut Vec<Option<FieldValue>>,
    spans: Spans<'_>,
) -> Result<usize, String> {
    let Some(names) = scan_names(paths, spans.names) else {
        return Err("field spans are found for top-level paths only".to_string());
    };
    extract_with_names(document, &names, paths, found, Some(spans))
}

/// Checks that `document` is one JSON value in UTF-8 (all of it, skipped
/// strings too), building nothing: what a JSON-lines source asks of a line
/// it reads no field of, and the host of a new value a plugin splices in.
/// The error is `invalid JSON: ` and [`why_not_json`]'s reason.
pub fn check_json<'d>(document: impl Into<JsonDocument<'d>>) -> Result<(), String> {
    match why_not_json(document) {
        None => Ok(()),
        Some(reason) => Err(format!("invalid JSON: {reason}")),
    }
}

/// Why `document` is not one JSON value in UTF-8 (all of it, skipped
/// strings too), or `None` if it is (see [`check_json`]).
pub fn why_not_json<'d>(document: impl Into<JsonDocument<'d>>) -> Option<String> {
    let scanned = document.into();
    let document = scanned.bytes();
    if is_plain_json_string(document) {
        return None;
    }
    // simdjson's start costs more than serde_json's whole check of a short
    // value, and it hands back scalars (a plugin's new string field, say).
    if document.len() >= SIMD_CHECK_MIN_BYTES
        && matches!(document.first(), Some(b'{' | b'['))
        && scan::check(scanned)
    {
        return None;
    }
    let text = match utf8_text(document) {
        Ok(text) => text,
        Err(reason) => return Some(reason),
    };
    serde_json::from_str::<IgnoredAny>(text)
        .err()
        .map(|e| e.to_string())
}

/// `document` as text, or why it is not UTF-8 (which JSON must be:
/// RFC 8259, section 8.1).
///
/// The whole value is checked at once, skipped strings too, with SIMD
/// (simdutf8), so that the parse after it reads `str`s and checks no
/// string again: cheaper than serde_json checking each key it borrows
/// from a byte slice (ADR 0015, twelfth step).
fn utf8_text(document: &[u8]) -> Result<&str, String> {
    simdutf8::basic::from_utf8(document).map_err(|_| {
        // The fast check says only that it failed; std says where.
        match std::str::from_utf8(document) {
            Err(e) => format!("value is not UTF-8: {e}"),
            Ok(_) => "value is not UTF-8".to_string(),
        }
    })
}

/// Whether `document` is a JSON string without escapes: `"`, text with no
/// `"`, `\\` or control character, `"`, all UTF-8 (RFC 8259, section 7).
///
/// The commonest value a plugin writes into a record, checked in one pass
/// the compiler vectorises: ~11 ns for a 100-byte string against ~45 for
/// serde_json's check after simdutf8's (ADR 0015, nineteenth step). Any
/// other document (`false`) goes through the full check.
fn is_plain_json_string(document: &[u8]) -> bool {
    let [b'"', text @ .., b'"'] = document else {
        return false;
    };
    // No early exit, so that the loop is vectorised.
    let (special, non_ascii) = text
        .iter()
        .fold((false, false), |(special, non_ascii), &b| {
            (
                special | (b < 0x20) | (b == b'"') | (b == b'\\'),
                non_ascii | (b >= 0x80),
            )
        });
    !special && (!non_ascii || std::str::from_utf8(text).is_ok())
}

/// The shortest document [`check_json`] hands to [`scan::check`].
const SIMD_CHECK_MIN_BYTES: usize = 64;

/// Fields a [`scan_top_level_simd`] call finds without allocating.
const INLINE_NAMES: usize = 8;

/// [`scan_top_level`] by [`scan`](crate::scan) (simdjson), which takes most
/// documents; `None` if it hands this one back to serde_json (see
/// [`scan`](crate::scan)), with `found` and the spans left empty. `names` are the
/// paths' names (one per slot of `found`), then the spans'.
///
/// Integers come from the scan; any other value asked for is read from its
/// text by the same visitor serde_json's pass uses, so a value reads the
/// same whichever parser found it.
fn scan_top_level_simd(
    document: JsonDocument<'_>,
    names: &FieldNames,
    found: &mut [Option<FieldValue>],
    mut spans: Option<&mut Spans<'_>>,
) -> Option<usize> {
    let span_count = spans.as_ref().map_or(0, |spans| spans.found.len());
    if names.len() != found.len() + span_count {
        return None;
    }
    let mut scanned =
        SmallVec::<[ScannedField; INLINE_NAMES]>::from_elem(ScannedField::default(), names.len());
    let entries = scan::scan_object(document, names, &mut scanned)?;
    let (path_fields, span_fields) = scanned.split_at(found.len());
    for (slot, field) in found.iter_mut().zip(path_fields) {
        if read_scanned(document.bytes(), field, slot).is_none() {
            found.iter_mut().for_each(|slot| *slot = None);
            return None;
        }
    }
    if let Some(spans) = spans.as_mut() {
        for (slot, field) in spans.found.iter_mut().zip(span_fields) {
            *slot = field.span();
        }
    }
    Some(entries)
}

/// Reads a field [`scan::scan_object`] found into `slot` (`None` if
/// missing); `None` if its text does not read as a value (never for a
/// document the scan took).
fn read_scanned(
    document: &[u8],
    field: &ScannedField,
    slot: &mut Option<FieldValue>,
) -> Option<()> {
    *slot = None;
    let Some((start, end)) = field.span() else {
        return Some(());
    };
    if let Some(integer) = field.integer() {
        *slot = Some(FieldValue::Int(integer));
        return Some(());
    }
    let text = document.get(start..end)?;
    FieldInto(slot)
        .deserialize(&mut serde_json::Deserializer::from_slice(text))
        .ok()
}

/// One pass over a top-level object: the values of `paths` (all
/// [`FieldPath::Top`]) into `found` and, if asked, the spans of fields;
/// returns how many fields the object has.
fn scan_top_level<P: AsRef<FieldPath>>(
    text: &str,
    paths: &[P],
    found: &mut [Option<FieldValue>],
    spans: Option<Spans<'_>>,
) -> Result<usize, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let entries = deserializer.deserialize_map(FieldsVisitor {
        document: text.as_bytes(),
        paths,
        found,
        spans,
    })?;
    deserializer.end()?;
    Ok(entries)
}

/// Reads the fields of a top-level object into `found`, by position in
/// `paths` (all [`FieldPath::Top`]), and the spans of `spans.names`.
struct FieldsVisitor<'d, 'p, 'f, 's, P> {
    document: &'d [u8],
    paths: &'p [P],
    found: &'f mut [Option<FieldValue>],
    spans: Option<Spans<'s>>,
}

impl<'de, P: AsRef<FieldPath>> Visitor<'de> for FieldsVisitor<'_, '_, '_, '_, P> {
    type Value = usize;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<usize, A::Error> {
        let mut entries = 0;
        let seed = KeyMatcher {
            paths: self.paths,
            span_names: self.spans.as_ref().map(|spans| spans.names),
        };
        while let Some(key) = map.next_key_seed(seed)? {
            entries += 1;
            let first = key.path();
            match (first, key.span()) {
                (None, None) => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                (_, Some(span)) => {
                    let raw = map.next_value_seed(RawSeed)?;
                    let start = raw.get().as_ptr() as usize - self.document.as_ptr() as usize;
                    if let Some(spans) = &mut self.spans {
                        spans.found[span] = Some((start, start + raw.get().len()));
                    }
                    let Some(first) = first else { continue };
                    // Asked for both: the value from its text.
                    FieldInto(&mut self.found[first])
                        .deserialize(&mut serde_json::Deserializer::from_str(raw.get()))
                        .map_err(serde::de::Error::custom)?;
                }
                (Some(first), None) => map.next_value_seed(FieldInto(&mut self.found[first]))?,
            }
            let Some(first) = first else { continue };
            // A field asked for twice is filled twice.
            for index in first + 1..self.paths.len() {
                if self.paths[index].as_ref() == self.paths[first].as_ref() {
                    self.found[index] = self.found[first].clone();
                }
            }
        }
        Ok(entries)
    }
}

/// Which of the fields asked for an object key names: the first path with
/// that name and the span name, as indices (`u32::MAX`: none).
///
/// Small enough to come back from the key's parse in registers, and the
/// key is compared where serde hands it over, so a key with escapes is not
/// copied either.
#[derive(Clone, Copy)]
struct KeyMatch {
    path: u32,
    span: u32,
}

impl KeyMatch {
    const NONE: u32 = u32::MAX;

    fn path(self) -> Option<usize> {
        (self.path != Self::NONE).then_some(self.path as usize)
    }

    fn span(self) -> Option<usize> {
        (self.span != Self::NONE).then_some(self.span as usize)
    }
}

/// Reads an object key and matches it against the paths and span names.
struct KeyMatcher<'p, P> {
    paths: &'p [P],
    span_names: Option<&'p [String]>,
}

impl<P> Clone for KeyMatcher<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for KeyMatcher<'_, P> {}

impl<'de, P: AsRef<FieldPath>> DeserializeSeed<'de> for KeyMatcher<'_, P> {
    type Value = KeyMatch;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<KeyMatch, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de, P: AsRef<FieldPath>> Visitor<'de> for KeyMatcher<'_, P> {
    type Value = KeyMatch;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<KeyMatch, E> {
        let index = |found: Option<usize>| found.map_or(KeyMatch::NONE, |i| i as u32);
        Ok(KeyMatch {
            path: index(
                self.paths.iter().position(
                    |p| matches!(p.as_ref(), FieldPath::Top(name) if same_name(name, key)),
                ),
            ),
            span: index(
                self.span_names
                    .and_then(|names| names.iter().position(|name| same_name(name, key))),
            ),
        })
    }
}

/// Reads a value as its borrowed source text.
struct RawSeed;

impl<'de> DeserializeSeed<'de> for RawSeed {
    type Value = &'de serde_json::value::RawValue;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<&'de serde_json::value::RawValue, D::Error> {
        serde::Deserialize::deserialize(deserializer)
    }
}

/// Reads a field's value straight into its slot as a [`FieldValue`]:
/// numbers and strings without building a [`Value`] first.
///
/// The value is written in place rather than returned: a returned
/// `Result<FieldValue, _>` is a 40-byte value copied through the stack
/// on every call, and those copies were a sixth of the file source's
/// field scan (ADR 0015, seventeenth step).
struct FieldInto<'s>(&'s mut Option<FieldValue>);

impl<'de> DeserializeSeed<'de> for FieldInto<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl FieldInto<'_> {
    fn set<E>(self, value: FieldValue) -> Result<(), E> {
        *self.0 = Some(value);
        Ok(())
    }
}

impl<'de> Visitor<'de> for FieldInto<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<(), E> {
        self.set(FieldValue::Int(value))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<(), E> {
        self.set(match i64::try_from(value) {
            Ok(value) => FieldValue::Int(value),
            Err(_) => FieldValue::Other(Value::from(value)),
        })
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<(), E> {
        self.set(from_value(Value::from(value)))
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<(), E> {
        self.set(FieldValue::Str(value.to_string()))
    }

    fn visit_string<E: serde::de::Error>(self, value: String) -> Result<(), E> {
        self.set(FieldValue::Str(value))
    }

    fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<(), E> {
        self.set(FieldValue::Other(Value::Bool(value)))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.set(FieldValue::Other(Value::Null))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        use serde::Deserialize;
        let value = Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
        self.set(FieldValue::Other(value))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        use serde::Deserialize;
        let value = Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        self.set(FieldValue::Other(value))
    }
}

#[cfg(test)]
mod tests;

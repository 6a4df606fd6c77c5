//! The host's one pass over a JSON record: checks the whole document and
//! finds where a few top-level fields lie, with simdjson's On-Demand parser.
//!
//! Every JSON line a source reads is checked whole (a malformed line goes to
//! the dead-letter output, not on to a plugin) and a few of its fields are
//! read (event time, key, the fields a plugin or window asked for). With
//! serde_json that pass cost ~150 ns for a 170-byte line, most of the file
//! source's cost; simdjson's On-Demand parser, walking every value so that
//! nothing goes unchecked, does it in ~95 ns (ADR 0015, nineteenth step).
//! simdjson comes from Debian (`libsimdjson-dev`), as RocksDB does; the
//! walk is a short C++ file (`simdjson_scan.cpp`) compiled by `build.rs`.
//!
//! serde_json stays the judge: a document this pass refuses, or does not
//! handle (a scalar at the top, nesting deeper than 100, a document over
//! 1 MiB, a CPU without the SIMD features it was compiled for), is handed
//! back as `None` and the caller parses it with serde_json, which accepts
//! it or says why not. This pass only ever accepts what serde_json accepts
//! (tested against it: `tests` below and `crate::fields`), so which parser
//! ran never changes a result. `SLUICE_JSON_SCAN=serde` in the environment
//! turns this pass off (serde_json alone), to compare the two.

use smallvec::SmallVec;
use std::sync::LazyLock;

/// The field names asked of [`scan_object`], laid out as the scanner reads
/// them: their bytes one after another, and where each ends.
///
/// Built once for a list of fields read from many documents (the file
/// source keeps one), or per call; a few short names need no allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldNames {
    text: SmallVec<[u8; 48]>,
    ends: SmallVec<[u32; 8]>,
}

impl FieldNames {
    /// No names.
    pub fn new() -> Self {
        FieldNames::default()
    }

    /// Adds the field named `name` (unescaped: the document's keys are
    /// compared after unescaping them).
    pub fn push(&mut self, name: &str) {
        self.text.extend_from_slice(name.as_bytes());
        // Names are a few bytes; a list past 4 GiB would only be refused.
        self.ends
            .push(u32::try_from(self.text.len()).unwrap_or(u32::MAX));
    }

    /// How many names there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl<'n> FromIterator<&'n str> for FieldNames {
    fn from_iter<I: IntoIterator<Item = &'n str>>(names: I) -> Self {
        let mut list = FieldNames::new();
        for name in names {
            list.push(name);
        }
        list
    }
}

/// How many bytes past a document's end simdjson may read (its
/// `SIMDJSON_PADDING`): a document followed by this many is scanned where
/// it lies, any other is first copied into a padded buffer.
pub const PADDING: usize = 64;

/// A JSON document to scan, and whether memory past its end may be read.
#[derive(Clone, Copy, Debug)]
pub struct JsonDocument<'d> {
    bytes: &'d [u8],
    /// Bytes from `bytes`' start that may be read: its length, or its
    /// length and [`PADDING`].
    readable: usize,
}

impl<'d> JsonDocument<'d> {
    /// A document nothing is known to follow (copied before a scan).
    pub fn new(bytes: &'d [u8]) -> Self {
        JsonDocument {
            bytes,
            readable: bytes.len(),
        }
    }

    /// A document followed by at least [`PADDING`] bytes of its buffer
    /// (scanned in place: no copy).
    ///
    /// # Safety
    ///
    /// The [`PADDING`] bytes after `bytes` must be initialised memory of
    /// the same allocation, alive and unchanged for `'d`.
    pub unsafe fn padded(bytes: &'d [u8]) -> Self {
        JsonDocument {
            bytes,
            readable: bytes.len() + PADDING,
        }
    }

    /// The document's bytes.
    pub fn bytes(&self) -> &'d [u8] {
        self.bytes
    }
}

impl<'d> From<&'d [u8]> for JsonDocument<'d> {
    fn from(bytes: &'d [u8]) -> Self {
        JsonDocument::new(bytes)
    }
}

impl<'d, const N: usize> From<&'d [u8; N]> for JsonDocument<'d> {
    fn from(bytes: &'d [u8; N]) -> Self {
        JsonDocument::new(bytes)
    }
}

impl<'d> From<&'d Vec<u8>> for JsonDocument<'d> {
    fn from(bytes: &'d Vec<u8>) -> Self {
        JsonDocument::new(bytes)
    }
}

impl<'d> From<&'d bytes::Bytes> for JsonDocument<'d> {
    fn from(bytes: &'d bytes::Bytes) -> Self {
        JsonDocument::new(bytes)
    }
}

/// Where a field asked of [`scan_object`] lies in the document, and its
/// value if it is an integer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScannedField {
    start: u32,
    end: u32,
    kind: u32,
    integer: i64,
}

/// [`ScannedField::kind`]: the object has no such field.
const MISSING: u32 = 0;
/// [`ScannedField::kind`]: an integer within `i64` (not `-0`, which
/// serde_json reads as a float).
const INTEGER: u32 = 1;

impl ScannedField {
    /// The byte range of the field's value (its JSON text, without the
    /// whitespace around it), or `None` if the object has no such field.
    pub fn span(&self) -> Option<(usize, usize)> {
        (self.kind != MISSING).then_some((self.start as usize, self.end as usize))
    }

    /// The field's value if it is an integer within `i64` (what
    /// serde_json reads as one).
    pub fn integer(&self) -> Option<i64> {
        (self.kind == INTEGER).then_some(self.integer)
    }
}

unsafe extern "C" {
    fn sluice_json_scan_object(
        document: *const u8,
        length: usize,
        readable: usize,
        text: *const u8,
        ends: *const u32,
        count: usize,
        fields: *mut ScannedField,
    ) -> i64;
    fn sluice_json_check(document: *const u8, length: usize, readable: usize) -> i32;
    fn sluice_json_implementation() -> *const std::ffi::c_char;
}

/// Whether the scanner runs here (decided once): on a CPU with the SIMD
/// features it was compiled for, unless `SLUICE_JSON_SCAN=serde` asks for
/// serde_json alone (to compare the two, or to rule the scanner out).
static AVAILABLE: LazyLock<bool> = LazyLock::new(|| {
    cpu_runs_the_scanner() && std::env::var_os("SLUICE_JSON_SCAN").is_none_or(|v| v != "serde")
});

#[cfg(target_arch = "x86_64")]
fn cpu_runs_the_scanner() -> bool {
    // What `build.rs` compiles the scanner for (simdjson's "haswell").
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("bmi1")
        && std::arch::is_x86_feature_detected!("bmi2")
        && std::arch::is_x86_feature_detected!("pclmulqdq")
        && std::arch::is_x86_feature_detected!("lzcnt")
        && std::arch::is_x86_feature_detected!("popcnt")
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_runs_the_scanner() -> bool {
    // Compiled for the target's baseline (NEON on aarch64).
    true
}

/// Whether the scanner runs on this machine; if not, every call hands the
/// document back (`None`).
pub fn is_available() -> bool {
    *AVAILABLE
}

/// The simdjson kernel the scanner was compiled for (`haswell` on x86-64,
/// `arm64` on aarch64; `fallback` would mean no SIMD).
pub fn implementation() -> &'static str {
    // SAFETY: the C function returns a pointer to a string literal.
    let name = unsafe { std::ffi::CStr::from_ptr(sluice_json_implementation()) };
    name.to_str().unwrap_or("unknown")
}

/// Checks that `document` is one JSON object (all of it: UTF-8, syntax,
/// every value) and finds the top-level fields `names`, one slot of
/// `fields` per name (`fields` must be as long as `names`; a field found
/// twice keeps its last value). Returns how many fields the object has, or
/// `None` if the document is handed back to serde_json (see the module
/// docs); the slots are then unspecified.
pub fn scan_object(
    document: JsonDocument<'_>,
    names: &FieldNames,
    fields: &mut [ScannedField],
) -> Option<usize> {
    if !is_available() || fields.len() != names.len() || names.text.len() > u32::MAX as usize {
        return None;
    }
    // SAFETY: the document and names are live for the call and their
    // lengths are theirs (`readable` is the document's length or, by
    // `JsonDocument::padded`'s contract, readable with its padding); the
    // names' ends rise within their text (`push` appends); `fields` has
    // one slot per name.
    let entries = unsafe {
        sluice_json_scan_object(
            document.bytes.as_ptr(),
            document.bytes.len(),
            document.readable,
            names.text.as_ptr(),
            names.ends.as_ptr(),
            names.len(),
            fields.as_mut_ptr(),
        )
    };
    usize::try_from(entries).ok()
}

/// Whether `document` is one JSON object or array (all of it); `false`
/// means "ask serde_json", which is also the answer for a scalar.
pub fn check(document: JsonDocument<'_>) -> bool {
    let JsonDocument { bytes, readable } = document;
    // SAFETY: as in `scan_object`.
    is_available() && unsafe { sluice_json_check(bytes.as_ptr(), bytes.len(), readable) } == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(document: &str, names: &[&str]) -> Option<(usize, Vec<ScannedField>)> {
        let names: FieldNames = names.iter().copied().collect();
        let mut fields = vec![ScannedField::default(); names.len()];
        scan_object(document.as_bytes().into(), &names, &mut fields)
            .map(|entries| (entries, fields))
    }

    fn serde_accepts(document: &[u8]) -> bool {
        serde_json::from_slice::<serde::de::IgnoredAny>(document).is_ok()
    }

    #[test]
    fn the_scanner_runs_with_simd_on_this_machine() {
        assert!(is_available(), "the CI machines have AVX2");
        let kernel = implementation();
        assert_ne!(kernel, "fallback");
        if cfg!(target_arch = "x86_64") {
            assert_eq!(kernel, "haswell");
        }
    }

    #[test]
    fn fields_are_found_where_they_lie_with_integers_read() {
        let document =
            r#"{"id": 7 , "text":"a\"b", "nested":{"ts":1,"a":[1,2.5]},"ts":-12,"id":8}"#;
        let (entries, fields) =
            scan(document, &["ts", "id", "text", "nested", "nope", "ts"]).expect("valid");
        assert_eq!(entries, 5);
        let text = |field: &ScannedField| field.span().map(|(start, end)| &document[start..end]);
        assert_eq!(text(&fields[0]), Some("-12"));
        assert_eq!(fields[0].integer(), Some(-12));
        // The last of a repeated field, as serde_json's visitor keeps.
        assert_eq!(text(&fields[1]), Some("8"));
        assert_eq!(text(&fields[2]), Some(r#""a\"b""#));
        assert_eq!(fields[2].integer(), None);
        assert_eq!(text(&fields[3]), Some(r#"{"ts":1,"a":[1,2.5]}"#));
        assert_eq!(fields[4].span(), None);
        assert_eq!(fields[5], fields[0]);
    }

    #[test]
    fn a_padded_document_is_scanned_where_it_lies_whatever_follows_it() {
        let text = br#"{"ts":12,"a":"x"}"#;
        for filler in [b' ', b'"', b'}', b'\\', b'1', 0xff] {
            let mut buffer = text.to_vec();
            buffer.extend(std::iter::repeat_n(filler, PADDING));
            let names: FieldNames = ["ts", "a"].into_iter().collect();
            let mut fields = [ScannedField::default(); 2];
            // SAFETY: `PADDING` bytes of `buffer` follow the document.
            let whole = unsafe { JsonDocument::padded(&buffer[..text.len()]) };
            assert_eq!(scan_object(whole, &names, &mut fields), Some(2));
            assert_eq!(fields[0].integer(), Some(12));
            assert_eq!(fields[1].span(), Some((13, 16)));
            assert!(check(whole));
            // A document cut short is refused, though the bytes after it
            // (the rest of the object) would complete it.
            for cut in [8, 15, 16] {
                // SAFETY: more than `PADDING` bytes of `buffer` follow.
                let part = unsafe { JsonDocument::padded(&buffer[..cut]) };
                assert_eq!(scan_object(part, &names, &mut fields), None, "cut at {cut}");
                assert!(!check(part));
            }
        }
    }

    #[test]
    fn escaped_keys_are_compared_unescaped() {
        let (_, fields) = scan(r#"{"\u0074s": 5}"#, &["ts"]).expect("valid");
        assert_eq!(fields[0].integer(), Some(5));
    }

    #[test]
    fn minus_zero_and_large_integers_are_not_integers() {
        let (_, fields) = scan(
            r#"{"a":-0,"b":18446744073709551615,"c":1.0}"#,
            &["a", "b", "c"],
        )
        .expect("valid");
        assert!(fields.iter().all(|field| field.integer().is_none()));
    }

    #[test]
    fn what_the_scanner_accepts_serde_json_accepts() {
        let documents: &[&[u8]] = &[
            br#"{"ts":1}"#,
            br#"{"ts":1} x"#,
            br#"{"ts":1}{}"#,
            br#"{"ts":1,}"#,
            br#"{"ts":1,"a":tru}"#,
            br#"{"ts":1,"a":truex}"#,
            br#"{"ts":1,"a":nul}"#,
            br#"{"ts":1,"a":[1,,2]}"#,
            br#"{"ts":1,"a":[1 2]}"#,
            br#"{"ts":1 "a":2}"#,
            br#"{"ts":1,"a":{"b":}}"#,
            br#"{"ts":1,"a":"\x"}"#,
            br#"{"ts":1,"a":"\ud800"}"#,
            br#"{"ts":1,"a":01}"#,
            br#"{"ts":1,"a":1e400}"#,
            br#"{"ts":1,"a":-}"#,
            br#"{"ts":1,"a":1.}"#,
            br#"{"ts":1,"a":99999999999999999999999}"#,
            b"{\"ts\":1,\"a\":\"\x01\"}",
            b"{\"ts\":1,\"a\xff\":1}",
            b"{\"ts\":1,\"a\":\"\xc3\"}",
            br#"{"ts":1,"a":"x"  }  "#,
            br#"{"ts":1,"a":"x""#,
            br#"{"ts":1,"a":"x}"#,
            br#"{"t\s":1}"#,
            b"",
            b"   ",
            br#"[1]"#,
            br#""text""#,
            br#"{"ts":1, "a" : [ {"b": [true, false, null, 1.5e3, "\n\u00e9"]} ] }"#,
        ];
        for document in documents {
            let scanned = scan_object(
                (*document).into(),
                &["ts"].into_iter().collect(),
                &mut [ScannedField::default()],
            );
            if scanned.is_some() {
                assert!(
                    serde_accepts(document),
                    "the scanner accepted {:?}, serde_json refuses it",
                    String::from_utf8_lossy(document)
                );
            }
            if check((*document).into()) {
                assert!(serde_accepts(document));
            }
        }
        // The valid ones above are taken by the scanner, not all handed back.
        assert!(scan(r#"{"ts":1,"a":"x"  }  "#, &["ts"]).is_some());
        assert!(check(br#"[{"a":[true,null]}, 1.5]"#[..].into()));
    }

    #[test]
    fn deep_scalar_and_large_documents_are_handed_back() {
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(120), "]".repeat(120));
        assert!(serde_accepts(deep.as_bytes()));
        assert_eq!(scan(&deep, &["a"]), None);
        assert!(!check(b"42"[..].into()));
        let large = format!("{{\"a\":\"{}\"}}", "x".repeat(2 << 20));
        assert_eq!(scan(&large, &["a"]), None);
    }
}

//! Top-level fields of JSON object records, found natively for plugins
//! that read them through the projected batch format
//! ([`sluice_wire::projected`]), and the splice behind
//! [`sluice_wire::OutputItem::EmitReplacing`] ([`replace_field_into`]).
//!
//! serde_json does the parsing (strict: the whole value is checked, as a
//! plugin's own parse would), in the window extractor's one pass over an
//! object ([`extract_into_with_spans`]); a field's value is kept as its
//! source text, located by its place in the record. When the source read
//! the record, it found the fields in its own pass already (the host's
//! `record::ReadFields`): then nothing here runs.

use crate::fields::{FieldPath, Spans, extract_into_with_spans};
use sluice_wire::projected::FieldSlot;

/// The top-level fields of one JSON object value.
struct ObjectFields {
    /// Per name asked for: where its (last) value is in the record.
    found: Vec<Option<(usize, usize)>>,
    /// How many fields the object has.
    entries: usize,
}

/// Finds `names` in the JSON object `value`: one [`FieldSlot`] per name,
/// written to `slots` (cleared first). A value that is not a well-formed
/// JSON object in UTF-8 gives [`FieldSlot::NotAnObject`] for every name.
pub fn project(value: &[u8], names: &[String], slots: &mut Vec<FieldSlot>) {
    slots.clear();
    match scan_object(value, names) {
        Some(fields) => slots.extend(fields.found.into_iter().map(slot_of)),
        None => slots.extend(names.iter().map(|_| FieldSlot::NotAnObject)),
    }
}

/// A span found by [`extract_into_with_spans`] as a projected slot.
pub fn slot_of(span: Option<(usize, usize)>) -> FieldSlot {
    match span {
        Some((start, end)) => FieldSlot::At { start, end },
        None => FieldSlot::Missing,
    }
}

/// Appends to `out` `value` (a JSON object) with the value of its
/// top-level field `field` replaced by the JSON text `json`, or the field
/// added at the end if the object has none; every other byte as it was.
/// `known` is where the projection of the same batch found the field in
/// `value` (a [`FieldSlot::At`] from [`project`]): the value is then not
/// parsed again. On an error `out` is left as it was.
///
/// Appending lets a batch's replaced values share one buffer (one
/// allocation per batch rather than one per record).
pub fn replace_field_into(
    value: &[u8],
    field: &str,
    json: &[u8],
    known: Option<FieldSlot>,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    // UTF-8 throughout, skipped strings too, as every JSON value the host
    // reads (serde_json alone does not check the strings it skips).
    if crate::fields::check_json(json).is_err() {
        return Err(format!(
            "the new value of field `{field}` is not one JSON value in UTF-8"
        ));
    }
    let (span, entries) = match known {
        Some(FieldSlot::At { start, end }) if start <= end && end <= value.len() => {
            (Some((start, end)), 1)
        }
        _ => {
            let fields = scan_object(value, &[field.to_string()]).ok_or_else(|| {
                "a field was replaced in a record that is not a JSON object".to_string()
            })?;
            (fields.found[0], fields.entries)
        }
    };
    out.reserve(value.len() + json.len() + field.len() + 4);
    match span {
        Some((start, end)) => {
            out.extend_from_slice(&value[..start]);
            out.extend_from_slice(json);
            out.extend_from_slice(&value[end..]);
        }
        None => {
            // The object is well-formed, so its last non-space byte is `}`.
            let close = value
                .iter()
                .rposition(|byte| *byte == b'}')
                .ok_or_else(|| "a JSON object without its closing brace".to_string())?;
            out.extend_from_slice(&value[..close]);
            if entries > 0 {
                out.push(b',');
            }
            // A `String`'s JSON form cannot fail to be written to a Vec.
            let quoted = serde_json::Value::from(field).to_string();
            out.extend_from_slice(quoted.as_bytes());
            out.push(b':');
            out.extend_from_slice(json);
            out.extend_from_slice(&value[close..]);
        }
    }
    Ok(())
}

/// The fields `names` of the JSON object `value`, or `None` if `value` is
/// not one well-formed JSON object in UTF-8.
fn scan_object(value: &[u8], names: &[String]) -> Option<ObjectFields> {
    let mut found = vec![None; names.len()];
    let entries = extract_into_with_spans::<FieldPath>(
        value,
        &[],
        &mut Vec::new(),
        Spans {
            names,
            found: &mut found,
        },
    )
    .ok()?;
    Some(ObjectFields { found, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`replace_field_into`] into a buffer of its own.
    fn replace_field(
        value: &[u8],
        field: &str,
        json: &[u8],
        known: Option<FieldSlot>,
    ) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        replace_field_into(value, field, json, known, &mut out).map(|()| out)
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    fn projected<'v>(value: &'v [u8], asked: &[&str]) -> Vec<Result<&'v [u8], FieldSlot>> {
        let mut slots = Vec::new();
        project(value, &names(asked), &mut slots);
        slots
            .into_iter()
            .map(|slot| match slot {
                FieldSlot::At { start, end } => Ok(&value[start..end]),
                other => Err(other),
            })
            .collect()
    }

    #[test]
    fn fields_are_found_as_their_source_text() {
        let value = br#" {"id": 1, "text" : "a \"b\"", "o":{"id":2}, "n":1.50, "id":3 } "#;
        assert_eq!(
            projected(value, &["text", "id", "n", "o", "none"]),
            vec![
                Ok(&br#""a \"b\"""#[..]),
                // The last occurrence, as in a parsed object.
                Ok(&b"3"[..]),
                Ok(&b"1.50"[..]),
                Ok(&br#"{"id":2}"#[..]),
                Err(FieldSlot::Missing),
            ]
        );
        // A key written with an escape is the same key.
        assert_eq!(projected(br#"{"\u0069d":5}"#, &["id"]), vec![Ok(&b"5"[..])]);
    }

    #[test]
    fn anything_but_one_json_object_is_not_an_object() {
        for value in [
            &b"[1,2]"[..],
            b"{\"a\":1",
            b"{\"a\":1} x",
            b"{\"a\":\"\xff\"}",
            b"",
            b"7",
        ] {
            assert_eq!(
                projected(value, &["a"]),
                vec![Err(FieldSlot::NotAnObject)],
                "{}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn a_field_is_replaced_in_place_or_added_at_the_end() {
        let value = br#"{"id":1,"text":"abc", "ts":2}"#;
        assert_eq!(
            replace_field(value, "text", br#""ABC""#, None).unwrap(),
            br#"{"id":1,"text":"ABC", "ts":2}"#
        );
        assert_eq!(
            replace_field(value, "new \"one\"", b"[1]", None).unwrap(),
            br#"{"id":1,"text":"abc", "ts":2,"new \"one\"":[1]}"#
        );
        assert_eq!(
            replace_field(b"{ }", "a", b"1", None).unwrap(),
            br#"{ "a":1}"#
        );
        assert!(replace_field(b"[1]", "a", b"1", None).is_err());
        assert!(replace_field(value, "text", b"ABC", None).is_err());
        // A new value is UTF-8 throughout, as the record it goes into.
        let refused = replace_field(value, "text", b"\"AB\xFFC\"", None).unwrap_err();
        assert!(refused.contains("not one JSON value"), "{refused}");
        assert!(replace_field(value, "text", "\"ÅBC\"".as_bytes(), None).is_ok());
    }

    #[test]
    fn a_field_the_projection_found_is_replaced_where_it_was_found() {
        let value = br#"{"id":1,"text":"abc", "ts":2}"#;
        let mut slots = Vec::new();
        project(value, &names(&["text"]), &mut slots);
        assert_eq!(
            replace_field(value, "text", br#""ABC""#, Some(slots[0])).unwrap(),
            br#"{"id":1,"text":"ABC", "ts":2}"#
        );
        // The range is trusted, not searched: this one says `id`.
        let id = FieldSlot::At { start: 6, end: 7 };
        assert_eq!(
            replace_field(value, "text", b"7", Some(id)).unwrap(),
            br#"{"id":7,"text":"abc", "ts":2}"#
        );
        // A field the projection did not find is looked for.
        assert_eq!(
            replace_field(value, "text", b"0", Some(FieldSlot::Missing)).unwrap(),
            br#"{"id":1,"text":0, "ts":2}"#
        );
        // A range outside the value is not trusted either.
        let outside = FieldSlot::At { start: 6, end: 99 };
        assert_eq!(
            replace_field(value, "ts", b"3", Some(outside)).unwrap(),
            br#"{"id":1,"text":"abc", "ts":3}"#
        );
    }
}

//! The record: what flows through a pipeline.

use crate::sync::lock;
use bytes::Bytes;
use sluice_json::fields::{FieldPath, FieldValue};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A record header (Kafka-style): a string name and opaque bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Header name.
    pub key: String,
    /// Header value.
    pub value: Bytes,
}

impl Header {
    /// Builds a header from anything byte-like.
    pub fn new(key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        Header {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// The name of the topic, file or generator a record was read from.
///
/// Interned: one copy of each distinct name per process, kept for the
/// life of the process, so that a record's position is copied without a
/// reference count. An `Arc<str>` cost an atomic increment where the
/// source made each record and a decrement on another thread where it was
/// dropped (ADR 0015, eighteenth step). Names are few (the topics and
/// files pipelines read); a name read again is not copied again.
#[derive(Clone, Copy)]
pub struct Topic(&'static str);

impl Topic {
    /// The interned topic `name`.
    pub fn new(name: &str) -> Topic {
        static NAMES: std::sync::Mutex<BTreeSet<&'static str>> =
            std::sync::Mutex::new(BTreeSet::new());
        let mut names = lock(&NAMES);
        if let Some(known) = names.get(name) {
            return Topic(known);
        }
        let leaked: &'static str = Box::leak(Box::from(name));
        names.insert(leaked);
        Topic(leaked)
    }

    /// The name.
    pub fn as_str(&self) -> &'static str {
        self.0
    }
}

impl std::ops::Deref for Topic {
    type Target = str;

    fn deref(&self) -> &str {
        self.0
    }
}

impl PartialEq for Topic {
    /// Interned names are equal when they are the same string.
    fn eq(&self, other: &Topic) -> bool {
        std::ptr::eq(self.0, other.0) || self.0 == other.0
    }
}

impl Eq for Topic {}

impl std::hash::Hash for Topic {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl PartialOrd for Topic {
    fn partial_cmp(&self, other: &Topic) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Topic {
    fn cmp(&self, other: &Topic) -> std::cmp::Ordering {
        self.0.cmp(other.0)
    }
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.0, f)
    }
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl From<&str> for Topic {
    fn from(name: &str) -> Topic {
        Topic::new(name)
    }
}

impl serde::Serialize for Topic {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0)
    }
}

/// Where a record was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePosition {
    /// Topic, file path or generator name.
    pub topic: Topic,
    /// Partition (split) within the topic.
    pub partition: i32,
    /// Offset of the record within the partition.
    pub offset: i64,
}

/// A record's headers: a `ThinVec`, one pointer wide (no allocation
/// while empty, as most records' headers are), so that a [`Record`] is
/// 128 bytes and moving one is copied in line rather than by a `memcpy`
/// call (a `Vec` made it 144; ADR 0015, eighteenth step).
pub type Headers = thin_vec::ThinVec<Header>;

/// One record. Byte fields are reference-counted [`Bytes`], so records
/// decoded from one plugin output buffer share it instead of copying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Key, if any.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Bytes,
    /// Headers in order.
    pub headers: Headers,
    /// Event time in milliseconds since the Unix epoch.
    pub event_time: Option<i64>,
    /// Where the record (or the record it was derived from) was read.
    pub source: SourcePosition,
    /// Fields of the JSON value read where it was parsed, for the operator
    /// after the source (see [`ReadFields`]); `None` for most records.
    /// Boxed: a pointer in every record, so that records without it (all
    /// but those on their way into a window) stay small to move.
    pub read_fields: Option<Box<ReadFields>>,
}

/// Fields of a record's JSON value, read by the source in the pass that
/// checks the line, for the operator right after it (a window's key and
/// aggregate fields: [`crate::dataflow::Operator::reads_fields`]), so that
/// the value is parsed once on its way in (issue 15). Only sources set it,
/// on records they make; anything that makes a new value makes a record
/// without it.
///
/// It is a cache of `value`: two records that differ only in it are equal.
#[derive(Debug, Clone)]
pub struct ReadFields {
    /// The fields read, in order; the same list for every record of a
    /// source. `None` when none was (the record carries only spans): no
    /// shared list to count a reference to per record.
    pub paths: Option<Arc<[FieldPath]>>,
    /// Their values, one per path (`None`: the field is missing).
    pub values: Vec<Option<FieldValue>>,
    /// Where the fields a plugin right after the source reads lie in the
    /// value, if it asked ([`crate::dataflow::Operator::projects_fields`]).
    pub spans: Option<FieldSpans>,
}

/// Where the top-level fields a plugin reads lie in a record's JSON value
/// (each value's JSON text), found by the source in the pass that checks
/// the line, for a transform right after it on the projected path (ADR
/// 0015): the host then does not parse the value again to pack the batch.
#[derive(Debug, Clone)]
pub struct FieldSpans {
    /// The field names: the operator's list, shared by every record of the
    /// source.
    pub names: Arc<[String]>,
    /// One per name: its value's `(start, end)` byte range in the record's
    /// value, `None` if the object has no such field. Kept inline for a
    /// few names, so that a record's spans cost no allocation of their own.
    pub spans: SpanList,
}

/// The spans of [`FieldSpans`]: inline up to four names (a plugin reads a
/// few fields), on the heap beyond.
pub type SpanList = smallvec::SmallVec<[Option<(usize, usize)>; 4]>;

impl FieldSpans {
    /// The spans, if they are of `names` (the list a plugin gave).
    pub fn of(&self, names: &[String]) -> Option<&[Option<(usize, usize)>]> {
        (std::ptr::eq(&self.names[..], names) || self.names[..] == *names)
            .then_some(&self.spans[..])
    }
}

impl ReadFields {
    /// The values of `paths` if these were read first (the list of fields
    /// an operator asked the source for), taken out (empty after; the
    /// spans stay, for the plugin that reads them); else `None`: the
    /// caller reads them itself.
    pub fn take_values_of(&mut self, paths: &[FieldPath]) -> Option<Vec<Option<FieldValue>>> {
        // The operator's own list (shared with the source) is recognised
        // without comparing paths.
        let read = self.paths_read();
        let same_list = std::ptr::eq(read, paths);
        if !same_list && !read.starts_with(paths) {
            return None;
        }
        let mut values = std::mem::take(&mut self.values);
        values.truncate(paths.len());
        Some(values)
    }

    /// The fields read (none when the record carries only spans).
    fn paths_read(&self) -> &[FieldPath] {
        self.paths.as_deref().unwrap_or_default()
    }

    /// The value of the first field read, if it is `path`.
    pub fn first_value_of(&self, path: &FieldPath) -> Option<&Option<FieldValue>> {
        (self.paths_read().first() == Some(path))
            .then(|| self.values.first())
            .flatten()
    }
}

impl PartialEq for ReadFields {
    /// Always equal: the fields are read from the value, which the records'
    /// comparison covers.
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for ReadFields {}

// Records are moved by value from stage to stage: kept within the size that
// is copied in line (see [`Headers`]).
const _: () = assert!(std::mem::size_of::<Record>() <= 128);

impl Record {
    /// A record with only a value, from `source`.
    pub fn from_value(value: impl Into<Bytes>, source: SourcePosition) -> Self {
        Record {
            key: None,
            value: value.into(),
            headers: Headers::new(),
            event_time: None,
            source,
            read_fields: None,
        }
    }

    /// The value of the first header named `name`.
    pub fn header(&self, name: &str) -> Option<&Bytes> {
        self.headers
            .iter()
            .find(|h| h.key == name)
            .map(|h| &h.value)
    }
}

/// Names of the headers the host adds to dead-lettered records.
pub mod dead_letter_headers {
    /// Why the record was dead-lettered.
    pub const REASON: &str = "sluice.dlq.reason";
    /// Operator that dead-lettered it.
    pub const OPERATOR: &str = "sluice.dlq.operator";
    /// Plugin (name and content hash) that dead-lettered it, if any.
    pub const PLUGIN: &str = "sluice.dlq.plugin";
    /// Original topic / file / generator.
    pub const SOURCE_TOPIC: &str = "sluice.dlq.source.topic";
    /// Original partition.
    pub const SOURCE_PARTITION: &str = "sluice.dlq.source.partition";
    /// Original offset.
    pub const SOURCE_OFFSET: &str = "sluice.dlq.source.offset";
    /// Wall-clock time of dead-lettering, milliseconds since the Unix epoch.
    pub const TIME: &str = "sluice.dlq.time";
}

/// Marks `record` as dead-lettered: appends the reason and provenance
/// headers (see [`dead_letter_headers`]).
pub fn into_dead_letter(
    mut record: Record,
    reason: &str,
    operator: &str,
    plugin: Option<&str>,
) -> Record {
    use dead_letter_headers as h;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    record
        .headers
        .push(Header::new(h::REASON, reason.to_string()));
    record
        .headers
        .push(Header::new(h::OPERATOR, operator.to_string()));
    if let Some(plugin) = plugin {
        record
            .headers
            .push(Header::new(h::PLUGIN, plugin.to_string()));
    }
    record.headers.push(Header::new(
        h::SOURCE_TOPIC,
        record.source.topic.to_string(),
    ));
    record.headers.push(Header::new(
        h::SOURCE_PARTITION,
        record.source.partition.to_string(),
    ));
    record.headers.push(Header::new(
        h::SOURCE_OFFSET,
        record.source.offset.to_string(),
    ));
    record.headers.push(Header::new(h::TIME, now.to_string()));
    record
}

/// A record of `value` read at offset 0 of topic `t`, for tests.
#[cfg(test)]
pub(crate) fn test_record(value: &str) -> Record {
    Record::from_value(
        value.as_bytes().to_vec(),
        SourcePosition {
            topic: "t".into(),
            partition: 0,
            offset: 0,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_name_is_interned_once_and_compares_by_name() {
        let orders = Topic::new("orders");
        let again = Topic::from(String::from("orders").as_str());
        assert!(std::ptr::eq(orders.as_str(), again.as_str()), "one copy");
        assert_eq!(orders, again);
        let refunds = Topic::new("refunds");
        assert_ne!(orders, refunds);
        assert!(orders < refunds, "ordered by name");
        let mut split_ids = std::collections::HashSet::new();
        split_ids.insert((orders, 0));
        assert!(split_ids.contains(&(Topic::new("orders"), 0)));
        assert_eq!(&*orders, "orders");
        assert_eq!(format!("{orders} {orders:?}"), "orders \"orders\"");
        assert_eq!(serde_json::json!({ "topic": orders })["topic"], "orders");
    }
}

//! Merge operands: writes that fold into the value already under a key
//! instead of replacing it, so that adding to a value needs no read.
//!
//! A window whose state lives in RocksDB (`state_cache_mb = 0`) would
//! otherwise read every window a batch adds to back from the store, add the
//! batch's records and write it again: a lookup and a write per window and
//! batch, the lookup being the larger part of the cost. With a merge
//! operand it writes only the batch's partial accumulator; RocksDB folds
//! the operands into the value when the value is read (the window fires),
//! flushed or compacted (RocksDB's merge operator, as Flink's RocksDB list
//! state uses it).
//!
//! RocksDB folds operands on its own threads, in flushes and compactions,
//! at any time — also before any operator has opened its state again after
//! a restart. The fold must therefore be host code known when the database
//! opens, never an operator's plugin: each operand starts with a
//! [`MergeKind`] byte naming its fold, and every column family gets the
//! same merge operator. Only the built-in window aggregates have one;
//! aggregate plugins keep reading and writing their accumulators. The
//! folds themselves belong to the window (they know its accumulators):
//! they are handed to the backend when it opens, as [`MergeFolds`].

/// How an operand folds into the value before it (its first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergeKind {
    /// A window state (results emitted, then a built-in aggregate's
    /// accumulator) and partial accumulators of one built-in function.
    WindowAccumulator,
    /// The same with the accumulators of several built-in functions (a
    /// window with `aggregates = [..]`).
    WindowAccumulatorList,
}

impl MergeKind {
    fn tag(self) -> u8 {
        match self {
            MergeKind::WindowAccumulator => 1,
            MergeKind::WindowAccumulatorList => 2,
        }
    }

    fn of_tag(tag: u8) -> Option<MergeKind> {
        match tag {
            1 => Some(MergeKind::WindowAccumulator),
            2 => Some(MergeKind::WindowAccumulatorList),
            _ => None,
        }
    }
}

/// Folds partial accumulators (a list of them per column when `list`)
/// into a stored value (`None`: none yet); `None` if something is not what
/// its kind says.
pub(crate) type FoldInto =
    fn(list: bool, existing: Option<&[u8]>, partials: &[&[u8]]) -> Option<Vec<u8>>;

/// Folds partial accumulators (a list per column when `list`) into one.
pub(crate) type FoldPartials = fn(list: bool, partials: &[&[u8]]) -> Option<Vec<u8>>;

/// The host code that folds operands, by `MergeKind`: given to a state
/// backend when it opens, by the module whose values they are (the
/// window's `crate::window::MERGE_FOLDS`), so that state depends on no
/// operator.
#[derive(Clone, Copy)]
pub struct MergeFolds {
    /// Folds a window's partial accumulators (a list of them per column
    /// when `list`) into its stored state (`None`: none yet).
    pub window_state: FoldInto,
    /// Folds a window's partial accumulators into one.
    pub window_accumulators: FoldPartials,
}

impl MergeFolds {
    /// No folds: every merge operand is refused (a backend whose users
    /// write none, e.g. a plugin's state in `sluice plugin test`).
    pub const NONE: MergeFolds = MergeFolds {
        window_state: |_, _, _| None,
        window_accumulators: |_, _| None,
    };
}

impl std::fmt::Debug for MergeFolds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MergeFolds")
    }
}

/// The operand that folds `payload` in as `kind` (for
/// [`super::StateWrite::Merge`]).
pub(crate) fn operand(kind: MergeKind, payload: &[u8]) -> Vec<u8> {
    let mut operand = Vec::with_capacity(1 + payload.len());
    operand.push(kind.tag());
    operand.extend_from_slice(payload);
    operand
}

/// Splits operands into their kind (all must share it) and payloads.
fn payloads<'o>(
    operands: impl IntoIterator<Item = &'o [u8]>,
) -> Option<(MergeKind, Vec<&'o [u8]>)> {
    let mut kind = None;
    let mut payloads = Vec::new();
    for operand in operands {
        let (&tag, payload) = operand.split_first()?;
        let this = MergeKind::of_tag(tag)?;
        if kind.is_some_and(|kind| kind != this) {
            return None;
        }
        kind = Some(this);
        payloads.push(payload);
    }
    Some((kind?, payloads))
}

/// The value after folding `operands` (in write order) into `existing`
/// (`None`: the key had no value). `None`: an operand or the value is not
/// what its kind says (RocksDB then reports the read, flush or compaction
/// as failed; the operator stops rather than lose data).
pub(crate) fn full_merge<'o>(
    folds: &MergeFolds,
    existing: Option<&[u8]>,
    operands: impl IntoIterator<Item = &'o [u8]>,
) -> Option<Vec<u8>> {
    let (kind, payloads) = payloads(operands)?;
    match kind {
        MergeKind::WindowAccumulator | MergeKind::WindowAccumulatorList => (folds.window_state)(
            kind == MergeKind::WindowAccumulatorList,
            existing,
            &payloads,
        ),
    }
}

/// One operand equal to folding `operands` (in write order), for RocksDB
/// to combine operands before it meets the value.
pub(crate) fn partial_merge<'o>(
    folds: &MergeFolds,
    operands: impl IntoIterator<Item = &'o [u8]>,
) -> Option<Vec<u8>> {
    let (kind, payloads) = payloads(operands)?;
    let folded = match kind {
        MergeKind::WindowAccumulator | MergeKind::WindowAccumulatorList => {
            (folds.window_accumulators)(kind == MergeKind::WindowAccumulatorList, &payloads)?
        }
    };
    Some(operand(kind, &folded))
}

//! RocksDB state: one database per host process, one column family per
//! operator.
//!
//! The write-ahead log is off: state is made durable by checkpoints, not by
//! each write. A column family with a TTL gets a compaction filter that drops
//! expired values.

use super::budget::RocksMemory;
use super::merge::MergeFolds;
use super::{
    OperatorScope, StateBackend, StateEntry, StateError, StateStore, StateTtl, StateUsage,
    StateWrite,
};
use crate::sync::{lock, read, write};
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, BoundColumnFamily, Cache, ColumnFamilyDescriptor,
    DBCompressionType, DBWithThreadMode, Direction, IteratorMode, MultiThreaded, Options,
    WriteBatch, WriteOptions, compaction_filter::Decision,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

type Db = DBWithThreadMode<MultiThreaded>;

/// The TTL of one column family, set when its operator opens it and read
/// by its compaction filter (`None`: values never expire).
type TtlSlot = Arc<std::sync::RwLock<Option<StateTtl>>>;

/// The memtable size of an operator's column family: 8 MiB, not RocksDB's
/// 64 MiB default; all column families together stay within
/// [`RocksMemory::write_buffer_bytes`], which flushes the largest first.
///
/// Operator state is written in batches (a window's changed states at each
/// barrier or eviction, a plugin's writes once per batch), mostly
/// overwriting the same keys, so a large memtable fills with old versions
/// of few keys and every read and write searches a deep skip list: with
/// windows kept only in RocksDB (`state_cache_mb = 0`) the record path
/// went from 9.4 to 5.6 µs of CPU per record at 2 MiB instead of 64 (A/B
/// medians, ADR 0015). With a million keys, though, 2 MiB memtables made
/// small tables that compaction rewrote over and over: 8 MiB took a 1 M-key
/// window from 12.9 to 10.5 µs per record, for +4 % on the few-keys case
/// (issue 44, docs/benchmarks.md).
const COLUMN_FAMILY_WRITE_BUFFER_BYTES: usize = 8 << 20;

/// Bloom filter bits per key: a point read of a key a table does not hold
/// (a window looked up before it is cached, most of them new) skips the
/// table without reading its blocks (~1 % false positives).
const BLOOM_BITS_PER_KEY: f64 = 10.0;

/// Column family options whose compaction filter drops values expired
/// under the TTL in `slot`, with blocks cached in the database's one
/// `cache`. Every column family gets one when it is created or the
/// database is opened, so a TTL store keeps its data across restarts
/// (RocksDB fixes a column family's filter when it is opened).
fn column_family_options(slot: &TtlSlot, folds: MergeFolds, cache: &Cache) -> Options {
    let mut options = Options::default();
    options.set_write_buffer_size(COLUMN_FAMILY_WRITE_BUFFER_BYTES);
    let mut table = BlockBasedOptions::default();
    // Index and filter blocks live in the block cache, under its budget,
    // rather than beside it in the heap (they grow with the state), cut
    // into partitions of a few KiB: a lookup reads the partitions it
    // needs. Whole, a large table's filter (MiBs) was read again and
    // checksummed for most lookups once the cache could not keep it (49
    // instead of 13 µs/record, issue 44). The top level of each stays.
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_partition_filters(true);
    table.set_pin_top_level_index_and_filter(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
    options.set_block_based_table_factory(&table);
    // The same for the memtable (2 % of its size).
    options.set_memtable_prefix_bloom_ratio(0.02);
    options.set_memtable_whole_key_filtering(true);
    // State is rewritten often and lives mostly in the upper levels: no
    // compression there (Snappy was ~7 % of a 1 M-key window's CPU,
    // issue 44); the bottom levels, where old state settles, compress.
    options.set_compression_per_level(&[
        DBCompressionType::None,
        DBCompressionType::None,
        DBCompressionType::None,
        DBCompressionType::Snappy,
    ]);
    // Host-defined folds only (see `super::merge`): RocksDB may run them
    // in any flush or compaction, before any operator has opened its state.
    options.set_merge_operator(
        "sluice-merge",
        move |_key: &[u8], existing: Option<&[u8]>, operands: &rocksdb::MergeOperands| {
            super::merge::full_merge(&folds, existing, operands.iter())
        },
        move |_key: &[u8], _existing: Option<&[u8]>, operands: &rocksdb::MergeOperands| {
            super::merge::partial_merge(&folds, operands.iter())
        },
    );
    let slot = slot.clone();
    options.set_compaction_filter("sluice-ttl", move |_level, _key, value| {
        let ttl = read(&slot);
        match &*ttl {
            Some(ttl) if super::ttl::is_expired(value, (ttl.clock)()) => Decision::Remove,
            _ => Decision::Keep,
        }
    });
    options
}

/// A RocksDB instance holding every operator's state.
pub struct RocksStateBackend {
    db: Arc<Db>,
    path: PathBuf,
    /// The TTL slot of every column family.
    ttl_slots: std::sync::Mutex<std::collections::HashMap<String, TtlSlot>>,
    /// How merge operands fold (every column family's merge operator).
    folds: MergeFolds,
    /// The block cache of every column family.
    cache: Cache,
    /// A directory removed when the backend is dropped.
    _temporary: Option<super::directory::RunDirectory>,
}

impl std::fmt::Debug for RocksStateBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStateBackend")
            .field("path", &self.path)
            .finish()
    }
}

fn backend_error(path: &Path, error: impl std::fmt::Display) -> StateError {
    StateError {
        operator: "*".into(),
        message: format!("RocksDB at {}: {error}", path.display()),
    }
}

impl RocksStateBackend {
    /// Opens (or creates) the database in `dir`, with its existing column
    /// families; merge operands fold by `folds`; its memtables and block
    /// cache stay within `memory`.
    pub fn open(dir: &Path, folds: MergeFolds, memory: RocksMemory) -> Result<Self, StateError> {
        std::fs::create_dir_all(dir).map_err(|e| backend_error(dir, e))?;
        let cache =
            Cache::new_lru_cache(memory.block_cache_bytes).map_err(|e| backend_error(dir, e))?;
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        options.increase_parallelism(2);
        options.set_db_write_buffer_size(memory.write_buffer_bytes);
        let existing = Db::list_cf(&options, dir).unwrap_or_default();
        let mut ttl_slots = std::collections::HashMap::new();
        let mut descriptors = Vec::new();
        for name in existing {
            let slot = TtlSlot::default();
            descriptors.push(ColumnFamilyDescriptor::new(
                name.clone(),
                column_family_options(&slot, folds, &cache),
            ));
            ttl_slots.insert(name, slot);
        }
        let db = Db::open_cf_descriptors(&options, dir, descriptors)
            .map_err(|e| backend_error(dir, e))?;
        Ok(RocksStateBackend {
            db: Arc::new(db),
            path: dir.to_path_buf(),
            ttl_slots: std::sync::Mutex::new(ttl_slots),
            folds,
            cache,
            _temporary: None,
        })
    }

    /// A database in a fresh directory under `$TMPDIR/sluice-state/`,
    /// deleted when the backend is dropped: state that lives as long as
    /// one run. Directories of runs that died (SIGKILL) are removed by the
    /// next run that creates one.
    pub fn temporary(folds: MergeFolds, memory: RocksMemory) -> Result<Self, StateError> {
        let root = std::env::temp_dir().join("sluice-state");
        let id = format!("{}-{:016x}", std::process::id(), rand::random::<u64>());
        let dir = super::directory::RunDirectory::create(&root, "tmp.", &id)
            .map_err(|e| backend_error(&root, e))?;
        let mut backend = Self::open(&dir.path().join("db"), folds, memory)?;
        backend._temporary = Some(dir);
        Ok(backend)
    }

    /// Where the database lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes a native RocksDB checkpoint into `dir` (which must not exist):
    /// memtables are flushed, then every live SST file is hard-linked and
    /// MANIFEST, CURRENT and OPTIONS are copied. Milliseconds, whatever
    /// the state's size: this is the synchronous part of a checkpoint.
    pub fn create_checkpoint(&self, dir: &Path) -> Result<(), StateError> {
        let checkpoint =
            rocksdb::checkpoint::Checkpoint::new(&self.db).map_err(|e| backend_error(dir, e))?;
        checkpoint
            .create_checkpoint(dir)
            .map_err(|e| backend_error(dir, e))
    }

    /// Records the number of key groups the state is split into on first
    /// use, and refuses a different one later: keys are stored under their
    /// key group, so changing it would file existing state under the wrong
    /// groups.
    pub fn claim_max_parallelism(&self, max_parallelism: u16) -> Result<(), StateError> {
        const KEY: &[u8] = b"sluice.max_parallelism";
        let stored = self.db.get(KEY).map_err(|e| backend_error(&self.path, e))?;
        match stored {
            None => self
                .db
                .put(KEY, max_parallelism.to_be_bytes())
                .map_err(|e| backend_error(&self.path, e)),
            Some(bytes) => {
                let recorded = <[u8; 2]>::try_from(bytes.as_slice())
                    .map(u16::from_be_bytes)
                    .map_err(|_| backend_error(&self.path, "unreadable max_parallelism record"))?;
                if recorded == max_parallelism {
                    Ok(())
                } else {
                    Err(backend_error(
                        &self.path,
                        format!(
                            "its state is split into {recorded} key groups (max_parallelism = {recorded}); it cannot change to {max_parallelism} for the life of the state"
                        ),
                    ))
                }
            }
        }
    }
}

/// The column family name of an operator: its scope's names, each escaped
/// so that no two scopes can collide.
fn column_family_name(scope: &OperatorScope) -> String {
    let escape = |part: &str| part.replace('%', "%25").replace('/', "%2F");
    format!(
        "{}/{}/{}",
        escape(&scope.tenant),
        escape(&scope.pipeline),
        escape(&scope.operator)
    )
}

impl StateBackend for RocksStateBackend {
    fn open(
        &self,
        scope: &OperatorScope,
        ttl: Option<StateTtl>,
    ) -> Result<Arc<dyn StateStore>, StateError> {
        let name = column_family_name(scope);
        let error = |e: rocksdb::Error| StateError {
            operator: scope.operator.clone(),
            message: format!("RocksDB column family `{name}`: {e}"),
        };
        let slot = lock(&self.ttl_slots)
            .entry(name.clone())
            .or_default()
            .clone();
        *write(&slot) = ttl.clone();
        if self.db.cf_handle(&name).is_none() {
            self.db
                .create_cf(
                    &name,
                    &column_family_options(&slot, self.folds, &self.cache),
                )
                .map_err(error)?;
        }
        let mut write_options = WriteOptions::default();
        write_options.disable_wal(true);
        Ok(Arc::new(RocksStateStore {
            db: self.db.clone(),
            name,
            operator: scope.operator.clone(),
            ttl,
            write_options,
        }))
    }
}

/// One operator's column family.
pub(super) struct RocksStateStore {
    db: Arc<Db>,
    name: String,
    operator: String,
    ttl: Option<StateTtl>,
    write_options: WriteOptions,
}

impl RocksStateStore {
    fn error(&self, error: impl std::fmt::Display) -> StateError {
        StateError {
            operator: self.operator.clone(),
            message: format!("RocksDB: {error}"),
        }
    }

    fn cf(&self) -> Result<Arc<BoundColumnFamily<'_>>, StateError> {
        self.db
            .cf_handle(&self.name)
            .ok_or_else(|| self.error(format!("column family `{}` is gone", self.name)))
    }

    fn stamp(&self, value: &[u8]) -> Vec<u8> {
        super::ttl::stamp(self.ttl.as_ref(), value)
    }

    fn live(&self, stored: Vec<u8>) -> Option<Vec<u8>> {
        super::ttl::live(self.ttl.as_ref(), stored)
    }
}

impl StateStore for RocksStateStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        let stored = self
            .db
            .get_cf(&self.cf()?, key)
            .map_err(|e| self.error(e))?;
        Ok(stored.and_then(|value| self.live(value)))
    }

    fn multi_get(&self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StateError> {
        let cf = self.cf()?;
        self.db
            .batched_multi_get_cf(&cf, keys, false)
            .into_iter()
            .map(|found| {
                let found = found.map_err(|e| self.error(e))?;
                Ok(found.and_then(|value| self.live(value.to_vec())))
            })
            .collect()
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.db
            .put_cf_opt(&self.cf()?, key, self.stamp(value), &self.write_options)
            .map_err(|e| self.error(e))
    }

    fn delete(&self, key: &[u8]) -> Result<(), StateError> {
        self.db
            .delete_cf_opt(&self.cf()?, key, &self.write_options)
            .map_err(|e| self.error(e))
    }

    /// One atomic write batch, applied in key order: the memtable's skip
    /// list inserts a sorted run next to the previous insert instead of
    /// searching from its top for each key (a window operator writing a
    /// batch's states spent most of its write time in that search). The
    /// sort is stable, so writes to one key keep their order.
    fn write(&self, mut writes: Vec<StateWrite>) -> Result<(), StateError> {
        let cf = self.cf()?;
        writes.sort_by(|a, b| a.key().cmp(b.key()));
        let mut batch = WriteBatch::default();
        for write in writes {
            match write {
                StateWrite::Put(key, value) => batch.put_cf(&cf, key, self.stamp(&value)),
                StateWrite::Delete(key) => batch.delete_cf(&cf, key),
                StateWrite::Merge(key, operand) => batch.merge_cf(&cf, key, operand),
            }
        }
        self.db
            .write_opt(batch, &self.write_options)
            .map_err(|e| self.error(e))
    }

    fn supports_merge(&self) -> bool {
        self.ttl.is_none()
    }

    fn range_limit(
        &self,
        from: &[u8],
        to: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<StateEntry>, StateError> {
        let cf = self.cf()?;
        let mut read_options = rocksdb::ReadOptions::default();
        if let Some(to) = to {
            // RocksDB stops at the bound itself instead of reading (and
            // skipping tombstones) past it.
            read_options.set_iterate_upper_bound(to.to_vec());
        }
        let mut entries = Vec::new();
        for item in self.db.iterator_cf_opt(
            &cf,
            read_options,
            IteratorMode::From(from, Direction::Forward),
        ) {
            if entries.len() >= limit {
                break;
            }
            let (key, value) = item.map_err(|e| self.error(e))?;
            if let Some(value) = self.live(value.into_vec()) {
                entries.push((key.into_vec(), value));
            }
        }
        Ok(entries)
    }

    fn usage(&self) -> Result<StateUsage, StateError> {
        let cf = self.cf()?;
        let property = |name: &str| -> Result<u64, StateError> {
            Ok(self
                .db
                .property_int_value_cf(&cf, name)
                .map_err(|e| self.error(e))?
                .unwrap_or(0))
        };
        Ok(StateUsage {
            keys: property("rocksdb.estimate-num-keys")?,
            bytes: property("rocksdb.estimate-live-data-size")?
                + property("rocksdb.cur-size-all-mem-tables")?,
            disk_bytes: property("rocksdb.total-sst-files-size")?,
        })
    }

    fn flush(&self) -> Result<(), StateError> {
        let cf = self.cf()?;
        self.db.flush_cf(&cf).map_err(|e| self.error(e))
    }

    fn compact(&self) -> Result<(), StateError> {
        let cf = self.cf()?;
        self.db.flush_cf(&cf).map_err(|e| self.error(e))?;
        self.db.compact_range_cf(&cf, None::<&[u8]>, None::<&[u8]>);
        Ok(())
    }
}

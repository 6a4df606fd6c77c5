//! One pipeline's memory for keyed state (`state_cache_mb`), shared out
//! between RocksDB and the operators' caches, as Flink's managed memory is
//! shared between RocksDB instances.
//!
//! What counts against the budget:
//!
//! * RocksDB's write buffers (memtables of every column family, one limit
//!   for the whole database) and its block cache (data, index and filter
//!   blocks, one LRU cache for every column family);
//! * the window operators' caches of window states and the join operators'
//!   records waiting for a barrier, split evenly among the keyed operator
//!   instances.
//!
//! What does not: the process itself (runtime, plugins' engines and
//! instances, record batches in flight), and a fixed amount per keyed
//! operator (timers and merge operands waiting for one write, at most a
//! few MiB: `window::timers`, `window::states`). RocksDB gets a floor of
//! [`ROCKSDB_FLOOR_BYTES`] however small the budget, so that a budget of 0
//! keeps every window in RocksDB but RocksDB still works.

/// The least RocksDB gets for write buffers and for its block cache, each.
pub const ROCKSDB_FLOOR_BYTES: usize = 4 << 20;

/// What RocksDB may hold in memory for one database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocksMemory {
    /// Every column family's memtables together (RocksDB's
    /// `db_write_buffer_size`): past it, the largest is flushed.
    pub write_buffer_bytes: usize,
    /// The one block cache of every column family, index and filter
    /// blocks included.
    pub block_cache_bytes: usize,
}

impl Default for RocksMemory {
    /// RocksDB's share of the default budget.
    fn default() -> Self {
        StateMemoryBudget::new(DEFAULT_STATE_MEMORY_BYTES).rocksdb()
    }
}

/// The default budget: 64 MiB.
pub const DEFAULT_STATE_MEMORY_BYTES: usize = 64 << 20;

/// One pipeline's memory for keyed state, in bytes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateMemoryBudget {
    bytes: usize,
}

impl StateMemoryBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Self {
        StateMemoryBudget { bytes }
    }

    /// RocksDB's share: an eighth each for write buffers and block cache
    /// (at least [`ROCKSDB_FLOOR_BYTES`] each, at most 64 and 256 MiB).
    pub fn rocksdb(&self) -> RocksMemory {
        RocksMemory {
            write_buffer_bytes: (self.bytes / 8).clamp(ROCKSDB_FLOOR_BYTES, 64 << 20),
            block_cache_bytes: (self.bytes / 8).clamp(ROCKSDB_FLOOR_BYTES, 256 << 20),
        }
    }

    /// What one of `instances` keyed operator instances may cache: the
    /// budget less RocksDB's share, split evenly.
    pub fn operator_cache_bytes(&self, instances: usize) -> usize {
        let rocksdb = self.rocksdb();
        self.bytes
            .saturating_sub(rocksdb.write_buffer_bytes + rocksdb.block_cache_bytes)
            / instances.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_add_up_to_the_budget_above_the_floor() {
        for mib in [16usize, 64, 128, 1024, 8192] {
            let budget = StateMemoryBudget::new(mib << 20);
            let rocksdb = budget.rocksdb();
            let total = rocksdb.write_buffer_bytes
                + rocksdb.block_cache_bytes
                + budget.operator_cache_bytes(3) * 3;
            assert!(total <= mib << 20, "{mib} MiB: {total}");
            assert!(total + 3 >= mib << 20, "{mib} MiB: nothing left unused");
        }
        // Below the floor, RocksDB keeps its floor and caches get nothing.
        let none = StateMemoryBudget::new(0);
        assert_eq!(none.operator_cache_bytes(1), 0);
        assert_eq!(none.rocksdb().write_buffer_bytes, ROCKSDB_FLOOR_BYTES);
    }
}

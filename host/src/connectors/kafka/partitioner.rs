//! How the producers of a topic chose a keyed record's partition.
//!
//! A scaled-out pipeline reads partition *i* of its input topics as task
//! *i* (ADR 0020): a key must land where the producer put it, and two
//! clients disagree on where that is. Java clients (and Kafka Streams)
//! take murmur2 of the key; librdkafka's default (`consistent_random`)
//! takes its CRC-32. Both are computed by librdkafka's own partitioner
//! functions, so Sluice agrees with the client libraries by construction.

use std::ffi::c_void;

use rdkafka::bindings;

/// A keyed record's partition, as its producer computed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyPartitioner {
    /// The Java client's default: murmur2 of the key, made positive,
    /// modulo the partition count.
    #[default]
    Murmur2,
    /// librdkafka's default for keyed records: CRC-32 of the key modulo the
    /// partition count.
    Crc32,
}

impl KeyPartitioner {
    /// The partition of a record with `key` in a topic of `partitions`
    /// partitions (at least 1; fewer is taken as 1).
    pub fn partition(self, key: &[u8], partitions: i32) -> i32 {
        let partitions = partitions.max(1);
        let function = match self {
            KeyPartitioner::Murmur2 => bindings::rd_kafka_msg_partitioner_murmur2,
            KeyPartitioner::Crc32 => bindings::rd_kafka_msg_partitioner_consistent,
        };
        // SAFETY: both functions read `keylen` bytes at `key` (a live
        // slice) and use neither the topic handle nor the opaques, which
        // may therefore be null (librdkafka's `rdkafka_msg.c`).
        unsafe {
            function(
                std::ptr::null(),
                key.as_ptr().cast::<c_void>(),
                key.len(),
                partitions,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (key, partition of 8, partition of 12): murmur2 from the Java
    /// client's own `Utils.toPositive(Utils.murmur2(key)) % n` (Kafka
    /// 4.4's `kafka-clients`), CRC-32 from Python's `zlib.crc32(key) % n`.
    const JAVA_MURMUR2: [(&str, i32, i32); 6] = [
        ("a", 4, 4),
        ("user-1", 4, 8),
        ("user-42", 4, 4),
        ("k000123", 4, 8),
        ("order:9001", 2, 10),
        ("héllo", 2, 6),
    ];
    const ZLIB_CRC32: [(&str, i32, i32); 6] = [
        ("a", 3, 3),
        ("user-1", 4, 8),
        ("user-42", 3, 7),
        ("k000123", 3, 7),
        ("order:9001", 4, 8),
        ("héllo", 6, 2),
    ];

    #[test]
    fn partitions_agree_with_the_java_client_and_with_zlib() {
        for (partitioner, table) in [
            (KeyPartitioner::Murmur2, JAVA_MURMUR2),
            (KeyPartitioner::Crc32, ZLIB_CRC32),
        ] {
            for (key, of_8, of_12) in table {
                assert_eq!(
                    (
                        partitioner.partition(key.as_bytes(), 8),
                        partitioner.partition(key.as_bytes(), 12)
                    ),
                    (of_8, of_12),
                    "{partitioner:?} of {key:?}"
                );
            }
        }
    }

    #[test]
    fn a_topic_of_one_partition_or_less_takes_everything_at_zero() {
        for partitioner in [KeyPartitioner::Murmur2, KeyPartitioner::Crc32] {
            assert_eq!(partitioner.partition(b"any", 1), 0);
            assert_eq!(partitioner.partition(b"any", 0), 0);
        }
    }
}

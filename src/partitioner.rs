//! Which partition a record goes to: Kafka's default partitioner.
//!
//! A record with a key goes to `(murmur2(key) & 0x7fffffff) % partitions`, the same partition
//! Kafka's Java client picks, so keyed data lands where a Kafka producer would put it and
//! records with one key stay in order. A record without a key goes to a *sticky* partition: the
//! producer keeps filling one partition's batch and moves on to another (chosen at random)
//! when that batch is sent, so small unkeyed records still form large batches.

/// MurmurHash2 (32-bit) as Kafka's `Utils.murmur2` computes it: seed `0x9747b28c`, four-byte
/// little-endian blocks, the tail folded in, then a final mix. Returned as Java's signed `int`.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    const SEED: u32 = 0x9747_b28c;
    // Kafka mixes the length as a Java int; lengths past `i32::MAX` cannot be keys.
    let mut h = SEED ^ (data.len() as u32);
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner gives `key` among `partitions` (at least 1).
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) as u32 & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectors of Kafka's `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, hash) in cases {
            assert_eq!(murmur2(key), hash, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn keyed_partitions_match_kafka() {
        // toPositive(-790332482) = 1357151166.
        assert_eq!(partition_for_key(b"foobar", 10), 6);
        assert_eq!(partition_for_key(b"foobar", 50), 16);
        assert_eq!(partition_for_key(b"anything", 1), 0);
        assert_eq!(partition_for_key(b"anything", 0), 0, "no partitions is one");
    }
}

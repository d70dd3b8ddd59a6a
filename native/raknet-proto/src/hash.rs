//! A fast hasher for keys the program chose itself.
//!
//! The standard `HashMap` hashes with SipHash, which resists collisions crafted by whoever
//! chooses the keys: right for addresses and indices a peer sends, wasted on numbers this
//! program assigned (reliable message numbers, receipt ids, connection handles), and it
//! showed in send-path profiles. Never use these maps for keys a peer controls.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// 2^64 / φ: multiplying spreads sequential keys over both the low bits (a table's bucket)
/// and the high bits (hashbrown's tag) of the hash.
const FIBONACCI: u64 = 0x9e37_79b9_7f4a_7c15;

/// One multiplication per integer written (Fibonacci hashing).
#[derive(Debug, Default, Clone, Copy)]
pub struct OwnKeyHasher(u64);

impl Hasher for OwnKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(FIBONACCI);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        // Fold the high half in first, so keys that differ only there still spread.
        self.0 = (self.0 ^ n ^ (n >> 32)).wrapping_mul(FIBONACCI);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A `HashMap` for keys this program assigned (see the module documentation).
pub type OwnKeyMap<K, V> = HashMap<K, V, BuildHasherDefault<OwnKeyHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn own_key_hasher_spreads_sequential_indices_over_buckets_and_tags() {
        let build = BuildHasherDefault::<OwnKeyHasher>::default();
        // A window of 1024 consecutive message numbers, anywhere in the 24-bit space.
        for start in [0u32, 1 << 20, (1 << 24) - 512] {
            let hashes: Vec<u64> = (start..start + 1024).map(|i| build.hash_one(i)).collect();
            // The low bits pick the bucket of a 1024-bucket table: nearly all distinct.
            let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 1023).collect();
            assert!(buckets.len() > 1000, "{} buckets used", buckets.len());
            // The top 7 bits are hashbrown's tag: all 128 values occur.
            let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
            assert_eq!(tags.len(), 128);
        }
    }

    #[test]
    fn keys_that_differ_in_their_high_half_spread_too() {
        let build = BuildHasherDefault::<OwnKeyHasher>::default();
        let buckets: std::collections::HashSet<u64> = (0u64..1024)
            .map(|i| build.hash_one(i << 32) & 1023)
            .collect();
        assert!(buckets.len() > 1000, "{} buckets used", buckets.len());
    }
}

//! FNV-1a, 64 bits: a small, stable, non-cryptographic content hash (the Agent Card's ETag,
//! the hash in a worker's deterministic name). Never used where an attacker gains from a
//! collision: names are also guarded by their owner label.

/// The FNV-1a 64-bit offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a over `bytes`, starting from `seed` ([`FNV_OFFSET`] for the standard hash).
pub fn fnv1a64(seed: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes
        .into_iter()
        .fold(seed, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // Reference values of FNV-1a 64.
        assert_eq!(fnv1a64(FNV_OFFSET, *b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(FNV_OFFSET, *b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(FNV_OFFSET, *b"foobar"), 0x8594_4171_f739_67e8);
    }
}

//! Hashes. FNV-1a, 64 bits: a small, stable, non-cryptographic content hash (the Agent Card's
//! ETag, the hash in the deterministic name of an admin-scope worker). Never used where an
//! attacker gains from a collision: names are also guarded by their owner label, and the names
//! of other scopes (where one caller could otherwise aim at another's name) use SHA-256.

/// SHA-256 of `bytes` (ring's, already in the graph through rustls).
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

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
    fn sha256_vectors() {
        let hex = crate::token::hex(&sha256(b"abc"));
        assert_eq!(
            hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn known_vectors() {
        // Reference values of FNV-1a 64.
        assert_eq!(fnv1a64(FNV_OFFSET, *b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(FNV_OFFSET, *b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(FNV_OFFSET, *b"foobar"), 0x8594_4171_f739_67e8);
    }
}

//! The keyed hash of a limiter: SipHash-1-3 under a random 128-bit key
//! (see the table's module docs for why), and where that key comes from.

use siphasher::sip::SipHasher13;
use std::hash::Hasher;

/// A limiter's keyed hash: SipHash-1-3 under a random 128-bit key. It
/// belongs to the keyed limiter, not to its table, so a check hashes before
/// it dispatches to the algorithm's table (once, not twice).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyHasher {
    k0: u64,
    k1: u64,
}

impl KeyHasher {
    /// A new random key (a fixed one under loom, whose models must be
    /// deterministic).
    pub(crate) fn random() -> KeyHasher {
        let (k0, k1) = seed();
        KeyHasher { k0, k1 }
    }

    /// The hasher with this key: a restored snapshot's, or a shared
    /// region's (which every attached process uses, so a key lands in one
    /// place for all of them).
    pub(crate) fn from_keys(k0: u64, k1: u64) -> KeyHasher {
        KeyHasher { k0, k1 }
    }

    /// The 128-bit key: a snapshot or a shared region records it, so every
    /// key hashes to the same place and fingerprint elsewhere.
    pub(crate) fn keys(&self) -> (u64, u64) {
        (self.k0, self.k1)
    }

    /// SipHash-1-3 of the key's bytes.
    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(key);
        h.finish()
    }

    /// The same hash for a `u64` key's 8 little-endian bytes, through the
    /// hasher's integer path (one block, no byte loop).
    #[inline]
    pub(crate) fn hash_u64(&self, key: u64) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write_u64(key);
        h.finish()
    }
}

/// A random SipHash key (fixed under loom).
fn seed() -> (u64, u64) {
    if crate::sync::UNDER_LOOM {
        return (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
    }
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No OS randomness (a sandbox without getrandom): fall back to
        // std's per-process random keys rather than fail construction.
        use std::hash::{BuildHasher, RandomState};
        let s = RandomState::new();
        return (s.hash_one(1u8), s.hash_one(2u8));
    }
    let (a, b) = bytes.split_at(8);
    (
        u64::from_le_bytes(a.try_into().unwrap()),
        u64::from_le_bytes(b.try_into().unwrap()),
    )
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_u64_key_hashes_as_its_little_endian_bytes() {
        let hasher = KeyHasher::random();
        for key in [0, 1, 0xff, 1 << 63, u64::MAX, 0x0123_4567_89ab_cdef] {
            assert_eq!(hasher.hash_u64(key), hasher.hash(&key.to_le_bytes()));
        }
    }
}

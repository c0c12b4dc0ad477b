//! Where a key's state lives: the shard, the home bucket, the fingerprint
//! and the probe window, decoded from the key's hash.

use super::{FREED, PROBE};

/// Slots allocated per key of capacity, in hundredths: 1.45 slots per key
/// keeps the table at most 69 % full when `capacity` live keys are stored,
/// which a 32-bucket probe window absorbs, and leaves 16-byte slots at
/// 23.2 bytes per key.
const SLOTS_PER_KEY_PERCENT: u64 = 145;

/// Where keys go: the shard and bucket counts and the fingerprint width.
#[derive(Debug)]
pub(crate) struct Geometry {
    pub(crate) shards: u64,
    buckets_per_shard: u64,
    fingerprint_bits: u32,
}

/// A key's hash, decoded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Home {
    pub shard: usize,
    /// Global index of the home bucket.
    pub bucket: usize,
    pub fingerprint: u64,
}

impl Geometry {
    /// Sizes a table of `capacity` keys with `slots_per_bucket`; returns
    /// the geometry and the number of shards.
    pub(crate) fn new(
        capacity: u64,
        slots_per_bucket: u64,
        fingerprint_bits: u32,
    ) -> (Geometry, usize) {
        let slots = capacity.saturating_mul(SLOTS_PER_KEY_PERCENT).div_ceil(100);
        let buckets = slots.div_ceil(slots_per_bucket).max(1);
        // About 8k keys per shard, at most 256 shards: enough that inserts
        // on different cores rarely meet on a latch, few enough that the
        // counters stay a rounding error of the memory.
        let shards = (capacity / 8192).clamp(1, 256).next_power_of_two().min(256);
        let buckets_per_shard = buckets.div_ceil(shards).max(1);
        (
            Geometry {
                shards,
                buckets_per_shard,
                fingerprint_bits,
            },
            shards as usize,
        )
    }

    pub(crate) fn buckets(&self, shards: usize) -> usize {
        self.buckets_per_shard as usize * shards
    }

    pub(crate) fn fingerprint_bits(&self) -> u32 {
        self.fingerprint_bits
    }

    #[inline]
    pub(crate) fn home(&self, h: u64) -> Home {
        // The top bits of h (multiply-shift: no special case for one shard).
        let shard = ((u128::from(h) * u128::from(self.shards)) >> 64) as usize;
        let local = ((h & 0xffff_ffff) * self.buckets_per_shard) >> 32;
        let mixed = h.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
        // Never 0 (an empty place) or FREED (a tombstone).
        let fingerprint = (mixed >> (64 - self.fingerprint_bits)).max(FREED + 1);
        Home {
            shard,
            bucket: shard * self.buckets_per_shard as usize + local as usize,
            fingerprint,
        }
    }

    /// The second bucket of the key's probe window (its home again in a
    /// shard of one bucket).
    #[inline]
    pub(crate) fn second(&self, home: Home) -> usize {
        window_bucket(home, self.buckets_per_shard as usize, 1)
    }

    /// The buckets of the probe window, in order: home first, wrapping
    /// inside the shard.
    #[inline]
    pub(crate) fn window(&self, home: Home) -> impl Iterator<Item = usize> {
        let n = self.buckets_per_shard as usize;
        (0..PROBE.min(self.buckets_per_shard) as usize).map(move |i| window_bucket(home, n, i))
    }
}

/// Bucket `i` (< `per_shard`) of `home`'s probe window, wrapping inside its
/// shard of `per_shard` buckets: one conditional subtraction (the local
/// index and `i` are both below `per_shard`), no division on the hot path.
#[inline]
fn window_bucket(home: Home, per_shard: usize, i: usize) -> usize {
    let first = home.shard * per_shard;
    let b = home.bucket - first + i;
    first + if b >= per_shard { b - per_shard } else { b }
}

impl Geometry {
    /// The buckets, other than `bucket` itself, whose probe window passes
    /// through `bucket` (those a lookup ending in `bucket` may have
    /// started from): up to `PROBE − 1` buckets before it, wrapping inside
    /// its shard. A snapshot's restore keeps them non-empty.
    pub(crate) fn reaching(&self, bucket: usize) -> impl Iterator<Item = usize> {
        let n = self.buckets_per_shard as usize;
        let first = bucket - bucket % n;
        let local = bucket - first;
        (1..PROBE.min(self.buckets_per_shard) as usize).map(move |i| first + (local + n - i) % n)
    }

    /// The shard that owns `bucket`.
    pub(crate) fn shard_of(&self, bucket: usize) -> usize {
        bucket / self.buckets_per_shard as usize
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_probe_window_wraps_inside_the_shard() {
        let (g, shards) = Geometry::new(10_000_000, 4, 64);
        let per_shard = g.buckets(shards) / shards;
        let last = Home {
            shard: 1,
            bucket: 2 * per_shard - 1,
            fingerprint: 1,
        };
        let window: Vec<usize> = g.window(last).collect();
        assert_eq!(window.len(), PROBE as usize);
        assert_eq!(window[0], 2 * per_shard - 1);
        assert_eq!(window[1], per_shard, "wraps to the shard's first bucket");
        assert_eq!(g.second(last), window[1]);
        let inner = Home {
            bucket: per_shard + 5,
            ..last
        };
        assert_eq!(g.second(inner), g.window(inner).nth(1).unwrap());
    }
}

//! The keyed table: a fixed-capacity, sharded array of cache-line buckets of
//! atomic slots, allocated once, holding one state per key ([SPEC §5](crate::spec#5-keyed-limiters)).
//!
//! # Keys
//! Keys are hashed (by the keyed limiter, see `KeyHasher`) with SipHash-1-3
//! under a random 128-bit key drawn per
//! limiter from the OS. SipHash is a keyed pseudo-random function built for
//! exactly this threat (hash flooding: someone who chooses keys aiming them
//! at one bucket); without the key nobody outside can predict where a key
//! lands or which keys share a fingerprint. The 1-3 variant is the one Rust's
//! `HashMap` uses: about 15 ns for a short key here, small beside the cache
//! miss of a large table. A `u64` key is hashed as its 8 little-endian
//! bytes, so `check(k)` and `check_bytes(&k.to_le_bytes())` are one key.
//!
//! The 64-bit hash `h` picks the shard (top bits), the home bucket in the
//! shard (its low 32 bits, by multiply-shift), and the fingerprint (a
//! multiplicative mix of `h`, never 0). The table stores fingerprints, not
//! keys: memory per key does not depend on key length, and two keys share a
//! state only if they have the same shard, home bucket and fingerprint.
//!
//! # Collisions
//! See the table in `KeyedLimiter`'s documentation: a new key is compared
//! with the residents of its window up to the first empty place, at most
//! `PROBE × slots-per-bucket` of them, so over `n` keys the expected number
//! that share a state is at most `n × PROBE × slots-per-bucket / 2^(f+1)`
//! for `f` fingerprint bits.
//!
//! # Places
//! A key lives in the first `PROBE` buckets from its home bucket (wrapping
//! inside its shard). Buckets are 64 bytes, each on one cache line (the
//! arrays start on a 64-byte boundary: `sync::zeroed_words`): four
//! 16-byte slots for single-word states, or eight 8-byte headers for
//! multi-word states (whose blocks of words live in a second array). An
//! existing key is found in its home bucket in the common case: one cache
//! line, no lock, no allocation.
//!
//! A place, once taken, is never empty again: an eviction puts the new key
//! in it, and a reset leaves a tombstone (the fingerprint [`FREED`], which
//! no key has). A key is placed in the first free place of its window, so
//! every place before it in the window was taken then and is still not
//! empty: a lookup stops at the first empty place, which is in the home
//! bucket for most keys that are not in the table. That is what lets the
//! window be 32 buckets long (a new key finds a place at exactly
//! `capacity` live keys) without making the lookup of a new key long.
//!
//! # Inserting and evicting
//! Only an admitted request of cost above 0 creates a state, so peeks and
//! denials of unknown keys touch nothing. A new key is placed under its
//! shard's insert latch: the inserter first looks for the key again
//! (another thread may just have placed it), then takes the first free
//! place (empty, or a tombstone) in the probe window or, only when none is
//! free, the first place holding a state equivalent to fresh ([SPEC §4](crate::spec#4-the-algorithms)) at
//! this moment. Dropping such a state changes no decision at later times,
//! but a request from the past (time going backwards) would find the key
//! fresh, so states are dropped only when the table is full around the key.
//! The place is taken with one CAS from the exact word examined, so a
//! concurrent update of that state makes the eviction fail and be
//! re-examined. Because every insert of a key goes through one latch and
//! re-checks, no key is ever placed twice; because every update CASes a
//! word that contains the fingerprint, no update lands on another key's
//! state. Updates of existing keys never take the latch.
//!
//! A dropped state was fresh at the eviction's time, not necessarily
//! before it. Each shard keeps the latest time at which it evicted, and a
//! key not in the table at an earlier time is denied until then ([SPEC §5](crate::spec#5-keyed-limiters):
//! no fresher answer than the dropped state would have given). A peek at a
//! key not in the table says what its cost-1 request would be told: on a
//! table that fails closed with no free or evictable place in the key's
//! window, a denial ([SPEC §3](crate::spec#3-requests-and-decisions)).

pub(crate) mod block;
pub(crate) mod storage;
pub(crate) mod word;

use crate::cell::{LatchGuard, latch_recording};
use crate::clock::At;
use crate::decision::Decision;
use crate::shared::holder;
use crate::stats::{Stats, TableCounters};
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use siphasher::sip::SipHasher13;
use std::hash::Hasher;
use std::sync::atomic::Ordering::Relaxed;

/// Buckets searched from a key's home bucket (up to the first empty
/// place). At exactly `capacity` live keys, 29–52 keys in a million found
/// no place with 16 buckets; with 32, about one in five million does
/// (docs/PERFORMANCE.md, fourth round).
pub(crate) const PROBE: u64 = 32;

/// The fingerprint of a tombstone: a place a reset freed. No key has it
/// (fingerprints start at 2), a lookup goes on past it, and an insert may
/// take it like an empty place.
pub(crate) const FREED: u64 = 1;

/// Slots allocated per key of capacity, in hundredths: 1.45 slots per key
/// keeps the table at most 69 % full when `capacity` live keys are stored,
/// which a 32-bucket probe window absorbs, and leaves 16-byte slots at
/// 23.2 bytes per key.
const SLOTS_PER_KEY_PERCENT: u64 = 145;

/// A shard: its insert latch and its counters of table events, on their
/// own cache lines (the per-check counters are the keyed limiter's,
/// striped by thread). `repr(C)`: a shared region (`crate::shared`) holds
/// shards, and every process must lay them out alike.
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Shard {
    /// Held while a new key is placed or a key is reset.
    pub latch: AtomicU64,
    /// The latest time at which a state was evicted from this shard (0:
    /// never). Written under the latch, before the eviction's CAS.
    pub evicted_at: AtomicU64,
    pub counters: TableCounters,
}

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
    #[cfg_attr(ratecell_loom, allow(dead_code))]
    pub(crate) fn from_keys(k0: u64, k1: u64) -> KeyHasher {
        KeyHasher { k0, k1 }
    }

    /// The 128-bit key: a snapshot or a shared region records it, so every
    /// key hashes to the same place and fingerprint elsewhere.
    #[cfg_attr(ratecell_loom, allow(dead_code))]
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

impl Shard {
    /// Takes the shard's insert latch, recording this process as its
    /// holder; a holder that no longer exists (a thread of the process we
    /// were forked from, or in a shared region a dead process) is taken
    /// over instead of waited for (`cell::latch_recording`). Every change
    /// made under this latch is one CAS of a slot or header, done or not, so
    /// the new holder finds a consistent window; only a dead holder's
    /// counter bump may be missing from the statistics.
    pub(crate) fn lock(&self, shared: bool) -> LatchGuard<'_> {
        latch_recording(&self.latch, holder::me(), |h| holder::alive(h, shared)).0
    }

    /// The decision for a new key that found neither a free nor an
    /// evictable place, counted as an overflow: the fresh decision when
    /// overflows are allowed (the key is admitted untracked), otherwise a
    /// denial until the soonest of the window's states becomes evictable
    /// (`frees_in`).
    pub(crate) fn overflow(&self, fresh: Decision, allow: bool, frees_in: u64) -> Decision {
        self.counters.overflows.fetch_add(1, Relaxed);
        if allow {
            return fresh;
        }
        no_room(fresh, frees_in)
    }

    /// Records that a state is about to be evicted at `t` (under the latch,
    /// before the CAS that drops it, so whoever no longer finds the key
    /// finds the time).
    pub(crate) fn evicting_at(&self, t: u64) {
        self.evicted_at.fetch_max(t, Ordering::Release);
    }

    /// The decision for a key not in the table at `t`, from `fresh`, its
    /// decision on the fresh state ([SPEC §5](crate::spec#5-keyed-limiters): "never admit more" holds
    /// across evictions). A key missing at `t` may have been evicted at a
    /// later time `e`, when its state was equivalent to fresh; at `t < e`
    /// that state may have denied, and it is gone. So before the shard's
    /// latest eviction a missing key is denied until that eviction's time
    /// (from then on it is as fresh as its dropped state was). Only times
    /// that go back reach this: explicit times out of order, or two threads
    /// whose clock reads race by nanoseconds.
    #[inline]
    pub(crate) fn unfound(&self, fresh: Decision, t: u64) -> Decision {
        let evicted_at = self.evicted_at.load(Ordering::Acquire);
        if !fresh.allowed || t >= evicted_at {
            return fresh;
        }
        let gap = evicted_at - t;
        Decision {
            allowed: false,
            remaining: 0,
            retry_after_ns: gap,
            reset_after_ns: fresh.reset_after_ns.max(gap),
            wait_ns: 0,
            ..fresh
        }
    }
}

/// The denial of a new key that has no place in a table that fails closed
/// (an overflow, or a peek at one): until the soonest of the window's
/// states becomes evictable, `frees_in`.
pub(crate) fn no_room(fresh: Decision, frees_in: u64) -> Decision {
    Decision {
        allowed: false,
        remaining: 0,
        retry_after_ns: frees_in.max(1),
        reset_after_ns: 0,
        wait_ns: 0,
        ..fresh
    }
}

/// What the keyed limiter needs of a table to decide: one interface for the
/// word and the block table, so a check dispatches on the algorithm once,
/// and the batch loop is compiled once per table type with the table's
/// check inlined (not dispatched per key).
pub(crate) trait KeyedTable {
    /// Starts loading the buckets of the key hashed to `h`.
    fn prefetch(&self, h: u64);
    /// Decides a request of cost `n` for the key hashed to `h` at `at`; an
    /// admission whose queue wait exceeds `max_wait` is refused and comes
    /// back with `.1 == false` (nothing stored). The caller counts it.
    fn decide(&self, h: u64, at: impl At, n: u64, max_wait: u64) -> (Decision, bool);
}

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

    /// The buckets of the probe window, in order: home first, wrapping
    /// inside the shard.
    #[inline]
    pub(crate) fn window(&self, home: Home) -> impl Iterator<Item = usize> {
        let first = home.shard * self.buckets_per_shard as usize;
        let local = home.bucket - first;
        let n = self.buckets_per_shard as usize;
        // local < n and i < n, so one conditional subtraction wraps (no
        // division on the hot path).
        (0..PROBE.min(self.buckets_per_shard) as usize).map(move |i| {
            let b = local + i;
            first + if b >= n { b - n } else { b }
        })
    }
}

#[cfg_attr(ratecell_loom, allow(dead_code))]
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

/// A random SipHash key (fixed under loom).
fn seed() -> (u64, u64) {
    #[cfg(ratecell_loom)]
    {
        (0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210)
    }
    #[cfg(not(ratecell_loom))]
    {
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
}

/// The shards of a table, padded so that one shard's counter bumps do not
/// invalidate another's line.
pub(crate) fn new_shards(n: usize) -> storage::Storage<CachePadded<Shard>> {
    (0..n)
        .map(|_| CachePadded::new(Shard::default()))
        .collect::<Box<[_]>>()
        .into()
}

/// Sums the table's counters into a snapshot (the per-check counters are
/// the keyed limiter's, which adds them).
pub(crate) fn stats(shards: &[CachePadded<Shard>], capacity: u64, bytes: usize) -> Stats {
    let mut stats = Stats {
        capacity,
        bytes_allocated: bytes as u64,
        ..Stats::default()
    };
    for shard in shards {
        shard.counters.add_to(&mut stats);
    }
    stats
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
    }
}

/// Fetches the cache line at `ptr` ahead of use. A prefetch never faults,
/// whatever the address.
#[inline]
pub(crate) fn prefetch<T>(ptr: *const T) {
    #[cfg(all(target_arch = "x86_64", not(ratecell_loom)))]
    // SAFETY: prefetch is a hint; it reads nothing architecturally and
    // cannot fault, for any address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(ratecell_loom))))]
    let _ = ptr;
}

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
//! `HashMap` uses: small beside the cache miss of a large table. A `u64` key is hashed as its 8 little-endian
//! bytes, so `check(k, ..)` and `check(&k.to_le_bytes(), ..)` are one key.
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
//! arrays start on a 64-byte boundary: `memory::zeroed_words`): four
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
mod geometry;
mod hash;
mod holder;
mod place;
mod shard;
pub(crate) mod storage;
pub(crate) mod word;

pub(crate) use geometry::{Geometry, Home};
pub(crate) use hash::KeyHasher;
pub(crate) use shard::{Shard, new_shards, stats};

use crate::check::decision::Decision;
use crate::clock::At;

/// Buckets searched from a key's home bucket (up to the first empty
/// place). At exactly `capacity` live keys, about one new key in five
/// million finds no place within 32 buckets (16 left 29–52 in a million;
/// docs/ARCHITECTURE.md, "Why the keyed check is shaped as it is").
pub(crate) const PROBE: u64 = 32;

/// The fingerprint of a tombstone: a place a reset freed. No key has it
/// (fingerprints start at 2), a lookup goes on past it, and an insert may
/// take it like an empty place.
pub(crate) const FREED: u64 = 1;

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

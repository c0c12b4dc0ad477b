//! Placing a new key, the one order both tables follow: under the shard's
//! insert latch, a free place (empty, or a tombstone) anywhere in the key's
//! window first; only when there is none, the first state equivalent to
//! fresh at the insert's time; else an overflow. Dropping a state is
//! lossless only for times from `t` on, so it is never done while a place
//! is free. The peek at a new key asks the same question without taking
//! anything.
//!
//! This module owns that order, the re-check under the latch, the counting
//! of placed and evicted keys, and the overflow. How one place is judged
//! and taken (one CAS of a slot, or a header's latch and a block) is each
//! table's own, passed in as a closure; it never touches a place itself.

use super::{Geometry, Home, Shard, no_room};
use crate::decision::Decision;
use std::sync::atomic::Ordering::Relaxed;

/// Which places a pass over the window takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Empty places and tombstones.
    Free,
    /// States equivalent to fresh at the insert's time.
    Evict,
}

/// What a table did with one place of the window.
pub(crate) enum Place {
    /// Left as it was: not what this pass takes, or a state that becomes
    /// evictable in `frees_in` ns (`u64::MAX`: nothing known of when).
    Kept { frees_in: u64 },
    /// The new key is there now, decided as `decision`; `evicted`: a state
    /// was dropped for it.
    Taken { decision: Decision, evicted: bool },
}

/// A table's windows, as placing a new key sees them.
#[derive(Clone, Copy)]
pub(crate) struct Windows<'a> {
    pub geometry: &'a Geometry,
    /// Places per bucket (place `i` is in bucket `i / per_bucket`).
    pub per_bucket: usize,
    /// Whether the table lies in a region shared between processes (how a
    /// shard latch's holder is judged: `Shard::lock`).
    pub shared: bool,
    /// Whether a new key that finds no place is admitted untracked.
    pub allow_overflow: bool,
}

impl Windows<'_> {
    /// Places the new key of home `home` at `t`, whose decision on the
    /// fresh state (after `Shard::unfound`) admits, as `fresh`. `placed`
    /// says whether the key has a place now (looked up again under the
    /// latch); `take(i, pass)` judges place `i` in `pass` and takes it if
    /// it may, counting nothing. Returns the decision: `take`'s for the
    /// place taken, or the overflow's; `None` when another thread placed
    /// the key since the caller looked, or evicted a state at a later time
    /// (decide again).
    #[inline]
    pub(crate) fn place(
        self,
        shard: &Shard,
        home: Home,
        t: u64,
        fresh: Decision,
        placed: impl FnOnce() -> bool,
        mut take: impl FnMut(usize, Pass) -> Place,
    ) -> Option<Decision> {
        let _latch = shard.lock(self.shared);
        if placed() || shard.unfound(fresh, t) != fresh {
            #[cfg(ratecell_loom)]
            crate::loom_hooks::saw(crate::loom_hooks::Race::PlacedMeanwhile);
            return None;
        }
        let mut frees_in = u64::MAX;
        for pass in [Pass::Free, Pass::Evict] {
            for bucket in self.geometry.window(home) {
                for i in bucket * self.per_bucket..(bucket + 1) * self.per_bucket {
                    match take(i, pass) {
                        Place::Kept { frees_in: f } => frees_in = frees_in.min(f),
                        Place::Taken { decision, evicted } => {
                            let counter = if evicted {
                                &shard.counters.evictions
                            } else {
                                &shard.counters.tracked
                            };
                            counter.fetch_add(1, Relaxed);
                            return Some(decision);
                        }
                    }
                }
            }
        }
        Some(shard.overflow(fresh, self.allow_overflow, frees_in))
    }

    /// The peek at a new key of home `home` whose fresh decision admits:
    /// `fresh` if the key would find a place, else the denial an overflow
    /// would give. `room(i)` judges place `i` without changing it: `Ok`
    /// for a free place or a state equivalent to fresh, else when it may
    /// become evictable. The search ends at the first place with room,
    /// nearly always in the home bucket.
    #[inline]
    pub(crate) fn peek(
        self,
        home: Home,
        fresh: Decision,
        mut room: impl FnMut(usize) -> Result<(), u64>,
    ) -> Decision {
        if self.allow_overflow {
            return fresh;
        }
        let mut frees_in = u64::MAX;
        for bucket in self.geometry.window(home) {
            for i in bucket * self.per_bucket..(bucket + 1) * self.per_bucket {
                match room(i) {
                    Ok(()) => return fresh,
                    Err(f) => frees_in = frees_in.min(f),
                }
            }
        }
        no_room(fresh, frees_in)
    }
}

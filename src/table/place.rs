//! Placing a new key, the one order both tables follow: under the shard's
//! insert latch, a free place (empty, or a tombstone) anywhere in the key's
//! window first; only when there is none, the first state equivalent to
//! fresh at the insert's time; else an overflow, or under the overflow
//! policy `Evict` the live state nearest to fresh. Dropping a state is
//! lossless only for times from `t` on, so it is never done while a place
//! is free; dropping a live state is not lossless at all, so it is done
//! only when no state is equivalent to fresh. The peek at a new key asks
//! the same question without taking anything.
//!
//! This module owns that order, the re-check under the latch, the counting
//! of placed and evicted keys, and the overflow. How one place is judged
//! and taken (one CAS of a slot, or a header's latch and a block) is each
//! table's own, passed in as a closure; it never touches a place itself.

use super::{Geometry, Home, Shard, no_room};
use crate::check::decision::Decision;
use crate::config::Overflow;

/// Which places a pass over the window takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Empty places and tombstones.
    Free,
    /// States equivalent to fresh at the insert's time.
    Evict,
    /// The place is free, or holds a state that becomes equivalent to
    /// fresh within `within` ns of the insert's time (live or not): the
    /// victim an `Evict` overflow chose, judged again as it is now.
    Live { within: u64 },
}

/// What was in a place a new key took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Took {
    /// An empty place or a tombstone.
    Free,
    /// A state equivalent to fresh (lossless).
    Fresh,
    /// A live state (overflow policy `Evict`).
    Live,
}

/// What a table did with one place of the window.
pub(crate) enum Place {
    /// Left as it was: not what this pass takes, or a state that becomes
    /// evictable in `frees_in` ns (`u64::MAX`: nothing known of when).
    Kept { frees_in: u64 },
    /// Left as it was because it is being checked right now (a block
    /// table's latched place): it may be evictable soon, in about
    /// `frees_in` ns, but is no victim for `Pass::Live`.
    Busy { frees_in: u64 },
    /// The new key is there now, decided as `decision`, in place of `took`.
    Taken { decision: Decision, took: Took },
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
    /// What a new key that finds no free or evictable place gets.
    pub overflow: Overflow,
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
    ///
    /// Under `Overflow::Evict`, a window with no free or evictable place
    /// gives up its live state nearest to fresh (the least `frees_in` the
    /// `Evict` pass reported): `take(i, Pass::Live { within })` takes it
    /// with one CAS from the state it judges, and should that state have
    /// moved further from fresh meanwhile, the window is judged again.
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
            crate::sync::saw(crate::sync::Race::PlacedMeanwhile);
            return None;
        }
        loop {
            // The victim, should it come to one: the live state that
            // becomes fresh soonest, whose eviction gives its key the
            // least it would not have had (SPEC §5).
            let mut victim: Option<(u64, usize)> = None;
            let mut frees_in = u64::MAX;
            for pass in [Pass::Free, Pass::Evict] {
                for i in self.places(home) {
                    match take(i, pass) {
                        Place::Kept { frees_in: f } => {
                            frees_in = frees_in.min(f);
                            if pass == Pass::Evict && victim.is_none_or(|(v, _)| f < v) {
                                victim = Some((f, i));
                            }
                        }
                        Place::Busy { frees_in: f } => frees_in = frees_in.min(f),
                        Place::Taken { decision, took } => {
                            shard.took(took);
                            return Some(decision);
                        }
                    }
                }
            }
            let (Overflow::Evict, Some((within, i))) = (self.overflow, victim) else {
                // Deny or allow; or under `Evict` every place of the
                // window is being checked right now (a block table's
                // latches), which a retry soon gets past.
                let allow = self.overflow == Overflow::Allow;
                return Some(shard.overflow(fresh, allow, frees_in));
            };
            match take(i, Pass::Live { within }) {
                Place::Taken { decision, took } => {
                    shard.took(took);
                    return Some(decision);
                }
                // The victim's key was checked meanwhile, and its state
                // is further from fresh now: judge the window again. Only
                // another thread's completed update gets here, so the
                // loop is lock-free, as a CAS loop.
                Place::Kept { .. } | Place::Busy { .. } => {
                    crate::sync::saw(crate::sync::Race::PlaceContended);
                    crate::sync::spin_loop();
                }
            }
        }
    }

    /// The places of the window of home `home`, in probe order.
    #[inline]
    fn places(self, home: Home) -> impl Iterator<Item = usize> {
        let per_bucket = self.per_bucket;
        self.geometry
            .window(home)
            .flat_map(move |bucket| bucket * per_bucket..(bucket + 1) * per_bucket)
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
        if self.overflow != Overflow::Deny {
            // Every new key gets in: untracked, or by an eviction.
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

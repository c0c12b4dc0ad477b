//! A shard of a table: its insert latch, the time of its latest eviction,
//! and its counters of table events.

use super::holder;
use super::no_room;
use super::place::Took;
use crate::cell::{LatchGuard, latch_recording};
use crate::check::decision::Decision;
use crate::stats::{Stats, TableCounters};
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::Relaxed;

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

    /// Counts a new key placed in a place that held `took`.
    pub(crate) fn took(&self, took: Took) {
        let counter = match took {
            Took::Free => &self.counters.tracked,
            Took::Fresh => &self.counters.evictions,
            Took::Live => &self.counters.evicted_live,
        };
        counter.fetch_add(1, Relaxed);
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

/// The shards of a table, padded so that one shard's counter bumps do not
/// invalidate another's line.
pub(crate) fn new_shards(n: usize) -> super::storage::Storage<CachePadded<Shard>> {
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

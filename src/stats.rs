//! Statistics: counters of what limiters decided, kept where they are cheap
//! to bump.
//!
//! The per-check counters (allowed, denied) are striped by thread: each
//! thread bumps its own cache-line-padded stripe, so two threads checking
//! different keys never write the same line. (Counting per shard instead
//! made every check a coherence miss once two threads sweep the same
//! shards.) The rare events (keys placed, evicted, overflowing) are counted
//! per shard, under the shard's insert latch.

use crate::sync::CounterU64;
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;

/// Stripes of per-check counters: more than the cores of most machines that
/// run one process, few enough to sum quickly.
const STRIPES: usize = 16;

/// A snapshot of a limiter's counters. Counters are read one by one while
/// checks go on, so a snapshot taken under load is approximate (each counter
/// is exact on its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests decided (`allowed + denied`).
    pub checks: u64,
    /// Requests admitted (peeks that would be admitted included).
    pub allowed: u64,
    /// Requests denied (overflow denials included).
    pub denied: u64,
    /// Keys with a state in the table now (0 for a direct limiter).
    pub keys_tracked: u64,
    /// Entries dropped because they were equivalent to fresh.
    pub evictions: u64,
    /// New keys that found no free or evictable place.
    pub overflows: u64,
    /// Keys the table was sized for (0 for a direct limiter).
    pub capacity: u64,
    /// Bytes of state allocated at construction.
    pub bytes_allocated: u64,
}

/// A shard's counters of table events (the shard pads them).
#[derive(Debug, Default)]
pub(crate) struct TableCounters {
    pub tracked: CounterU64,
    pub evictions: CounterU64,
    pub overflows: CounterU64,
}

impl TableCounters {
    /// Adds these counters into `stats`.
    pub(crate) fn add_to(&self, stats: &mut Stats) {
        stats.keys_tracked += self.tracked.load(Relaxed);
        stats.evictions += self.evictions.load(Relaxed);
        stats.overflows += self.overflows.load(Relaxed);
    }
}

/// A stripe's counts: `[allowed, denied]`, indexed by the outcome so a
/// check bumps one without branching on it (whether a request is admitted
/// is as unpredictable as the traffic).
#[derive(Debug, Default)]
struct Outcomes([CounterU64; 2]);

const ALLOWED: usize = 0;
const DENIED: usize = 1;

/// Allowed and denied checks, one padded stripe per thread (modulo
/// [`STRIPES`]). Exact: a stripe shared by two threads is still bumped with
/// an atomic add.
#[derive(Debug, Default)]
pub(crate) struct CheckCounters {
    stripes: [CachePadded<Outcomes>; STRIPES],
}

/// This thread's stripe, assigned round-robin on first use.
#[inline]
fn stripe() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT.fetch_add(1, Relaxed) % STRIPES;
            s.set(i);
        }
        i
    })
}

impl CheckCounters {
    #[inline]
    pub(crate) fn record(&self, allowed: bool) {
        self.stripes[stripe()].0[usize::from(!allowed)].fetch_add(1, Relaxed);
    }

    /// Counts a batch's decisions at once: two adds, not one per key.
    #[inline]
    pub(crate) fn record_many(&self, allowed: u64, denied: u64) {
        let counts = &self.stripes[stripe()].0;
        counts[ALLOWED].fetch_add(allowed, Relaxed);
        counts[DENIED].fetch_add(denied, Relaxed);
    }

    /// Adds every stripe into `stats`.
    pub(crate) fn add_to(&self, stats: &mut Stats) {
        for stripe in &self.stripes {
            let allowed = stripe.0[ALLOWED].load(Relaxed);
            let denied = stripe.0[DENIED].load(Relaxed);
            stats.allowed += allowed;
            stats.denied += denied;
            stats.checks += allowed + denied;
        }
    }
}

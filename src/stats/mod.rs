//! Statistics: counters of what limiters decided, kept where they are cheap
//! to bump.
//!
//! The per-check counters (allowed, denied) are striped by thread: each
//! thread bumps its own cache-line-padded stripe, so two threads checking
//! different keys never write the same line. (Counting per shard instead
//! made every check a coherence miss once two threads sweep the same
//! shards.) A stripe has one writer, so a bump is a plain load and store,
//! not a `lock`ed add: beside a TSC read, one more locked instruction costs
//! several times what it costs without the read
//! (`bare/tsc_then_cas_u64_and_count` against `bare/tsc_then_cas_u64` in
//! the benchmarks show it). Threads beyond [`STRIPES`] at once share one more stripe, bumped
//! with atomic adds. The rare events (keys placed, evicted,
//! overflowing) are counted per shard, under the shard's insert latch.

use crate::sync::stripes::SHARED;
/// The stripes are also the fork barrier's (`crate::cell::fork`).
pub(crate) use crate::sync::stripes::{SHARED as SHARED_STRIPE, STRIPES, stripe};
use crate::sync::{CounterU64, StripeU64};
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::Relaxed;

/// A snapshot of a limiter's counters. Counters are read one by one while
/// checks go on, so a snapshot taken under load is approximate (each counter
/// is exact on its own). Counters may be added: read the fields by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
    /// New keys that found no free or evictable place, and so were denied
    /// or admitted untracked (overflow policies `Deny` and `Allow`).
    pub overflows: u64,
    /// Live states (not equivalent to fresh) evicted to place a new key
    /// that found no free or evictable place (overflow policy `Evict`).
    pub evicted_live: u64,
    /// Keys the table was sized for (0 for a direct limiter).
    pub capacity: u64,
    /// Bytes of state allocated at construction.
    pub bytes_allocated: u64,
}

/// A shard's counters of table events (the shard pads them; `repr(C)`, as
/// the shard, for shared regions).
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct TableCounters {
    pub tracked: CounterU64,
    pub evictions: CounterU64,
    pub overflows: CounterU64,
    /// Last, so that a shared region made before it was added reads it
    /// from the shard's padding (zero).
    pub evicted_live: CounterU64,
}

impl TableCounters {
    /// Adds these counters into `stats`.
    pub(crate) fn add_to(&self, stats: &mut Stats) {
        stats.keys_tracked += self.tracked.load(Relaxed);
        stats.evictions += self.evictions.load(Relaxed);
        stats.overflows += self.overflows.load(Relaxed);
        stats.evicted_live += self.evicted_live.load(Relaxed);
    }
}

/// A stripe's counts: `[allowed, denied]`, indexed by the outcome so a
/// check bumps one without branching on it (whether a request is admitted
/// is as unpredictable as the traffic).
#[derive(Debug, Default)]
struct Outcomes([StripeU64; 2]);

const ALLOWED: usize = 0;
const DENIED: usize = 1;

/// Allowed and denied checks: one padded stripe per thread, and the shared
/// stripe. Exact: each of the first [`STRIPES`] stripes is written by the
/// one thread that holds it, and the shared one with atomic adds.
#[derive(Debug, Default)]
pub(crate) struct CheckCounters {
    stripes: [CachePadded<Outcomes>; STRIPES + 1],
}

impl CheckCounters {
    #[inline]
    pub(crate) fn record(&self, allowed: bool) {
        self.tally().record(allowed);
    }

    /// Where this thread counts its next check: take it before deciding,
    /// and record once decided. The lookup of the thread's stripe may call
    /// out (its first use on a thread takes a stripe); made after the
    /// decision, it made the compiler keep the decision across that call
    /// on the stack, whose reload stalled on store forwarding.
    #[inline]
    pub(crate) fn tally(&self) -> Tally<'_> {
        Tally {
            counters: self,
            stripe: stripe(),
        }
    }

    /// Counts a batch's decisions at once: two adds, not one per key.
    #[inline]
    pub(crate) fn record_many(&self, allowed: u64, denied: u64) {
        let i = stripe();
        self.add(i, ALLOWED, allowed);
        self.add(i, DENIED, denied);
    }

    #[inline]
    fn add(&self, stripe: usize, outcome: usize, n: u64) {
        let count = &self.stripes[stripe].0[outcome];
        if stripe == SHARED {
            count.fetch_add(n, Relaxed);
        } else {
            // The stripe's one writer: no other thread stores to it.
            count.store(count.load(Relaxed) + n, Relaxed);
        }
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

/// A thread's stripe of [`CheckCounters`], resolved before a check
/// decides ([`CheckCounters::tally`]).
pub(crate) struct Tally<'a> {
    counters: &'a CheckCounters,
    stripe: usize,
}

impl Tally<'_> {
    /// Counts one decision.
    #[inline]
    pub(crate) fn record(self, allowed: bool) {
        self.counters.add(self.stripe, usize::from(!allowed), 1);
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;

    /// More threads than stripes, in two waves (the second takes the
    /// stripes the first gave back), each counting its own checks one by
    /// one and in batches: not one count is lost.
    #[test]
    fn counts_are_exact_with_more_threads_than_stripes() {
        const CHECKS: u64 = 20_000;
        let counters = CheckCounters::default();
        for _wave in 0..2 {
            std::thread::scope(|s| {
                for _ in 0..2 * STRIPES {
                    s.spawn(|| {
                        for i in 0..CHECKS {
                            counters.record(i % 3 != 0);
                        }
                        counters.record_many(7, 5);
                    });
                }
            });
        }
        let mut stats = Stats::default();
        counters.add_to(&mut stats);
        let threads = 2 * 2 * STRIPES as u64;
        let denied = CHECKS.div_ceil(3);
        assert_eq!(stats.allowed, threads * (CHECKS - denied + 7));
        assert_eq!(stats.denied, threads * (denied + 5));
        assert_eq!(stats.checks, threads * (CHECKS + 12));
    }
}

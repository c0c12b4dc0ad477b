//! Statistics: counters of what limiters decided, kept where they are cheap
//! to bump (one padded block per shard, not one word every thread writes).

use crate::sync::CounterU64;
use std::sync::atomic::Ordering::Relaxed;

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

/// One block of event counters (the caller pads it).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub allowed: CounterU64,
    pub denied: CounterU64,
    pub tracked: CounterU64,
    pub evictions: CounterU64,
    pub overflows: CounterU64,
}

impl Counters {
    #[inline]
    pub(crate) fn record(&self, allowed: bool) {
        if allowed {
            self.allowed.fetch_add(1, Relaxed);
        } else {
            self.denied.fetch_add(1, Relaxed);
        }
    }

    /// Adds this block into `stats`.
    pub(crate) fn add_to(&self, stats: &mut Stats) {
        let allowed = self.allowed.load(Relaxed);
        let denied = self.denied.load(Relaxed);
        stats.allowed += allowed;
        stats.denied += denied;
        stats.checks += allowed + denied;
        stats.keys_tracked += self.tracked.load(Relaxed);
        stats.evictions += self.evictions.load(Relaxed);
        stats.overflows += self.overflows.load(Relaxed);
    }
}

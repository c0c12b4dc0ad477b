//! The clock of a shared region: one conversion from the machine's counter
//! to UNIX nanoseconds, measured once by the process that creates the
//! region and stored in it, so that every process attached computes the
//! same time from the same counter value.
//!
//! The counter is `quanta`'s raw counter: the CPU's time-stamp counter where
//! it is invariant, the OS monotonic clock otherwise; either way one counter
//! for the whole machine. Two processes reading it at the same instant on
//! different cores differ only by the cores' counter skew (none on a
//! machine with a synchronised invariant TSC; at most a few hundred ns
//! otherwise), which is the same skew two threads of one process see.
//! Against the wall clock the shared time drifts by the calibration's error
//! (a 20 ms measurement against `CLOCK_MONOTONIC`: a few parts per million,
//! under 0.5 s a day), as the in-process TSC clock does; every process
//! drifts identically, so they never disagree because of it.

#[cfg(target_os = "linux")]
use std::time::{Duration, Instant};

/// The conversion stored in a region: `unix_ns = base_unix_ns +
/// ((raw - base_raw) * mult) >> SHIFT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Calibration {
    pub base_raw: u64,
    pub base_unix_ns: u64,
    pub mult: u64,
}

/// Fixed-point fraction bits of `mult`.
const SHIFT: u32 = 32;

#[cfg(target_os = "linux")]
impl Calibration {
    /// Measures the counter's rate against the monotonic clock over 20 ms
    /// and places it on the UNIX timeline now.
    pub(crate) fn measure(clock: &quanta::Clock) -> Calibration {
        let (r0, m0) = (clock.raw(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (r1, m1) = (clock.raw(), Instant::now());
        let ticks = r1.wrapping_sub(r0).max(1);
        let ns = u64::try_from((m1 - m0).as_nanos()).unwrap_or(u64::MAX);
        let mult = u64::try_from((u128::from(ns) << SHIFT) / u128::from(ticks)).unwrap_or(u64::MAX);
        let (base_raw, base_unix_ns) = super::base::unix_base(|| clock.raw());
        Calibration {
            base_raw,
            base_unix_ns,
            mult,
        }
    }
}

/// A region's clock in one process.
#[derive(Clone, Debug)]
pub(crate) struct SharedClock {
    clock: quanta::Clock,
    cal: Calibration,
}

impl SharedClock {
    pub(crate) fn new(clock: quanta::Clock, cal: Calibration) -> SharedClock {
        SharedClock { clock, cal }
    }

    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        // A counter read behind the base (another core's counter a little
        // behind the creator's) counts as the base: time never precedes
        // the region.
        let ticks = self.clock.raw().saturating_sub(self.cal.base_raw);
        let ns = (u128::from(ticks) * u128::from(self.cal.mult)) >> SHIFT;
        self.cal
            .base_unix_ns
            .saturating_add(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

//! Where a limiter's time comes from: UNIX nanoseconds ([SPEC §1](crate::spec#1-time)).
//!
//! - [`Clock::tsc`], the default: the CPU's time-stamp counter read through
//!   `quanta` (one `rdtsc` and a multiply-shift), placed on the UNIX timeline
//!   by one calibration against the system wall clock when the clock is
//!   made. It never goes back afterwards, whatever the wall clock does
//!   (NTP steps, leap smearing). Where the CPU has no invariant TSC, quanta
//!   falls back to the OS monotonic clock, with the same UNIX calibration.
//! - [`Clock::coarse`], opt-in: a time cached in one atomic word and
//!   refreshed every [`COARSE_INTERVAL`] by a background thread shared by
//!   every coarse clock in the process. Reading it costs one load; it lags
//!   real time by up to the interval plus the refresher's scheduling delay.
//!   A child made by `fork()` has no refresher (threads are not inherited):
//!   its first coarse read starts one, so coarse clocks keep time there.
//! - [`Clock::manual`]: a time set by hand, for tests and simulations.
//!
//! Every limiter call also has an `_at` form taking the time from the
//! caller, which bypasses the clock entirely.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often the coarse clock's shared time is refreshed.
pub const COARSE_INTERVAL: Duration = Duration::from_millis(1);

/// A source of UNIX nanoseconds. Cheap to clone; clones share their time.
#[derive(Clone, Debug)]
pub struct Clock(Source);

#[derive(Clone, Debug)]
enum Source {
    Tsc(TscClock),
    Coarse(&'static AtomicU64),
    Manual(ManualClock),
    /// A shared region's clock (`crate::shared::clock`).
    #[cfg(not(ratecell_loom))]
    Shared(crate::shared::clock::SharedClock),
}

impl Clock {
    /// The time-stamp counter, calibrated to UNIX time now.
    pub fn tsc() -> Clock {
        Clock(Source::Tsc(TscClock::new()))
    }

    /// The coarse clock: one atomic load per read, refreshed every
    /// [`COARSE_INTERVAL`] by a background thread started on first use.
    pub fn coarse() -> Clock {
        Clock(Source::Coarse(coarse_time()))
    }

    /// A clock that stands at `start_ns` until the returned handle moves it.
    pub fn manual(start_ns: u64) -> (Clock, ManualClock) {
        let handle = ManualClock(Arc::new(AtomicU64::new(start_ns)));
        (Clock(Source::Manual(handle.clone())), handle)
    }

    /// The clock stored in a shared region.
    #[cfg(not(ratecell_loom))]
    pub(crate) fn shared(clock: crate::shared::clock::SharedClock) -> Clock {
        Clock(Source::Shared(clock))
    }

    /// The current time in UNIX nanoseconds.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match &self.0 {
            Source::Tsc(tsc) => tsc.now_ns(),
            Source::Coarse(time) => match time.load(Ordering::Relaxed) {
                STALE => coarse_restart(time),
                now => now,
            },
            Source::Manual(manual) => manual.now_ns(),
            #[cfg(not(ratecell_loom))]
            Source::Shared(shared) => shared.now_ns(),
        }
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::tsc()
    }
}

/// When a check happens: a time the caller gave (UNIX ns), or a clock to
/// read. The keyed tables take either, and read a clock only once the
/// key's bucket is on its way from memory (`table::word::WordTable::check`).
pub(crate) trait At: Copy {
    fn ns(self) -> u64;
}

impl At for u64 {
    #[inline]
    fn ns(self) -> u64 {
        self
    }
}

impl At for &Clock {
    #[inline]
    fn ns(self) -> u64 {
        self.now_ns()
    }
}

/// The TSC (through quanta) offset onto the UNIX timeline.
#[derive(Clone, Debug)]
struct TscClock {
    clock: quanta::Clock,
    base_raw: u64,
    base_unix_ns: u64,
}

impl TscClock {
    fn new() -> TscClock {
        let clock = quanta::Clock::new();
        // Read the counter on both sides of the wall clock and take the
        // middle, so the offset is off by at most half of one read.
        let before = clock.raw();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let after = clock.raw();
        let base_raw = before + (after.wrapping_sub(before)) / 2;
        TscClock {
            clock,
            base_raw,
            base_unix_ns: wall,
        }
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        // delta_as_nanos returns 0 for a read before the base (another
        // core's TSC a few cycles behind), so time never precedes creation.
        self.base_unix_ns
            .saturating_add(self.clock.delta_as_nanos(self.base_raw, self.clock.raw()))
    }
}

/// The process-wide coarse time, once a coarse clock has been made.
static COARSE_TIME: OnceLock<&'static AtomicU64> = OnceLock::new();

/// The process-wide coarse time, and its refresher thread.
fn coarse_time() -> &'static AtomicU64 {
    COARSE_TIME.get_or_init(|| {
        let tsc = TscClock::new();
        let time: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(tsc.now_ns())));
        refresh_after_fork();
        spawn_refresher(tsc, time).expect("ratecell: cannot start the coarse clock thread");
        time
    })
}

/// Starts the thread that stores the TSC time into `time` every
/// [`COARSE_INTERVAL`].
fn spawn_refresher(tsc: TscClock, time: &'static AtomicU64) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("ratecell-coarse-clock".into())
        .spawn(move || {
            loop {
                std::thread::sleep(COARSE_INTERVAL);
                time.store(tsc.now_ns(), Ordering::Relaxed);
            }
        })
        .map(drop)
}

// Fork. A child process has only the thread that called fork(): the
// refresher is gone, and the coarse time would stand still, so every coarse
// limiter in the child (old or new: they share the word) would deny forever
// after its burst. An atfork handler marks the time STALE in the child (one
// atomic store: all a handler may safely do there), and the first read in
// the child starts a new refresher, outside the handler.

/// The coarse time of a forked child that has no refresher yet. No real
/// reading is 0 (it would be 1970).
const STALE: u64 = 0;

/// Set while a reader starts the child's refresher.
static RESTARTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Registers [`coarse_forked`] to run in every child forked from now on.
fn refresh_after_fork() {
    #[cfg(unix)]
    // SAFETY: registers a handler with the C library; the handler only
    // stores to atomics, which is async-signal-safe.
    unsafe {
        libc::pthread_atfork(None, None, Some(coarse_forked));
    }
}

/// Runs in a forked child, right after `fork()`.
#[cfg(unix)]
extern "C" fn coarse_forked() {
    RESTARTING.store(false, Ordering::Relaxed);
    if let Some(time) = COARSE_TIME.get() {
        time.store(STALE, Ordering::Relaxed);
    }
}

/// A coarse read that found the time STALE: starts the refresher of this
/// (forked) process once, and answers from the TSC meanwhile.
#[cold]
#[inline(never)]
fn coarse_restart(time: &'static AtomicU64) -> u64 {
    let tsc = TscClock::new();
    let now = tsc.now_ns().max(STALE + 1);
    if RESTARTING
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return now;
    }
    time.store(now, Ordering::Relaxed);
    if spawn_refresher(tsc, time).is_err() {
        // No thread to be had: keep answering from the TSC, and try again
        // on the next read.
        time.store(STALE, Ordering::Relaxed);
        RESTARTING.store(false, Ordering::Release);
    }
    now
}

/// The handle of a manual clock: every clone moves the same time.
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// The time the clock stands at.
    pub fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Moves the clock to `ns` (backwards too: limiters must cope).
    pub fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::Release);
    }

    /// Moves the clock forward by `ns`, saturating.
    pub fn advance(&self, ns: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(ns))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_clock_is_unix_time_and_monotonic() {
        let clock = Clock::tsc();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let a = clock.now_ns();
        // Within a second of the wall clock (the calibration is far better;
        // this only guards against a wrong epoch or unit).
        assert!(a.abs_diff(wall) < 1_000_000_000, "tsc {a} wall {wall}");
        let mut last = a;
        for _ in 0..100_000 {
            let now = clock.now_ns();
            assert!(now >= last);
            last = now;
        }
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let (clock, hand) = Clock::manual(5);
        assert_eq!(clock.now_ns(), 5);
        hand.advance(10);
        assert_eq!(clock.now_ns(), 15);
        hand.set(3);
        assert_eq!(clock.now_ns(), 3);
    }

    #[test]
    fn coarse_clock_follows_the_tsc_within_its_refreshers_period() {
        // Watch the coarse time change: each value is the TSC time the
        // refresher stored, so consecutive values are its period as it ran,
        // and how old a value is when first seen is the lag it adds beyond
        // waiting for the next store. Both are measured on this machine, so
        // neither bound is a guess about how loaded it is.
        let coarse = Clock::coarse();
        let tsc = Clock::tsc();
        let mut values = vec![coarse.now_ns()];
        let mut first_seen_lag = Vec::new();
        let started = std::time::Instant::now();
        while values.len() < 41 && started.elapsed() < Duration::from_secs(10) {
            let c = coarse.now_ns();
            let r = tsc.now_ns();
            let last = *values.last().unwrap();
            assert!(c >= last, "the coarse time went back: {last} then {c}");
            if c != last {
                values.push(c);
                first_seen_lag.push(r.saturating_sub(c));
            }
            std::hint::spin_loop();
        }
        assert!(
            values.len() == 41,
            "the refresher stored only {} new times in 10 s",
            values.len() - 1
        );
        let mut periods: Vec<u64> = values.windows(2).map(|w| w[1] - w[0]).collect();
        periods.sort_unstable();
        first_seen_lag.sort_unstable();
        let (period, lag) = (
            periods[periods.len() / 2],
            first_seen_lag[first_seen_lag.len() / 2],
        );
        // A refresher that sleeps its interval and stores the time it read
        // then: a new value is microseconds old when first seen
        // (the median, so one descheduled read on a busy machine does not
        // count), far below its own period. Storing a time read before the
        // sleep would make the lag a whole period.
        assert!(
            lag < period / 2,
            "a new coarse time is {lag} ns old when first seen; the refresher's median period is {period} ns"
        );
        // The period is the interval plus the sleep's overshoot: never
        // shorter than the interval.
        assert!(
            period >= COARSE_INTERVAL.as_nanos() as u64,
            "median period {period} ns"
        );
    }
}

//! Where a limiter's time comes from: UNIX nanoseconds ([SPEC §1](crate::spec#1-time)).
//!
//! - [`Clock::tsc`], the default: the CPU's time-stamp counter, placed on
//!   the UNIX timeline by one calibration against the system wall clock
//!   when the clock is made. It never goes back afterwards, whatever the
//!   wall clock does (NTP steps, leap smearing). `quanta` decides whether
//!   the counter can be used and measures its rate: where it reads the TSC
//!   (x86-64 with an invariant TSC), ratecell reads the counter itself,
//!   inline, and converts it with quanta's own rate as one multiply
//!   (`TscClock`, exactly quanta's result); anywhere else (no invariant
//!   TSC, where quanta falls back to the OS monotonic clock, or another
//!   architecture) every read goes through quanta (`QuantaClock`), with
//!   the same UNIX calibration.
//! - [`Clock::coarse`], opt-in: a time cached in one atomic word and
//!   refreshed every [`COARSE_INTERVAL`] by a background thread shared by
//!   every coarse clock in the process. Reading it costs one load; it lags
//!   real time by up to the interval plus the refresher's scheduling delay.
//!   A child made by `fork()` has no refresher (threads are not inherited):
//!   its first coarse read starts one, so coarse clocks keep time there.
//! - [`Clock::manual`]: a time set by hand, for tests and simulations.
//!
//! A request that carries its own time (`Request::at`) takes it from the
//! caller and bypasses the clock entirely.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

mod base;
pub(crate) mod shared;

use base::unix_base;

/// How often the coarse clock's shared time is refreshed.
pub const COARSE_INTERVAL: Duration = Duration::from_millis(1);

/// A source of UNIX nanoseconds. Cheap to clone; clones share their time.
#[derive(Clone, Debug)]
pub struct Clock(Source);

/// `repr(u8)`: a tag of its own, so telling the TSC from the others is
/// one compare (with quanta's clock's niche as the tag, it was four
/// instructions more).
#[derive(Clone, Debug)]
#[repr(u8)]
enum Source {
    /// The TSC, read inline.
    Tsc(TscClock),
    /// quanta's counter, where the TSC cannot be read inline.
    Quanta(QuantaClock),
    Coarse(&'static CoarseTime),
    Manual(ManualClock),
    /// A shared region's clock (`shared`).
    Shared(shared::SharedClock),
}

impl Clock {
    /// The time-stamp counter, calibrated to UNIX time now.
    pub fn tsc() -> Clock {
        let clock = quanta::Clock::new();
        match tsc_rate(&clock) {
            Some(ns_per_tick) => Clock(Source::Tsc(TscClock::new(ns_per_tick))),
            None => Clock(Source::Quanta(QuantaClock::new(clock))),
        }
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
    pub(crate) fn shared(clock: shared::SharedClock) -> Clock {
        Clock(Source::Shared(clock))
    }

    /// The current time in UNIX nanoseconds.
    ///
    /// The TSC, coarse and shared clocks are read inline; quanta's and
    /// the manual clock out of line (their reads are calls anyway, or
    /// their speed does not matter). With three cases and a default this
    /// is a compare of the tag per case; a `match` of every source was a
    /// jump table, eight instructions on the path of every check.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        match &self.0 {
            Source::Tsc(tsc) => tsc.now_ns(),
            Source::Coarse(coarse) => match coarse.time.load(Ordering::Relaxed) {
                STALE => coarse_restart(coarse),
                now => now,
            },
            Source::Shared(shared) => shared.now_ns(),
            _ => self.now_ns_of_rarer_source(),
        }
    }

    #[inline(never)]
    fn now_ns_of_rarer_source(&self) -> u64 {
        match &self.0 {
            Source::Quanta(quanta) => quanta.now_ns(),
            Source::Manual(manual) => manual.now_ns(),
            _ => self.now_ns(),
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

/// A request's own time, or the clock's when it gives none: read as late
/// as `&Clock` is, and one copy of a check serves both.
impl At for (Option<u64>, &Clock) {
    #[inline]
    fn ns(self) -> u64 {
        match self.0 {
            Some(t) => t,
            None => self.1.now_ns(),
        }
    }
}

/// The TSC, read inline, converted at quanta's rate and offset onto the
/// UNIX timeline.
///
/// Read inline rather than through quanta, whose read is a call
/// (`quanta::Clock::raw` matches on its clock's kind), a second match and
/// a 128-bit shift by a variable count: a check issues its instructions
/// beside the counter's read, and only so many fit there for free.
#[derive(Clone, Copy, Debug)]
struct TscClock {
    base_tsc: u64,
    base_unix_ns: u64,
    /// Nanoseconds per tick as a fraction of 2^64: below one (a counter
    /// slower than 1 GHz is read through quanta, [`tsc_rate`]).
    ns_per_tick: u64,
}

impl TscClock {
    fn new(ns_per_tick: u64) -> TscClock {
        let (base_tsc, base_unix_ns) = unix_base(read_tsc);
        TscClock {
            base_tsc,
            base_unix_ns,
            ns_per_tick,
        }
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        // A read before the base (another core's TSC a few cycles behind)
        // counts as the base, so time never precedes creation.
        let ticks = read_tsc().saturating_sub(self.base_tsc);
        self.base_unix_ns
            .saturating_add(scale(ticks, self.ns_per_tick))
    }
}

/// `ticks` in nanoseconds, at `ns_per_tick` (a fraction of 2^64): the high
/// word of one 64 × 64-bit multiply.
#[inline]
fn scale(ticks: u64, ns_per_tick: u64) -> u64 {
    ((u128::from(ticks) * u128::from(ns_per_tick)) >> 64) as u64
}

/// The time-stamp counter.
#[cfg(target_arch = "x86_64")]
#[inline]
fn read_tsc() -> u64 {
    // SAFETY: `rdtsc` is part of every x86-64 processor and touches no
    // memory. (An OS can make it fault for a process, PR_SET_TSC; quanta
    // executes the same instruction, so that was never a case ratecell
    // survived.)
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// No inline counter elsewhere: [`Clock::tsc`] makes a [`QuantaClock`].
#[cfg(not(target_arch = "x86_64"))]
fn read_tsc() -> u64 {
    unreachable!("the TSC is read inline only on x86-64")
}

/// Nanoseconds per TSC tick as a fraction of 2^64, when `clock` (quanta's)
/// reads the TSC and this fraction converts every tick count exactly as
/// `clock.delta_as_nanos` does; `None` otherwise, and then every read goes
/// through quanta. Measured once per process (quanta calibrates once per
/// process too).
///
/// quanta reads the TSC only where it is invariant (and `rdtscp` exists);
/// elsewhere its raw counter is the OS monotonic clock in ns. Which one it
/// chose shows directly: its raw value lies between two TSC reads, or not.
/// Its conversion is `delta × factor >> shift` with `shift < 64`, so
/// `delta_as_nanos(0, 2^63)` is `factor << (63 - shift)` exactly, and
/// twice that (when it fits: a counter faster than 1 GHz) is
/// `factor << (64 - shift)`, whose multiply's high word is quanta's
/// result for every delta. The probes check this rather than trust it: a
/// monotonic clock (a rate of exactly 1) or any other conversion fails
/// them.
#[cfg(target_arch = "x86_64")]
fn tsc_rate(clock: &quanta::Clock) -> Option<u64> {
    static RATE: OnceLock<Option<u64>> = OnceLock::new();
    *RATE.get_or_init(|| {
        // Four tries: a thread moved between cores mid-read may see their
        // counters a few cycles apart.
        let reads_tsc = (0..4).any(|_| {
            let before = read_tsc();
            let raw = clock.raw();
            before <= raw && raw <= read_tsc()
        });
        if !reads_tsc {
            return None;
        }
        let ns_per_tick = clock.delta_as_nanos(0, 1 << 63).checked_mul(2)?;
        tsc_probes()
            .all(|ticks| scale(ticks, ns_per_tick) == clock.delta_as_nanos(0, ticks))
            .then_some(ns_per_tick)
    })
}

/// The TSC is read inline on x86-64 only.
#[cfg(not(target_arch = "x86_64"))]
fn tsc_rate(_: &quanta::Clock) -> Option<u64> {
    None
}

/// Tick counts on which [`tsc_rate`] compares its conversion with quanta's:
/// the ends, every power of two and its neighbours, and a pseudo-random
/// spread.
#[cfg(target_arch = "x86_64")]
fn tsc_probes() -> impl Iterator<Item = u64> {
    let powers = (0..64).flat_map(|b| {
        let p = 1u64 << b;
        [p - 1, p, p + 1]
    });
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let spread = std::iter::repeat_with(move || xorshift64(&mut x));
    [0, 1, 1_000, 999_999_937, u64::MAX - 1, u64::MAX]
        .into_iter()
        .chain(powers)
        .chain(spread.take(256))
}

/// The next value of a xorshift64 sequence (tick counts spread over every
/// magnitude, for the conversion's probes and its test).
#[cfg(target_arch = "x86_64")]
fn xorshift64(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// quanta's counter offset onto the UNIX timeline: the clock where the TSC
/// is not read inline.
#[derive(Clone, Debug)]
struct QuantaClock {
    clock: quanta::Clock,
    base_raw: u64,
    base_unix_ns: u64,
}

impl QuantaClock {
    fn new(clock: quanta::Clock) -> QuantaClock {
        let (base_raw, base_unix_ns) = unix_base(|| clock.raw());
        QuantaClock {
            clock,
            base_raw,
            base_unix_ns,
        }
    }

    #[inline]
    fn now_ns(&self) -> u64 {
        // delta_as_nanos returns 0 for a read before the base (another
        // core's counter a few cycles behind), so time never precedes
        // creation.
        self.base_unix_ns
            .saturating_add(self.clock.delta_as_nanos(self.base_raw, self.clock.raw()))
    }
}

/// The process-wide coarse time and the clock its refresher reads.
#[derive(Debug)]
struct CoarseTime {
    time: AtomicU64,
    tsc: Clock,
}

/// The process-wide coarse time, once a coarse clock has been made.
static COARSE_TIME: OnceLock<&'static CoarseTime> = OnceLock::new();

/// The process-wide coarse time, and its refresher thread.
fn coarse_time() -> &'static CoarseTime {
    COARSE_TIME.get_or_init(|| {
        let tsc = Clock::tsc();
        let coarse: &'static CoarseTime = Box::leak(Box::new(CoarseTime {
            time: AtomicU64::new(tsc.now_ns()),
            tsc,
        }));
        refresh_after_fork();
        spawn_refresher(coarse).expect("ratecell: cannot start the coarse clock thread");
        coarse
    })
}

/// Starts the thread that stores the TSC time into the coarse time every
/// [`COARSE_INTERVAL`].
fn spawn_refresher(coarse: &'static CoarseTime) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("ratecell-coarse-clock".into())
        .spawn(move || {
            loop {
                std::thread::sleep(COARSE_INTERVAL);
                coarse.time.store(coarse.tsc.now_ns(), Ordering::Relaxed);
            }
        })
        .map(drop)
}

// Fork. A child process has only the thread that called fork(): the
// refresher is gone, and the coarse time would stand still, so every coarse
// limiter in the child (old or new: they share the word) would deny forever
// after its burst. An atfork handler marks the time STALE in the child (one
// atomic store: all a handler may safely do there), and the first read in
// the child starts a new refresher, outside the handler. The time stays
// STALE until that refresher's first store, and every read meanwhile
// answers from the refresher's own TSC clock: a thread that was spawned but
// has not run yet (a loaded machine, a sanitizer's runtime busy in the
// child) cannot stop the child's time.

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
    if let Some(coarse) = COARSE_TIME.get() {
        coarse.time.store(STALE, Ordering::Relaxed);
    }
}

/// A coarse read that found the time STALE: starts the refresher of this
/// (forked) process once, and answers from the refresher's TSC clock until
/// it has stored.
#[cold]
#[inline(never)]
fn coarse_restart(coarse: &'static CoarseTime) -> u64 {
    if RESTARTING
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
        && spawn_refresher(coarse).is_err()
    {
        // No thread to be had: try again on the next read.
        RESTARTING.store(false, Ordering::Release);
    }
    coarse.tsc.now_ns().max(STALE + 1)
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
    use std::time::{SystemTime, UNIX_EPOCH};

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

    /// The clock where the TSC is not read inline keeps the same time.
    #[test]
    fn quanta_clock_is_unix_time_and_monotonic() {
        let clock = Clock(Source::Quanta(QuantaClock::new(quanta::Clock::new())));
        let inline = Clock::tsc();
        let a = clock.now_ns();
        assert!(a.abs_diff(inline.now_ns()) < 1_000_000_000, "{a}");
        let mut last = a;
        for _ in 0..100_000 {
            let now = clock.now_ns();
            assert!(now >= last);
            last = now;
        }
    }

    /// Where quanta reads the TSC (its own test: an invariant TSC and
    /// `rdtscp`, from `cpuid`), ratecell reads it inline, and converts
    /// every tick count as quanta does.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn tsc_is_read_inline_wherever_quanta_reads_it_and_converted_alike() {
        use core::arch::x86_64::__cpuid;
        // Leaves beyond the highest extended one reported are not asked.
        let max = __cpuid(0x8000_0000).eax;
        let invariant = max >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0;
        let rdtscp = max >= 0x8000_0001 && __cpuid(0x8000_0001).edx & (1 << 27) != 0;
        let quanta = quanta::Clock::new();
        let rate = tsc_rate(&quanta);
        if !(invariant && rdtscp) {
            assert!(matches!(Clock::tsc().0, Source::Quanta(_)));
            return;
        }
        assert!(matches!(Clock::tsc().0, Source::Tsc(_)));
        let rate = rate.expect("quanta reads the TSC here");
        let mut x = 88_172_645_463_325_252_u64;
        for shift in 0..64 {
            for _ in 0..1_000 {
                let ticks = xorshift64(&mut x) >> shift;
                assert_eq!(
                    scale(ticks, rate),
                    quanta.delta_as_nanos(0, ticks),
                    "{ticks}"
                );
            }
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
    fn a_forked_childs_coarse_time_moves_before_its_new_refresher_stores() {
        // A child's coarse time, as its atfork handler leaves it: STALE.
        let coarse: &'static CoarseTime = Box::leak(Box::new(CoarseTime {
            time: AtomicU64::new(STALE),
            tsc: Clock::tsc(),
        }));
        let clock = Clock(Source::Coarse(coarse));
        // The first read starts a refresher and leaves the time for it to
        // store (STALE until then, or a time the refresher read itself),
        // never its own answer: a refresher slow to run would pin the time
        // to it.
        let first = clock.now_ns();
        let stored = coarse.time.load(Ordering::Relaxed);
        assert_ne!(
            stored, first,
            "the read that started the refresher stored the time it answered"
        );
        // From the refresher's TSC clock or its stores, the time moves.
        std::thread::sleep(Duration::from_millis(20));
        let later = clock.now_ns();
        assert!(later > first, "{first} then {later}");
    }

    #[test]
    fn coarse_clock_follows_the_tsc_within_its_refreshers_period() {
        // Watch the coarse time change: each value is the TSC time the
        // refresher stored, so consecutive values are its period as it ran,
        // and how old a value is when first seen is the lag it adds beyond
        // waiting for the next store. The lag is read on the refresher's
        // own TSC clock, so no second calibration's offset enters it.
        let coarse = Clock::coarse();
        let tsc = &coarse_time().tsc;
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
        // A refresher that sleeps its interval and stores the time it read
        // then: a new value is microseconds old when first seen. Storing a
        // time read before the sleep would make every lag at least the
        // interval. The least lag is the one to compare: a busy machine
        // that descheduled this loop only adds to some.
        let least_lag = *first_seen_lag.iter().min().unwrap();
        let interval = COARSE_INTERVAL.as_nanos() as u64;
        assert!(
            least_lag < interval / 2,
            "every new coarse time was at least {least_lag} ns old when first seen"
        );
        // The period is the interval plus the sleep's overshoot: never
        // shorter than the interval.
        let least_period = values.windows(2).map(|w| w[1] - w[0]).min().unwrap();
        assert!(least_period >= interval, "a period of {least_period} ns");
    }
}

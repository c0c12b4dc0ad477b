//! The direct limiter: one shared state for every caller (a "global" limit),
//! in one cell, with its clock.
//!
//! [`Limiter`] picks the cell that fits the algorithm at construction and
//! dispatches on it with one `match`; a check is one clock read, the
//! algorithm's integer arithmetic and one CAS (or one latch for the two
//! multi-word algorithms).

use crate::acquire::{AcquireError, acquire};
use crate::algorithm::{
    BlockAlgorithm, all_of::AllOf, bucketed_window::BucketedWindow, fixed_window::FixedWindow,
    gcra::Gcra, sliding_log::SlidingLog, sliding_window::SlidingWindow, token_bucket::TokenBucket,
};
use crate::cell::{BlockCell, WordCell};
use crate::clock::Clock;
use crate::config::{Algorithm, Config, ConfigError, Error, Field, Params};
use crate::decision::Decision;
use crate::multi::{Limits, MAX_LIMITS, MultiDecision};
use crate::stats::{CheckCounters, Stats};
use crate::sync::{AtomicU64, AtomicU128};
use std::fmt;
use std::time::Duration;

/// A rate limiter with one shared state. Thread-safe: share it by reference
/// or in an `Arc`; every method takes `&self`.
///
/// ```
/// use ratecell::{Algorithm, Config, Limiter};
///
/// // 10 requests per second, at most 10 at once.
/// let limiter = Limiter::new(Config::new(Algorithm::Gcra, 10, 1_000_000_000)).unwrap();
/// let t = 1_700_000_000_000_000_000; // explicit UNIX ns: deterministic
/// for _ in 0..10 {
///     assert!(limiter.check_at(1, t).allowed);
/// }
/// let denied = limiter.check_at(1, t);
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after_ns, 100_000_000); // one emission interval
/// ```
pub struct Limiter {
    engine: Engine,
    config: Config,
    limits: Limits,
    clock: Clock,
    // Striped by thread, each stripe padded apart from the cell: a counter
    // bump must not invalidate the line the next CAS needs.
    counters: CheckCounters,
    bytes: usize,
}

/// The cell that fits each algorithm's state.
pub(crate) enum Engine {
    Gcra(Gcra, WordCell<AtomicU64>),
    TokenBucket(TokenBucket, WordCell<AtomicU128>),
    FixedWindow(FixedWindow, WordCell<AtomicU128>),
    SlidingWindow(SlidingWindow, WordCell<AtomicU128>),
    BucketedWindow(BucketedWindow, BlockCell),
    SlidingLog(SlidingLog, BlockCell),
    /// Several limits as one (`crate::multi`), their states in one word...
    AllOfWord(AllOf, WordCell<AtomicU128>),
    /// ...or in one block under its latch.
    AllOfBlock(AllOf, BlockCell),
}

impl Engine {
    fn new(p: &Params) -> Result<Engine, Error> {
        fn block<A: BlockAlgorithm>(alg: A) -> Result<BlockCell, Error> {
            BlockCell::new(alg.words()).map_err(|bytes| Error::OutOfMemory { bytes })
        }
        Ok(match p.algorithm {
            Algorithm::Gcra => Engine::Gcra(Gcra::new(p, false), WordCell::<AtomicU64>::new()),
            Algorithm::LeakyBucket => {
                Engine::Gcra(Gcra::new(p, true), WordCell::<AtomicU64>::new())
            }
            Algorithm::TokenBucket => {
                Engine::TokenBucket(TokenBucket::new(p), WordCell::<AtomicU128>::new())
            }
            Algorithm::FixedWindow => {
                Engine::FixedWindow(FixedWindow::new(p), WordCell::<AtomicU128>::new())
            }
            Algorithm::SlidingWindow => {
                Engine::SlidingWindow(SlidingWindow::new(p), WordCell::<AtomicU128>::new())
            }
            Algorithm::BucketedWindow => {
                let alg = BucketedWindow::new(p);
                Engine::BucketedWindow(alg, block(alg)?)
            }
            Algorithm::SlidingLog => {
                let alg = SlidingLog::new(p);
                Engine::SlidingLog(alg, block(alg)?)
            }
        })
    }

    /// Bytes allocated beyond the `Limiter` itself (which holds word cells).
    fn heap_bytes(&self) -> usize {
        match self {
            Engine::BucketedWindow(_, cell)
            | Engine::SlidingLog(_, cell)
            | Engine::AllOfBlock(_, cell) => cell.heap_bytes(),
            _ => 0,
        }
    }

    /// Decides; an admission whose queue wait exceeds `max_wait` is not
    /// taken (nothing stored) and comes back with `.1 == false`.
    #[inline]
    fn decide(&self, t: u64, n: u64, max_wait: u64) -> (Decision, bool) {
        let accept = |d: &Decision| d.wait_ns <= max_wait;
        match self {
            Engine::Gcra(a, cell) => cell.decide(a, t, n, accept),
            Engine::TokenBucket(a, cell) => cell.decide(a, t, n, accept),
            Engine::FixedWindow(a, cell) => cell.decide(a, t, n, accept),
            Engine::SlidingWindow(a, cell) => cell.decide(a, t, n, accept),
            Engine::BucketedWindow(a, cell) => (cell.decide(a, t, n), true),
            Engine::SlidingLog(a, cell) => (cell.decide(a, t, n), true),
            Engine::AllOfWord(a, cell) => cell.decide(a, t, n, accept),
            // A block cannot refuse a queue place (see `acquire`'s docs).
            Engine::AllOfBlock(a, cell) => (cell.decide(a, t, n), true),
        }
    }

    /// The decision with every limit's own, and the number of limits.
    #[inline]
    fn decide_each(&self, t: u64, n: u64) -> MultiDecision {
        let mut each = [Decision::default(); MAX_LIMITS];
        let any = |_: &Decision| true;
        let (d, len) = match self {
            Engine::AllOfWord(a, cell) => (cell.decide_each(a, t, n, any, &mut each).0, a.len()),
            Engine::AllOfBlock(a, cell) => (cell.decide_each(a, t, n, &mut each), a.len()),
            _ => return MultiDecision::of_one(self.decide(t, n, u64::MAX).0),
        };
        MultiDecision::of_many(d, each, len)
    }

    /// Whether a request is admitted (and stored, as [`Engine::decide`]
    /// would), without the rest of the decision: each arm is inlined into
    /// the caller, so the arithmetic only the `Decision` needs (GCRA's
    /// division for `remaining`, the retry and reset times) is dropped.
    #[inline]
    fn admits(&self, t: u64, n: u64) -> bool {
        let any = |_: &Decision| true;
        match self {
            Engine::Gcra(a, cell) => cell.decide(a, t, n, any).0.allowed,
            Engine::TokenBucket(a, cell) => cell.decide(a, t, n, any).0.allowed,
            Engine::FixedWindow(a, cell) => cell.decide(a, t, n, any).0.allowed,
            Engine::SlidingWindow(a, cell) => cell.decide(a, t, n, any).0.allowed,
            Engine::BucketedWindow(a, cell) => cell.decide(a, t, n).allowed,
            Engine::SlidingLog(a, cell) => cell.decide(a, t, n).allowed,
            Engine::AllOfWord(a, cell) => cell.decide(a, t, n, any).0.allowed,
            Engine::AllOfBlock(a, cell) => cell.decide(a, t, n).allowed,
        }
    }

    #[allow(
        clippy::match_same_arms,
        reason = "GCRA's cell is another type than the other word algorithms'"
    )]
    fn reset(&self) {
        match self {
            Engine::Gcra(_, cell) => cell.reset(),
            Engine::TokenBucket(_, cell)
            | Engine::FixedWindow(_, cell)
            | Engine::SlidingWindow(_, cell) => cell.reset(),
            Engine::BucketedWindow(a, cell) => cell.reset(a),
            Engine::SlidingLog(a, cell) => cell.reset(a),
            Engine::AllOfWord(_, cell) => cell.reset(),
            Engine::AllOfBlock(a, cell) => cell.reset(a),
        }
    }
}

impl Limiter {
    /// A limiter on the TSC clock. `config.capacity` must be 0 (a keyed
    /// limiter is a [`crate::KeyedLimiter`]).
    pub fn new(config: Config) -> Result<Limiter, Error> {
        Limiter::with_clock(config, Clock::tsc())
    }

    /// A limiter reading `clock` (a manual clock for simulations, or the
    /// coarse clock).
    pub fn with_clock(config: Config, clock: Clock) -> Result<Limiter, Error> {
        let params = config.params()?;
        if config.capacity != 0 {
            return Err(ConfigError {
                field: Field::Capacity,
                message: format!(
                    "a direct Limiter has one shared state, so it takes 0, not {}; use KeyedLimiter for per-key limits",
                    config.capacity
                ),
            }
            .into());
        }
        let engine = Engine::new(&params)?;
        Ok(Limiter::assemble(engine, Limits::one(config), clock))
    }

    fn assemble(engine: Engine, limits: Limits, clock: Clock) -> Limiter {
        let bytes = size_of::<Limiter>() + engine.heap_bytes();
        Limiter {
            engine,
            config: limits.configs[0],
            limits,
            clock,
            counters: CheckCounters::default(),
            bytes,
        }
    }

    /// A limiter enforcing every one of `configs` (1 to
    /// [`MAX_LIMITS`], any algorithms) as one, on the TSC clock: a request
    /// is admitted only when every limit admits it, and only then is
    /// anything stored. Every check returns the combined decision (see
    /// [`MultiDecision`]); [`Limiter::check_each_at`] also returns each
    /// limit's.
    ///
    /// All of the limits' states live in one cell: one 128-bit CAS when
    /// they fit 128 bits (any two of GCRA, leaky bucket, token bucket,
    /// fixed window, sliding window with ordinary limits), one latch
    /// otherwise.
    ///
    /// Every config has capacity 0 (a keyed form is
    /// [`crate::KeyedLimiter::new_multi`]). Errors name the field:
    /// [`Field::Limits`] for none or more than [`MAX_LIMITS`], any field
    /// of any limit (the message says which), [`Field::Capacity`] or
    /// [`Field::Overflow`] when they differ between limits.
    ///
    /// ```
    /// use ratecell::{Algorithm, Config, Limiter};
    ///
    /// const S: u64 = 1_000_000_000;
    /// let limiter = Limiter::new_multi(&[
    ///     Config::new(Algorithm::Gcra, 10, S),                 // 10 per second
    ///     Config::new(Algorithm::FixedWindow, 1000, 86_400 * S), // and 1000 per day
    /// ])
    /// .unwrap();
    /// let t = 1_700_000_000_000_000_000;
    /// let d = limiter.check_each_at(1, t);
    /// assert!(d.decision.allowed);
    /// assert_eq!(d.decision.remaining, 9, "the tighter of 9 and 999");
    /// assert_eq!(d.limits()[1].remaining, 999);
    /// ```
    pub fn new_multi(configs: &[Config]) -> Result<Limiter, Error> {
        Limiter::with_clock_multi(configs, Clock::tsc())
    }

    /// [`Limiter::new_multi`] reading `clock`.
    pub fn with_clock_multi(configs: &[Config], clock: Clock) -> Result<Limiter, Error> {
        let all = crate::multi::all_of(configs, 128)?;
        if configs.len() == 1 || configs[0].capacity != 0 {
            // One limit needs no composite; a capacity is refused there.
            return Limiter::with_clock(configs[0], clock);
        }
        let engine = if all.is_word() {
            Engine::AllOfWord(all, WordCell::<AtomicU128>::new())
        } else {
            let cell = BlockCell::new(BlockAlgorithm::words(&all))
                .map_err(|bytes| Error::OutOfMemory { bytes })?;
            Engine::AllOfBlock(all, cell)
        };
        let limits = Limits {
            configs: configs.into(),
            names: vec![None; configs.len()].into(),
        };
        Ok(Limiter::assemble(engine, limits, clock))
    }

    /// Names the limits, in order, for callers that report which limit
    /// denied ([`Limiter::limit_name`]); an empty name is no name. Errors
    /// with [`Field::Limits`] unless there is one name per limit.
    pub fn with_names(mut self, names: &[&str]) -> Result<Limiter, Error> {
        self.limits.name(names)?;
        Ok(self)
    }

    /// The limits this limiter enforces, in order (one for a limiter made
    /// by [`Limiter::new`]).
    pub fn limits(&self) -> &[Config] {
        &self.limits.configs
    }

    /// The name given to limit `index`, if any.
    pub fn limit_name(&self, index: usize) -> Option<&str> {
        self.limits.names.get(index)?.as_deref()
    }

    /// Decides a request of `cost` now, with each limit's own decision.
    pub fn check_each(&self, cost: u64) -> MultiDecision {
        self.check_each_at(cost, self.clock.now_ns())
    }

    /// Decides a request of `cost` at `now_ns`, with each limit's own
    /// decision and which one denied (the same decision as
    /// [`Limiter::check_at`]).
    pub fn check_each_at(&self, cost: u64, now_ns: u64) -> MultiDecision {
        let d = self.engine.decide_each(now_ns, cost);
        self.counters.record(d.decision.allowed);
        d
    }

    /// The configuration this limiter was built from (the first limit's,
    /// for several limits).
    pub fn config(&self) -> &Config {
        &self.config
    }

    #[cfg_attr(loom, allow(dead_code))]
    /// The cell and algorithm (a snapshot reads and restores them).
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The limiter's current time, UNIX ns.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Decides a request of `cost` now (`cost` 0 is a peek).
    #[inline]
    pub fn check(&self, cost: u64) -> Decision {
        self.check_at(cost, self.clock.now_ns())
    }

    /// Decides a request of `cost` at `now_ns` (UNIX ns, from the caller).
    #[inline]
    pub fn check_at(&self, cost: u64, now_ns: u64) -> Decision {
        let (decision, _) = self.engine.decide(now_ns, cost, u64::MAX);
        self.counters.record(decision.allowed);
        decision
    }

    /// Whether one request is admitted now: [`Limiter::check`] with cost 1,
    /// for callers that need only the yes or no.
    #[inline]
    pub fn allow(&self) -> bool {
        self.allow_at(self.clock.now_ns())
    }

    /// Whether one request is admitted at `now_ns` (UNIX ns, from the
    /// caller): [`Limiter::check_at`] with cost 1, for callers that need
    /// only the yes or no.
    #[inline]
    pub fn allow_at(&self, now_ns: u64) -> bool {
        let allowed = self.engine.admits(now_ns, 1);
        self.counters.record(allowed);
        allowed
    }

    /// Waits until a request of `cost` is admitted (and, for the leaky
    /// bucket, until its turn in the queue), sleeping by `retry_after`,
    /// never spinning. Gives up once `timeout` would pass first.
    ///
    /// One exception: several limits including a leaky bucket whose states
    /// do not fit one word (block layout, see [`Limiter::new_multi`])
    /// cannot refuse a queue place, so the wait for it may outlast
    /// `timeout`.
    pub fn acquire(&self, cost: u64, timeout: Duration) -> Result<Decision, AcquireError> {
        acquire(&self.clock, timeout, |t, max_wait| {
            let (decision, taken) = self.engine.decide(t, cost, max_wait);
            if taken {
                self.counters.record(decision.allowed);
            }
            (decision, taken)
        })
    }

    /// Forgets the state: the limiter is fresh again.
    pub fn reset(&self) {
        self.engine.reset();
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats {
            bytes_allocated: self.bytes as u64,
            ..Stats::default()
        };
        self.counters.add_to(&mut stats);
        stats
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

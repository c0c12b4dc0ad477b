//! The direct limiter: one shared state for every caller (a "global" limit),
//! in one cell, with its clock.
//!
//! [`Limiter`] picks the cell that fits the algorithm at construction and
//! dispatches on it with one `match`; a check is one clock read, the
//! algorithm's integer arithmetic and one CAS (or one latch for the two
//! multi-word algorithms).

use crate::algorithm::WordAlgorithm;
use crate::algorithm::{
    BlockAlgorithm, all_of::AllOf, bucketed_window::BucketedWindow, fixed_window::FixedWindow,
    gcra::Gcra, sliding_log::SlidingLog, sliding_window::SlidingWindow, token_bucket::TokenBucket,
};
use crate::cell::{BlockCell, WordCell};
use crate::check::acquire::{AcquireError, acquire};
use crate::check::decision::Decision;
use crate::check::request::{Request, Tier};
use crate::clock::Clock;
use crate::config::{Algorithm, Config, ConfigError, Error, Field, Params};
use crate::policy::live::{Live, Owner, Swap};
use crate::policy::multi::{Limits, MAX_LIMITS, MultiDecision};
use crate::stats::{CheckCounters, Stats};
use crate::sync::{AtomicU64, AtomicU128, SlotU128};
use std::fmt;
use std::time::Duration;

/// A rate limiter with one shared state. Thread-safe: share it by reference
/// or in an `Arc`; every method takes `&self`.
///
/// ```
/// use ratecell::{Algorithm, Config, Limiter, Request};
///
/// // 10 requests per second, at most 10 at once.
/// let limiter = Limiter::builder()
///     .limit(Config::new(Algorithm::Gcra, 10, 1_000_000_000))
///     .build()
///     .unwrap();
/// let t = 1_700_000_000_000_000_000; // explicit UNIX ns: deterministic
/// for _ in 0..10 {
///     assert!(limiter.check(Request::new(1).at(t)).allowed);
/// }
/// let denied = limiter.check(Request::new(1).at(t));
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after_ns, 100_000_000); // one emission interval
/// ```
pub struct Limiter {
    engine: Engine,
    // Frees the engine's live parameters: declared after it, so dropped
    // after it.
    _owner: Owner,
    // Replaced as a whole by `reconfigure`, with the engine's parameters.
    limits: Swap<Limits>,
    // Serialises reconfigurations (checks never take it).
    reconfiguring: std::sync::Mutex<()>,
    clock: Clock,
    // Striped by thread, each stripe padded apart from the cell: a counter
    // bump must not invalidate the line the next CAS needs.
    counters: CheckCounters,
    bytes: usize,
}

/// The cell that fits each algorithm's state.
pub(crate) enum Engine {
    Gcra(Live<Gcra>, WordCell<AtomicU64>),
    TokenBucket(Live<TokenBucket>, WordCell<AtomicU128>),
    FixedWindow(Live<FixedWindow>, WordCell<AtomicU128>),
    SlidingWindow(Live<SlidingWindow>, WordCell<AtomicU128>),
    BucketedWindow(Live<BucketedWindow>, BlockCell),
    SlidingLog(Live<SlidingLog>, BlockCell),
    /// Several limits as one (`crate::policy::multi`), their states in one word...
    AllOfWord(Live<AllOf>, WordCell<SlotU128>),
    /// ...or in one block under its latch.
    AllOfBlock(Live<AllOf>, BlockCell),
}

impl Engine {
    /// The engine for `p`, and the owner of its live parameters (kept by
    /// the limiter after the engine).
    fn new(p: &Params) -> Result<(Engine, Owner), Error> {
        fn block<A: BlockAlgorithm>(alg: A) -> Result<BlockCell, Error> {
            BlockCell::new(alg.words()).map_err(|bytes| Error::OutOfMemory { bytes })
        }
        fn word<A: WordAlgorithm, W>(
            alg: A,
            cell: W,
            make: fn(Live<A>, W) -> Engine,
        ) -> (Engine, Owner) {
            let (live, owner) = Live::new(alg);
            (make(live, cell), owner)
        }
        fn blocky<A: BlockAlgorithm>(
            alg: A,
            make: fn(Live<A>, BlockCell) -> Engine,
        ) -> Result<(Engine, Owner), Error> {
            let cell = block(alg)?;
            let (live, owner) = Live::new(alg);
            Ok((make(live, cell), owner))
        }
        let u64cell = WordCell::<AtomicU64>::new;
        let u128cell = WordCell::<AtomicU128>::new;
        Ok(match p.algorithm {
            Algorithm::Gcra => word(Gcra::new(p, false), u64cell(), Engine::Gcra),
            Algorithm::LeakyBucket => word(Gcra::new(p, true), u64cell(), Engine::Gcra),
            Algorithm::TokenBucket => word(TokenBucket::new(p), u128cell(), Engine::TokenBucket),
            Algorithm::FixedWindow => word(FixedWindow::new(p), u128cell(), Engine::FixedWindow),
            Algorithm::SlidingWindow => {
                word(SlidingWindow::new(p), u128cell(), Engine::SlidingWindow)
            }
            Algorithm::BucketedWindow => blocky(BucketedWindow::new(p), Engine::BucketedWindow)?,
            Algorithm::SlidingLog => blocky(SlidingLog::new(p), Engine::SlidingLog)?,
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
    ///
    /// Always inlined: with the several-limits arms' pair dispatch in it,
    /// the inliner otherwise keeps this match out of line and inlines its
    /// caller instead, and a single-limit check then gets its decision
    /// back through memory (a store-forwarding stall on every check).
    #[allow(
        clippy::inline_always,
        reason = "see above: the inliner's own choice costs a single-limit check a third"
    )]
    #[inline(always)]
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

    /// The whole decision of a request of cost `n` at `t`, always taken
    /// ([`Limiter::check`]).
    ///
    /// The single-word arms return their decision in registers; the block
    /// engines decide out of line ([`Engine::block_decision`]) and
    /// return theirs as six words (`decision::Words`), built back into a
    /// `Decision` field by field.
    /// Not through the one [`Engine::decide`] match: there the block arms'
    /// calls are handed a pointer to the place where every arm's decision
    /// meets, so the word arms' decisions would go through memory too,
    /// and be loaded back with a store-forwarding stall.
    #[allow(
        clippy::inline_always,
        reason = "as for `decide`: a call would return the decision through memory"
    )]
    #[inline(always)]
    fn decision(&self, t: u64, n: u64) -> Decision {
        let any = |_: &Decision| true;
        match self {
            Engine::Gcra(a, cell) => cell.decide(a, t, n, any).0,
            Engine::TokenBucket(a, cell) => cell.decide(a, t, n, any).0,
            Engine::FixedWindow(a, cell) => cell.decide(a, t, n, any).0,
            Engine::SlidingWindow(a, cell) => cell.decide(a, t, n, any).0,
            Engine::AllOfWord(a, cell) => cell.decide(a, t, n, any).0,
            Engine::AllOfBlock(..) | Engine::BucketedWindow(..) | Engine::SlidingLog(..) => {
                self.block_decision(t, n).decision()
            }
        }
    }

    /// [`Engine::decision`] for the engines that keep their states in a
    /// block (one limit or several), as words: written to a `&mut
    /// Decision` and copied back, the caller's 16-byte loads over the
    /// callee's one-byte `allowed` and its padding fail store forwarding.
    ///
    /// Only the block arms, each handing over to its cell's own
    /// out-of-line check (`BlockCell::decide_words`, a tail call that
    /// writes the words straight to the caller's slot): through the whole
    /// [`Engine::decide`] match, this function would save every register
    /// the word arms use and copy the block's decision from one slot to
    /// another.
    #[inline(never)]
    fn block_decision(&self, t: u64, n: u64) -> crate::check::decision::Words {
        match self {
            Engine::AllOfBlock(a, cell) => cell.decide_words(a, t, n),
            Engine::BucketedWindow(a, cell) => cell.decide_words(a, t, n),
            Engine::SlidingLog(a, cell) => cell.decide_words(a, t, n),
            _ => unreachable!("the word engines decide in `Engine::decision`"),
        }
    }

    /// The decision with every limit's own, and the number of limits.
    #[inline]
    fn decide_each(&self, t: u64, n: u64) -> MultiDecision {
        let mut each = [Decision::default(); MAX_LIMITS];
        let any = |_: &Decision| true;
        let (d, len) = match self {
            Engine::AllOfWord(a, cell) => {
                (cell.decide_each(a, t, n, any, &mut each).0, a.get().len())
            }
            Engine::AllOfBlock(a, cell) => (cell.decide_each(a, t, n, &mut each), a.get().len()),
            _ => return MultiDecision::of_one(self.decide(t, n, u64::MAX).0),
        };
        MultiDecision::of_many(d, each, len)
    }

    /// Whether a request is admitted (and stored, as [`Engine::decide`]
    /// would), without the rest of the decision: each arm is inlined into
    /// the caller, so the arithmetic only the `Decision` needs (GCRA's
    /// division for `remaining`, the retry and reset times) is dropped.
    /// Always inlined: left to the inliner, this match is a call, whose
    /// entry, exit and spills would be a third of `allow()`'s
    /// instructions.
    #[allow(
        clippy::inline_always,
        reason = "see above: the inliner leaves the eight arms out of line"
    )]
    #[inline(always)]
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

    /// Swaps in the parameters of `configs`, already checked against `old`
    /// by `reconfigure::check` (which gave `params`); refuses a change of
    /// layout.
    fn reconfigure(
        &self,
        old: &[Config],
        configs: &[Config],
        params: &[Params],
    ) -> Result<(), Error> {
        use crate::policy::reconfigure::{block, word};
        let (o, c, p) = (&old[0], &configs[0], &params[0]);
        match self {
            Engine::Gcra(live, _) => word(
                live,
                Gcra::new(p, p.algorithm == Algorithm::LeakyBucket),
                o,
                c,
            ),
            Engine::TokenBucket(live, _) => word(live, TokenBucket::new(p), o, c),
            Engine::FixedWindow(live, _) => word(live, FixedWindow::new(p), o, c),
            Engine::SlidingWindow(live, _) => word(live, SlidingWindow::new(p), o, c),
            Engine::BucketedWindow(live, _) => block(live, BucketedWindow::new(p), o, c),
            Engine::SlidingLog(live, _) => block(live, SlidingLog::new(p), o, c),
            Engine::AllOfWord(live, _) | Engine::AllOfBlock(live, _) => {
                let all = crate::policy::multi::all_of(configs, 128)?;
                crate::policy::reconfigure::all_of(live, all, old, configs)
            }
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
    fn assemble(engine: Engine, owner: Owner, limits: Limits, clock: Clock) -> Limiter {
        let bytes = size_of::<Limiter>() + engine.heap_bytes();
        Limiter {
            engine,
            _owner: owner,
            limits: Swap::new(limits),
            reconfiguring: std::sync::Mutex::new(()),
            clock,
            counters: CheckCounters::default(),
            bytes,
        }
    }

    /// A limiter of `configs` (one limit, or several checked as one:
    /// [`crate::Builder::limit`]) reading `clock`: the one constructor,
    /// which [`crate::Builder`] calls for every direct limiter it makes,
    /// fresh or restored.
    pub(crate) fn made(configs: &[Config], clock: Clock) -> Result<Limiter, Error> {
        // One limit needs no composite, and is judged alone: its errors
        // name no limit's index.
        if let [config] = configs {
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
            let (engine, owner) = Engine::new(&params)?;
            return Ok(Limiter::assemble(
                engine,
                owner,
                Limits::one(*config),
                clock,
            ));
        }
        let all = crate::policy::multi::all_of(configs, 128)?;
        if configs[0].capacity != 0 {
            // A capacity is refused there.
            return Limiter::made(&configs[..1], clock);
        }
        let (engine, owner) = if all.is_word() {
            let (live, owner) = Live::new(all);
            (Engine::AllOfWord(live, WordCell::<SlotU128>::new()), owner)
        } else {
            let cell = BlockCell::new(BlockAlgorithm::words(&all))
                .map_err(|bytes| Error::OutOfMemory { bytes })?;
            let (live, owner) = Live::new(all);
            (Engine::AllOfBlock(live, cell), owner)
        };
        let limits = Limits {
            configs: configs.into(),
            names: vec![None; configs.len()].into(),
        };
        Ok(Limiter::assemble(engine, owner, limits, clock))
    }

    /// Names the limits, in order, for callers that report which limit
    /// denied ([`Limiter::limit_name`]); an empty name is no name. Errors
    /// with [`Field::Limits`] unless there is one name per limit.
    pub(crate) fn with_names(self, names: &[&str]) -> Result<Limiter, Error> {
        let mut limits = self.limits.load().clone();
        limits.name(names)?;
        self.limits.replace(limits);
        Ok(self)
    }

    /// The limits this limiter enforces, in order (one for a limiter made
    /// with one [`crate::Builder::limit`]).
    pub fn limits(&self) -> &[Config] {
        &self.limits.load().configs
    }

    /// The name given to limit `index`, if any.
    pub fn limit_name(&self, index: usize) -> Option<&str> {
        self.limits.load().names.get(index)?.as_deref()
    }

    /// Decides `request`, with each limit's own decision and which one
    /// denied (the same decision as [`Limiter::check`]).
    pub fn check_each(&self, request: impl Into<Request>) -> MultiDecision {
        let r = request.into();
        if r.tier != Tier::DEFAULT {
            return MultiDecision::of_one(self.never());
        }
        let now_ns = r.at_ns.unwrap_or_else(|| self.clock.now_ns());
        let d = self.engine.decide_each(now_ns, r.cost);
        self.counters.record(d.decision.allowed);
        d
    }

    /// The configuration this limiter was built from (the first limit's,
    /// for several limits).
    pub fn config(&self) -> &Config {
        &self.limits.load().configs[0]
    }

    /// The cell and algorithm (a snapshot reads and restores them).
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The limiter's current time, UNIX ns.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Decides `request`: a cost (0 is a peek), or a [`Request`] with its
    /// time. A direct limiter has tier 0 only; a request naming another
    /// tier is denied ([`Decision::NEVER`]).
    #[allow(
        clippy::inline_always,
        reason = "too large to be inlined with the clock read it holds, it returned its decision through memory"
    )]
    #[inline(always)]
    pub fn check(&self, request: impl Into<Request>) -> Decision {
        let r = request.into();
        if r.tier != Tier::DEFAULT {
            return self.never();
        }
        let now_ns = r.at_ns.unwrap_or_else(|| self.clock.now_ns());
        let tally = self.counters.tally();
        let decision = self.engine.decision(now_ns, r.cost);
        tally.record(decision.allowed);
        decision
    }

    /// The decision of a request naming a tier (a direct limiter has tier
    /// 0 only), counted as a denial.
    #[cold]
    fn never(&self) -> Decision {
        self.counters.record(false);
        Decision::NEVER
    }

    /// Whether one request is admitted now: [`Limiter::check`] of one
    /// unit, for callers that need only the yes or no.
    #[inline]
    pub fn allow(&self) -> bool {
        let allowed = self.engine.admits(self.clock.now_ns(), 1);
        self.counters.record(allowed);
        allowed
    }

    /// Waits until a request of `cost` is admitted (and, for the leaky
    /// bucket, until its turn in the queue), sleeping by `retry_after`,
    /// never spinning. Gives up once `timeout` would pass first.
    ///
    /// One exception: several limits including a leaky bucket whose states
    /// do not fit one word (block layout, see [`crate::Builder::limit`])
    /// cannot refuse a queue place, so the wait for it may outlast
    /// `timeout`.
    ///
    /// The wait is on the limiter's clock: a time set on the request is not
    /// used. A request naming a tier other than 0 is never admitted.
    pub fn acquire(
        &self,
        request: impl Into<Request>,
        timeout: Duration,
    ) -> Result<Decision, AcquireError> {
        let r = request.into();
        if r.tier != Tier::DEFAULT {
            return Err(AcquireError::Unsatisfiable(self.never()));
        }
        acquire(&self.clock, timeout, |t, max_wait| {
            let (decision, taken) = self.engine.decide(t, r.cost, max_wait);
            if taken {
                self.counters.record(decision.allowed);
            }
            (decision, taken)
        })
    }

    /// Changes the limits while checks run, keeping every state: `configs`
    /// replaces the limits in order (as many configs as the limiter was
    /// built with).
    ///
    /// No check waits: each decides on the old limits or on the new ones,
    /// never a mix. What a state means right after the change (its
    /// `remaining`) follows each algorithm's carry-over rule
    /// (docs/ALGORITHMS.md, "Live reconfiguration"): limit and burst changes
    /// keep what was spent; GCRA, the leaky bucket and the token bucket
    /// also take a new period. Refused with [`Error::Reconfigure`], naming
    /// the limit and field, and nothing changed: another algorithm, number
    /// of limits, capacity or overflow; a window algorithm's period; the
    /// bucketed window's sub-windows; the sliding log's limit; a limit or
    /// burst whose counts need another bit width than at construction
    /// (crossing a power of two). An invalid config is
    /// [`Error::Config`], as at construction. Names are kept.
    ///
    /// Each accepted change keeps the replaced parameters (a few hundred
    /// bytes) until the limiter is dropped, the price of checks that read
    /// them without any atomic write (see `crate::policy::live`).
    ///
    /// ```
    /// use ratecell::{Algorithm, Clock, Config, Limiter, Request};
    ///
    /// let t = 1_700_000_000_000_000_000;
    /// let (clock, _hand) = Clock::manual(t);
    /// let limiter = Limiter::builder()
    ///     .limit(Config::new(Algorithm::FixedWindow, 10, 1_000_000_000))
    ///     .clock(clock)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.check(Request::new(4).at(t)).remaining, 6);
    /// // 10 to 14 per second: the 4 spent this window stay spent.
    /// limiter
    ///     .reconfigure(&[Config::new(Algorithm::FixedWindow, 14, 1_000_000_000)])
    ///     .unwrap();
    /// assert_eq!(limiter.check(Request::new(0).at(t)).remaining, 10);
    /// // Another algorithm has no carry-over: refused.
    /// assert!(limiter.reconfigure(&[Config::new(Algorithm::Gcra, 10, 1_000_000_000)]).is_err());
    /// ```
    pub fn reconfigure(&self, configs: &[Config]) -> Result<(), Error> {
        let _one = self.reconfiguring.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.limits.load();
        let params = crate::policy::reconfigure::check(&old.configs, configs)?;
        self.engine.reconfigure(&old.configs, configs, &params)?;
        self.limits.replace(Limits {
            configs: configs.into(),
            names: old.names.clone(),
        });
        Ok(())
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
            .field("config", self.config())
            .finish_non_exhaustive()
    }
}

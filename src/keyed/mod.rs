//! The keyed limiter: one state per key (user id, IP address, API key) in a
//! fixed-capacity table; `src/table/mod.rs` says how keys are placed,
//! evicted and kept apart.

use crate::algorithm::{BlockAlgorithm, WordAlgorithm};
use crate::algorithm::{
    all_of::AllOf, bucketed_window::BucketedWindow, fixed_window::FixedWindow, gcra::Gcra,
    sliding_log::SlidingLog, sliding_window::SlidingWindow, token_bucket::TokenBucket,
};
use crate::check::acquire::{AcquireError, acquire};
use crate::check::decision::{Decision, Words};
use crate::check::request::{Batch, Key, Request, Tier};
use crate::clock::{At, Clock};
use crate::config::{Algorithm, Config, ConfigError, Error, Field, Params};
use crate::policy::live::{Live, Owner, Swap};
use crate::policy::multi::{Limits, MAX_LIMITS, MultiDecision};
use crate::policy::tiers::{TierError, Tiers};
use crate::shared::SharedOptions;
use crate::stats::{CheckCounters, Stats};
use crate::sync::SlotU128;
use crate::table::storage::Storage;
use crate::table::{
    Geometry, KeyHasher, KeyedTable, Shard,
    block::BlockTable,
    word::{MIN_FINGERPRINT_BITS, WordTable},
};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::time::Duration;

/// How many keys ahead a batch check starts loading buckets: enough to
/// cover a memory access with the work of the checks in between.
const PREFETCH_DISTANCE: usize = 16;

/// A rate limiter with one state per key, in a table of fixed capacity
/// allocated at construction. Thread-safe; every method takes `&self`.
///
/// A new key takes a free place or, when its neighbourhood of the table is
/// full, the place of a key whose state is equivalent to fresh (nothing is
/// lost). When neither exists the configured [`Overflow`](crate::Overflow)
/// policy decides (deny the key, admit it untracked, or evict the live state
/// nearest to fresh for it), and the event is counted. A table holds its
/// `capacity` live keys: it has 1.45 places per key, and a new key may look
/// as far as 128 places (32 buckets of 4; 256 for the multi-word
/// algorithms), though its search stops at the first empty place, nearly
/// always in its home bucket.
///
/// # Keys and collisions
/// Keys are hashed with SipHash-1-3 under a 128-bit key drawn at random for
/// each limiter, so nobody outside can aim keys at one bucket or at one
/// fingerprint. A `u64` key is its 8 little-endian bytes. The table stores a
/// fingerprint of `f` bits per key ([`KeyedLimiter::fingerprint_bits`]), not
/// the key, so two keys share a state when a new key finds, among the
/// residents its search passes (at most 128, the whole probe window; 256
/// for the multi-word algorithms), one with its fingerprint. Over `n` keys
/// the expected number of keys that ever share a state is at most
/// `n · 128 / 2^(f+1)` (`n · 256 / 2^(f+1)`), and far less in practice,
/// since a search nearly always ends in the home bucket:
///
/// | algorithm | `f` (`bits(x)`: bits to write x) | example | 1M keys, at most |
/// |---|---|---|---|
/// | GCRA, leaky bucket | 64 | any | 3.5·10⁻¹² |
/// | bucketed window, sliding log | 62 | any | 2.8·10⁻¹¹ |
/// | token bucket | `64 − bits(B)` | B = 100: 57 | 4.4·10⁻¹⁰ |
/// | fixed window | `min(64, 128 − bits(2^64/P) − bits(L))` | L < 2^19, P ≥ 1 ms: 64 | 3.5·10⁻¹² |
/// | sliding window | `min(64, 128 − bits(2^64/P) − 2·bits(L))` | 1000/s: 64; 10⁵ per ms: 49 | 3.5·10⁻¹²; 1.1·10⁻⁷ |
///
/// The narrowest any accepted configuration gets is 32 bits (a token bucket
/// with a burst of 2^31 or more): at most 0.015 expected shared keys per
/// million.
///
/// A configuration that would leave fewer than 32 bits (a keyed sliding
/// window with a huge limit and a microsecond period) is refused.
///
/// ```
/// use ratecell::{Algorithm, Config, KeyedLimiter, Request};
///
/// let config = Config::new(Algorithm::TokenBucket, 3, 60_000_000_000).capacity(10_000);
/// let per_user = KeyedLimiter::builder().limit(config).build().unwrap();
/// let t = 1_700_000_000_000_000_000;
/// for _ in 0..3 {
///     assert!(per_user.check(42, Request::new(1).at(t)).allowed);
/// }
/// assert!(!per_user.check(42, Request::new(1).at(t)).allowed, "user 42 is out of tokens");
/// assert!(per_user.check("alice", Request::new(1).at(t)).allowed, "alice is not");
/// ```
pub struct KeyedLimiter {
    hasher: KeyHasher,
    tables: Tables,
    // Every tier's limits, for a tiered limiter (`crate::policy::tiers`); empty
    // otherwise (one tier: `limits`).
    tiers: Box<[Box<[Config]>]>,
    // Frees the tables' live parameters: declared after them, so dropped
    // after them.
    _owner: Owner,
    checks: CheckCounters,
    // Replaced as a whole by `reconfigure`, with the tables' parameters.
    limits: Swap<Limits>,
    // Serialises reconfigurations (checks never take it).
    reconfiguring: std::sync::Mutex<()>,
    // A table in a shared region: its parameters live in every attached
    // process, so a live change here alone is refused.
    shared: bool,
    clock: Clock,
}

pub(crate) enum Tables {
    Gcra(WordTable<Live<Gcra>>),
    TokenBucket(WordTable<Live<TokenBucket>>),
    FixedWindow(WordTable<Live<FixedWindow>>),
    SlidingWindow(WordTable<Live<SlidingWindow>>),
    BucketedWindow(BlockTable<Live<BucketedWindow>>),
    SlidingLog(BlockTable<Live<SlidingLog>>),
    /// Several limits as one (`crate::policy::multi`), a key's states in one slot...
    AllOfWord(WordTable<Live<AllOf>>),
    /// ...or in one block under its latch.
    AllOfBlock(BlockTable<Live<AllOf>>),
    /// A quota per tier (`crate::policy::tiers`), a key's states in one slot...
    TieredWord(WordTable<Live<Tiers>>),
    /// ...or in one block.
    TieredBlock(BlockTable<Live<Tiers>>),
}

/// Runs `$body` with `$t` bound to whichever table this is.
macro_rules! with_table {
    ($tables:expr, $t:ident => $body:expr) => {
        match $tables {
            Tables::Gcra($t) => $body,
            Tables::TokenBucket($t) => $body,
            Tables::FixedWindow($t) => $body,
            Tables::SlidingWindow($t) => $body,
            Tables::BucketedWindow($t) => $body,
            Tables::SlidingLog($t) => $body,
            Tables::AllOfWord($t) => $body,
            Tables::AllOfBlock($t) => $body,
            Tables::TieredWord($t) => $body,
            Tables::TieredBlock($t) => $body,
        }
    };
}

// After the macro, which they use.
mod build;
mod shared;
mod tiers;

/// A shared region being opened: what `Tables::new` needs to attach it,
/// and what attaching gave besides the table.
struct Opening {
    path: std::path::PathBuf,
    config: Config,
    options: SharedOptions,
    /// The hash key a new region gets (a restored snapshot's), else random.
    hash_keys: Option<(u64, u64)>,
    attached: Option<((u64, u64), crate::clock::shared::Calibration)>,
}

type TableParts = (Storage<CachePadded<Shard>>, Storage<SlotU128>, bool);

impl Opening {
    fn attach(&mut self, shards: usize, slots: usize) -> Result<TableParts, Error> {
        let a = crate::shared::attach(
            &self.path,
            &self.config,
            &self.options,
            self.hash_keys,
            shards,
            slots,
        )?;
        self.attached = Some((a.hash_keys, a.calibration));
        Ok((a.shards, a.slots, true))
    }
}

/// A word table on the heap, or in the region `opening` opens.
fn word_table<A: WordAlgorithm>(
    alg: A,
    config: &Config,
    opening: &mut Option<Opening>,
    owner: &mut Option<Owner>,
) -> Result<WordTable<Live<A>>, Error> {
    let overflow = config.overflow;
    let (alg, own) = Live::new(alg);
    *owner = Some(own);
    match opening {
        None => WordTable::new(alg, config.capacity, overflow),
        Some(o) => WordTable::new_in(alg, config.capacity, overflow, |shards, slots| {
            o.attach(shards, slots)
        }),
    }
}

/// A block table with live parameters.
fn block_table<A: BlockAlgorithm>(
    alg: A,
    config: &Config,
    owner: &mut Option<Owner>,
) -> Result<BlockTable<Live<A>>, Error> {
    let (alg, own) = Live::new(alg);
    *owner = Some(own);
    BlockTable::new(alg, config.capacity, config.overflow)
}

impl Tables {
    /// The table for `config`: on the heap, or with `opening` in a shared
    /// region (word algorithms only: `shared::check_supported` refused the
    /// others before).
    fn new(config: &Config, opening: &mut Option<Opening>) -> Result<(Tables, Owner), Error> {
        let p = config.params()?;
        if config.capacity == 0 {
            return Err(ConfigError {
                field: Field::Capacity,
                message: "a keyed limiter needs room for at least 1 key, not 0 (a Limiter is the one-state form)".into(),
            }
            .into());
        }
        let mut owner = None;
        let o = &mut owner;
        let tables = match p.algorithm {
            Algorithm::Gcra => Tables::Gcra(word_table(Gcra::new(&p, false), config, opening, o)?),
            Algorithm::LeakyBucket => {
                Tables::Gcra(word_table(Gcra::new(&p, true), config, opening, o)?)
            }
            Algorithm::TokenBucket => {
                Tables::TokenBucket(word_table(TokenBucket::new(&p), config, opening, o)?)
            }
            Algorithm::FixedWindow => {
                Tables::FixedWindow(word_table(FixedWindow::new(&p), config, opening, o)?)
            }
            Algorithm::SlidingWindow => {
                Tables::SlidingWindow(word_table(SlidingWindow::new(&p), config, opening, o)?)
            }
            Algorithm::BucketedWindow => {
                Tables::BucketedWindow(block_table(BucketedWindow::new(&p), config, o)?)
            }
            Algorithm::SlidingLog => {
                Tables::SlidingLog(block_table(SlidingLog::new(&p), config, o)?)
            }
        };
        Ok((tables, owner.expect("every arm made its live parameters")))
    }

    pub(crate) fn geometry(&self) -> &Geometry {
        with_table!(self, t => t.geometry())
    }

    /// [`Engine::reconfigure`](crate::limiter) for the tables.
    fn reconfigure(
        &self,
        old: &[Config],
        configs: &[Config],
        params: &[Params],
    ) -> Result<(), Error> {
        use crate::policy::reconfigure::{block, word};
        let (o, c, p) = (&old[0], &configs[0], &params[0]);
        match self {
            Tables::Gcra(t) => word(
                t.alg(),
                Gcra::new(p, p.algorithm == Algorithm::LeakyBucket),
                o,
                c,
            ),
            Tables::TokenBucket(t) => word(t.alg(), TokenBucket::new(p), o, c),
            Tables::FixedWindow(t) => word(t.alg(), FixedWindow::new(p), o, c),
            Tables::SlidingWindow(t) => word(t.alg(), SlidingWindow::new(p), o, c),
            Tables::BucketedWindow(t) => block(t.alg(), BucketedWindow::new(p), o, c),
            Tables::SlidingLog(t) => block(t.alg(), SlidingLog::new(p), o, c),
            Tables::AllOfWord(t) => {
                let all = crate::policy::multi::all_of(configs, 128 - MIN_FINGERPRINT_BITS)?;
                crate::policy::reconfigure::all_of(t.alg(), all, old, configs)
            }
            Tables::AllOfBlock(t) => {
                let all = crate::policy::multi::all_of(configs, 128 - MIN_FINGERPRINT_BITS)?;
                crate::policy::reconfigure::all_of(t.alg(), all, old, configs)
            }
            Tables::TieredWord(_) | Tables::TieredBlock(_) => {
                Err(Error::Reconfigure(crate::config::ReconfigureError {
                    limit: 0,
                    field: Field::Tiers,
                    message: "a tiered limiter's tiers are fixed at construction; build a new limiter for new tiers".into(),
                }))
            }
        }
    }
}

impl KeyedLimiter {
    /// Names the limits, in order ([`crate::Builder::names`]).
    pub(crate) fn with_names(self, names: &[&str]) -> Result<KeyedLimiter, Error> {
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

    /// Decides one request for the key hashed to `h`, with each limit's
    /// own decision, and counts it.
    fn decide_each(&self, h: u64, at: impl At, n: u64) -> MultiDecision {
        let mut each = [Decision::default(); MAX_LIMITS];
        let d = match &self.tables {
            Tables::AllOfWord(t) => {
                let d = t.check_each(h, at, n, u64::MAX, &mut each).0;
                MultiDecision::of_many(d, each, self.limits.load().configs.len())
            }
            Tables::AllOfBlock(t) => {
                let d = t.check_each(h, at, n, &mut each);
                MultiDecision::of_many(d, each, self.limits.load().configs.len())
            }
            Tables::TieredWord(_) | Tables::TieredBlock(_) => {
                return self.decide_tier(h, at, n, 0);
            }
            _ => MultiDecision::of_one(self.decide_one_limit(h, at, n)),
        };
        if matches!(self.tables, Tables::AllOfWord(_) | Tables::AllOfBlock(_)) {
            self.checks.record(d.decision.allowed);
        }
        d
    }

    /// [`KeyedLimiter::decide`] without a queue limit for the tables of
    /// one untiered limit, the only ones [`KeyedLimiter::decide_each`]
    /// leaves to it; counted. Not `decide` itself, which would compile the
    /// several-limits and tiered tables' checks in as well, though they
    /// cannot arrive here (see [`KeyedLimiter::decide_block`]).
    #[inline]
    fn decide_one_limit(&self, h: u64, at: impl At, n: u64) -> Decision {
        let tally = self.checks.tally();
        let (decision, taken) = match &self.tables {
            Tables::Gcra(t) => t.decide(h, at, n, u64::MAX),
            Tables::TokenBucket(t) => t.decide(h, at, n, u64::MAX),
            Tables::FixedWindow(t) => t.decide(h, at, n, u64::MAX),
            Tables::SlidingWindow(t) => t.decide(h, at, n, u64::MAX),
            Tables::BucketedWindow(t) => t.decide(h, at, n, u64::MAX),
            Tables::SlidingLog(t) => t.decide(h, at, n, u64::MAX),
            _ => unreachable!("KeyedLimiter::decide_each decides the other tables"),
        };
        if taken {
            tally.record(decision.allowed);
        }
        decision
    }

    /// Decides `request` for `key`, with each limit's own decision and
    /// which one denied (the same decision as [`KeyedLimiter::check`]).
    pub fn check_each<'k>(
        &self,
        key: impl Into<Key<'k>>,
        request: impl Into<Request>,
    ) -> MultiDecision {
        let r = request.into();
        let h = self.hash_key(key.into());
        let at = (r.at_ns, &self.clock);
        if r.tier == Tier::DEFAULT {
            return self.decide_each(h, at, r.cost);
        }
        self.decide_tier(h, at, r.cost, r.tier.index())
    }

    /// The configuration this limiter was built from (the first limit's,
    /// for several limits).
    pub fn config(&self) -> &Config {
        &self.limits.load().configs[0]
    }

    /// The limiter's current time, UNIX ns.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The table and the key hasher (a snapshot reads and restores them;
    /// `loom_hooks` finds a key's bucket).
    pub(crate) fn parts(&self) -> (&Tables, &KeyHasher) {
        (&self.tables, &self.hasher)
    }

    /// How many bits of each key's hash the table keeps to tell keys apart
    /// (see the collision probabilities in the crate's table docs).
    pub fn fingerprint_bits(&self) -> u32 {
        self.tables.geometry().fingerprint_bits()
    }

    #[inline]
    fn hash_u64(&self, key: u64) -> u64 {
        self.hasher.hash_u64(key)
    }

    #[inline]
    fn hash_bytes(&self, key: &[u8]) -> u64 {
        self.hasher.hash(key)
    }

    #[inline]
    fn hash_key(&self, key: Key<'_>) -> u64 {
        match key {
            Key::Id(id) => self.hash_u64(id),
            Key::Bytes(bytes) => self.hash_bytes(bytes),
        }
    }

    /// Decides one request for the key hashed to `h` and counts it.
    #[inline]
    fn decide(&self, h: u64, at: impl At, n: u64, max_wait: u64) -> (Decision, bool) {
        let tally = self.checks.tally();
        let (decision, taken) =
            with_table!(&self.tables, table => table.decide(h, at, n, max_wait));
        if taken {
            tally.record(decision.allowed);
        }
        (decision, taken)
    }

    /// The whole decision of a request under `tier` for the key hashed to
    /// `h`, always taken, and counted: [`KeyedLimiter::decide`] without a
    /// queue limit, the four single-algorithm word tables inlined into the
    /// caller, the tiered tables in one out-of-line check
    /// ([`KeyedLimiter::tiered_decision`]) and every other table out of line
    /// ([`KeyedLimiter::composite_decision`]).
    ///
    /// Always inlined, so the decision stays in registers. As a call (one
    /// function holding every word table's check, which the compiler did
    /// not inline), it came back through memory, and the caller copied its
    /// five `u64` fields in 16-byte loads over the callee's 8-byte stores:
    /// a failed store-to-load forward on every check. The copy and the
    /// reloads also sit among the instructions that wait on the slot's
    /// load, so over a million keys fewer checks overlap. Each call site holds the four fast paths
    /// (about 7 KB); their slow paths stay out of line
    /// (`WordTable::check_beyond_home`). Figures in docs/ARCHITECTURE.md,
    /// "Why the keyed check is shaped as it is".
    #[allow(
        clippy::inline_always,
        reason = "a call returns the decision through memory (see above)"
    )]
    #[inline(always)]
    fn decision(&self, h: u64, at: impl At, n: u64, tier: usize) -> Decision {
        // Each arm looks up its own tally: the tiered check counts its
        // decision itself, and a lookup before the match would stay on its
        // path (a thread-local access the compiler does not move).
        macro_rules! counted {
            ($table:expr) => {{
                let tally = self.checks.tally();
                let decision = $table.check(h, at, n, u64::MAX).0;
                tally.record(decision.allowed);
                decision
            }};
        }
        match &self.tables {
            Tables::Gcra(t) if tier == 0 => counted!(t),
            Tables::TokenBucket(t) if tier == 0 => counted!(t),
            Tables::FixedWindow(t) if tier == 0 => counted!(t),
            Tables::SlidingWindow(t) if tier == 0 => counted!(t),
            // One path whatever the tier: the branch follows the table, not
            // the request, so keys alternating between tiers do not cost a
            // mispredicted branch per check.
            Tables::TieredWord(_) | Tables::TieredBlock(_) => self.tiered_decision(h, at, n, tier),
            // A tier past 0 of an untiered table is never admitted.
            _ if tier != 0 => self.never(),
            _ => self
                .composite_decision(self.checks.tally(), h, at, n)
                .decision(),
        }
    }

    /// [`KeyedLimiter::decision`] for every other table, counted on the
    /// `tally` it looked up: several limits in one word table inline here
    /// (a copy per pair of rules, too large for every call site), the
    /// block tables out of line again ([`KeyedLimiter::block_decision`]),
    /// for the reason
    /// `Engine::decision` gives in `limiter.rs`. `#[inline]` although the
    /// compiler keeps it out of line: so it is compiled in the caller's
    /// crate, for its constant arguments (as `#[inline(never)]` it cannot
    /// fold them).
    /// As words, like `WordTable::check_beyond_home`'s, for the same
    /// reason: returned as a `Decision`, the call was handed the place
    /// where every fast path's decision meets, and so the GCRA check's
    /// decision went through memory.
    #[inline]
    fn composite_decision(
        &self,
        tally: crate::stats::Tally<'_>,
        h: u64,
        at: impl At,
        n: u64,
    ) -> Words {
        let decision = match &self.tables {
            Tables::AllOfWord(t) => t.check(h, at, n, u64::MAX).0,
            // Counted there.
            _ => return self.block_decision(h, at, n),
        };
        tally.record(decision.allowed);
        Words::of(decision)
    }

    /// [`KeyedLimiter::decision`] for the block tables, as words (see
    /// `Engine::block_decision` in `limiter.rs`).
    #[inline(never)]
    fn block_decision(&self, h: u64, at: impl At, n: u64) -> crate::check::decision::Words {
        crate::check::decision::Words::of(self.decide_block(h, at, n))
    }

    /// [`KeyedLimiter::decide`] without a queue limit for the untiered
    /// block tables, the only others [`KeyedLimiter::decision`] leaves to
    /// [`KeyedLimiter::block_decision`]; counted. Not `decide`
    /// itself: that compiles every table's check into the function, the
    /// word tables' too, which cannot arrive here, and the several-limits
    /// word table's check alone is a copy per pair of rules (about 75 KB of
    /// the C library, twice: once per kind of time).
    #[inline]
    fn decide_block(&self, h: u64, at: impl At, n: u64) -> Decision {
        let tally = self.checks.tally();
        let (decision, taken) = match &self.tables {
            Tables::BucketedWindow(t) => t.decide(h, at, n, u64::MAX),
            Tables::SlidingLog(t) => t.decide(h, at, n, u64::MAX),
            Tables::AllOfBlock(t) => t.decide(h, at, n, u64::MAX),
            _ => unreachable!("KeyedLimiter::decision decides the word and tiered tables"),
        };
        if taken {
            tally.record(decision.allowed);
        }
        decision
    }

    /// Decides `request` (a cost, or a [`Request`] with its time and tier)
    /// for `key` (a `u64`, bytes or a string: [`Key`]).
    ///
    /// ```
    /// use ratecell::{Algorithm, Config, KeyedLimiter, Request};
    ///
    /// let config = Config::new(Algorithm::Gcra, 2, 1_000_000_000).capacity(100);
    /// let limiter = KeyedLimiter::builder().limit(config).build().unwrap();
    /// let t = 1_700_000_000_000_000_000;
    /// assert!(limiter.check(7, Request::new(2).at(t)).allowed);
    /// assert!(!limiter.check(7, Request::new(1).at(t)).allowed);
    /// assert!(limiter.check("alice", 1).allowed, "now, on the limiter's clock");
    /// ```
    #[allow(
        clippy::inline_always,
        reason = "as a call, the decision comes back through memory (see `decision`)"
    )]
    #[inline(always)]
    pub fn check<'k>(&self, key: impl Into<Key<'k>>, request: impl Into<Request>) -> Decision {
        let r = request.into();
        let h = self.hash_key(key.into());
        // A caller's time is a plain `u64` in the table's check (its slow
        // paths are out of line, compiled for the time's type).
        let tier = r.tier.index();
        match r.at_ns {
            Some(t) => self.decision(h, t, r.cost, tier),
            None => self.decision(h, &self.clock, r.cost, tier),
        }
    }

    /// Decides every request of `batch` in order, with one clock read (or
    /// the batch's time), handing each decision to `each(index, decision)`.
    /// The decisions are those of the same checks made one by one.
    ///
    /// While key `i` is checked, the buckets of key `i + 16` are already
    /// being loaded, so a batch over a table larger than the caches overlaps
    /// its memory accesses instead of waiting for each in turn.
    ///
    /// ```
    /// use ratecell::{Algorithm, Batch, Config, Decision, KeyedLimiter};
    ///
    /// let config = Config::new(Algorithm::Gcra, 1, 1_000_000_000).capacity(100);
    /// let limiter = KeyedLimiter::builder().limit(config).build().unwrap();
    /// let keys = [1, 2, 1];
    /// let mut out = [Decision::default(); 3];
    /// limiter.check_batch(Batch::new(&keys), |i, d| out[i] = d);
    /// assert_eq!(out.map(|d| d.allowed), [true, true, false]);
    /// ```
    pub fn check_batch(&self, batch: Batch<'_>, mut each: impl FnMut(usize, Decision)) {
        let now_ns = batch.at_ns.unwrap_or_else(|| self.clock.now_ns());
        if let Some(tiers) = batch.tiers {
            self.batch_tiers(batch.keys, tiers, batch.costs, now_ns, each);
            return;
        }
        with_table!(&self.tables, table => self.batch(
            |h| table.prefetch(h),
            |_, h, cost| table.decide(h, now_ns, cost, u64::MAX).0,
            batch.keys,
            batch.costs,
            &mut each,
        ));
    }

    /// The batch loop, compiled once per table type: `prefetch(h)` starts
    /// loading the key hashed to `h`, `decide(i, h, cost)` decides request
    /// `i` (the untiered batch and the tiered one differ only there).
    #[inline]
    fn batch(
        &self,
        prefetch: impl Fn(u64),
        mut decide: impl FnMut(usize, u64, u64) -> Decision,
        keys: &[u64],
        costs: Option<&[u64]>,
        each: &mut impl FnMut(usize, Decision),
    ) {
        // The batch's decisions are counted once, at the end (or when `each`
        // panics: a decision made is a decision counted).
        let mut tally = Tally {
            checks: &self.checks,
            allowed: 0,
            denied: 0,
        };
        // Hashes of the keys ahead, in a ring on the stack (no allocation).
        let mut ahead = [0u64; PREFETCH_DISTANCE];
        for (i, &key) in keys.iter().take(PREFETCH_DISTANCE).enumerate() {
            ahead[i] = self.hash_u64(key);
            prefetch(ahead[i]);
        }
        for i in 0..keys.len() {
            let h = ahead[i % PREFETCH_DISTANCE];
            if let Some(&next) = keys.get(i + PREFETCH_DISTANCE) {
                let hn = self.hash_u64(next);
                ahead[i % PREFETCH_DISTANCE] = hn;
                prefetch(hn);
            }
            let cost = costs.map_or(1, |c| c[i]);
            let decision = decide(i, h, cost);
            tally.allowed += u64::from(decision.allowed);
            tally.denied += u64::from(!decision.allowed);
            each(i, decision);
        }
    }

    /// Waits until `request` for `key` is admitted (see
    /// [`crate::Limiter::acquire`]). The wait is on the limiter's clock:
    /// a time set on the request is not used.
    pub fn acquire<'k>(
        &self,
        key: impl Into<Key<'k>>,
        request: impl Into<Request>,
        timeout: Duration,
    ) -> Result<Decision, AcquireError> {
        let r = request.into();
        let h = self.hash_key(key.into());
        if r.tier == Tier::DEFAULT {
            self.acquire_hashed(h, r.cost, timeout)
        } else {
            self.acquire_tier_hashed(h, r.tier.index(), r.cost, timeout)
        }
    }

    fn acquire_hashed(
        &self,
        h: u64,
        cost: u64,
        timeout: Duration,
    ) -> Result<Decision, AcquireError> {
        acquire(&self.clock, timeout, |t, max_wait| {
            self.decide(h, t, cost, max_wait)
        })
    }

    /// Changes the limits while checks run, keeping every key's state:
    /// [`crate::Limiter::reconfigure`] for every key at once (the same
    /// rules, errors and carry-over). No key's state is rewritten: each
    /// is read by the new limits at its next check. Capacity and overflow
    /// cannot change. A table in a shared region
    /// ([`crate::States::Shared`]) is refused with
    /// [`Error::Reconfigure`]: the other attached processes would go on
    /// with the old limits.
    pub fn reconfigure(&self, configs: &[Config]) -> Result<(), Error> {
        let _one = self.reconfiguring.lock().unwrap_or_else(|e| e.into_inner());
        if self.shared {
            return Err(Error::Reconfigure(crate::config::ReconfigureError {
                limit: 0,
                field: Field::Limits,
                message: "the table lies in a shared region whose other processes keep their own parameters; change the limits by reopening every process with the new config".into(),
            }));
        }
        let old = self.limits.load();
        let params = crate::policy::reconfigure::check(&old.configs, configs)?;
        self.tables.reconfigure(&old.configs, configs, &params)?;
        self.limits.replace(Limits {
            configs: configs.into(),
            names: old.names.clone(),
        });
        Ok(())
    }

    /// Forgets `key`'s state (an operator unblocking a user). Returns
    /// whether the key had one.
    pub fn reset<'k>(&self, key: impl Into<Key<'k>>) -> bool {
        let h = self.hash_key(key.into());
        with_table!(&self.tables, t => t.reset(h))
    }

    /// The counters so far, summed over the shards.
    pub fn stats(&self) -> Stats {
        let mut stats = with_table!(&self.tables, t => t.stats());
        self.checks.add_to(&mut stats);
        stats.bytes_allocated += size_of_val(&self.checks) as u64;
        stats
    }
}

/// A batch's counts, added to the limiter's counters when dropped.
struct Tally<'a> {
    checks: &'a CheckCounters,
    allowed: u64,
    denied: u64,
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        self.checks.record_many(self.allowed, self.denied);
    }
}

impl fmt::Debug for KeyedLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("config", self.config())
            .finish_non_exhaustive()
    }
}

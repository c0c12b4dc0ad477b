//! Fuzzing the C ABI from Rust: random configurations and call sequences
//! (any integers, NULL pointers, empty and impossible lengths, times near 0
//! and `u64::MAX`) through every exported `ratecell_*` function, for a
//! bounded time.
//!
//! Limiters are made of one limit (`ratecell_limiter_new`), several and
//! tiers (`ratecell_limiter_build`), and every call runs on each kind, the
//! multi-limit (`ratecell_check_each`) and tier (a `ratecell_request` or
//! `ratecell_batch` naming tiers, for `ratecell_check`,
//! `ratecell_check_batch` and `ratecell_acquire`) calls included. Limiters saved periodically
//! (`ratecell_limiter_build` with `RATECELL_STATES_PERSISTED`) are opened
//! with the same random options, used, saved and freed, and the file they
//! leave must restore, through the Rust API and `ratecell_limiter_build`
//! with `RATECELL_STATES_SNAPSHOT` (with those limits and with none).
//!
//! It checks what the ABI promises: no `RATECELL_PANIC` (this test runs the
//! library in a debug build, so an arithmetic overflow anywhere behind the
//! boundary is a panic and fails it), no status outside the enum,
//! out-parameters untouched on failure, coherent decisions, the same
//! decisions as the Rust API (every limiter made through the ABI has a twin
//! built with the Rust API from the same configuration, on a manual clock,
//! fed every call it accepts: each decision, batch, acquire, reset and the
//! counters must match the twin's), and no leak:
//! a counting allocator must show the same live allocations before and
//! after, once every limiter is freed. `scripts/c-tests.sh` runs the same
//! kind of driver from C under ASan, UBSan and LeakSanitizer.
//!
//! Run longer, or replay a failure, with
//! `RATECELL_FUZZ_SECS=600 RATECELL_FUZZ_SEED=123 cargo test --release -p ratecell-capi --lib ffi_fuzz`
//! (default: 2 seconds, a seed from the clock, printed on failure).

use crate::*;
use ratecell_lib::{
    AcquireError, AnyLimiter, Clock, Config, Decision, KeyedLimiter, Limiter, ManualClock,
    MultiDecision, Request, States, TierError,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The system allocator, counting live allocations.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout contract is forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(1, Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(1, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(1, Relaxed);
        // SAFETY: `ptr` came from this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `alloc`; the count is unchanged by a move.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// xorshift64*: small, seedable, good enough to pick calls.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(2_685_821_657_736_338_717)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
    /// An edge value most of the time, anything at all otherwise.
    fn any(&mut self, edges: &[u64]) -> u64 {
        if self.chance(4) {
            self.next()
        } else {
            edges[self.below(edges.len() as u64) as usize]
        }
    }
}

const LIMITS: &[u64] = &[0, 1, 2, 3, 10, 1000, u32::MAX as u64, 1 << 32, u64::MAX];
const PERIODS: &[u64] = &[
    0,
    999,
    1_000,
    1_000_000,
    1_000_000_000,
    60_000_000_000,
    31_622_400_000_000_000,
    31_622_400_000_000_001,
    u64::MAX,
];
const SUB_WINDOWS: &[u64] = &[0, 1, 2, 7, 10, 60, 64, 65, u32::MAX as u64];
// Small or impossible: a capacity of a few GiB would really be allocated.
const CAPACITIES: &[u64] = &[0, 0, 1, 2, 7, 64, 1000, 1 << 48, 1 << 63, u64::MAX];
const COSTS: &[u64] = &[0, 1, 1, 1, 2, 5, 1000, u32::MAX as u64, 1 << 32, u64::MAX];
const T0: u64 = 1_700_000_000_000_000_000;
const SENTINEL: u8 = 0x5A;

fn a_time(rng: &mut Rng) -> u64 {
    match rng.below(8) {
        0 => [0, 1, 1 << 62, u64::MAX - 1, u64::MAX][rng.below(5) as usize],
        1 => rng.next(),
        _ => T0 + rng.below(100_000_000_000) - 50_000_000_000,
    }
}

/// A time a request can give: any `a_time` but `RATECELL_NOW`, which
/// asks for the limiter's clock.
fn a_request_time(rng: &mut Rng) -> u64 {
    let t = a_time(rng);
    if t == RATECELL_NOW { t - 1 } else { t }
}

/// A request as `ratecell_request_init` makes it, with what differs: the
/// `u64` key, or the bytes `(pointer, length)`; the tier, cost and time
/// (`None`: the limiter's clock).
fn request(
    key: u64,
    bytes: Option<(*const u8, usize)>,
    tier: u32,
    cost: u64,
    at: Option<u64>,
) -> ratecell_request {
    let mut r = std::mem::MaybeUninit::<ratecell_request>::uninit();
    // SAFETY: `r` is writable, and ratecell_request_init sets every field.
    let mut r = unsafe {
        ratecell_request_init(r.as_mut_ptr());
        r.assume_init()
    };
    r.key_id = key;
    if let Some((ptr, len)) = bytes {
        (r.key_bytes, r.key_len) = (ptr, len);
    }
    (r.tier, r.cost, r.at_ns) = (tier, cost, at.unwrap_or(RATECELL_NOW));
    r
}

/// A batch as `ratecell_batch_init` makes it, with its requests.
fn batch(
    keys: *const u64,
    costs: *const u64,
    tiers: *const u32,
    n: usize,
    at: Option<u64>,
) -> ratecell_batch {
    let mut b = std::mem::MaybeUninit::<ratecell_batch>::uninit();
    // SAFETY: `b` is writable, and ratecell_batch_init sets every field.
    let mut b = unsafe {
        ratecell_batch_init(b.as_mut_ptr());
        b.assume_init()
    };
    (b.keys, b.costs, b.tiers, b.n) = (keys, costs, tiers, n);
    b.at_ns = at.unwrap_or(RATECELL_NOW);
    b
}

/// The options of a limiter of `n_limits` limits, in `n_tiers` tiers (0:
/// none), from `configs`.
fn options(configs: *const ratecell_config, n_limits: usize, n_tiers: usize) -> ratecell_options {
    let mut o = std::mem::MaybeUninit::<ratecell_options>::uninit();
    // SAFETY: `o` is writable, and ratecell_options_init sets every field.
    let mut o = unsafe {
        ratecell_options_init(o.as_mut_ptr());
        o.assume_init()
    };
    (o.configs, o.n_limits, o.n_tiers) = (configs, n_limits, n_tiers);
    o
}

/// A value of `T` filled with the sentinel byte, to see whether a failed
/// call wrote to it.
fn poisoned<T: Copy>() -> T {
    // SAFETY: only used for the plain-integer (and bool-free) C structs and
    // integers below, for which 0x5A bytes are valid values; the decision's
    // bool is never read before being compared as bytes.
    unsafe {
        let mut v = std::mem::MaybeUninit::<T>::uninit();
        std::ptr::write_bytes(v.as_mut_ptr(), SENTINEL, 1);
        v.assume_init()
    }
}

fn bytes_of<T>(v: &T) -> &[u8] {
    // SAFETY: reading the bytes of a live value as u8s.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

fn untouched<T>(v: &T) -> bool {
    bytes_of(v).iter().all(|&b| b == SENTINEL)
}

/// Decision storage as raw bytes: a failed call must leave the sentinel in
/// place, which is not a valid `bool`, so it is never read as a decision.
#[repr(C, align(8))]
struct RawDecision([u8; size_of::<ratecell_decision>()]);

impl RawDecision {
    fn new() -> RawDecision {
        RawDecision([SENTINEL; size_of::<ratecell_decision>()])
    }
    fn ptr(&mut self) -> *mut ratecell_decision {
        self.0.as_mut_ptr().cast()
    }
    fn untouched(&self) -> bool {
        self.0.iter().all(|&b| b == SENTINEL)
    }
    /// The decision, once a call reported writing it.
    fn get(&self) -> ratecell_decision {
        assert!(self.0[0] <= 1, "allowed is not a bool: {}", self.0[0]);
        // SAFETY: written by the library as a ratecell_decision.
        unsafe { std::ptr::read(self.0.as_ptr().cast()) }
    }
}

/// A multi-limit decision's storage as raw bytes, as [`RawDecision`].
#[repr(C, align(8))]
struct RawMulti([u8; size_of::<ratecell_multi_decision>()]);

impl RawMulti {
    fn new() -> RawMulti {
        RawMulti([SENTINEL; size_of::<ratecell_multi_decision>()])
    }
    fn ptr(&mut self) -> *mut ratecell_multi_decision {
        self.0.as_mut_ptr().cast()
    }
    fn untouched(&self) -> bool {
        self.0.iter().all(|&b| b == SENTINEL)
    }
    /// The decision, once a call reported writing it.
    fn get(&self) -> ratecell_multi_decision {
        let m: ratecell_multi_decision = {
            // Every `allowed` byte is checked before the struct is read.
            let off = std::mem::offset_of!(ratecell_multi_decision, decision);
            assert!(self.0[off] <= 1, "allowed is not a bool");
            let limits = std::mem::offset_of!(ratecell_multi_decision, limits);
            for i in 0..RATECELL_MAX_LIMITS {
                let at = limits + i * size_of::<ratecell_decision>();
                assert!(self.0[at] <= 1, "limit {i}'s allowed is not a bool");
            }
            // SAFETY: written by the library as a ratecell_multi_decision,
            // every bool checked above.
            unsafe { std::ptr::read(self.0.as_ptr().cast()) }
        };
        m
    }
}

/// How a limiter was made through the ABI: the configs, and for a tiered
/// limiter the limits per tier (`configs` then holds every tier's, tier
/// by tier).
enum Made<'a> {
    Limits(&'a [ratecell_config]),
    Tiers(&'a [ratecell_config], usize),
}

/// The Rust-API twin of a limiter made through the ABI: the same
/// configuration and (for a keyed limiter) the same hash key, on a manual
/// clock set to each call's time.
struct Twin {
    limiter: TwinLimiter,
    hand: ManualClock,
    /// The ABI limiter's clock is the coarse one, whose reads before and
    /// after a call agree when the call's own read is known exactly.
    coarse: bool,
}

enum TwinLimiter {
    Direct(Box<Limiter>),
    Keyed(Box<KeyedLimiter>),
}

impl Twin {
    /// The twin of the ABI limiter `l`, just made as `made` says. A keyed
    /// limiter hashes with a random key: the twin takes it from a snapshot
    /// of `l` (empty, so it restores no state).
    fn of(l: *const ratecell_limiter, made: &Made<'_>, seed: u64) -> Twin {
        let (raw, per_tier) = match *made {
            Made::Limits(raw) => (raw, None),
            Made::Tiers(raw, n) => (raw, Some(n)),
        };
        let configs: Vec<Config> = raw
            .iter()
            .map(|c| c.to_rust().expect("the ABI accepted it").0)
            .collect();
        let clock = raw[0].to_rust().expect("the ABI accepted it").1;
        let config = configs[0];
        let (manual, hand) = Clock::manual(T0);
        let limiter = if config.capacity == 0 {
            TwinLimiter::Direct(Box::new(
                Limiter::builder()
                    .limits(&configs)
                    .clock(manual)
                    .build()
                    .expect("the ABI accepted the configuration"),
            ))
        } else {
            let dir = std::env::temp_dir();
            let path = dir.join(format!("ratecell-fuzz-twin-{}.snap", std::process::id()));
            let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
            // SAFETY: `l` is live; the path is NUL-terminated.
            let s = unsafe { ratecell_snapshot_save_at(l, c_path.as_ptr(), T0) };
            assert_eq!(s, ratecell_status::RATECELL_OK, "seed {seed}: snapshot");
            let builder = match per_tier {
                None => KeyedLimiter::builder().limits(&configs),
                Some(n) => configs
                    .chunks(n)
                    .fold(KeyedLimiter::builder(), |b, tier| b.tier(tier)),
            };
            let keyed = builder
                .clock(manual)
                .states(States::snapshot(&path))
                .build()
                .expect("a fresh limiter's snapshot restores");
            std::fs::remove_file(&path).unwrap();
            TwinLimiter::Keyed(Box::new(keyed))
        };
        Twin {
            limiter,
            hand,
            coarse: clock == ratecell_clock::RATECELL_CLOCK_COARSE,
        }
    }

    fn check(&self, key: u64, cost: u64, t: u64) -> Decision {
        match &self.limiter {
            TwinLimiter::Direct(d) => d.check(Request::new(cost).at(t)),
            TwinLimiter::Keyed(k) => k.check(key, Request::new(cost).at(t)),
        }
    }

    fn check_bytes(&self, key: &[u8], cost: u64, t: u64) -> Decision {
        match &self.limiter {
            TwinLimiter::Direct(d) => d.check(Request::new(cost).at(t)),
            TwinLimiter::Keyed(k) => k.check(key, Request::new(cost).at(t)),
        }
    }

    fn reset(&self, key: &[u8]) {
        match &self.limiter {
            TwinLimiter::Direct(d) => d.reset(),
            TwinLimiter::Keyed(k) => {
                k.reset(key);
            }
        }
    }

    fn acquire(
        &self,
        key: &[u8],
        cost: u64,
        t: u64,
    ) -> Result<Decision, ratecell_lib::AcquireError> {
        self.hand.set(t);
        let zero = Duration::ZERO;
        match &self.limiter {
            TwinLimiter::Direct(d) => d.acquire(cost, zero),
            TwinLimiter::Keyed(k) => k.acquire(key, cost, zero),
        }
    }

    fn check_each(&self, key: Option<u64>, bytes: &[u8], cost: u64, t: u64) -> MultiDecision {
        match (&self.limiter, key) {
            (TwinLimiter::Direct(d), _) => d.check_each(Request::new(cost).at(t)),
            (TwinLimiter::Keyed(k), Some(key)) => k.check_each(key, Request::new(cost).at(t)),
            (TwinLimiter::Keyed(k), None) => k.check_each(bytes, Request::new(cost).at(t)),
        }
    }

    /// A check under `tier` (a direct limiter has tier 0 only), of the u64
    /// `key` or, when it is None, of `bytes`.
    fn check_tier(
        &self,
        key: Option<u64>,
        bytes: &[u8],
        tier: u32,
        cost: u64,
        t: u64,
    ) -> Result<MultiDecision, TierError> {
        let tier = tier as usize;
        match (&self.limiter, key) {
            (TwinLimiter::Direct(d), _) if tier == 0 => Ok(d.check_each(Request::new(cost).at(t))),
            (TwinLimiter::Direct(_), _) => Err(TierError { tier, tiers: 1 }),
            (TwinLimiter::Keyed(k), key) => {
                let request = Request::new(cost).at(t).tier(k.tier(tier)?);
                Ok(match key {
                    Some(key) => k.check_each(key, request),
                    None => k.check_each(bytes, request),
                })
            }
        }
    }

    fn acquire_tier(
        &self,
        key: &[u8],
        tier: u32,
        cost: u64,
        t: u64,
    ) -> Result<Result<Decision, AcquireError>, TierError> {
        self.hand.set(t);
        let (zero, tier) = (Duration::ZERO, tier as usize);
        match &self.limiter {
            TwinLimiter::Direct(d) if tier == 0 => Ok(d.acquire(cost, zero)),
            TwinLimiter::Direct(_) => Err(TierError { tier, tiers: 1 }),
            TwinLimiter::Keyed(k) => {
                Ok(k.acquire(key, Request::new(cost).tier(k.tier(tier)?), zero))
            }
        }
    }

    fn tiers(&self) -> usize {
        match &self.limiter {
            TwinLimiter::Direct(_) => 1,
            TwinLimiter::Keyed(k) => k.tiers(),
        }
    }

    fn stats(&self) -> ratecell_lib::Stats {
        match &self.limiter {
            TwinLimiter::Direct(d) => d.stats(),
            TwinLimiter::Keyed(k) => k.stats(),
        }
    }
}

/// The file persisted limiters are opened on (removed when the run ends).
fn persisted_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "ratecell-fuzz-persisted-{}.snap",
        std::process::id()
    ))
}

struct Fuzz {
    rng: Rng,
    seed: u64,
    made: u64,
    /// Of `made`: limiters of several limits, and tiered ones.
    made_multi: u64,
    made_tiered: u64,
    /// Limiters opened with `RATECELL_STATES_PERSISTED`.
    made_persisted: u64,
    refused: u64,
    calls: u64,
    /// Each slot's twin, while its calls' times are known.
    twins: [Option<Twin>; 4],
    /// Calls whose results were compared with a twin's.
    compared: u64,
    /// Twins given up because a call's time could not be known (the TSC
    /// clock, a coarse tick during the call, an acquire that may wait).
    lost: u64,
}

impl Fuzz {
    #[track_caller]
    fn status(&self, s: ratecell_status) {
        assert_ne!(
            s,
            ratecell_status::RATECELL_PANIC,
            "a panic was caught at the boundary (seed {})",
            self.seed
        );
    }

    #[track_caller]
    fn coherent(&self, d: &ratecell_decision) {
        if d.allowed {
            assert_eq!(d.retry_after_ns, 0, "seed {}: {d:?}", self.seed);
        } else {
            assert!(d.retry_after_ns >= 1, "seed {}: {d:?}", self.seed);
            assert_eq!(d.wait_ns, 0, "seed {}: {d:?}", self.seed);
        }
        assert!(d.remaining <= d.limit, "seed {}: {d:?}", self.seed);
    }

    /// After a call writing one decision.
    #[track_caller]
    fn after(&self, s: ratecell_status, d: &RawDecision) {
        self.status(s);
        use ratecell_status::*;
        match s {
            RATECELL_OK => self.coherent(&d.get()),
            RATECELL_TIMED_OUT | RATECELL_COST_EXCEEDS_LIMIT => {
                let d = d.get();
                self.coherent(&d);
                assert!(!d.allowed);
            }
            _ => assert!(d.untouched(), "seed {}: written on {s:?}", self.seed),
        }
    }

    /// The twin of `slot`, if `l` is that slot's live limiter.
    fn twin(
        &self,
        l: *const ratecell_limiter,
        slot: usize,
        slots: &[*mut ratecell_limiter; 4],
    ) -> Option<&Twin> {
        if l.is_null() || !std::ptr::eq(l, slots[slot]) {
            return None;
        }
        self.twins[slot].as_ref()
    }

    /// The time a call on `l` without one used: read before and after it
    /// (`before`), exact when a coarse clock did not tick meanwhile.
    /// Otherwise the twin can no longer follow, and is dropped.
    fn time_of(&mut self, slot: usize, l: *const ratecell_limiter, before: u64) -> Option<u64> {
        // SAFETY: `l` is live (the caller found its twin).
        let after = unsafe { ratecell_now_ns(l) };
        let twin = self.twins[slot].as_ref()?;
        if twin.coarse && before == after {
            Some(before)
        } else {
            self.twins[slot] = None;
            self.lost += 1;
            None
        }
    }

    /// Compares the ABI's decision with the twin's.
    #[track_caller]
    fn same(&mut self, abi: &ratecell_decision, twin: Decision, what: &str) {
        // Field by field, not through the ABI's own conversion of a
        // `Decision`: a fault in that conversion would be on both sides.
        let abi = (
            abi.allowed,
            abi.limit,
            abi.remaining,
            abi.retry_after_ns,
            abi.reset_after_ns,
            abi.wait_ns,
        );
        let twin = (
            twin.allowed,
            twin.limit,
            twin.remaining,
            twin.retry_after_ns,
            twin.reset_after_ns,
            twin.wait_ns,
        );
        assert_eq!(
            abi, twin,
            "seed {}: {what}: the ABI and the Rust API differ",
            self.seed
        );
        self.compared += 1;
    }

    /// A valid config, so the other calls have limiters to work on.
    fn valid_config(&mut self) -> ratecell_config {
        let r = &mut self.rng;
        let mut cfg: ratecell_config = poisoned();
        // SAFETY: cfg is a valid, writable config.
        unsafe {
            ratecell_config_init(
                &mut cfg,
                1 + r.below(7) as u32,
                1 + r.below(20),
                60_000_000 * (1 + r.below(100)),
            )
        };
        cfg.capacity = if r.chance(3) { 0 } else { 1 + r.below(64) };
        cfg.overflow = r.below(3) as u32;
        // Mostly the coarse clock: its time is known around a call, so
        // the twin can follow the calls that read the limiter's clock.
        cfg.clock = u32::from(!r.chance(4));
        cfg
    }

    fn config(&mut self) -> ratecell_config {
        if self.rng.chance(2) {
            return self.valid_config();
        }
        let r = &mut self.rng;
        let mut cfg: ratecell_config = poisoned();
        let (alg, limit, period) = (r.below(10) as u32, r.any(LIMITS), r.any(PERIODS));
        // SAFETY: cfg is a valid, writable config.
        unsafe { ratecell_config_init(&mut cfg, alg, limit, period) };
        if r.chance(4) {
            cfg.algorithm = r.next() as u32;
        }
        if r.chance(2) {
            cfg.burst = r.any(LIMITS);
        }
        if r.chance(2) {
            cfg.sub_windows = r.any(SUB_WINDOWS) as u32;
        }
        cfg.capacity = CAPACITIES[r.below(CAPACITIES.len() as u64) as usize];
        if r.chance(8) {
            cfg.overflow = r.below(4) as u32;
        }
        if r.chance(16) {
            cfg.clock = r.below(3) as u32;
        }
        cfg
    }

    /// One random call. `slots` holds live limiters (or NULL).
    fn step(&mut self, slots: &mut [*mut ratecell_limiter; 4]) {
        use ratecell_status::*;
        self.calls += 1;
        let slot = self.rng.below(4) as usize;
        let l: *const ratecell_limiter = if self.rng.chance(50) {
            null()
        } else {
            slots[slot]
        };
        let mut d = RawDecision::new();
        let mut bytes = [0u8; 80];
        for b in &mut bytes {
            *b = self.rng.next() as u8;
        }
        // SAFETY: for every call below, `l` is NULL or live, every
        // non-NULL pointer points to a buffer at least as long as the
        // length passed with it, or the length is impossible
        // (> PTRDIFF_MAX), which the library must refuse before reading.
        unsafe {
            match self.rng.below(25) {
                24 => self.persisted(),
                17 => self.make_multi(slot, slots),
                18 => self.make_tiered(slot, slots),
                19 => self.check_each(l, slot, slots, &bytes),
                20 => self.check_tier(l, slot, slots, &bytes),
                21 => self.batch_tier(l, slot, slots),
                22 => self.acquire_tier(l, slot, slots, &bytes),
                23 => {
                    let n = ratecell_limiter_tiers(l);
                    if l.is_null() {
                        assert_eq!(n, 0);
                    } else if let Some(twin) = self.twin(l, slot, slots) {
                        assert_eq!(n as usize, twin.tiers(), "seed {}: tiers", self.seed);
                        self.compared += 1;
                    }
                }
                0 => {
                    let cfg = self.config();
                    let mut out: *mut ratecell_limiter = poisoned();
                    let cfg_ptr = if self.rng.chance(40) {
                        null()
                    } else {
                        &cfg as *const _
                    };
                    let out_ptr = if self.rng.chance(40) {
                        null_mut()
                    } else {
                        &mut out as *mut _
                    };
                    let s = ratecell_limiter_new(cfg_ptr, out_ptr);
                    self.status(s);
                    if s == RATECELL_OK {
                        self.made += 1;
                        let mut back: ratecell_config = poisoned();
                        assert_eq!(ratecell_limiter_config(out, &mut back), RATECELL_OK);
                        assert_eq!((back.limit, back.capacity), (cfg.limit, cfg.capacity));
                        ratecell_limiter_free(slots[slot]);
                        slots[slot] = out;
                        let made = Made::Limits(std::slice::from_ref(&cfg));
                        self.twins[slot] = Some(Twin::of(out, &made, self.seed));
                    } else {
                        self.refused += 1;
                        assert!(untouched(&out), "seed {}", self.seed);
                    }
                }
                1 => {
                    if self.rng.chance(4) {
                        ratecell_limiter_free(slots[slot]);
                        slots[slot] = null_mut();
                        self.twins[slot] = None;
                    }
                }
                2 | 3 => {
                    let (key, cost, t) = (
                        self.rng.below(16),
                        self.rng.any(COSTS),
                        a_request_time(&mut self.rng),
                    );
                    let out = if self.rng.chance(40) {
                        null_mut()
                    } else {
                        d.ptr()
                    };
                    let s = ratecell_check(l, &request(key, None, 0, cost, Some(t)), out);
                    self.after(s, &d);
                    if let (RATECELL_OK, Some(twin)) = (s, self.twin(l, slot, slots)) {
                        let expected = twin.check(key, cost, t);
                        self.same(&d.get(), expected, "check_at");
                    }
                }
                4 => {
                    let (key, cost) = (self.rng.next(), self.rng.any(COSTS));
                    let before = ratecell_now_ns(l);
                    let s = ratecell_check(l, &request(key, None, 0, cost, None), d.ptr());
                    self.after(s, &d);
                    if s == RATECELL_OK && self.twin(l, slot, slots).is_some() {
                        if let Some(t) = self.time_of(slot, l, before) {
                            let expected = self.twins[slot].as_ref().unwrap().check(key, cost, t);
                            self.same(&d.get(), expected, "check");
                        }
                    }
                }
                5 | 6 => {
                    let mut len = self.rng.below(bytes.len() as u64 + 1) as usize;
                    let mut key = bytes.as_ptr();
                    match self.rng.below(10) {
                        0 => key = null(),
                        1 => len = isize::MAX as usize + 1 + self.rng.below(1000) as usize,
                        2 => (key, len) = (null(), 0),
                        _ => {}
                    }
                    let cost = self.rng.any(COSTS);
                    let before = ratecell_now_ns(l);
                    let at = self.rng.chance(2).then(|| a_request_time(&mut self.rng));
                    let s = ratecell_check(l, &request(0, Some((key, len)), 0, cost, at), d.ptr());
                    self.after(s, &d);
                    if s == RATECELL_OK && self.twin(l, slot, slots).is_some() {
                        let t = match at {
                            Some(t) => Some(t),
                            None => self.time_of(slot, l, before),
                        };
                        if let Some(t) = t {
                            let twin = self.twins[slot].as_ref().unwrap();
                            // No bytes (NULL) is the request's `key_id`, 0.
                            let expected = if key.is_null() {
                                twin.check(0, cost, t)
                            } else {
                                twin.check_bytes(&bytes[..len], cost, t)
                            };
                            self.same(&d.get(), expected, "check_bytes");
                        }
                    }
                    if !l.is_null() && key.is_null() && len > 0 {
                        assert_eq!(s, RATECELL_NULL_ARGUMENT);
                    }
                    if !l.is_null() && !key.is_null() && len > isize::MAX as usize {
                        assert_eq!(s, RATECELL_INVALID_LENGTH);
                    }
                }
                7 | 8 => self.batch(l, slot, slots),
                9 => {
                    // Short time-outs keep the run bounded.
                    let timeout = if self.rng.chance(4) {
                        self.rng.below(1_000_000)
                    } else {
                        0
                    };
                    let cost = self.rng.any(COSTS);
                    let key: Vec<u8> = if self.rng.chance(2) {
                        self.rng.below(8).to_le_bytes().to_vec()
                    } else {
                        bytes[..self.rng.below(9) as usize].to_vec()
                    };
                    let before = ratecell_now_ns(l);
                    let s = if key.len() == 8 && self.rng.chance(2) {
                        let k = u64::from_le_bytes(key[..].try_into().unwrap());
                        ratecell_acquire(l, &request(k, None, 0, cost, None), timeout, d.ptr())
                    } else {
                        let r = request(0, Some((key.as_ptr(), key.len())), 0, cost, None);
                        ratecell_acquire(l, &r, timeout, d.ptr())
                    };
                    self.after(s, &d);
                    let decided = matches!(
                        s,
                        RATECELL_OK | RATECELL_TIMED_OUT | RATECELL_COST_EXCEEDS_LIMIT
                    );
                    if decided && self.twin(l, slot, slots).is_some() {
                        // With time to wait, the ABI's acquire may decide
                        // again after a sleep, at a time the twin cannot know.
                        let t = if timeout == 0 {
                            self.time_of(slot, l, before)
                        } else {
                            self.twins[slot] = None;
                            self.lost += 1;
                            None
                        };
                        if let Some(t) = t {
                            let twin = self.twins[slot].as_ref().unwrap();
                            let (status, expected) = match twin.acquire(&key, cost, t) {
                                Ok(d) => (RATECELL_OK, d),
                                Err(ratecell_lib::AcquireError::TimedOut(d)) => {
                                    (RATECELL_TIMED_OUT, d)
                                }
                                Err(ratecell_lib::AcquireError::Unsatisfiable(d)) => {
                                    (RATECELL_COST_EXCEEDS_LIMIT, d)
                                }
                            };
                            assert_eq!(s, status, "seed {}: acquire", self.seed);
                            self.same(&d.get(), expected, "acquire");
                        }
                    }
                }
                10 => {
                    let key: Vec<u8> = if self.rng.chance(2) {
                        self.rng.below(8).to_le_bytes().to_vec()
                    } else {
                        bytes[..self.rng.below(9) as usize].to_vec()
                    };
                    let s = if key.len() == 8 && self.rng.chance(2) {
                        let k = u64::from_le_bytes(key[..].try_into().unwrap());
                        ratecell_reset(l, &request(k, None, 0, 1, None))
                    } else {
                        ratecell_reset(l, &request(0, Some((key.as_ptr(), key.len())), 0, 1, None))
                    };
                    self.status(s);
                    if s == RATECELL_OK && self.twin(l, slot, slots).is_some() {
                        // The reset must forget exactly what the twin's does:
                        // the key's state (a peek at it) and the counters.
                        self.twins[slot].as_ref().unwrap().reset(&key);
                        let t = a_request_time(&mut self.rng);
                        let peek = request(0, Some((key.as_ptr(), key.len())), 0, 0, Some(t));
                        let s = ratecell_check(l, &peek, d.ptr());
                        assert_eq!(s, RATECELL_OK);
                        let expected = self.twins[slot].as_ref().unwrap().check_bytes(&key, 0, t);
                        self.same(&d.get(), expected, "a peek after reset");
                        self.same_stats(l, slot);
                    }
                }
                11 => {
                    let mut st: ratecell_stats = poisoned();
                    let s = ratecell_stats(l, &mut st);
                    self.status(s);
                    if s == RATECELL_OK {
                        assert_eq!(st.checks, st.allowed + st.denied);
                        if self.twin(l, slot, slots).is_some() {
                            self.same_stats(l, slot);
                        }
                    } else {
                        assert!(untouched(&st));
                    }
                }
                12 => {
                    let now = ratecell_now_ns(l);
                    assert!(if l.is_null() { now == 0 } else { now > T0 / 2 });
                }
                13 => {
                    let v = if self.rng.chance(2) {
                        self.rng.below(20) as u32
                    } else {
                        self.rng.next() as u32
                    };
                    assert!(!ratecell_status_str(v).is_null());
                    let name = ratecell_algorithm_name(v);
                    if !name.is_null() {
                        let name = std::ffi::CStr::from_ptr(name).to_bytes();
                        let mut back = 0;
                        assert_eq!(
                            ratecell_algorithm_from_name(name.as_ptr(), name.len(), &mut back),
                            RATECELL_OK
                        );
                        assert_eq!(back, v);
                    }
                }
                14 => {
                    let mut a: u32 = poisoned();
                    let name = if self.rng.chance(8) {
                        null()
                    } else {
                        bytes.as_ptr()
                    };
                    let s = ratecell_algorithm_from_name(name, self.rng.below(16) as usize, &mut a);
                    self.status(s);
                    if s != RATECELL_OK {
                        assert!(untouched(&a));
                    }
                }
                15 => {
                    // The lean entry point: one key in, one status out.
                    let before = ratecell_now_ns(l);
                    let key = self.rng.below(16);
                    let s = ratecell_allow(l, key);
                    if l.is_null() {
                        assert_eq!(s, RATECELL_NULL_ARGUMENT, "seed {}", self.seed);
                        return;
                    }
                    assert!(
                        s == RATECELL_OK || s == RATECELL_DENIED,
                        "seed {}: allow answered {s:?}",
                        self.seed
                    );
                    let allowed = s == RATECELL_OK;
                    if self.twin(l, slot, slots).is_some() {
                        if let Some(t) = self.time_of(slot, l, before) {
                            let twin = self.twins[slot].as_ref().unwrap();
                            let expected = twin.check(key, 1, t).allowed;
                            assert_eq!(allowed, expected, "seed {}: allow", self.seed);
                            self.compared += 1;
                        }
                    }
                }
                _ => {
                    let mut cfg: ratecell_config = poisoned();
                    let s = ratecell_limiter_config(l, &mut cfg);
                    self.status(s);
                    if s != RATECELL_OK {
                        assert!(untouched(&cfg));
                    }
                }
            }
        }
    }

    /// `n` configs (at least 1) for a limiter of several limits or a
    /// tier: the first any, the others valid and mostly sharing its
    /// capacity, overflow and clock.
    fn related_configs(&mut self, n: usize) -> Vec<ratecell_config> {
        let first = self.config();
        let mut out = vec![first];
        for _ in 1..n.max(1) {
            let mut c = if self.rng.chance(8) {
                self.config()
            } else {
                self.valid_config()
            };
            if !self.rng.chance(8) {
                (c.capacity, c.overflow, c.clock) = (first.capacity, first.overflow, first.clock);
            }
            out.push(c);
        }
        out
    }

    /// Installs a limiter the ABI made (or counts a refusal) in `slot`.
    fn made(
        &mut self,
        s: ratecell_status,
        out: *mut ratecell_limiter,
        made: &Made<'_>,
        slot: usize,
        slots: &mut [*mut ratecell_limiter; 4],
    ) {
        self.status(s);
        if s == ratecell_status::RATECELL_OK {
            self.made += 1;
            match made {
                Made::Tiers(..) => self.made_tiered += 1,
                Made::Limits(c) if c.len() > 1 => self.made_multi += 1,
                Made::Limits(_) => {}
            }
            // SAFETY: the slot's limiter is NULL or live, freed once.
            unsafe { ratecell_limiter_free(slots[slot]) };
            slots[slot] = out;
            self.twins[slot] = Some(Twin::of(out, made, self.seed));
        } else {
            self.refused += 1;
            assert!(untouched(&out), "seed {}", self.seed);
        }
    }

    /// A count of limits for a limiter of several (0 and too many now and
    /// then) and that many related configs (at least one).
    fn multi_configs(&mut self) -> (Vec<ratecell_config>, usize) {
        let n = match self.rng.below(8) {
            0 => 0,
            1 => RATECELL_MAX_LIMITS + 1 + self.rng.below(3) as usize,
            _ => 1 + self.rng.below(4) as usize,
        };
        (self.related_configs(n), n)
    }

    /// Counts of limits and tiers (0 and too many now and then), and the
    /// tiers' configs tier by tier (one row when a count is 0).
    fn tiered_configs(&mut self) -> (Vec<ratecell_config>, usize, usize) {
        let r = &mut self.rng;
        let n_limits = match r.below(8) {
            0 => 0,
            1 => RATECELL_MAX_LIMITS + 1,
            _ => 1 + r.below(3) as usize,
        };
        let n_tiers = match r.below(8) {
            0 => 0,
            1 => RATECELL_MAX_TIERS + 1,
            _ => 1 + r.below(4) as usize,
        };
        let mut first = self.related_configs(n_limits);
        if first[0].capacity == 0 && !self.rng.chance(5) {
            let capacity = 1 + self.rng.below(64);
            for c in &mut first {
                c.capacity = capacity;
            }
        }
        // Every tier tier 0's limits with their own values, now and then
        // another algorithm (refused by name).
        let mut configs = Vec::new();
        for t in 0..n_tiers.max(1) {
            for c in &first {
                let mut c = *c;
                if t > 0 && !self.rng.chance(4) {
                    c.limit = 1 + self.rng.below(40);
                    c.burst = c.limit;
                }
                if t > 0 && self.rng.chance(32) {
                    c.algorithm = 1 + self.rng.below(7) as u32;
                }
                configs.push(c);
            }
        }
        (configs, n_limits, n_tiers)
    }

    /// Asserts the refusal of impossible counts of limits and tiers.
    fn counts_refused(&self, s: ratecell_status, n_limits: usize, n_tiers: usize) {
        let counts_ok = (1..=RATECELL_MAX_LIMITS).contains(&n_limits)
            && (1..=RATECELL_MAX_TIERS).contains(&n_tiers);
        if !counts_ok {
            assert_eq!(
                s,
                ratecell_status::RATECELL_INVALID_LENGTH,
                "seed {}",
                self.seed
            );
        }
    }

    /// A pointer to `configs`, or now and then NULL.
    fn configs_ptr(&mut self, configs: &[ratecell_config]) -> *const ratecell_config {
        if self.rng.chance(40) {
            null()
        } else {
            configs.as_ptr()
        }
    }

    fn make_multi(&mut self, slot: usize, slots: &mut [*mut ratecell_limiter; 4]) {
        let (configs, n) = self.multi_configs();
        let ptr = self.configs_ptr(&configs);
        let mut out: *mut ratecell_limiter = poisoned();
        // SAFETY: `configs` holds at least `n` configs, or `ptr` is NULL.
        let s = unsafe { ratecell_limiter_build(&options(ptr, n, 0), &mut out) };
        self.counts_refused(s, n, 1);
        self.made(s, out, &Made::Limits(&configs[..n.max(1)]), slot, slots);
    }

    fn make_tiered(&mut self, slot: usize, slots: &mut [*mut ratecell_limiter; 4]) {
        let (configs, n_limits, n_tiers) = self.tiered_configs();
        let ptr = self.configs_ptr(&configs);
        let mut out: *mut ratecell_limiter = poisoned();
        // SAFETY: `configs` holds `n_limits * n_tiers` configs (or one row
        // when a count is 0, which is refused before any is read).
        let s = unsafe { ratecell_limiter_build(&options(ptr, n_limits, n_tiers), &mut out) };
        if n_tiers == 0 {
            // No tiers: one list of limits (tier 0's row).
            self.counts_refused(s, n_limits, 1);
            let row = &configs[..n_limits.clamp(1, configs.len())];
            self.made(s, out, &Made::Limits(row), slot, slots);
            return;
        }
        self.counts_refused(s, n_limits, n_tiers);
        self.made(s, out, &Made::Tiers(&configs, n_limits.max(1)), slot, slots);
    }

    /// Opens a limiter saved periodically (`ratecell_limiter_build` with
    /// `RATECELL_STATES_PERSISTED`, of one limit, several or tiers) with
    /// arguments as random as the others' (NULLs, a wrong size, bad counts
    /// and configs, states out of range, a shared region beside them, a
    /// path in no directory, any period), over the file the last one left
    /// (so a restore, or a refused mismatch) or none. Once opened: its
    /// limiter checks, it saves and is freed, and the file it leaves
    /// restores through the Rust API with the same configs, and through
    /// `ratecell_limiter_build` with `RATECELL_STATES_SNAPSHOT`, with the
    /// same limits and with none (the file's own configuration).
    fn persisted(&mut self) {
        use ratecell_status::*;
        let path = persisted_path();
        if self.rng.chance(2) {
            let _ = std::fs::remove_file(&path);
        }
        let nowhere = self.rng.chance(16);
        let c_path = if nowhere {
            std::ffi::CString::new("/nonexistent-ratecell-dir/x.snap").unwrap()
        } else {
            std::ffi::CString::new(path.to_str().unwrap()).unwrap()
        };
        let path_ptr = if self.rng.chance(40) {
            null()
        } else {
            c_path.as_ptr()
        };
        let every = self.rng.any(&[0, 1, 1_000_000, 1_000_000_000, u64::MAX]);
        let mut out: *mut ratecell_limiter = poisoned();
        let out_ptr = if self.rng.chance(40) {
            null_mut()
        } else {
            &mut out as *mut _
        };
        // One limit, several, or tiers (`n_tiers` 0 now and then: one
        // list of limits, tier 0's row).
        let kind = self.rng.below(3);
        let (configs, n_limits, n_tiers) = match kind {
            0 => (vec![self.config()], 1, 0),
            1 => {
                let (configs, n) = self.multi_configs();
                (configs, n, 0)
            }
            _ => self.tiered_configs(),
        };
        let ptr = self.configs_ptr(&configs);
        let mut o = options(ptr, n_limits, n_tiers);
        o.states = ratecell_states::RATECELL_STATES_PERSISTED as u32;
        o.path = path_ptr;
        o.save_every_ns = every;
        let wrong_size = self.rng.chance(40);
        if wrong_size {
            o.size += 8;
        }
        let wrong_states = self.rng.chance(40);
        if wrong_states {
            o.states = self.rng.any(&[4, 5, u64::from(u32::MAX)]) as u32;
        }
        let region = std::ffi::CString::new("ratecell-fuzz-never-made").unwrap();
        let shared = self.rng.chance(40);
        if shared {
            o.shared_path = region.as_ptr();
        }
        let o_ptr: *const ratecell_options = if self.rng.chance(40) { null() } else { &o };
        // SAFETY: `o_ptr` is NULL or a live options whose `configs` holds
        // `n_limits * max(n_tiers, 1)` configs (one row when a count is
        // 0, refused before any is read) or is NULL, and whose `path` and
        // `shared_path` are NULL or NUL-terminated; `out_ptr` NULL or
        // writable.
        let s = unsafe { ratecell_limiter_build(o_ptr, out_ptr) };
        self.status(s);
        // Refused in this order: no place for the handle, no options, a
        // size this library does not know, the states (out of range, or a
        // shared region beside a file), impossible counts, no configs, a
        // config's field, no path.
        if out_ptr.is_null() || o_ptr.is_null() {
            assert_eq!(s, RATECELL_NULL_ARGUMENT, "seed {}", self.seed);
        } else if wrong_size {
            assert_eq!(s, RATECELL_INVALID_LENGTH, "seed {}", self.seed);
        } else if wrong_states || shared {
            assert_eq!(s, RATECELL_INVALID_STATES, "seed {}", self.seed);
        } else if n_limits == 0 && n_tiers == 0 && ptr.is_null() {
            // No limits and no configs: the file's own limits, when it
            // holds a snapshot (`ratecell_options.n_limits`); only then
            // can the call succeed.
            assert!(
                s != RATECELL_OK || (!path_ptr.is_null() && path.exists()),
                "seed {}: {s:?}",
                self.seed
            );
        } else {
            self.counts_refused(s, n_limits, n_tiers.max(1));
            if ptr.is_null() {
                assert!(
                    matches!(s, RATECELL_NULL_ARGUMENT | RATECELL_INVALID_LENGTH),
                    "seed {}: {s:?}",
                    self.seed
                );
            }
        }
        assert!(
            s != RATECELL_OK || !path_ptr.is_null(),
            "seed {}",
            self.seed
        );
        if shared {
            assert!(!std::path::Path::new("/dev/shm/ratecell-fuzz-never-made").exists());
        }
        if s != RATECELL_OK {
            assert!(untouched(&out), "seed {}: written on {s:?}", self.seed);
            return;
        }
        self.made_persisted += 1;
        // SAFETY: `out` is live until the free below.
        unsafe {
            for key in 0..4 {
                let mut d = RawDecision::new();
                let s = ratecell_check(out, &request(key, None, 0, 1, None), d.ptr());
                assert_eq!(s, RATECELL_OK, "seed {}: check", self.seed);
                self.coherent(&d.get());
            }
            // The saving thread may be writing the file too: both succeed,
            // or, in no directory, fail by name.
            let saved = if nowhere {
                RATECELL_SNAPSHOT_IO
            } else {
                RATECELL_OK
            };
            let s = ratecell_snapshot_save(out, c_path.as_ptr());
            assert_eq!(s, saved, "seed {}", self.seed);
            ratecell_limiter_free(out);
        }
        if nowhere {
            return;
        }
        let rust: Vec<Config> = configs[..n_limits * n_tiers.max(1)]
            .iter()
            .map(|c| c.to_rust().expect("the ABI accepted it").0)
            .collect();
        let (clock, _) = Clock::manual(T0);
        let builder = if n_tiers == 0 {
            AnyLimiter::builder().limits(&rust)
        } else {
            rust.chunks(n_limits)
                .fold(AnyLimiter::builder(), |b, tier| b.tier(tier))
        };
        let restored = builder
            .clock(clock)
            .states(States::snapshot(&path))
            .build()
            .map(drop);
        assert!(
            restored.is_ok(),
            "seed {}: the file a free left does not restore: {restored:?}",
            self.seed
        );
        let mut as_saved = options(null(), 0, 0);
        let mut same = o;
        for given in [&mut same, &mut as_saved] {
            given.states = ratecell_states::RATECELL_STATES_SNAPSHOT as u32;
            given.path = c_path.as_ptr();
            given.save_every_ns = 0;
            let mut back: *mut ratecell_limiter = null_mut();
            // SAFETY: `given` is the options accepted above, or none; the
            // path is NUL-terminated; `back` is writable.
            unsafe {
                let s = ratecell_limiter_build(given, &mut back);
                assert_eq!(s, RATECELL_OK, "seed {}: restore", self.seed);
                ratecell_limiter_free(back);
            }
        }
        self.compared += 1;
    }

    /// After a call writing one multi-limit decision.
    #[track_caller]
    fn after_multi(&self, s: ratecell_status, m: &RawMulti) {
        self.status(s);
        if s == ratecell_status::RATECELL_OK {
            let m = m.get();
            self.coherent(&m.decision);
            assert!((1..=RATECELL_MAX_LIMITS as u32).contains(&m.count));
        } else {
            assert!(m.untouched(), "seed {}: written on {s:?}", self.seed);
        }
    }

    /// Compares the ABI's multi-limit decision with the twin's, field by
    /// field.
    #[track_caller]
    fn same_multi(&mut self, abi: &ratecell_multi_decision, twin: &MultiDecision, what: &str) {
        self.same(&abi.decision, twin.decision, what);
        let denied = (abi.denied_by != RATECELL_NO_LIMIT).then_some(abi.denied_by as usize);
        assert_eq!(
            denied, twin.denied_by,
            "seed {}: {what}: denied_by",
            self.seed
        );
        assert_eq!(
            abi.count as usize,
            twin.limits().len(),
            "seed {}: {what}",
            self.seed
        );
        for (a, t) in abi.limits.iter().zip(twin.limits()) {
            self.same(a, *t, what);
        }
    }

    fn check_each(
        &mut self,
        l: *const ratecell_limiter,
        slot: usize,
        slots: &[*mut ratecell_limiter; 4],
        bytes: &[u8],
    ) {
        let mut m = RawMulti::new();
        let r = &mut self.rng;
        let (key, cost, len) = (r.below(16), r.any(COSTS), r.below(9) as usize);
        let at = r.chance(2).then(|| a_request_time(r));
        let by_bytes = r.chance(2);
        let out = if r.chance(40) { null_mut() } else { m.ptr() };
        let kb = &bytes[..len];
        // SAFETY: `l` is NULL or live; `kb` is `len` readable bytes.
        let s = unsafe {
            let before = ratecell_now_ns(l);
            let bytes = by_bytes.then_some((kb.as_ptr(), len));
            let s = ratecell_check_each(l, &request(key, bytes, 0, cost, at), out);
            self.after_multi(s, &m);
            (s, before)
        };
        let (s, before) = s;
        if s == ratecell_status::RATECELL_OK && self.twin(l, slot, slots).is_some() {
            let t = at.or_else(|| self.time_of(slot, l, before));
            if let Some(t) = t {
                let key = (!by_bytes).then_some(key);
                let expected = self.twins[slot]
                    .as_ref()
                    .unwrap()
                    .check_each(key, kb, cost, t);
                self.same_multi(&m.get(), &expected, "check_each");
            }
        }
    }

    /// A tier mostly below 5 (so some are past a limiter's last), now and
    /// then any.
    fn a_tier(&mut self) -> u32 {
        match self.rng.below(8) {
            0 => self.rng.next() as u32,
            1 => u32::MAX,
            _ => self.rng.below(5) as u32,
        }
    }

    fn check_tier(
        &mut self,
        l: *const ratecell_limiter,
        slot: usize,
        slots: &[*mut ratecell_limiter; 4],
        bytes: &[u8],
    ) {
        use ratecell_status::*;
        let tier = self.a_tier();
        let r = &mut self.rng;
        let (key, cost, len, form) = (r.below(16), r.any(COSTS), r.below(9) as usize, r.below(5));
        let t_given = a_request_time(r);
        let null_out = r.chance(40);
        let kb = &bytes[..len];
        let (mut d, mut m) = (RawDecision::new(), RawMulti::new());
        let (dp, mp) = if null_out {
            (null_mut(), null_mut())
        } else {
            (d.ptr(), m.ptr())
        };
        // SAFETY: `l` is NULL or live; `kb` is `len` readable bytes.
        let (s, before) = unsafe {
            let before = ratecell_now_ns(l);
            let bytes = matches!(form, 2 | 3).then_some((kb.as_ptr(), len));
            let at = matches!(form, 1 | 3 | 4).then_some(t_given);
            let r = request(key, bytes, tier, cost, at);
            let s = if form == 4 {
                ratecell_check_each(l, &r, mp)
            } else {
                ratecell_check(l, &r, dp)
            };
            (s, before)
        };
        if form == 4 {
            self.after_multi(s, &m);
        } else {
            self.after(s, &d);
        }
        if !matches!(s, RATECELL_OK | RATECELL_INVALID_TIER) || self.twin(l, slot, slots).is_none()
        {
            return;
        }
        let at = matches!(form, 1 | 3 | 4);
        let t = if at {
            Some(t_given)
        } else if s == RATECELL_OK {
            self.time_of(slot, l, before)
        } else {
            // Refused before any clock read: the twin refuses at any time.
            Some(t_given)
        };
        let Some(t) = t else { return };
        let key = matches!(form, 0 | 1 | 4).then_some(key);
        let expected = self.twins[slot]
            .as_ref()
            .unwrap()
            .check_tier(key, kb, tier, cost, t);
        match (s, expected) {
            (RATECELL_INVALID_TIER, Err(_)) => self.compared += 1,
            (RATECELL_OK, Ok(want)) if form == 4 => self.same_multi(&m.get(), &want, "check_tier"),
            (RATECELL_OK, Ok(want)) => self.same(&d.get(), want.decision, "check_tier"),
            (s, want) => panic!(
                "seed {}: tier {tier}: the ABI says {s:?}, the twin {want:?}",
                self.seed
            ),
        }
    }

    fn batch_tier(
        &mut self,
        l: *const ratecell_limiter,
        slot: usize,
        slots: &[*mut ratecell_limiter; 4],
    ) {
        use ratecell_status::*;
        const MAX: usize = 32;
        let r = &mut self.rng;
        let n = r.below(MAX as u64 + 1) as usize;
        let keys: Vec<u64> = (0..MAX).map(|_| r.below(8)).collect();
        let costs: Vec<u64> = (0..MAX).map(|_| r.any(COSTS)).collect();
        // Mostly tiers every limiter of that many has; now and then one
        // past them, which refuses the whole batch.
        let most = 1 + r.below(4);
        let mut tiers: Vec<u32> = (0..MAX).map(|_| r.below(most) as u32).collect();
        if r.chance(8) {
            let i = r.below(MAX as u64) as usize;
            tiers[i] = r.next() as u32;
        }
        let mut allowed = [SENTINEL; MAX];
        let mut decisions: Vec<RawDecision> = (0..MAX).map(|_| RawDecision::new()).collect();
        let tp = if r.chance(16) { null() } else { tiers.as_ptr() };
        let c = if r.chance(2) { costs.as_ptr() } else { null() };
        let ds = if r.chance(2) {
            decisions[0].ptr()
        } else {
            null_mut()
        };
        let at = r.chance(2).then(|| a_request_time(r));
        // SAFETY: `l` is NULL or live; buffers of MAX >= n elements.
        let (s, before) = unsafe {
            let before = ratecell_now_ns(l);
            let b = batch(keys.as_ptr(), c, tp, n, at);
            let s = ratecell_check_batch(l, &b, allowed.as_mut_ptr(), ds);
            (s, before)
        };
        self.status(s);
        // No tiers (NULL) is tier 0 for every request.
        let tier_of = |i: usize| if tp.is_null() { 0 } else { tiers[i] };
        if s != RATECELL_OK {
            assert!(allowed.iter().all(|&b| b == SENTINEL), "seed {}", self.seed);
            assert!(decisions.iter().all(RawDecision::untouched));
        }
        let Some(twin) = self.twin(l, slot, slots) else {
            return;
        };
        let beyond = (0..n).any(|i| tier_of(i) as usize >= twin.tiers());
        if !matches!(s, RATECELL_OK | RATECELL_INVALID_TIER) {
            return;
        }
        assert_eq!(
            s == RATECELL_INVALID_TIER,
            beyond,
            "seed {}: batch_tier {s:?}",
            self.seed
        );
        if s != RATECELL_OK {
            self.compared += 1;
            return;
        }
        let Some(t) = at.or_else(|| self.time_of(slot, l, before)) else {
            return;
        };
        // The batch is the same tiered checks made one by one.
        for i in 0..n {
            let cost = if c.is_null() { 1 } else { costs[i] };
            let twin = self.twins[slot].as_ref().unwrap();
            let expected = twin
                .check_tier(Some(keys[i]), &[], tier_of(i), cost, t)
                .expect("every tier was below the twin's")
                .decision;
            if ds.is_null() {
                assert_eq!(
                    allowed[i] == 1,
                    expected.allowed,
                    "seed {}: batch_tier",
                    self.seed
                );
                self.compared += 1;
            } else {
                self.same(&decisions[i].get(), expected, "batch_tier");
            }
        }
    }

    fn acquire_tier(
        &mut self,
        l: *const ratecell_limiter,
        slot: usize,
        slots: &[*mut ratecell_limiter; 4],
        bytes: &[u8],
    ) {
        use ratecell_status::*;
        let tier = self.a_tier();
        let r = &mut self.rng;
        // Short time-outs keep the run bounded.
        let timeout = if r.chance(8) { r.below(1_000_000) } else { 0 };
        let cost = r.any(COSTS);
        let key: Vec<u8> = if r.chance(2) {
            r.below(8).to_le_bytes().to_vec()
        } else {
            bytes[..r.below(9) as usize].to_vec()
        };
        let by_u64 = key.len() == 8 && r.chance(2);
        let mut d = RawDecision::new();
        // SAFETY: `l` is NULL or live; `key` is `key.len()` readable bytes.
        let (s, before) = unsafe {
            let before = ratecell_now_ns(l);
            let r = if by_u64 {
                let k = u64::from_le_bytes(key[..].try_into().unwrap());
                request(k, None, tier, cost, None)
            } else {
                request(0, Some((key.as_ptr(), key.len())), tier, cost, None)
            };
            let s = ratecell_acquire(l, &r, timeout, d.ptr());
            (s, before)
        };
        self.after(s, &d);
        let decided = matches!(
            s,
            RATECELL_OK | RATECELL_TIMED_OUT | RATECELL_COST_EXCEEDS_LIMIT
        );
        if !(decided || s == RATECELL_INVALID_TIER) || self.twin(l, slot, slots).is_none() {
            return;
        }
        let t = if s == RATECELL_INVALID_TIER {
            Some(T0)
        } else if timeout == 0 {
            self.time_of(slot, l, before)
        } else {
            // With time to wait, the ABI's acquire may decide again after a
            // sleep, at a time the twin cannot know.
            self.twins[slot] = None;
            self.lost += 1;
            None
        };
        let Some(t) = t else { return };
        let twin = self.twins[slot].as_ref().unwrap();
        let (status, expected) = match twin.acquire_tier(&key, tier, cost, t) {
            Err(_) => (RATECELL_INVALID_TIER, None),
            Ok(Ok(d)) => (RATECELL_OK, Some(d)),
            Ok(Err(AcquireError::TimedOut(d))) => (RATECELL_TIMED_OUT, Some(d)),
            Ok(Err(AcquireError::Unsatisfiable(d))) => (RATECELL_COST_EXCEEDS_LIMIT, Some(d)),
        };
        assert_eq!(s, status, "seed {}: acquire_tier {tier}", self.seed);
        match expected {
            Some(want) => self.same(&d.get(), want, "acquire_tier"),
            None => self.compared += 1,
        }
    }

    /// Compares the ABI limiter's counters with its twin's.
    fn same_stats(&mut self, l: *const ratecell_limiter, slot: usize) {
        let mut st: ratecell_stats = poisoned();
        // SAFETY: `l` is live, `st` writable.
        let status = unsafe { ratecell_stats(l, &mut st) };
        assert_eq!(status, ratecell_status::RATECELL_OK);
        // Field by field, as in `same`.
        let twin = self.twins[slot].as_ref().unwrap().stats();
        let abi = [
            st.checks,
            st.allowed,
            st.denied,
            st.keys_tracked,
            st.evictions,
            st.overflows,
            st.capacity,
            st.bytes_allocated,
            st.evicted_live,
        ];
        let twin = [
            twin.checks,
            twin.allowed,
            twin.denied,
            twin.keys_tracked,
            twin.evictions,
            twin.overflows,
            twin.capacity,
            twin.bytes_allocated,
            twin.evicted_live,
        ];
        assert_eq!(
            abi, twin,
            "seed {}: counters differ from the twin's",
            self.seed
        );
        self.compared += 1;
    }

    fn batch(
        &mut self,
        l: *const ratecell_limiter,
        slot: usize,
        slots: &[*mut ratecell_limiter; 4],
    ) {
        use ratecell_status::*;
        const MAX: usize = 64;
        let r = &mut self.rng;
        let mut n = r.below(MAX as u64 + 1) as usize;
        let keys: Vec<u64> = (0..MAX).map(|_| r.below(8)).collect();
        let costs: Vec<u64> = (0..MAX).map(|_| r.any(COSTS)).collect();
        let mut allowed = [SENTINEL; MAX];
        let mut decisions: Vec<RawDecision> = (0..MAX).map(|_| RawDecision::new()).collect();
        let (mut k, mut a) = (keys.as_ptr(), allowed.as_mut_ptr());
        let mut impossible = false;
        match r.below(12) {
            0 => k = null(),
            1 => a = null_mut(),
            2 => (n, impossible) = (usize::MAX - r.below(3) as usize, true),
            3 => (n, impossible) = (usize::MAX / 48 + 1, true),
            _ => {}
        }
        let c = if r.chance(2) { costs.as_ptr() } else { null() };
        let ds = if r.chance(2) {
            decisions[0].ptr()
        } else {
            null_mut()
        };
        let at = r.chance(2).then(|| a_request_time(r));
        // SAFETY: `l` is NULL or live.
        let before = unsafe { ratecell_now_ns(l) };
        // SAFETY: buffers of MAX elements, n <= MAX unless impossible (refused
        // before any access).
        let s = unsafe { ratecell_check_batch(l, &batch(k, c, null(), n, at), a, ds) };
        self.status(s);
        if s == RATECELL_OK {
            for i in 0..n {
                assert!(allowed[i] <= 1);
                if !ds.is_null() {
                    let d = decisions[i].get();
                    self.coherent(&d);
                    assert_eq!(d.allowed, allowed[i] == 1);
                }
            }
            if self.twin(l, slot, slots).is_some() {
                let t = match at {
                    Some(t) => Some(t),
                    None => self.time_of(slot, l, before),
                };
                if let Some(t) = t {
                    // The batch is the same checks made one by one.
                    for i in 0..n {
                        let cost = if c.is_null() { 1 } else { costs[i] };
                        let expected = self.twins[slot].as_ref().unwrap().check(keys[i], cost, t);
                        if ds.is_null() {
                            assert_eq!(
                                allowed[i] == 1,
                                expected.allowed,
                                "seed {}: batch",
                                self.seed
                            );
                            self.compared += 1;
                        } else {
                            self.same(&decisions[i].get(), expected, "batch");
                        }
                    }
                }
            }
        } else {
            assert!(allowed.iter().all(|&b| b == SENTINEL));
            assert!(decisions.iter().all(RawDecision::untouched));
        }
        if !l.is_null() && impossible && !k.is_null() && !a.is_null() {
            assert_eq!(s, RATECELL_INVALID_LENGTH);
        }
    }
}

/// Set in the child process that runs the fuzz alone.
const ALONE: &str = "RATECELL_FUZZ_ALONE";

#[test]
fn random_call_sequences_never_panic_leak_or_lie() {
    // The leak check counts every allocation in the process, and the
    // crate's other unit tests run in this one: so the fuzz runs in a
    // child process running this test alone.
    if std::env::var_os(ALONE).is_none() {
        let path = module_path!().split_once("::").map_or("", |(_, p)| p);
        let name = format!("{path}::random_call_sequences_never_panic_leak_or_lie");
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &name, "--nocapture", "--test-threads=1"])
            .env(ALONE, "1")
            .output()
            .unwrap();
        // Printed here, so the harness shows it as this test's output.
        print!("{}", String::from_utf8_lossy(&child.stdout));
        eprint!("{}", String::from_utf8_lossy(&child.stderr));
        assert!(
            child.status.success(),
            "the fuzz failed: its output is above"
        );
        return;
    }
    let secs: f64 = std::env::var("RATECELL_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let seed: u64 = std::env::var("RATECELL_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });

    // Warm up what the library keeps for the whole process (the coarse
    // clock's shared time and thread), so it is not counted as a leak.
    let mut cfg: ratecell_config = poisoned();
    // SAFETY: valid pointers to local values.
    unsafe {
        ratecell_config_init(&mut cfg, 1, 10, 1_000_000_000);
        cfg.clock = 1;
        let mut l = null_mut();
        assert_eq!(
            ratecell_limiter_new(&cfg, &mut l),
            ratecell_status::RATECELL_OK
        );
        // The clock thread frees its start-up allocations once it runs:
        // wait for its first tick so that is not counted as a free either.
        let first = ratecell_now_ns(l);
        let started = Instant::now();
        while ratecell_now_ns(l) == first && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        ratecell_limiter_free(l);
    }
    let live_before = LIVE.load(Relaxed);

    let mut fuzz = Fuzz {
        rng: Rng(seed.wrapping_mul(2) | 1),
        seed,
        made: 0,
        made_multi: 0,
        made_tiered: 0,
        made_persisted: 0,
        refused: 0,
        calls: 0,
        twins: Default::default(),
        compared: 0,
        lost: 0,
    };
    let mut slots = [null_mut(); 4];
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < deadline {
        for _ in 0..100 {
            fuzz.step(&mut slots);
        }
    }
    for l in slots {
        // SAFETY: each slot is NULL or a live handle, freed once.
        unsafe { ratecell_limiter_free(l) };
    }
    fuzz.twins = Default::default();
    let _ = std::fs::remove_file(persisted_path());
    let live_after = LIVE.load(Relaxed);
    assert_eq!(live_after, live_before, "allocations leaked (seed {seed})");
    assert!(
        fuzz.made > 0
            && fuzz.refused > 0
            && fuzz.made_multi > 0
            && fuzz.made_tiered > 0
            && fuzz.made_persisted > 0,
        "seed {seed}: {} made ({} of several limits, {} tiered), {} persisted, {} refused",
        fuzz.made,
        fuzz.made_multi,
        fuzz.made_tiered,
        fuzz.made_persisted,
        fuzz.refused
    );
    println!(
        "{} calls, {} limiters made ({} of several limits, {} tiered), {} persisted opened, {} configs refused, {} results compared with a twin, {} twins lost to unknown times (seed {seed})",
        fuzz.calls,
        fuzz.made,
        fuzz.made_multi,
        fuzz.made_tiered,
        fuzz.made_persisted,
        fuzz.refused,
        fuzz.compared,
        fuzz.lost
    );
    // Not vacuous: most results were compared.
    assert!(
        fuzz.compared * 4 > fuzz.calls,
        "seed {seed}: only {} of {} calls compared with a twin",
        fuzz.compared,
        fuzz.calls
    );
}

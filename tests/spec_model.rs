//! `Limiter::check` at explicit times against the reference model of SPEC.md §4
//! (`tests/model`), on random configurations and request traces, for every
//! algorithm; and configuration validation against SPEC.md §2.
//!
//! Two kinds of configuration: small ones (limits up to 20, periods of 1 to
//! 10 µs) so that windows roll, tokens refill and logs expire many times
//! within a trace of a few dozen requests; and large ones (limits up to
//! 2^32 − 1, periods up to 366 days, times up to 2^62) for the overflow
//! edges. Traces mix peeks, cost 1, larger costs and costs above the limit,
//! with time standing still, creeping, jumping whole periods, landing on
//! window edges, and going backwards.
//!
//! proptest only generates raw integers here, decoded into steps and costs
//! by the plain functions below and in `tests/model/trace.rs`: its
//! `prop_oneof!` costs about 100 µs per
//! value in a debug build, which would make 10 000 traces per algorithm
//! take minutes.

mod model;

use model::trace::{
    Step, advance, edge, fit_large, has_burst, large_cost, large_start, pick, proptest_config,
    small_config, small_cost, small_start, within,
};
use model::{MAX_LIMIT, MAX_PERIOD, MIN_PERIOD, Model, config_faults};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratecell::{Algorithm, Clock, Config, Error, Field, Limiter, Overflow, Request, SnapshotError};

/// The direct sliding log allocates and touches 16 bytes per unit of limit
/// when it is built (2 GiB at 2^27), so no test here builds one with a
/// larger limit: several test threads doing so at once would exhaust the
/// machine.
const LOG_LIMIT_CAP: u64 = 1 << 16;

#[derive(Clone, Debug)]
struct Case {
    config: Config,
    start: u64,
    requests: Vec<(Step, u64)>,
}

/// What proptest generates: a configuration, a start time and requests, as
/// raw integers (selector, value) that `small`/`large`/`crowded` decode.
#[derive(Clone, Debug)]
struct Raw {
    config: (u64, u64, u64, u64),
    start: (u8, u64),
    requests: Vec<(u8, u64, u8, u64)>,
}

fn raw(max_len: usize) -> impl Strategy<Value = Raw> {
    (
        any::<(u64, u64, u64, u64)>(),
        any::<(u8, u64)>(),
        prop::collection::vec(any::<(u8, u64, u8, u64)>(), 1..max_len),
    )
        .prop_map(|(config, start, requests)| Raw {
            config,
            start,
            requests,
        })
}

/// Replays `case` into a fresh limiter and a fresh model, comparing every
/// decision field by field; and into a twin limiter that answers the cost-1
/// requests through `allow()` (the yes/no path that computes nothing else,
/// on the clock) and `check` at an explicit time in turn, which must
/// admit exactly the same requests.
fn compare(case: &Case) -> Result<(), TestCaseError> {
    let (clock, _hand) = Clock::manual(0);
    let limiter = Limiter::builder()
        .limit(case.config)
        .clock(clock)
        .build()
        .map_err(|e| TestCaseError::fail(format!("valid config refused: {e}")))?;
    let (twin_clock, twin_hand) = Clock::manual(0);
    let twin = Limiter::builder()
        .limit(case.config)
        .clock(twin_clock)
        .build()
        .unwrap();
    let mut model = Model::new(&case.config);
    let mut t = case.start;
    let mut seen = Vec::new();
    for &(step, cost) in &case.requests {
        t = advance(&case.config, t, step);
        let got = limiter.check(Request::new(cost).at(t));
        let want = model.check(t, cost);
        seen.push((t, cost, got.allowed));
        let (twin_allowed, path) = match cost {
            1 if seen.len() % 2 == 0 => {
                twin_hand.set(t);
                (twin.allow(), "allow()")
            }
            1 => (
                twin.check(Request::new(1).at(t)).allowed,
                "check(Request::new(1).at(t))",
            ),
            _ => (
                twin.check(Request::new(cost).at(t)).allowed,
                "check(Request::new(cost).at(t))",
            ),
        };
        prop_assert_eq!(
            twin_allowed,
            want.allowed,
            "the twin's {} disagrees\nconfig {:?}\nrequests so far (t, cost, allowed): {:?}",
            path,
            case.config,
            seen
        );
        prop_assert_eq!(
            got,
            want,
            "\nconfig {:?}\nrequests so far (t, cost, allowed): {:?}",
            case.config,
            seen
        );
    }
    Ok(())
}

/// Limits 1..=20, periods 1..=10 µs (multiples of N for the bucketed
/// window), bursts 1..=25 or the limit.
fn small(alg: Algorithm, raw: &Raw) -> Case {
    let config = small_config(alg, raw.config);
    let p = config.period_ns;
    let cap = config.limit.max(config.burst);
    let start = small_start(p, raw.start);
    let requests = raw
        .requests
        .iter()
        .map(|&(s, x, c, y)| {
            let step = match pick(s, &[3, 3, 2, 2, 1, 2, 1, 1]) {
                0 => Step::Forward(0),
                1 => Step::Forward(within(x, 1, p / 8)),
                2 => Step::Forward(within(x, 1, 2 * p)),
                3 => Step::Forward(within(x, 1, 3) * p),
                4 => Step::Forward(within(x, 1, 25 * p)),
                5 => edge(x),
                6 => Step::Back(within(x, 1, p)),
                _ => Step::Back(within(x, 1, 2) * p),
            };
            (step, small_cost(c, y, cap))
        })
        .collect();
    Case {
        config,
        start,
        requests,
    }
}

/// A count (limit or burst) near the edges of 1..=2^32 − 1.
fn large_count(s: u8, x: u64) -> u64 {
    match pick(s, &[1, 1, 1, 1, 1]) {
        0 => 1,
        1 => MAX_LIMIT,
        2 => within(x, 1, MAX_LIMIT),
        3 => within(x, MAX_LIMIT - 64, MAX_LIMIT),
        _ => within(x, 1, 1_000),
    }
}

/// A valid configuration with values near every range edge: limits and
/// bursts up to 2^32 − 1, periods up to 366 days.
fn large_config(alg: Algorithm, (a, b, c, d): (u64, u64, u64, u64)) -> Config {
    let limit = large_count(a as u8, a >> 8);
    let mut period = match pick(b as u8, &[1, 1, 1, 1, 1]) {
        0 => MIN_PERIOD,
        1 => MAX_PERIOD,
        2 => within(b >> 8, MIN_PERIOD, MAX_PERIOD),
        3 => within(b >> 8, MAX_PERIOD - 1_000_000, MAX_PERIOD),
        _ => within(b >> 8, MIN_PERIOD, 1_000_000_000),
    };
    let burst = if c % 2 == 0 {
        0
    } else {
        large_count((c >> 1) as u8, c >> 9)
    };
    let n = within(d, 1, 64);
    if alg == Algorithm::BucketedWindow {
        period = (period / n).max(MIN_PERIOD.div_ceil(n)) * n;
    }
    fit_large(alg, limit, period, burst, n, LOG_LIMIT_CAP)
}

fn large(alg: Algorithm, raw: &Raw) -> Case {
    let config = large_config(alg, raw.config);
    let p = config.period_ns;
    let cap = config.limit.max(config.burst);
    let start = large_start(p, raw.start);
    let requests = raw
        .requests
        .iter()
        .map(|&(s, x, c, y)| {
            let step = match pick(s, &[2, 2, 2, 1, 2, 1, 1, 1]) {
                0 => Step::Forward(0),
                1 => Step::Forward(within(x, 1, 1_000)),
                2 => Step::Forward(within(x, 1, 3).saturating_mul(p)),
                3 => Step::Forward(within(x, 0, 1 << 61)),
                4 => edge(x),
                5 => Step::Back(within(x, 1, 1_000)),
                6 => Step::Back(p),
                _ => Step::Back(within(x, 0, 1 << 61)),
            };
            (step, large_cost(c, y, cap))
        })
        .collect();
    Case {
        config,
        start,
        requests,
    }
}

/// Limits in the hundreds and long traces of mostly cost-1 requests close
/// together: logs and counters holding many entries at once.
fn crowded(alg: Algorithm, raw: &Raw) -> Case {
    let (a, b, c, _) = raw.config;
    let limit = within(a, 100, 600);
    let period = within(b, 1_000, 4_000);
    let config = if alg == Algorithm::BucketedWindow {
        let n = within(c, 1, 64);
        Config::new(alg, limit, (period / n).max(MIN_PERIOD.div_ceil(n)) * n).sub_windows(n as u32)
    } else {
        Config::new(alg, limit, period)
    };
    let requests = raw
        .requests
        .iter()
        .map(|&(s, x, c, y)| {
            let step = match pick(s, &[6, 6, 1, 1]) {
                0 => Step::Forward(0),
                1 => Step::Forward(within(x, 1, period / 64)),
                2 => Step::Forward(within(x, 1, period)),
                _ => Step::Back(within(x, 1, period / 4)),
            };
            let cost = match pick(c, &[8, 1, 1]) {
                0 => 1,
                1 => 0,
                _ => within(y, 2, 20),
            };
            (step, cost)
        })
        .collect();
    Case {
        config,
        start: within(raw.start.1, 0, 1 << 40),
        requests,
    }
}

macro_rules! against_model {
    ($($name:ident: $alg:expr;)*) => {$(
        mod $name {
            use super::*;

            proptest! {
                #![proptest_config(proptest_config(10_000))]
                #[test]
                fn small_configs(raw in raw(40)) {
                    compare(&small($alg, &raw))?;
                }
            }

            proptest! {
                #![proptest_config(proptest_config(3_000))]
                #[test]
                fn large_configs(raw in raw(24)) {
                    compare(&large($alg, &raw))?;
                }
            }

            proptest! {
                #![proptest_config(proptest_config(60))]
                #[test]
                fn crowded_configs(raw in raw(700)) {
                    compare(&crowded($alg, &raw))?;
                }
            }
        }
    )*};
}

against_model! {
    gcra: Algorithm::Gcra;
    leaky_bucket: Algorithm::LeakyBucket;
    token_bucket: Algorithm::TokenBucket;
    fixed_window: Algorithm::FixedWindow;
    sliding_window: Algorithm::SlidingWindow;
    bucketed_window: Algorithm::BucketedWindow;
    sliding_log: Algorithm::SlidingLog;
}

// ---------------------------------------------------------------------------
// Configuration validation (SPEC.md §2, brief item 10).

/// Pushes one field out of its range, or breaks one cross-field rule,
/// chosen by `s`.
fn break_one(mut cfg: Config, s: u8, x: u64) -> Config {
    match pick(s, &[2, 2, 2, 2, 1, 1, 1]) {
        0 => {
            cfg.limit = match x % 3 {
                0 => 0,
                1 => MAX_LIMIT + 1,
                _ => within(x, MAX_LIMIT + 1, u64::MAX),
            };
            cfg.burst = 0;
        }
        1 => {
            cfg.period_ns = match x % 4 {
                0 => within(x, 0, MIN_PERIOD - 1),
                1 => MIN_PERIOD - 1,
                2 => MAX_PERIOD + 1,
                _ => within(x, MAX_PERIOD + 1, u64::MAX),
            }
        }
        2 => {
            cfg.burst = match x % 3 {
                0 => MAX_LIMIT + 1,
                1 => within(x, MAX_LIMIT + 1, u64::MAX),
                // Valid for the burst algorithms, wrong for the others
                // unless it happens to equal the limit.
                _ => within(x, 1, MAX_LIMIT),
            }
        }
        3 => {
            cfg.sub_windows = match x % 3 {
                0 => 0,
                1 => within(x, 65, u32::MAX.into()) as u32,
                _ => within(x, 1, 64) as u32,
            }
        }
        4 => cfg.capacity = within(x, 1, u64::MAX),
        5 => {
            // More than one unit per ns.
            cfg.period_ns = MIN_PERIOD + cfg.period_ns % 100_000;
            cfg.limit = cfg.period_ns + 1;
            cfg.burst = 0;
        }
        _ => {
            // B·T far beyond 2^62 ns.
            cfg.limit = 1;
            cfg.period_ns = MAX_PERIOD;
            cfg.burst = MAX_LIMIT;
        }
    }
    cfg
}

proptest! {
    #![proptest_config(proptest_config(10_000))]

    /// Every configuration the model calls valid is accepted; every one it
    /// refuses is refused naming a field at fault, and exactly that field
    /// when only one is.
    #[test]
    fn refused_configs_name_the_field(
        alg in 0usize..7,
        base in any::<(u64, u64, u64, u64)>(),
        breaks in prop::collection::vec(any::<(u8, u64)>(), 0..3),
        overflow_allow in any::<bool>(),
    ) {
        let alg = Algorithm::ALL[alg];
        let mut cfg = large_config(alg, base);
        for &(s, x) in &breaks {
            cfg = break_one(cfg, s, x);
        }
        if overflow_allow {
            // Meaningless for a direct limiter, but not an error.
            cfg = cfg.overflow(Overflow::Allow);
        }
        let faults = config_faults(&cfg, true);
        // A valid config gets built, and a huge log would really be allocated.
        let huge_log = cfg.algorithm == Algorithm::SlidingLog && cfg.limit > LOG_LIMIT_CAP;
        if faults.is_empty() && huge_log {
            return Ok(());
        }
        let (clock, _hand) = Clock::manual(0);
        match Limiter::builder().limit(cfg).clock(clock).build() {
            Ok(_) => prop_assert!(faults.is_empty(), "{:?} accepted; model faults {:?}", cfg, faults),
            Err(SnapshotError::Limiter(Error::Config(e))) => {
                prop_assert!(!e.message.is_empty(), "an error without a message");
                if faults.len() == 1 {
                    prop_assert_eq!(e.field, faults[0], "{:?}: {}", cfg, e);
                } else {
                    prop_assert!(faults.contains(&e.field), "{:?}: {} not among {:?}", cfg, e, faults);
                }
            }
            Err(e) => prop_assert!(false, "{:?}: unexpected {}", cfg, e),
        }
    }
}

#[test]
fn each_range_edge_is_refused_or_accepted() {
    let ok = |cfg: Config| {
        let (clock, _hand) = Clock::manual(0);
        if let Err(e) = Limiter::builder().limit(cfg).clock(clock).build() {
            panic!("{cfg:?} should be valid: {e}");
        }
        assert!(config_faults(&cfg, true).is_empty(), "model: {cfg:?}");
    };
    let refused = |cfg: Config, field: Field| {
        let (clock, _hand) = Clock::manual(0);
        match Limiter::builder().limit(cfg).clock(clock).build() {
            Err(SnapshotError::Limiter(Error::Config(e))) => {
                assert_eq!(e.field, field, "{cfg:?}: {e}")
            }
            other => panic!("{cfg:?} should be refused on {field:?}, got {other:?}"),
        }
        assert_eq!(config_faults(&cfg, true), vec![field], "model: {cfg:?}");
    };
    for alg in Algorithm::ALL {
        let base = Config::new(alg, 10, 1_000_000_000);
        ok(base);
        ok(Config::new(alg, 1, MIN_PERIOD));
        ok(Config::new(alg, 1, MAX_PERIOD));
        if alg != Algorithm::SlidingLog {
            // (The log allocates 16 bytes per unit of limit up front.)
            ok(Config::new(alg, MAX_LIMIT, MAX_PERIOD));
        }
        ok(base.burst(10));
        refused(Config::new(alg, 0, 1_000_000_000), Field::Limit);
        refused(Config::new(alg, MAX_LIMIT + 1, MAX_PERIOD), Field::Limit);
        refused(Config::new(alg, 1, MIN_PERIOD - 1), Field::PeriodNs);
        refused(Config::new(alg, 1, MAX_PERIOD + 1), Field::PeriodNs);
        refused(Config::new(alg, 1, 0), Field::PeriodNs);
        refused(base.capacity(1), Field::Capacity);
        if has_burst(alg) {
            ok(base.burst(1));
            ok(base.burst(MAX_LIMIT));
            refused(base.burst(MAX_LIMIT + 1), Field::Burst);
        } else {
            refused(base.burst(9), Field::Burst);
            refused(base.burst(11), Field::Burst);
        }
        // sub_windows matters to the bucketed window only.
        let odd = Config::new(alg, 10, 1_000_000_007).sub_windows(10);
        if alg == Algorithm::BucketedWindow {
            refused(odd, Field::SubWindows);
            refused(base.sub_windows(0), Field::SubWindows);
            refused(base.sub_windows(65), Field::SubWindows);
            ok(Config::new(alg, 10, 64_000).sub_windows(64));
            ok(base.sub_windows(1));
        } else {
            ok(odd);
            ok(base.sub_windows(0));
            ok(base.sub_windows(65));
        }
        if matches!(alg, Algorithm::Gcra | Algorithm::LeakyBucket) {
            ok(Config::new(alg, 1_000, 1_000));
            refused(Config::new(alg, 1_001, 1_000), Field::Limit);
            refused(
                Config::new(alg, 1, MAX_PERIOD).burst(MAX_LIMIT),
                Field::Burst,
            );
            // The largest burst whose tolerance B·T stays below 2^62 ns.
            let b = ((1u64 << 62) - 1) / MAX_PERIOD;
            ok(Config::new(alg, 1, MAX_PERIOD).burst(b));
            refused(Config::new(alg, 1, MAX_PERIOD).burst(b + 1), Field::Burst);
        } else {
            ok(Config::new(alg, 1_001, 1_000));
        }
    }
}

/// The leaky bucket's queue positions on a queue filled at one instant: a
/// named, readable case of what the properties check at random.
#[test]
fn leaky_queue_positions_match_model() {
    let cfg = Config::new(Algorithm::LeakyBucket, 4, 4_000).burst(3);
    let (clock, _hand) = Clock::manual(0);
    let limiter = Limiter::builder().limit(cfg).clock(clock).build().unwrap();
    let mut model = Model::new(&cfg);
    let waits: Vec<u64> = (0..4)
        .map(|_| {
            let d = limiter.check(Request::new(1).at(10_000));
            assert_eq!(d, model.check(10_000, 1));
            d.wait_ns
        })
        .collect();
    assert_eq!(waits, [0, 1_000, 2_000, 0]);
}

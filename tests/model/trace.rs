//! The trace generators shared by the property tests: proptest generates
//! only raw integers there (its `prop_oneof!` is far too slow in a debug
//! build for that many cases), and these plain functions decode them into
//! configurations, start times, clock steps and costs.
//!
//! Only what the tests decode the same way lives here; each test file keeps
//! the decoders in which it differs (step weights, large configurations).

use super::{MAX_TOLERANCE, MIN_PERIOD};
use proptest::test_runner::Config as ProptestConfig;
use ratecell::{Algorithm, Config};

/// Test times stay below 2^62 (brief item 5).
pub const T_MAX: u64 = (1 << 62) - 1;

/// How the clock moves before a request or an operation.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Forward by this many ns (0: the same instant).
    Forward(u64),
    /// Backward by this many ns (clamped at 0).
    Back(u64),
    /// To the next multiple of the period (`coarse`) or of the algorithm's
    /// finer unit (sub-window, emission interval), plus -1, 0 or +1 ns.
    Edge { coarse: bool, offset: i8 },
}

/// Arm `i` with probability `weights[i] / sum(weights)`.
pub fn pick(selector: u8, weights: &[u8]) -> usize {
    let total: u32 = weights.iter().map(|&w| u32::from(w)).sum();
    let mut x = u32::from(selector) % total;
    for (i, &w) in weights.iter().enumerate() {
        if x < u32::from(w) {
            return i;
        }
        x -= u32::from(w);
    }
    unreachable!()
}

/// A value in `lo..=hi` from raw bits.
pub fn within(x: u64, lo: u64, hi: u64) -> u64 {
    match (hi - lo).checked_add(1) {
        Some(span) => lo + x % span,
        None => x,
    }
}

pub fn has_burst(alg: Algorithm) -> bool {
    matches!(
        alg,
        Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
    )
}

/// The finer time unit an algorithm's decisions change on.
pub fn fine_unit(cfg: &Config) -> u64 {
    match cfg.algorithm {
        Algorithm::Gcra | Algorithm::LeakyBucket => cfg.period_ns.div_ceil(cfg.limit),
        Algorithm::BucketedWindow => cfg.period_ns / u64::from(cfg.sub_windows),
        _ => cfg.period_ns,
    }
}

pub fn edge(x: u64) -> Step {
    Step::Edge {
        coarse: x & 1 == 1,
        offset: ((x >> 1) % 3) as i8 - 1,
    }
}

pub fn advance(cfg: &Config, t: u64, step: Step) -> u64 {
    match step {
        Step::Forward(d) => t.saturating_add(d).min(T_MAX),
        Step::Back(d) => t.saturating_sub(d),
        Step::Edge { coarse, offset } => {
            let unit = if coarse {
                cfg.period_ns
            } else {
                fine_unit(cfg)
            };
            let edge = (t / unit).saturating_add(1).saturating_mul(unit);
            edge.saturating_add_signed(offset.into()).min(T_MAX)
        }
    }
}

/// Limits 1..=20, periods 1..=10 µs (multiples of N for the bucketed
/// window), bursts 1..=25 or the limit.
pub fn small_config(alg: Algorithm, (a, b, c, d): (u64, u64, u64, u64)) -> Config {
    let limit = within(a, 1, 20);
    let mut config = if alg == Algorithm::BucketedWindow {
        let n = within(b, 1, 64);
        let k = within(c, MIN_PERIOD.div_ceil(n), 10_000 / n);
        Config::new(alg, limit, k * n).sub_windows(n as u32)
    } else {
        Config::new(alg, limit, within(c, MIN_PERIOD, 10_000))
    };
    if d % 2 == 1 {
        config = config.burst(if has_burst(alg) {
            within(d / 2, 1, 25)
        } else {
            limit
        });
    }
    config
}

/// A start time for a small configuration of period `p`: within a few
/// periods of 0, on or just before a period edge, or anywhere below 2^61.
pub fn small_start(p: u64, (s, x): (u8, u64)) -> u64 {
    match pick(s, &[1, 1, 1, 1]) {
        0 => within(x, 0, 4 * p),
        1 => within(x, 0, 1_000_000) * p,
        2 => within(x, 1, 1_000_000) * p - 1,
        _ => within(x, 0, 1 << 61),
    }
}

/// A cost for a small configuration whose limit or burst is at most `cap`:
/// 1, a peek, up to the cap, just above it, or `u64::MAX`.
pub fn small_cost(c: u8, y: u64, cap: u64) -> u64 {
    match pick(c, &[5, 2, 3, 1, 1]) {
        0 => 1,
        1 => 0,
        2 => within(y, 1, cap),
        3 => within(y, cap + 1, cap + 3),
        _ => u64::MAX,
    }
}

/// The configuration of a large case from its drawn `limit`, `period`,
/// `burst` (0: none) and `sub_windows`, made valid: GCRA and the leaky
/// bucket get at most one unit per ns and a tolerance below 2^62 ns, the
/// sliding log a limit of at most `log_limit_cap`, and the algorithms
/// without a burst a burst of 0 or the limit.
pub fn fit_large(
    alg: Algorithm,
    mut limit: u64,
    period: u64,
    mut burst: u64,
    n: u64,
    log_limit_cap: u64,
) -> Config {
    if matches!(alg, Algorithm::Gcra | Algorithm::LeakyBucket) {
        limit = limit.min(period);
        let interval = u128::from(period.div_ceil(limit));
        let b = if burst == 0 { limit } else { burst };
        if u128::from(b) * interval >= MAX_TOLERANCE {
            burst = ((MAX_TOLERANCE - 1) / interval) as u64;
        }
    }
    if alg == Algorithm::SlidingLog {
        limit = limit.min(log_limit_cap);
    }
    if !has_burst(alg) && burst != 0 {
        burst = limit;
    }
    Config::new(alg, limit, period)
        .burst(burst)
        .sub_windows(n as u32)
}

/// A start time for a large configuration of period `p`: anywhere up to
/// `T_MAX`, close below it, within the first period, or `T_MAX` itself.
pub fn large_start(p: u64, (s, x): (u8, u64)) -> u64 {
    match pick(s, &[1, 1, 1, 1]) {
        0 => within(x, 0, T_MAX),
        1 => within(x, T_MAX - (1 << 40), T_MAX),
        2 => within(x, 0, p),
        _ => T_MAX,
    }
}

/// A cost for a large configuration whose limit or burst is at most `cap`:
/// 1, a peek, and values around the cap and far above it.
pub fn large_cost(c: u8, y: u64, cap: u64) -> u64 {
    match pick(c, &[3, 1, 2, 1, 1, 1, 1, 1, 1]) {
        0 => 1,
        1 => 0,
        2 => within(y, 1, cap),
        3 => cap / 2,
        4 => cap - 1,
        5 => cap,
        6 => cap + 1,
        7 => within(y, 1 << 32, u64::MAX),
        _ => u64::MAX,
    }
}

pub fn proptest_config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Regression files would land in the shared tree; a failure prints
        // its minimal case instead.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

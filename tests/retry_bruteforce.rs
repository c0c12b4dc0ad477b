//! `retry_after_ns`, `reset_after_ns` and `remaining` checked by brute force
//! against the real limiter, for every algorithm, on small periods.
//!
//! A limiter is not `Clone`, but it does not need to be: a denied request and
//! a peek store nothing (SPEC.md §3), so after replaying a trace and a final
//! request at `t`, the same limiter can be asked again and again at later
//! times. Every `t + x` with `x < retry_after` must deny the same request
//! (which leaves the state alone), and `t + retry_after` must admit it; every
//! peek before `t + reset_after` must show `remaining < limit`, and the one at
//! `t + reset_after` must show `remaining == limit`. `remaining` itself is
//! checked on a fresh replay by admitting cost-1 requests at `t` until one is
//! denied.
//!
//! Two sources of traces: random ones with every offset scanned (up to a
//! few thousand per probe), and every trace over a small grid of times and
//! costs around period and sub-period edges, checking the boundaries only.

mod model;

use model::trace::{has_burst, proptest_config};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratecell::{Algorithm, Clock, Config, Decision, Limiter, Request};

/// A trace, then the request whose decision is under test.
#[derive(Clone, Debug)]
struct Setup {
    config: Config,
    /// `(t, cost)`, in order; times may go backwards.
    trace: Vec<(u64, u64)>,
    probe: (u64, u64),
}

fn replay(s: &Setup) -> (Limiter, Decision) {
    let (clock, _hand) = Clock::manual(0);
    let limiter = Limiter::builder()
        .limit(s.config)
        .clock(clock)
        .build()
        .expect("test configs are valid");
    for &(t, n) in &s.trace {
        limiter.check(Request::new(n).at(t));
    }
    let d = limiter.check(Request::new(s.probe.1).at(s.probe.0));
    (limiter, d)
}

/// The offsets of `lo..hi` to try: all of them when `full` and there are at
/// most `SCAN` of them; otherwise both ends and an even spread in between.
fn offsets(lo: u64, hi: u64, full: bool) -> Vec<u64> {
    const SCAN: u64 = 4_096;
    if lo >= hi {
        return Vec::new();
    }
    if !full {
        let mut v = vec![lo, hi - 1];
        v.dedup();
        return v;
    }
    if hi - lo <= SCAN {
        return (lo..hi).collect();
    }
    let mut v: Vec<u64> = (lo..lo + SCAN / 4).collect();
    v.extend((hi - SCAN / 4)..hi);
    let stride = (hi - lo) / (SCAN / 2);
    v.extend((0..SCAN / 2).map(|i| lo + i * stride));
    v
}

fn verify(s: &Setup, full: bool) -> Result<(), String> {
    let (t, n) = s.probe;
    let q = n.max(1);
    let (limiter, d) = replay(s);
    let fail = |what: String| Err(format!("{what}\n  decision {d:?}\n  setup {s:?}"));

    // reset_after: the least wait after which a peek shows a fresh state.
    let fresh_at = |x: u64| limiter.check(Request::new(0).at(t + x)).remaining == d.limit;
    for x in offsets(0, d.reset_after_ns, full) {
        if fresh_at(x) {
            return fail(format!("fresh already at t + {x}, before reset_after"));
        }
    }
    if !fresh_at(d.reset_after_ns) {
        return fail("not fresh at t + reset_after".into());
    }

    // retry_after: the least wait after which the same request is admitted.
    if d.allowed {
        if d.retry_after_ns != 0 {
            return fail("admitted with a non-zero retry_after".into());
        }
    } else if d.retry_after_ns == u64::MAX {
        if q <= d.limit {
            return fail(format!("retry never, yet cost {q} <= limit"));
        }
        let much_later = t + 1_000 * s.config.period_ns;
        if limiter.check(Request::new(n).at(much_later)).allowed {
            return fail("retry never, yet admitted 1000 periods later".into());
        }
    } else {
        if q > d.limit {
            return fail(format!("cost {q} > limit, yet retry is finite"));
        }
        if d.retry_after_ns == 0 {
            return fail("denied with retry_after 0".into());
        }
        for x in offsets(1, d.retry_after_ns, full) {
            if limiter.check(Request::new(n).at(t + x)).allowed {
                return fail(format!("admitted at t + {x}, before retry_after"));
            }
        }
        if !limiter
            .check(Request::new(n).at(t + d.retry_after_ns))
            .allowed
        {
            return fail("denied at t + retry_after".into());
        }
    }

    // remaining: how many cost-1 requests a fresh replay admits at t.
    let (limiter, again) = replay(s);
    if again != d {
        return fail(format!("replay decided differently: {again:?}"));
    }
    let admitted = (0..=d.limit)
        .take_while(|_| limiter.check(Request::new(1).at(t)).allowed)
        .count() as u64;
    if admitted != d.remaining {
        return fail(format!("{admitted} cost-1 requests admitted at t"));
    }
    Ok(())
}

/// A value in `lo..=hi` from raw bits.
fn within(x: u64, lo: u64, hi: u64) -> u64 {
    lo + x % (hi - lo + 1)
}

/// Limits 1..=6, periods 1..=2 µs (multiples of N for the bucketed window),
/// bursts 1..=8 or the limit; then a trace with times moving by 0, a little,
/// about a period, or backwards, and costs 0, 1, up to the cap, or above it.
/// What proptest generates for one setup: config bits and request bits.
type RawSetup = ((u64, u64, u64, u64), Vec<(u64, u64)>);

fn random_setup(alg: Algorithm, raw: &RawSetup) -> Setup {
    let ((a, b, c, start), ref requests) = *raw;
    let limit = within(a, 1, 6);
    let mut config = if alg == Algorithm::BucketedWindow {
        let n = within(b, 1, 16);
        let k = within(c, 1_000u64.div_ceil(n), 2_000 / n);
        Config::new(alg, limit, k * n).sub_windows(n as u32)
    } else {
        Config::new(alg, limit, within(c, 1_000, 2_000))
    };
    if has_burst(alg) && b % 3 != 0 {
        config = config.burst(within(b >> 8, 1, 8));
    }
    let p = config.period_ns;
    let cap = config.limit.max(config.burst);
    let mut t = within(start, 5 * p, 1_000 * p);
    let mut trace: Vec<(u64, u64)> = requests
        .iter()
        .map(|&(x, y)| {
            t = match x % 8 {
                0 | 1 => t,
                2 | 3 => t + within(x >> 3, 1, p / 4),
                4 => t + within(x >> 3, 1, 2 * p),
                5 => t + within(x >> 3, 1, 3) * p,
                6 => t.saturating_sub(within(x >> 3, 1, p)),
                _ => t.saturating_sub(within(x >> 3, 1, 2) * p),
            };
            let cost = match y % 8 {
                0..=3 => 1,
                4 => 0,
                5 | 6 => within(y >> 3, 1, cap),
                _ => cap + 1,
            };
            (t, cost)
        })
        .collect();
    let probe = trace.pop().expect("at least one request");
    Setup {
        config,
        trace,
        probe,
    }
}

macro_rules! brute_force {
    ($($name:ident: $alg:expr;)*) => {$(
        mod $name {
            use super::*;

            proptest! {
                #![proptest_config(proptest_config(1_000))]
                #[test]
                fn random_traces_scanned(
                    raw in (any::<(u64, u64, u64, u64)>(),
                            prop::collection::vec(any::<(u64, u64)>(), 1..16)),
                ) {
                    verify(&random_setup($alg, &raw), true).map_err(TestCaseError::fail)?;
                }
            }

            #[test]
            fn every_grid_trace() {
                grid($alg);
            }
        }
    )*};
}

brute_force! {
    gcra: Algorithm::Gcra;
    leaky_bucket: Algorithm::LeakyBucket;
    token_bucket: Algorithm::TokenBucket;
    fixed_window: Algorithm::FixedWindow;
    sliding_window: Algorithm::SlidingWindow;
    bucketed_window: Algorithm::BucketedWindow;
    sliding_log: Algorithm::SlidingLog;
}

/// Every trace of two requests and a probe over a grid of times around the
/// period's and the algorithm's finer edges (in any order, so time also goes
/// back), with costs 0, 1, 2 (and, for the probe, one above the cap).
fn grid(alg: Algorithm) {
    let configs: Vec<Config> = match alg {
        Algorithm::Gcra | Algorithm::LeakyBucket => vec![
            Config::new(alg, 3, 1_000).burst(2),
            Config::new(alg, 2, 1_000),
            Config::new(alg, 1, 1_000).burst(3),
        ],
        Algorithm::TokenBucket => vec![
            Config::new(alg, 2, 1_000).burst(3),
            Config::new(alg, 1, 1_000).burst(1),
            Config::new(alg, 3, 1_000).burst(2),
        ],
        Algorithm::BucketedWindow => vec![
            Config::new(alg, 2, 1_000).sub_windows(4),
            Config::new(alg, 3, 1_200).sub_windows(3),
        ],
        _ => vec![Config::new(alg, 2, 1_000), Config::new(alg, 3, 1_200)],
    };
    let mut checked = 0;
    for config in configs {
        let p = config.period_ns;
        let unit = match alg {
            Algorithm::Gcra | Algorithm::LeakyBucket => p.div_ceil(config.limit),
            Algorithm::BucketedWindow => p / u64::from(config.sub_windows),
            _ => p / 3,
        };
        let t0 = 7 * p;
        let times: Vec<u64> = [0, 1, unit - 1, unit, p / 2, p - 1, p, 2 * p - 1]
            .iter()
            .map(|x| t0 + x)
            .collect();
        let cap = config.limit.max(config.burst);
        let requests: Vec<(u64, u64)> = times
            .iter()
            .flat_map(|&t| [0, 1, 2].map(|n| (t, n)))
            .collect();
        let probes: Vec<(u64, u64)> = times
            .iter()
            .flat_map(|&t| [0, 1, 2, cap + 1].map(|n| (t, n)))
            .collect();
        for &first in &requests {
            for &second in &requests {
                for &probe in &probes {
                    let setup = Setup {
                        config,
                        trace: vec![first, second],
                        probe,
                    };
                    if let Err(e) = verify(&setup, false) {
                        panic!("{e}");
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 10_000, "the grid shrank to {checked} traces");
}

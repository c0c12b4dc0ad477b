//! The experiment driver every command runs on: a policy (a direct or keyed
//! limiter) checked at explicit times, the classic retrying-clients
//! experiment in simulated and in real time, open-loop traffic, a greedy
//! client, and the measures taken from admission times.
//!
//! Simulations never read a real clock: limiters are built on a manual
//! clock and every check passes its time, so a run is exact, reproducible
//! and as fast as the arithmetic.

use ratecell::{AnyLimiter, Clock, Config, Error, KeyedLimiter, Limiter, Request, SnapshotError};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Where simulated time starts: 2023-11-15 00:00:00 UTC, a whole number of
/// days, so windows of any period that divides a day start with the run.
pub const EPOCH_NS: u64 = 1_700_006_400_000_000_000;

/// One second in ns.
pub const SECOND: u64 = 1_000_000_000;

/// A limiter as the simulations see it: checked at explicit times, with
/// one state shared by every key (direct) or one per key (keyed).
pub type Policy = AnyLimiter;

/// The error of a limiter built fresh: its configuration's, the only way
/// a build that reads no snapshot fails.
pub fn fresh<L>(built: Result<L, SnapshotError>) -> Result<L, Error> {
    built.map_err(|e| match e {
        SnapshotError::Limiter(e) => e,
        e => unreachable!("a fresh limiter read no snapshot, yet: {e}"),
    })
}

/// A direct limiter on a manual clock that nobody moves: simulations pass
/// every time explicitly.
pub fn sim_limiter(config: Config) -> Result<Limiter, Error> {
    fresh(Limiter::builder().limit(config).clock(sim_clock()).build())
}

/// A keyed limiter on a manual clock (`config.capacity` keys).
pub fn sim_keyed(config: Config) -> Result<KeyedLimiter, Error> {
    fresh(
        KeyedLimiter::builder()
            .limit(config)
            .clock(sim_clock())
            .build(),
    )
}

/// A clock that stays at [`EPOCH_NS`]: every check passes its own time.
fn sim_clock() -> Clock {
    Clock::manual(EPOCH_NS).0
}

/// A policy on a manual clock: one shared state when `config.capacity` is
/// 0, else one per key.
pub fn policy(config: Config) -> Result<Policy, Error> {
    fresh(
        AnyLimiter::builder()
            .limit(config)
            .clock(sim_clock())
            .build(),
    )
}

/// Several limits checked as one on a manual clock (one limit is
/// [`policy`]): one shared state when the capacity is 0, else one per key.
pub fn policy_multi(configs: &[Config]) -> Result<Policy, Error> {
    fresh(
        AnyLimiter::builder()
            .limits(configs)
            .clock(sim_clock())
            .build(),
    )
}

/// A keyed policy of tiers (one config each), each check naming its tier.
pub fn keyed_policy_tiered(tiers: &[Config]) -> Result<Policy, Error> {
    Ok(AnyLimiter::Keyed(fresh(
        tiers
            .iter()
            .fold(KeyedLimiter::builder(), |b, c| {
                b.tier(std::slice::from_ref(c))
            })
            .clock(sim_clock())
            .build(),
    )?))
}

/// Several limits as one, one state per key, always.
pub fn keyed_policy_multi(configs: &[Config]) -> Result<Policy, Error> {
    Ok(AnyLimiter::Keyed(fresh(
        KeyedLimiter::builder()
            .limits(configs)
            .clock(sim_clock())
            .build(),
    )?))
}

/// One phase of the classic experiment: `rate` new requests per second for
/// `length_ns`.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    /// Offered requests per second (divides 10^9).
    pub rate: u64,
    /// How long requests keep arriving.
    pub length_ns: u64,
}

impl Phase {
    /// Requests the phase offers.
    pub fn requests(&self) -> u64 {
        self.rate * self.length_ns / SECOND
    }

    /// The gap between two new requests.
    pub fn interval_ns(&self) -> u64 {
        SECOND / self.rate
    }
}

/// What one phase of the classic experiment measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct PhaseOutcome {
    /// Requests offered (all are eventually admitted).
    pub requests: u64,
    /// From the phase's first request until both the last request was sent
    /// and the last admitted one was processed.
    pub duration_ns: u64,
    /// Checks that were denied (each is retried).
    pub denials: u64,
}

impl PhaseOutcome {
    /// Requests processed per second over the phase.
    pub fn processed_rate(&self) -> f64 {
        self.requests as f64 / (self.duration_ns as f64 / SECOND as f64)
    }
}

/// The classic experiment of the seed "Rate Limiting Part 1", in simulated
/// time: each phase sends a new request every `1/rate` s, a denied request
/// retries after `retry_ns` until admitted, and the next phase starts when
/// the sender is done and every request of this one has been processed (for
/// the leaky bucket, when it has left the queue: `t + wait_ns`). Requests
/// due at the same instant are checked in the order they were first sent.
///
/// Retries are not checked one by one (the 100/s phase alone makes millions):
/// a denial's `retry_after_ns` is the least wait before a cost-1 request can
/// be admitted, and nothing is admitted meanwhile, so every check before
/// that instant is denied too. A client's checks fall on its own grid
/// (`arrival + k·retry`), so a client admitted at `A` after arriving at `a`
/// was denied exactly `(A − a) / retry` times. Clients sharing a grid are
/// kept in one queue, in sending order; only the first check on or after
/// the blocked-until instant is made. A test checks this against the plain
/// one-check-per-retry simulation.
pub fn classic_simulated(
    config: Config,
    start_ns: u64,
    phases: &[Phase],
    retry_ns: u64,
) -> Result<Vec<PhaseOutcome>, Error> {
    let limiter = sim_limiter(config)?;
    let mut start = start_ns;
    let mut out = Vec::with_capacity(phases.len());
    for phase in phases {
        let (n, gap) = (phase.requests(), phase.interval_ns());
        // Waiting clients by grid (arrival mod retry): (grid, arrivals).
        let mut grids: Vec<(u64, VecDeque<u64>)> = Vec::new();
        let mut sent = 0;
        let mut blocked_until = 0;
        let mut now = start;
        let mut done = start;
        let mut denials = 0;
        loop {
            // The earliest instant a waiting client checks and may pass.
            let from = blocked_until.max(now);
            let tick = grids
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(g, _)| {
                    let base = from - from % retry_ns + g;
                    if base >= from { base } else { base + retry_ns }
                })
                .min();
            let arrival = (sent < n).then(|| start + sent * gap);
            // A client arriving at the same instant as a tick checks after
            // the older ones, so it joins its queue first.
            let (a, t) = match (arrival, tick) {
                (None, None) => break,
                (Some(a), Some(t)) if a <= t => (Some(a), None),
                (Some(a), None) => (Some(a), None),
                (_, Some(t)) => (None, Some(t)),
            };
            if let Some(a) = a {
                let g = a % retry_ns;
                match grids.iter_mut().find(|(grid, _)| *grid == g) {
                    Some((_, q)) => q.push_back(a),
                    None => grids.push((g, VecDeque::from([a]))),
                }
                sent += 1;
                now = a;
            } else if let Some(t) = t {
                now = t;
                let g = t % retry_ns;
                let (_, queue) = grids
                    .iter_mut()
                    .find(|(grid, _)| *grid == g)
                    .expect("a tick comes from a grid");
                while let Some(&a) = queue.front() {
                    let d = limiter.check(Request::new(1).at(t));
                    if !d.allowed {
                        blocked_until = t + d.retry_after_ns;
                        break;
                    }
                    queue.pop_front();
                    denials += (t - a) / retry_ns;
                    done = done.max(t + d.wait_ns);
                }
            }
        }
        let end = done.max(start + n * gap);
        out.push(PhaseOutcome {
            requests: n,
            duration_ns: end - start,
            denials,
        });
        start = end;
    }
    Ok(out)
}

/// The same experiment in real time: the limiter reads the real clock, each
/// request is a thread that checks, sleeps `retry` when denied and checks
/// again. Returns the limiter's time at the start (so a simulation can be
/// started at the same point of the window grid) and the outcomes.
pub fn classic_real(
    config: Config,
    phases: &[Phase],
    retry: Duration,
) -> Result<(u64, Vec<PhaseOutcome>), Error> {
    let limiter = Arc::new(fresh(Limiter::builder().limit(config).build())?);
    let start_ns = limiter.now_ns();
    let mut out = Vec::with_capacity(phases.len());
    for phase in phases {
        let started = Instant::now();
        let start = limiter.now_ns();
        let denials = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicU64::new(start));
        let mut clients = Vec::new();
        for i in 0..phase.requests() {
            let (limiter, denials, done) = (limiter.clone(), denials.clone(), done.clone());
            clients.push(std::thread::spawn(move || {
                loop {
                    let d = limiter.check(1);
                    if d.allowed {
                        std::thread::sleep(Duration::from_nanos(d.wait_ns));
                        done.fetch_max(limiter.now_ns(), Ordering::Relaxed);
                        return;
                    }
                    denials.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(retry);
                }
            }));
            // Pace against the phase's start, not the previous send, so
            // the offered rate does not drift with thread start-up time.
            let next = started + Duration::from_nanos((i + 1) * phase.interval_ns());
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        let sent = limiter.now_ns();
        for c in clients {
            c.join().expect("a client thread panicked");
        }
        let end = sent.max(done.load(Ordering::Relaxed));
        out.push(PhaseOutcome {
            requests: phase.requests(),
            duration_ns: end - start,
            denials: denials.load(Ordering::Relaxed),
        });
    }
    Ok((start_ns, out))
}

/// A client that sends as much as it is allowed: every `probe_ns` from
/// `start_ns` for `probes` probes, it sends cost-1 requests until one is
/// denied. Returns when each admitted request may act (`t + wait_ns`).
pub fn greedy(
    config: Config,
    start_ns: u64,
    probe_ns: u64,
    probes: u64,
) -> Result<Vec<u64>, Error> {
    let limiter = sim_limiter(config)?;
    // A denial always comes: every admission is stored and the limit is
    // finite. The cap only guards against a misbehaving limiter.
    let cap = 4 * config.limit.max(config.burst) + 16;
    let mut admitted = Vec::new();
    for p in 0..probes {
        let t = start_ns + p * probe_ns;
        for _ in 0..cap {
            let d = limiter.check(Request::new(1).at(t));
            if !d.allowed {
                break;
            }
            admitted.push(t + d.wait_ns);
        }
    }
    admitted.sort_unstable();
    Ok(admitted)
}

/// The most times that fall in any half-open interval `[a, a + width)`.
/// `times` must be sorted.
pub fn max_in_window(times: &[u64], width: u64) -> u64 {
    let mut best = 0;
    let mut lo = 0;
    for (hi, &t) in times.iter().enumerate() {
        while t - times[lo] >= width {
            lo += 1;
        }
        best = best.max(hi + 1 - lo);
    }
    best as u64
}

/// The coefficient of variation (standard deviation over mean) of the gaps
/// between consecutive sorted times: 0 for perfectly even spacing.
pub fn gap_cv(times: &[u64]) -> f64 {
    if times.len() < 3 {
        return 0.0;
    }
    let gaps: Vec<f64> = times.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    if mean == 0.0 {
        return 0.0;
    }
    let var = gaps.iter().map(|g| (g - mean) * (g - mean)).sum::<f64>() / n;
    var.sqrt() / mean
}

/// The longest gap between consecutive sorted times.
pub fn max_gap(times: &[u64]) -> u64 {
    times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratecell::Algorithm;

    /// The plain simulation: every retry is a check.
    fn classic_one_check_per_retry(
        config: Config,
        start_ns: u64,
        phases: &[Phase],
        retry_ns: u64,
    ) -> Vec<PhaseOutcome> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let limiter = sim_limiter(config).unwrap();
        let mut start = start_ns;
        let mut out = Vec::new();
        for phase in phases {
            let (n, gap) = (phase.requests(), phase.interval_ns());
            let mut due: BinaryHeap<Reverse<(u64, u64)>> =
                (0..n).map(|i| Reverse((start + i * gap, i))).collect();
            let (mut done, mut denials) = (start, 0);
            while let Some(Reverse((t, i))) = due.pop() {
                let d = limiter.check(Request::new(1).at(t));
                if d.allowed {
                    done = done.max(t + d.wait_ns);
                } else {
                    denials += 1;
                    due.push(Reverse((t + retry_ns, i)));
                }
            }
            let end = done.max(start + n * gap);
            out.push(PhaseOutcome {
                requests: n,
                duration_ns: end - start,
                denials,
            });
            start = end;
        }
        out
    }

    #[test]
    fn counting_retries_matches_checking_each_one() {
        let phases: Vec<Phase> = [1, 4, 10, 20, 40, 50, 100]
            .into_iter()
            .map(|rate| Phase {
                rate,
                length_ns: 2 * SECOND,
            })
            .collect();
        // Starts on and off the window grid, a retry that divides every
        // interval and one that does not.
        for start in [EPOCH_NS, EPOCH_NS + 123_456_789] {
            for retry in [10_000_000, 7_000_000] {
                for algorithm in Algorithm::ALL {
                    let config = Config::new(algorithm, 10, SECOND);
                    let fast = classic_simulated(config, start, &phases, retry).unwrap();
                    let slow = classic_one_check_per_retry(config, start, &phases, retry);
                    for (f, s) in fast.iter().zip(&slow) {
                        assert_eq!(
                            (f.requests, f.duration_ns, f.denials),
                            (s.requests, s.duration_ns, s.denials),
                            "{algorithm} start {start} retry {retry}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn window_maximum_is_half_open() {
        assert_eq!(max_in_window(&[], 10), 0);
        assert_eq!(max_in_window(&[0, 10, 20], 10), 1);
        assert_eq!(max_in_window(&[0, 9, 10, 19], 10), 2);
        assert_eq!(max_in_window(&[5, 5, 5, 14], 10), 4);
    }

    #[test]
    fn even_gaps_have_no_spread() {
        assert_eq!(gap_cv(&[0, 10, 20, 30]), 0.0);
        assert!(gap_cv(&[0, 0, 0, 100, 100, 100]) > 1.0);
        assert_eq!(max_gap(&[0, 5, 30]), 25);
    }

    #[test]
    fn every_request_is_processed_once_in_the_classic_experiment() {
        let config = Config::new(Algorithm::FixedWindow, 10, SECOND);
        let phases = [Phase {
            rate: 20,
            length_ns: 2 * SECOND,
        }];
        let out = classic_simulated(config, EPOCH_NS, &phases, 10_000_000).unwrap();
        assert_eq!(out[0].requests, 40);
        // 40 requests at 10 per aligned window: the last is admitted at the
        // start of the fourth window.
        assert_eq!(out[0].duration_ns, 3 * SECOND);
        assert!(out[0].denials > 0);
    }

    #[test]
    fn the_greedy_client_finds_the_fixed_window_edge() {
        let config = Config::new(Algorithm::FixedWindow, 10, SECOND);
        let t = greedy(config, EPOCH_NS + SECOND - 1_000_000, 1_000_000, 3).unwrap();
        assert_eq!(t.len(), 20);
        assert_eq!(max_in_window(&t, 2_000_000), 20);
    }
}

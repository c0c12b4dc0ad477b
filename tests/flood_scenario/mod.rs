//! A flood of new keys beside legitimate clients (issue 33 §4), run
//! deterministically with explicit times, and each decision compared with
//! exact tracking. Shared by `tests/flood.rs` (small sizes) and
//! `examples/flood.rs` (the issue's sizes).
//!
//! - Legitimate clients: `legit` keys, each checking cost 1 at exactly its
//!   rate (one request per `period / limit`) from its own start time to
//!   the end of the span. Starts are spread evenly over the span, so most
//!   clients are new while the flood is on: the issue's "brand-new
//!   legitimate client".
//! - The flood: `flood` distinct keys arriving evenly over the span, each
//!   sending `per_flood_key` requests `flood_gap_ns` apart (a key rotated
//!   after a short burst beyond its limit).
//!
//! Every request is also decided by a reference limiter whose table has
//! room for every key (exact tracking: SPEC §5's lossless eviction only).
//! A legitimate client never exceeds its rate, so the reference admits
//! all its requests, and each refusal of one is wrong. For a flood key,
//! the reference admits as many of its requests as any set its limit
//! allows can hold (GCRA admits greedily, and admitting earlier never
//! leaves less room later); the requests the limiter admits beyond that
//! number, key by key, are admitted beyond what the key's own limit
//! allows. (Comparing request by request would blame the limiter for
//! admitting a request late because it refused an earlier one.)

use ratecell::{Algorithm, Clock, Config, KeyedLimiter, Overflow, Stats};
use std::time::Instant;

const T0: u64 = 1_700_000_000_000_000_000;

/// The first flood key (legitimate keys are below it).
const FLOOD_KEYS: u64 = 1 << 40;

/// The sizes of one run.
#[derive(Clone, Copy, Debug)]
pub struct Flood {
    pub capacity: u64,
    /// GCRA: `limit` per `period_ns`, burst = limit.
    pub limit: u64,
    pub period_ns: u64,
    pub legit: u64,
    pub flood: u64,
    pub per_flood_key: u64,
    pub flood_gap_ns: u64,
    pub span_ns: u64,
}

/// What one policy did.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    pub policy: Overflow,
    pub legit_requests: u64,
    /// Legitimate requests refused (every one within its key's limit).
    pub legit_refused: u64,
    pub flood_requests: u64,
    /// Flood requests exact tracking admits.
    pub flood_admitted_exact: u64,
    /// Flood requests admitted.
    pub flood_admitted: u64,
    /// Over all flood keys, the requests admitted beyond what exact
    /// tracking admits of that key's requests.
    pub flood_over_admitted: u64,
    pub stats: Stats,
    /// The limiter's checks alone (the reference's excluded), in ns per
    /// request.
    pub ns_per_check: f64,
}

/// One request: (time offset, key, legitimate).
type Request = (u64, u64, bool);

impl Flood {
    /// The issue's scenario: a 10,000-key table, 10/s per key, 1,000
    /// legitimate clients, a flood of 100,000 keys (10× capacity), each
    /// sending 20 requests 1 ms apart (twice its burst), over 2 s.
    pub const ISSUE: Flood = Flood {
        capacity: 10_000,
        limit: 10,
        period_ns: 1_000_000_000,
        legit: 1_000,
        flood: 100_000,
        per_flood_key: 20,
        flood_gap_ns: 1_000_000,
        span_ns: 2_000_000_000,
    };

    fn config(&self) -> Config {
        Config::new(Algorithm::Gcra, self.limit, self.period_ns).capacity(self.capacity)
    }

    /// Every request, in time order (legitimate first at equal times).
    /// Legitimate keys are 0.., flood keys `FLOOD_KEYS`...
    fn requests(&self) -> Vec<Request> {
        let mut requests = Vec::new();
        let interval = self.period_ns / self.limit;
        for k in 0..self.legit {
            let mut t = k * self.span_ns / self.legit;
            while t < self.span_ns {
                requests.push((t, k, true));
                t += interval;
            }
        }
        for k in 0..self.flood {
            let start = k * self.span_ns / self.flood;
            for i in 0..self.per_flood_key {
                requests.push((start + i * self.flood_gap_ns, FLOOD_KEYS + k, false));
            }
        }
        requests.sort_by_key(|&(t, key, legit)| (t, !legit, key));
        requests
    }

    /// Runs the scenario under each policy.
    pub fn run(&self, policies: &[Overflow]) -> Vec<Outcome> {
        let requests = self.requests();
        let keys = self.legit + self.flood;
        let exact = KeyedLimiter::builder()
            .limit(self.config().capacity(2 * keys).overflow(Overflow::Deny))
            .clock(Clock::manual(T0).0)
            .build()
            .expect("the reference limiter");
        let reference: Vec<bool> = requests
            .iter()
            .map(|&(t, key, _)| {
                exact
                    .check(key, ratecell::Request::new(1).at(T0 + t))
                    .allowed
            })
            .collect();
        assert_eq!(exact.stats().overflows, 0, "the reference tracks every key");
        policies
            .iter()
            .map(|&policy| {
                let limiter = KeyedLimiter::builder()
                    .limit(self.config().overflow(policy))
                    .clock(Clock::manual(T0).0)
                    .build()
                    .expect("the limiter");
                let mut outcome = Outcome {
                    policy,
                    legit_requests: 0,
                    legit_refused: 0,
                    flood_requests: 0,
                    flood_admitted_exact: 0,
                    flood_admitted: 0,
                    flood_over_admitted: 0,
                    stats: Stats::default(),
                    ns_per_check: 0.0,
                };
                let start = Instant::now();
                let allowed: Vec<bool> = requests
                    .iter()
                    .map(|&(t, key, _)| {
                        limiter
                            .check(key, ratecell::Request::new(1).at(T0 + t))
                            .allowed
                    })
                    .collect();
                outcome.ns_per_check = start.elapsed().as_nanos() as f64 / requests.len() as f64;
                // Per flood key: admitted by the limiter, by exact tracking.
                let mut per_key = vec![(0u64, 0u64); self.flood as usize];
                for ((&(_, key, legit), &exact), &allowed) in
                    requests.iter().zip(&reference).zip(&allowed)
                {
                    if legit {
                        assert!(exact, "a legitimate client keeps within its limit");
                        outcome.legit_requests += 1;
                        outcome.legit_refused += u64::from(!allowed);
                    } else {
                        let counts = &mut per_key[(key - FLOOD_KEYS) as usize];
                        counts.0 += u64::from(allowed);
                        counts.1 += u64::from(exact);
                        outcome.flood_requests += 1;
                    }
                }
                for (admitted, exact) in per_key {
                    outcome.flood_admitted += admitted;
                    outcome.flood_admitted_exact += exact;
                    outcome.flood_over_admitted += admitted.saturating_sub(exact);
                }
                outcome.stats = limiter.stats();
                outcome
            })
            .collect()
    }
}

//! Several limits as one under real threads: at one frozen instant, however
//! the threads interleave, exactly the tightest limit's capacity is
//! admitted, and the units each admission took (read off the tightest
//! limit's own `remaining`) tile that capacity, as in a sequential order;
//! the looser limits are charged for exactly the admitted units and nothing
//! for the denied requests. Nothing here measures speed.

use ratecell::{Algorithm, Clock, Config, KeyedLimiter, Limiter, MultiDecision, Request};
use std::sync::Barrier;

const T0: u64 = 1_700_000_000_000_000_000;
const S: u64 = 1_000_000_000;
const THREADS: usize = 4;

/// Both layouts: GCRA with a fixed window (one word of state), and four
/// limits with a sliding log (a block). Each with the tightest limit's
/// index and capacity.
fn cases() -> Vec<(Vec<Config>, usize, u64)> {
    vec![
        (
            vec![
                Config::new(Algorithm::Gcra, 50_000, 100 * S).burst(35_000),
                Config::new(Algorithm::FixedWindow, 20_000, 100 * S),
            ],
            1,
            20_000,
        ),
        (
            vec![
                Config::new(Algorithm::TokenBucket, 1, S).burst(30_000),
                Config::new(Algorithm::SlidingLog, 40_000, 100 * S),
                Config::new(Algorithm::Gcra, 50_000, 100 * S).burst(12_000),
                Config::new(Algorithm::SlidingWindow, 25_000, 100 * S),
            ],
            2,
            12_000,
        ),
    ]
}

fn run(check: impl Fn(u64) -> MultiDecision + Sync, tightest: usize, capacity: u64) {
    let barrier = Barrier::new(THREADS);
    let taken: Vec<(u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (barrier, check) = (&barrier, &check);
                s.spawn(move || {
                    barrier.wait();
                    let mut taken = Vec::new();
                    for j in 0..capacity as usize {
                        let cost = 1 + ((i + j) % 3) as u64;
                        let d = check(cost);
                        if d.decision.allowed {
                            taken.push((d.limits()[tightest].remaining, cost));
                        } else {
                            assert_eq!(d.denied_by, Some(tightest), "{d:?}");
                        }
                    }
                    taken
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // Each admission took [remaining, remaining + cost) of the tightest
    // limit; in a sequential order these tile [0, capacity) exactly, up to
    // a tail smaller than the largest cost that no request could fill.
    let mut taken = taken;
    taken.sort_unstable();
    let mut next = taken.first().map_or(0, |&(r, _)| r);
    assert!(next < 3, "the last units left unused are fewer than a cost");
    for &(remaining, cost) in &taken {
        assert_eq!(remaining, next, "two admissions overlap or leave a gap");
        next = remaining + cost;
    }
    assert_eq!(
        next, capacity,
        "the admitted units add up to the tightest limit"
    );
}

#[test]
fn one_instant_admits_exactly_the_tightest_limit_direct() {
    for (configs, tightest, capacity) in cases() {
        let limiter = Limiter::builder()
            .limits(&configs)
            .clock(Clock::manual(T0).0)
            .build()
            .unwrap();
        run(
            |cost| limiter.check_each(Request::new(cost).at(T0)),
            tightest,
            capacity,
        );
        let after = limiter.check_each(Request::new(0).at(T0));
        for (i, (c, d)) in configs.iter().zip(after.limits()).enumerate() {
            if i != tightest {
                let cap = if c.burst != 0 { c.burst } else { c.limit };
                assert_eq!(
                    d.remaining,
                    cap - capacity,
                    "limit {i} was charged the admitted units only"
                );
            }
        }
    }
}

#[test]
fn one_instant_admits_exactly_the_tightest_limit_keyed() {
    for (configs, tightest, capacity) in cases() {
        let configs: Vec<Config> = configs.iter().map(|c| c.capacity(2)).collect();
        let limiter = KeyedLimiter::builder()
            .limits(&configs)
            .clock(Clock::manual(T0).0)
            .build()
            .unwrap();
        run(
            |cost| limiter.check_each(42, Request::new(cost).at(T0)),
            tightest,
            capacity,
        );
        assert!(
            limiter.check(43, Request::new(1).at(T0)).allowed,
            "another key is untouched"
        );
    }
}

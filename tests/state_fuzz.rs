//! `Rule::validate` and `Rule::decide` on stored states from outside the
//! process (issue 33 §2): random words, and states a trace stored (under
//! this rule or one with another limit or burst) with words overwritten or
//! bits flipped. For every state:
//!
//! - neither `validate` nor `decide` panics, and every `decide` returns
//!   (the algorithms' walks are bounded by N or log L, whatever the words
//!   hold: a hang here would never finish the test);
//! - for a state `validate` accepts, the cost admitted by requests at
//!   times in `[t0, t0 + P)`, in any order, is at most what the algorithm
//!   admits over one period from a full state ([`bound`]).
//!
//! proptest draws one seed per case; the case is decoded from it with a
//! plain generator (`prop_oneof!` is slow in a debug build).

use proptest::prelude::*;
use ratecell::state::Rule;
use ratecell::{Algorithm, Config};

/// xorshift64*: the whole case from one seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// Periods, all multiples of every sub-window count in [`SUB_WINDOWS`].
const PERIODS: [u64; 4] = [1_000, 1_000_000, 60_000_000_000, 3_600_000_000_000];
const SUB_WINDOWS: [u32; 10] = [1, 2, 4, 5, 8, 10, 20, 25, 40, 50];

/// A small configuration of `alg` (small limits: many requests are decided
/// at the edge) and a time `t0` to load the state at.
fn case_config(rng: &mut Rng, alg: Algorithm) -> (Config, u64) {
    let most = if rng.below(4) == 0 { 1000 } else { 12 };
    let limit = 1 + rng.below(most);
    let period = rng.pick(&PERIODS);
    let mut config = Config::new(alg, limit, period).sub_windows(rng.pick(&SUB_WINDOWS));
    if matches!(
        alg,
        Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
    ) {
        config = config.burst(1 + rng.below(2 * limit));
    }
    let t0 = match rng.below(8) {
        0 => rng.below(1 << 20),
        1 => u64::MAX - 2 * period - rng.below(1 << 20),
        _ => 1_700_000_000_000_000_000 + rng.below(1 << 50),
    };
    (config, t0)
}

/// A word a hostile or damaged store might hold: edges, values near the
/// ones a valid state holds at `t0`, or anything.
fn hostile_word(rng: &mut Rng, config: &Config, t0: u64) -> u64 {
    let small = rng.below(70);
    let sub = config.period_ns / u64::from(config.sub_windows);
    match rng.below(10) {
        0 => 0,
        1 => small,
        2 => u64::MAX - small,
        3 => (t0 / config.period_ns).wrapping_add(small).wrapping_sub(35),
        4 => (t0 / sub).wrapping_add(small).wrapping_sub(35),
        5 => t0.wrapping_add(small.wrapping_sub(35).wrapping_mul(config.period_ns / 7)),
        6 => 1 << rng.below(64),
        7 => u64::MAX / config.period_ns + small,
        8 => u64::from(u32::MAX) + small - 35,
        _ => rng.next(),
    }
}

/// A state as a loader might read it: random words, or a state stored by
/// a trace before `t0` under this rule or a sibling (another limit or
/// burst, the same layout), then perhaps damaged.
fn stored_state(rng: &mut Rng, config: &Config, t0: u64) -> Vec<u64> {
    let rule = Rule::new(config).unwrap();
    let mut state = vec![0; rule.words()];
    if rng.below(4) == 0 {
        state
            .iter_mut()
            .for_each(|w| *w = hostile_word(rng, config, t0));
        return state;
    }
    let sibling = if config.algorithm == Algorithm::SlidingLog || rng.below(2) == 0 {
        rule
    } else {
        let limit = 1 + rng.below((2 * config.limit).min(config.period_ns));
        let mut c =
            Config::new(config.algorithm, limit, config.period_ns).sub_windows(config.sub_windows);
        if config.burst != 0 {
            c = c.burst(1 + rng.below(2 * limit));
        }
        Rule::new(&c).unwrap()
    };
    let mut t = t0.saturating_sub(rng.below(2 * config.period_ns));
    for _ in 0..rng.below(40) {
        sibling.decide(&mut state, t, rng.below(sibling.config().limit + 2));
        t = t.saturating_add(rng.below(config.period_ns / 3 + 1));
    }
    for _ in 0..rng.below(3) {
        let i = rng.below(state.len() as u64) as usize;
        if rng.below(2) == 0 {
            state[i] ^= 1 << rng.below(64);
        } else {
            state[i] = hostile_word(rng, config, t0);
        }
    }
    state
}

/// The most cost `config` admits over one period from a full state, in
/// requests at times in `[t0, t0 + P)` in any order:
/// - GCRA, leaky bucket: `B + L` (after cost k, `tat ≥ t0 + k·T` and an
///   admission needs `tat − t ≤ B·T` with `t < t0 + P`, so
///   `k < B + P/T ≤ B + L`);
/// - token bucket: `B + L` (a full bucket, and at most one refill of L
///   falls inside a period after the first check's refill);
/// - fixed window, sliding window, bucketed window: `2·L` (the requests
///   fall in at most two windows, or two spans of N sub-windows, each
///   admitting at most L);
/// - sliding log: `L` (exact: every admission lies in one window of P).
fn bound(config: &Config) -> u64 {
    let (l, b) = (config.limit, config.burst.max(1));
    match config.algorithm {
        Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket => {
            (if config.burst == 0 { l } else { b }) + l
        }
        Algorithm::FixedWindow | Algorithm::SlidingWindow | Algorithm::BucketedWindow => 2 * l,
        Algorithm::SlidingLog => l,
    }
}

/// Runs a trace at times in `[t0, t0 + P)` on `state`; returns the cost
/// admitted.
fn admitted_over_a_period(rng: &mut Rng, rule: &Rule, state: &mut [u64], t0: u64) -> u64 {
    let config = rule.config();
    let mut admitted = 0;
    let mut t = t0;
    for _ in 0..60 {
        let last = t0.saturating_add(config.period_ns - 1);
        t = match rng.below(6) {
            0 => t0 + rng.below(last - t0 + 1),
            1 => last,
            _ => t
                .saturating_add(rng.below(config.period_ns / 20 + 1))
                .min(last),
        };
        let cost = match rng.below(4) {
            0 => 0,
            1 => config.limit + rng.below(3),
            _ => 1 + rng.below(config.limit.min(4)),
        };
        let d = rule.decide(state, t, cost);
        if d.allowed {
            admitted += cost;
        }
    }
    admitted
}

fn check_case(seed: u64) -> Result<(), TestCaseError> {
    let mut rng = Rng(seed | 1);
    let alg = rng.pick(&Algorithm::ALL);
    let (config, t0) = case_config(&mut rng, alg);
    let rule = Rule::new(&config).unwrap();
    let mut state = stored_state(&mut rng, &config, t0);
    let verdict = rule.validate(&state);
    if let Err(e) = &verdict {
        prop_assert_eq!(e.algorithm, alg);
        prop_assert!(e.word.is_none_or(|w| w < state.len()), "{}", e);
        prop_assert!(!e.message.is_empty());
    }
    let admitted = admitted_over_a_period(&mut rng, &rule, &mut state, t0);
    if verdict.is_ok() {
        prop_assert!(
            admitted <= bound(&config),
            "{alg} {config:?} at {t0}: admitted {admitted} > {}",
            bound(&config)
        );
        // What decide stored from an accepted state is accepted too.
        prop_assert_eq!(rule.validate(&state), Ok(()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20000, ..ProptestConfig::default() })]

    /// Random and damaged states: no panic, every check returns, and an
    /// accepted state admits no more over a period than a full one.
    #[test]
    fn stored_states_are_refused_or_admit_within_the_bound(seed: u64) {
        check_case(seed)?;
    }
}

/// Every state a trace stores is accepted, under its own rule and under a
/// rule with a lower limit or burst (the counts above it deny).
#[test]
fn states_decide_stores_are_accepted() {
    let mut rng = Rng(0x5eed);
    for _ in 0..3000 {
        let alg = rng.pick(&Algorithm::ALL);
        let (config, t0) = case_config(&mut rng, alg);
        let rule = Rule::new(&config).unwrap();
        let lower = (alg != Algorithm::SlidingLog).then(|| {
            let c = Config { limit: 1, ..config };
            Rule::new(&Config {
                burst: config.burst.min(1),
                ..c
            })
            .unwrap()
        });
        let mut state = vec![0; rule.words()];
        let mut t = t0;
        for _ in 0..50 {
            rule.decide(&mut state, t, rng.below(config.limit + 2));
            assert_eq!(rule.validate(&state), Ok(()), "{config:?} {state:?}");
            if let Some(lower) = &lower {
                assert_eq!(lower.validate(&state), Ok(()), "{config:?} {state:?}");
            }
            t = match rng.below(8) {
                0 => t.saturating_sub(rng.below(config.period_ns)),
                _ => t.saturating_add(rng.below(config.period_ns / 4 + 1)),
            };
        }
    }
}

/// Issue 33 §2's state: a bucketed window whose newest sub-window is
/// 2^64 − 1. Its next check, even a peek, walked ~2^64 sub-windows (a
/// debug build panicked on the overflow first). Refused by `validate`;
/// decided, unvalidated, in a thread that must answer within seconds.
#[test]
fn the_bucketed_state_that_hung_a_check_is_refused_and_decides_at_once() {
    for n in [1, 10, 64] {
        let config = Config::new(Algorithm::BucketedWindow, 10, 64_000_000_000).sub_windows(n);
        let rule = Rule::new(&config).unwrap();
        let mut state = vec![0u64; rule.words()];
        state[0] = u64::MAX;
        let e = rule.validate(&state).unwrap_err();
        assert_eq!(e.word, Some(0), "{e}");
        assert!(e.to_string().contains("newest sub-window"), "{e}");
        let (done, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for cost in [0, 1, 10, 11] {
                rule.decide(&mut state, 1_700_000_000_000_000_000, cost);
            }
            let _ = done.send(());
        });
        answer
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("every check on the stored state returns");
    }
}

//! Live reconfiguration (issue 15, part 3) against the reference model
//! (`tests/model`): random traces of 1 to 4 limits of mixed algorithms,
//! direct and keyed, with a reconfiguration at a random point. The change
//! is predicted from the documented rules (docs/ALGORITHMS.md, "Live
//! reconfiguration"): refused ones must be `Error::Reconfigure` and leave
//! the limiter deciding as before; accepted ones must decide, from then
//! on, as the model carrying each state over by its rule.

mod model;

use model::trace::{pick, proptest_config, small_config, small_cost, within};
use model::{AllOfDecision, AllOfModel};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratecell::{Algorithm, Clock, Config, Error, KeyedLimiter, Limiter, MultiDecision, Request};

#[derive(Clone, Debug)]
struct Case {
    configs: Vec<Config>,
    changed: Vec<Config>,
    start: u64,
    /// Before which request the reconfiguration happens.
    at: usize,
    /// (time step, backwards?, cost, key)
    requests: Vec<(u64, bool, u64, u64)>,
}

type RawLimit = (u8, (u64, u64, u64, u64), u8, (u64, u64, u64, u64));
type RawRequest = (u8, u64, u8, u64, u8);
type Raw = (Vec<RawLimit>, u64, usize, Vec<RawRequest>);

fn raw() -> impl Strategy<Value = Raw> {
    (
        prop::collection::vec(any::<RawLimit>(), 1..=4),
        any::<u64>(),
        any::<usize>(),
        prop::collection::vec(any::<RawRequest>(), 1..60),
    )
}

fn decode((limits, start, at, requests): &Raw, capacity: u64) -> Case {
    let mut configs = Vec::new();
    let mut changed = Vec::new();
    for &(a, raw, sel, raw2) in limits {
        let alg = Algorithm::ALL[usize::from(a) % Algorithm::ALL.len()];
        let old = small_config(alg, raw).capacity(capacity);
        // Mostly the same algorithm and period (so window algorithms are
        // not almost always refused); sometimes anything.
        let alg2 = if sel % 8 == 7 {
            Algorithm::ALL[usize::from(sel / 8) % Algorithm::ALL.len()]
        } else {
            alg
        };
        let mut new = small_config(alg2, raw2).capacity(capacity);
        if sel % 4 != 0 && alg2 == alg {
            new.period_ns = old.period_ns;
            new.sub_windows = old.sub_windows;
        }
        configs.push(old);
        changed.push(new);
    }
    let p = configs.iter().map(|c| c.period_ns).max().unwrap();
    let cap = configs
        .iter()
        .chain(&changed)
        .map(|c| c.limit.max(c.burst))
        .max()
        .unwrap();
    let requests: Vec<_> = requests
        .iter()
        .map(|&(s, x, c, y, k)| {
            let (step, back) = match pick(s, &[3, 3, 2, 2, 1]) {
                0 => (0, false),
                1 => (within(x, 1, p / 8), false),
                2 => (within(x, 1, 2 * p), false),
                3 => (within(x, 1, 3) * p, false),
                _ => (within(x, 1, p), true),
            };
            (step, back, small_cost(c, y, cap), u64::from(k % 3))
        })
        .collect();
    Case {
        at: at % (requests.len() + 1),
        configs,
        changed,
        start: within(*start, 0, 1 << 61),
        requests,
    }
}

fn bits(x: u64) -> u32 {
    64 - x.leading_zeros()
}

/// Whether the documented rules refuse `old` to `new` (one limit).
fn refused(old: &Config, new: &Config) -> bool {
    use Algorithm::*;
    let burst = |c: &Config| if c.burst == 0 { c.limit } else { c.burst };
    let windowed = matches!(
        old.algorithm,
        FixedWindow | SlidingWindow | BucketedWindow | SlidingLog
    );
    old.algorithm != new.algorithm
        || (windowed && old.period_ns != new.period_ns)
        || (old.algorithm == BucketedWindow && old.sub_windows != new.sub_windows)
        || (old.algorithm == SlidingLog && old.limit != new.limit)
        || (matches!(old.algorithm, FixedWindow | SlidingWindow)
            && bits(old.limit) != bits(new.limit))
        || (old.algorithm == TokenBucket && bits(burst(old)) != bits(burst(new)))
}

fn same(got: &MultiDecision, want: &AllOfDecision) -> bool {
    got.decision == want.decision && got.denied_by == want.denied_by && got.limits() == want.each
}

enum Any {
    Direct(Box<Limiter>),
    Keyed(Box<KeyedLimiter>),
}

fn compare(case: &Case) -> Result<(), TestCaseError> {
    let (clock, _) = Clock::manual(0);
    let limiter = if case.configs[0].capacity > 0 {
        Any::Keyed(Box::new(
            KeyedLimiter::builder()
                .limits(&case.configs)
                .clock(clock)
                .build()
                .unwrap(),
        ))
    } else {
        Any::Direct(Box::new(
            Limiter::builder()
                .limits(&case.configs)
                .clock(clock)
                .build()
                .unwrap(),
        ))
    };
    let keyed = matches!(limiter, Any::Keyed(_));
    let mut models = vec![AllOfModel::new(&case.configs); 3];
    let mut t = case.start;
    let mut seen = Vec::new();
    for (i, &(step, back, cost, key)) in case.requests.iter().enumerate() {
        if i == case.at {
            let expect_refused = case
                .configs
                .iter()
                .zip(&case.changed)
                .any(|(o, n)| refused(o, n));
            let done = match &limiter {
                Any::Direct(l) => l.reconfigure(&case.changed),
                Any::Keyed(k) => k.reconfigure(&case.changed),
            };
            let limits = match &limiter {
                Any::Direct(l) => l.limits().to_vec(),
                Any::Keyed(k) => k.limits().to_vec(),
            };
            match done {
                Ok(()) => {
                    prop_assert!(!expect_refused, "accepted a refused change: {case:?}");
                    prop_assert_eq!(&limits, &case.changed);
                    models.iter_mut().for_each(|m| m.reconfigure(&case.changed));
                }
                Err(Error::Reconfigure(e)) => {
                    prop_assert!(expect_refused, "refused an allowed change ({e}): {case:?}");
                    prop_assert_eq!(&limits, &case.configs, "a refusal changes nothing");
                }
                Err(e) => prop_assert!(false, "not a reconfiguration error: {e}"),
            }
            seen.push((t, u64::MAX, 0, false));
        }
        t = if back {
            t.saturating_sub(step)
        } else {
            t + step
        };
        let got = match &limiter {
            Any::Direct(l) => l.check_each(Request::new(cost).at(t)),
            Any::Keyed(k) => k.check_each(key, Request::new(cost).at(t)),
        };
        let want = models[if keyed { key as usize } else { 0 }].check(t, cost);
        seen.push((t, key, cost, got.decision.allowed));
        prop_assert!(
            same(&got, &want),
            "\nconfigs {:?}\nchanged {:?} before request {}\nrequests so far (t, key, cost, allowed; key MAX marks the change): {:?}\ngot  {:?}\nwant {:?}",
            case.configs,
            case.changed,
            case.at,
            seen,
            got,
            want
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(3000))]

    #[test]
    fn direct_reconfiguration_decides_as_the_model(raw in raw()) {
        compare(&decode(&raw, 0))?;
    }

    #[test]
    fn keyed_reconfiguration_decides_as_the_model(raw in raw()) {
        compare(&decode(&raw, 64))?;
    }
}

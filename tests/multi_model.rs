//! Several limits as one (issue 15) against the conjunction of the
//! reference model (`tests/model`, `AllOfModel`): random traces of 2 to 4
//! limits of mixed algorithms, direct and keyed, compared decision by
//! decision (the combined decision, the denying limit and every limit's
//! own); and the construction errors.
//!
//! Limits are small (up to 20 per 1–10 µs) so windows roll, tokens refill
//! and logs expire many times in a trace; the clock stands still, creeps,
//! jumps whole periods and goes backwards. As in `tests/spec_model.rs`,
//! proptest generates raw integers that plain functions decode.

mod model;

use model::trace::{pick, proptest_config, small_config, small_cost, within};
use model::{AllOfDecision, AllOfModel};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratecell::{
    Algorithm, Clock, Config, Error, Field, KeyedLimiter, Limiter, MAX_LIMITS, MultiDecision,
    Overflow, Request, SnapshotError,
};

#[derive(Clone, Debug)]
struct Case {
    configs: Vec<Config>,
    start: u64,
    /// (time step, backwards?, cost, key)
    requests: Vec<(u64, bool, u64, u64)>,
}

type RawLimit = (u8, (u64, u64, u64, u64));
/// (step selector, step value, cost selector, cost value, key)
type RawRequest = (u8, u64, u8, u64, u8);
type Raw = (Vec<RawLimit>, u64, Vec<RawRequest>);

fn raw() -> impl Strategy<Value = Raw> {
    (
        prop::collection::vec(any::<RawLimit>(), 2..=4),
        any::<u64>(),
        prop::collection::vec(any::<RawRequest>(), 1..60),
    )
}

fn decode((limits, start, requests): &Raw, capacity: u64) -> Case {
    let configs: Vec<Config> = limits
        .iter()
        .map(|&(a, raw)| {
            let alg = Algorithm::ALL[usize::from(a) % Algorithm::ALL.len()];
            small_config(alg, raw).capacity(capacity)
        })
        .collect();
    let p = configs.iter().map(|c| c.period_ns).max().unwrap();
    let cap = configs.iter().map(|c| c.limit.max(c.burst)).max().unwrap();
    let requests = requests
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
        configs,
        start: within(*start, 0, 1 << 61),
        requests,
    }
}

fn same(got: &MultiDecision, want: &AllOfDecision) -> bool {
    got.decision == want.decision && got.denied_by == want.denied_by && got.limits() == want.each
}

/// Replays `case` into a limiter (direct when `capacity` is 0, else keyed
/// with three keys, one model each) and the models.
fn compare(case: &Case) -> Result<(), TestCaseError> {
    let (clock, _) = Clock::manual(0);
    let keyed = case.configs[0].capacity > 0;
    let direct = (!keyed).then(|| {
        Limiter::builder()
            .limits(&case.configs)
            .clock(clock.clone())
            .build()
    });
    let table = keyed.then(|| {
        KeyedLimiter::builder()
            .limits(&case.configs)
            .clock(clock.clone())
            .build()
    });
    // A twin fed the same requests through the plain check, which asks for
    // no per-limit decisions (the path a check takes most often).
    let twin_direct = (!keyed).then(|| {
        Limiter::builder()
            .limits(&case.configs)
            .clock(clock.clone())
            .build()
    });
    let twin_table = keyed.then(|| {
        KeyedLimiter::builder()
            .limits(&case.configs)
            .clock(clock)
            .build()
    });
    let mut models = vec![AllOfModel::new(&case.configs); 3];
    let mut t = case.start;
    let mut seen = Vec::new();
    for &(step, back, cost, key) in &case.requests {
        t = if back {
            t.saturating_sub(step)
        } else {
            t + step
        };
        let got = match (&direct, &table) {
            (Some(l), _) => l.as_ref().unwrap().check_each(Request::new(cost).at(t)),
            (_, Some(k)) => k
                .as_ref()
                .unwrap()
                .check_each(key, Request::new(cost).at(t)),
            _ => unreachable!(),
        };
        let want = models[if keyed { key as usize } else { 0 }].check(t, cost);
        seen.push((t, key, cost, got.decision.allowed));
        prop_assert!(
            same(&got, &want),
            "\nconfigs {:?}\nrequests so far (t, key, cost, allowed): {:?}\ngot  {:?}\nwant {:?}",
            case.configs,
            seen,
            got,
            want
        );
        let twin = match (&twin_direct, &twin_table) {
            (Some(l), _) => l.as_ref().unwrap().check(Request::new(cost).at(t)),
            (_, Some(k)) => k.as_ref().unwrap().check(key, Request::new(cost).at(t)),
            _ => unreachable!(),
        };
        prop_assert_eq!(twin, want.decision, "the plain check of a twin");
        // The plain check returns the same combined decision.
        let plain = match (&direct, &table) {
            (Some(l), _) => l.as_ref().unwrap().check(Request::new(0).at(t)),
            (_, Some(k)) => k.as_ref().unwrap().check(key, Request::new(0).at(t)),
            _ => unreachable!(),
        };
        let peek = models[if keyed { key as usize } else { 0 }].check(t, 0);
        prop_assert_eq!(plain, peek.decision, "a peek at an explicit time");
    }
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(3000))]

    #[test]
    fn direct_limits_decide_as_their_conjunction(raw in raw()) {
        compare(&decode(&raw, 0))?;
    }

    #[test]
    fn keyed_limits_decide_as_their_conjunction(raw in raw()) {
        compare(&decode(&raw, 64))?;
    }
}

const S: u64 = 1_000_000_000;

fn field(e: SnapshotError) -> Field {
    match e {
        SnapshotError::Limiter(Error::Config(c)) => c.field,
        e => panic!("not a configuration error: {e}"),
    }
}

#[test]
fn bad_lists_of_limits_get_named_errors() {
    let gcra = Config::new(Algorithm::Gcra, 10, S);
    assert_eq!(
        field(Limiter::builder().limits(&[]).build().unwrap_err()),
        Field::Limits
    );
    assert_eq!(
        field(
            Limiter::builder()
                .limits(&[gcra; MAX_LIMITS + 1])
                .build()
                .unwrap_err()
        ),
        Field::Limits
    );
    assert_eq!(
        field(KeyedLimiter::builder().limits(&[]).build().unwrap_err()),
        Field::Limits
    );
    let mixed = [gcra.capacity(10), gcra.capacity(20)];
    let e = KeyedLimiter::builder().limits(&mixed).build().unwrap_err();
    assert!(e.to_string().contains("limit 1 has capacity 20"), "{e}");
    assert_eq!(field(e), Field::Capacity);
    let mixed = [
        gcra.capacity(10),
        gcra.capacity(10).overflow(Overflow::Allow),
    ];
    assert_eq!(
        field(KeyedLimiter::builder().limits(&mixed).build().unwrap_err()),
        Field::Overflow
    );
    let bad = [gcra, Config::new(Algorithm::FixedWindow, 0, S)];
    let e = Limiter::builder().limits(&bad).build().unwrap_err();
    assert!(e.to_string().contains("limit 1"), "{e}");
    assert_eq!(field(e), Field::Limit);
    assert_eq!(
        field(
            Limiter::builder()
                .limits(&[gcra.capacity(5), gcra.capacity(5)])
                .build()
                .unwrap_err()
        ),
        Field::Capacity,
        "a direct limiter has capacity 0"
    );
    assert_eq!(
        field(
            KeyedLimiter::builder()
                .limits(&[gcra, gcra])
                .build()
                .unwrap_err()
        ),
        Field::Capacity,
        "a keyed limiter has a capacity"
    );
    assert_eq!(
        field(
            Limiter::builder()
                .limits(&[gcra, gcra])
                .names(&["only one"])
                .build()
                .unwrap_err()
        ),
        Field::Limits
    );
    // A sliding log of 2^32 - 1 entries takes 2^33 + 1 words per key:
    // past what several limits address together (its offsets once wrapped
    // at 2^32 words and a check wrote past the block). Alone, it is only a
    // question of memory.
    let log = Config::new(Algorithm::SlidingLog, u64::from(u32::MAX), S);
    let bucket = Config::new(Algorithm::TokenBucket, 10, S);
    for e in [
        Limiter::builder()
            .limits(&[bucket, log])
            .build()
            .unwrap_err(),
        KeyedLimiter::builder()
            .limits(&[bucket, log].map(|c| c.capacity(10)))
            .build()
            .unwrap_err(),
    ] {
        assert!(
            e.to_string()
                .contains("limit 1: sliding_log takes 8589934593 words"),
            "{e}"
        );
        assert_eq!(field(e), Field::Limit);
    }
    let longest = Config::new(Algorithm::SlidingLog, (u64::from(u32::MAX) - 5) / 2, S);
    assert!(matches!(
        KeyedLimiter::builder()
            .limits(&[longest, bucket].map(|c| c.capacity(10)))
            .build(),
        Err(SnapshotError::Limiter(ratecell::Error::OutOfMemory { .. }))
    ));
}

#[test]
fn names_and_every_layout_work() {
    let t = 1_700_000_000_000_000_000;
    // Word layout (GCRA + fixed window: 64 + small bits), block layout
    // (a sliding log among them), and eight limits at once.
    let word = [
        Config::new(Algorithm::Gcra, 10, S),
        Config::new(Algorithm::FixedWindow, 3, 60 * S),
    ];
    let block = [
        Config::new(Algorithm::SlidingLog, 5, S),
        Config::new(Algorithm::TokenBucket, 2, S),
        Config::new(Algorithm::BucketedWindow, 4, S).sub_windows(10),
    ];
    let eight: Vec<Config> = (0..MAX_LIMITS as u64)
        .map(|i| Config::new(Algorithm::ALL[i as usize % 7], 10 - i, S))
        .collect();
    for (configs, tightest) in [(&word[..], 1), (&block[..], 1), (&eight[..], 7)] {
        let names: Vec<String> = (0..configs.len()).map(|i| format!("l{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let direct = Limiter::builder()
            .limits(configs)
            .names(&names)
            .build()
            .unwrap();
        let keyed: Vec<Config> = configs.iter().map(|c| c.capacity(100)).collect();
        let keyed = KeyedLimiter::builder()
            .limits(&keyed)
            .names(&names)
            .build()
            .unwrap();
        let bound = configs[tightest].limit.min(configs[tightest].burst.max(1));
        let bound = if configs[tightest].burst == 0 {
            configs[tightest].limit
        } else {
            bound
        };
        let direct_admitted = (0..20)
            .filter(|_| direct.check(Request::new(1).at(t)).allowed)
            .count();
        let keyed_admitted = (0..20)
            .filter(|_| keyed.check(9, Request::new(1).at(t)).allowed)
            .count();
        assert_eq!(direct_admitted as u64, bound, "{configs:?}");
        assert_eq!(keyed_admitted as u64, bound, "{configs:?}");
        let d = direct.check_each(Request::new(1).at(t));
        assert_eq!(d.denied_by, Some(tightest));
        assert_eq!(direct.limit_name(tightest), Some(names[tightest]));
        assert_eq!(
            keyed.check_each(9, Request::new(1).at(t)).denied_by,
            Some(tightest)
        );
        assert!(
            keyed.check_each(10, Request::new(1).at(t)).decision.allowed,
            "another key"
        );
        assert_eq!(direct.limits().len(), configs.len());
    }
}

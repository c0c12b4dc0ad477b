//! A quota per tier: one keyed limiter whose checks name the key's tier.
//!
//! - Random traces of 1 to 4 tiers of 1 to 3 mixed limits each, with a
//!   random tier on every request, against the reference model
//!   (`tests/model`): each key's state is read by the named tier's limits
//!   through the model's own carry-over rule (`Model::reconfigure`,
//!   written from docs/ALGORITHMS.md), and is replaced only when the
//!   library stores one (admitted at a cost above 0).
//! - Bad input refused naming the field; a tier out of range refused per
//!   check.
//! - Under real threads at one frozen instant, each key admits exactly its
//!   tier's capacity. Nothing here measures speed.
//! - The tiered batch decides as its checks one by one; acquire waits for
//!   the named tier.
//! - A snapshot (format version 3) restores a limiter that decides the rest
//!   of a random trace as the saved one; a restore of other tiers, or of a
//!   limiter without tiers, is refused naming the field.
//! - `Builder::persisted` with tiers: a file as the periodic saving thread left
//!   it reopens into a limiter that decides the rest of a random trace as
//!   the original; a file of other tiers, or none, is refused naming the
//!   field and left as it was.
// Snapshots are left out of loom builds.
#![cfg(not(ratecell_loom))]

mod model;

use model::trace::{pick, proptest_config, small_config, small_cost, within};
use model::{AllOfDecision, AllOfModel};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratecell::{
    Algorithm, Batch, Clock, Config, Decision, Error, Field, KeyedLimiter, Limiter, MAX_TIERS,
    MultiDecision, Request, SnapshotError, States, Tier, TierError,
};
use std::sync::Barrier;

const S: u64 = 1_000_000_000;
const T0: u64 = 1_700_000_000_000_000_000;

/// A builder of `tiers`, each a list of limits.
fn builder_of(tiers: &[&[Config]]) -> ratecell::Builder<KeyedLimiter> {
    tiers
        .iter()
        .fold(KeyedLimiter::builder(), |b, tier| b.tier(tier))
}

/// A builder of one limit per tier.
fn tiers_of(tiers: &[Config]) -> ratecell::Builder<KeyedLimiter> {
    tiers.iter().fold(KeyedLimiter::builder(), |b, tier| {
        b.tier(std::slice::from_ref(tier))
    })
}

#[derive(Clone, Debug)]
struct Case {
    tiers: Vec<Vec<Config>>,
    start: u64,
    /// (time step, backwards?, cost, key, tier)
    requests: Vec<(u64, bool, u64, u64, usize)>,
}

type RawLimit = (u8, (u64, u64, u64, u64), Vec<(u64, u64, u64, u64)>);
type RawRequest = (u8, u64, u8, u64, u8, u8);
type Raw = (usize, Vec<RawLimit>, u64, Vec<RawRequest>);

fn raw() -> impl Strategy<Value = Raw> {
    (
        1..=4usize,
        prop::collection::vec(
            (
                any::<u8>(),
                any::<(u64, u64, u64, u64)>(),
                prop::collection::vec(any::<(u64, u64, u64, u64)>(), 3),
            ),
            1..=3,
        ),
        any::<u64>(),
        prop::collection::vec(any::<RawRequest>(), 1..80),
    )
}

/// Tier 0's limits drawn freely; every other tier the same algorithms with
/// their own values, keeping what a tier may not change (a window's
/// period and sub-windows, a sliding log's limit).
fn decode((n, limits, start, requests): &Raw) -> Case {
    let n = *n;
    let mut tiers = vec![Vec::new(); n];
    for (a, raw, others) in limits {
        let alg = Algorithm::ALL[usize::from(*a) % Algorithm::ALL.len()];
        let first = small_config(alg, *raw).capacity(64);
        tiers[0].push(first);
        for (tier, raw2) in tiers.iter_mut().skip(1).zip(others) {
            let mut c = small_config(alg, *raw2).capacity(64);
            if alg != Algorithm::Gcra
                && alg != Algorithm::LeakyBucket
                && alg != Algorithm::TokenBucket
            {
                c.period_ns = first.period_ns;
                c.sub_windows = first.sub_windows;
            }
            if alg == Algorithm::SlidingLog {
                c = first;
            }
            tier.push(c);
        }
    }
    let p = tiers.iter().flatten().map(|c| c.period_ns).max().unwrap();
    let cap = tiers
        .iter()
        .flatten()
        .map(|c| c.limit.max(c.burst))
        .max()
        .unwrap();
    let requests = requests
        .iter()
        .map(|&(s, x, c, y, k, tier)| {
            let (step, back) = match pick(s, &[3, 3, 2, 2, 1]) {
                0 => (0, false),
                1 => (within(x, 1, p / 8), false),
                2 => (within(x, 1, 2 * p), false),
                3 => (within(x, 1, 3) * p, false),
                _ => (within(x, 1, p), true),
            };
            let key = u64::from(k % 3);
            // Mostly a key keeps its tier; one request in three names any.
            let tier = if tier % 3 == 0 {
                usize::from(tier / 3) % n
            } else {
                key as usize % n
            };
            (step, back, small_cost(c, y, cap), key, tier)
        })
        .collect();
    Case {
        tiers,
        start: within(*start, 0, 1 << 61),
        requests,
    }
}

fn same(got: &MultiDecision, want: &AllOfDecision) -> bool {
    got.decision == want.decision && got.denied_by == want.denied_by && got.limits() == want.each
}

fn compare(case: &Case) -> Result<(), TestCaseError> {
    let (clock, _) = Clock::manual(0);
    let tiers: Vec<&[Config]> = case.tiers.iter().map(Vec::as_slice).collect();
    let limiter = tiers
        .iter()
        .fold(KeyedLimiter::builder(), |b, t| b.tier(t))
        .clock(clock)
        .build()
        .unwrap();
    prop_assert_eq!(limiter.tiers(), tiers.len());
    // Each key's state as last stored, in the terms of the tier that
    // stored it.
    let mut stored = vec![AllOfModel::new(&case.tiers[0]); 3];
    let mut t = case.start;
    let mut seen = Vec::new();
    for &(step, back, cost, key, tier) in &case.requests {
        t = if back {
            t.saturating_sub(step)
        } else {
            t + step
        };
        let got = limiter.check_each(
            key,
            Request::new(cost).at(t).tier(limiter.tier(tier).unwrap()),
        );
        let mut read = stored[key as usize].clone();
        read.reconfigure(&case.tiers[tier]);
        let want = read.check(t, cost);
        if want.decision.allowed && cost > 0 {
            stored[key as usize] = read;
        }
        seen.push((t, key, tier, cost, got.decision.allowed));
        prop_assert!(
            same(&got, &want),
            "\ntiers {:?}\nrequests so far (t, key, tier, cost, allowed): {:?}\ngot  {:?}\nwant {:?}",
            case.tiers,
            seen,
            got,
            want
        );
    }
    Ok(())
}

/// The tiered batch against the same requests checked one by one on a
/// twin limiter: the batch of each chunk at one instant.
fn batch_as_singles(case: &Case) -> Result<(), TestCaseError> {
    let tiers: Vec<&[Config]> = case.tiers.iter().map(Vec::as_slice).collect();
    let batched = tiers
        .iter()
        .fold(KeyedLimiter::builder(), |b, t| b.tier(t))
        .clock(Clock::manual(0).0)
        .build()
        .unwrap();
    let single = tiers
        .iter()
        .fold(KeyedLimiter::builder(), |b, t| b.tier(t))
        .clock(Clock::manual(0).0)
        .build()
        .unwrap();
    let mut t = case.start;
    for chunk in case.requests.chunks(5) {
        t += chunk[0].0;
        let keys: Vec<u64> = chunk.iter().map(|r| r.3).collect();
        let tier_of: Vec<Tier> = chunk.iter().map(|r| batched.tier(r.4).unwrap()).collect();
        let costs: Vec<u64> = chunk.iter().map(|r| r.2).collect();
        let mut out = vec![Decision::default(); keys.len()];
        batched.check_batch(
            Batch::new(&keys).tiers(&tier_of).costs(&costs).at(t),
            |i, d| out[i] = d,
        );
        for (i, &(_, _, cost, key, tier)) in chunk.iter().enumerate() {
            let want = single.check(
                key,
                Request::new(cost).at(t).tier(single.tier(tier).unwrap()),
            );
            prop_assert_eq!(out[i], want, "request {} of {:?} at {}", i, chunk, t);
        }
    }
    prop_assert_eq!(batched.stats().allowed, single.stats().allowed);
    prop_assert_eq!(batched.stats().denied, single.stats().denied);
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config(3000))]

    #[test]
    fn tiered_checks_decide_as_the_model(raw in raw()) {
        compare(&decode(&raw))?;
    }

    #[test]
    fn a_tiered_batch_decides_as_its_checks_one_by_one(raw in raw()) {
        batch_as_singles(&decode(&raw))?;
    }

    #[test]
    fn a_restored_tiered_limiter_decides_as_the_saved_one(raw in raw()) {
        restored_decides_alike(&decode(&raw))?;
    }
}

/// Half the requests, a snapshot, then the rest on the saved limiter and
/// on the one restored from it (at or after the snapshot's time): the same
/// decisions, under every tier.
fn restored_decides_alike(case: &Case) -> Result<(), TestCaseError> {
    let tiers: Vec<&[Config]> = case.tiers.iter().map(Vec::as_slice).collect();
    let saved = tiers
        .iter()
        .fold(KeyedLimiter::builder(), |b, t| b.tier(t))
        .clock(Clock::manual(0).0)
        .build()
        .unwrap();
    let half = case.requests.len() / 2;
    let mut t = case.start;
    let step = |t: &mut u64, (s, back, ..): (u64, bool, u64, u64, usize)| {
        *t = if back { t.saturating_sub(s) } else { *t + s };
    };
    for &r in &case.requests[..half] {
        step(&mut t, r);
        saved.check_each(r.3, Request::new(r.2).at(t).tier(saved.tier(r.4).unwrap()));
    }
    let mut bytes = Vec::new();
    saved.snapshot_at(&mut bytes, t).unwrap();
    prop_assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 3);
    let back = builder_of(&tiers)
        .clock(Clock::manual(0).0)
        .states(States::bytes(&bytes[..]))
        .build()
        .unwrap();
    prop_assert_eq!(back.tiers(), tiers.len());
    let at_save = t;
    for &r in &case.requests[half..] {
        step(&mut t, r);
        let t = t.max(at_save);
        let want = saved.check_each(r.3, Request::new(r.2).at(t).tier(saved.tier(r.4).unwrap()));
        let got = back.check_each(r.3, Request::new(r.2).at(t).tier(back.tier(r.4).unwrap()));
        prop_assert_eq!(
            got.decision,
            want.decision,
            "key {} tier {} at {}",
            r.3,
            r.4,
            t
        );
        prop_assert_eq!(got.limits(), want.limits());
        prop_assert_eq!(got.denied_by, want.denied_by);
    }
    Ok(())
}

proptest! {
    // Each case runs a saving thread and waits for two of its saves.
    #![proptest_config(proptest_config(64))]

    #[test]
    fn a_tiered_limiter_saved_periodically_decides_on_after_a_reopen(raw in raw()) {
        persisted_decides_alike(&decode(&raw))?;
    }
}

/// A fresh directory for one test (or one case).
fn temp_dir(name: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static UNIQUE: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ratecell-tiers-{name}-{}-{}",
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Waits for the file at `path` to appear (a periodic save renaming it
/// into place).
fn wait_for(path: &std::path::Path) {
    let start = std::time::Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "no periodic save of {}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Half the requests on a `Persisted` tiered limiter saving every
/// millisecond, then a copy of the file as the saving thread (not a close)
/// left it, as a process killed then would leave it; a limiter reopened
/// from the copy decides the rest as the original, under every tier.
fn persisted_decides_alike(case: &Case) -> Result<(), TestCaseError> {
    use std::time::Duration;
    let dir = temp_dir("persisted");
    let path = dir.join("tiers.snap");
    let tiers: Vec<&[Config]> = case.tiers.iter().map(Vec::as_slice).collect();
    let (clock, hand) = Clock::manual(case.start);
    let original = builder_of(&tiers)
        .clock(clock)
        .persisted(&path, Duration::from_millis(1))
        .build()
        .unwrap();
    prop_assert_eq!(original.tiers(), tiers.len());
    let half = case.requests.len() / 2;
    let mut t = case.start;
    let step = |t: &mut u64, (s, back, ..): (u64, bool, u64, u64, usize)| {
        *t = if back { t.saturating_sub(s) } else { *t + s };
    };
    for &r in &case.requests[..half] {
        step(&mut t, r);
        original.check_each(
            r.3,
            Request::new(r.2).at(t).tier(original.tier(r.4).unwrap()),
        );
    }
    // The saver judges which states are live by its clock.
    hand.set(t);
    // One save may have been under way during the checks above; the save
    // after the one that renames first began after them (the thread saves
    // one at a time).
    let _ = std::fs::remove_file(&path);
    wait_for(&path);
    std::fs::remove_file(&path).unwrap();
    wait_for(&path);
    let copy = dir.join("copy.snap");
    std::fs::copy(&path, &copy).unwrap();
    let back = builder_of(&tiers)
        .clock(Clock::manual(t).0)
        .persisted(&copy, Duration::from_secs(3600))
        .build()
        .unwrap();
    prop_assert_eq!(back.tiers(), tiers.len());
    let at_save = t;
    for &r in &case.requests[half..] {
        step(&mut t, r);
        let t = t.max(at_save);
        let want = original.check_each(
            r.3,
            Request::new(r.2).at(t).tier(original.tier(r.4).unwrap()),
        );
        let got = back.check_each(r.3, Request::new(r.2).at(t).tier(back.tier(r.4).unwrap()));
        prop_assert_eq!(
            got.decision,
            want.decision,
            "key {} tier {} at {}",
            r.3,
            r.4,
            t
        );
        prop_assert_eq!(got.limits(), want.limits());
        prop_assert_eq!(got.denied_by, want.denied_by);
    }
    drop((original, back));
    std::fs::remove_dir_all(&dir).unwrap();
    Ok(())
}

#[test]
fn a_persisted_tiered_limiter_starts_fresh_comes_back_and_refuses_other_tiers() {
    use ratecell::{Persisted, SnapshotError};
    use std::time::Duration;
    let dir = temp_dir("persisted-refused");
    let path = dir.join("tiers.snap");
    let hour = Duration::from_secs(3600);
    let free = Config::new(Algorithm::TokenBucket, 2, S).capacity(100);
    let paid = free.limit(20);
    let clock = || Clock::manual(T0).0;
    let p = tiers_of(&[free, paid])
        .clock(clock())
        .persisted(&path, hour)
        .build()
        .unwrap();
    assert!(!path.exists(), "a missing file starts fresh");
    assert_eq!(p.tiers(), 2);
    p.check(1, Request::new(15).at(T0).tier(p.tier(1).unwrap()));
    p.close().unwrap();
    let saved = std::fs::read(&path).unwrap();
    assert_eq!(u32::from_le_bytes(saved[8..12].try_into().unwrap()), 3);
    let mismatch = |r: Result<Persisted<KeyedLimiter>, SnapshotError>| match r {
        Err(SnapshotError::ConfigMismatch {
            limit,
            field,
            saved,
            wanted,
        }) => (limit, field, saved, wanted),
        Err(e) => panic!("not a mismatch: {e}"),
        Ok(_) => panic!("opened"),
    };
    // Another number of tiers; another paid limit; no tiers at all.
    let m = mismatch(
        tiers_of(&[free])
            .clock(clock())
            .persisted(&path, hour)
            .build(),
    );
    assert_eq!(m, (0, Field::Tiers, 2, 1));
    let m = mismatch(
        builder_of(&[&[free], &[paid.limit(30)]])
            .clock(clock())
            .persisted(&path, hour)
            .build(),
    );
    assert_eq!(m, (1, Field::Limit, 20, 30));
    let m = mismatch(
        KeyedLimiter::builder()
            .limit(free)
            .clock(clock())
            .persisted(&path, hour)
            .build(),
    );
    assert_eq!(m, (0, Field::Tiers, 2, 0));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        saved,
        "a refused open leaves the file as it was"
    );
    // A file saved without tiers is no tiered limiter's.
    let plain = dir.join("plain.snap");
    KeyedLimiter::builder()
        .limit(free)
        .clock(clock())
        .persisted(&plain, hour)
        .build()
        .unwrap()
        .close()
        .unwrap();
    let m = mismatch(
        tiers_of(&[free, paid])
            .clock(clock())
            .persisted(&plain, hour)
            .build(),
    );
    assert_eq!(m, (0, Field::Tiers, 0, 2));
    // Invalid tiers, with no file to restore, are refused as the
    // constructor refuses them.
    let missing = dir.join("missing.snap");
    match tiers_of(&[free, free.capacity(7)])
        .clock(clock())
        .persisted(&missing, hour)
        .build()
    {
        Err(SnapshotError::Limiter(Error::Config(e))) => assert_eq!(e.field, Field::Capacity),
        other => panic!("{other:?}"),
    }
    assert!(!missing.exists());
    // The paid key kept what it spent: 5 of 20 left, and nothing under
    // the free tier's 2.
    let back = tiers_of(&[free, paid])
        .clock(clock())
        .persisted(&path, hour)
        .build()
        .unwrap();
    assert_eq!(
        back.check(1, Request::new(0).at(T0).tier(back.tier(1).unwrap()))
            .remaining,
        5
    );
    assert!(
        !back
            .check(1, Request::new(1).at(T0).tier(back.tier(0).unwrap()))
            .allowed
    );
    drop(back);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tiered_snapshot_is_refused_by_whatever_does_not_fit_it() {
    let free = Config::new(Algorithm::TokenBucket, 2, S).capacity(100);
    let paid = free.limit(20);
    let tiered = KeyedLimiter::builder()
        .tier(&[free])
        .tier(&[paid])
        .clock(Clock::manual(T0).0)
        .build()
        .unwrap();
    tiered.check(1, Request::new(15).at(T0).tier(tiered.tier(1).unwrap()));
    let mut bytes = Vec::new();
    tiered.snapshot_at(&mut bytes, T0).unwrap();
    // A builder given no limit takes the saved tiers.
    let as_saved = KeyedLimiter::builder()
        .clock(Clock::manual(T0).0)
        .states(States::bytes(&bytes[..]))
        .build()
        .unwrap();
    let resolved = |c: Config| c.burst(c.limit).sub_windows(1);
    assert_eq!(as_saved.tiers(), 2);
    assert_eq!(as_saved.tier_limits(0), Some(&[resolved(free)][..]));
    assert_eq!(as_saved.tier_limits(1), Some(&[resolved(paid)][..]));
    let paid_tier = as_saved.tier(1).unwrap();
    assert_eq!(
        as_saved
            .check(1, Request::new(0).at(T0).tier(paid_tier))
            .remaining,
        5,
        "the paid key's state came with them"
    );
    let mismatch = |r: Result<KeyedLimiter, SnapshotError>| match r {
        Err(SnapshotError::ConfigMismatch {
            limit,
            field,
            saved,
            wanted,
        }) => (limit, field, saved, wanted),
        Err(e) => panic!("not a mismatch: {e}"),
        Ok(_) => panic!("restored"),
    };
    let clock = || Clock::manual(T0).0;
    // Another number of tiers; no tiers at all; another paid limit.
    let m = mismatch(
        builder_of(&[&[free]])
            .clock(clock())
            .states(States::bytes(&bytes[..]))
            .build(),
    );
    assert_eq!(m, (0, Field::Tiers, 2, 1));
    let m = mismatch(
        KeyedLimiter::builder()
            .limit(free)
            .clock(clock())
            .states(States::bytes(&bytes[..]))
            .build(),
    );
    assert_eq!(m, (0, Field::Tiers, 2, 0));
    let wider = paid.limit(30);
    let m = mismatch(
        builder_of(&[&[free], &[wider]])
            .clock(clock())
            .states(States::bytes(&bytes[..]))
            .build(),
    );
    assert_eq!(m, (1, Field::Limit, 20, 30));
    let e = builder_of(&[&[free], &[wider]])
        .clock(clock())
        .states(States::bytes(&bytes[..]))
        .build()
        .err();
    assert!(e.unwrap().to_string().contains("limit 1"));
    // An untiered snapshot is no tiered limiter's.
    let plain = KeyedLimiter::builder()
        .limit(free)
        .clock(clock())
        .build()
        .unwrap();
    let mut plain_bytes = Vec::new();
    plain.snapshot_at(&mut plain_bytes, T0).unwrap();
    assert_eq!(
        u32::from_le_bytes(plain_bytes[8..12].try_into().unwrap()),
        1
    );
    let m = mismatch(
        builder_of(&[&[free]])
            .clock(clock())
            .states(States::bytes(&plain_bytes[..]))
            .build(),
    );
    assert_eq!(m, (0, Field::Tiers, 0, 1));
    // ...and a builder given none takes its limits, without tiers.
    let as_saved = KeyedLimiter::builder()
        .clock(clock())
        .states(States::bytes(&plain_bytes[..]))
        .build()
        .unwrap();
    assert!(as_saved.tier(1).is_err(), "no tiers");
    // The paid key keeps what it spent.
    let back = builder_of(&[&[free], &[paid]])
        .clock(clock())
        .states(States::bytes(&bytes[..]))
        .build()
        .unwrap();
    assert_eq!(
        back.check(1, Request::new(0).at(T0).tier(back.tier(1).unwrap()))
            .remaining,
        5
    );
    assert!(
        !back
            .check(1, Request::new(1).at(T0).tier(back.tier(0).unwrap()))
            .allowed
    );
    // A tier count no tiered limiter has is damage, named.
    let mut bad = bytes.clone();
    bad[112..116].copy_from_slice(&17u32.to_le_bytes());
    match builder_of(&[&[free], &[paid]])
        .clock(clock())
        .states(States::bytes(&bad[..]))
        .build()
    {
        Err(SnapshotError::Damaged(why)) => assert!(why.contains("17 tiers"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A version past this build's is refused by name, as builds before
    // version 3 refuse a tiered snapshot.
    let mut newer = bytes.clone();
    newer[8..12].copy_from_slice(&4u32.to_le_bytes());
    match builder_of(&[&[free], &[paid]])
        .clock(clock())
        .states(States::bytes(&newer[..]))
        .build()
    {
        Err(SnapshotError::UnsupportedVersion {
            found: 4,
            supported: 3,
        }) => {}
        other => panic!("{other:?}"),
    }
}

/// A tier of another limiter, which `tiers`-tier limiters do not have.
fn foreign_tier(tiers: usize) -> Tier {
    let c = Config::new(Algorithm::FixedWindow, 1, S).capacity(1);
    let mut b = KeyedLimiter::builder();
    for _ in 0..=tiers {
        b = b.tier(&[c]);
    }
    b.build().unwrap().tier(tiers).unwrap()
}

#[test]
fn a_batch_naming_a_missing_tier_denies_that_request_and_stores_nothing_for_it() {
    let free = Config::new(Algorithm::FixedWindow, 2, S).capacity(100);
    let tiered = KeyedLimiter::builder()
        .tier(&[free])
        .tier(&[free.limit(5)])
        .build()
        .unwrap();
    // A missing tier cannot be named...
    assert_eq!(tiered.tier(2), Err(TierError { tier: 2, tiers: 2 }));
    // ...and one named by another limiter is denied for good, its key
    // not stored; the batch's other requests are decided.
    let untouched = Decision {
        limit: 77,
        ..Decision::default()
    };
    let mut out = [untouched; 3];
    let tiers = [tiered.tier(1).unwrap(), Tier::DEFAULT, foreign_tier(2)];
    tiered.check_batch(Batch::new(&[1, 2, 3]).tiers(&tiers).at(T0), |i, d| {
        out[i] = d
    });
    assert_eq!(out[2], Decision::NEVER);
    assert!(out[0].allowed && out[1].allowed);
    assert_eq!(tiered.stats().keys_tracked, 2);
    assert!(!tiered.reset(3), "the foreign tier's key was not stored");
    assert!(tiered.reset(1) && tiered.reset(2));
    // The same keys, each under its own tier: the paid key gets 5.
    let mut out = [Decision::default(); 7];
    let keys = [1, 1, 1, 2, 2, 2, 2];
    let tiers: Vec<Tier> = [0, 0, 0, 1, 1, 1, 1]
        .iter()
        .map(|&t| tiered.tier(t).unwrap())
        .collect();
    tiered.check_batch(Batch::new(&keys).tiers(&tiers).at(T0), |i, d| out[i] = d);
    let allowed: Vec<bool> = out.iter().map(|d| d.allowed).collect();
    assert_eq!(allowed, [true, true, false, true, true, true, true]);
    assert_eq!(out[6].remaining, 1);
    // A limiter without tiers has tier 0 only.
    let plain = KeyedLimiter::builder().limit(free).build().unwrap();
    let mut out = [Decision::default(); 2];
    let zero = plain.tier(0).unwrap();
    plain.check_batch(Batch::new(&[1, 1]).tiers(&[zero, zero]).at(T0), |i, d| {
        out[i] = d
    });
    assert!(out[0].allowed && out[1].allowed);
    assert_eq!(plain.tier(1), Err(TierError { tier: 1, tiers: 1 }));
    let foreign = foreign_tier(1);
    plain.check_batch(Batch::new(&[4]).tiers(&[foreign]).at(T0), |i, d| out[i] = d);
    assert_eq!(out[0], Decision::NEVER);
    assert!(!plain.reset(4), "the foreign tier's key was not stored");
}

#[test]
fn acquire_waits_for_the_named_tier() {
    use ratecell::AcquireError;
    use std::time::Duration;
    let now = Duration::ZERO;
    // One an hour free, three paid: nothing refills during the test.
    let free = Config::new(Algorithm::TokenBucket, 1, 3600 * S).capacity(100);
    let (clock, _) = Clock::manual(T0);
    let tiered = KeyedLimiter::builder()
        .tier(&[free])
        .tier(&[free.limit(3)])
        .clock(clock)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(
            tiered
                .acquire(7, Request::new(1).tier(tiered.tier(1).unwrap()), now)
                .is_ok()
        );
    }
    assert!(matches!(
        tiered.acquire(7, Request::new(1).tier(tiered.tier(1).unwrap()), now),
        Err(AcquireError::TimedOut(_))
    ));
    assert!(
        tiered
            .acquire(b"free", Request::new(1).tier(tiered.tier(0).unwrap()), now)
            .is_ok()
    );
    assert!(matches!(
        tiered.acquire(b"free", Request::new(1).tier(tiered.tier(0).unwrap()), now),
        Err(AcquireError::TimedOut(_))
    ));
    // More than the paid tier could ever admit; a tier it does not have.
    assert!(matches!(
        tiered.acquire(8, Request::new(4).tier(tiered.tier(1).unwrap()), now),
        Err(AcquireError::Unsatisfiable(_))
    ));
    assert_eq!(tiered.tier(2), Err(TierError { tier: 2, tiers: 2 }));
    assert_eq!(
        tiered.acquire(8, Request::new(1).tier(foreign_tier(2)), now),
        Err(AcquireError::Unsatisfiable(Decision::NEVER))
    );
    // The foreign tier's request is counted as a denial, as a batch counts it.
    let stats = tiered.stats();
    assert_eq!((stats.allowed, stats.denied), (4, 4));
    let plain = KeyedLimiter::builder()
        .limit(free)
        .clock(Clock::manual(T0).0)
        .build()
        .unwrap();
    assert!(
        plain
            .acquire(7, Request::new(1).tier(plain.tier(0).unwrap()), now)
            .is_ok()
    );
    assert_eq!(plain.tier(1), Err(TierError { tier: 1, tiers: 1 }));
    assert_eq!(
        plain.acquire(7, Request::new(1).tier(foreign_tier(1)), now),
        Err(AcquireError::Unsatisfiable(Decision::NEVER))
    );
}

fn field(r: Result<KeyedLimiter, SnapshotError>) -> Field {
    match r {
        Err(SnapshotError::Limiter(Error::Config(e))) => e.field,
        Err(e) => panic!("not a config error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn bad_tiers_are_refused_naming_the_field() {
    let free = Config::new(Algorithm::TokenBucket, 10, S).capacity(100);
    let paid = free.burst(1000);
    // No tiers (and no limits): nothing to build. A builder without tiers
    // is an untiered limiter, so "no limit" is the field at fault.
    assert_eq!(field(KeyedLimiter::builder().build()), Field::Limits);
    // A tier of no limits; limits and tiers both given.
    assert_eq!(
        field(KeyedLimiter::builder().tier(&[]).build()),
        Field::Limits
    );
    assert_eq!(
        field(KeyedLimiter::builder().limit(free).tier(&[free]).build()),
        Field::Tiers
    );
    let many = vec![free; MAX_TIERS + 1];
    assert_eq!(
        field(
            many.iter()
                .fold(KeyedLimiter::builder(), |b, c| b
                    .tier(std::slice::from_ref(c)))
                .build()
        ),
        Field::Tiers
    );
    assert_eq!(
        many[..MAX_TIERS]
            .iter()
            .fold(KeyedLimiter::builder(), |b, c| b
                .tier(std::slice::from_ref(c)))
            .build()
            .unwrap()
            .tiers(),
        MAX_TIERS
    );
    assert_eq!(
        field(
            KeyedLimiter::builder()
                .tier(&[free])
                .tier(&[paid.capacity(101)])
                .build()
        ),
        Field::Capacity
    );
    assert_eq!(
        field(
            KeyedLimiter::builder()
                .tier(&[free.capacity(0)])
                .tier(&[paid.capacity(0)])
                .build()
        ),
        Field::Capacity
    );
    assert_eq!(
        field(
            KeyedLimiter::builder()
                .tier(&[free])
                .tier(&[paid.overflow(ratecell::Overflow::Allow)])
                .build()
        ),
        Field::Overflow
    );
    let gcra = Config::new(Algorithm::Gcra, 10, S).capacity(100);
    assert_eq!(
        field(KeyedLimiter::builder().tier(&[free]).tier(&[gcra]).build()),
        Field::Algorithm
    );
    assert_eq!(
        field(
            KeyedLimiter::builder()
                .tier(&[free])
                .tier(&[paid.limit(0)])
                .build()
        ),
        Field::Limit
    );
    let pair = [free, gcra];
    assert_eq!(
        field(KeyedLimiter::builder().tier(&pair).tier(&pair[..1]).build()),
        Field::Limits
    );
    let e = KeyedLimiter::builder()
        .tier(&[free])
        .tier(&[gcra])
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("tier 1"), "{e}");
}

trait Limit {
    fn limit(self, limit: u64) -> Self;
}

impl Limit for Config {
    fn limit(mut self, limit: u64) -> Config {
        self.limit = limit;
        self
    }
}

#[test]
fn a_tier_out_of_range_is_refused_per_check_and_stores_nothing() {
    let free = Config::new(Algorithm::FixedWindow, 2, S).capacity(100);
    let tiered = KeyedLimiter::builder()
        .tier(&[free])
        .tier(&[free.limit(5)])
        .build()
        .unwrap();
    assert_eq!(tiered.tier(2), Err(TierError { tier: 2, tiers: 2 }));
    assert_eq!(
        tiered.check(1, Request::new(1).at(T0).tier(foreign_tier(2))),
        Decision::NEVER
    );
    assert_eq!(
        tiered
            .check_each(1, Request::new(1).at(T0).tier(foreign_tier(2)))
            .decision,
        Decision::NEVER
    );
    let stats = tiered.stats();
    assert_eq!(stats.keys_tracked, 0);
    assert_eq!(
        (stats.checks, stats.denied),
        (2, 2),
        "each counted as denied"
    );
    let direct = Limiter::builder().limit(free.capacity(0)).build().unwrap();
    assert_eq!(
        direct.check(Request::new(1).tier(foreign_tier(1))),
        Decision::NEVER
    );
    assert_eq!((direct.stats().checks, direct.stats().denied), (1, 1));
    assert!(
        TierError { tier: 2, tiers: 2 }
            .to_string()
            .contains("tier: 2 is outside 0..=1"),
    );
    let plain = KeyedLimiter::builder().limit(free).build().unwrap();
    assert_eq!(plain.tiers(), 1);
    assert!(
        plain
            .check(1, Request::new(1).at(T0).tier(plain.tier(0).unwrap()))
            .allowed
    );
    assert_eq!(plain.tier(1), Err(TierError { tier: 1, tiers: 1 }));
    assert_eq!(
        plain.check(b"k", Request::new(1).at(T0).tier(foreign_tier(1))),
        Decision::NEVER
    );
    assert!(!plain.reset(b"k"), "nothing stored");
    assert_eq!(plain.tier_limits(0), Some(&[free][..]));
    assert_eq!(plain.tier_limits(1), None);
    assert_eq!(tiered.tier_limits(1), Some(&[free.limit(5)][..]));
}

#[test]
fn a_key_moving_tiers_keeps_what_it_spent() {
    // Token bucket: a paid key that took 80 of 100 has nothing left at the
    // free burst of 10, and 20 again back on paid.
    let free = Config::new(Algorithm::TokenBucket, 1, 100 * S)
        .burst(10)
        .capacity(100);
    let paid = free.burst(100);
    let l = KeyedLimiter::builder()
        .tier(&[free])
        .tier(&[paid])
        .build()
        .unwrap();
    assert!(
        l.check(7, Request::new(80).at(T0).tier(l.tier(1).unwrap()))
            .allowed
    );
    let d = l.check(7, Request::new(1).at(T0).tier(l.tier(0).unwrap()));
    assert!(!d.allowed && d.remaining == 0, "{d:?}");
    assert_eq!(
        l.check(7, Request::new(0).at(T0).tier(l.tier(1).unwrap()))
            .remaining,
        20
    );
    // A check that names no tier is tier 0's.
    assert!(!l.check(7, Request::new(1).at(T0)).allowed);
    assert!(
        l.check(8, Request::new(10).at(T0)).allowed && !l.check(8, Request::new(1).at(T0)).allowed
    );

    // Fixed window: the count carries over; a free key that spent its 3
    // gets the 7 more of paid in the same window.
    let free = Config::new(Algorithm::FixedWindow, 3, S).capacity(100);
    let l = KeyedLimiter::builder()
        .tier(&[free])
        .tier(&[free.limit(10_000)])
        .build()
        .unwrap();
    assert_eq!(
        (0..5)
            .filter(|_| l
                .check(1, Request::new(1).at(T0).tier(l.tier(0).unwrap()))
                .allowed)
            .count(),
        3
    );
    let d = l.check(1, Request::new(0).at(T0).tier(l.tier(1).unwrap()));
    assert_eq!((d.limit, d.remaining), (10_000, 9_997));
}

#[test]
fn a_full_table_keeps_a_state_fresh_for_one_tier_but_not_another() {
    // Capacity 1 and fail-closed: one place. A key that spent 40 of the
    // big tier's 50 is full again under the small tier after 2 s, but not
    // under the big one, so a new key must not take its place.
    let small = Config::new(Algorithm::TokenBucket, 1, S)
        .burst(2)
        .capacity(1);
    let big = small.burst(50);
    let l = KeyedLimiter::builder()
        .tier(&[small])
        .tier(&[big])
        .build()
        .unwrap();
    let residents: Vec<u64> = (0..200)
        .filter(|&k| {
            l.check(k, Request::new(40).at(T0).tier(l.tier(1).unwrap()))
                .allowed
        })
        .collect();
    assert!(!residents.is_empty() && residents.len() < 200);
    let later = T0 + 2 * S;
    // Every other key now overflows rather than evict a state the big
    // tier still counts.
    for k in (0..200).filter(|k| !residents.contains(k)) {
        assert!(
            !l.check(k, Request::new(1).at(later).tier(l.tier(0).unwrap()))
                .allowed,
            "key {k}"
        );
    }
    // And the residents still have only 12 of 50 under the big tier.
    for &k in &residents {
        assert_eq!(
            l.check(k, Request::new(0).at(later).tier(l.tier(1).unwrap()))
                .remaining,
            12
        );
    }
    // Once full under every tier (38 s more), they make room.
    let much_later = T0 + 40 * S;
    let k = (0..200).find(|k| !residents.contains(k)).unwrap();
    assert!(
        l.check(k, Request::new(1).at(much_later).tier(l.tier(0).unwrap()))
            .allowed
    );
}

/// Under real threads at one instant each key admits exactly its tier's
/// capacity, for every algorithm, in both layouts (one tier of one limit,
/// a word; tiers of a sliding log with a GCRA, a block).
#[test]
fn threads_at_one_instant_admit_exactly_each_tiers_capacity() {
    const THREADS: usize = 4;
    const KEYS: u64 = 24;
    let mut cases: Vec<(Vec<Vec<Config>>, Vec<u64>)> = Vec::new();
    for alg in Algorithm::ALL {
        if alg == Algorithm::SlidingLog {
            continue;
        }
        let mk = |limit| {
            let c = Config::new(alg, limit, 100 * S).capacity(1000);
            vec![c]
        };
        cases.push((vec![mk(7), mk(300), mk(4000)], vec![7, 300, 4000]));
    }
    let log = Config::new(Algorithm::SlidingLog, 500, 100 * S).capacity(1000);
    let g = |b| {
        Config::new(Algorithm::Gcra, 50_000, 100 * S)
            .burst(b)
            .capacity(1000)
    };
    cases.push((vec![vec![log, g(20)], vec![log, g(2000)]], vec![20, 500]));
    for (tiers, capacity) in cases {
        let tiers_ref: Vec<&[Config]> = tiers.iter().map(Vec::as_slice).collect();
        let l = tiers_ref
            .iter()
            .fold(KeyedLimiter::builder(), |b, t| b.tier(t))
            .build()
            .unwrap();
        let barrier = Barrier::new(THREADS);
        let admitted: Vec<Vec<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (l, barrier, capacity) = (&l, &barrier, &capacity);
                    s.spawn(move || {
                        barrier.wait();
                        let mut got = vec![0u64; KEYS as usize];
                        for round in 0..=capacity.iter().max().unwrap() / 2 {
                            for k in 0..KEYS {
                                // Odd rounds go backwards, so keys are met
                                // in both orders.
                                let key = if round % 2 == 0 { k } else { KEYS - 1 - k };
                                let tier = (key % capacity.len() as u64) as usize;
                                if l.check(key, Request::new(1).at(T0).tier(l.tier(tier).unwrap()))
                                    .allowed
                                {
                                    got[key as usize] += 1;
                                }
                            }
                        }
                        got
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for key in 0..KEYS {
            let total: u64 = admitted.iter().map(|g| g[key as usize]).sum();
            let tier = (key % capacity.len() as u64) as usize;
            assert_eq!(total, capacity[tier], "{tiers:?} key {key} tier {tier}");
        }
    }
}

#[test]
fn what_a_tiered_limiter_does_not_do_is_refused_by_name() {
    let free = Config::new(Algorithm::Gcra, 10, S).capacity(100);
    let l = KeyedLimiter::builder()
        .tier(&[free])
        .tier(&[free.limit(20)])
        .build()
        .unwrap();
    match l.reconfigure(&[free]) {
        Err(Error::Reconfigure(e)) => assert_eq!(e.field, Field::Tiers),
        other => panic!("{other:?}"),
    }
}

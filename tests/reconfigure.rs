//! Live reconfiguration (issue 15, part 3): each algorithm's carry-over
//! rule on a worked example, the named refusals, and a stress test of
//! checks racing reconfigurations (never more admitted than the old or new
//! limit allows, and never a decision mixing the two).
// Snapshots are left out of loom builds.
#![cfg(not(ratecell_loom))]

use ratecell::{
    Algorithm, Clock, Config, Error, Field, KeyedLimiter, Limiter, Overflow, ReconfigureError,
    Request, SnapshotError, States,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const S: u64 = 1_000_000_000;
const T: u64 = 1_700_000_000 * S;

fn direct(config: Config) -> Limiter {
    Limiter::builder()
        .limit(config)
        .clock(Clock::manual(T).0)
        .build()
        .unwrap()
}

fn refusal(e: Error) -> ReconfigureError {
    match e {
        Error::Reconfigure(r) => r,
        e => panic!("not a reconfiguration refusal: {e}"),
    }
}

#[test]
fn each_algorithm_carries_its_state_over_by_its_rule() {
    use Algorithm::*;
    // (algorithm, before, after, spent, remaining after the change)
    let cases = [
        // GCRA 10/s: 4 spent = 400 ms of backlog; at 20/s (T = 50 ms,
        // burst 20) that backlog is 8 emission intervals: 12 left.
        (
            Gcra,
            Config::new(Gcra, 10, S),
            Config::new(Gcra, 20, S),
            4,
            12,
        ),
        // A longer period keeps the backlog in ns: 10 per 2 s, T = 200 ms,
        // 400 ms of backlog is 2 intervals: 8 left.
        (
            Gcra,
            Config::new(Gcra, 10, S),
            Config::new(Gcra, 10, 2 * S),
            4,
            8,
        ),
        (
            LeakyBucket,
            Config::new(LeakyBucket, 10, S),
            Config::new(LeakyBucket, 10, S).burst(15),
            4,
            11,
        ),
        // Token bucket: the 4 tokens taken stay taken.
        (
            TokenBucket,
            Config::new(TokenBucket, 10, S),
            Config::new(TokenBucket, 5, 3 * S).burst(12),
            4,
            8,
        ),
        // Lowered below what was spent: nothing left, not a wrap.
        (
            TokenBucket,
            Config::new(TokenBucket, 10, S),
            Config::new(TokenBucket, 10, S).burst(8),
            9,
            0,
        ),
        (
            FixedWindow,
            Config::new(FixedWindow, 10, S),
            Config::new(FixedWindow, 14, S),
            4,
            10,
        ),
        (
            FixedWindow,
            Config::new(FixedWindow, 10, S),
            Config::new(FixedWindow, 9, S),
            4,
            5,
        ),
        (
            SlidingWindow,
            Config::new(SlidingWindow, 10, S),
            Config::new(SlidingWindow, 12, S),
            4,
            8,
        ),
        (
            BucketedWindow,
            Config::new(BucketedWindow, 10, S),
            Config::new(BucketedWindow, 100, S),
            4,
            96,
        ),
    ];
    for (alg, before, after, spent, left) in cases {
        let l = direct(before);
        assert!(l.check(Request::new(spent).at(T)).allowed, "{alg}");
        l.reconfigure(&[after]).unwrap();
        assert_eq!(l.config(), &after, "{alg}");
        let d = l.check(Request::new(0).at(T));
        assert_eq!(d.remaining, left, "{alg}: {before:?} -> {after:?}");
        assert_eq!(
            d.limit,
            if after.burst == 0 {
                after.limit
            } else {
                after.burst
            }
        );
        // The same on a keyed limiter, for a key with state and a new one.
        let k = KeyedLimiter::builder()
            .limit(before.capacity(16))
            .clock(Clock::manual(T).0)
            .build()
            .unwrap();
        assert!(k.check(1, Request::new(spent).at(T)).allowed);
        k.reconfigure(&[after.capacity(16)]).unwrap();
        assert_eq!(
            k.check(1, Request::new(0).at(T)).remaining,
            left,
            "keyed {alg}"
        );
        let fresh = k.check(2, Request::new(0).at(T)).remaining;
        assert_eq!(
            fresh,
            direct(after).check(Request::new(0).at(T)).remaining,
            "keyed {alg} new key"
        );
    }
}

#[test]
fn changes_without_a_carry_over_are_refused_by_name() {
    use Algorithm::*;
    let cases = [
        (
            Config::new(Gcra, 10, S),
            Config::new(TokenBucket, 10, S),
            Field::Algorithm,
        ),
        (
            Config::new(Gcra, 10, S),
            Config::new(LeakyBucket, 10, S),
            Field::Algorithm,
        ),
        (
            Config::new(FixedWindow, 10, S),
            Config::new(FixedWindow, 10, 2 * S),
            Field::PeriodNs,
        ),
        (
            Config::new(SlidingWindow, 10, S),
            Config::new(SlidingWindow, 10, 2 * S),
            Field::PeriodNs,
        ),
        (
            Config::new(SlidingLog, 10, S),
            Config::new(SlidingLog, 10, 2 * S),
            Field::PeriodNs,
        ),
        (
            Config::new(SlidingLog, 10, S),
            Config::new(SlidingLog, 11, S),
            Field::Limit,
        ),
        (
            Config::new(BucketedWindow, 10, S),
            Config::new(BucketedWindow, 10, S).sub_windows(5),
            Field::SubWindows,
        ),
        // Counts laid out in 4 bits (limit 10) cannot hold 16.
        (
            Config::new(FixedWindow, 10, S),
            Config::new(FixedWindow, 16, S),
            Field::Limit,
        ),
        (
            Config::new(FixedWindow, 10, S),
            Config::new(FixedWindow, 7, S),
            Field::Limit,
        ),
        (
            Config::new(TokenBucket, 10, S),
            Config::new(TokenBucket, 10, S).burst(40),
            Field::Burst,
        ),
    ];
    for (before, after, field) in cases {
        let l = direct(before);
        assert!(l.check(Request::new(3).at(T)).allowed);
        let e = refusal(l.reconfigure(&[after]).unwrap_err());
        assert_eq!(e.field, field, "{before:?} -> {after:?}: {e}");
        assert_eq!(e.limit, 0);
        assert!(e.to_string().contains(field.name()), "{e}");
        assert_eq!(l.config(), &before, "nothing changed");
        assert_eq!(
            l.check(Request::new(0).at(T)).remaining,
            before.limit - 3,
            "state kept"
        );
    }
    // Invalid configs are the constructor's errors.
    let l = direct(Config::new(Gcra, 10, S));
    match l.reconfigure(&[Config::new(Gcra, 0, S)]) {
        Err(Error::Config(c)) => assert_eq!(c.field, Field::Limit),
        other => panic!("{other:?}"),
    }
    // Number of limits, capacity and overflow are fixed.
    assert_eq!(
        refusal(l.reconfigure(&[Config::new(Gcra, 10, S); 2]).unwrap_err()).field,
        Field::Limits
    );
    let k = KeyedLimiter::builder()
        .limit(Config::new(Gcra, 10, S).capacity(16))
        .build()
        .unwrap();
    let e = refusal(
        k.reconfigure(&[Config::new(Gcra, 10, S).capacity(32)])
            .unwrap_err(),
    );
    assert_eq!(e.field, Field::Capacity);
    let e = refusal(
        k.reconfigure(&[Config::new(Gcra, 10, S)
            .capacity(16)
            .overflow(Overflow::Allow)])
            .unwrap_err(),
    );
    assert_eq!(e.field, Field::Overflow);
    // Several limits: the message names the limit at fault.
    let m = Limiter::builder()
        .limits(&[
            Config::new(Gcra, 10, S),
            Config::new(FixedWindow, 100, 60 * S),
        ])
        .build()
        .unwrap();
    let e = refusal(
        m.reconfigure(&[Config::new(Gcra, 20, S), Config::new(FixedWindow, 100, S)])
            .unwrap_err(),
    );
    assert_eq!((e.limit, e.field), (1, Field::PeriodNs), "{e}");
    assert_eq!(m.limits()[0].limit, 10, "all or nothing");
}

#[test]
fn several_limits_change_together_and_keep_their_names() {
    let configs = [
        Config::new(Algorithm::Gcra, 10, S),
        Config::new(Algorithm::FixedWindow, 100, 60 * S),
    ];
    let m = Limiter::builder()
        .limits(&configs)
        .clock(Clock::manual(T).0)
        .names(&["second", "minute"])
        .build()
        .unwrap();
    assert!(m.check(Request::new(5).at(T)).allowed);
    let changed = [
        Config::new(Algorithm::Gcra, 12, S),
        Config::new(Algorithm::FixedWindow, 120, 60 * S),
    ];
    m.reconfigure(&changed).unwrap();
    let d = m.check_each(Request::new(0).at(T));
    assert_eq!(d.limits()[0].limit, 12);
    assert_eq!(d.limits()[1].remaining, 115, "5 of the minute's spent");
    assert_eq!(m.limit_name(1), Some("minute"));
}

#[cfg(target_os = "linux")]
#[test]
fn a_shared_region_is_refused() {
    let dir = std::env::temp_dir().join(format!("ratecell-reconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("region");
    let config = Config::new(Algorithm::Gcra, 10, S).capacity(64);
    let opened = KeyedLimiter::builder()
        .limit(config)
        .states(States::shared(&path))
        .build();
    let result = opened.map(|k| k.reconfigure(&[Config::new(Algorithm::Gcra, 20, S).capacity(64)]));
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(done) => assert_eq!(refusal(done.unwrap_err()).field, Field::Limits),
        // A platform without shared regions has nothing to refuse.
        Err(SnapshotError::Limiter(Error::Shared(e))) => {
            eprintln!("shared regions unavailable here: {e}")
        }
        Err(e) => panic!("{e}"),
    }
}

/// Threads check at one instant (so nothing refills) while another flips
/// two limits between (10, 20) and (14, 28). Every decision's two limits
/// must be a pair from one configuration, never a mix; and a fixed
/// window's count never exceeds the larger limit: at most 14 admitted by
/// the first limit, and every admission is counted.
fn race(keyed: bool) {
    let old = [
        Config::new(Algorithm::FixedWindow, 10, 60 * S),
        Config::new(Algorithm::Gcra, 20, 60 * S),
    ];
    let new = [
        Config::new(Algorithm::FixedWindow, 14, 60 * S),
        Config::new(Algorithm::Gcra, 28, 60 * S),
    ];
    let cap = |c: [Config; 2]| c.map(|c| c.capacity(if keyed { 8 } else { 0 }));
    let (old, new) = (cap(old), cap(new));
    let clock = Clock::manual(T).0;
    enum Any {
        D(Box<Limiter>),
        K(Box<KeyedLimiter>),
    }
    let l = Arc::new(if keyed {
        Any::K(Box::new(
            KeyedLimiter::builder()
                .limits(&old)
                .clock(clock)
                .build()
                .unwrap(),
        ))
    } else {
        Any::D(Box::new(
            Limiter::builder()
                .limits(&old)
                .clock(clock)
                .build()
                .unwrap(),
        ))
    });
    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU64::new(0));
    let flips = Arc::new(AtomicU64::new(0));
    let flipper = {
        let (l, stop, flips) = (l.clone(), stop.clone(), flips.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let to = if flips.load(Ordering::Relaxed) % 2 == 0 {
                    &new
                } else {
                    &old
                };
                match &*l {
                    Any::D(d) => d.reconfigure(to).unwrap(),
                    Any::K(k) => k.reconfigure(to).unwrap(),
                }
                flips.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let checkers: Vec<_> = (0..3)
        .map(|_| {
            let (l, admitted, flips) = (l.clone(), admitted.clone(), flips.clone());
            std::thread::spawn(move || {
                // Start once the flipper runs: on a loaded machine it was
                // scheduled only after the checkers had finished.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                while flips.load(Ordering::Relaxed) == 0 {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the flipper never ran"
                    );
                    std::thread::yield_now();
                }
                for _ in 0..20_000 {
                    let d = match &*l {
                        Any::D(d) => d.check_each(Request::new(1).at(T)),
                        Any::K(k) => k.check_each(3, Request::new(1).at(T)),
                    };
                    let pair = (d.limits()[0].limit, d.limits()[1].limit);
                    assert!(
                        pair == (10, 20) || pair == (14, 28),
                        "a mixed decision: {pair:?}"
                    );
                    if d.decision.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for c in checkers {
        c.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    let admitted = admitted.load(Ordering::Relaxed);
    assert!(
        (10..=14).contains(&admitted),
        "{admitted} admitted at one instant; the window allows 10 or 14"
    );
    // Every admission was counted by the window: on the larger limit,
    // exactly 14 - admitted remain.
    let left = match &*l {
        Any::D(d) => {
            d.reconfigure(&new).ok();
            d.check_each(Request::new(0).at(T))
        }
        Any::K(k) => {
            k.reconfigure(&new).ok();
            k.check_each(3, Request::new(0).at(T))
        }
    };
    assert_eq!(left.limits()[0].remaining, 14 - admitted);
}

#[test]
fn checks_racing_reconfigurations_never_mix_or_overadmit_direct() {
    race(false);
}

#[test]
fn checks_racing_reconfigurations_never_mix_or_overadmit_keyed() {
    race(true);
}

/// A snapshot taken after a reconfiguration records the new limits, and
/// the states it holds restore under them with what was spent: the
/// layout did not change, so the packed states read the same.
#[test]
fn a_snapshot_after_a_reconfiguration_restores_under_the_new_limits() {
    for alg in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
    ] {
        let before = Config::new(alg, 10, S).capacity(64);
        let after = Config::new(alg, 12, S).capacity(64);
        let k = KeyedLimiter::builder()
            .limit(before)
            .clock(Clock::manual(T).0)
            .build()
            .unwrap();
        for key in 0..20 {
            assert!(k.check(key, Request::new(key % 5).at(T)).allowed);
        }
        k.reconfigure(&[after]).unwrap();
        let mut file = Vec::new();
        k.snapshot_at(&mut file, T).unwrap();
        let saved = *KeyedLimiter::builder()
            .states(States::bytes(&file[..]))
            .build()
            .unwrap()
            .config();
        assert_eq!(
            (saved.limit, saved.period_ns),
            (12, S),
            "the new limits are saved"
        );
        let back = KeyedLimiter::builder()
            .limit(after)
            .clock(Clock::manual(T).0)
            .states(States::bytes(&file[..]))
            .build()
            .unwrap();
        for key in 0..20 {
            assert_eq!(
                back.check(key, Request::new(0).at(T)),
                k.check(key, Request::new(0).at(T)),
                "{alg} key {key}"
            );
        }
        // Counts keep the 4 spent; GCRA keeps 400 ms of backlog, which at
        // 12/s (T' = 83.3 ms, tolerance 1 s) leaves floor(600 / 83.3) = 7.
        let want = if alg == Algorithm::Gcra { 7 } else { 12 - 4 };
        assert_eq!(
            back.check(4, Request::new(0).at(T)).remaining,
            want,
            "{alg}"
        );
    }
}

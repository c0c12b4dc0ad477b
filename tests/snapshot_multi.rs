//! Snapshots of limiters of several limits (docs/SNAPSHOT.md, format
//! version 2): random 2–4 mixed limits, direct and keyed, in both layouts
//! (one word, one block), decide the rest of a random trace after a
//! restore exactly as without the restart; the limits must match in number
//! and order; a single limit is still written in version 1; damaged,
//! truncated and random input is refused without a panic.
// Snapshots are left out of loom builds.
#![cfg(not(ratecell_loom))]

use proptest::prelude::*;
use ratecell::{
    Algorithm, AnyLimiter, Clock, Config, Field, KeyedLimiter, Limiter, Request, SnapshotError,
    States,
};
use std::time::Duration;

const T0: u64 = 1_700_000_000_000_000_000;
const SECOND: u64 = 1_000_000_000;

fn clock() -> Clock {
    Clock::manual(T0).0
}

/// xorshift64*: reproducible traces and configurations without a dependency.
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
}

/// 2 to 4 limits of random algorithms, limits and periods (capacity 0).
/// Every limit saved in `snapshot`: what a builder given no limit takes
/// from it.
fn saved_configs(snapshot: &[u8]) -> Result<Vec<Config>, SnapshotError> {
    let limiter = AnyLimiter::builder()
        .clock(clock())
        .states(States::bytes(snapshot))
        .build()?;
    Ok(match &limiter {
        AnyLimiter::Direct(l) => l.limits().to_vec(),
        AnyLimiter::Keyed(k) => k.limits().to_vec(),
    })
}

fn random_limits(rng: &mut Rng) -> Vec<Config> {
    let n = 2 + rng.below(3) as usize;
    (0..n)
        .map(|_| {
            let algorithm = Algorithm::ALL[rng.below(Algorithm::ALL.len() as u64) as usize];
            let limit = 1 + rng.below(12);
            let period = SECOND / 2 + rng.below(3) * SECOND;
            let sub_windows = [1, 2, 4, 5][rng.below(4) as usize];
            let mut c = Config::new(algorithm, limit, period).sub_windows(sub_windows);
            if algorithm.has_burst() && rng.below(2) == 0 {
                c = c.burst(limit + rng.below(5));
            }
            c
        })
        .collect()
}

/// Fixed lists that reach each layout: one word (direct ≤ 128 bits, keyed
/// ≤ 96), and one block (a multi-word algorithm, or too many bits).
fn fixed_lists() -> Vec<Vec<Config>> {
    vec![
        vec![
            Config::new(Algorithm::Gcra, 10, SECOND),
            Config::new(Algorithm::FixedWindow, 30, 86_400 * SECOND),
        ],
        vec![
            Config::new(Algorithm::SlidingLog, 4, SECOND),
            Config::new(Algorithm::TokenBucket, 9, 3 * SECOND),
        ],
        vec![
            Config::new(Algorithm::BucketedWindow, 6, 2 * SECOND).sub_windows(4),
            Config::new(Algorithm::SlidingWindow, 8, SECOND),
            Config::new(Algorithm::LeakyBucket, 5, SECOND),
            Config::new(Algorithm::SlidingLog, 3, SECOND / 2),
        ],
        vec![
            Config::new(Algorithm::FixedWindow, 20, 10 * SECOND),
            Config::new(Algorithm::SlidingWindow, 8, SECOND),
        ],
        vec![
            Config::new(Algorithm::SlidingWindow, 7, SECOND),
            Config::new(Algorithm::SlidingWindow, 20, 5 * SECOND),
            Config::new(Algorithm::Gcra, 3, SECOND),
        ],
    ]
}

/// (key, cost, time): time mostly forward by up to `step` ns, sometimes
/// back a little.
fn trace(rng: &mut Rng, len: usize, keys: u64, step: u64) -> Vec<(u64, u64, u64)> {
    let mut t = T0 + rng.below(SECOND);
    (0..len)
        .map(|_| {
            match rng.below(10) {
                0 => t -= rng.below(SECOND / 20),
                1..=5 => {}
                _ => t += rng.below(step),
            }
            (rng.below(keys), rng.below(4), t)
        })
        .collect()
}

fn keyed(configs: &[Config], capacity: u64) -> Vec<Config> {
    configs.iter().map(|c| c.capacity(capacity)).collect()
}

#[test]
fn keyed_several_limits_round_trip_decides_the_rest_of_a_trace_as_without_a_restart() {
    let mut rng = Rng(0x5eed_0001);
    let mut lists = fixed_lists();
    lists.extend((0..24).map(|_| random_limits(&mut rng)));
    let mut layouts = (0, 0);
    for (case, list) in lists.iter().enumerate() {
        let configs = keyed(list, 500);
        let steps = trace(&mut rng, 2500, 40, SECOND / 50);
        let split = 800 + rng.below(900) as usize;
        let whole = KeyedLimiter::builder()
            .limits(&configs)
            .clock(clock())
            .build()
            .unwrap();
        let first = KeyedLimiter::builder()
            .limits(&configs)
            .clock(clock())
            .build()
            .unwrap();
        // A block layout keeps 62 fingerprint bits, a word layout 128 − the
        // states' bits (64 at most; the lists above reach both).
        if first.fingerprint_bits() == 62 {
            layouts.1 += 1;
        } else {
            layouts.0 += 1;
        }
        let mut t_snap = 0;
        let mut admitted = 0;
        for &(key, cost, t) in &steps[..split] {
            let (a, b) = (
                whole.check_each(key, Request::new(cost).at(t)),
                first.check_each(key, Request::new(cost).at(t)),
            );
            assert_eq!(a, b, "case {case}: the two agree before the split");
            admitted += u64::from(a.decision.allowed && cost > 0);
            t_snap = t_snap.max(t);
        }
        assert!(admitted > 0, "case {case}: the trace admits something");
        let mut bytes = Vec::new();
        first.snapshot_at(&mut bytes, t_snap).unwrap();
        assert_eq!(
            &bytes[8..12],
            &2u32.to_le_bytes(),
            "several limits: version 2"
        );
        assert_eq!(saved_configs(&bytes[..]).unwrap().len(), configs.len());
        drop(first);
        let restored = KeyedLimiter::builder()
            .limits(&configs)
            .clock(clock())
            .states(States::bytes(&bytes[..]))
            .build()
            .unwrap_or_else(|e| panic!("case {case} {configs:?}: {e}"));
        let mut denied = 0;
        for (i, &(key, cost, t)) in steps[split..].iter().enumerate() {
            let t = t.max(t_snap);
            let (a, b) = (
                whole.check_each(key, Request::new(cost).at(t)),
                restored.check_each(key, Request::new(cost).at(t)),
            );
            assert_eq!(a, b, "case {case} {configs:?}: step {i} after the restore");
            denied += u64::from(!a.decision.allowed);
        }
        if case < fixed_lists().len() {
            assert!(denied > 0, "case {case}: the trace reaches the limits");
        }
    }
    assert!(layouts.0 >= 2 && layouts.1 >= 2, "word, block: {layouts:?}");
}

#[test]
fn direct_several_limits_round_trip_decides_the_rest_of_a_trace_as_without_a_restart() {
    let mut rng = Rng(0x5eed_0002);
    let mut lists = fixed_lists();
    lists.extend((0..24).map(|_| random_limits(&mut rng)));
    for (case, configs) in lists.iter().enumerate() {
        let steps = trace(&mut rng, 1500, 1, SECOND / 5);
        let split = 300 + rng.below(900) as usize;
        let whole = Limiter::builder()
            .limits(configs)
            .clock(clock())
            .build()
            .unwrap();
        let first = Limiter::builder()
            .limits(configs)
            .clock(clock())
            .build()
            .unwrap();
        let mut t_snap = 0;
        for &(_, cost, t) in &steps[..split] {
            assert_eq!(
                whole.check_each(Request::new(cost).at(t)),
                first.check_each(Request::new(cost).at(t))
            );
            t_snap = t_snap.max(t);
        }
        let mut bytes = Vec::new();
        first.snapshot_at(&mut bytes, t_snap).unwrap();
        let restored = Limiter::builder()
            .limits(configs)
            .clock(clock())
            .states(States::bytes(&bytes[..]))
            .build()
            .unwrap_or_else(|e| panic!("case {case} {configs:?}: {e}"));
        assert_eq!(restored.limits(), &configs[..]);
        for (i, &(_, cost, t)) in steps[split..].iter().enumerate() {
            // A direct snapshot keeps its state whatever its age: time may
            // go back after it too.
            assert_eq!(
                whole.check_each(Request::new(cost).at(t)),
                restored.check_each(Request::new(cost).at(t)),
                "case {case} {configs:?}: step {i} after the restore"
            );
        }
    }
}

#[test]
fn the_limits_must_match_in_number_and_order_naming_the_limit_and_field() {
    let list = keyed(&fixed_lists()[2], 64);
    let l = KeyedLimiter::builder()
        .limits(&list)
        .clock(clock())
        .build()
        .unwrap();
    l.check(1, Request::new(1).at(T0));
    let mut bytes = Vec::new();
    l.snapshot_at(&mut bytes, T0).unwrap();

    let mismatch = |wanted: &[Config]| match KeyedLimiter::builder()
        .limits(wanted)
        .clock(clock())
        .states(States::bytes(&bytes[..]))
        .build()
    {
        Err(SnapshotError::ConfigMismatch {
            limit,
            field,
            saved,
            wanted,
        }) => (limit, field, saved, wanted),
        other => panic!("expected a mismatch, got {other:?}"),
    };
    assert_eq!(mismatch(&list[..3]), (0, Field::Limits, 4, 3));
    assert_eq!(mismatch(&list[..1]), (0, Field::Limits, 4, 1));
    let mut other = list.clone();
    other[3] = Config {
        period_ns: SECOND,
        ..other[3]
    };
    assert_eq!(mismatch(&other), (3, Field::PeriodNs, SECOND / 2, SECOND));
    let mut swapped = list.clone();
    swapped.swap(1, 2);
    let (limit, field, ..) = mismatch(&swapped);
    assert_eq!((limit, field), (1, Field::Algorithm));
    let mut limit2 = list.clone();
    limit2[2] = Config {
        limit: 6,
        ..limit2[2]
    };
    assert_eq!(mismatch(&limit2), (2, Field::Limit, 5, 6));
    let err = KeyedLimiter::builder()
        .limits(&other)
        .clock(clock())
        .states(States::bytes(&bytes[..]))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "limit 3: the snapshot's period_ns is {}, the configuration asks for {SECOND}",
            SECOND / 2
        )
    );
    // One limit asked of a file of several, and several of a file of one.
    assert!(matches!(
        KeyedLimiter::builder()
            .limit(list[0])
            .clock(clock())
            .states(States::bytes(&bytes[..]))
            .build(),
        Err(SnapshotError::ConfigMismatch {
            field: Field::Limits,
            ..
        })
    ));
    let single = KeyedLimiter::builder()
        .limit(list[0])
        .clock(clock())
        .build()
        .unwrap();
    let mut one = Vec::new();
    single.snapshot_at(&mut one, T0).unwrap();
    assert!(matches!(
        KeyedLimiter::builder()
            .limits(&list)
            .clock(clock())
            .states(States::bytes(&one[..]))
            .build(),
        Err(SnapshotError::ConfigMismatch {
            field: Field::Limits,
            saved: 1,
            wanted: 4,
            ..
        })
    ));
    // An invalid list is refused as its constructor refuses it.
    let mut bad = list.clone();
    bad[1] = bad[1].capacity(65);
    assert!(matches!(
        KeyedLimiter::builder()
            .limits(&bad)
            .clock(clock())
            .states(States::bytes(&bytes[..]))
            .build(),
        Err(SnapshotError::Limiter(_))
    ));
    // The header gives every limit back to a builder given none.
    let saved = saved_configs(&bytes[..]).unwrap();
    assert_eq!(saved.len(), 4);
    assert_eq!(saved[3].period_ns, SECOND / 2);
    let back = KeyedLimiter::builder()
        .limits(&saved)
        .clock(clock())
        .states(States::bytes(&bytes[..]))
        .build()
        .unwrap();
    assert!(
        !back.check_each(1, Request::new(3).at(T0)).decision.allowed,
        "key 1 kept its spend"
    );
}

/// A direct snapshot of one limit (GCRA 5 per second, 3 admitted at T0,
/// saved at T0) written by the build before format version 2 (main at
/// 2e8ad6b, through `ratecell_snapshot_save_at`): version 1 files stay
/// readable, and one limit is still written in version 1, byte for byte.
const V1_GCRA: &[u8] = include_bytes!("snapshot_v1_gcra.bin");

fn v1_limiter() -> (Config, Limiter) {
    let cfg = Config::new(Algorithm::Gcra, 5, SECOND);
    let l = Limiter::builder()
        .limit(cfg)
        .clock(clock())
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(l.check(Request::new(1).at(T0)).allowed);
    }
    (cfg, l)
}

#[test]
fn version_1_files_stay_readable_and_one_limit_is_still_written_in_version_1() {
    let (cfg, l) = v1_limiter();
    let mut bytes = Vec::new();
    l.snapshot_at(&mut bytes, T0).unwrap();
    assert_eq!(&bytes[8..12], &1u32.to_le_bytes());
    assert_eq!(bytes, V1_GCRA, "one limit is written as version 1 was");
    let back = Limiter::builder()
        .limit(cfg)
        .clock(clock())
        .states(States::bytes(V1_GCRA))
        .build()
        .unwrap();
    assert_eq!(back.check(Request::new(0).at(T0)).remaining, 2);
    let back = Limiter::builder()
        .limits(&[cfg])
        .clock(clock())
        .states(States::bytes(V1_GCRA))
        .build()
        .unwrap();
    assert_eq!(back.check(Request::new(0).at(T0)).remaining, 2);
}

/// Small snapshots of several limits: keyed word and block layouts, and a
/// direct block.
fn small_snapshots() -> Vec<(Vec<Config>, Vec<u8>, bool)> {
    let mut out = Vec::new();
    for list in [&fixed_lists()[0], &fixed_lists()[1]] {
        let configs = keyed(list, 8);
        let l = KeyedLimiter::builder()
            .limits(&configs)
            .clock(clock())
            .build()
            .unwrap();
        for key in 0..3 {
            l.check(key, Request::new(1 + key).at(T0 + key * 1000));
        }
        let mut bytes = Vec::new();
        l.snapshot_at(&mut bytes, T0).unwrap();
        out.push((configs, bytes, true));
    }
    let configs = fixed_lists()[2].clone();
    let l = Limiter::builder()
        .limits(&configs)
        .clock(clock())
        .build()
        .unwrap();
    l.check(Request::new(2).at(T0));
    let mut bytes = Vec::new();
    l.snapshot_at(&mut bytes, T0).unwrap();
    out.push((configs, bytes, false));
    out
}

fn restore_any(configs: &[Config], bytes: &[u8], keyed: bool) -> Result<(), SnapshotError> {
    if keyed {
        KeyedLimiter::builder()
            .limits(configs)
            .clock(clock())
            .states(States::bytes(bytes))
            .build()
            .map(drop)
    } else {
        Limiter::builder()
            .limits(configs)
            .clock(clock())
            .states(States::bytes(bytes))
            .build()
            .map(drop)
    }
}

#[test]
fn truncated_flipped_and_extended_snapshots_of_several_limits_are_refused() {
    for (configs, bytes, keyed) in small_snapshots() {
        restore_any(&configs, &bytes, keyed).unwrap();
        for len in 0..bytes.len() {
            let err = restore_any(&configs, &bytes[..len], keyed).unwrap_err();
            assert!(
                matches!(
                    err,
                    SnapshotError::Truncated
                        | SnapshotError::NotASnapshot
                        | SnapshotError::Damaged(_)
                ),
                "truncated at {len}: {err}"
            );
        }
        for at in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] ^= flip;
                assert!(
                    restore_any(&configs, &damaged, keyed).is_err(),
                    "byte {at} ^ {flip:#x} was accepted"
                );
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            restore_any(&configs, &longer, keyed),
            Err(SnapshotError::Damaged(_))
        ));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Random bytes behind a valid magic, version 2 and a limit count in
    /// range (so the limits table is read) are refused without a panic.
    #[test]
    fn random_version_2_bytes_are_refused(mut bytes in proptest::collection::vec(any::<u8>(), 0..600), count in 0u32..12) {
        if bytes.len() >= 32 {
            bytes[..8].copy_from_slice(b"\x89RCSNAP\n");
            bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
            bytes[28..32].copy_from_slice(&count.to_le_bytes());
        }
        let configs = keyed(&fixed_lists()[1], 8);
        prop_assert!(KeyedLimiter::builder().limits(&configs).clock(clock()).states(States::bytes(&bytes[..])).build().is_err());
        prop_assert!(Limiter::builder().limits(&fixed_lists()[2]).clock(clock()).states(States::bytes(&bytes[..])).build().is_err());
        let _ = saved_configs(&bytes[..]);
    }

    /// Bytes of a valid snapshot of several limits overwritten at random:
    /// refused (or, should the checksum ever collide, restored without a
    /// panic).
    #[test]
    fn mutated_snapshots_of_several_limits_never_panic(which in 0usize..3, edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let (configs, mut bytes, keyed) = small_snapshots().swap_remove(which);
        let original = bytes.clone();
        for (at, value) in edits {
            let at = at % bytes.len();
            bytes[at] = value;
        }
        let result = restore_any(&configs, &bytes, keyed);
        if bytes != original {
            prop_assert!(result.is_err());
        }
    }
}

#[test]
fn persisted_several_limits_come_back_and_other_limits_are_refused() {
    let dir = std::env::temp_dir().join(format!("ratecell-multi-persisted-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.snap");
    let configs = keyed(&fixed_lists()[1], 100);
    let now = Clock::tsc().now_ns();
    {
        let l = KeyedLimiter::builder()
            .limits(&configs)
            .persisted(&path, Duration::from_secs(3600))
            .build()
            .unwrap();
        for _ in 0..4 {
            assert!(l.check(9, Request::new(1).at(now)).allowed);
        }
        assert_eq!(l.check_each(9, Request::new(1).at(now)).denied_by, Some(0));
        l.close().unwrap();
    }
    let l = KeyedLimiter::builder()
        .limits(&configs)
        .persisted(&path, Duration::from_secs(3600))
        .build()
        .unwrap();
    let d = l.check_each(9, Request::new(1).at(now));
    assert_eq!(
        d.denied_by,
        Some(0),
        "the sliding log stays spent across the restart"
    );
    assert_eq!(
        d.limits()[1].remaining,
        5,
        "and the token bucket kept its 4"
    );
    drop(l);
    let err = KeyedLimiter::builder()
        .limit(configs[0])
        .persisted(&path, Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        SnapshotError::ConfigMismatch {
            field: Field::Limits,
            ..
        }
    ));
    // The direct form.
    let direct = &fixed_lists()[0];
    let p = Limiter::builder()
        .limits(direct)
        .persisted(dir.join("d.snap"), Duration::from_secs(60))
        .build()
        .unwrap();
    for _ in 0..10 {
        assert!(p.check(Request::new(1).at(now)).allowed);
    }
    p.close().unwrap();
    let back = Limiter::builder()
        .limits(direct)
        .clock(clock())
        .states(States::snapshot(dir.join("d.snap")))
        .build()
        .unwrap();
    assert!(
        !back.check(Request::new(1).at(now)).allowed,
        "the GCRA's 10 are spent"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_snapshot_of_several_limits_while_threads_check_holds_states_the_keys_had() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const KEYS: u64 = 32;
    const LIMIT: u64 = 1_000_000;
    const HOUR: u64 = 3600 * SECOND;
    let layouts = [
        // One word: two fixed windows (82 bits).
        [
            Config::new(Algorithm::FixedWindow, LIMIT, HOUR).capacity(1000),
            Config::new(Algorithm::FixedWindow, 2 * LIMIT, 24 * HOUR).capacity(1000),
        ],
        // One block under the key's latch.
        [
            Config::new(Algorithm::Gcra, LIMIT, HOUR).capacity(1000),
            Config::new(Algorithm::BucketedWindow, 2 * LIMIT, HOUR).capacity(1000),
        ],
    ];
    for (word, configs) in [true, false].into_iter().zip(layouts) {
        let l = Arc::new(
            KeyedLimiter::builder()
                .limits(&configs)
                .clock(clock())
                .build()
                .unwrap(),
        );
        // A block keeps 62 fingerprint bits; this word layout 128 − 82.
        assert_eq!(l.fingerprint_bits() != 62, word, "{configs:?}");
        let admitted: Arc<Vec<AtomicU64>> =
            Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..3)
            .map(|w| {
                let (l, admitted, stop) = (l.clone(), admitted.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = w;
                    while !stop.load(Ordering::Relaxed) {
                        let key = i % KEYS;
                        if l.check(key, Request::new(1).at(T0)).allowed {
                            admitted[key as usize].fetch_add(1, Ordering::SeqCst);
                        }
                        i += 7;
                    }
                })
            })
            .collect();
        let total = || {
            admitted
                .iter()
                .map(|a| a.load(Ordering::SeqCst))
                .sum::<u64>()
        };
        // Bounded: the threads admit thousands a millisecond.
        let started = std::time::Instant::now();
        while total() < 10_000 && started.elapsed() < Duration::from_secs(60) {
            std::thread::yield_now();
        }
        for _ in 0..2 {
            let before: Vec<u64> = admitted.iter().map(|a| a.load(Ordering::SeqCst)).collect();
            let mut bytes = Vec::new();
            l.snapshot_at(&mut bytes, T0).unwrap();
            let after: Vec<u64> = admitted.iter().map(|a| a.load(Ordering::SeqCst)).collect();
            let r = KeyedLimiter::builder()
                .limits(&configs)
                .clock(clock())
                .states(States::bytes(&bytes[..]))
                .build()
                .unwrap();
            for key in 0..KEYS {
                let peek = r.check_each(key, Request::new(0).at(T0));
                let saved: Vec<u64> = peek
                    .limits()
                    .iter()
                    .zip(&configs)
                    .map(|(d, c)| c.limit - d.remaining)
                    .collect();
                // Every admission spent one unit of each limit, together:
                // a torn state would show two different counts.
                assert_eq!(saved[0], saved[1], "{configs:?} key {key}: {saved:?}");
                let (lo, hi) = (before[key as usize], after[key as usize] + 3);
                assert!(
                    lo <= saved[0] && saved[0] <= hi,
                    "key {key}: saved {} outside [{lo}, {hi}]",
                    saved[0]
                );
                // Across save and restore, never more than the tightest.
                let left = peek.decision.remaining;
                assert!(left == 0 || r.check(key, Request::new(left).at(T0)).allowed);
                assert!(
                    !r.check(key, Request::new(1).at(T0)).allowed,
                    "the tightest limit is reached"
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
    }
}

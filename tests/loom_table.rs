//! loom models of the keyed table's protocols (SPEC §5): no interleaving of
//! insert, evict, update and reset lets two keys share a state or one key
//! have two. Run with
//! `RUSTFLAGS="--cfg ratecell_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test loom_table`.
//!
//! The tables here are tiny (capacity 2: one shard, one bucket), so every
//! new key competes for the same few places and evictions happen; tables
//! of several buckets, wrap-around and tombstones are modelled in
//! `tests/loom_table_buckets.rs`.
#![cfg(ratecell_loom)]

use loom::thread;
use ratecell::{Algorithm, Clock, Config, KeyedLimiter, Overflow, Request};
use std::sync::Arc;

const T0: u64 = 1_000_000_000_000;
const SECOND: u64 = 1_000_000_000;

/// A table of one bucket: four places for single-word states, eight for
/// multi-word ones.
fn tiny(algorithm: Algorithm, limit: u64) -> Arc<KeyedLimiter> {
    let config = Config::new(algorithm, limit, SECOND)
        .sub_windows(2)
        .capacity(2);
    Arc::new(
        KeyedLimiter::builder()
            .limit(config)
            .clock(Clock::manual(T0).0)
            .build()
            .unwrap(),
    )
}

/// How many places one bucket has for this algorithm.
fn places(algorithm: Algorithm) -> u64 {
    match algorithm {
        Algorithm::BucketedWindow | Algorithm::SlidingLog => 8,
        _ => 4,
    }
}

/// A loom model with room for the setup: filling a bucket is a few hundred
/// atomic steps before the threads even start.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let executions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&executions);
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 20_000;
    builder.check(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    eprintln!(
        "{} executions",
        executions.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// One of each kind of table: GCRA (64-bit state), fixed window (a packed
/// 128-bit state) and the sliding log (a latched block).
const KINDS: [Algorithm; 3] = [
    Algorithm::Gcra,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
];

/// Two threads check key 9 at once, at costs 2 and 1: one state results,
/// and it has counted both requests. With `placed`, the key already holds a
/// state, so the two updates race on its slot and the one whose CAS loses
/// takes the long way (the whole window, from a fresh load); without, both
/// race to insert it.
fn two_checks_of_one_key(placed: bool) {
    for algorithm in KINDS {
        model(move || {
            // A limit that leaves 2 once both requests are counted.
            let lim = tiny(algorithm, 5 + u64::from(placed));
            if placed {
                assert!(lim.check(9, Request::new(1).at(T0)).allowed);
            }
            let other = lim.clone();
            let a = thread::spawn(move || other.check(9, Request::new(2).at(T0)).remaining);
            let b = lim.check(9, Request::new(1).at(T0)).remaining;
            let a = a.join().unwrap();
            // In either order: 4 then 2, or 3 then 2.
            let mut seen = [a, b];
            seen.sort();
            assert!(seen == [2, 3] || seen == [2, 4], "{algorithm}: {seen:?}");
            assert_eq!(
                lim.check(9, Request::new(0).at(T0)).remaining,
                2,
                "{algorithm}"
            );
            assert_eq!(
                lim.stats().keys_tracked,
                1,
                "{algorithm}: one key, one state"
            );
        });
    }
}

#[test]
fn insert_races_insert_of_the_same_key() {
    two_checks_of_one_key(false);
}

#[test]
fn update_races_update_of_the_same_key() {
    two_checks_of_one_key(true);
}

/// A new key is placed while an existing key is updated: neither touches
/// the other's state.
#[test]
fn insert_races_update() {
    for algorithm in KINDS {
        model(move || {
            let lim = tiny(algorithm, 5);
            assert!(lim.check(1, Request::new(1).at(T0)).allowed);
            let other = lim.clone();
            let a = thread::spawn(move || other.check(2, Request::new(3).at(T0)).allowed);
            let b = lim.check(1, Request::new(2).at(T0)).allowed;
            assert!(a.join().unwrap() && b);
            assert_eq!(
                lim.check(1, Request::new(0).at(T0)).remaining,
                2,
                "{algorithm}: key 1"
            );
            assert_eq!(
                lim.check(2, Request::new(0).at(T0)).remaining,
                2,
                "{algorithm}: key 2"
            );
            assert_eq!(lim.stats().keys_tracked, 2);
        });
    }
}

/// The bucket is full of keys that are fresh again; a new key evicts one
/// while that key is being updated. Whichever wins, the updated key ends
/// with exactly its one new request, the new key with its own, and no
/// request lands on another key's state.
#[test]
fn eviction_races_update() {
    for algorithm in KINDS {
        model(move || {
            let lim = tiny(algorithm, 3);
            let full = places(algorithm);
            for key in 0..full {
                assert!(lim.check(key, Request::new(1).at(T0)).allowed);
            }
            // Two periods later every resident is equivalent to fresh.
            let later = T0 + 2 * SECOND;
            let other = lim.clone();
            let a = thread::spawn(move || other.check(100, Request::new(1).at(later)));
            let b = lim.check(0, Request::new(2).at(later));
            let a = a.join().unwrap();
            assert!(a.allowed && b.allowed, "{algorithm}");
            assert_eq!(a.remaining, 2, "{algorithm}: the new key's own state");
            assert_eq!(b.remaining, 1, "{algorithm}: key 0's own state");
            assert_eq!(
                lim.check(100, Request::new(0).at(later)).remaining,
                2,
                "{algorithm}"
            );
            assert_eq!(
                lim.check(0, Request::new(0).at(later)).remaining,
                1,
                "{algorithm}"
            );
            let stats = lim.stats();
            assert!(stats.evictions >= 1, "{algorithm}: {stats:?}");
        });
    }
}

/// An eviction never takes a place whose state is live: with the bucket
/// full of spent keys, a new key overflows, and the residents keep their
/// states while one of them is updated concurrently.
#[test]
fn overflow_never_evicts_a_live_state() {
    for algorithm in KINDS {
        model(move || {
            let lim = tiny(algorithm, 2);
            let full = places(algorithm);
            for key in 0..full {
                assert!(lim.check(key, Request::new(2).at(T0)).allowed);
            }
            let other = lim.clone();
            let a = thread::spawn(move || other.check(100, Request::new(1).at(T0 + 1)).allowed);
            let b = lim.check(0, Request::new(1).at(T0 + 1)).allowed;
            assert!(!a.join().unwrap(), "{algorithm}: no place, fail closed");
            assert!(!b, "{algorithm}: key 0 is still spent");
            assert_eq!(lim.stats().overflows, 1, "{algorithm}");
            assert_eq!(lim.stats().evictions, 0, "{algorithm}");
        });
    }
}

/// Under `Overflow::Evict`, a new key (100) evicts the live state nearest
/// to fresh (key 0, which spent 1 where the others spent their limit, or
/// the first of equals) while key 0 is being updated. No state is shared,
/// none is counted twice, every other key keeps its own, and the outcome is
/// one of a sequential order's:
/// - the update lands first, and the eviction, judging the window again,
///   takes key 0 (which ends fresh), or, where the update moved key 0 past
///   the others (the sliding log's newer entry), another key;
/// - the eviction lands first, and the update, finding key 0 gone, places
///   it anew in the place of the state nearest to fresh then: key 100's,
///   or (the sliding log, whose key 100 holds the newest entry) another's.
#[test]
fn live_eviction_races_update_of_its_victim() {
    for algorithm in KINDS {
        model(move || {
            let config = Config::new(algorithm, 3, SECOND)
                .sub_windows(2)
                .capacity(2)
                .overflow(Overflow::Evict);
            let lim = Arc::new(
                KeyedLimiter::builder()
                    .limit(config)
                    .clock(Clock::manual(T0).0)
                    .build()
                    .unwrap(),
            );
            let full = places(algorithm);
            assert!(lim.check(0, Request::new(1).at(T0)).allowed);
            for key in 1..full {
                assert!(lim.check(key, Request::new(3).at(T0)).allowed);
            }
            let t = T0 + 1;
            let other = lim.clone();
            let a = thread::spawn(move || other.check(100, Request::new(1).at(t)));
            let b = lim.check(0, Request::new(1).at(t));
            let a = a.join().unwrap();
            assert!(a.allowed && b.allowed, "{algorithm}");
            let stats = lim.stats();
            assert_eq!(stats.keys_tracked, full, "{algorithm}: {stats:?}");
            assert_eq!(stats.overflows, 0, "{algorithm}");
            // A peek at an untracked key under Evict says fresh (3).
            let left = |key| lim.check(key, Request::new(0).at(t)).remaining;
            let fresh_others = (1..full).filter(|&key| left(key) == 3).count();
            let spent_others = (1..full).filter(|&key| left(key) == 0).count() as u64;
            assert_eq!(fresh_others as u64 + spent_others, full - 1, "{algorithm}");
            let seen = (left(0), left(100), stats.evicted_live, fresh_others);
            assert!(
                [(3, 2, 1, 0), (1, 2, 1, 1), (2, 3, 2, 0), (2, 2, 2, 1)].contains(&seen),
                "{algorithm}: (key 0, key 100, live evictions, other keys fresh) = {seen:?}"
            );
        });
    }
}

/// `reset` races an update of the same key: the key ends either fresh
/// (reset last) or with exactly the one request made after the reset.
#[test]
fn reset_races_update() {
    for algorithm in KINDS {
        let ways: Arc<std::sync::Mutex<Vec<u64>>> = Arc::default();
        let w = Arc::clone(&ways);
        model(move || {
            let w = |r: u64| {
                let mut w = w.lock().unwrap();
                if !w.contains(&r) {
                    w.push(r);
                }
            };
            let lim = tiny(algorithm, 4);
            assert!(lim.check(5, Request::new(3).at(T0)).allowed);
            let other = lim.clone();
            let a = thread::spawn(move || {
                other.reset(5);
            });
            let d = lim.check(5, Request::new(1).at(T0));
            a.join().unwrap();
            let left = lim.check(5, Request::new(0).at(T0)).remaining;
            let tracked = lim.stats().keys_tracked;
            assert!(d.allowed, "{algorithm}");
            // The update's decision says which came first, and the state
            // left must be that order's.
            match d.remaining {
                // Update first (3 of 4 used, then 1), then reset: fresh.
                0 => assert_eq!((left, tracked), (4, 0), "{algorithm}"),
                // Reset first: the update placed the key anew.
                3 => assert_eq!((left, tracked), (3, 1), "{algorithm}"),
                r => panic!("{algorithm}: the update saw neither order: {r}"),
            }
            w(d.remaining);
        });
        let ways = ways.lock().unwrap();
        assert!(
            ways.contains(&0) && ways.contains(&3),
            "{algorithm}: only {ways:?} seen"
        );
    }
}

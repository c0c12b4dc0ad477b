//! loom models of the keyed table where its races live: tables of several
//! buckets, keys that share a bucket under loom's fixed hash key, probe
//! windows that wrap from the last bucket to the first, tombstones, and
//! insert, evict, reset and batch checks racing an update (SPEC §5).
//!
//! Each model ties every racing decision to the state it leaves (which
//! order happened is read off a decision, and the final state must be that
//! order's), and counts the racing branches it took over all executions
//! (`loom_hooks::Race`): a model whose threads never met on the branch it
//! is about fails. Run with `scripts/loom.sh --test loom_table_buckets`.
#![cfg(ratecell_loom)]

use loom::thread;
use ratecell::loom_hooks::{self, Race};
use ratecell::{Algorithm, Batch, Clock, Config, KeyedLimiter, Request};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

const T0: u64 = 1_000_000_000_000;
const SECOND: u64 = 1_000_000_000;

/// One kind of table each: GCRA (a 64-bit state in a 128-bit slot), fixed
/// window (a packed 128-bit state) and the sliding log (a latched block).
const KINDS: [Algorithm; 3] = [
    Algorithm::Gcra,
    Algorithm::FixedWindow,
    Algorithm::SlidingLog,
];

/// Places per bucket: four 16-byte slots, or eight block headers.
fn per_bucket(algorithm: Algorithm) -> usize {
    match algorithm {
        Algorithm::BucketedWindow | Algorithm::SlidingLog => 8,
        _ => 4,
    }
}

/// A table of two buckets (block tables: 9 places for capacity 6, in
/// 8-header buckets) or three (word tables: 12 slots for capacity 8, in
/// 4-slot buckets), one shard: every probe window is the whole shard, and
/// wraps from the last bucket to the first.
fn table(algorithm: Algorithm, limit: u64) -> KeyedLimiter {
    let capacity = if per_bucket(algorithm) == 8 { 6 } else { 8 };
    let config = Config::new(algorithm, limit, SECOND)
        .sub_windows(2)
        .capacity(capacity);
    KeyedLimiter::builder()
        .limit(config)
        .clock(Clock::manual(T0).0)
        .build()
        .unwrap()
}

/// `n` keys whose home is the table's last bucket (found once per kind;
/// hashing touches no atomic). Asserts that they share it, and that the
/// table has the bucket count [`table`] means it to.
fn last_bucket_keys(lim: &KeyedLimiter, algorithm: Algorithm, n: usize) -> Vec<u64> {
    static FOUND: Mutex<Vec<(Algorithm, Vec<u64>)>> = Mutex::new(Vec::new());
    let (_, buckets) = loom_hooks::home_bucket(lim, 0);
    assert_eq!(buckets, if per_bucket(algorithm) == 8 { 2 } else { 3 });
    let mut found = FOUND.lock().unwrap();
    let keys = match found.iter().find(|(a, k)| *a == algorithm && k.len() >= n) {
        Some((_, keys)) => keys.clone(),
        None => {
            let keys: Vec<u64> = (0..10_000)
                .filter(|&k| loom_hooks::home_bucket(lim, k).0 == buckets - 1)
                .take(n)
                .collect();
            assert_eq!(keys.len(), n, "{algorithm}: too few keys share a bucket");
            found.push((algorithm, keys.clone()));
            keys
        }
    };
    for &k in &keys[..n] {
        assert_eq!(loom_hooks::home_bucket(lim, k).0, buckets - 1, "key {k}");
    }
    keys[..n].to_vec()
}

/// Runs `f` in every execution loom explores (at `LOOM_MAX_PREEMPTIONS`,
/// 3 from scripts/loom.sh), with the race counters cleared first;
/// returns how many executions there were. Each execution's body runs on
/// a thread with a roomy stack (a keyed limiter and its setup outgrow the
/// 32 KiB loom gives a model's main thread).
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) -> usize {
    loom_hooks::clear();
    let executions = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&executions);
    let f = Arc::new(f);
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 100_000;
    builder.check(move || {
        count.fetch_add(1, Relaxed);
        let f = Arc::clone(&f);
        thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || f())
            .unwrap()
            .join()
            .unwrap();
    });
    let n = executions.load(Relaxed);
    eprintln!(
        "{name}: {n} executions; races: cas lost {}, moved {}, placed meanwhile {}, place contended {}, latch busy {}",
        loom_hooks::seen(Race::CasLost),
        loom_hooks::seen(Race::Moved),
        loom_hooks::seen(Race::PlacedMeanwhile),
        loom_hooks::seen(Race::PlaceContended),
        loom_hooks::seen(Race::LatchBusy),
    );
    n
}

/// Counts of which way each execution went, shared across executions
/// (std types: invisible to loom).
#[derive(Default)]
struct Ways(Mutex<Vec<(&'static str, usize)>>);

impl Ways {
    fn saw(&self, way: &'static str) {
        let mut ways = self.0.lock().unwrap();
        match ways.iter_mut().find(|(w, _)| *w == way) {
            Some((_, n)) => *n += 1,
            None => ways.push((way, 1)),
        }
    }

    /// Asserts that every way in `all` was taken at least once.
    fn require(&self, what: &str, all: &[&str]) {
        let ways = self.0.lock().unwrap();
        eprintln!("{what}: {ways:?}");
        for way in all {
            assert!(
                ways.iter().any(|(w, n)| w == way && *n > 0),
                "{what}: no execution went '{way}': {ways:?}"
            );
        }
    }
}

/// A key placed past a tombstone and past the end of the shard: the last
/// bucket is full of keys homed there, one more of them wraps to the first
/// bucket, and one key before it is reset (its place becomes a tombstone)
/// while the wrapped key is updated. A lookup must go on past the
/// tombstone and around the end; had the reset emptied the place instead,
/// the lookup would stop there and place the wrapped key a second time.
#[test]
fn reset_of_an_earlier_key_races_the_update_of_a_wrapped_key() {
    for algorithm in KINDS {
        let ways = Arc::new(Ways::default());
        let w = Arc::clone(&ways);
        model(
            &format!("{algorithm} tombstone before a wrapped key"),
            move || {
                let lim = Arc::new(table(algorithm, 4));
                let s = per_bucket(algorithm);
                let keys = last_bucket_keys(&lim, algorithm, s + 1);
                for &k in &keys {
                    assert!(lim.check(k, Request::new(1).at(T0)).allowed);
                }
                let wrapped = keys[s];
                let other = Arc::clone(&lim);
                // Which ran first: the reset thread raises a flag when done.
                // A loom atomic, so loom also runs the schedules in which the
                // flag is raised (and the reset done) before the update
                // looks: its exploration does not reorder a load with a later
                // CAS of another thread unless something else makes them race.
                let done = Arc::new(loom::sync::atomic::AtomicBool::new(false));
                let reset_done = Arc::clone(&done);
                let earlier = keys[1];
                let reset = thread::spawn(move || {
                    let had = other.reset(earlier);
                    reset_done.store(true, SeqCst);
                    had
                });
                let before = done.load(SeqCst);
                let d = lim.check(wrapped, Request::new(2).at(T0));
                let after = done.load(SeqCst);
                assert!(reset.join().unwrap(), "{algorithm}: the key had a state");
                assert!(d.allowed, "{algorithm}");
                assert_eq!(d.remaining, 1, "{algorithm}: the wrapped key's own state");
                assert_eq!(
                    lim.check(wrapped, Request::new(0).at(T0)).remaining,
                    1,
                    "{algorithm}"
                );
                assert_eq!(
                    lim.check(keys[1], Request::new(0).at(T0)).remaining,
                    4,
                    "{algorithm}"
                );
                assert_eq!(lim.stats().keys_tracked, s as u64, "{algorithm}");
                w.saw(match (before, after) {
                    (true, _) => "lookup past the tombstone",
                    (false, false) => "update before the reset",
                    (false, true) => "overlapped",
                });
            },
        );
        ways.require(
            &format!("{algorithm}"),
            &[
                "lookup past the tombstone",
                "update before the reset",
                "overlapped",
            ],
        );
    }
}

/// `reset` of a wrapped key races its update. The update's decision
/// says which came first, and the state left must be that order's:
/// update first (it sees 3 of 4 used, leaves 0) then reset: fresh, 4 left;
/// reset first: the update places the key anew, 3 left. Both orders must
/// occur, and so must the update that found the slot and then lost it to
/// the reset (`Race::Moved`, or for a block, a reset waiting on the latch).
#[test]
fn reset_races_the_update_of_a_wrapped_key() {
    for algorithm in KINDS {
        let ways = Arc::new(Ways::default());
        let w = Arc::clone(&ways);
        model(&format!("{algorithm} reset races update"), move || {
            let lim = Arc::new(table(algorithm, 4));
            let s = per_bucket(algorithm);
            let keys = last_bucket_keys(&lim, algorithm, s + 1);
            for &k in &keys[..s] {
                assert!(lim.check(k, Request::new(1).at(T0)).allowed);
            }
            let wrapped = keys[s];
            assert!(lim.check(wrapped, Request::new(3).at(T0)).allowed);
            let other = Arc::clone(&lim);
            let reset = thread::spawn(move || other.reset(wrapped));
            let d = lim.check(wrapped, Request::new(1).at(T0));
            let had = reset.join().unwrap();
            let left = lim.check(wrapped, Request::new(0).at(T0)).remaining;
            let tracked = lim.stats().keys_tracked;
            assert!(d.allowed, "{algorithm}: {d:?}");
            match d.remaining {
                0 => {
                    assert!(had, "{algorithm}");
                    assert_eq!(left, 4, "{algorithm}: reset after the update");
                    assert_eq!(tracked, s as u64, "{algorithm}");
                    w.saw("update first");
                }
                3 => {
                    assert!(had, "{algorithm}: the reset found the first state");
                    assert_eq!(left, 3, "{algorithm}: the update after the reset");
                    assert_eq!(tracked, s as u64 + 1, "{algorithm}");
                    w.saw("reset first");
                }
                r => panic!("{algorithm}: the update saw neither order: remaining {r}"),
            }
        });
        ways.require(&format!("{algorithm}"), &["update first", "reset first"]);
        let lost = loom_hooks::seen(Race::Moved) + loom_hooks::seen(Race::CasLost);
        let waited = loom_hooks::seen(Race::LatchBusy);
        assert!(
            lost + waited > 0,
            "{algorithm}: the update never lost its slot to the reset"
        );
    }
}

/// Every place of the shard holds a key that is fresh again; a new key
/// (homed in the last bucket) evicts while the first resident of its window
/// is updated. If the update lands first the resident is no longer fresh
/// and the new key evicts the next one (1 eviction); if the eviction lands
/// first the resident is re-placed by its update, evicting another
/// (2 evictions). Both must occur, as must an eviction whose CAS (or latch)
/// met the update.
#[test]
fn eviction_races_update_across_buckets() {
    for algorithm in KINDS {
        let ways = Arc::new(Ways::default());
        let w = Arc::clone(&ways);
        model(&format!("{algorithm} eviction races update"), move || {
            let lim = Arc::new(table(algorithm, 3));
            let (_, buckets) = loom_hooks::home_bucket(&lim, 0);
            let places = (buckets * per_bucket(algorithm)) as u64;
            let homed = last_bucket_keys(&lim, algorithm, 2);
            let (first, new) = (homed[0], homed[1]);
            // `first` is placed first, in the last bucket's first place;
            // then keys until every place is taken (a key homed in another
            // bucket may wrap; all that matters is that the shard is full).
            assert!(lim.check(first, Request::new(1).at(T0)).allowed);
            let mut key = 1_000_000;
            while lim.stats().keys_tracked < places {
                if key != new {
                    assert!(lim.check(key, Request::new(1).at(T0)).allowed);
                }
                key += 1;
            }
            let later = T0 + 2 * SECOND;
            let other = Arc::clone(&lim);
            let a = thread::spawn(move || other.check(new, Request::new(1).at(later)));
            let b = lim.check(first, Request::new(2).at(later));
            let a = a.join().unwrap();
            assert!(a.allowed && b.allowed, "{algorithm}");
            assert_eq!((a.remaining, b.remaining), (2, 1), "{algorithm}");
            assert_eq!(
                lim.check(new, Request::new(0).at(later)).remaining,
                2,
                "{algorithm}"
            );
            assert_eq!(
                lim.check(first, Request::new(0).at(later)).remaining,
                1,
                "{algorithm}"
            );
            let stats = lim.stats();
            assert_eq!(stats.keys_tracked, places, "{algorithm}: {stats:?}");
            match stats.evictions {
                1 => w.saw("update first"),
                2 => w.saw("eviction first"),
                e => panic!("{algorithm}: {e} evictions"),
            }
        });
        ways.require(&format!("{algorithm}"), &["update first", "eviction first"]);
        let met = loom_hooks::seen(Race::PlaceContended)
            + loom_hooks::seen(Race::Moved)
            + loom_hooks::seen(Race::CasLost);
        assert!(met > 0, "{algorithm}: the eviction never met the update");
    }
}

/// Two new keys of one bucket race to insert while its last place is free:
/// one takes it, the other wraps to the next bucket. Both end with their
/// own state, and the shard latch serialises them (so in some execution
/// one waited on it).
#[test]
fn two_inserts_race_for_the_last_place_of_a_bucket() {
    for algorithm in KINDS {
        model(&format!("{algorithm} two inserts, one place"), move || {
            let lim = Arc::new(table(algorithm, 4));
            let s = per_bucket(algorithm);
            let keys = last_bucket_keys(&lim, algorithm, s + 1);
            for &k in &keys[..s - 1] {
                assert!(lim.check(k, Request::new(1).at(T0)).allowed);
            }
            let (x, y) = (keys[s - 1], keys[s]);
            let other = Arc::clone(&lim);
            let a = thread::spawn(move || other.check(x, Request::new(2).at(T0)));
            let b = lim.check(y, Request::new(3).at(T0));
            let a = a.join().unwrap();
            assert_eq!((a.remaining, b.remaining), (2, 1), "{algorithm}");
            assert_eq!(
                lim.check(x, Request::new(0).at(T0)).remaining,
                2,
                "{algorithm}"
            );
            assert_eq!(
                lim.check(y, Request::new(0).at(T0)).remaining,
                1,
                "{algorithm}"
            );
            assert_eq!(lim.stats().keys_tracked, s as u64 + 1, "{algorithm}");
        });
        assert!(
            loom_hooks::seen(Race::LatchBusy) > 0,
            "{algorithm}: the inserts never met on the shard latch"
        );
    }
}

/// The same new key inserted by two threads at once, in a bucket with one
/// free place: exactly one state results, and the inserter that came second
/// finds, under the latch, that the key was placed meanwhile (which must
/// happen in some execution).
#[test]
fn two_inserts_of_one_key_place_it_once() {
    for algorithm in KINDS {
        let ways = Arc::new(Ways::default());
        let w = Arc::clone(&ways);
        model(&format!("{algorithm} one key inserted twice"), move || {
            let lim = Arc::new(table(algorithm, 6));
            let s = per_bucket(algorithm);
            let keys = last_bucket_keys(&lim, algorithm, s);
            for &k in &keys[..s - 1] {
                assert!(lim.check(k, Request::new(1).at(T0)).allowed);
            }
            let x = keys[s - 1];
            let other = Arc::clone(&lim);
            let a = thread::spawn(move || other.check(x, Request::new(2).at(T0)).remaining);
            let b = lim.check(x, Request::new(1).at(T0)).remaining;
            let a = a.join().unwrap();
            // a first: 4 then 3; b first: 5 then 3.
            match (a, b) {
                (4, 3) => w.saw("a first"),
                (3, 5) => w.saw("b first"),
                other => panic!("{algorithm}: {other:?}"),
            }
            assert_eq!(
                lim.check(x, Request::new(0).at(T0)).remaining,
                3,
                "{algorithm}"
            );
            assert_eq!(lim.stats().keys_tracked, s as u64, "{algorithm}");
        });
        ways.require(&format!("{algorithm}"), &["a first", "b first"]);
        assert!(
            loom_hooks::seen(Race::PlacedMeanwhile) > 0,
            "{algorithm}: no inserter ever found the key placed meanwhile"
        );
    }
}

/// A batch of two checks of one key races a single check of it: each of
/// the batch's decisions is a check of its own, so the three decisions are
/// those of one of the three orders that keep the batch's order, and the
/// state left has counted each admission once.
#[test]
fn a_batch_races_a_check_of_the_same_key() {
    for algorithm in KINDS {
        let ways = Arc::new(Ways::default());
        let w = Arc::clone(&ways);
        model(&format!("{algorithm} batch races check"), move || {
            let lim = Arc::new(table(algorithm, 3));
            let keys = last_bucket_keys(&lim, algorithm, 2);
            let (k, near) = (keys[0], keys[1]);
            assert!(lim.check(k, Request::new(1).at(T0)).allowed);
            let other = Arc::clone(&lim);
            let batch = thread::spawn(move || {
                let mut out = [ratecell::Decision::default(); 3];
                other.check_batch(Batch::new(&[k, near, k]).at(T0), |i, d| out[i] = d);
                out
            });
            let single = lim.check(k, Request::new(1).at(T0));
            let out = batch.join().unwrap();
            let d = |x: &ratecell::Decision| (x.allowed, x.remaining);
            let seen = (d(&out[0]), d(&out[2]), d(&single));
            // 2 units left for k: the batch's first, the single check and
            // the batch's last, in one of three orders.
            let way = match seen {
                ((true, 1), (true, 0), (false, 0)) => "batch, batch, single",
                ((true, 1), (false, 0), (true, 0)) => "batch, single, batch",
                ((true, 0), (false, 0), (true, 1)) => "single, batch, batch",
                _ => panic!("{algorithm}: no order gives {seen:?}"),
            };
            w.saw(way);
            assert_eq!(d(&out[1]), (true, 2), "{algorithm}: the other key");
            assert_eq!(
                lim.check(k, Request::new(0).at(T0)).remaining,
                0,
                "{algorithm}"
            );
            let stats = lim.stats();
            assert_eq!((stats.checks, stats.allowed), (6, 4), "{algorithm}");
        });
        ways.require(
            &format!("{algorithm}"),
            &["batch, batch, single", "single, batch, batch"],
        );
    }
}

/// `acquire` with no time to wait on a leaky bucket whose queue is not
/// empty: the admission is vetoed (its wait exceeds the budget) and stores
/// nothing, whatever races with it. A concurrent check's queue wait shows
/// whether the veto stored anything: it must always be one interval.
#[test]
fn acquires_veto_stores_nothing_while_a_check_races() {
    let ways = Arc::new(Ways::default());
    let w = Arc::clone(&ways);
    model("leaky bucket keyed acquire veto", move || {
        // 4 per 4 µs: one interval T = 1 µs, a queue of 4.
        let config = Config::new(Algorithm::LeakyBucket, 4, 4_000).capacity(4);
        let lim = Arc::new(
            KeyedLimiter::builder()
                .limit(config)
                .clock(Clock::manual(T0).0)
                .build()
                .unwrap(),
        );
        assert_eq!(lim.check(1, Request::new(1).at(T0)).wait_ns, 0);
        let other = Arc::clone(&lim);
        let a = thread::spawn(move || other.acquire(1, 1, std::time::Duration::ZERO));
        let b = lim.check(1, Request::new(1).at(T0));
        let a = a.join().unwrap();
        let Err(ratecell::AcquireError::TimedOut(vetoed)) = a else {
            panic!("the acquire was not vetoed: {a:?}");
        };
        assert!(b.allowed);
        assert_eq!(b.wait_ns, 1_000, "the veto stored a place in the queue");
        // The veto's would-be wait says which it saw: 1 µs before the
        // check, 2 µs after.
        match vetoed.retry_after_ns {
            1_000 => w.saw("veto first"),
            2_000 => w.saw("check first"),
            r => panic!("retry after {r}"),
        }
        assert_eq!(
            lim.check(1, Request::new(0).at(T0)).wait_ns,
            2_000,
            "two places taken"
        );
    });
    ways.require("acquire veto", &["veto first", "check first"]);
}

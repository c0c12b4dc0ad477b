//! Issue 20, item 2: a fork while other threads hold a *per-key* latch of a
//! block algorithm (bucketed window, sliding log; keyed and direct). Such a
//! latch records no holder, so before the fork barrier (`src/cell/fork.rs`) a
//! child that inherited one held spun on it forever. Its own test binary:
//! it forks the whole process.

#![cfg(unix)]

use ratecell::{Algorithm, Config, KeyedLimiter, Limiter, Request};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

const T0: u64 = 1_700_000_000_000_000_000;
const HOUR: u64 = 3_600_000_000_000;

/// Seconds a child may take before it counts as hung.
const CHILD_BOUND_S: u32 = 30;
/// The limit of every limiter here, per hour; all checks are at `T0`, so
/// each key (and each direct limiter) admits at most this many in total.
const LIMIT: u64 = 20;
/// Keys the threads and the children check (a table of 64: the threads
/// also add new keys, which evict and latch other keys' places).
const KEYS: u64 = 32;

fn configs() -> [Config; 2] {
    [
        Config::new(Algorithm::SlidingLog, LIMIT, HOUR),
        Config::new(Algorithm::BucketedWindow, LIMIT, HOUR).sub_windows(6),
    ]
}

/// Every limiter under test and how many admissions the parent's threads
/// have counted for each key (index `KEYS` for a direct limiter). A count
/// is bumped after its check returns, so in a child it is at most what the
/// inherited state really admitted.
struct Subjects {
    keyed: Vec<KeyedLimiter>,
    direct: Vec<Limiter>,
    keyed_counted: Vec<Vec<AtomicU64>>,
    direct_counted: Vec<AtomicU64>,
}

fn subjects() -> Subjects {
    let counts = || (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    Subjects {
        keyed: configs()
            .iter()
            .map(|c| {
                KeyedLimiter::builder()
                    .limit(c.capacity(64))
                    .build()
                    .unwrap()
            })
            .collect(),
        direct: configs()
            .iter()
            .map(|c| Limiter::builder().limit(*c).build().unwrap())
            .collect(),
        keyed_counted: configs().iter().map(|_| counts()).collect(),
        direct_counted: configs().iter().map(|_| AtomicU64::new(0)).collect(),
    }
}

/// A parent thread: checks the keys (and the direct limiters) over and
/// over, and now and then a new key, until `stop`.
fn hammer(s: &Subjects, seed: u64, stop: &AtomicBool) {
    let mut fresh = (seed + 1) << 40;
    let mut i = seed;
    while !stop.load(Relaxed) {
        i = i
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = (i >> 33) % KEYS;
        for (lim, counted) in s.keyed.iter().zip(&s.keyed_counted) {
            if lim.check(key, Request::new(1).at(T0)).allowed {
                counted[key as usize].fetch_add(1, Relaxed);
            }
            if i % 8 == 0 {
                fresh += 1;
                lim.check(fresh, Request::new(1).at(T0));
            }
        }
        for (lim, counted) in s.direct.iter().zip(&s.direct_counted) {
            if lim.check(Request::new(1).at(T0)).allowed {
                counted.fetch_add(1, Relaxed);
            }
        }
    }
}

/// In a child: every key and direct limiter still answers, and admits at
/// most what the inherited state had left. Returns the failures.
fn child(s: &Subjects) -> Vec<String> {
    let mut failures = Vec::new();
    let mut judge = |what: String, counted: u64, check: &dyn Fn() -> bool| {
        let admitted = (0..LIMIT + 5).filter(|_| check()).count() as u64;
        if counted + admitted > LIMIT {
            failures.push(format!(
                "{what}: the parent counted {counted} admissions, the child admitted {admitted} more (limit {LIMIT})"
            ));
        }
    };
    for (n, (lim, counted)) in s.keyed.iter().zip(&s.keyed_counted).enumerate() {
        for key in 0..KEYS {
            let c = counted[key as usize].load(Relaxed);
            judge(format!("keyed {n}, key {key}"), c, &|| {
                lim.check(key, Request::new(1).at(T0)).allowed
            });
        }
        // New keys too (the insert path latches other keys' places).
        for key in 0..100u64 {
            lim.check(1 << 60 | key, Request::new(1).at(T0));
        }
    }
    for (n, (lim, counted)) in s.direct.iter().zip(&s.direct_counted).enumerate() {
        judge(format!("direct {n}"), counted.load(Relaxed), &|| {
            lim.check(Request::new(1).at(T0)).allowed
        });
    }
    failures
}

#[test]
fn a_child_forked_while_per_key_latches_are_held_never_hangs_nor_over_admits() {
    let s = Arc::new(subjects());
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..2u64)
        .map(|seed| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || hammer(&s, seed, &stop))
        })
        .collect();
    let (forks, mut hung, mut failed) = (40, 0, 0);
    for _ in 0..forks {
        std::thread::sleep(Duration::from_millis(2));
        // SAFETY: the child only checks limiters (no lock the parent's
        // threads may hold: the library takes none but its own latches)
        // and writes to stderr, then leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // A hang must end the child, not the test run: SIGALRM's
            // default action kills it. The bound is the child's own, not
            // the parent's polling: its checks take milliseconds, so a
            // child still checking after CHILD_BOUND_S hung, however busy
            // the machine.
            // SAFETY: alarm only arms a timer.
            unsafe { libc::alarm(CHILD_BOUND_S) };
            let failures = child(&s);
            for f in &failures {
                eprintln!("child: {f}");
            }
            // SAFETY: ends the child without the parent's exit code.
            unsafe { libc::_exit(i32::from(!failures.is_empty())) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child, which its alarm ends.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid);
        if libc::WIFSIGNALED(status) {
            // One is enough to fail: no need to wait out the others.
            hung += 1;
            break;
        }
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            failed += 1;
        }
    }
    stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        (hung, failed),
        (0, 0),
        "of {forks} children, {hung} hung on a per-key latch copied mid-check \
         (killed) and {failed} admitted more than their inherited state allowed"
    );
}

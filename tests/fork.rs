//! A forked child keeps time (issue 20, item 2): the coarse clock's
//! refresher thread is not inherited by a child, and coarse limiters made
//! before or after the fork must still see time pass there.
//!
//! One test in this binary, so the process that forks has only the harness
//! threads and the checkers this test starts.

#![cfg(unix)]

use ratecell::{Algorithm, Clock, Config, KeyedLimiter, Limiter};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SECOND: u64 = 1_000_000_000;

/// How long the child's acquires may wait for a turn 10 ms away.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the parent waits for the child: beyond the child's own bounds
/// (200 sleeps for the clock to move, three acquires' timeouts), so a child that
/// fails one of them says which rather than being killed as hung.
const CHILD_BOUND: Duration = Duration::from_secs(60);

/// 100 per second, one at a time: a second request is admitted 10 ms after
/// the first, never at once.
fn spaced() -> Config {
    Config::new(Algorithm::Gcra, 100, SECOND).burst(1)
}

/// What the child checks; returns the failures.
fn child_checks(before: &Limiter, keyed: &KeyedLimiter) -> Vec<String> {
    let mut failures = Vec::new();
    let after = Limiter::builder()
        .limit(spaced())
        .clock(Clock::coarse())
        .build()
        .unwrap();
    // The child's refresher must move the time on by 10 ms within 200
    // sleeps of 10 ms: attempts, so 2 s on an idle machine and longer on a
    // busy one, which may be slow to schedule it (a frozen clock never
    // moves).
    let t0 = before.now_ns();
    for _ in 0..200 {
        if before.now_ns() > t0 + 10_000_000 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if before.now_ns() <= t0 + 10_000_000 {
        failures.push(format!(
            "the coarse time stood still: {} then {}",
            t0,
            before.now_ns()
        ));
    }
    // Spend the burst, then wait for the next: at 100/s, 10 ms on a clock
    // that moves, never on one that stands still. The bound is the
    // acquire's own timeout, the one thing the call controls: admitted
    // before it, the clock moved. It is far beyond the 10 ms, so a machine
    // too busy to run the child for a while does not fail it.
    for (name, limiter) in [
        ("made before the fork", before),
        ("made in the child", &after),
    ] {
        let _ = limiter.check(1);
        if let Err(e) = limiter.acquire(1, ACQUIRE_TIMEOUT) {
            failures.push(format!("{name}: acquire: {e}"));
        }
    }
    // A keyed limiter made before the fork keeps its states and its time.
    let _ = keyed.check(7, 1);
    if keyed.acquire(7, 1, ACQUIRE_TIMEOUT).is_err() {
        failures.push("keyed: acquire of an existing key timed out".into());
    }
    failures
}

#[test]
fn coarse_limiters_keep_time_in_a_forked_child() {
    let before = Arc::new(
        Limiter::builder()
            .limit(spaced())
            .clock(Clock::coarse())
            .build()
            .unwrap(),
    );
    let keyed = Arc::new(
        KeyedLimiter::builder()
            .limit(spaced().capacity(64))
            .clock(Clock::coarse())
            .build()
            .unwrap(),
    );
    for key in 0..8 {
        keyed.check(key, 1);
    }
    // Threads checking while the fork happens (existing keys only: a key
    // insertion takes a shard latch, whose recovery in a child is another
    // test's subject).
    let stop = Arc::new(AtomicBool::new(false));
    let checkers: Vec<_> = (0..2)
        .map(|i| {
            let (before, keyed, stop) = (before.clone(), keyed.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    before.check(0);
                    keyed.check(i, 0);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));

    // SAFETY: the child calls only what the test needs (the library, the
    // allocator, thread creation, stderr) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let failures = child_checks(&before, &keyed);
        for f in &failures {
            eprintln!("child: {f}");
        }
        // SAFETY: ends the child without running the parent's destructors
        // or the test harness.
        unsafe { libc::_exit(i32::from(!failures.is_empty())) };
    }

    // Wait for the child, bounded (it hung forever before the fix).
    let deadline = Instant::now() + CHILD_BOUND;
    let mut status = 0;
    let exited = loop {
        // SAFETY: waits for our own child; status is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break true;
        }
        if Instant::now() > deadline {
            // SAFETY: kills and reaps the child this test forked.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    stop.store(true, Ordering::Relaxed);
    for c in checkers {
        c.join().unwrap();
    }
    assert!(exited, "the child hung (killed after {CHILD_BOUND:?})");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed (status {status:#x}); see its stderr above"
    );
    // The parent's limiters still keep time too.
    let t0 = before.now_ns();
    std::thread::sleep(Duration::from_millis(20));
    assert!(before.now_ns() > t0);
}

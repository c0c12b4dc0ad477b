//! Issue 20, item 2: a fork while other threads hold a table latch. Its
//! own test binary: it forks the whole process, which must not happen
//! while other tests spawn children.

use ratecell::{Algorithm, Config, KeyedLimiter, Request};
use std::time::Duration;

const T0: u64 = 1_700_000_000_000_000_000;
const HOUR: u64 = 3_600_000_000_000;

/// Seconds a child may take before it counts as hung.
const CHILD_BOUND_S: u32 = 30;

/// Issue 20, item 2: a fork while other threads add keys copies a shard
/// latch held by a thread that does not exist in the child. Before the
/// latches recorded their holder, 31 of 40 children spun forever.
#[test]
fn a_child_forked_while_a_latch_is_held_never_hangs() {
    let limiter = std::sync::Arc::new(
        KeyedLimiter::builder()
            .limit(Config::new(Algorithm::Gcra, 5, HOUR).capacity(100))
            .build()
            .unwrap(),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let adders: Vec<_> = (0..2u64)
        .map(|n| {
            let (limiter, stop) = (limiter.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut key = n << 40;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // New keys (a full table: every one an insert attempt
                    // under the shard latch), and resets (the latch too).
                    key += 1;
                    limiter.check(key, Request::new(1).at(T0));
                    limiter.reset(key - 1);
                }
            })
        })
        .collect();
    let mut hung = 0;
    let forks = 40;
    for _ in 0..forks {
        std::thread::sleep(Duration::from_millis(2));
        // SAFETY: the child only checks keys (no lock the parent's threads
        // may hold: the table takes none but its own latches, and glibc
        // makes malloc usable after fork) and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // A hang must end the child, not the test run: SIGALRM's
            // default action kills it. The bound is the child's own, not
            // the parent's polling: 200 checks take microseconds, so a
            // child killed after CHILD_BOUND_S hung, however busy the
            // machine.
            // SAFETY: alarm only arms a timer.
            unsafe { libc::alarm(CHILD_BOUND_S) };
            for key in 0..200u64 {
                limiter.check(1 << 50 | key, Request::new(1).at(T0));
                limiter.reset(1 << 50 | key);
            }
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child, which its alarm ends.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid);
        if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM {
            // One is enough to fail: no need to wait out the others.
            hung += 1;
            break;
        } else {
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for a in adders {
        a.join().unwrap();
    }
    assert_eq!(
        hung, 0,
        "{hung} of {forks} children hung on a latch copied mid-insert"
    );
}

//! loom models of the holder-recording latch (`cell::latch_recording`):
//! the shard latch that a waiter takes over when its holder no longer
//! exists (a process that died holding it in a shared region, or a thread
//! of the process a child was forked from). Run with
//! `RUSTFLAGS="--cfg ratecell_loom" cargo test --release --test loom_latch` (at three preemptions,
//! whatever `LOOM_MAX_PREEMPTIONS` says).
#![cfg(ratecell_loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicU64 as Count, Ordering::SeqCst};
use loom::thread;
use ratecell::loom_hooks::{AtomicU64, take_and_die, with_latch_recording};

/// A model at three preemptions, with room for the waiters' turns: each
/// spin on a live holder is a few branches, as in `loom_table.rs`. Prints
/// how many executions loom explored.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let executions = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = executions.clone();
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 20_000;
    builder.preemption_bound = Some(3);
    builder.check(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    eprintln!(
        "{} executions at 3 preemptions",
        executions.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// The latch bit (`cell::LATCHED`).
const LATCHED: u64 = 1 << 63;

/// A latch left by a holder that is already dead: two waiters race to take
/// it over. Both get through, never both inside at once, and exactly one
/// takes it over (the other then waits for that one, which is alive).
#[test]
fn two_waiters_take_over_a_dead_holders_latch_one_at_a_time() {
    model(|| {
        let word = Arc::new(AtomicU64::new(LATCHED | 1));
        let inside = Arc::new(Count::new(0));
        let takeovers = Arc::new(Count::new(0));
        let waiters: Vec<_> = [2u64, 3]
            .into_iter()
            .map(|me| {
                let (word, inside, takeovers) = (word.clone(), inside.clone(), takeovers.clone());
                thread::spawn(move || {
                    with_latch_recording(
                        &word,
                        me,
                        |h| h != 1,
                        |taken_over| {
                            assert_eq!(inside.fetch_add(1, SeqCst), 0, "two holders at once");
                            takeovers.fetch_add(u64::from(taken_over), SeqCst);
                            inside.fetch_sub(1, SeqCst);
                        },
                    );
                })
            })
            .collect();
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(takeovers.load(SeqCst), 1);
        assert_eq!(word.load(SeqCst), 0, "released");
    });
}

/// A holder that dies while a waiter may already be waiting: the waiter
/// gets through, and takes over only once the holder is dead.
#[test]
fn a_waiter_takes_over_only_from_a_dead_holder() {
    model(|| {
        let word = Arc::new(AtomicU64::new(0));
        let dead = Arc::new(AtomicBool::new(false));
        let dier = {
            let (word, dead) = (word.clone(), dead.clone());
            thread::spawn(move || {
                take_and_die(&word, 1);
                dead.store(true, SeqCst);
            })
        };
        let alive = |h: u64| h != 1 || !dead.load(SeqCst);
        with_latch_recording(&word, 2, alive, |taken_over| {
            if taken_over {
                assert!(dead.load(SeqCst), "took the latch from a live holder");
            }
        });
        dier.join().unwrap();
    });
}

/// With every holder alive, the latch is plain mutual exclusion: nobody is
/// ever taken over.
#[test]
fn a_live_holder_is_never_taken_over() {
    model(|| {
        let word = Arc::new(AtomicU64::new(0));
        let inside = Arc::new(Count::new(0));
        let threads: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|me| {
                let (word, inside) = (word.clone(), inside.clone());
                thread::spawn(move || {
                    with_latch_recording(
                        &word,
                        me,
                        |_| true,
                        |taken_over| {
                            assert!(!taken_over);
                            assert_eq!(inside.fetch_add(1, SeqCst), 0, "two holders at once");
                            inside.fetch_sub(1, SeqCst);
                        },
                    );
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(word.load(SeqCst), 0, "released");
    });
}

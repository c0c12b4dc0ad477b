//! loom models of the holder-recording latch (`cell::latch_recording`):
//! the shard latch that a waiter takes over when its holder no longer
//! exists (a process that died holding it in a shared region, or a thread
//! of the process a child was forked from). Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_latch`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicBool, AtomicU64 as Count, Ordering::SeqCst};
use loom::thread;
use ratecell::loom_hooks::{AtomicU64, take_and_die, with_latch_recording};

/// Two waiters and a holder that dies: both waiters get through (no
/// interleaving leaves one spinning), never both inside at once, and a
/// takeover happens only from the dead holder.
#[test]
fn waiters_take_over_a_dead_holders_latch_one_at_a_time() {
    loom::model(|| {
        let word = Arc::new(AtomicU64::new(0));
        let dead = Arc::new(AtomicBool::new(false));
        let inside = Arc::new(Count::new(0));
        let dier = {
            let (word, dead) = (word.clone(), dead.clone());
            thread::spawn(move || {
                take_and_die(&word, 1);
                dead.store(true, SeqCst);
            })
        };
        let waiters: Vec<_> = [2u64, 3]
            .into_iter()
            .map(|me| {
                let (word, dead, inside) = (word.clone(), dead.clone(), inside.clone());
                thread::spawn(move || {
                    let alive = |h: u64| h != 1 || !dead.load(SeqCst);
                    with_latch_recording(&word, me, alive, |taken_over| {
                        assert_eq!(inside.fetch_add(1, SeqCst), 0, "two holders at once");
                        if taken_over {
                            assert!(dead.load(SeqCst), "took the latch from a live holder");
                        }
                        inside.fetch_sub(1, SeqCst);
                    });
                })
            })
            .collect();
        dier.join().unwrap();
        for w in waiters {
            w.join().unwrap();
        }
    });
}

/// With every holder alive, the latch is plain mutual exclusion: nobody is
/// ever taken over.
#[test]
fn a_live_holder_is_never_taken_over() {
    loom::model(|| {
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

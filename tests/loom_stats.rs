//! loom models of the statistics stripes (`sync::stripes`): the
//! process-wide allocator that gives each checking thread a stripe of its
//! own and takes it back when the thread exits, and the per-check counters
//! bumped on those stripes while other threads sum them.
//!
//! The models here ask for the stripes to run on loom's atomics
//! (`loom_hooks::model_stripes`; other loom models keep the processor's).
//! Under loom there is one stripe (`STRIPES` is 1), so three threads
//! cover every path: a stripe held by one thread, the shared stripe bumped
//! by two at once, and a stripe taken over from a thread that exited while
//! the others still run (its counts handed on only by the release and
//! acquire on the word of held stripes: nothing joins the two threads).
//! Run with `scripts/loom.sh`, i.e.
//! `RUSTFLAGS="--cfg ratecell_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test loom_stats`.
#![cfg(ratecell_loom)]

use loom::sync::atomic::AtomicU64;
use loom::thread;
use ratecell::loom_hooks;
use ratecell::{Algorithm, Clock, Config, Limiter, Request, Stats};
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicUsize, Ordering};

const T0: u64 = 1_000_000_000_000;
const SECOND: u64 = 1_000_000_000;

/// GCRA, 1 per second. The models peek (cost 0): each peek is counted
/// as admitted, so every count lands on the same counter of its stripe,
/// and a peek only loads the limiter's state, which leaves loom's
/// preemptions to the stripes.
fn limiter() -> Arc<Limiter> {
    let config = Config::new(Algorithm::Gcra, 1, SECOND);
    Arc::new(
        Limiter::builder()
            .limit(config)
            .clock(Clock::manual(T0).0)
            .build()
            .unwrap(),
    )
}

/// What the threads of one execution saw, across executions (std types,
/// invisible to loom).
#[derive(Default)]
struct Seen {
    executions: AtomicUsize,
    /// Executions where a thread took the stripe of one that had exited.
    handed_on: AtomicUsize,
    /// Executions where two threads bumped the shared stripe.
    shared_by_two: AtomicUsize,
    /// Executions where a sum read while threads ran missed some checks.
    partial_sums: AtomicUsize,
}

/// Runs `f` under loom at `bound` preemptions, or else at
/// `LOOM_MAX_PREEMPTIONS` (3 unless set).
fn model(bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    loom_hooks::model_stripes();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = bound.or(Some(builder.preemption_bound.unwrap_or(3)));
    builder.check(f);
}

/// Waits until the threads joined so far have given their stripes back.
/// A loom join returns once the thread's function has, before its
/// thread-locals are dropped (a std join waits for that too); a stripe
/// never given back would spin here until loom gives up on the execution.
fn wait_until_every_stripe_is_given_back() {
    while loom_hooks::stripes_held() != 0 {
        thread::yield_now();
    }
}

/// A sum of the counters that must lie between `least` checks (those that
/// happened before the read) and `most` (all there are), and be coherent
/// (every check either admitted or denied).
fn assert_between(stats: Stats, least: u64, most: u64) {
    assert_eq!(stats.checks, stats.allowed + stats.denied, "{stats:?}");
    assert!(
        (least..=most).contains(&stats.checks),
        "{} checks counted, between {least} and {most} expected: {stats:?}",
        stats.checks
    );
}

/// Three threads check one limiter once each while the main thread sums
/// its counters; the first worker flags when its check is done. The sum
/// read meanwhile is coherent and counts the flagged check; once all are
/// joined, the sum is exact.
#[test]
fn stripes_handed_on_and_shared_lose_no_count() {
    let seen = Arc::new(Seen::default());
    let s = Arc::clone(&seen);
    model(None, move || {
        s.executions.fetch_add(1, Relaxed);
        let lim = limiter();
        let done = Arc::new(AtomicU64::new(0));
        let worker = |flag: bool| {
            let (lim, done) = (Arc::clone(&lim), Arc::clone(&done));
            thread::spawn(move || {
                assert!(lim.check(Request::new(0).at(T0)).allowed);
                if flag {
                    done.store(1, Ordering::Release);
                }
                loom_hooks::stripe()
            })
        };
        let threads = [worker(true), worker(false), worker(false)];
        let flagged = done.load(Ordering::Acquire);
        let during = lim.stats();
        assert_between(during, flagged, 3);
        let stripes: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let last = lim.stats();
        assert_eq!(
            (last.checks, last.allowed, last.denied),
            (3, 3, 0),
            "stripes {stripes:?}: {last:?}"
        );
        let own = stripes
            .iter()
            .filter(|&&i| i != loom_hooks::SHARED_STRIPE)
            .count();
        if own >= 2 {
            s.handed_on.fetch_add(1, Relaxed);
        }
        if stripes.len() - own >= 2 {
            s.shared_by_two.fetch_add(1, Relaxed);
        }
        if during.checks < 3 {
            s.partial_sums.fetch_add(1, Relaxed);
        }
    });
    let count = |a: &AtomicUsize| a.load(Relaxed);
    eprintln!(
        "{} executions: a stripe handed on in {}, the shared stripe bumped by two in {}, \
         a sum read mid-run in {}",
        count(&seen.executions),
        count(&seen.handed_on),
        count(&seen.shared_by_two),
        count(&seen.partial_sums),
    );
    assert!(
        count(&seen.handed_on) > 0,
        "no thread took an exited thread's stripe"
    );
    assert!(
        count(&seen.shared_by_two) > 0,
        "the shared stripe never had two writers"
    );
    assert!(
        count(&seen.partial_sums) > 0,
        "no sum was read while checks went on"
    );
}

/// A thread's stripe is free again once the thread has exited, and held
/// by one thread at a time: a thread started after another has exited gets
/// its stripe (0), and of two threads that overlap, one gets it (or both,
/// one after the other) and they never hold it at once.
#[test]
fn a_stripe_has_one_holder_at_a_time() {
    let executions = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&executions);
    model(None, move || {
        count.fetch_add(1, Relaxed);
        let first = thread::spawn(loom_hooks::stripe).join().unwrap();
        wait_until_every_stripe_is_given_back();
        let holders = Arc::new(AtomicU64::new(0));
        let overlapping: Vec<_> = (0..2)
            .map(|_| {
                let holders = Arc::clone(&holders);
                thread::spawn(move || {
                    let i = loom_hooks::stripe();
                    if i != loom_hooks::SHARED_STRIPE {
                        assert_eq!(holders.fetch_add(1, Acquire), 0, "two holders");
                        thread::yield_now();
                        holders.fetch_sub(1, Release);
                    }
                    i
                })
            })
            .collect();
        let both: Vec<usize> = overlapping.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(first, 0, "the free stripe");
        assert!(
            both.contains(&0),
            "{both:?}: an exited thread's stripe was not freed"
        );
    });
    eprintln!("{} executions", executions.load(Relaxed));
}

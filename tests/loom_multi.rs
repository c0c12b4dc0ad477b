//! loom models of several limits checked as one (issue 15): whatever the
//! interleaving, the threads' decisions (combined, denying limit, each
//! limit's own) and the state they leave equal those of some sequential
//! order of the same requests. Covers the four layouts: direct and keyed,
//! states in one word (one CAS) and in a block (the latch).
//!
//! Run with `scripts/loom.sh --test loom_multi`, i.e.
//! `RUSTFLAGS="--cfg ratecell_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test loom_multi`.
#![cfg(ratecell_loom)]

use loom::thread;
use ratecell::{Algorithm, Clock, Config, KeyedLimiter, Limiter, MultiDecision, Request};
use std::sync::{Arc, Mutex};

const T0: u64 = 1_700_000_000_000_000_000;

/// GCRA 4 per 4 µs with a fixed window of 3 per µs: one word of state.
fn word() -> [Config; 2] {
    [
        Config::new(Algorithm::Gcra, 4, 4_000),
        Config::new(Algorithm::FixedWindow, 3, 1_000),
    ]
}

/// A sliding log of 4 per µs with a token bucket of 3: a block.
fn block() -> [Config; 2] {
    [
        Config::new(Algorithm::SlidingLog, 4, 1_000),
        Config::new(Algorithm::TokenBucket, 1, 1_000).burst(3),
    ]
}

/// Either form, behind one interface for the harness.
enum Any {
    Direct(Box<Limiter>),
    Keyed(Box<KeyedLimiter>),
}

impl Any {
    fn new(configs: &[Config], keyed: bool) -> Any {
        let clock = Clock::manual(0).0;
        if keyed {
            let configs: Vec<Config> = configs.iter().map(|c| c.capacity(2)).collect();
            Any::Keyed(Box::new(
                KeyedLimiter::builder()
                    .limits(&configs)
                    .clock(clock)
                    .build()
                    .unwrap(),
            ))
        } else {
            Any::Direct(Box::new(
                Limiter::builder()
                    .limits(configs)
                    .clock(clock)
                    .build()
                    .unwrap(),
            ))
        }
    }

    fn check(&self, cost: u64) -> MultiDecision {
        match self {
            Any::Direct(l) => l.check_each(Request::new(cost).at(T0)),
            Any::Keyed(k) => k.check_each(7, Request::new(cost).at(T0)),
        }
    }
}

type Run = Vec<Vec<MultiDecision>>;

/// The outcomes of the thread programs (costs, all at `T0`) replayed on one
/// thread in every order that keeps each thread's own order, each ending
/// with a peek at the state left.
fn sequential(configs: &[Config], keyed: bool, programs: &[&[u64]]) -> Vec<Run> {
    fn go(
        configs: &[Config],
        keyed: bool,
        programs: &[&[u64]],
        order: &mut Vec<usize>,
        out: &mut Vec<Run>,
    ) {
        let mut done = true;
        for i in 0..programs.len() {
            if order.iter().filter(|&&j| j == i).count() < programs[i].len() {
                done = false;
                order.push(i);
                go(configs, keyed, programs, order, out);
                order.pop();
            }
        }
        if done {
            let limiter = Any::new(configs, keyed);
            let mut run: Run = programs.iter().map(|_| Vec::new()).collect();
            for &i in order.iter() {
                let cost = programs[i][run[i].len()];
                run[i].push(limiter.check(cost));
            }
            run.push(vec![limiter.check(0)]);
            out.push(run);
        }
    }
    let mut out = Vec::new();
    go(configs, keyed, programs, &mut Vec::new(), &mut out);
    out
}

fn linearizable(configs: [Config; 2], keyed: bool, programs: &'static [&'static [u64]]) {
    let seen: Arc<Mutex<Vec<Run>>> = Arc::default();
    let seen_in = Arc::clone(&seen);
    let executions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&executions);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(3));
    builder.max_branches = 20_000;
    builder.check(move || {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A keyed limiter is built and moved by value a few times (its
        // counters' stripes are inline): more than the 32 KiB a loom
        // model's main thread gets, so the model runs on a roomier thread.
        let seen_in = Arc::clone(&seen_in);
        let body = thread::Builder::new().stack_size(1 << 20);
        body.spawn(move || run(configs, keyed, programs, &seen_in))
            .unwrap()
            .join()
            .unwrap();
    });
    eprintln!(
        "{} executions, {} distinct outcomes",
        executions.load(std::sync::atomic::Ordering::Relaxed),
        seen.lock().unwrap().len()
    );
    assert!(
        seen.lock().unwrap().len() > 1,
        "every execution gave the same decisions: the threads never raced"
    );
}

/// One execution: the threads race, then every sequential order is
/// replayed and one must match.
fn run(
    configs: [Config; 2],
    keyed: bool,
    programs: &'static [&'static [u64]],
    seen_in: &Mutex<Vec<Run>>,
) {
    {
        let shared = Arc::new(Any::new(&configs, keyed));
        let handles: Vec<_> = programs
            .iter()
            .map(|program| {
                let limiter = Arc::clone(&shared);
                thread::spawn(move || program.iter().map(|&c| limiter.check(c)).collect())
            })
            .collect();
        let mut observed: Run = handles.into_iter().map(|h| h.join().unwrap()).collect();
        observed.push(vec![shared.check(0)]);
        // Replayed on this thread after the join: nothing races with them.
        let candidates = sequential(&configs, keyed, programs);
        assert!(
            candidates.contains(&observed),
            "no sequential order gives {observed:#?}\namong {candidates:#?}"
        );
        let mut seen = seen_in.lock().unwrap();
        if !seen.contains(&observed) {
            seen.push(observed);
        }
    }
}

/// 2 + 2 units asked of 3 (the window is the tightest), then a cost-1 each.
static PROGRAMS: &[&[u64]] = &[&[2, 1], &[2]];

#[test]
fn direct_word_layout_is_linearizable() {
    linearizable(word(), false, PROGRAMS);
}

#[test]
fn direct_block_layout_is_linearizable() {
    linearizable(block(), false, PROGRAMS);
}

#[test]
fn keyed_word_layout_is_linearizable() {
    linearizable(word(), true, PROGRAMS);
}

#[test]
fn keyed_block_layout_is_linearizable() {
    linearizable(block(), true, PROGRAMS);
}

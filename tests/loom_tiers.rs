//! loom models of a quota per tier: threads checking one key under
//! different tiers decide, and leave the state, as some sequential order of
//! the same requests does. A tier's check is the table's ordinary CAS (or
//! latch) over the key's one state, decided with that tier's parameters;
//! these models check that naming a tier adds no race. Both layouts: one
//! word (a token bucket), and a block (a sliding log with a token bucket).
//!
//! Run with `scripts/loom.sh --test loom_tiers`, i.e.
//! `RUSTFLAGS="--cfg ratecell_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test loom_tiers`.
#![cfg(ratecell_loom)]

use loom::thread;
use ratecell::{Algorithm, Clock, Config, KeyedLimiter, MultiDecision, Request};
use std::sync::{Arc, Mutex};

const T0: u64 = 1_700_000_000_000_000_000;

/// A token bucket of 2 (tier 0) or 5 (tier 1): one word of state.
fn word() -> Vec<Vec<Config>> {
    let tb = |burst| {
        Config::new(Algorithm::TokenBucket, 1, 1_000)
            .burst(burst)
            .capacity(2)
    };
    vec![vec![tb(2)], vec![tb(5)]]
}

/// A sliding log of 4 per µs with a token bucket of 2 (tier 0) or 3
/// (tier 1): a block.
fn block() -> Vec<Vec<Config>> {
    let log = Config::new(Algorithm::SlidingLog, 4, 1_000).capacity(2);
    let tb = |burst| {
        Config::new(Algorithm::TokenBucket, 1, 1_000)
            .burst(burst)
            .capacity(2)
    };
    vec![vec![log, tb(2)], vec![log, tb(3)]]
}

fn limiter(tiers: &[Vec<Config>]) -> KeyedLimiter {
    let tiers: Vec<&[Config]> = tiers.iter().map(Vec::as_slice).collect();
    tiers
        .iter()
        .fold(KeyedLimiter::builder(), |b, t| b.tier(t))
        .clock(Clock::manual(0).0)
        .build()
        .unwrap()
}

fn check(l: &KeyedLimiter, (tier, cost): (usize, u64)) -> MultiDecision {
    l.check_each(7, Request::new(cost).at(T0).tier(l.tier(tier).unwrap()))
}

type Run = Vec<Vec<MultiDecision>>;
type Program = &'static [(usize, u64)];

/// Every interleaving of the programs that keeps each one's order, run on
/// one thread, each ending with a peek under every tier.
fn sequential(tiers: &[Vec<Config>], programs: &[Program]) -> Vec<Run> {
    fn go(tiers: &[Vec<Config>], programs: &[Program], order: &mut Vec<usize>, out: &mut Vec<Run>) {
        let mut done = true;
        for i in 0..programs.len() {
            if order.iter().filter(|&&j| j == i).count() < programs[i].len() {
                done = false;
                order.push(i);
                go(tiers, programs, order, out);
                order.pop();
            }
        }
        if done {
            let l = limiter(tiers);
            let mut run: Run = programs.iter().map(|_| Vec::new()).collect();
            for &i in order.iter() {
                let request = programs[i][run[i].len()];
                run[i].push(check(&l, request));
            }
            run.push((0..tiers.len()).map(|t| check(&l, (t, 0))).collect());
            out.push(run);
        }
    }
    let mut out = Vec::new();
    go(tiers, programs, &mut Vec::new(), &mut out);
    out
}

fn linearizable(tiers: Vec<Vec<Config>>, programs: &'static [Program]) {
    let seen: Arc<Mutex<Vec<Run>>> = Arc::default();
    let seen_in = Arc::clone(&seen);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(3));
    builder.max_branches = 20_000;
    builder.check(move || {
        // A keyed limiter is large; run the model on a roomier thread (as
        // tests/loom_multi.rs does).
        let (tiers, seen_in) = (tiers.clone(), Arc::clone(&seen_in));
        thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(move || {
                let shared = Arc::new(limiter(&tiers));
                let handles: Vec<_> = programs
                    .iter()
                    .map(|program| {
                        let l = Arc::clone(&shared);
                        thread::spawn(move || program.iter().map(|&r| check(&l, r)).collect())
                    })
                    .collect();
                let mut observed: Run = handles.into_iter().map(|h| h.join().unwrap()).collect();
                observed.push((0..tiers.len()).map(|t| check(&shared, (t, 0))).collect());
                let candidates = sequential(&tiers, programs);
                assert!(
                    candidates.contains(&observed),
                    "no sequential order gives {observed:#?}\namong {candidates:#?}"
                );
                let mut seen = seen_in.lock().unwrap();
                if !seen.contains(&observed) {
                    seen.push(observed);
                }
            })
            .unwrap()
            .join()
            .unwrap();
    });
    assert!(
        seen.lock().unwrap().len() > 1,
        "every execution gave the same decisions: the threads never raced"
    );
}

/// 3 units as tier 1 then 1 as tier 0, against 1 unit as tier 0: whether
/// the tier-0 requests find the tier-1 spend depends on the order.
static PROGRAMS: &[Program] = &[&[(1, 3), (0, 1)], &[(0, 1)]];

#[test]
fn word_layout_is_linearizable() {
    linearizable(word(), PROGRAMS);
}

#[test]
fn block_layout_is_linearizable() {
    linearizable(block(), PROGRAMS);
}

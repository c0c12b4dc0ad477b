//! loom model of live reconfiguration (issue 15, part 3): a thread checking
//! races a thread reconfiguring. Whatever the interleaving, the checks'
//! decisions (combined and each limit's own) and the state left equal
//! those of the checks and the reconfiguration in some sequential order:
//! each check saw the old limits or the new ones, never a mix, and no
//! spent unit was lost or counted twice. Covers a direct limiter with its
//! states in one word (one CAS) and in a block (the latch), and a keyed
//! one.
//!
//! Run with `scripts/loom.sh --test loom_reconfigure`, i.e.
//! `scripts/loom.sh --test loom_reconfigure`.
#![cfg(ratecell_loom)]

use loom::thread;
use ratecell::{Algorithm, Clock, Config, KeyedLimiter, Limiter, MultiDecision, Request};
use std::sync::{Arc, Mutex};

const T0: u64 = 1_700_000_000_000_000_000;

/// GCRA and a fixed window (one word), before and after: every limit
/// changes, and the counts keep their widths.
fn word() -> ([Config; 2], [Config; 2]) {
    (
        [
            Config::new(Algorithm::Gcra, 4, 4_000),
            Config::new(Algorithm::FixedWindow, 3, 1_000),
        ],
        [
            Config::new(Algorithm::Gcra, 6, 4_000),
            Config::new(Algorithm::FixedWindow, 2, 1_000),
        ],
    )
}

/// A sliding log with a token bucket (a block): the bucket's burst moves.
fn block() -> ([Config; 2], [Config; 2]) {
    (
        [
            Config::new(Algorithm::SlidingLog, 4, 1_000),
            Config::new(Algorithm::TokenBucket, 1, 1_000).burst(3),
        ],
        [
            Config::new(Algorithm::SlidingLog, 4, 1_000),
            Config::new(Algorithm::TokenBucket, 1, 1_000).burst(2),
        ],
    )
}

enum Any {
    Direct(Box<Limiter>),
    Keyed(Box<KeyedLimiter>),
}

fn keyed_form(configs: &[Config; 2], keyed: bool) -> [Config; 2] {
    configs.map(|c| c.capacity(if keyed { 2 } else { 0 }))
}

impl Any {
    fn new(configs: &[Config; 2], keyed: bool) -> Any {
        let clock = Clock::manual(0).0;
        let configs = keyed_form(configs, keyed);
        if keyed {
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
                    .limits(&configs)
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

    fn reconfigure(&self, configs: &[Config; 2]) {
        match self {
            Any::Direct(l) => l.reconfigure(configs).unwrap(),
            Any::Keyed(k) => k.reconfigure(configs).unwrap(),
        }
    }
}

/// Two checks of cost 1, then a peek at the state left.
type Run = Vec<MultiDecision>;

/// The runs with the reconfiguration before, between or after the checks.
fn sequential(old: &[Config; 2], new: &[Config; 2], keyed: bool) -> Vec<Run> {
    (0..=2)
        .map(|at| {
            let l = Any::new(old, keyed);
            let mut run = Vec::new();
            for i in 0..2 {
                if i == at {
                    l.reconfigure(&keyed_form(new, keyed));
                }
                run.push(l.check(1));
            }
            if at == 2 {
                l.reconfigure(&keyed_form(new, keyed));
            }
            run.push(l.check(0));
            run
        })
        .collect()
}

fn racing((old, new): ([Config; 2], [Config; 2]), keyed: bool) {
    let seen: Arc<Mutex<Vec<Run>>> = Arc::default();
    let seen_in = Arc::clone(&seen);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(builder.preemption_bound.unwrap_or(2));
    builder.check(move || {
        let seen_in = Arc::clone(&seen_in);
        // A keyed limiter overflows the 32 KiB a loom model's main thread
        // gets; run the model on a roomier one.
        let body = thread::Builder::new().stack_size(1 << 20);
        body.spawn(move || {
            // Loom's atomics exist only inside a model: the sequential
            // runs are replayed here, before the threads start.
            let orders = sequential(&old, &new, keyed);
            assert!(
                orders.windows(2).all(|w| w[0] != w[1]),
                "the three orders must be told apart, or the model proves nothing"
            );
            let shared = Arc::new(Any::new(&old, keyed));
            let changer = {
                let l = Arc::clone(&shared);
                let to = keyed_form(&new, keyed);
                thread::spawn(move || l.reconfigure(&to))
            };
            let checker = {
                let l = Arc::clone(&shared);
                thread::spawn(move || vec![l.check(1), l.check(1)])
            };
            let mut run = checker.join().unwrap();
            changer.join().unwrap();
            run.push(shared.check(0));
            assert!(
                orders.contains(&run),
                "no sequential order gives {run:#?}\norders: {orders:#?}"
            );
            let mut seen = seen_in.lock().unwrap();
            if !seen.contains(&run) {
                seen.push(run);
            }
        })
        .unwrap()
        .join()
        .unwrap();
    });
    let seen = seen.lock().unwrap();
    assert!(
        seen.len() > 1,
        "every execution gave the same decisions: the threads never raced: {seen:#?}"
    );
}

#[test]
fn direct_word_check_races_reconfigure() {
    racing(word(), false);
}

#[test]
fn direct_block_check_races_reconfigure() {
    racing(block(), false);
}

#[test]
fn keyed_word_check_races_reconfigure() {
    racing(word(), true);
}

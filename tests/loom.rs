//! Model checks of the direct limiter's concurrent protocols under loom.
//!
//! Every test here asks one question of a small concurrent run: are the
//! decisions the threads got exactly the decisions of *some* sequential
//! order of the same requests (SPEC §5, "never more admitted than that")?
//! After the threads join, each order consistent with every thread's program
//! order is replayed on a fresh limiter in the same execution, and one of
//! them must reproduce every decision, field for field. That covers the CAS
//! loop on one 64-bit word (GCRA, leaky bucket), the same loop on a 128-bit
//! word (token bucket, fixed and sliding window; a loom mutex stands in for
//! `cmpxchg16b`), and the latch guarding the multi-word states (bucketed
//! window, sliding log), plus `reset` racing with checks.
//!
//! Run with `scripts/loom.sh`, i.e.
//! `RUSTFLAGS="--cfg ratecell_loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release --test loom`.
//! The models are sized (2 threads × 2 requests, or 3 threads × 1): the
//! two-thread ones run at `LOOM_MAX_PREEMPTIONS` (3 in scripts/loom.sh), the
//! three-thread ones at 3.
#![cfg(ratecell_loom)]

use loom::thread;
use ratecell::loom_hooks::{self, Race};
use ratecell::{Algorithm, Clock, Config, Decision, Limiter, Request};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// A time on a 1 µs grid (so every window and sub-window used below starts
/// exactly here), far from both ends of the u64 timeline.
const T0: u64 = 1_700_000_000_000_000_000;

/// One step of a thread's program.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `check(Request::new(cost).at(t))`.
    Check(u64, u64),
    /// `reset()`.
    Reset,
}

/// What a step returned: a decision, or nothing for a reset.
type Outcome = Option<Decision>;

fn limiter(cfg: Config) -> Limiter {
    // The clock is never read: every check passes its own time.
    Limiter::builder()
        .limit(cfg)
        .clock(Clock::manual(0).0)
        .build()
        .expect("test configurations are valid")
}

fn apply(limiter: &Limiter, op: Op) -> Outcome {
    match op {
        Op::Check(cost, t) => Some(limiter.check(Request::new(cost).at(t))),
        Op::Reset => {
            limiter.reset();
            None
        }
    }
}

/// Runs `f` under loom and returns the preemption bound it used: `bound`,
/// or three unless `LOOM_MAX_PREEMPTIONS` says otherwise. The branch budget
/// is raised because every atomic access of the sequential replays is a
/// (single-choice) branch in loom's path.
fn model(bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) -> Option<usize> {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = bound.or(Some(builder.preemption_bound.unwrap_or(3)));
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = 20_000;
    }
    builder.check(f);
    builder.preemption_bound
}

/// Every merge of the threads' programs that keeps each one's order, as a
/// sequence of thread indices.
fn interleavings(lens: &[usize]) -> Vec<Vec<usize>> {
    fn go(left: &mut [usize], prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if left.iter().all(|&n| n == 0) {
            out.push(prefix.clone());
            return;
        }
        for i in 0..left.len() {
            if left[i] > 0 {
                left[i] -= 1;
                prefix.push(i);
                go(left, prefix, out);
                prefix.pop();
                left[i] += 1;
            }
        }
    }
    let mut out = Vec::new();
    go(&mut lens.to_vec(), &mut Vec::new(), &mut out);
    out
}

/// The outcomes of running `setup`, then the threads' steps in `order`, on
/// one thread and a fresh limiter, filed by thread and step.
fn replay(cfg: Config, setup: &[Op], programs: &[Vec<Op>], order: &[usize]) -> Run {
    let limiter = limiter(cfg);
    for &op in setup {
        apply(&limiter, op);
    }
    let mut next = vec![0; programs.len()];
    let mut out: Vec<Vec<Outcome>> = programs.iter().map(|_| Vec::new()).collect();
    for &i in order {
        out[i].push(apply(&limiter, programs[i][next[i]]));
        next[i] += 1;
    }
    out.push(final_peek(&limiter, setup, programs));
    out
}

/// Every thread's outcomes in one execution (or one sequential order), and
/// last a row holding [`final_peek`].
type Run = Vec<Vec<Outcome>>;

/// A peek at the latest time any step used: what the state was left as, so
/// an update that was lost (or a reset that did not happen) shows even when
/// no thread's decision depended on it.
fn final_peek(limiter: &Limiter, setup: &[Op], programs: &[Vec<Op>]) -> Vec<Outcome> {
    let t = setup
        .iter()
        .chain(programs.iter().flatten())
        .filter_map(|op| match *op {
            Op::Check(_, t) => Some(t),
            Op::Reset => None,
        })
        .max()
        .unwrap_or(T0);
    vec![Some(limiter.check(Request::new(0).at(t)))]
}

/// Runs `setup` alone, then each program on its own loom thread, and asserts
/// that in every execution the decisions equal, field for field, those of
/// some sequential order of the same steps, and so does the state they
/// leave (see [`final_peek`]), and that the statistics counted them. `extra`
/// may assert more about one execution (given the threads' outcomes and the
/// limiter after the join).
///
/// Across all executions it also asserts that more than one outcome was
/// seen, so a model whose threads never interleaved cannot pass vacuously.
fn linearizable_with(
    cfg: Config,
    setup: &[Op],
    programs: &[&[Op]],
    extra: impl Fn(&[Vec<Outcome>], &Limiter) + Sync + Send + 'static,
) {
    let setup = setup.to_vec();
    let programs: Vec<Vec<Op>> = programs.iter().map(|p| p.to_vec()).collect();
    let orders = interleavings(&programs.iter().map(Vec::len).collect::<Vec<_>>());
    // Filled by the executions; std types, invisible to loom.
    let seen: Arc<Mutex<Vec<Run>>> = Arc::default();
    let sequential: Arc<Mutex<Vec<Run>>> = Arc::default();
    let executions = Arc::new(AtomicUsize::new(0));
    let sequential_runs = Arc::clone(&sequential);
    loom_hooks::clear();
    let bound = {
        let (seen, sequential, executions) = (
            Arc::clone(&seen),
            Arc::clone(&sequential),
            Arc::clone(&executions),
        );
        let programs = programs.clone();
        let bound = (programs.len() > 2).then_some(3);
        model(bound, move || {
            executions.fetch_add(1, Relaxed);
            let shared = Arc::new(limiter(cfg));
            let setup_outcomes: Vec<Outcome> = setup.iter().map(|&op| apply(&shared, op)).collect();
            let handles: Vec<_> = programs
                .iter()
                .map(|program| {
                    let limiter = Arc::clone(&shared);
                    let program = program.clone();
                    thread::spawn(move || {
                        program
                            .iter()
                            .map(|&op| apply(&limiter, op))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut observed: Run = handles
                .into_iter()
                .map(|h| h.join().expect("a checking thread panicked"))
                .collect();

            // The statistics count the same decisions (a reset is not a check).
            let decided = setup_outcomes
                .iter()
                .chain(observed.iter().flatten())
                .flatten();
            let stats = shared.stats();
            assert_eq!(stats.checks, decided.clone().count() as u64);
            assert_eq!(stats.allowed, decided.filter(|d| d.allowed).count() as u64);
            assert_eq!(stats.denied, stats.checks - stats.allowed);

            extra(&observed, &shared);
            observed.push(final_peek(&shared, &setup, &programs));

            // Replayed on this thread, after the join: nothing races with the
            // replays, so each is one path through loom's scheduler.
            let candidates: Vec<Run> = orders
                .iter()
                .map(|order| replay(cfg, &setup, &programs, order))
                .collect();
            assert!(
                candidates.contains(&observed),
                "{}: no sequential order gives the observed decisions\n\
                 programs: {programs:?}\nobserved: {observed:#?}\n\
                 sequential orders: {orders:?}\ntheir outcomes: {candidates:#?}",
                cfg.algorithm,
            );

            add_distinct(&mut seen.lock().unwrap(), observed);
            let mut sequential = sequential.lock().unwrap();
            for run in candidates {
                add_distinct(&mut sequential, run);
            }
        })
    };
    let (seen, sequential) = (seen.lock().unwrap(), sequential_runs.lock().unwrap());
    let (cas_lost, latch_busy) = (
        loom_hooks::seen(Race::CasLost),
        loom_hooks::seen(Race::LatchBusy),
    );
    eprintln!(
        "{} {programs:?}, at most {bound:?} preemptions: {} executions, \
         {} distinct outcomes of {} sequential; {cas_lost} lost CASes, \
         {latch_busy} waits on a held latch",
        cfg.algorithm,
        executions.load(Relaxed),
        seen.len(),
        sequential.len(),
    );
    // Not vacuous: some execution took the racing branch, a CAS that lost
    // to another thread's (one word) or a latch found held (a block); with
    // the threads' writes never overlapping, the races these models exist
    // for were never run.
    assert!(
        cas_lost + latch_busy > 0,
        "{}: no CAS was ever lost and no latch ever waited for",
        cfg.algorithm
    );
    // Not vacuous: the threads really raced (these scenarios are built so
    // that the order matters). Loom is not asked to produce every sequential
    // outcome: its exploration skips some schedules (see tokio-rs/loom#166
    // and #392); e.g. in `leaky_bucket_across_emission_intervals` it never
    // runs A1, B1, B2, A2 in that order, at any preemption bound, and a bare
    // two-thread CAS model shows the same.
    if sequential.len() > 1 && bound.is_none_or(|b| b >= 1) {
        assert!(
            seen.len() > 1,
            "{}: every execution gave the same decisions; the threads never raced",
            cfg.algorithm
        );
    }
}

fn add_distinct(runs: &mut Vec<Run>, run: Run) {
    if !runs.contains(&run) {
        runs.push(run);
    }
}

fn linearizable(cfg: Config, setup: &[Op], programs: &[&[Op]]) {
    linearizable_with(cfg, setup, programs, |_, _| {});
}

use Op::{Check, Reset};

// Per-algorithm configurations, small enough that a handful of requests of
// cost 2 or 3 contend for the last units.

/// GCRA and leaky bucket: 4 per 4 µs, T = 1 µs, burst 4.
fn gcra(queue: bool) -> Config {
    let alg = if queue {
        Algorithm::LeakyBucket
    } else {
        Algorithm::Gcra
    };
    Config::new(alg, 4, 4_000)
}

/// Token bucket: 2 tokens every 1 µs, up to 4.
fn token_bucket() -> Config {
    Config::new(Algorithm::TokenBucket, 2, 1_000).burst(4)
}

fn fixed_window() -> Config {
    Config::new(Algorithm::FixedWindow, 4, 1_000)
}

fn sliding_window() -> Config {
    Config::new(Algorithm::SlidingWindow, 4, 1_000)
}

/// Four sub-windows of 1 µs.
fn bucketed_window() -> Config {
    Config::new(Algorithm::BucketedWindow, 4, 4_000).sub_windows(4)
}

fn sliding_log() -> Config {
    Config::new(Algorithm::SlidingLog, 4, 1_000)
}

fn all_configs() -> [Config; 7] {
    [
        gcra(false),
        gcra(true),
        token_bucket(),
        fixed_window(),
        sliding_window(),
        bucketed_window(),
        sliding_log(),
    ]
}

/// Two threads, two requests each, one instant: 7 units asked of 4.
fn two_by_two_at_one_instant(cfg: Config) {
    linearizable(
        cfg,
        &[],
        &[&[Check(2, T0), Check(1, T0)], &[Check(3, T0), Check(1, T0)]],
    );
}

/// Three threads, one request each, one instant: 7 units asked of 4.
fn three_by_one_at_one_instant(cfg: Config) {
    linearizable(
        cfg,
        &[],
        &[&[Check(2, T0)], &[Check(2, T0)], &[Check(3, T0)]],
    );
}

macro_rules! at_one_instant {
    ($($name:ident => $cfg:expr,)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn two_threads_two_requests() {
                two_by_two_at_one_instant($cfg);
            }
            #[test]
            fn three_threads_one_request() {
                three_by_one_at_one_instant($cfg);
            }
        }
    )*};
}

at_one_instant! {
    gcra_instant => gcra(false),
    leaky_bucket_instant => gcra(true),
    token_bucket_instant => token_bucket(),
    fixed_window_instant => fixed_window(),
    sliding_window_instant => sliding_window(),
    bucketed_window_instant => bucketed_window(),
    sliding_log_instant => sliding_log(),
}

// Across a boundary: one thread's requests fall before it, the other's
// after, so in some schedules the later times reach the state first and the
// earlier ones arrive "in the past" (the SPEC's clamping rules apply).

#[test]
fn gcra_across_emission_intervals() {
    // Full at T0; one unit drains per µs.
    linearizable(
        gcra(false),
        &[Check(4, T0)],
        &[
            &[Check(1, T0 + 999), Check(1, T0 + 1_000)],
            &[Check(1, T0 + 1_000), Check(2, T0 + 2_000)],
        ],
    );
}

#[test]
fn leaky_bucket_across_emission_intervals() {
    // Queue of 4 with 3 places taken: the queue waits depend on the order.
    linearizable(
        gcra(true),
        &[Check(3, T0)],
        &[
            &[Check(1, T0 + 500), Check(1, T0 + 999)],
            &[Check(2, T0 + 1_000), Check(1, T0 + 1_500)],
        ],
    );
}

#[test]
fn token_bucket_across_a_refill() {
    // Empty at T0; 2 tokens arrive at T0 + 1 µs.
    linearizable(
        token_bucket(),
        &[Check(4, T0)],
        &[
            &[Check(1, T0 + 999), Check(1, T0 + 1_500)],
            &[Check(1, T0 + 1_000), Check(1, T0 + 2_000)],
        ],
    );
}

#[test]
fn fixed_window_across_a_window_boundary() {
    linearizable(
        fixed_window(),
        &[Check(3, T0 + 10)],
        &[
            &[Check(1, T0 + 999), Check(1, T0 + 999)],
            &[Check(3, T0 + 1_000), Check(1, T0 + 1_000)],
        ],
    );
}

#[test]
fn sliding_window_across_a_window_boundary() {
    linearizable(
        sliding_window(),
        &[Check(1, T0 + 100)],
        &[
            &[Check(2, T0 + 500), Check(1, T0 + 900)],
            &[Check(1, T0 + 1_250), Check(3, T0 + 1_750)],
        ],
    );
}

#[test]
fn bucketed_window_across_a_sub_window_boundary() {
    // Sub-window 0 (2 units) leaves at T0 + 4 µs.
    linearizable(
        bucketed_window(),
        &[Check(2, T0)],
        &[
            &[Check(1, T0 + 3_999), Check(1, T0 + 3_999)],
            &[Check(2, T0 + 4_000), Check(1, T0 + 4_000)],
        ],
    );
}

#[test]
fn sliding_log_across_an_entry_leaving() {
    // The entry at T0 leaves once t_e reaches T0 + 1 µs.
    linearizable(
        sliding_log(),
        &[Check(2, T0)],
        &[
            &[Check(1, T0 + 500), Check(2, T0 + 999)],
            &[Check(2, T0 + 1_000), Check(1, T0 + 1_000)],
        ],
    );
}

/// Cost-1 requests on a multi-word state. Mutual exclusion of the latch
/// means each admitted request saw the sum left by the previous one, so the
/// admitted requests report distinct `remaining` values and the final sum
/// is the admitted count; a lost update (two threads working on the block
/// at once) would repeat a `remaining` or leave the state short.
fn latch_excludes(cfg: Config, programs: &[&[Op]], admitted: usize) {
    let extra = move |observed: &[Vec<Outcome>], limiter: &Limiter| {
        let mut remaining: Vec<u64> = observed
            .iter()
            .flatten()
            .flatten()
            .filter(|d| d.allowed)
            .map(|d| d.remaining)
            .collect();
        assert_eq!(remaining.len(), admitted, "{observed:?}");
        remaining.sort_unstable();
        let expected: Vec<u64> = (cfg.limit - admitted as u64..cfg.limit).collect();
        assert_eq!(remaining, expected, "{observed:?}");
        // Every request falls inside the window at T0 + 3999 ns.
        let after = limiter.check(Request::new(0).at(T0 + 3_999));
        assert_eq!(after.remaining, cfg.limit - admitted as u64, "{after:?}");
    };
    linearizable_with(cfg, &[], programs, extra);
}

/// Four sub-windows of 1 µs and a limit of 3.
fn small_bucketed() -> Config {
    Config::new(Algorithm::BucketedWindow, 3, 4_000).sub_windows(4)
}

/// A log of at most 3 units.
fn small_log() -> Config {
    Config::new(Algorithm::SlidingLog, 3, 4_000)
}

/// Requests in different sub-windows (and log timestamps), so the threads
/// also race to move the newest sub-window, clear the ring positions it
/// passes and append at the log's end; a request that reaches the state
/// after a later-timed one is clamped to the newest stored time.
const SPREAD_TWO: [&[Op]; 2] = [
    &[Check(1, T0), Check(1, T0 + 2_000)],
    &[Check(1, T0 + 1_000), Check(1, T0 + 3_000)],
];
const SPREAD_THREE: [&[Op]; 3] = [
    &[Check(1, T0)],
    &[Check(1, T0 + 1_000)],
    &[Check(1, T0 + 2_000)],
];

#[test]
fn bucketed_window_latch_is_mutual_exclusion_two_threads() {
    // Four requests for three places: one is denied.
    latch_excludes(small_bucketed(), &SPREAD_TWO, 3);
}

#[test]
fn bucketed_window_latch_is_mutual_exclusion_three_threads() {
    latch_excludes(small_bucketed(), &SPREAD_THREE, 3);
}

#[test]
fn sliding_log_latch_is_mutual_exclusion_two_threads() {
    latch_excludes(small_log(), &SPREAD_TWO, 3);
}

#[test]
fn sliding_log_latch_is_mutual_exclusion_three_threads() {
    // Limit 2: two appends fill the log and the third request is denied.
    latch_excludes(
        Config::new(Algorithm::SlidingLog, 2, 4_000),
        &SPREAD_THREE,
        2,
    );
}

/// `reset` racing with two checks on a state with 3 of 4 units used: the
/// checks see the state wholly before or wholly after the reset.
#[test]
fn reset_races_with_checks() {
    for cfg in all_configs() {
        linearizable(
            cfg,
            &[Check(3, T0)],
            &[&[Check(2, T0), Check(1, T0)], &[Reset]],
        );
    }
}

#[test]
fn interleavings_are_the_program_order_merges() {
    // 4! / (2!·2!) merges of two 2-step programs; 3! of three 1-step ones.
    assert_eq!(interleavings(&[2, 2]).len(), 6);
    assert_eq!(interleavings(&[1, 1, 1]).len(), 6);
    assert_eq!(interleavings(&[2, 1]).len(), 3);
    for order in interleavings(&[2, 2]) {
        assert_eq!(order.iter().filter(|&&i| i == 0).count(), 2);
    }
}

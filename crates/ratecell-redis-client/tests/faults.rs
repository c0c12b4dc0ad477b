//! A paused server (SIGSTOP) against leased nodes, on a server of their
//! own: what the node-wide health of SPEC §8 ("When Redis is slow or
//! unreachable") buys a node with many keys, and what the `local` policy
//! admits around an outage, by the requests' dates.
//!
//! Neither test asserts a wall time: the first compares two limiters
//! measured in the same run (a busy machine slows both alike), the second
//! counts admissions per window of the requests' own dates, which no
//! scheduling delay can add to. Both print their figures
//! (`-- --nocapture`).

mod support;

use ratecell::{Algorithm, Config, Request};
use ratecell_redis_client::{FailurePolicy, Mode, RedisLimiter};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};
use support::{Server, wall_ns};

const S: u64 = 1_000_000_000;

/// The server paused until this drops (or `resume` is called): a failed
/// assertion while paused leaves no stopped server behind, nor threads
/// whose checks wait on it.
struct Paused<'a> {
    server: &'a mut Server,
    paused: bool,
}

impl<'a> Paused<'a> {
    fn pause(server: &'a mut Server) -> Paused<'a> {
        server.pause();
        Paused {
            server,
            paused: true,
        }
    }

    fn resume(&mut self) {
        if std::mem::take(&mut self.paused) {
            self.server.resume();
        }
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.resume();
    }
}

/// Sets the flag when dropped: the driving threads of a scope stop even
/// when the test's own thread panics (the scope joins them before the
/// panic goes on).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

/// The longest any driving thread runs, whatever happens to the test's
/// own thread: the loops are bounded even if the stop flag never comes.
const THREAD_LIMIT: Duration = Duration::from_secs(60);

/// What one thread's checks did while the server was paused.
#[derive(Debug, Default)]
struct DuringPause {
    /// Checks begun and answered while paused.
    answered: u64,
    /// Time spent in those of them that took longer than `BLOCKED`: a
    /// check waiting on the network rather than deciding.
    blocked: Duration,
    /// How many did.
    blocked_checks: u64,
}

const BLOCKED: Duration = Duration::from_millis(10);

/// The sleep between a driving thread's checks.
const PACE: Duration = Duration::from_micros(200);

const BEFORE: u8 = 0;
const PAUSED: u8 = 1;
const AFTER: u8 = 2;

/// Checks 100 keys round robin until `stop`, counting what it answered
/// while `phase` was `PAUSED` for the whole check.
///
/// At a client's pace (a check, then a sleep of 200 µs), as issue 46's
/// measure was, not a spin: the count is then of the checks a thread had
/// time for between the ones that waited on the network, which is what
/// differs between the modes. A spin would count how much CPU each
/// mode's local decision costs (a leased node's, which finds the key in
/// its store, is a few times a strict node's in a debug build) and how
/// often the scheduler preempts a thread that never sleeps.
fn drive_keys(limiter: &RedisLimiter, phase: &AtomicU8, stop: &AtomicBool) -> DuringPause {
    let end = Instant::now() + THREAD_LIMIT;
    let mut during = DuringPause::default();
    let mut key = 0u64;
    while !stop.load(Relaxed) && Instant::now() < end {
        for _ in 0..100 {
            let p = phase.load(Relaxed);
            let t = Instant::now();
            limiter.check(key, 1);
            let took = t.elapsed();
            key = (key + 1) % 100;
            if p == PAUSED && phase.load(Relaxed) == PAUSED {
                during.answered += 1;
                if took > BLOCKED {
                    during.blocked += took;
                    during.blocked_checks += 1;
                }
            }
            thread::sleep(PACE);
        }
    }
    during
}

/// Issue 46's first figure: with the server paused 3 s, a leased node
/// with 100 keys answered 392 checks where a strict node answered 10,864,
/// because each of its keys found the outage on its own, a timeout each,
/// while the strict node's one backoff covered every key. With the
/// node's health shared by its keys, one failed grant puts them all on the
/// failure policy at once and a background probe finds Redis again: the
/// leased node answers at least about as many checks as the strict one.
///
/// Both limiters run in the same process against the same server, each on
/// a thread of its own, through the same pause: a busy machine slows both
/// alike, so their ratio is what is asserted, never a wall time.
#[test]
fn a_pause_costs_a_leased_node_with_100_keys_no_more_checks_than_a_strict_one() {
    let mut server = Server::start();
    // A limit no key reaches: every check, before the pause, wants a unit.
    let config = Config::new(Algorithm::FixedWindow, 1_000_000, S);
    let build = |mode| {
        RedisLimiter::builder(&server.url(), config)
            .mode(mode)
            .failure(FailurePolicy::Deny)
            .prefix(format!("{mode:?}:").as_bytes())
            .build()
            .unwrap()
    };
    let leased = build(Mode::Leased);
    let strict = build(Mode::Strict);
    let phase = AtomicU8::new(BEFORE);
    let stop = AtomicBool::new(false);
    let (l, s) = thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        let l = scope.spawn(|| drive_keys(&leased, &phase, &stop));
        let s = scope.spawn(|| drive_keys(&strict, &phase, &stop));
        // Every key of the leased node holds a grant by now.
        thread::sleep(Duration::from_secs(1));
        assert_eq!(leased.stats().fallbacks, 0, "the server answers");
        assert_eq!(strict.stats().fallbacks, 0, "the server answers");
        let mut paused = Paused::pause(&mut server);
        phase.store(PAUSED, Relaxed);
        thread::sleep(Duration::from_secs(3));
        phase.store(AFTER, Relaxed);
        paused.resume();
        drop(paused);
        // A little after the return, so both are checking Redis again.
        thread::sleep(Duration::from_millis(300));
        stop.store(true, Relaxed);
        (l.join().unwrap(), s.join().unwrap())
    });
    println!(
        "during the 3 s pause: leased answered {} checks ({} blocked > {BLOCKED:?}, {:?} in them), \
         strict answered {} ({} blocked, {:?})",
        l.answered, l.blocked_checks, l.blocked, s.answered, s.blocked_checks, s.blocked
    );
    println!("leased: {:?}", leased.stats());
    println!("strict: {:?}", strict.stats());
    // The pause was one: both nodes' failure policies decided.
    assert!(leased.stats().lease.failures > 0 && leased.stats().fallbacks > 0);
    assert!(strict.stats().failures > 0 && strict.stats().fallbacks > 0);
    assert!(s.answered > 0, "the strict node answered during the pause");
    assert!(
        2 * l.answered >= s.answered,
        "leased answered {} checks during the pause, strict {}: fewer than half",
        l.answered,
        s.answered
    );
}

const NODES: u64 = 4;
const LIMIT: u64 = 200;

/// After the resume, when the probe that was on its way then is done
/// (its timeout is 50 ms): a grant failing later found Redis slow again.
const PROBE_DONE: u64 = 100_000_000;

/// After Redis answers again, the time by which every node's probe has
/// found it: SPEC §8 says within the probe interval (100 ms) plus the
/// timeout (50 ms); this is over three times that, for a busy machine.
const SETTLED: u64 = 500_000_000;

/// What one node's checks decided.
#[derive(Default)]
struct Decided {
    /// The dates it admitted, and whether its failure policy did.
    admitted: Vec<(u64, bool)>,
    /// The windows (date / 1 s) in which its failure policy decided a
    /// check, admitted or denied.
    on_its_own: BTreeSet<u64>,
}

/// Checks one key with its own wall-clock date until `stop`. Whether the
/// failure policy decided a check is exact: the node's fallbacks counter
/// moves only on its checks, and this thread alone checks on the node.
fn drive_one_key(limiter: &RedisLimiter, stop: &AtomicBool) -> Decided {
    let end = Instant::now() + THREAD_LIMIT;
    let mut d = Decided::default();
    let mut fallbacks = limiter.stats().fallbacks;
    while !stop.load(Relaxed) && Instant::now() < end {
        let now = wall_ns();
        let allowed = limiter.check("k", Request::new(1).at(now)).allowed;
        let f = limiter.stats().fallbacks;
        let own = f != fallbacks;
        fallbacks = f;
        if own {
            d.on_its_own.insert(now / S);
        }
        if allowed {
            d.admitted.push((now, own));
        }
    }
    d
}

/// What the test's own thread saw of the nodes, every few milliseconds:
/// when each node's failure policy decided (its fallbacks counter moved)
/// and when its grants failed. Sampled, so each event is placed within a
/// sampling interval: used for the times after the resume only, which
/// `SETTLED` leaves room for.
struct Watch {
    /// (wall time, each node's fallbacks, each node's failed grants).
    samples: Vec<(u64, Vec<u64>, Vec<u64>)>,
}

impl Watch {
    fn sample(&mut self, nodes: &[RedisLimiter]) {
        let fallbacks = nodes.iter().map(|n| n.stats().fallbacks).collect();
        let failures = nodes.iter().map(|n| n.stats().lease.failures).collect();
        self.samples.push((wall_ns(), fallbacks, failures));
    }

    /// Samples until the wall clock reaches `until`.
    fn until(&mut self, nodes: &[RedisLimiter], until: u64) {
        while wall_ns() < until {
            thread::sleep(Duration::from_millis(5));
            self.sample(nodes);
        }
    }

    /// Grants that failed on node `i` after `t` (counted from the first
    /// sample at or after it).
    fn failures_after(&self, i: usize, t: u64) -> u64 {
        let from = self.samples.iter().find(|s| s.0 >= t);
        match (from, self.samples.last()) {
            (Some(a), Some(b)) => b.2[i] - a.2[i],
            _ => 0,
        }
    }

    /// The last time node `i`'s fallbacks counter moved (the end of the
    /// sampling interval it moved in).
    fn last_fallback(&self, i: usize) -> u64 {
        self.samples
            .windows(2)
            .rev()
            .find(|w| w[0].1[i] != w[1].1[i])
            .map_or(0, |w| w[1].0)
    }
}

/// Issue 46's second figure: four nodes on the `local` policy, one key of
/// 200 per second, and a 3 s pause: the first full window after Redis
/// returned held 300 admissions, because the nodes' own admissions were
/// never told to Redis and the nodes came back only within a second. With
/// them charged (the key's debt, sent as `CHARGE`s with its next grant)
/// and the nodes back on the global limit at their probe's first reply,
/// SPEC §8 bounds each window, by the requests' dates: at most `L`, or
/// `L + N·ℓ` (`ℓ = L / expected_nodes`) where some node decided on its
/// own; and the nodes are all back within the probe interval (100 ms)
/// plus the timeout of Redis answering.
///
/// Which windows a node decided on its own in is recorded check by check
/// (its fallbacks counter, read around each check by the one thread that
/// checks on it), not assumed from the pause's times: a busy machine may
/// make Redis miss a timeout before the pause, and SPEC allows that
/// window `L + N·ℓ`. A window starting `SETTLED` or more after the resume
/// (the first full window after it among them: issue 46's) is held to
/// `L` whatever the nodes did, unless a grant failed after the return;
/// and every node must be back on Redis within `SETTLED` unless one of
/// its own did. The windows are printed with their class: before the
/// pause, the pause or the return, after the return.
#[test]
fn local_policy_admissions_stay_within_spec_bounds_around_a_pause() {
    let mut server = Server::start();
    let config = Config::new(Algorithm::FixedWindow, LIMIT, S);
    let nodes: Vec<RedisLimiter> = (0..NODES)
        .map(|_| {
            RedisLimiter::builder(&server.url(), config)
                .mode(Mode::Leased)
                .failure(FailurePolicy::Local {
                    expected_nodes: NODES as u32,
                })
                .build()
                .unwrap()
        })
        .collect();
    let local_share = LIMIT / NODES; // ℓ
    let stop = AtomicBool::new(false);
    let mut watch = Watch {
        samples: Vec::new(),
    };
    watch.sample(&nodes);
    let (admitted, pause_at, resume_at) = thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        let threads: Vec<_> = nodes
            .iter()
            .map(|n| scope.spawn(|| drive_one_key(n, &stop)))
            .collect();
        // The pause starts, and so ends, a quarter into a window: the
        // first full window after the return, the one issue 46 found
        // over the limit, then starts 0.75 s after it, past `SETTLED`
        // with room for a busy machine's late wake-up.
        let pause_target = (wall_ns() / S + 3) * S + S / 4;
        watch.until(&nodes, pause_target);
        // Dates taken outside the pause's own ends (before the stop, after
        // the continue): a window between them and the pause is classed as
        // overlapping it (the looser bound), never the other way round.
        let pause_at = wall_ns();
        let mut paused = Paused::pause(&mut server);
        watch.until(&nodes, pause_at + 3 * S);
        paused.resume();
        let resume_at = wall_ns();
        drop(paused);
        watch.sample(&nodes);
        watch.until(&nodes, resume_at + 3 * S);
        stop.store(true, Relaxed);
        let admitted: Vec<Decided> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        watch.sample(&nodes);
        (admitted, pause_at, resume_at)
    });
    let dates = || admitted.iter().flat_map(|d| d.admitted.iter().map(|a| a.0));
    let first = dates().min().unwrap() / S;
    let last = dates().max().unwrap() / S;
    // Per window: admitted in all, of which by a failure policy.
    let mut per_window = vec![(0u64, 0u64); (last - first + 1) as usize];
    for &(t, own) in admitted.iter().flat_map(|d| &d.admitted) {
        let w = &mut per_window[(t / S - first) as usize];
        w.0 += 1;
        w.1 += u64::from(own);
    }
    let local_in = |start: u64| admitted.iter().any(|d| d.on_its_own.contains(&(start / S)));
    let since = |t: u64| (t - first * S) as f64 / S as f64;
    let fallbacks: u64 = nodes.iter().map(|n| n.stats().fallbacks).sum();
    println!(
        "pause at {:.3} s, resume at {:.3} s (from the first window's start); \
         {fallbacks} checks decided by the local policy",
        since(pause_at),
        since(resume_at),
    );
    // Whether a node's grant failed after the return, other than the
    // probe that may have been on its way then (done within the timeout,
    // 50 ms, of the resume): only then may a node decide on its own after
    // the return (a busy machine made Redis miss a timeout).
    let missed: Vec<u64> = (0..nodes.len())
        .map(|i| watch.failures_after(i, resume_at + PROBE_DONE))
        .collect();
    let redis_missed = missed.iter().any(|&f| f > 0);
    for (i, n) in nodes.iter().enumerate() {
        let back = watch.last_fallback(i).saturating_sub(resume_at) as f64 / 1e6;
        println!(
            "node {i}: last fallback {back:.0} ms after the resume, {} grants failed \
             from {} ms after it; {:?}",
            missed[i],
            PROBE_DONE / 1_000_000,
            n.stats().lease
        );
    }
    // Admissions dated in a window's last millisecond (the default skew):
    // with four nodes spinning on the key a window's units are spent in
    // its first milliseconds, so these are the ones to look at when a
    // window holds one more than the limit and the next one fewer.
    let late: Vec<String> = admitted
        .iter()
        .enumerate()
        .flat_map(|(n, d)| d.admitted.iter().map(move |a| (n, a)))
        .filter(|(_, a)| a.0 % S >= S - 1_000_000)
        .map(|(n, &(t, own))| {
            let by = if own { "its failure policy" } else { "a grant" };
            format!(
                "node {n}, window {}, {} ns before its end, by {by}",
                t / S - first,
                S - t % S
            )
        })
        .collect();
    println!("admissions in a window's last ms: {late:?}");
    let mut after_return = (0, 0); // (windows, admissions)
    for (i, &(count, own)) in per_window.iter().enumerate() {
        let start = (first + i as u64) * S;
        let class = if start + S <= pause_at {
            "before the pause"
        } else if start >= resume_at + SETTLED {
            after_return.0 += 1;
            after_return.1 += count;
            "after the return"
        } else {
            "pause or return"
        };
        // Issue 46's window: after the return, `L` whatever the nodes
        // did, unless Redis missed a timeout again.
        let settled = class == "after the return" && !redis_missed;
        let (local, bound) = if settled {
            ("Redis back", LIMIT)
        } else if local_in(start) {
            ("a node decided on its own", LIMIT + NODES * local_share)
        } else {
            ("Redis decided", LIMIT)
        };
        println!(
            "window {i}: {count} admitted, {own} by a node on its own ({class}; {local}: bound {bound})"
        );
        assert!(
            count <= bound,
            "window {i} ({class}; {local}) admitted {count}, bound {bound}: {per_window:?}"
        );
    }
    // Every node back on Redis within `SETTLED` of its return, unless a
    // grant of it failed after (the machine made Redis miss a timeout,
    // and the node rightly decided on its own again).
    for (i, &failed) in missed.iter().enumerate() {
        let back = watch.last_fallback(i).saturating_sub(resume_at);
        assert!(
            failed > 0 || back < SETTLED,
            "node {i} decided on its own {} ms after the resume, with no grant failing",
            back / 1_000_000
        );
    }
    // The run reached the windows the last bound is about, the nodes
    // decided on their own during the pause, and Redis granted again.
    assert!(
        after_return.0 >= 1,
        "no window after the return: {per_window:?}"
    );
    assert!(fallbacks > 0, "the local policy decided during the pause");
    assert!(
        after_return.1 > 0,
        "nothing admitted after the return: {per_window:?}"
    );
}

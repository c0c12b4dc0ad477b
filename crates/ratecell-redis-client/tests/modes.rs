//! The three modes against a server of their own: what each costs Redis
//! (counted by the server, `INFO commandstats`), and what happens when the
//! server stops answering or goes away.

mod support;

use ratecell::{Algorithm, Config, Decision, KeyedLimiter, Request};
use ratecell_redis_client::{FailurePolicy, Mode, RedisLimiter};
use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};
use support::{Server, wall_ns};

const S: u64 = 1_000_000_000;

/// A hammered key that Redis denied costs Redis nothing until its
/// `retry_after`; then one command asks again.
#[test]
fn cached_deny_costs_redis_no_commands_until_retry_after() {
    let server = Server::start();
    let limiter = RedisLimiter::builder(&server.url(), Config::new(Algorithm::FixedWindow, 5, S))
        .mode(Mode::CachedDeny)
        .send_at(true)
        .build()
        .unwrap();
    let t = (wall_ns() / S) * S + S / 2;
    for i in 0..5 {
        assert!(limiter.check(7, Request::new(1).at(t + i)).allowed);
    }
    let denied = limiter.check(7, Request::new(1).at(t + 5));
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after_ns, S / 2 - 5);
    let before = server.command_calls()["ratecell.check"];
    for i in 0..100_000 {
        let d = limiter.check(7, Request::new(1).at(t + 6 + i));
        assert!(!d.allowed);
        // The remembered decision, counted down.
        assert_eq!(d.retry_after_ns, S / 2 - 6 - i);
    }
    assert_eq!(
        server.command_calls()["ratecell.check"],
        before,
        "no command while denied"
    );
    // Another key is not affected; at retry_after the key asks Redis again.
    assert!(limiter.check(8, Request::new(1).at(t + 7)).allowed);
    assert!(limiter.check(7, Request::new(1).at(t + S / 2)).allowed);
    assert_eq!(server.command_calls()["ratecell.check"], before + 2);
}

/// Every mode takes the request shape: any key type (a `u64` key is its 8
/// little-endian bytes, one key with them), a cost and a time on the
/// request; a tier the limit does not have is never admitted and asks
/// Redis nothing.
#[test]
fn every_mode_takes_any_key_and_a_request() {
    let server = Server::start();
    // A tier taken from a limiter that has two: the Redis limit has one.
    let other_tier = KeyedLimiter::builder()
        .tier(&[Config::new(Algorithm::FixedWindow, 1, S).capacity(10)])
        .tier(&[Config::new(Algorithm::FixedWindow, 2, S).capacity(10)])
        .build()
        .unwrap()
        .tier(1)
        .unwrap();
    for (i, mode) in [Mode::Strict, Mode::CachedDeny, Mode::Leased]
        .into_iter()
        .enumerate()
    {
        let limiter =
            RedisLimiter::builder(&server.url(), Config::new(Algorithm::FixedWindow, 10, S))
                .mode(mode)
                .prefix(format!("shape{i}:").as_bytes())
                .send_at(true)
                .build()
                .unwrap();
        let t = (wall_ns() / S) * S + S / 2;
        let id = 0x0102_0304u64;
        let d = limiter.check(id, Request::new(3).at(t));
        assert!(d.allowed, "{mode:?}");
        // The same key as bytes: 3 spent already, 4 more leave 3.
        let d = limiter.check(&id.to_le_bytes(), Request::new(4).at(t + 1));
        assert!(d.allowed, "{mode:?}");
        if mode != Mode::Leased {
            assert_eq!(d.remaining, 3, "{mode:?}");
        }
        assert!(
            !limiter.check(id, Request::new(4).at(t + 2)).allowed,
            "{mode:?}"
        );
        let name = String::from("user:1");
        assert!(
            limiter.check(&name, Request::new(1).at(t)).allowed,
            "{mode:?}"
        );
        assert!(
            limiter.check("user:1", Request::new(1).at(t)).allowed,
            "{mode:?}"
        );
        assert!(limiter.allow(&b"user:2"[..]), "{mode:?}");
        let before = limiter.stats().commands;
        let d = limiter.check("user:3", Request::new(1).at(t).tier(other_tier));
        assert_eq!(d, Decision::NEVER, "{mode:?}");
        assert_eq!(limiter.stats().commands, before, "{mode:?}");
    }
}

/// `try_local` answers what needs no network and hands the rest over as
/// a `Remote`, whose `finish` is the check's; a `Remote` dropped
/// unfinished decides nothing, and the key's next check asks again.
#[test]
fn try_local_answers_without_redis_or_hands_over_the_rest() {
    let server = Server::start();
    let t = (wall_ns() / S) * S + S / 2;
    let calls = || server.ratecell_calls();
    for mode in [Mode::CachedDeny, Mode::Leased] {
        let limiter =
            RedisLimiter::builder(&server.url(), Config::new(Algorithm::FixedWindow, 2, S))
                .mode(mode)
                .prefix(format!("{mode:?}:").as_bytes())
                .send_at(true)
                .skew(Duration::ZERO)
                .build()
                .unwrap();
        // A new key: nothing here decides it.
        let before = calls();
        let Err(dropped) = limiter.try_local(5, Request::new(1).at(t)) else {
            panic!("{mode:?}: a new key was decided without Redis");
        };
        drop(dropped);
        assert_eq!(calls(), before, "{mode:?}: dropping sends nothing");
        for i in 0..2 {
            let remote = limiter
                .try_local(5, Request::new(1).at(t + i))
                .expect_err("the window's units are Redis's to give");
            assert!(remote.finish().allowed, "{mode:?} {i}");
        }
        // The window is spent: Redis says so once, then the node does.
        let refused = match limiter.try_local(5, Request::new(1).at(t + 2)) {
            Err(remote) => remote.finish(),
            Ok(d) => d,
        };
        assert!(!refused.allowed, "{mode:?}");
        let sent = calls();
        for i in 3..100 {
            let d = limiter
                .try_local(5, Request::new(1).at(t + i))
                .unwrap_or_else(|_| panic!("{mode:?}: a refusal in hand needs no command"));
            assert!(!d.allowed, "{mode:?}");
            assert_eq!(d.retry_after_ns, S / 2 - i, "{mode:?}");
        }
        assert_eq!(calls(), sent, "{mode:?}");
    }
}

/// At steady state a busy key's checks are spent locally: Redis sees at
/// least 50 times fewer commands than the node makes checks (a count of
/// commands, whatever the speed).
#[test]
fn leased_checks_send_fifty_times_fewer_commands_than_checks() {
    let server = Server::start();
    // A limit the loop does not reach, so every check wants a unit.
    let limiter = RedisLimiter::builder(&server.url(), Config::new(Algorithm::Gcra, 10_000_000, S))
        .mode(Mode::Leased)
        .build()
        .unwrap();
    let run = |d: Duration| {
        let end = Instant::now() + d;
        let mut checks = 0u64;
        while Instant::now() < end {
            for _ in 0..256 {
                assert!(limiter.check(1, 1).allowed);
            }
            checks += 256;
        }
        checks
    };
    run(Duration::from_millis(300)); // grants grow to the rate
    let before = server.ratecell_calls();
    let checks = run(Duration::from_secs(1));
    let commands = server.ratecell_calls() - before;
    println!(
        "{checks} checks, {commands} commands: {} checks per command",
        checks / commands.max(1)
    );
    assert!(commands >= 1, "grants were fetched");
    assert!(
        checks >= 50 * commands,
        "{checks} checks, {commands} commands"
    );
}

/// One mode under faults: a thread checks a busy key in a loop, timing
/// each check and counting the commands it sent.
struct Load {
    stop: Arc<AtomicBool>,
    slowest_ns: Arc<AtomicU64>,
    most_commands: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Load {
    fn start(limiter: Arc<RedisLimiter>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let slowest_ns = Arc::new(AtomicU64::new(0));
        let most_commands = Arc::new(AtomicU64::new(0));
        let (s, w, c) = (stop.clone(), slowest_ns.clone(), most_commands.clone());
        let thread = thread::spawn(move || {
            while !s.load(Relaxed) {
                let sent = limiter.stats().commands;
                let t = Instant::now();
                limiter.check(1, 1);
                w.fetch_max(t.elapsed().as_nanos() as u64, Relaxed);
                // Exact for a limiter without a refill thread (strict,
                // cached-deny): this thread alone sends its commands.
                c.fetch_max(limiter.stats().commands - sent, Relaxed);
                // A client's pace, not a spin: the outage is the point.
                thread::sleep(Duration::from_micros(200));
            }
        });
        Load {
            stop,
            slowest_ns,
            most_commands,
            thread: Some(thread),
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the machine adds to a timed wait, measured in the run it is used
/// in: a thread waits again and again on a socket nothing writes to, with
/// a read timeout of `timeout`, as a check waits on a silent server, and
/// records by how much its waits overran. The overrun is the kernel's
/// (a socket timeout is kept in scheduler ticks, rounded up, unlike a
/// sleep's) and the scheduler's delay in running the woken thread on the
/// same busy machine at the same time: a check's own overrun is that, not
/// the code's.
struct Baseline {
    stop: Arc<AtomicBool>,
    worst_ns: Arc<AtomicU64>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Baseline {
    fn start(timeout: Duration) -> Baseline {
        let stop = Arc::new(AtomicBool::new(false));
        let worst_ns = Arc::new(AtomicU64::new(0));
        let (s, w) = (stop.clone(), worst_ns.clone());
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_read_timeout(Some(timeout)).unwrap();
        let thread = thread::spawn(move || {
            let mut buf = [0u8; 1];
            while !s.load(Relaxed) {
                let t = Instant::now();
                let r = socket.recv(&mut buf);
                assert!(r.is_err(), "nothing writes to the baseline's socket");
                let over = t.elapsed().saturating_sub(timeout);
                w.fetch_max(over.as_nanos() as u64, Relaxed);
            }
        });
        Baseline {
            stop,
            worst_ns,
            thread: Some(thread),
        }
    }

    /// The worst overrun so far.
    fn worst(&self) -> Duration {
        Duration::from_nanos(self.worst_ns.load(Relaxed))
    }
}

impl Drop for Baseline {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits, bounded, until `cond` holds.
fn eventually(what: &str, within: Duration, cond: impl Fn() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "{what}: not within {within:?}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// The server paused (SIGSTOP) then continued, then killed and
/// restarted: no check sends more than one command or waits longer than
/// the timeout (and the scheduler's overrun of a timed wait, measured in
/// the same run), the failure policy decides meanwhile (counted), and
/// checks go back to Redis by themselves: a leased node at its probe's
/// first reply, the first after Redis is back.
#[test]
fn a_paused_or_restarted_server_costs_a_timeout_at_most_and_is_recovered_from() {
    let mut server = Server::start();
    let timeout = Duration::from_millis(50);
    let config = Config::new(Algorithm::FixedWindow, 1_000_000, S);
    let build = |mode, policy| {
        Arc::new(
            RedisLimiter::builder(&server.url(), config)
                .mode(mode)
                .timeout(timeout)
                .failure(policy)
                .prefix(format!("{mode:?}:").as_bytes())
                .build()
                .unwrap(),
        )
    };
    let limiters = [
        build(Mode::Leased, FailurePolicy::Local { expected_nodes: 2 }),
        build(Mode::Strict, FailurePolicy::Deny),
        build(Mode::CachedDeny, FailurePolicy::Local { expected_nodes: 4 }),
    ];
    let baseline = Baseline::start(timeout);
    let loads: Vec<Load> = limiters.iter().map(|l| Load::start(l.clone())).collect();
    let fallbacks = || {
        limiters
            .iter()
            .map(|l| l.stats().fallbacks)
            .collect::<Vec<_>>()
    };
    thread::sleep(Duration::from_millis(300));
    assert_eq!(fallbacks(), [0, 0, 0], "the server answers");

    for fault in ["pause", "kill"] {
        let before = fallbacks();
        match fault {
            "pause" => server.pause(),
            _ => server.kill(),
        }
        // Long enough for a leased node's units to run out (a tenth of
        // the period) and its probe to reach its interval (100 ms), and
        // for the strict and cached-deny backoff to reach a second.
        thread::sleep(Duration::from_millis(1500));
        let during = fallbacks();
        for (i, (b, d)) in before.iter().zip(&during).enumerate() {
            assert!(
                d > b,
                "{fault}: limiter {i} fell back ({before:?} -> {during:?})"
            );
        }
        match fault {
            "pause" => server.resume(),
            _ => server.restart(), // returns once the new server answers
        }
        let leased_failures = limiters[0].stats().lease.failures;
        // Back on Redis by themselves: fallbacks stop. A leased node's
        // probe is due within 100 ms of its last failure, the others' next
        // attempt within their backoff's second; 5 s bounds the wait
        // generously, for a busy machine.
        let settled = |l: &RedisLimiter| {
            let f = l.stats().fallbacks;
            thread::sleep(Duration::from_millis(300));
            l.stats().fallbacks == f
        };
        for (i, l) in limiters.iter().enumerate() {
            eventually(
                &format!("{fault}: limiter {i} back on Redis"),
                Duration::from_secs(5),
                || settled(l),
            );
        }
        // The leased node's first probe after the return found Redis: at
        // most the one on its way then failed (a count, whatever the
        // speed: once Redis answers, the probe is not retried again).
        let failed_after = limiters[0].stats().lease.failures - leased_failures;
        assert!(
            failed_after <= 1,
            "{fault}: {failed_after} grants failed after Redis was back"
        );
        let commands = server.ratecell_calls();
        thread::sleep(Duration::from_millis(100));
        assert!(
            server.ratecell_calls() > commands,
            "{fault}: Redis decides again"
        );
    }
    let overrun = baseline.worst();
    drop(baseline);
    // What the code controls: one command per check, each within the
    // timeout. The wall time a check took is that plus what the machine
    // adds to a timed wait on a socket, the baseline's overrun (measured
    // alongside), and a margin: the two threads' worst moments are not
    // the same, and a check runs code around its wait (connecting,
    // encoding, a debug build's bookkeeping), on a machine whose other
    // threads are busy. Less than a timeout: a check that waited out two
    // fails it, unless the machine's overrun was itself that long.
    let margin = timeout / 2;
    println!("a socket wait of {timeout:?} overran by {overrun:?} at worst");
    for (i, load) in loads.iter().enumerate() {
        let slowest = Duration::from_nanos(load.slowest_ns.load(Relaxed));
        let commands = load.most_commands.load(Relaxed);
        println!("limiter {i}: slowest check {slowest:?}, at most {commands} commands per check");
        assert!(
            slowest <= timeout + overrun + margin,
            "limiter {i}: a check waited {slowest:?} (timeout {timeout:?}, \
             a socket wait overran by {overrun:?})"
        );
        // The leased node's refill thread sends commands too: its count
        // is not the check's.
        if i != 0 {
            assert!(
                commands <= 1,
                "limiter {i}: a check sent {commands} commands"
            );
        }
    }
    drop(loads);
    let s = limiters[0].stats();
    println!("leased: {s:?}");
    assert!(s.lease.failures > 0 && s.lease.lease_fallbacks > 0);
}

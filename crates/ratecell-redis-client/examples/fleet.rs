//! Fleet throughput and Redis commands per 1,000 checks, for the three
//! modes with 1, 2 and 4 processes sharing one limit through one server
//! (a redis-server of its own with the module, on a free loopback port).
//! Each process checks 64 keys in turn as fast as it can for `SECS`
//! seconds (default 2) under a fixed-window limit it never reaches, so
//! what is measured is each mode's cost per check; the commands are the
//! server's own count (`INFO commandstats`).
//!
//! ```sh
//! cargo build --release -p ratecell-redis
//! RATECELL_REDIS_MODULE=target/release/libratecell_redis.so \
//!     cargo run --release -p ratecell-redis-client --example fleet
//! ```
//!
//! `fleet --node URL KEY LIMIT PERIOD_NS START_NS RUN_NS` is instead one
//! node of the fleet of several languages
//! (`bindings/python/tests_redis/test_fleet_languages.py`): it checks KEY
//! under a leased fixed window of LIMIT per PERIOD_NS, at the wall clock's
//! times sent as `AT`, from START_NS for RUN_NS, and prints the times it
//! admitted (`ADMITTED t...`) and its count of checks (`CHECKS n`).

#[path = "../tests/support/mod.rs"]
mod support;

use ratecell::{Algorithm, Config, Request};
use ratecell_redis_client::{Mode, RedisLimiter};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const KEYS: u64 = 64;

fn mode(name: &str) -> Mode {
    match name {
        "strict" => Mode::Strict,
        "cached_deny" => Mode::CachedDeny,
        "leased" => Mode::Leased,
        other => panic!("unknown mode {other}"),
    }
}

/// One process: checks for `secs`, prints its count.
fn child(url: &str, mode_name: &str, secs: f64) {
    let config = Config::new(Algorithm::FixedWindow, 1_000_000_000, 1_000_000_000);
    let limiter = RedisLimiter::builder(url, config)
        .mode(mode(mode_name))
        .prefix(mode_name.as_bytes())
        .build()
        .unwrap();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut checks = 0u64;
    while Instant::now() < end {
        for k in 0..KEYS {
            limiter.check(k, 1);
        }
        checks += KEYS;
    }
    println!("{checks}");
}

/// One node of the fleet of several languages (the module docs).
fn node(args: &[String]) {
    let [url, key, limit, period, start, run] = args else {
        panic!("--node URL KEY LIMIT PERIOD_NS START_NS RUN_NS, not {args:?}");
    };
    let num = |s: &String| s.parse::<u64>().unwrap();
    let config = Config::new(Algorithm::FixedWindow, num(limit), num(period));
    let limiter = RedisLimiter::builder(url, config)
        .mode(Mode::Leased)
        .send_at(true)
        .skew(Duration::ZERO)
        .build()
        .unwrap();
    let (start, end) = (num(start), num(start) + num(run));
    while wall_ns() < start {
        std::thread::sleep(Duration::from_micros(100));
    }
    let (mut admitted, mut checks) = (Vec::new(), 0u64);
    loop {
        let t = wall_ns();
        if t >= end {
            break;
        }
        checks += 1;
        if limiter.check(key.as_str(), Request::new(1).at(t)).allowed {
            admitted.push(t.to_string());
        }
    }
    println!("ADMITTED {}", admitted.join(" "));
    println!("CHECKS {checks}");
}

fn wall_ns() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    u64::try_from(since.unwrap().as_nanos()).unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        return child(&args[2], &args[3], args[4].parse().unwrap());
    }
    if args.get(1).map(String::as_str) == Some("--node") {
        return node(&args[2..]);
    }
    let secs: f64 = std::env::var("SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let server = support::Server::start();
    let exe = std::env::current_exe().unwrap();
    println!("| mode | processes | fleet checks/s | Redis commands per 1,000 checks |");
    println!("|---|---|---|---|");
    for m in ["strict", "cached_deny", "leased"] {
        for n in [1, 2, 4] {
            let before = server.ratecell_calls();
            let children: Vec<_> = (0..n)
                .map(|_| {
                    Command::new(&exe)
                        .args(["--child", &server.url(), m, &secs.to_string()])
                        .stdout(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            let checks: u64 = children
                .into_iter()
                .map(|c| {
                    let out = c.wait_with_output().unwrap();
                    assert!(out.status.success());
                    String::from_utf8(out.stdout)
                        .unwrap()
                        .trim()
                        .parse::<u64>()
                        .unwrap()
                })
                .sum();
            let commands = server.ratecell_calls() - before;
            println!(
                "| {m} | {n} | {:.0} | {:.2} |",
                checks as f64 / secs,
                commands as f64 * 1000.0 / checks as f64
            );
        }
    }
}

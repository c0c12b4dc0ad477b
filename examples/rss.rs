//! Resident memory per key at a million keys, each limiter measured in a
//! fresh process: read `VmRSS` from /proc/self/status, build the limiter and
//! check a million distinct keys, read it again. The keys themselves are made
//! before the first reading, so only what the limiter holds is counted.
//!
//! `cargo run --release --example rss` runs every case, each in a child
//! process of its own (so no case inherits another's heap), and prints one
//! JSON object per line; `rss CASE` measures one case. Linux only.
//!
//! Cases: `ratecell/<algorithm>` with `u64` keys, `ratecell/gcra/string17`
//! with 17-character string keys, `governor/u64` and `governor/string17`
//! (its default keyed limiter, a DashMap).

use governor::{Quota, RateLimiter};
use ratecell::{Algorithm, Config, KeyedLimiter, Overflow, Request};
use std::num::NonZeroU32;
use std::process::Command;

const KEYS: u64 = 1_000_000;

/// Resident set size of this process, bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

/// `KEYS` distinct keys (a fixed multiplicative permutation of 0..KEYS).
fn u64_keys() -> Vec<u64> {
    (0..KEYS)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect()
}

/// `KEYS` distinct 17-character keys, such as `user-000000123456`.
fn string_keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("user-{i:012}")).collect()
}

/// The configuration measured for each algorithm: 10 per second, so the
/// bucketed window keeps 10 sub-windows and the sliding log 10 entries.
/// Capacity is exactly the keys inserted. A key that finds no place is
/// admitted untracked (fail open) and counted, so the run reports how many
/// of the million the table could not hold instead of stopping.
fn config(alg: Algorithm) -> Config {
    Config::new(alg, 10, 1_000_000_000)
        .capacity(KEYS)
        .overflow(Overflow::Allow)
}

/// What one case measured.
struct Measured {
    before: u64,
    after: u64,
    /// Keys the limiter holds state for afterwards.
    tracked: u64,
    /// What ratecell's own statistics say it allocated (0 for governor).
    allocated: u64,
}

fn measure(case: &str) -> Result<Measured, String> {
    let (kind, rest) = case.split_once('/').ok_or("case is KIND/WHAT")?;
    let mut allocated = 0;
    let mut tracked = KEYS;
    let (before, after) = match (kind, rest) {
        ("governor", "u64") => {
            let keys = u64_keys();
            let before = rss();
            let lim = RateLimiter::keyed(Quota::per_second(NonZeroU32::new(10).unwrap()));
            keys.iter().for_each(|k| assert!(lim.check_key(k).is_ok()));
            assert_eq!(lim.len(), KEYS as usize);
            (before, rss())
        }
        ("governor", "string17") => {
            let keys = string_keys();
            let before = rss();
            let lim = RateLimiter::keyed(Quota::per_second(NonZeroU32::new(10).unwrap()));
            keys.iter().for_each(|k| assert!(lim.check_key(k).is_ok()));
            assert_eq!(lim.len(), KEYS as usize);
            (before, rss())
        }
        ("ratecell", "gcra/string17") => {
            let keys = string_keys();
            let before = rss();
            let lim = KeyedLimiter::builder()
                .limit(config(Algorithm::Gcra))
                .build()
                .map_err(|e| e.to_string())?;
            let t = lim.now_ns();
            keys.iter()
                .for_each(|k| assert!(lim.check(k.as_bytes(), Request::new(1).at(t)).allowed));
            let stats = lim.stats();
            assert_eq!(stats.keys_tracked + stats.overflows, KEYS);
            tracked = stats.keys_tracked;
            allocated = stats.bytes_allocated;
            (before, rss())
        }
        ("ratecell", name) => {
            let alg = Algorithm::from_name(name).ok_or(format!("no algorithm {name}"))?;
            let keys = u64_keys();
            let before = rss();
            let lim = KeyedLimiter::builder()
                .limit(config(alg))
                .build()
                .map_err(|e| e.to_string())?;
            let t = lim.now_ns();
            let denied = keys
                .iter()
                .filter(|&&k| !lim.check(k, Request::new(1).at(t)).allowed)
                .count();
            let stats = lim.stats();
            eprintln!("{denied} {stats:?}");
            assert_eq!(stats.keys_tracked + stats.overflows, KEYS);
            tracked = stats.keys_tracked;
            allocated = stats.bytes_allocated;
            (before, rss())
        }
        _ => return Err(format!("unknown case {case}")),
    };
    Ok(Measured {
        before,
        after,
        tracked,
        allocated,
    })
}

fn cases() -> Vec<String> {
    let mut cases: Vec<String> = Algorithm::ALL
        .iter()
        .map(|a| format!("ratecell/{}", a.name()))
        .collect();
    cases.push("ratecell/gcra/string17".into());
    cases.push("governor/u64".into());
    cases.push("governor/string17".into());
    cases
}

fn main() {
    if let Some(case) = std::env::args().nth(1) {
        match measure(&case) {
            Ok(m) => {
                let per_key = m.after.saturating_sub(m.before) as f64 / KEYS as f64;
                println!(
                    "{{\"case\": \"{case}\", \"keys\": {KEYS}, \"tracked\": {}, \"rss_before\": {}, \"rss_after\": {}, \"bytes_per_key\": {per_key:.1}, \"allocated_per_key\": {:.1}}}",
                    m.tracked,
                    m.before,
                    m.after,
                    m.allocated as f64 / KEYS as f64
                );
            }
            Err(e) => {
                eprintln!("rss: {e}");
                std::process::exit(2);
            }
        }
        return;
    }
    let me = std::env::current_exe().expect("own path");
    for case in cases() {
        let out = Command::new(&me).arg(&case).output().expect("spawn self");
        if !out.status.success() {
            eprintln!(
                "rss: {case} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::process::exit(1);
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

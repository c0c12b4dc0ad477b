//! One benchmark case, run a fixed number of times, for instruction counts
//! under valgrind's callgrind (which counts the same on a busy machine as on
//! an idle one, where wall-clock times do not):
//!
//! ```text
//! cargo build --release --example hotpath
//! valgrind --tool=callgrind --toggle-collect='hotpath::measured*' \
//!     target/release/examples/hotpath keyed-1M-u64 1000000
//! callgrind_annotate --inclusive=yes callgrind.out.<pid>
//! ```
//!
//! Only `measured` (the loop of checks) is counted, not the set-up, so the
//! total divided by the count is the cost of one check. `hotpath` with no
//! arguments lists the cases.

#[path = "../benches/support/mod.rs"]
#[allow(dead_code)]
mod support;

use governor::{Quota, RateLimiter};
use ratecell::{
    Algorithm, Batch, Clock, Config, Decision, KeyedLimiter, Limiter, Overflow, Request, States,
    Tier,
};
use std::hint::black_box;
use std::num::NonZeroU32;
use support::{BareCell, BareTable, Cycle, T0, keys16, u64_keys};

const SECOND: u64 = 1_000_000_000;
const HUGE_RATE: u64 = 1_000_000_000;
const MILLION: usize = 1_000_000;
const CASES: &[&str] = &[
    "direct-gcra-tsc",
    "direct-gcra-tsc-allow",
    "direct-gcra-at",
    "direct-gcra-coarse",
    "direct-gcra-coarse-allow",
    "direct-token_bucket-at",
    "governor-direct",
    "bare-cas",
    "clock-tsc",
    "clock-quanta-raw",
    "keyed-1M-u64",
    "keyed-1M-u64-at",
    "keyed-1M-u64-coarse",
    "keyed-1M-bytes16",
    "keyed-1k-u64",
    "keyed-1k-u64-at",
    "keyed-1k-u64-coarse",
    "keyed-1k-u64-expiring",
    "shared-1M-u64",
    "shared-1M-u64-at",
    "shared-1k-u64",
    "shared-1k-u64-at",
    "governor-keyed-1M-u64",
    "governor-keyed-1k-u64",
    "floor-sip-gcra-1M",
    "floor-sip-gcra-1M-at",
    "floor-sip-gcra-1k",
    "floor-sip-gcra-1k-at",
    "exact-sip-gcra-1M",
    "exact-sip-gcra-1M-at",
    "exact-sip-gcra-1k",
    "exact-sip-gcra-1k-at",
    "bare-table-1M",
    "bare-table-1M-bytes16",
    "bare-table-1M-latency",
    "bare-table-1M-tsc",
    "bare-table-1M-prefetch-tsc",
    "bare-table-1M-then-8",
    "bare-table-1M-then-16",
    "bare-table-1M-then-24",
    "bare-table-1M-then-32",
    "bare-table-1M-then-48",
    "batch-1M",
    "keyed-1k-u64-1-thread",
    "keyed-1k-u64-2-threads",
    "multi-direct-gcra",
    "multi-direct-fixed_window",
    "multi-direct-gcra+fixed_window",
    "multi-direct-token_bucket",
    "multi-direct-sliding_window",
    "multi-direct-token_bucket+sliding_window",
    "multi-keyed-1k-gcra",
    "multi-keyed-1k-fixed_window",
    "multi-keyed-1k-gcra+fixed_window",
    "tiers-keyed-1k-gcra",
    "tiers-keyed-1k-fixed_window",
];

/// The loop callgrind counts: `iters` calls of `check`. Never inlined, so
/// `--toggle-collect` can find it.
/// Natively it also prints the wall time and the thread's CPU time per
/// iteration (the second is what criterion measures here; both are
/// meaningless under valgrind).
#[inline(never)]
fn measured<R>(iters: u64, mut check: impl FnMut() -> R) {
    let start = std::time::Instant::now();
    let cpu = support::cpu_time::thread_cpu_ns();
    for _ in 0..iters {
        black_box(check());
    }
    let cpu = (support::cpu_time::thread_cpu_ns() - cpu) as f64 / iters.max(1) as f64;
    let ns = start.elapsed().as_nanos() as f64 / iters.max(1) as f64;
    eprintln!("{ns:.1} ns per iteration (wall clock), {cpu:.1} ns (thread CPU time)");
}

/// The bare table over a million keys with `K` dependent steps between
/// each check's load and its CAS (`BareTable::check_u64_then`).
fn bare_then<const K: usize>(iters: u64) {
    let keys = u64_keys(MILLION, 1);
    let bare = BareTable::new(MILLION);
    let mut cycle = Cycle::new(&keys);
    measured(iters, || bare.check_u64_then::<K>(*cycle.next_item()));
}

fn config(alg: Algorithm) -> Config {
    Config::new(alg, HUGE_RATE, SECOND)
}

/// The keyed cases' quota, as in the benches: 1 per minute with a burst of
/// 10^6, so every state stays live (not evictable) for the whole run; the
/// `-expiring` case uses the huge rate, whose states are evictable a
/// nanosecond after each check.
fn keyed(n: usize, expiring: bool) -> KeyedLimiter {
    let config = if expiring {
        config(Algorithm::Gcra)
    } else {
        lasting()
    };
    KeyedLimiter::builder()
        .limit(config.capacity(n as u64).overflow(Overflow::Allow))
        .build()
        .unwrap()
}

/// The quota of the keyed cases that stay live: 1 per minute with a
/// burst of 10^6.
fn lasting() -> Config {
    Config::new(Algorithm::Gcra, 1, 60 * SECOND).burst(1_000_000)
}

/// How full the table is after the prefill: keys that found no place
/// take the slow overflow path on every check.
fn report(lim: &KeyedLimiter) {
    let s = lim.stats();
    eprintln!(
        "capacity {}: {} keys tracked, {} overflows, {} evictions",
        s.capacity, s.keys_tracked, s.overflows, s.evictions
    );
}

/// The limits of a `multi-` case's name (`gcra+fixed_window`), as the
/// bench group `multi` configures them: the huge rate for direct checks,
/// one request per 366 days (spent by the first check) for keyed ones.
fn multi_configs(names: &str, keyed: bool) -> Vec<Config> {
    names
        .split('+')
        .map(|name| {
            let alg = Algorithm::from_name(name).expect("an algorithm name");
            match (keyed, alg) {
                (true, _) => Config::new(alg, 1, ratecell::MAX_PERIOD_NS).capacity(2_000),
                (false, Algorithm::FixedWindow | Algorithm::SlidingWindow) => {
                    Config::new(alg, HUGE_RATE, 100 * SECOND)
                }
                (false, _) => config(alg),
            }
        })
        .collect()
}

fn governor() -> Quota {
    Quota::per_second(NonZeroU32::new(HUGE_RATE as u32).unwrap())
}

fn governor_lasting() -> Quota {
    Quota::with_period(std::time::Duration::from_secs(60))
        .unwrap()
        .allow_burst(NonZeroU32::new(1_000_000).unwrap())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(case) = args.next() else {
        println!(
            "usage: hotpath CASE [ITERATIONS]; cases: {}",
            CASES.join(" ")
        );
        return;
    };
    let iters: u64 = args
        .next()
        .map_or(1_000_000, |n| n.parse().expect("a count"));
    let direct = |alg| Limiter::builder().limit(config(alg)).build().unwrap();
    match case.as_str() {
        "direct-gcra-tsc" => {
            let lim = direct(Algorithm::Gcra);
            measured(iters, || lim.check(1));
        }
        "direct-gcra-tsc-allow" => {
            let lim = direct(Algorithm::Gcra);
            measured(iters, || lim.allow());
        }
        "direct-gcra-at" | "direct-token_bucket-at" => {
            let alg = if case.contains("gcra") {
                Algorithm::Gcra
            } else {
                Algorithm::TokenBucket
            };
            let lim = direct(alg);
            let mut t = T0;
            measured(iters, || {
                t += 2;
                lim.check(Request::new(1).at(t))
            });
        }
        "direct-gcra-coarse" => {
            let lim = Limiter::builder()
                .limit(config(Algorithm::Gcra))
                .clock(Clock::coarse())
                .build()
                .unwrap();
            measured(iters, || lim.check(1));
        }
        "direct-gcra-coarse-allow" => {
            let lim = Limiter::builder()
                .limit(config(Algorithm::Gcra))
                .clock(Clock::coarse())
                .build()
                .unwrap();
            measured(iters, || lim.allow());
        }
        "governor-direct" => {
            let lim = RateLimiter::direct(governor());
            measured(iters, || lim.check().is_ok());
        }
        "clock-tsc" => {
            let clock = Clock::tsc();
            measured(iters, || clock.now_ns());
        }
        "clock-quanta-raw" => {
            let clock = quanta::Clock::new();
            measured(iters, || clock.raw());
        }
        "bare-cas" => {
            let cell = BareCell::default();
            measured(iters, || cell.cas());
        }
        "keyed-1M-u64"
        | "keyed-1M-u64-at"
        | "keyed-1M-u64-coarse"
        | "keyed-1k-u64"
        | "keyed-1k-u64-at"
        | "keyed-1k-u64-coarse"
        | "keyed-1k-u64-expiring"
        | "shared-1M-u64"
        | "shared-1M-u64-at"
        | "shared-1k-u64"
        | "shared-1k-u64-at" => {
            let n = if case.contains("1M") { MILLION } else { 1_000 };
            let keys = u64_keys(n, 1);
            let mut lim = keyed(n, case.ends_with("expiring"));
            if case.ends_with("coarse") {
                lim = KeyedLimiter::builder()
                    .limit(*lim.config())
                    .clock(Clock::coarse())
                    .build()
                    .unwrap();
            }
            // The same table in a region under /dev/shm (removed once
            // attached: the mapping outlives the name).
            if case.starts_with("shared") {
                let path = format!("/dev/shm/ratecell-hotpath-{}", std::process::id());
                let _ = std::fs::remove_file(&path);
                lim = KeyedLimiter::builder()
                    .limit(*lim.config())
                    .states(States::shared(&path))
                    .build()
                    .unwrap();
                std::fs::remove_file(&path).unwrap();
            }
            keys.iter().for_each(|&k| assert!(lim.check(k, 1).allowed));
            report(&lim);
            let mut cycle = Cycle::new(&keys);
            if case.ends_with("-at") {
                let t = lim.now_ns();
                measured(iters, || {
                    lim.check(*cycle.next_item(), Request::new(1).at(t))
                });
            } else {
                measured(iters, || lim.check(*cycle.next_item(), 1));
            }
        }
        "keyed-1k-u64-1-thread" | "keyed-1k-u64-2-threads" => {
            // Wall-clock scaling outside criterion: each thread checks its
            // own 1000 keys of one million-key table, in a plain loop.
            let threads = if case.ends_with("2-threads") { 2 } else { 1 };
            let lim = keyed(MILLION, false);
            let keysets: Vec<Vec<u64>> = (0..threads).map(|t| u64_keys(1_000, 10 + t)).collect();
            for keys in &keysets {
                keys.iter().for_each(|&k| assert!(lim.check(k, 1).allowed));
            }
            std::thread::scope(|s| {
                for keys in &keysets {
                    let lim = &lim;
                    s.spawn(move || {
                        let mut cycle = Cycle::new(keys);
                        measured(iters, || lim.check(*cycle.next_item(), 1));
                    });
                }
            });
        }
        "keyed-1M-bytes16" => {
            let keys = keys16(MILLION, 2);
            let lim = keyed(MILLION, false);
            keys.iter().for_each(|k| assert!(lim.check(k, 1).allowed));
            report(&lim);
            let mut cycle = Cycle::new(&keys);
            measured(iters, || lim.check(cycle.next_item(), 1));
        }
        "governor-keyed-1M-u64" | "governor-keyed-1k-u64" => {
            let n = if case.contains("1M") { MILLION } else { 1_000 };
            let keys = u64_keys(n, 1);
            let lim = RateLimiter::keyed(governor_lasting());
            keys.iter().for_each(|k| assert!(lim.check_key(k).is_ok()));
            let mut cycle = Cycle::new(&keys);
            measured(iters, || lim.check_key(cycle.next_item()).is_ok());
        }
        sip_gcra
            if (sip_gcra.starts_with("floor-sip-gcra-")
                || sip_gcra.starts_with("exact-sip-gcra-"))
                && CASES.contains(&sip_gcra) =>
        {
            // The keyed floor of the benches (`floor/sip_gcra`), and the
            // same check on a bare table that tells keys apart
            // (`BareTable::check_gcra_tagged`), beside the keyed cases
            // above for callgrind and perf.
            let n = if case.contains("1M") { MILLION } else { 1_000 };
            let keys = u64_keys(n, 1);
            let bare = BareTable::new(n);
            let hasher = std::hash::RandomState::new();
            let rule = ratecell::state::Rule::new(&lasting()).unwrap();
            let tsc = Clock::tsc();
            let clock = (!case.ends_with("-at")).then_some(&tsc);
            let t = tsc.now_ns();
            let mut cycle = Cycle::new(&keys);
            if case.starts_with("exact") {
                keys.iter().for_each(|&k| bare.place_tagged(&hasher, k));
                measured(iters, || {
                    bare.check_gcra_tagged(&hasher, *cycle.next_item(), clock, t, &rule)
                });
            } else {
                measured(iters, || {
                    bare.check_gcra(&hasher, *cycle.next_item(), clock, t, &rule)
                });
            }
        }
        "bare-table-1M" => {
            let keys = u64_keys(MILLION, 1);
            let bare = BareTable::new(MILLION);
            let mut cycle = Cycle::new(&keys);
            measured(iters, || bare.check_u64(*cycle.next_item()));
        }
        then if then.starts_with("bare-table-1M-then-") && CASES.contains(&then) => {
            match then.rsplit('-').next() {
                Some("8") => bare_then::<8>(iters),
                Some("16") => bare_then::<16>(iters),
                Some("24") => bare_then::<24>(iters),
                Some("32") => bare_then::<32>(iters),
                Some("48") => bare_then::<48>(iters),
                _ => unreachable!("CASES lists only these"),
            }
        }
        "bare-table-1M-latency" => {
            let keys = u64_keys(MILLION, 1);
            let bare = BareTable::new(MILLION);
            let mut at = 0usize;
            measured(iters, || {
                let old = bare.check_u64_value(keys[at]);
                at += 1 + (old >> 126) as usize;
                if at >= keys.len() {
                    at = 0;
                }
            });
        }
        "bare-table-1M-tsc" | "bare-table-1M-prefetch-tsc" => {
            let keys = u64_keys(MILLION, 1);
            let bare = BareTable::new(MILLION);
            let clock = Clock::tsc();
            let prefetch_first = case.contains("prefetch");
            let mut cycle = Cycle::new(&keys);
            measured(iters, || {
                bare.check_u64_clocked(*cycle.next_item(), &clock, prefetch_first)
            });
        }
        "bare-table-1M-bytes16" => {
            let keys = keys16(MILLION, 2);
            let bare = BareTable::new(MILLION);
            let mut cycle = Cycle::new(&keys);
            measured(iters, || bare.check16(cycle.next_item()));
        }
        "batch-1M" => {
            // `iters` keys, in batches of 1024.
            let keys = u64_keys(MILLION, 1);
            let lim = keyed(MILLION, false);
            keys.iter().for_each(|&k| assert!(lim.check(k, 1).allowed));
            let chunks: Vec<&[u64]> = keys.chunks_exact(1024).collect();
            let mut chunk = Cycle::new(&chunks);
            let mut out = vec![Decision::default(); 1024];
            let mut t = lim.now_ns();
            report(&lim);
            measured(iters / 1024, || {
                t += 2048;
                lim.check_batch(Batch::new(chunk.next_item()).at(t), |i, d| out[i] = d);
                out[0].allowed
            });
            report(&lim);
        }
        multi if multi.starts_with("multi-keyed-1k-") && CASES.contains(&multi) => {
            // The bench's keyed `multi` cases: every check denied.
            let configs = multi_configs(&multi["multi-keyed-1k-".len()..], true);
            let lim = KeyedLimiter::builder().limits(&configs).build().unwrap();
            let keys = u64_keys(1_000, 15);
            keys.iter()
                .for_each(|&k| assert!(lim.check(k, Request::new(1).at(T0)).allowed));
            let mut cycle = Cycle::new(&keys);
            measured(iters, || {
                lim.check(*cycle.next_item(), Request::new(1).at(T0))
            });
            assert_eq!(lim.stats().allowed, keys.len() as u64);
        }
        tiers if tiers.starts_with("tiers-keyed-1k-") && CASES.contains(&tiers) => {
            // The bench's `tiers` cases: two tiers of one limit, keys
            // alternating between them, every check denied.
            let configs = multi_configs(&tiers["tiers-keyed-1k-".len()..], true);
            let lim = KeyedLimiter::builder()
                .tier(&[configs[0]])
                .tier(&[configs[0]])
                .build()
                .unwrap();
            let keys = u64_keys(1_000, 15);
            let paid = lim.tier(1).unwrap();
            let tier = |k: u64| [Tier::DEFAULT, paid][(k % 2) as usize];
            keys.iter()
                .for_each(|&k| assert!(lim.check(k, Request::new(1).at(T0).tier(tier(k))).allowed));
            let mut cycle = Cycle::new(&keys);
            measured(iters, || {
                let k = *cycle.next_item();
                lim.check(k, Request::new(1).at(T0).tier(tier(k)))
            });
            assert_eq!(lim.stats().allowed, keys.len() as u64);
        }
        multi if multi.starts_with("multi-direct-") && CASES.contains(&multi) => {
            // The bench's direct `multi` cases: every check admitted.
            let configs = multi_configs(&multi["multi-direct-".len()..], false);
            let lim = Limiter::builder().limits(&configs).build().unwrap();
            let mut t = T0;
            measured(iters, || {
                t += 2;
                lim.check(Request::new(1).at(t))
            });
            assert_eq!(lim.stats().denied, 0);
        }
        other => {
            eprintln!("unknown case {other}; cases: {}", CASES.join(" "));
            std::process::exit(2);
        }
    }
}

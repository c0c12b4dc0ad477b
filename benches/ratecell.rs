//! The performance suite: every ratecell case beside its peer in the same
//! run, grouped by scenario, each reported per check (`Throughput::Elements`).
//!
//! - `direct_allowed`, `direct_denied`: one shared state, for each algorithm,
//!   on the TSC clock (`check(1)`), at explicit times (`Request::at`) and on the
//!   coarse clock; governor's direct limiter with the same quota; a bare CAS
//!   on a padded 8- and 16-byte word (the physical limit).
//! - `keyed_1`, `keyed_1k`, `keyed_1M`: keyed checks over that many keys in a
//!   random order, `u64` and 16-byte keys, on the TSC clock (and for `u64`
//!   keys at explicit times and on the coarse clock); governor's keyed
//!   limiter (DashMap) and a bare table of 16-byte slots with the same keys,
//!   also with a TSC read per check. `keyed_1M` also runs every other
//!   algorithm over `u64` keys.
//! - `batch_1M`: `check_batch` (at a time, or on the clock) in chunks of 1024 keys, per
//!   key, beside the same checks made one by one and the bare table.
//! - `threads`: one thread, then two threads on the same key and on
//!   distinct keys. Each case reports wall time over all checks made, so
//!   `1_thread ÷ 2_threads` is the gain in total throughput.
//!
//! "Allowed" cases use a quota no check can exhaust, and "denied" cases a
//! spent one; after each ratecell case its counters are checked, and the run
//! stops if a single decision went the other way.
//!
//! - `multi`: a check against two limits (issue 15) beside single-limit
//!   checks of each of the two algorithms, direct and keyed, and the floors
//!   of a direct one: each limit's own decision on plain words plus one
//!   16-byte CAS (or the latch, for states wider than one CAS).
//!
//! Run through `scripts/bench.sh`, which prints the table (docs/PERFORMANCE.md).

mod support;

use criterion::{BenchmarkGroup, Criterion, Throughput, measurement::WallTime};
use governor::{Quota, RateLimiter};
use ratecell::state::Rule;
use ratecell::{
    Algorithm, Batch, Clock, Config, KeyedLimiter, Limiter, Overflow, Request, States, Stats, Tier,
};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;
use support::cpu_time::ThreadCpuTime;
use support::{
    BareCell, BareCountedCell, BareLatch, BareTable, BareWideCell, Cycle, SplitMix, T0, keys16,
    over_keys, run_threads, u64_keys,
};

const SECOND: u64 = 1_000_000_000;

/// 10^9 per second with a burst of 10^9: one emission interval of 1 ns, so
/// no check (each takes more than a nanosecond) is ever refused, on any
/// clock, and the coarse clock's millisecond steps stay far inside the
/// burst. Governor gets the same quota.
const HUGE_RATE: u64 = 1_000_000_000;

/// The explicit-time cases move time 2 ns per check: half the huge rate, so
/// the sliding window's weighted estimate also stays under the limit.
const STEP_NS: u64 = 2;

/// One check per 1 ns is beyond the sliding log (its state holds one entry
/// per admitted unit), so it gets 1000 per µs: still never refused, with a
/// log of at most 500 live entries.
fn allowed_config(alg: Algorithm) -> Config {
    match alg {
        Algorithm::SlidingLog => Config::new(alg, 1_000, 1_000),
        _ => Config::new(alg, HUGE_RATE, SECOND),
    }
}

/// One request per 366 days: spent by the first check for the whole run.
fn spent_config(alg: Algorithm) -> Config {
    Config::new(alg, 1, ratecell::MAX_PERIOD_NS)
}

fn governor_huge() -> Quota {
    Quota::per_second(NonZeroU32::new(HUGE_RATE as u32).unwrap())
}

/// Keyed cases revisit each key only every few thousand (or million)
/// checks. With the huge rate a key's state is equivalent to fresh a
/// nanosecond after its check, so the table may (losslessly) give its place
/// to another key, and the next check of that key is an insert: that is the
/// `gcra_expiring` case. Every other keyed case uses a quota whose states
/// stay live between two visits of a key, for the whole run, while still
/// admitting every check, so it measures the path of an existing key. That
/// needs an interval longer than the longest revisit (seconds, for a million
/// keys on a busy machine) and a burst above the checks one key gets in a
/// run (10^8 for a single key), and GCRA bounds their product by 2^62 ns:
/// - one key: 1 per second, burst 10^9;
/// - more keys: 1 per minute, burst 10^6 (the GCRA family and token bucket);
/// - the window algorithms: 2^32 − 1 per 366 days;
/// - sliding log: 8 per 100 ms, which a million keys revisit more slowly
///   than, so its case is named `sliding_log_expiring`: a log long enough to
///   stay live would take gigabytes at this scale.
fn lasting_config(alg: Algorithm, keys: usize) -> Config {
    let (interval, burst) = lasting_gcra(keys);
    match alg {
        Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket => {
            Config::new(alg, 1, interval).burst(burst)
        }
        Algorithm::SlidingLog => Config::new(alg, 8, 100_000_000),
        _ => Config::new(alg, ratecell::MAX_LIMIT, ratecell::MAX_PERIOD_NS),
    }
}

/// The lasting GCRA quota for `keys` keys: (interval ns, burst).
fn lasting_gcra(keys: usize) -> (u64, u64) {
    if keys == 1 {
        (SECOND, 1_000_000_000)
    } else {
        (60 * SECOND, 1_000_000)
    }
}

/// Governor's peer of the lasting GCRA quota.
fn governor_lasting(keys: usize) -> Quota {
    let (interval, burst) = lasting_gcra(keys);
    Quota::with_period(Duration::from_nanos(interval))
        .unwrap()
        .allow_burst(NonZeroU32::new(burst as u32).unwrap())
}

/// Stops the run if a case did not decide the way its name says.
fn expect_decisions(case: &str, stats: Stats, allowed: bool) {
    if allowed {
        assert!(
            stats.denied == 0,
            "{case}: {} of {} checks were denied in an 'allowed' case",
            stats.denied,
            stats.checks
        );
    } else {
        // The one check that spent the quota.
        assert!(
            stats.allowed <= 1,
            "{case}: {} of {} checks were admitted in a 'denied' case",
            stats.allowed,
            stats.checks
        );
    }
}

type Group<'a> = BenchmarkGroup<'a, ThreadCpuTime>;

fn direct(c: &mut Criterion<ThreadCpuTime>, allowed: bool) {
    let name = if allowed {
        "direct_allowed"
    } else {
        "direct_denied"
    };
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));

    let quota = if allowed {
        governor_huge()
    } else {
        Quota::per_hour(NonZeroU32::new(1).unwrap())
    };
    let gov = RateLimiter::direct(quota);
    if !allowed {
        assert!(gov.check().is_ok());
    }
    assert_eq!(gov.check().is_ok(), allowed);
    g.bench_function("governor/tsc", |b| b.iter(|| gov.check().is_ok()));
    assert_eq!(gov.check().is_ok(), allowed);

    for alg in Algorithm::ALL {
        let config = if allowed {
            allowed_config(alg)
        } else {
            spent_config(alg)
        };
        let spend = |lim: &Limiter, t: Option<u64>| {
            if !allowed {
                let d = t.map_or_else(|| lim.check(1), |t| lim.check(Request::new(1).at(t)));
                assert!(d.allowed, "the first check of a fresh limiter is admitted");
            }
        };

        let id = format!("ratecell/{}/tsc", alg.name());
        let lim = Limiter::builder().limit(config).build().unwrap();
        spend(&lim, None);
        g.bench_function(&id, |b| b.iter(|| lim.check(1)));
        expect_decisions(&id, lim.stats(), allowed);

        if alg == Algorithm::Gcra {
            let id = "ratecell/gcra/tsc_allow";
            let lim = Limiter::builder().limit(config).build().unwrap();
            spend(&lim, None);
            g.bench_function(id, |b| b.iter(|| lim.allow()));
            expect_decisions(id, lim.stats(), allowed);
        }

        let id = format!("ratecell/{}/at", alg.name());
        let lim = Limiter::builder().limit(config).build().unwrap();
        spend(&lim, Some(T0));
        let mut t = T0;
        let step = if allowed { STEP_NS } else { 0 };
        g.bench_function(&id, |b| {
            b.iter(|| {
                t += step;
                lim.check(Request::new(1).at(t))
            })
        });
        expect_decisions(&id, lim.stats(), allowed);

        // The coarse clock stands still for a millisecond at a time: the
        // sliding log would need a log as long as the checks made in one.
        if allowed && alg == Algorithm::SlidingLog {
            continue;
        }
        let id = format!("ratecell/{}/coarse", alg.name());
        let lim = Limiter::builder()
            .limit(config)
            .clock(Clock::coarse())
            .build()
            .unwrap();
        spend(&lim, None);
        g.bench_function(&id, |b| b.iter(|| lim.check(1)));
        expect_decisions(&id, lim.stats(), allowed);

        if alg == Algorithm::Gcra {
            let id = "ratecell/gcra/coarse_allow";
            let lim = Limiter::builder()
                .limit(config)
                .clock(Clock::coarse())
                .build()
                .unwrap();
            spend(&lim, None);
            g.bench_function(id, |b| b.iter(|| lim.allow()));
            expect_decisions(id, lim.stats(), allowed);
        }
    }

    if allowed {
        let cell = BareCell::default();
        g.bench_function("bare/cas_u64", |b| b.iter(|| cell.cas()));
        let wide = BareWideCell::default();
        g.bench_function("bare/cas_u128", |b| b.iter(|| wide.cas()));
        let counted = BareCountedCell::default();
        g.bench_function("bare/cas_u64_and_count", |b| b.iter(|| counted.cas()));
        // The least a clocked check can cost: read the TSC clock (the same
        // `Clock` ratecell uses), then one CAS.
        let clock = Clock::tsc();
        g.bench_function("bare/tsc_then_cas_u64", |b| {
            b.iter(|| {
                let t = clock.now_ns();
                cell.cas_with(t)
            })
        });
        // The same with a `lock`ed add on a second padded word after the
        // CAS: what one more locked instruction costs beside a TSC read
        // (ratecell's statistics are bumped without one; see src/stats.rs).
        let count = BareCell::default();
        g.bench_function("bare/tsc_then_cas_u64_and_count", |b| {
            b.iter(|| {
                let t = clock.now_ns();
                let ok = cell.cas_with(t);
                count.count() & ok
            })
        });
    }
    g.finish();
}

/// A keyed limiter with room for exactly `capacity` keys (the memory
/// budget the goals are stated at). A key that finds no place is admitted
/// untracked (fail open), so every check of an "allowed" case is still
/// admitted; how many keys that happened to is printed, since those checks
/// took the slower overflow path.
fn keyed_limiter(config: Config, capacity: usize) -> KeyedLimiter {
    KeyedLimiter::builder()
        .limit(config.capacity(capacity as u64).overflow(Overflow::Allow))
        .build()
        .unwrap()
}

/// Reports keys the table could not hold (see [`keyed_limiter`]) and keys
/// that took the place of others (which is legitimate once a state is
/// equivalent to fresh, as happens when the prefill takes longer than a
/// window), on a line `scripts/bench.sh` copies under its table.
fn note_overflows(case: &str, lim: &KeyedLimiter, keys: usize) {
    let stats = lim.stats();
    if stats.overflows > 0 || stats.evictions > 0 {
        eprintln!(
            "ratecell-bench-note: {case}: table capacity {}, {keys} distinct keys checked: {} found no place (overflow, admitted untracked), {} took an evictable place",
            stats.capacity, stats.overflows, stats.evictions
        );
    }
}

fn keyed(c: &mut Criterion<ThreadCpuTime>, n: usize, label: &str) {
    let mut g = c.benchmark_group(format!("keyed_{label}"));
    g.throughput(Throughput::Elements(1));
    let keys = u64_keys(n, 1);
    let wide = keys16(n, 2);
    let config = lasting_config(Algorithm::Gcra, n);

    {
        let gov = RateLimiter::keyed(governor_lasting(n));
        keys.iter().for_each(|k| assert!(gov.check_key(k).is_ok()));
        let mut cycle = Cycle::new(&keys);
        g.bench_function("governor/u64", |b| {
            b.iter(|| gov.check_key(cycle.next_item()).is_ok())
        });
        assert!(keys.iter().all(|k| gov.check_key(k).is_ok()));
    }
    {
        let lim = keyed_limiter(config, n);
        keys.iter().for_each(|&k| assert!(lim.check(k, 1).allowed));
        let id = "ratecell/gcra/u64";
        note_overflows(&format!("keyed_{label}/{id}"), &lim, n);
        let mut cycle = Cycle::new(&keys);
        g.bench_function(id, |b| b.iter(|| lim.check(*cycle.next_item(), 1)));
        expect_decisions(id, lim.stats(), true);
        // The same checks at the caller's time: no clock read.
        let id = "ratecell/gcra_at/u64";
        let t = lim.now_ns();
        g.bench_function(id, |b| {
            b.iter(|| lim.check(*cycle.next_item(), Request::new(1).at(t)))
        });
        expect_decisions(id, lim.stats(), true);
    }
    {
        // The same on the coarse clock: no TSC read per check.
        let lim = KeyedLimiter::builder()
            .limit(config.capacity(n as u64).overflow(Overflow::Allow))
            .clock(Clock::coarse())
            .build()
            .unwrap();
        keys.iter().for_each(|&k| assert!(lim.check(k, 1).allowed));
        let id = "ratecell/gcra_coarse/u64";
        let mut cycle = Cycle::new(&keys);
        g.bench_function(id, |b| b.iter(|| lim.check(*cycle.next_item(), 1)));
        expect_decisions(id, lim.stats(), true);
    }
    if n > 1 {
        let lim = keyed_limiter(Config::new(Algorithm::Gcra, HUGE_RATE, SECOND), n);
        keys.iter().for_each(|&k| assert!(lim.check(k, 1).allowed));
        let id = "ratecell/gcra_expiring/u64";
        let mut cycle = Cycle::new(&keys);
        g.bench_function(id, |b| b.iter(|| lim.check(*cycle.next_item(), 1)));
        expect_decisions(id, lim.stats(), true);
        note_overflows(&format!("keyed_{label}/{id} (after the run)"), &lim, n);
    }
    {
        let bare = BareTable::new(n);
        let mut cycle = Cycle::new(&keys);
        g.bench_function("bare/u64", |b| {
            b.iter(|| bare.check_u64(*cycle.next_item()))
        });
        // The floor of a keyed GCRA check (`BareTable::check_gcra`): the
        // key's SipHash, the time, one slot's load, the decision on plain
        // words and one CAS, on the TSC clock and at the caller's time.
        let hasher = std::hash::RandomState::new();
        let rule = Rule::new(&config).unwrap();
        let tsc = Clock::tsc();
        for (id, clock) in [
            ("floor/sip_gcra/u64", Some(&tsc)),
            ("floor/sip_gcra_at/u64", None),
        ] {
            let t = tsc.now_ns();
            g.bench_function(id, |b| {
                b.iter(|| bare.check_gcra(&hasher, *cycle.next_item(), clock, t, &rule))
            });
        }
        // The same with a TSC read per check (ratecell's `Clock`): read
        // first, then with the slot prefetched before the read (the order
        // of ratecell's keyed check). A TSC read waits for the loads before
        // it, so the first order leaves each check's miss unoverlapped.
        let clock = Clock::tsc();
        for (id, prefetch_first) in [("bare/u64_tsc", false), ("bare/u64_prefetch_tsc", true)] {
            g.bench_function(id, |b| {
                b.iter(|| bare.check_u64_clocked(*cycle.next_item(), &clock, prefetch_first))
            });
        }
        if n >= 1_000_000 {
            // The same, with each key's index depending on the previous
            // check's result (always 0 added, unknown to the compiler and the
            // processor): no overlap between checks, one full memory latency
            // each. A single check on a cold key costs at least this.
            let mut at = 0usize;
            g.bench_function("bare/u64_latency", |b| {
                b.iter(|| {
                    let old = bare.check_u64_value(keys[at]);
                    at += 1 + (old >> 126) as usize;
                    if at >= keys.len() {
                        at = 0;
                    }
                })
            });
        }
    }
    {
        let gov = RateLimiter::keyed(governor_lasting(n));
        wide.iter().for_each(|k| assert!(gov.check_key(k).is_ok()));
        let mut cycle = Cycle::new(&wide);
        g.bench_function("governor/bytes16", |b| {
            b.iter(|| gov.check_key(cycle.next_item()).is_ok())
        });
        assert!(wide.iter().all(|k| gov.check_key(k).is_ok()));
    }
    {
        let lim = keyed_limiter(config, n);
        wide.iter().for_each(|k| assert!(lim.check(k, 1).allowed));
        let id = "ratecell/gcra/bytes16";
        note_overflows(&format!("keyed_{label}/{id}"), &lim, n);
        let mut cycle = Cycle::new(&wide);
        g.bench_function(id, |b| b.iter(|| lim.check(cycle.next_item(), 1)));
        expect_decisions(id, lim.stats(), true);
    }
    {
        let bare = BareTable::new(n);
        let mut cycle = Cycle::new(&wide);
        g.bench_function("bare/bytes16", |b| {
            b.iter(|| bare.check16(cycle.next_item()))
        });
    }

    if n >= 1_000_000 {
        keyed_algorithms(&mut g, &keys);
    }
    g.finish();
}

/// Every other algorithm over the same `u64` keys, with the lasting quotas
/// of [`lasting_config`] (bucketed window: 10 sub-windows).
fn keyed_algorithms(g: &mut Group<'_>, keys: &[u64]) {
    for alg in Algorithm::ALL {
        if alg == Algorithm::Gcra {
            continue;
        }
        let config = lasting_config(alg, keys.len());
        let lim = keyed_limiter(config, keys.len());
        keys.iter().for_each(|&k| assert!(lim.check(k, 1).allowed));
        let name = match alg {
            Algorithm::SlidingLog => "sliding_log_expiring",
            _ => alg.name(),
        };
        let id = format!("ratecell/{name}/u64");
        note_overflows(&format!("keyed_1M/{id}"), &lim, keys.len());
        let mut cycle = Cycle::new(keys);
        g.bench_function(&id, |b| b.iter(|| lim.check(*cycle.next_item(), 1)));
        expect_decisions(&id, lim.stats(), true);
    }
}

const BATCH: usize = 1024;

fn batch(c: &mut Criterion<ThreadCpuTime>) {
    let mut g = c.benchmark_group("batch_1M");
    let n = 1_000_000;
    let keys = u64_keys(n, 1);
    let chunks: Vec<&[u64]> = keys.chunks_exact(BATCH).collect();
    let config = lasting_config(Algorithm::Gcra, n);
    let lim = keyed_limiter(config, n);
    keys.iter().for_each(|&k| assert!(lim.check(k, 1).allowed));
    note_overflows("batch_1M/ratecell/gcra", &lim, n);
    let mut out = vec![ratecell::Decision::default(); BATCH];

    g.throughput(Throughput::Elements(1));
    let bare = BareTable::new(n);
    let mut cycle = Cycle::new(&keys);
    g.bench_function("bare/u64", |b| {
        b.iter(|| bare.check_u64(*cycle.next_item()))
    });

    g.throughput(Throughput::Elements(BATCH as u64));
    let mut chunk = Cycle::new(&chunks);
    let mut t = lim.now_ns();
    g.bench_function("ratecell/gcra/check_batch_at", |b| {
        b.iter(|| {
            t += STEP_NS * BATCH as u64;
            lim.check_batch(Batch::new(chunk.next_item()).at(t), |i, d| out[i] = d);
            black_box(&out);
        })
    });
    let mut chunk = Cycle::new(&chunks);
    g.bench_function("ratecell/gcra/check_batch", |b| {
        b.iter(|| {
            lim.check_batch(Batch::new(chunk.next_item()), |i, d| out[i] = d);
            black_box(&out);
        })
    });
    let mut chunk = Cycle::new(&chunks);
    g.bench_function("ratecell/gcra/one_by_one", |b| {
        b.iter(|| {
            for (d, &k) in out.iter_mut().zip(chunk.next_item().iter()) {
                *d = lim.check(k, 1);
            }
            black_box(&out);
        })
    });
    expect_decisions("batch_1M", lim.stats(), true);
    g.finish();
}

/// Keys per thread in the distinct-keys cases: each thread has its own.
const THREAD_KEYS: usize = 1_000;

fn threads(c: &mut Criterion<WallTime>) {
    let mut g = c.benchmark_group("threads");
    let sets: Vec<Vec<u64>> = (0..2).map(|t| u64_keys(THREAD_KEYS, 10 + t)).collect();
    let same = vec![SplitMix::new(99).next_u64()];
    let keys_of = |distinct: bool, t: usize| if distinct { &sets[t] } else { &same };

    // (id, threads, distinct keys)
    let shapes = [
        ("1_thread", 1, true),
        ("1_thread_same_key", 1, false),
        ("2_threads_same_key", 2, false),
        ("2_threads_distinct_keys", 2, true),
    ];
    let case = |g: &mut BenchmarkGroup<'_, WallTime>,
                id: String,
                threads: usize,
                work: &(dyn Fn(usize, u64) + Sync)| {
        g.throughput(Throughput::Elements(threads as u64));
        g.bench_function(id, |b| {
            b.iter_custom(|iters| run_threads(threads, iters, work))
        });
    };
    // The quota must outlast the checks one key gets: a single shared key
    // gets every check.
    let keys_per_state = |distinct: bool| if distinct { THREAD_KEYS } else { 1 };

    // A table sized for a million keys (128 shards), and one for two
    // thousand (a single shard, whose counters every check bumps).
    for (table, capacity) in [("ratecell", 1_000_000), ("ratecell_small", 2 * THREAD_KEYS)] {
        for (shape, threads, distinct) in shapes {
            if table == "ratecell_small" && !distinct {
                continue;
            }
            let config = lasting_config(Algorithm::Gcra, keys_per_state(distinct));
            let lim = keyed_limiter(config, capacity);
            let id = format!("{table}/{shape}");
            for t in 0..threads {
                keys_of(distinct, t)
                    .iter()
                    .for_each(|&k| assert!(lim.check(k, 1).allowed));
            }
            note_overflows(&format!("threads/{id}"), &lim, threads * THREAD_KEYS);
            let work = |t: usize, iters: u64| {
                over_keys(keys_of(distinct, t), iters, |&k| lim.check(k, 1));
            };
            case(&mut g, id.clone(), threads, &work);
            expect_decisions(&id, lim.stats(), true);
        }
    }

    for (shape, threads) in [("1_thread", 1), ("2_threads", 2)] {
        let lim = Limiter::builder()
            .limit(allowed_config(Algorithm::Gcra))
            .build()
            .unwrap();
        let work = |_: usize, iters: u64| over_keys(&same, iters, |_| lim.check(1));
        let id = format!("ratecell_direct/{shape}");
        case(&mut g, id.clone(), threads, &work);
        expect_decisions(&id, lim.stats(), true);
    }

    for (shape, threads, distinct) in shapes {
        let gov = RateLimiter::keyed(governor_lasting(keys_per_state(distinct)));
        let work = |t: usize, iters: u64| {
            over_keys(keys_of(distinct, t), iters, |k| gov.check_key(k).is_ok());
        };
        case(&mut g, format!("governor/{shape}"), threads, &work);
    }

    let cells = [BareCell::default(), BareCell::default()];
    for (shape, threads, distinct) in shapes {
        let work = |t: usize, iters: u64| {
            let cell = &cells[if distinct { t } else { 0 }];
            over_keys(&same, iters, |_| cell.cas());
        };
        case(&mut g, format!("bare/{shape}"), threads, &work);
    }

    // What a statistics counter costs two threads on distinct keys: each
    // CASes its own word, then bumps either its own padded counter or one
    // counter both share (as ratecell's per-shard counters are shared by
    // every thread whose keys fall in the shard).
    let counters = [BareCell::default(), BareCell::default()];
    for (name, shared) in [("own_counter", false), ("shared_counter", true)] {
        let work = |t: usize, iters: u64| {
            let cell = &cells[t];
            let counter = &counters[if shared { 0 } else { t }];
            over_keys(&same, iters, |_| counter.count() & cell.cas());
        };
        case(
            &mut g,
            format!("bare_counted/2_threads_distinct_keys_{name}"),
            2,
            &work,
        );
    }
    let work = |_: usize, iters: u64| {
        over_keys(&same, iters, |_| counters[0].count() & cells[0].cas());
    };
    case(&mut g, "bare_counted/1_thread".into(), 1, &work);
    g.finish();
}

/// Several limits as one (issue 15): a check against two limits beside a
/// single-limit check of each, same run, at explicit times. Direct and
/// admitted: GCRA with a fixed window of 10^9 per 100 s (their states fit
/// one 128-bit word: one CAS), and a token bucket with a sliding window
/// (two 128-bit states: a latched block). Keyed over 1000 keys and spent
/// (every check denied): GCRA with a fixed window, one per 366 days (74
/// bits of state: one slot, one CAS).
fn multi(c: &mut Criterion<ThreadCpuTime>) {
    let mut g = c.benchmark_group("multi");
    g.throughput(Throughput::Elements(1));
    let gcra = Config::new(Algorithm::Gcra, HUGE_RATE, SECOND);
    let window = Config::new(Algorithm::FixedWindow, HUGE_RATE, 100 * SECOND);
    let token = Config::new(Algorithm::TokenBucket, HUGE_RATE, SECOND);
    let sliding = Config::new(Algorithm::SlidingWindow, HUGE_RATE, 100 * SECOND);
    let cases: [(&str, Vec<Config>); 6] = [
        ("gcra", vec![gcra]),
        ("fixed_window", vec![window]),
        ("gcra+fixed_window", vec![gcra, window]),
        ("token_bucket", vec![token]),
        ("sliding_window", vec![sliding]),
        ("token_bucket+sliding_window", vec![token, sliding]),
    ];
    for (name, configs) in &cases {
        let id = format!("direct/{name}/at");
        let lim = Limiter::builder().limits(configs).build().unwrap();
        let mut t = T0;
        g.bench_function(&id, |b| {
            b.iter(|| {
                t += STEP_NS;
                lim.check(Request::new(1).at(t))
            })
        });
        expect_decisions(&id, lim.stats(), true);
    }
    // The floors, in the same run: what a check against these limits does
    // at least, with nothing of the composite: each limit's own decision
    // (`state::Rule`: the same arithmetic, on plain words) and one 16-byte
    // CAS, or the latch when the two states do not fit one CAS.
    // `cas` alone is the tightest: the 16-byte load and CAS of a state
    // changed trivially (its value plus one), no decision at all.
    let floors: [(&str, Vec<Config>, bool); 5] = [
        ("cas", vec![], false),
        ("cas+fixed_window", vec![window], false),
        ("cas+gcra+fixed_window", vec![gcra, window], false),
        ("cas+token_bucket", vec![token], false),
        (
            "latch+token_bucket+sliding_window",
            vec![token, sliding],
            true,
        ),
    ];
    for (name, configs, latched) in &floors {
        let rules: Vec<Rule> = configs.iter().map(|c| Rule::new(c).unwrap()).collect();
        let mut states: Vec<Vec<u64>> = rules.iter().map(|r| vec![0; r.words()]).collect();
        let (cell, latch) = (BareWideCell::default(), BareLatch::default());
        let mut t = T0;
        g.bench_function(format!("direct/floor/{name}/at"), |b| {
            b.iter(|| {
                t += STEP_NS;
                let mut decide = || {
                    let mut allowed = true;
                    for (rule, state) in rules.iter().zip(&mut states) {
                        allowed &= rule.decide(state, t, 1).allowed;
                    }
                    allowed
                };
                if *latched {
                    latch.with(decide)
                } else {
                    decide() & cell.cas()
                }
            })
        });
    }
    let keys = u64_keys(1_000, 15);
    let spent = |alg| spent_config(alg).capacity(2_000);
    let cases: [(&str, Vec<Config>); 3] = [
        ("gcra", vec![spent(Algorithm::Gcra)]),
        ("fixed_window", vec![spent(Algorithm::FixedWindow)]),
        (
            "gcra+fixed_window",
            vec![spent(Algorithm::Gcra), spent(Algorithm::FixedWindow)],
        ),
    ];
    for (name, configs) in &cases {
        let id = format!("keyed_1k/{name}/at");
        let lim = KeyedLimiter::builder().limits(configs).build().unwrap();
        for &k in &keys {
            assert!(
                lim.check(k, Request::new(1).at(T0)).allowed,
                "a fresh key is admitted once"
            );
        }
        let mut cycle = Cycle::new(&keys);
        g.bench_function(&id, |b| {
            b.iter(|| lim.check(*cycle.next_item(), Request::new(1).at(T0)))
        });
        let stats = lim.stats();
        assert_eq!(
            stats.allowed,
            keys.len() as u64,
            "{id}: only the first checks admitted"
        );
    }
    g.finish();
}

/// A quota per tier: a keyed check naming its key's tier (two tiers, keys
/// alternating between them) beside the plain keyed check of the same
/// limit, same run, over 1000 spent keys (every check after the first
/// denied, as in `multi`). Both tiers have the same limit, so every case
/// decides alike and the difference is the tiered path's own cost (the
/// composite's per-limit dispatch, the tier lookup).
fn tiers(c: &mut Criterion<ThreadCpuTime>) {
    let mut g = c.benchmark_group("tiers");
    g.throughput(Throughput::Elements(1));
    let keys = u64_keys(1_000, 15);
    for alg in [Algorithm::Gcra, Algorithm::FixedWindow] {
        let config = spent_config(alg).capacity(2_000);
        let plain = KeyedLimiter::builder().limit(config).build().unwrap();
        let tiered = KeyedLimiter::builder()
            .tier(&[config])
            .tier(&[config])
            .build()
            .unwrap();
        // Each key's tier, named once (as a caller holds its users' tiers).
        let tier_of = |k: u64| [Tier::DEFAULT, tiered.tier(1).unwrap()][(k % 2) as usize];
        for &k in &keys {
            assert!(
                plain.check(k, Request::new(1).at(T0)).allowed,
                "a fresh key is admitted once"
            );
            assert!(
                tiered
                    .check(k, Request::new(1).at(T0).tier(tier_of(k)))
                    .allowed
            );
        }
        let id = format!("keyed_1k/{alg}/plain");
        let mut cycle = Cycle::new(&keys);
        g.bench_function(&id, |b| {
            b.iter(|| plain.check(*cycle.next_item(), Request::new(1).at(T0)))
        });
        let id = format!("keyed_1k/{alg}/tier");
        let mut cycle = Cycle::new(&keys);
        g.bench_function(&id, |b| {
            b.iter(|| {
                let k = *cycle.next_item();
                tiered.check(k, Request::new(1).at(T0).tier(tier_of(k)))
            })
        });
        for (id, lim) in [("plain", &plain), ("tier", &tiered)] {
            assert_eq!(
                lim.stats().allowed,
                keys.len() as u64,
                "{alg}/{id}: only the first checks admitted"
            );
        }
    }
    g.finish();
}

/// A check on a table in a shared region (issue 24) against the same check
/// on an in-process table, in one run: one key set, one configuration, the
/// region under /dev/shm (removed afterwards).
///
/// Two more cases test whether huge pages explain the gap: the in-process
/// table made with transparent huge pages disabled for the process
/// (`in_process_no_thp`), and the region on a private tmpfs mounted with
/// `huge=advise` (`shared_huge`: huge pages only where ratecell asks for
/// them, with `MADV_HUGEPAGE`; root only, skipped otherwise, and
/// unmounted afterwards). Each case prints how much of the process is
/// mapped with huge pages once its table is built. At a million keys each
/// case ends with the floor: the bare table in the same kind of memory
/// (`<case>/bare/...`).
fn shared(c: &mut Criterion<ThreadCpuTime>, n: usize, label: &str) {
    let mut g = c.benchmark_group(format!("shared_{label}"));
    g.throughput(Throughput::Elements(1));
    let keys = u64_keys(n, 1);
    let config = lasting_config(Algorithm::Gcra, n)
        .capacity(n as u64)
        .overflow(Overflow::Allow);
    let pid = std::process::id();
    let path = format!("/dev/shm/ratecell-bench-{pid}-{label}");
    let huge_tmpfs = HugeTmpfs::mount(&format!("/tmp/ratecell-bench-huge-{pid}"));
    for name in ["in_process", "in_process_no_thp", "shared", "shared_huge"] {
        let huge_before = huge_page_bytes();
        let _no_thp = (name == "in_process_no_thp").then(NoThp::new);
        let (lim, region) = match name {
            "shared" => {
                let _ = std::fs::remove_file(&path);
                (
                    KeyedLimiter::builder()
                        .limit(config)
                        .states(States::shared(&path))
                        .build()
                        .unwrap(),
                    Some(path.clone()),
                )
            }
            "shared_huge" => {
                let Some(dir) = &huge_tmpfs else { continue };
                let path = format!("{}/{label}", dir.0);
                (
                    KeyedLimiter::builder()
                        .limit(config)
                        .states(States::shared(&path))
                        .build()
                        .unwrap(),
                    Some(path),
                )
            }
            _ => (KeyedLimiter::builder().limit(config).build().unwrap(), None),
        };
        keys.iter().for_each(|&k| assert!(lim.check(k, 1).allowed));
        eprintln!(
            "shared_{label}/{name}: {} MiB of the process in huge pages after building it",
            huge_page_bytes().saturating_sub(huge_before) >> 20
        );
        let mut cycle = Cycle::new(&keys);
        let id = format!("{name}/gcra/u64");
        g.bench_function(&id, |b| b.iter(|| lim.check(*cycle.next_item(), 1)));
        let t = lim.now_ns();
        let id = format!("{name}/gcra_at/u64");
        g.bench_function(&id, |b| {
            b.iter(|| lim.check(*cycle.next_item(), Request::new(1).at(t)))
        });
        expect_decisions(&id, lim.stats(), true);
        drop(lim);
        if let Some(region) = &region {
            let _ = std::fs::remove_file(region);
        }
        // The floor: the bare table (one hash, one slot, one load and one
        // CAS) in the same kind of memory, so that a gap between the cases
        // can be told apart as the memory's or ratecell's. At a million
        // keys only: at 1k every case is in the caches.
        if n >= 1_000_000 {
            let huge_before = huge_page_bytes();
            let bare = match &region {
                Some(region) => BareTable::in_file(n, &format!("{region}-bare")),
                None => BareTable::new(n),
            };
            eprintln!(
                "shared_{label}/{name}/bare: {} MiB of the process in huge pages after building it",
                huge_page_bytes().saturating_sub(huge_before) >> 20
            );
            let mut cycle = Cycle::new(&keys);
            g.bench_function(format!("{name}/bare/u64"), |b| {
                b.iter(|| bare.check_u64(*cycle.next_item()))
            });
            // Each key chosen by the previous check's slot (see keyed's
            // bare/u64_latency): one full memory latency per check, where
            // the page size weighs most.
            let mut at = 0usize;
            g.bench_function(format!("{name}/bare/u64_latency"), |b| {
                b.iter(|| {
                    let old = bare.check_u64_value(keys[at]);
                    at += 1 + (old >> 126) as usize;
                    if at >= keys.len() {
                        at = 0;
                    }
                })
            });
        }
    }
}

/// Bytes of this process mapped with 2 MiB pages (anonymous, shmem and
/// file), from /proc/self/smaps_rollup; 0 where it cannot be read.
fn huge_page_bytes() -> u64 {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    rollup
        .lines()
        .filter(|l| {
            ["AnonHugePages:", "ShmemPmdMapped:", "FilePmdMapped:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum::<u64>()
        * 1024
}

/// Transparent huge pages disabled for this process while it lives (the
/// table built meanwhile gets 4 KiB pages, as a region on /dev/shm does).
struct NoThp;

impl NoThp {
    fn new() -> Self {
        // SAFETY: prctl with integer arguments only.
        let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        assert_eq!(
            r,
            0,
            "prctl(PR_SET_THP_DISABLE): {}",
            std::io::Error::last_os_error()
        );
        NoThp
    }
}

impl Drop for NoThp {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) };
    }
}

/// A private tmpfs mounted with `huge=advise` for the run, unmounted
/// and removed on drop. Needs root (CAP_SYS_ADMIN); `None`, with a note,
/// elsewhere. The machine's own settings are left alone.
struct HugeTmpfs(String);

impl HugeTmpfs {
    fn mount(dir: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).ok()?;
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let (src, target, fstype, data) = (
            c("tmpfs"),
            c(dir),
            c("tmpfs"),
            c("huge=advise,size=1g,mode=0700"),
        );
        // SAFETY: valid NUL-terminated strings; a fresh empty directory.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if r != 0 {
            eprintln!(
                "shared: no huge-page tmpfs at {dir} ({}); shared_huge skipped",
                std::io::Error::last_os_error()
            );
            let _ = std::fs::remove_dir(dir);
            return None;
        }
        Some(HugeTmpfs(dir.to_string()))
    }
}

impl Drop for HugeTmpfs {
    fn drop(&mut self) {
        let target = std::ffi::CString::new(self.0.as_str()).unwrap();
        // SAFETY: a NUL-terminated path this struct mounted.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn main() {
    // Short windows keep the whole suite under ten minutes on two cores;
    // scripts/bench.sh --quick shortens them further from the command line.
    let config = || {
        Criterion::default()
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(2))
    };
    // Single-thread cases in CPU time (see support/cpu_time.rs); the
    // two-thread cases in wall-clock time.
    let mut c = config()
        .with_measurement(ThreadCpuTime)
        .configure_from_args();
    direct(&mut c, true);
    direct(&mut c, false);
    keyed(&mut c, 1, "1");
    keyed(&mut c, 1_000, "1k");
    keyed(&mut c, 1_000_000, "1M");
    batch(&mut c);
    multi(&mut c);
    tiers(&mut c);
    shared(&mut c, 1_000, "1k");
    shared(&mut c, 1_000_000, "1M");
    c.final_summary();
    let mut wall = config().configure_from_args();
    threads(&mut wall);
    wall.final_summary();
}

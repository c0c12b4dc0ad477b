//! A leased check that finds units beside a local `KeyedLimiter::check` of
//! the same algorithm, same run, both on the TSC clock, over 1 and 1024
//! `u64` keys in a fixed random order (`lease_hit/<alg>/<keys>/{leased,keyed}`).
//!
//! The leased side is `ratecell::lease::Leases`, the part of a leased
//! `RedisLimiter::check` that runs when units are in hand (the limiter adds
//! a branch on its mode); each key holds a grant no run can spend, so no
//! check asks for more: the period is a day, and each grant expires when
//! the module's would (the window's end, the next refill, or a tenth of
//! the period for GCRA). The keyed side has a limit no run can reach.
//!
//! `cargo bench -p ratecell-redis-client --bench lease`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ratecell::lease::{GrantReply, LeaseConfig, Leases, Step};
use ratecell::{Algorithm, Clock, Config, KeyedLimiter};
use std::hint::black_box;

const SECOND: u64 = 1_000_000_000;
const DAY: u64 = 86_400 * SECOND;
const LIMIT: u64 = 1_000_000_000;

fn keys(n: usize) -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect()
}

/// When a grant made at `now` expires, as the module decides it for a
/// fresh key: a window's units at its end, a token bucket's at the next
/// refill, GCRA's after its default lifetime (a tenth of the period).
fn expiry(alg: Algorithm, now: u64) -> u64 {
    match alg {
        Algorithm::FixedWindow | Algorithm::SlidingWindow => (now / DAY + 1) * DAY,
        Algorithm::TokenBucket => now + DAY,
        _ => now + DAY / 10,
    }
}

/// Leases whose every key in `keys` holds a grant of 2^31 units, of a
/// limit with a period of a day.
fn leased(alg: Algorithm, keys: &[u64], clock: &Clock) -> Leases {
    let config = Config::new(alg, LIMIT, DAY).capacity(4096);
    let leases = Leases::new(LeaseConfig::new(config)).unwrap();
    let now = clock.now_ns();
    for &k in keys {
        let Step::Fetch(req) = leases.check(k, 1, now) else {
            panic!("a new key asks for a grant")
        };
        let reply = GrantReply {
            units: 1 << 31,
            expires_at_ns: expiry(alg, now),
            retry_after_ns: 0,
            limit: LIMIT,
            remaining: 0,
        };
        assert!(
            leases
                .complete(&req, Some(reply), now)
                .decision
                .unwrap()
                .allowed
        );
    }
    leases
}

fn lease_hit(c: &mut Criterion) {
    let clock = Clock::tsc();
    for alg in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
        Algorithm::SlidingWindow,
    ] {
        for n in [1usize, 1024] {
            let keys = keys(n);
            let leases = leased(alg, &keys, &clock);
            let keyed = KeyedLimiter::builder()
                .limit(Config::new(alg, LIMIT, SECOND).capacity(4096))
                .build()
                .unwrap();
            let mut g = c.benchmark_group(format!("lease_hit/{alg}/{n}"));
            g.throughput(Throughput::Elements(1));
            let mut i = 0;
            g.bench_function("leased", |b| {
                b.iter(|| {
                    i = (i + 1) & (n - 1);
                    match leases.check(black_box(keys[i]), 1, clock.now_ns()) {
                        Step::Decided(d) => d.allowed,
                        other => panic!("{other:?}"),
                    }
                })
            });
            let mut i = 0;
            g.bench_function("keyed", |b| {
                b.iter(|| {
                    i = (i + 1) & (n - 1);
                    let d = keyed.check(black_box(keys[i]), 1);
                    assert!(d.allowed);
                    d.allowed
                })
            });
            g.finish();
        }
    }
}

criterion_group!(benches, lease_hit);
criterion_main!(benches);

//! Regression tests for the defects of issue 20 (adversarial testing) that
//! live in the library: peeks on a full table, and evictions followed by a
//! request from before them.

use ratecell::{Algorithm, Config, KeyedLimiter, Overflow, Request};

const HOUR: u64 = 3_600_000_000_000;
const T0: u64 = 1_700_000_000_000_000_000;

/// A keyed limiter of 5 per hour whose table holds a single bucket (every
/// key has the same home and the same window), failing closed.
fn small(algorithm: Algorithm) -> KeyedLimiter {
    let config = Config::new(algorithm, 5, HOUR)
        .sub_windows(1)
        .capacity(1)
        .overflow(Overflow::Deny);
    KeyedLimiter::builder().limit(config).build().unwrap()
}

/// Admits keys 1000, 1001, … at `t` until one is refused for lack of room;
/// returns that key (never placed).
fn fill(limiter: &KeyedLimiter, t: u64) -> u64 {
    for key in 1000..2000 {
        if !limiter.check(key, Request::new(1).at(t)).allowed {
            assert!(limiter.stats().overflows > 0, "{key} denied for room");
            return key;
        }
    }
    panic!("a table of capacity 1 never filled");
}

/// SPEC §3: a peek's fields are those of the cost-1 request. On a full
/// table that fails closed, a new key's cost-1 request is denied, so its
/// peek must say so too (it said `allowed = true`).
#[test]
fn a_peek_on_a_full_deny_table_is_the_cost_1_request() {
    for algorithm in Algorithm::ALL {
        let limiter = small(algorithm);
        let outsider = fill(&limiter, T0);
        let peek = limiter.check(outsider, Request::new(0).at(T0));
        let request = limiter.check(outsider, Request::new(1).at(T0));
        assert!(!request.allowed, "{algorithm:?}: no room");
        assert_eq!(peek, request, "{algorithm:?}: the peek is the request");
        assert!(peek.retry_after_ns > 0 && peek.retry_after_ns < u64::MAX);
        // Once the residents are fresh again, both say yes (and the peek
        // stores nothing).
        let later = T0 + 2 * HOUR;
        assert!(
            limiter.check(outsider, Request::new(0).at(later)).allowed,
            "{algorithm:?}"
        );
        assert!(
            limiter.check(outsider, Request::new(1).at(later)).allowed,
            "{algorithm:?}"
        );
    }
}

/// SPEC §5: "never admit more" holds across evictions. Key 1 spends its 5
/// of 5 at T0; at T0 + 3 h a new key evicts it (it is fresh then) and is
/// reset, leaving a free place; a request for key 1 at T0 + 1 ns must not
/// find key 1 fresh (it got 5 more).
#[test]
fn a_request_from_before_an_eviction_admits_nothing_more() {
    for algorithm in Algorithm::ALL {
        let limiter = small(algorithm);
        for _ in 0..5 {
            assert!(
                limiter.check(1, Request::new(1).at(T0)).allowed,
                "{algorithm:?}"
            );
        }
        // Key 1 took the first place of the window; fill the rest.
        let outsider = fill(&limiter, T0);
        let evicted_at = T0 + 3 * HOUR;
        assert!(
            limiter
                .check(outsider, Request::new(1).at(evicted_at))
                .allowed
        );
        assert_eq!(limiter.stats().evictions, 1, "{algorithm:?}");
        assert!(limiter.reset(outsider), "{algorithm:?}: a free place");
        let before = T0 + 1;
        let mut admitted = 0;
        for _ in 0..10 {
            admitted += u64::from(limiter.check(1, Request::new(1).at(before)).allowed);
        }
        assert_eq!(admitted, 0, "{algorithm:?}: key 1 spent 5 of 5 at T0");
        let peek = limiter.check(1, Request::new(0).at(before));
        assert!(!peek.allowed, "{algorithm:?}: a peek agrees");
        assert!(peek.retry_after_ns <= evicted_at - before);
        // At and after the eviction's time, key 1 is fresh as it was then.
        assert!(
            limiter.check(1, Request::new(1).at(evicted_at)).allowed,
            "{algorithm:?}"
        );
    }
}

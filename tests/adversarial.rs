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
    KeyedLimiter::new(config).unwrap()
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

/// The status text of a keyed sliding window refused because its state
/// would leave the key's fingerprint fewer than 32 bits says so (it spoke
/// only of the limit's range and of GCRA).
#[test]
fn the_status_text_names_the_fingerprint_bits() {
    use ratecell::ffi::*;
    use std::ffi::CStr;
    let mut cfg = std::mem::MaybeUninit::<ratecell_config>::uninit();
    // SAFETY: `cfg` is writable and initialised by ratecell_config_init
    // before it is read; `limiter` is a place for the handle; the status
    // text is a static C string.
    let limiter = unsafe {
        ratecell_config_init(
            cfg.as_mut_ptr(),
            ratecell_algorithm::RATECELL_ALGORITHM_SLIDING_WINDOW as u32,
            1 << 31,
            1_000_000,
        );
        let mut cfg = cfg.assume_init();
        cfg.capacity = 100;
        let mut limiter = std::ptr::null_mut();
        let status = ratecell_limiter_new(&cfg, &mut limiter);
        assert_eq!(status, ratecell_status::RATECELL_INVALID_LIMIT);
        let text = CStr::from_ptr(ratecell_status_str(status as u32))
            .to_str()
            .unwrap();
        assert!(text.contains("fingerprint"), "{text}");
        limiter
    };
    assert!(limiter.is_null());
}

/// `ratecell_check_batch` writes decisions into caller memory that may
/// hold anything (here, bytes that are no valid `bool`), without reading
/// it or borrowing it as decisions.
#[test]
fn a_batch_writes_into_garbage_buffers() {
    use ratecell::ffi::*;
    use std::mem::MaybeUninit;
    let mut cfg = MaybeUninit::<ratecell_config>::uninit();
    // SAFETY: `cfg` is initialised by ratecell_config_init before it is
    // read; every buffer below is as long as the count passed with it.
    unsafe {
        ratecell_config_init(
            cfg.as_mut_ptr(),
            ratecell_algorithm::RATECELL_ALGORITHM_GCRA as u32,
            2,
            HOUR,
        );
        let mut cfg = cfg.assume_init();
        cfg.capacity = 16;
        let mut limiter = std::ptr::null_mut();
        assert_eq!(
            ratecell_limiter_new(&cfg, &mut limiter),
            ratecell_status::RATECELL_OK
        );
        let keys = [1u64, 1, 1, 2];
        let mut allowed = [0xABu8; 4];
        let mut decisions = [MaybeUninit::<ratecell_decision>::uninit(); 4];
        for d in &mut decisions {
            d.as_mut_ptr()
                .cast::<u8>()
                .write_bytes(0xAB, size_of::<ratecell_decision>());
        }
        let mut batch = MaybeUninit::<ratecell_batch>::uninit();
        ratecell_batch_init(batch.as_mut_ptr());
        let mut batch = batch.assume_init();
        batch.keys = keys.as_ptr();
        batch.n = 4;
        batch.at_ns = T0;
        let status = ratecell_check_batch(
            limiter,
            &batch,
            allowed.as_mut_ptr(),
            decisions.as_mut_ptr().cast(),
        );
        assert_eq!(status, ratecell_status::RATECELL_OK);
        assert_eq!(allowed, [1, 1, 0, 1]);
        let allowed_d: Vec<bool> = decisions.iter().map(|d| d.assume_init().allowed).collect();
        assert_eq!(allowed_d, [true, true, false, true]);
        ratecell_limiter_free(limiter);
    }
}

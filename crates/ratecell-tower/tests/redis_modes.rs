//! RedisLimiterLimits behind real axum servers on 127.0.0.1, against
//! redis-servers this file starts with ratecell's module loaded (feature
//! `redis-modes`): each mode refuses over the limit with the same fields,
//! what each costs Redis (the server's own `INFO commandstats`), and a
//! paused server answered by the limiter's failure policy.
//!
//! The limiters read a manual clock and send it as `AT`, so the module
//! decides on the test's timeline: a fixed window does not end mid-test,
//! and a remembered denial lasts until the test moves the clock.
//!
//! Ignored in a plain `cargo test`, which has neither redis-server nor the
//! built module; `scripts/redis-tests.sh` builds the module, sets
//! `RATECELL_REDIS_MODULE` and runs them with `--ignored`.

mod support;

use std::time::{Duration, Instant};

use http::StatusCode;
use ratecell::{Algorithm, Clock, Config, ManualClock};
use ratecell_tower::redis_client::{FailurePolicy, Mode, RedisLimiter};
use ratecell_tower::{RateLimitLayer, RedisLimiterLimits};
use support::{ANSWERED_WITHIN, Answer, HOUR_NS, Server, get_as, serve};

const S: u64 = 1_000_000_000;
/// Half an hour into an hour: a fixed window of an hour has 1800 s left.
const T0: u64 = 480_000 * HOUR_NS + HOUR_NS / 2;

/// A fixed window of `limit` per hour in `mode`, on a manual clock at T0.
fn limiter(server: &Server, mode: Mode, limit: u64, prefix: &str) -> (RedisLimiter, ManualClock) {
    let (clock, hand) = Clock::manual(T0);
    let limiter = RedisLimiter::builder(
        &server.url(),
        Config::new(Algorithm::FixedWindow, limit, HOUR_NS),
    )
    .mode(mode)
    .prefix(prefix.as_bytes())
    .clock(clock)
    .send_at(true)
    .build()
    .unwrap();
    (limiter, hand)
}

/// `t` of the RateLimit field's first item.
fn reset_seconds(answer: &Answer) -> u64 {
    let field = answer.field("ratelimit").expect("a RateLimit field");
    let t = field.split(";t=").nth(1).expect("a t parameter");
    t.parse().unwrap()
}

/// A refusal of the limit "api" with every field of the layer's 429:
/// `Retry-After` and `t` both `retry` seconds.
fn assert_refused(answer: &Answer, limit: u64, retry: u64, what: &str) {
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{what}");
    let policy = format!("\"api\";q={limit};w=3600");
    assert_eq!(
        answer.field("ratelimit-policy"),
        Some(&policy[..]),
        "{what}"
    );
    assert_eq!(
        answer.field("ratelimit"),
        Some(&format!("\"api\";r=0;t={retry}")[..]),
        "{what}"
    );
    assert_eq!(
        answer.field("retry-after"),
        Some(&retry.to_string()[..]),
        "{what}"
    );
    assert_eq!(
        answer.field("content-type"),
        Some("application/problem+json"),
        "{what}"
    );
    assert!(
        answer.body.contains("\"violated-policies\":[\"api\"]"),
        "{what}: {}",
        answer.body
    );
}

/// Every mode admits the window's limit and refuses the rest with the
/// same fields: the policy, `r=0`, `t` and `Retry-After` the time to the
/// window's end, the problem document. What differs is what Redis saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server and the module: run by scripts/redis-tests.sh"]
async fn every_mode_refuses_over_the_limit_with_the_same_fields() {
    let server = Server::start();
    let limit = 40;
    for (i, mode) in [Mode::Strict, Mode::CachedDeny, Mode::Leased]
        .into_iter()
        .enumerate()
    {
        let (limiter, _clock) = limiter(&server, mode, limit, &format!("m{i}:"));
        let limits = RedisLimiterLimits::new("api", limiter).unwrap();
        let store = limits.clone();
        let app = serve(RateLimitLayer::new_async(limits)).await;
        let checks_before = server.command_calls("ratecell.check");
        let leases_before = server.command_calls("ratecell.lease");
        let mut admitted = 0;
        let mut refused_in_a_row = 0;
        let mut requests = 0;
        // Until ten refusals in a row: a leased node's last grant may still
        // be on its way when the first refusal comes.
        while refused_in_a_row < 10 {
            assert!(requests < 2 * limit, "{mode:?}: no end to admissions");
            requests += 1;
            let answer = get_as(app, "alice").await;
            if answer.status == StatusCode::OK {
                admitted += 1;
                refused_in_a_row = 0;
                if mode != Mode::Leased {
                    // Redis's own count and reset; a leased admission
                    // reports the units this node holds, and no reset.
                    assert_eq!(answer.remaining(), limit - admitted, "{mode:?}");
                    assert_eq!(reset_seconds(&answer), 1800, "{mode:?}");
                }
            } else {
                refused_in_a_row += 1;
                assert_refused(&answer, limit, 1800, &format!("{mode:?}"));
            }
        }
        if mode == Mode::Leased {
            // Every grant answered: none can add units now.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let s = store.limiter().stats().lease;
                if s.fetches + s.refills == s.replies + s.failures {
                    break;
                }
                assert!(Instant::now() < deadline, "grants unanswered: {s:?}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            while get_as(app, "alice").await.status == StatusCode::OK {
                admitted += 1;
            }
        }
        assert_eq!(admitted, limit, "{mode:?}");
        let checks = server.command_calls("ratecell.check") - checks_before;
        let leases = server.command_calls("ratecell.lease") - leases_before;
        match mode {
            Mode::Strict => assert_eq!((checks, leases), (requests, 0)),
            // One command saw the first refusal; the others were remembered.
            Mode::CachedDeny => assert_eq!((checks, leases), (limit + 1, 0)),
            // Grants of at most a tenth of the limit (the default largest),
            // far fewer than the admissions, and no checks.
            Mode::Leased => {
                assert_eq!(checks, 0);
                assert!(
                    (limit.div_ceil(limit / 10)..=limit / 2).contains(&leases),
                    "{leases} grants for {admitted} admissions"
                );
            }
        }
    }
}

/// A key refused in `cached_deny` costs Redis nothing until its
/// `retry_after`, however many requests it sends; then it asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server and the module: run by scripts/redis-tests.sh"]
async fn cached_deny_sends_no_command_while_a_denial_is_remembered() {
    let server = Server::start();
    let (limiter, clock) = limiter(&server, Mode::CachedDeny, 3, "cd:");
    let app = serve(RateLimitLayer::new_async(
        RedisLimiterLimits::new("api", limiter).unwrap(),
    ))
    .await;
    for i in 0..3 {
        assert_eq!(get_as(app, "bob").await.status, StatusCode::OK, "{i}");
    }
    assert_refused(&get_as(app, "bob").await, 3, 1800, "the first refusal");
    let before = server.command_calls("ratecell.check");
    assert_eq!(before, 4);
    clock.advance(600 * S);
    for i in 0..50 {
        // The remembered refusal, counted down on the clock.
        assert_refused(&get_as(app, "bob").await, 3, 1200, &format!("{i}"));
    }
    assert_eq!(
        server.command_calls("ratecell.check"),
        before,
        "no command while the denial is remembered"
    );
    // Another key asks Redis; at the window's end "bob" asks again.
    assert_eq!(get_as(app, "carol").await.status, StatusCode::OK);
    clock.advance(1200 * S);
    let answer = get_as(app, "bob").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.remaining(), 2);
    assert_eq!(server.command_calls("ratecell.check"), before + 2);
}

/// A server that does not answer is the limiter's failure policy's:
/// `Deny` refuses within the limiter's timeout, with the fields and a
/// `Retry-After` of the next attempt, rather than the layer's 503; Redis
/// decides again once it answers and the node's probe has found it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server and the module: run by scripts/redis-tests.sh"]
async fn a_paused_server_is_the_limiters_failure_policy() {
    let server = Server::start();
    let timeout = Duration::from_millis(50);
    let (clock, hand) = Clock::manual(T0);
    let limiter = RedisLimiter::builder(
        &server.url(),
        Config::new(Algorithm::FixedWindow, 10, HOUR_NS),
    )
    .mode(Mode::Leased)
    .timeout(timeout)
    .failure(FailurePolicy::Deny)
    .clock(clock)
    .send_at(true)
    .build()
    .unwrap();
    let store = RedisLimiterLimits::new("api", limiter).unwrap();
    let app = serve(RateLimitLayer::new_async(store.clone())).await;
    assert_eq!(get_as(app, "dave").await.status, StatusCode::OK);

    server.pause();
    // A key with no units in hand must ask Redis, which does not answer.
    let answer = get_as(app, "erin").await;
    assert!(
        answer.took < ANSWERED_WITHIN,
        "took {:?} with a {timeout:?} timeout",
        answer.took
    );
    // The first backoff step, 10 ms: Retry-After rounds it up to 1 s.
    assert_refused(&answer, 10, 1, "while paused");
    assert_eq!(store.limiter().stats().lease.lease_fallbacks, 1);
    server.resume();

    // The node's probe, in the background on real time (10 ms, doubling to
    // 100 ms), finds Redis again and puts every key back on it: a check
    // then asks Redis. Bounded by many probe intervals, not by a
    // scheduler's latency.
    hand.advance(2 * S);
    let mut answer = get_as(app, "erin").await;
    for _ in 0..100 {
        if answer.status == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        answer = get_as(app, "erin").await;
    }
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    drop(server);
}

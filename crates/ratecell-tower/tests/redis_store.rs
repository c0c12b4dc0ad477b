//! RedisLimits behind real axum servers on 127.0.0.1, against redis-servers
//! this file starts with ratecell's module loaded (feature `redis`): two
//! layers sharing one limit, several limits in one CHECKALL, and a server
//! paused (SIGSTOP) or killed, answered by the failure policy within the
//! store's timeout. Each server runs on a free port in its own directory
//! and is stopped when its guard drops, on a failed assertion too.
//!
//! Ignored in a plain `cargo test`, which has neither redis-server nor the
//! built module; `scripts/redis-tests.sh` builds the module, sets
//! `RATECELL_REDIS_MODULE` and runs them with `--ignored`.

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use ratecell::Algorithm;
use ratecell_tower::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ratecell_tower::{RateLimitLayer, RedisLimits, StoreError, StoreFailurePolicy};
use support::{ANSWERED_WITHIN, Server, get_as, hour, serve};

async fn connect(server: &Server) -> ConnectionManager {
    let client = redis::Client::open(server.url()).unwrap();
    client.get_connection_manager().await.unwrap()
}

/// A connection manager that tries a lost server again every second or
/// two, as the README advises (by default it waits a second, then a minute).
async fn connect_retrying(server: &Server) -> ConnectionManager {
    let client = redis::Client::open(server.url()).unwrap();
    let config = ConnectionManagerConfig::new()
        .set_max_delay(1_000)
        .set_connection_timeout(Duration::from_secs(1));
    client
        .get_connection_manager_with_config(config)
        .await
        .unwrap()
}

/// Counts the store errors a layer reports, by kind.
#[derive(Clone, Default)]
struct Errors(Arc<Mutex<Vec<String>>>);

impl Errors {
    fn hook(&self) -> impl Fn(&http::request::Parts, &StoreError) + Send + Sync + 'static {
        let seen = self.0.clone();
        move |_, e| {
            let kind = match e {
                StoreError::Timeout(_) => "timeout",
                StoreError::Failed(_) => "failed",
                _ => "other",
            };
            seen.lock().unwrap().push(kind.to_owned());
        }
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server and the module: run by scripts/redis-tests.sh"]
async fn two_layers_share_one_limit_through_one_server() {
    let server = Server::start();
    let config = [("", hour(Algorithm::Gcra, 10))];
    // Two servers of one service, each with its own connection.
    let a = serve(RateLimitLayer::new_async(
        RedisLimits::new(connect(&server).await, &config)
            .unwrap()
            .prefix("rl:"),
    ))
    .await;
    let b = serve(RateLimitLayer::new_async(
        RedisLimits::new(connect(&server).await, &config)
            .unwrap()
            .prefix("rl:"),
    ))
    .await;
    let mut statuses = Vec::new();
    for i in 0..30 {
        let answer = get_as(if i % 2 == 0 { a } else { b }, "alice").await;
        assert_eq!(
            answer.field("ratelimit-policy"),
            Some("\"default\";q=10;w=3600"),
            "request {i}"
        );
        if i < 10 {
            assert_eq!(
                answer.status,
                StatusCode::OK,
                "request {i}: {}",
                answer.body
            );
            assert_eq!(answer.remaining(), 9 - i, "request {i}");
            assert_eq!(answer.field("retry-after"), None);
        } else {
            assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "request {i}");
            assert_eq!(answer.remaining(), 0);
            // GCRA, 10 per hour: the next unit in 6 minutes.
            let retry: u64 = answer.field("retry-after").unwrap().parse().unwrap();
            assert!((1..=360).contains(&retry), "Retry-After {retry}");
            assert!(
                answer.body.contains("\"violated-policies\":[\"default\"]"),
                "{}",
                answer.body
            );
        }
        statuses.push(answer.status.as_u16());
    }
    assert_eq!(statuses.iter().filter(|&&s| s == 200).count(), 10);
    assert_eq!(statuses.iter().filter(|&&s| s == 429).count(), 20);
    // One RATECELL.CHECK on prefix + key, as the Go and Python stores send.
    assert!(server.exists("rl:alice"));
    // Another key has its own quota.
    assert_eq!(get_as(a, "bob").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server and the module: run by scripts/redis-tests.sh"]
async fn several_limits_are_one_checkall_on_hash_tagged_keys() {
    let server = Server::start();
    let limits = RedisLimits::new(
        connect(&server).await,
        &[
            ("burst", hour(Algorithm::FixedWindow, 3)),
            ("daily", hour(Algorithm::SlidingWindow, 5)),
        ],
    )
    .unwrap();
    let app = serve(RateLimitLayer::new_async(limits)).await;
    for i in 0..3 {
        let answer = get_as(app, "carol").await;
        assert_eq!(answer.status, StatusCode::OK, "request {i}");
        assert_eq!(
            answer.field("ratelimit-policy"),
            Some("\"burst\";q=3;w=3600, \"daily\";q=5;w=3600")
        );
    }
    let refused = get_as(app, "carol").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    // "daily" would have admitted: it spent nothing and is not violated.
    let field = refused.field("ratelimit").unwrap();
    assert!(
        field.starts_with("\"burst\";r=0;t=") && field.contains(", \"daily\";r=2;t="),
        "{field}"
    );
    assert!(
        refused.body.contains("\"violated-policies\":[\"burst\"]"),
        "{}",
        refused.body
    );
    assert!(server.exists("{carol}:burst") && server.exists("{carol}:daily"));
}

/// Sends `n` requests to `app` while its store cannot answer, and checks
/// that each is answered by the failure policy, ended by `timeout`
/// ([`ANSWERED_WITHIN`]):
/// 503 and no fields when closed, the handler's 200 and no fields when
/// open.
async fn answered_by_policy(app: SocketAddr, n: usize, timeout: Duration, open: bool) {
    for i in 0..n {
        let answer = get_as(app, "dave").await;
        assert!(
            answer.took < ANSWERED_WITHIN,
            "request {i} took {:?}, beyond the {timeout:?} timeout",
            answer.took
        );
        assert_eq!(answer.field("ratelimit"), None, "request {i}");
        if open {
            assert_eq!(answer.status, StatusCode::OK, "request {i}");
            assert_eq!(answer.body, "hello");
        } else {
            assert_eq!(
                answer.status,
                StatusCode::SERVICE_UNAVAILABLE,
                "request {i}"
            );
            assert_eq!(
                answer.field("content-type"),
                Some("application/problem+json")
            );
            assert!(answer.body.contains("\"status\":503"), "{}", answer.body);
        }
    }
}

/// Requests to `app` after its store came back: decided by the limit of
/// `limit` again. The first is admitted and says how much is left; exactly
/// that many more are admitted, then the next is refused.
async fn decided_again(app: SocketAddr, limit: u64) -> u64 {
    let first = get_as(app, "dave").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let left = first.remaining();
    assert!(left < limit);
    for i in 0..left {
        let answer = get_as(app, "dave").await;
        assert_eq!(answer.status, StatusCode::OK, "request {i} of {left} left");
        assert_eq!(answer.remaining(), left - 1 - i);
    }
    let refused = get_as(app, "dave").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server and the module: run by scripts/redis-tests.sh"]
async fn a_paused_server_is_answered_by_the_failure_policy_within_the_timeout() {
    let server = Server::start();
    let config = [("", hour(Algorithm::Gcra, 10))];
    let closed_errors = Errors::default();
    let closed = serve(
        RateLimitLayer::new_async(
            RedisLimits::new(connect(&server).await, &config)
                .unwrap()
                .prefix("closed:"),
        )
        .on_store_error(closed_errors.hook()),
    )
    .await;
    let open_timeout = Duration::from_millis(100);
    let open = serve(
        RateLimitLayer::new_async(
            RedisLimits::new(connect(&server).await, &config)
                .unwrap()
                .prefix("open:")
                .timeout(open_timeout)
                .unwrap(),
        )
        .failure_policy(StoreFailurePolicy::FailOpen),
    )
    .await;
    for app in [closed, open] {
        for _ in 0..4 {
            assert_eq!(get_as(app, "dave").await.status, StatusCode::OK);
        }
    }

    assert_eq!(ratecell_tower::DEFAULT_TIMEOUT, Duration::from_millis(250));
    server.pause();
    let paused_at = Instant::now();
    answered_by_policy(closed, 3, ratecell_tower::DEFAULT_TIMEOUT, false).await;
    // Each waited out the default timeout: the store, not the connection,
    // was what failed.
    assert!(paused_at.elapsed() >= 3 * ratecell_tower::DEFAULT_TIMEOUT);
    assert_eq!(closed_errors.take(), ["timeout", "timeout", "timeout"]);
    answered_by_policy(open, 3, open_timeout, true).await;
    server.resume();

    // The commands that timed out were already sent: the server runs them
    // when it continues, and may charge them. The limit then decides alone:
    // 4 admitted before, up to 3 charged late, 1 + what is left after.
    for app in [closed, open] {
        let left = decided_again(app, 10).await;
        let late = 10 - 4 - 1 - left;
        assert!(late <= 3, "{late} charged while paused, of 3 sent");
    }
    assert!(closed_errors.take().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server and the module: run by scripts/redis-tests.sh"]
async fn a_killed_server_is_answered_by_the_failure_policy_without_hanging() {
    let mut server = Server::start();
    let port = server.port;
    let config = [("", hour(Algorithm::Gcra, 10))];
    let errors = Errors::default();
    let closed = serve(
        RateLimitLayer::new_async(
            RedisLimits::new(connect_retrying(&server).await, &config).unwrap(),
        )
        .on_store_error(errors.hook()),
    )
    .await;
    let open = serve(
        RateLimitLayer::new_async(RedisLimits::new(connect(&server).await, &config).unwrap())
            .failure_policy(StoreFailurePolicy::FailOpen),
    )
    .await;
    assert_eq!(get_as(closed, "dave").await.remaining(), 9);
    assert_eq!(get_as(open, "dave").await.remaining(), 8);

    server.kill();
    answered_by_policy(closed, 3, ratecell_tower::DEFAULT_TIMEOUT, false).await;
    answered_by_policy(open, 3, ratecell_tower::DEFAULT_TIMEOUT, true).await;
    let seen = errors.take();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.iter().all(|e| e == "failed" || e == "timeout"),
        "{seen:?}"
    );

    // Down a few seconds, past the default manager's first retry (after
    // which it would wait a minute), then back on the same address, empty
    // (nothing was saved): the manager reconnects and the limit decides
    // again, from a fresh state.
    drop(server);
    tokio::time::sleep(Duration::from_secs(4)).await;
    answered_by_policy(closed, 1, ratecell_tower::DEFAULT_TIMEOUT, false).await;
    let _server = Server::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let answer = get_as(closed, "erin").await;
        if answer.status != StatusCode::SERVICE_UNAVAILABLE {
            break answer;
        }
        assert!(
            Instant::now() < deadline,
            "no decision 30 s after the server came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.remaining(), 9);
}

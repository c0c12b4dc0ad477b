//! The layer behind real servers on 127.0.0.1 (axum, and hyper alone),
//! driven by a hyper client over loopback. Limiters run on a manual clock,
//! so every expected field follows from SPEC.md's rules.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use ratecell::{Algorithm, Clock, Config, KeyedLimiter, Limiter, ManualClock, Overflow};
use ratecell_tower::{
    Key, KeyPart, MissingKey, Multi, Named, QUOTA_EXCEEDED_TYPE, RateLimitLayer,
    StoreFailurePolicy, Tiered, acquire,
};
use tokio::net::{TcpListener, TcpStream};

const S: u64 = 1_000_000_000;
/// A whole multiple of 10 s plus 2.5 s: a 10 s fixed window has 7.5 s left.
const T0: u64 = 1_700_000_000 * S + 2_500_000_000;
const LIMIT_TIME: Duration = Duration::from_secs(20);

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn field(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

async fn request(addr: SocketAddr, path: &str, header: Option<(&str, &str)>) -> Reply {
    tokio::time::timeout(LIMIT_TIME, async {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut req = Request::get(path).header("host", "127.0.0.1");
        if let Some((k, v)) = header {
            req = req.header(k, v);
        }
        let res = sender
            .send_request(req.body(Empty::<Bytes>::new()).unwrap())
            .await
            .unwrap();
        let (parts, body) = res.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8(body.to_vec()).unwrap(),
        }
    })
    .await
    .expect("request timed out")
}

/// Serves `app` on 127.0.0.1 with client addresses; the server task ends
/// with the test's runtime.
async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    addr
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/health", get(|| async { "ok" }))
        .layer(layer)
}

fn keyed(config: Config) -> (KeyedLimiter, ManualClock) {
    let (clock, hand) = Clock::manual(T0);
    (
        KeyedLimiter::builder()
            .limit(config.capacity(1024))
            .clock(clock)
            .build()
            .unwrap(),
        hand,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_exact_and_429_exactly_when_the_window_is_full() {
    // 3 per 10 s, fixed window, 7.5 s left in the window at T0.
    let (limiter, hand) = keyed(Config::new(Algorithm::FixedWindow, 3, 10 * S));
    let limits = std::sync::Arc::new(Named::keyed(limiter).name("api").unwrap());
    let addr = serve(app(RateLimitLayer::new(limits.clone()))).await;

    for remaining in [2, 1, 0] {
        let r = request(addr, "/", None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body, "hello");
        assert_eq!(r.field("ratelimit-policy"), Some("\"api\";q=3;w=10"));
        assert_eq!(
            r.field("ratelimit").unwrap(),
            format!("\"api\";r={remaining};t=8")
        );
        assert_eq!(r.field("retry-after"), None);
    }
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("retry-after"), Some("8"), "7.5 s rounded up");
    assert_eq!(r.field("ratelimit"), Some("\"api\";r=0;t=8"));
    assert_eq!(r.field("ratelimit-policy"), Some("\"api\";q=3;w=10"));
    assert_eq!(r.field("content-type"), Some("application/problem+json"));
    assert_eq!(
        r.body,
        format!(
            "{{\"type\":\"{QUOTA_EXCEEDED_TYPE}\",\"title\":\"Quota exceeded\",\"status\":429,\"violated-policies\":[\"api\"]}}"
        )
    );

    // One nanosecond before the window ends: still refused, 1 s rounded up.
    hand.advance(7_500_000_000 - 1);
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("retry-after"), Some("1"));
    // At the boundary the new window admits again.
    hand.advance(1);
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.field("ratelimit"), Some("\"api\";r=2;t=10"));
    let stats = limits.limiter().stats();
    assert_eq!((stats.allowed, stats.denied), (4, 2));
}

fn problem(violated: &str) -> String {
    format!(
        "{{\"type\":\"{QUOTA_EXCEEDED_TYPE}\",\"title\":\"Quota exceeded\",\"status\":429,\"violated-policies\":[{violated}]}}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_named_limits_one_item_each_and_all_or_nothing() {
    // "burst" 3 per 1 s and "daily" 5 per hour, both fixed windows, on one
    // key table. At T0 the second has 0.5 s left and the hour 2797.5 s
    // (1_700_000_000 s is 800 s into its hour).
    let (clock, hand) = Clock::manual(T0);
    let limiter = KeyedLimiter::builder()
        .limits(&[
            Config::new(Algorithm::FixedWindow, 3, S).capacity(1024),
            Config::new(Algorithm::FixedWindow, 5, 3600 * S).capacity(1024),
        ])
        .clock(clock)
        .names(&["burst", "daily"])
        .build()
        .unwrap();
    let limits = std::sync::Arc::new(Multi::new(limiter, None).unwrap());
    let addr = serve(app(RateLimitLayer::new(limits.clone()))).await;
    let policy = "\"burst\";q=3;w=1, \"daily\";q=5;w=3600";

    for (burst, daily) in [(2, 4), (1, 3), (0, 2)] {
        let r = request(addr, "/", None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.field("ratelimit-policy"), Some(policy));
        assert_eq!(
            r.field("ratelimit").unwrap(),
            format!("\"burst\";r={burst};t=1, \"daily\";r={daily};t=2798")
        );
    }
    // "burst" refuses; "daily" would admit, and is not charged: r stays 2.
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("retry-after"), Some("1"), "0.5 s rounded up");
    assert_eq!(r.field("ratelimit-policy"), Some(policy));
    assert_eq!(
        r.field("ratelimit"),
        Some("\"burst\";r=0;t=1, \"daily\";r=2;t=2798")
    );
    assert_eq!(r.body, problem("\"burst\""));

    // The next second: "burst" is fresh, "daily" has the 2 left it had
    // and 2797 s to go.
    hand.advance(500_000_000);
    for (burst, daily) in [(2, 1), (1, 0)] {
        let r = request(addr, "/", None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(
            r.field("ratelimit").unwrap(),
            format!("\"burst\";r={burst};t=1, \"daily\";r={daily};t=2797")
        );
    }
    // "daily" refuses; "burst" is not charged: r stays 1.
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("retry-after"), Some("2797"));
    assert_eq!(
        r.field("ratelimit"),
        Some("\"burst\";r=1;t=1, \"daily\";r=0;t=2797")
    );
    assert_eq!(r.body, problem("\"daily\""));
    // Still refused by "daily" alone, and still nothing spent on "burst".
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        r.field("ratelimit"),
        Some("\"burst\";r=1;t=1, \"daily\";r=0;t=2797")
    );
    let stats = limits.limiter().stats();
    assert_eq!((stats.allowed, stats.denied), (5, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_limits_both_refusing_are_both_listed() {
    // One global pair: 2 per 10 s and 2 per 60 s. After two requests both
    // are spent: the third is refused by both, Retry-After is the longer
    // wait (the minute: 37.5 s left at T0, 1_700_000_000 s being 20 s into
    // its minute).
    let (clock, _hand) = Clock::manual(T0);
    let limiter = Limiter::builder()
        .limits(&[
            Config::new(Algorithm::FixedWindow, 2, 10 * S),
            Config::new(Algorithm::FixedWindow, 2, 60 * S),
        ])
        .clock(clock)
        .build()
        .unwrap();
    let limits = Multi::new(limiter, Some(&["ten-seconds", "minute"])).unwrap();
    let addr = serve(app(RateLimitLayer::new(limits))).await;
    for _ in 0..2 {
        assert_eq!(request(addr, "/", None).await.status, StatusCode::OK);
    }
    let r = request(addr, "/", Some(("x-any", "other client"))).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("retry-after"), Some("38"));
    assert_eq!(
        r.field("ratelimit-policy"),
        Some("\"ten-seconds\";q=2;w=10, \"minute\";q=2;w=60")
    );
    assert_eq!(
        r.field("ratelimit"),
        Some("\"ten-seconds\";r=0;t=8, \"minute\";r=0;t=38")
    );
    assert_eq!(r.body, problem("\"ten-seconds\",\"minute\""));
}

#[test]
fn multi_names_are_checked() {
    let two = || {
        KeyedLimiter::builder()
            .limits(&[
                Config::new(Algorithm::Gcra, 3, S).capacity(16),
                Config::new(Algorithm::Gcra, 5, 3600 * S).capacity(16),
            ])
            .build()
            .unwrap()
    };
    let err = Multi::new(two(), None).unwrap_err().to_string();
    assert!(err.contains("limit 0 has no name"), "{err}");
    let err = Multi::new(two(), Some(&["a"])).unwrap_err().to_string();
    assert!(err.contains("1 names for 2 limits"), "{err}");
    let err = Multi::new(two(), Some(&["a", "a"]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("limit 1") && err.contains("must differ"),
        "{err}"
    );
    let err = Multi::new(two(), Some(&["a", "caf\u{e9}"]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("limit 1") && err.contains("printable ASCII"),
        "{err}"
    );
    let one = KeyedLimiter::builder()
        .limits(&[Config::new(Algorithm::Gcra, 3, S).capacity(16)])
        .build()
        .unwrap();
    assert!(format!("{:?}", Multi::new(one, None).unwrap()).contains("default"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_second_period_and_reset_round_up() {
    // GCRA 2 per 1.5 s: T = 750 ms; after one request tat = t + 750 ms.
    let (limiter, _hand) = keyed(Config::new(Algorithm::Gcra, 2, 1_500_000_000));
    let addr = serve(app(RateLimitLayer::new(Named::keyed(limiter)))).await;
    let r = request(addr, "/", None).await;
    assert_eq!(r.field("ratelimit-policy"), Some("\"default\";q=2;w=2"));
    assert_eq!(r.field("ratelimit"), Some("\"default\";r=1;t=1"));
    let r = request(addr, "/", None).await;
    assert_eq!(r.field("ratelimit"), Some("\"default\";r=0;t=2"));
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("retry-after"), Some("1"), "750 ms rounded up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_has_t_equal_to_retry_after() {
    // GCRA, 2 per 10 s: after two requests the next passes in 5 s, while
    // the quota is whole again only in 10 s. t says the first, as
    // Retry-After does.
    let (limiter, _hand) = keyed(Config::new(Algorithm::Gcra, 2, 10 * S));
    let addr = serve(app(RateLimitLayer::new(Named::keyed(limiter)))).await;
    for _ in 0..2 {
        assert_eq!(request(addr, "/", None).await.status, StatusCode::OK);
    }
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("retry-after"), Some("5"));
    assert_eq!(r.field("ratelimit"), Some("\"default\";r=0;t=5"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_second_period_advertises_its_real_rate() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::Gcra, 10, S / 2));
    let addr = serve(app(RateLimitLayer::new(Named::keyed(limiter)))).await;
    let r = request(addr, "/", None).await;
    assert_eq!(r.field("ratelimit-policy"), Some("\"default\";q=20;w=1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_key_table_refusal_carries_the_same_wait_as_retry_after() {
    // A tiny table that fails closed (overflow deny): some new key finds no
    // place; its refusal carries the table's wait in t and in Retry-After.
    let (clock, _hand) = Clock::manual(T0);
    let config = Config::new(Algorithm::FixedWindow, 5, 10 * S)
        .capacity(1)
        .overflow(ratecell::Overflow::Deny);
    let limiter = KeyedLimiter::builder()
        .limit(config)
        .clock(clock)
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(Named::keyed(limiter)).key_header("x-api-key".parse().unwrap());
    let addr = serve(app(layer)).await;
    for i in 0..10_000 {
        let key = format!("k{i}");
        let r = request(addr, "/", Some(("x-api-key", &key))).await;
        if r.status != StatusCode::TOO_MANY_REQUESTS {
            continue;
        }
        let secs = r.field("retry-after").expect("a wait");
        assert_ne!(secs, "0");
        assert_eq!(
            r.field("ratelimit").unwrap(),
            format!("\"default\";r=0;t={secs}")
        );
        return;
    }
    panic!("the table never ran out of room");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_counts_and_sets_fields_but_never_refuses() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 2, 10 * S));
    let limits = std::sync::Arc::new(Named::keyed(limiter));
    let addr = serve(app(RateLimitLayer::new(limits.clone()).dry_run(true))).await;
    let mut seen = Vec::new();
    for _ in 0..6 {
        let r = request(addr, "/", None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.field("retry-after"), None);
        seen.push(r.field("ratelimit").unwrap().to_owned());
    }
    assert_eq!(seen[0], "\"default\";r=1;t=8");
    assert!(
        seen[1..].iter().all(|f| f == "\"default\";r=0;t=8"),
        "{seen:?}"
    );
    let stats = limits.limiter().stats();
    assert_eq!((stats.checks, stats.allowed, stats.denied), (6, 2, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_on_one_key_get_exactly_the_limit() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::SlidingWindow, 25, 3600 * S));
    let layer = RateLimitLayer::new(Named::keyed(limiter)).key_header("x-api-key".parse().unwrap());
    let addr = serve(app(layer)).await;
    let tasks: Vec<_> = (0..80)
        .map(|_| {
            tokio::spawn(async move {
                request(addr, "/", Some(("x-api-key", "shared")))
                    .await
                    .status
            })
        })
        .collect();
    let mut ok = 0;
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!((ok, refused), (25, 55));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_keys_locks_out_new_clients_only_under_deny() {
    // Issue 33 §4 through a layer keyed by an API-key header: made-up keys
    // fill a 16-key table with live states. Under Deny the next new client
    // is refused; under Evict, the policy the crate's documentation builds
    // its limiters with, it is admitted.
    for (overflow, status) in [
        (Overflow::Deny, StatusCode::TOO_MANY_REQUESTS),
        (Overflow::Evict, StatusCode::OK),
    ] {
        let config = Config::new(Algorithm::FixedWindow, 1, 10 * S)
            .capacity(16)
            .overflow(overflow);
        let limiter = KeyedLimiter::builder()
            .limit(config)
            .clock(Clock::manual(T0).0)
            .build()
            .unwrap();
        let layer =
            RateLimitLayer::new(Named::keyed(limiter)).key_header("x-api-key".parse().unwrap());
        let addr = serve(app(layer)).await;
        for i in 0..200 {
            request(addr, "/", Some(("x-api-key", &format!("flood-{i}")))).await;
        }
        let reply = request(addr, "/", Some(("x-api-key", "a-new-legitimate-client"))).await;
        assert_eq!(reply.status, status, "{overflow:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_keys_are_separate_and_missing_keys_follow_the_policy() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let layer = RateLimitLayer::new(Named::keyed(limiter))
        .key_header("x-api-key".parse().unwrap())
        .missing_key(MissingKey::Shared);
    let addr = serve(app(layer)).await;
    assert_eq!(
        request(addr, "/", Some(("x-api-key", "a"))).await.status,
        StatusCode::OK
    );
    assert_eq!(
        request(addr, "/", Some(("x-api-key", "a"))).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        request(addr, "/", Some(("x-api-key", "b"))).await.status,
        StatusCode::OK
    );
    // Keyless requests share one quota (MissingKey::Shared).
    assert_eq!(request(addr, "/", None).await.status, StatusCode::OK);
    assert_eq!(
        request(addr, "/", None).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        request(addr, "/", Some(("x-api-key", ""))).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let limits = std::sync::Arc::new(Named::keyed(limiter));
    // Reject is the default.
    let layer = RateLimitLayer::new(limits.clone()).key_header("x-api-key".parse().unwrap());
    let addr = serve(app(layer)).await;
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.field("content-type"), Some("application/problem+json"));
    assert!(r.body.contains("no rate-limit key"), "{}", r.body);

    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let limits_skip = std::sync::Arc::new(Named::keyed(limiter));
    let layer = RateLimitLayer::new(limits_skip.clone())
        .key_fn(|p| p.headers.get("x-user").map(|v| v.as_bytes().to_vec()))
        .missing_key(MissingKey::Skip);
    let addr = serve(app(layer)).await;
    for _ in 0..3 {
        let r = request(addr, "/", None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.field("ratelimit"), None);
    }
    assert_eq!(
        request(addr, "/", Some(("x-user", "u"))).await.status,
        StatusCode::OK
    );
    assert_eq!(limits_skip.limiter().stats().checks, 1);
    assert_eq!(limits.limiter().stats().checks, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_right_most_untrusted_address_is_the_key() {
    // The server's peer is 127.0.0.1, the "proxy"; 1 request per key.
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let layer = RateLimitLayer::new(Named::keyed(limiter)).trusted_proxies([
        "127.0.0.0/8".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
    ]);
    let addr = serve(app(layer)).await;
    let xff = |v: &'static str| Some(("x-forwarded-for", v));
    assert_eq!(
        request(addr, "/", xff("1.2.3.4")).await.status,
        StatusCode::OK
    );
    // Spoofing a left entry does not make another client.
    let r = request(addr, "/", xff("6.6.6.6, 1.2.3.4, 10.0.0.9")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        request(addr, "/", xff("5.6.7.8")).await.status,
        StatusCode::OK
    );
    // IPv6 clients are keyed by /64.
    assert_eq!(
        request(addr, "/", xff("2001:db8:0:1::1")).await.status,
        StatusCode::OK
    );
    let r = request(addr, "/", xff("2001:db8:0:1:ffff::2")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "same /64");
    assert_eq!(
        request(addr, "/", xff("2001:db8:0:2::1")).await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_headers_are_ignored_unless_proxies_are_trusted() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let addr = serve(app(RateLimitLayer::new(Named::keyed(limiter)))).await;
    let r = request(addr, "/", Some(("x-forwarded-for", "1.2.3.4"))).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = request(addr, "/", Some(("x-forwarded-for", "5.6.7.8"))).await;
    assert_eq!(
        r.status,
        StatusCode::TOO_MANY_REQUESTS,
        "both are 127.0.0.1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_hops_and_the_forwarded_header() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let layer = RateLimitLayer::new(Named::keyed(limiter))
        .trusted_hops(2)
        .forwarded_header(ratecell_tower::ForwardedHeader::Forwarded);
    let addr = serve(app(layer)).await;
    let fwd = |v: &'static str| Some(("forwarded", v));
    let r = request(
        addr,
        "/",
        fwd("for=6.6.6.6, for=1.2.3.4;proto=http, for=10.0.0.1"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = request(
        addr,
        "/",
        fwd("for=7.7.7.7, for=\"1.2.3.4:5555\", for=10.0.0.1"),
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "the same client");
    let r = request(addr, "/", fwd("for=\"[2001:db8::1]\", for=10.0.0.1")).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_without_connect_info_is_a_500_not_a_shared_quota() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let limits = std::sync::Arc::new(Named::keyed(limiter));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The mistake: served without into_make_service_with_connect_info.
    let router = app(RateLimitLayer::new(limits.clone()));
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    for _ in 0..2 {
        let r = request(addr, "/", None).await;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(r.field("content-type"), Some("application/problem+json"));
        assert!(
            r.body.contains("into_make_service_with_connect_info"),
            "{}",
            r.body
        );
    }
    assert_eq!(limits.limiter().stats().checks, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_hook_answers_429s_and_the_fields_are_kept() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let layer = RateLimitLayer::new(Named::keyed(limiter).name("api").unwrap()).on_refusal(
        |parts, items| {
            let body = format!(
                "slow down on {} ({})",
                parts.uri.path(),
                items[0].name.as_str()
            );
            Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .header("content-type", "text/plain")
                .header("retry-after", "60")
                .body(Bytes::from(body))
                .unwrap()
        },
    );
    let addr = serve(app(layer)).await;
    assert_eq!(request(addr, "/", None).await.status, StatusCode::OK);
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.body, "slow down on / (api)");
    assert_eq!(r.field("content-type"), Some("text/plain"));
    assert_eq!(r.field("retry-after"), Some("60"), "the hook's own wins");
    assert_eq!(r.field("ratelimit"), Some("\"api\";r=0;t=8"));
    assert_eq!(r.field("ratelimit-policy"), Some("\"api\";q=1;w=10"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_hook_sees_every_violation() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 2, 10 * S));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let layer = RateLimitLayer::new(Named::keyed(limiter))
        .dry_run(true)
        .on_dry_run_refusal(move |parts, items| {
            log.lock()
                .unwrap()
                .push((parts.uri.path().to_owned(), items[0].decision.remaining));
        });
    let addr = serve(app(layer)).await;
    for _ in 0..5 {
        assert_eq!(request(addr, "/", None).await.status, StatusCode::OK);
    }
    assert_eq!(*seen.lock().unwrap(), vec![("/".to_owned(), 0); 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_filter_limits_only_those_methods() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let limits = std::sync::Arc::new(Named::keyed(limiter));
    let layer = RateLimitLayer::new(limits.clone()).methods([http::Method::POST]);
    let router = Router::new()
        .route("/", get(|| async { "hello" }).post(|| async { "posted" }))
        .layer(layer);
    let addr = serve(router).await;
    for _ in 0..3 {
        let r = request(addr, "/", None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.field("ratelimit"), None);
    }
    assert_eq!(limits.limiter().stats().checks, 0);
    let post = || async {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let req = Request::post("/")
            .header("host", "127.0.0.1")
            .body(Empty::<Bytes>::new())
            .unwrap();
        sender.send_request(req).await.unwrap().status()
    };
    assert_eq!(post().await, StatusCode::OK);
    assert_eq!(post().await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exempt_paths_and_predicates_are_never_counted() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let limits = std::sync::Arc::new(Named::keyed(limiter));
    let layer = RateLimitLayer::new(limits.clone())
        .exempt_paths(["/health"])
        .exempt(|p| p.headers.contains_key("x-internal"));
    let addr = serve(app(layer)).await;
    for _ in 0..5 {
        let r = request(addr, "/health", None).await;
        assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(r.field("ratelimit"), None);
        assert_eq!(
            request(addr, "/", Some(("x-internal", "1"))).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(limits.limiter().stats().checks, 0);
    assert_eq!(request(addr, "/", None).await.status, StatusCode::OK);
    assert_eq!(
        request(addr, "/", None).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_function_charges_units() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 10, 10 * S));
    let layer = RateLimitLayer::new(Named::keyed(limiter))
        .cost(|p| if p.uri.path() == "/" { 4 } else { 1 });
    let addr = serve(app(layer)).await;
    assert_eq!(
        request(addr, "/", None).await.field("ratelimit"),
        Some("\"default\";r=6;t=8")
    );
    assert_eq!(
        request(addr, "/", None).await.field("ratelimit"),
        Some("\"default\";r=2;t=8")
    );
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("ratelimit"), Some("\"default\";r=2;t=8"));
    assert_eq!(
        request(addr, "/health", None).await.field("ratelimit"),
        Some("\"default\";r=1;t=8")
    );
}

/// hyper without axum: the server puts the peer's `SocketAddr` in the
/// request's extensions, and the layer keys by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_hyper_server_keyed_by_peer_address() {
    use hyper::body::Incoming;
    use tower::ServiceBuilder;

    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 2, 10 * S));
    let layer = RateLimitLayer::new(Named::keyed(limiter));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let svc = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert(peer);
                    req
                })
                .layer(layer.clone())
                .service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hi"))))
                });
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(
                TokioIo::new(stream),
                hyper_util::service::TowerToHyperService::new(svc),
            ));
        }
    });
    assert_eq!(
        request(addr, "/", None).await.field("ratelimit"),
        Some("\"default\";r=1;t=8")
    );
    assert_eq!(request(addr, "/", None).await.status, StatusCode::OK);
    let r = request(addr, "/", None).await;
    assert_eq!(
        (r.status, r.field("retry-after")),
        (StatusCode::TOO_MANY_REQUESTS, Some("8"))
    );
}

/// `acquire` under an executor that is not tokio: it resolves once the
/// limiter admits, and fails at once when the wait exceeds the time-out.
#[test]
fn acquire_waits_without_a_runtime() {
    // 1 per 100 ms on the real clock.
    let limiter = KeyedLimiter::builder()
        .limit(Config::new(Algorithm::Gcra, 1, 100_000_000).capacity(16))
        .build()
        .unwrap();
    let limits = Named::keyed(limiter);
    futures_executor::block_on(async {
        assert!(acquire(&limits, b"k", 1, Duration::ZERO).await.is_ok());
        let refused = acquire(&limits, b"k", 1, Duration::ZERO).await.unwrap_err();
        assert!(!refused[0].decision.allowed);
        let admitted = acquire(&limits, b"k", 1, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(admitted[0].decision.allowed);
        // A cost above the limit can never be admitted: no wait.
        assert!(
            acquire(&limits, b"other", 2, Duration::from_secs(60))
                .await
                .is_err()
        );
    });
}

/// A leaky bucket's admitted requests wait out their queue place (on a
/// timer, not a thread) and then run, with their fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaky_bucket_requests_run_after_their_queue_wait() {
    // T = 100 ms, queue of 3: waits of 0, 100 and 200 ms, then refusal.
    let (limiter, _hand) = keyed(Config::new(Algorithm::LeakyBucket, 10, S).burst(3));
    let layer = RateLimitLayer::new(Named::keyed(limiter)).key_header("x-api-key".parse().unwrap());
    let addr = serve(app(layer)).await;
    let replies: Vec<_> = (0..3)
        .map(|_| request(addr, "/", Some(("x-api-key", "q"))))
        .collect();
    let mut remaining = Vec::new();
    for r in replies {
        let r = r.await;
        assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "hello"));
        remaining.push(r.field("ratelimit").unwrap().to_owned());
    }
    assert_eq!(
        remaining,
        [
            "\"default\";r=2;t=1",
            "\"default\";r=1;t=1",
            "\"default\";r=0;t=1"
        ]
    );
    assert_eq!(
        request(addr, "/", Some(("x-api-key", "q"))).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// A `RateLimits` that does not give a fixed policy field: the layer
/// formats it from each request's decisions.
struct PerRequest(Named<KeyedLimiter>);

impl ratecell_tower::RateLimits for PerRequest {
    fn check(&self, key: &[u8], cost: u64) -> Vec<ratecell_tower::LimitDecision> {
        ratecell_tower::RateLimits::check(&self.0, key, cost)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_without_a_fixed_policy_get_the_field_per_request() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 3, 10 * S));
    let limits = PerRequest(Named::keyed(limiter).name("api").unwrap());
    assert_eq!(ratecell_tower::RateLimits::policy_field(&limits), None);
    let addr = serve(app(RateLimitLayer::new(limits))).await;
    let r = request(addr, "/", None).await;
    assert_eq!(r.field("ratelimit-policy"), Some("\"api\";q=3;w=10"));
    assert_eq!(r.field("ratelimit"), Some("\"api\";r=2;t=8"));
}

/// A store the layer awaits, standing in for Redis: an in-process limiter
/// whose decisions arrive after `delay`, or (no limiter) a failure.
struct Store {
    limits: Option<Named<KeyedLimiter>>,
    delay: Duration,
}

impl ratecell_tower::AsyncRateLimits for Store {
    fn check(&self, key: Vec<u8>, cost: u64) -> ratecell_tower::LimitsFuture {
        let result = match &self.limits {
            Some(limits) => Ok(ratecell_tower::RateLimits::check(limits, &key, cost)),
            None => Err(ratecell_tower::StoreError::Failed(
                "connection refused".into(),
            )),
        };
        let delay = self.delay;
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            result
        })
    }

    fn policy_field(&self) -> Option<String> {
        self.limits
            .as_ref()
            .and_then(ratecell_tower::RateLimits::policy_field)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_awaited_store_decides_as_in_process_limits_do() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 3, 10 * S));
    let store = Store {
        limits: Some(Named::keyed(limiter).name("api").unwrap()),
        delay: Duration::from_millis(20),
    };
    let addr = serve(app(
        RateLimitLayer::new_async(store).exempt_paths(["/health"])
    ))
    .await;
    for remaining in [2, 1, 0] {
        let r = request(addr, "/", None).await;
        assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "hello"));
        assert_eq!(r.field("ratelimit-policy"), Some("\"api\";q=3;w=10"));
        assert_eq!(
            r.field("ratelimit").unwrap(),
            format!("\"api\";r={remaining};t=8")
        );
    }
    let r = request(addr, "/", None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.field("retry-after"), Some("8"));
    assert_eq!(r.field("ratelimit"), Some("\"api\";r=0;t=8"));
    assert_eq!(r.body, problem("\"api\""));
    // Exempt paths never reach the store.
    assert_eq!(request(addr, "/health", None).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_is_a_503_unless_the_layer_fails_open() {
    let failing = || Store {
        limits: None,
        delay: Duration::from_millis(5),
    };
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let closed = serve(app(RateLimitLayer::new_async(failing()).on_store_error(
        move |parts, error| {
            log.lock()
                .unwrap()
                .push(format!("{} {error}", parts.uri.path()))
        },
    )))
    .await;
    let r = request(closed, "/", None).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.field("content-type"), Some("application/problem+json"));
    // The Go and Python middlewares' body.
    assert_eq!(
        r.body,
        "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\
         \"detail\":\"the rate limiter failed\"}"
    );
    assert_eq!(r.field("ratelimit"), None);
    assert_eq!(r.field("ratelimit-policy"), None);
    assert_eq!(
        *seen.lock().unwrap(),
        ["/ the rate-limit store failed: connection refused"]
    );

    let open = serve(app(
        RateLimitLayer::new_async(failing()).failure_policy(StoreFailurePolicy::FailOpen)
    ))
    .await;
    let r = request(open, "/", None).await;
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "hello"));
    assert_eq!(r.field("ratelimit"), None);
}

/// A plan from the request picks its quota; an unknown plan is the default
/// tier's; a key that changes tier keeps what it spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_is_chosen_per_request() {
    let (clock, _hand) = Clock::manual(T0);
    let free = Config::new(Algorithm::FixedWindow, 2, 10 * S).capacity(1024);
    let pro = Config::new(Algorithm::FixedWindow, 5, 10 * S).capacity(1024);
    let limiter = KeyedLimiter::builder()
        .tier(&[free])
        .tier(&[pro])
        .clock(clock)
        .build()
        .unwrap();
    let plans = ["free", "pro"];
    let layer = RateLimitLayer::new(Tiered::keyed(limiter, &plans).unwrap())
        .key_header("x-api-key".parse().unwrap())
        .tier(move |parts| {
            // The plan from the query; anything else is past the tiers.
            let plan = parts.uri.query().and_then(|q| q.strip_prefix("plan="));
            plan.map_or(usize::MAX, |p| {
                plans.iter().position(|t| *t == p).unwrap_or(usize::MAX)
            })
        });
    let addr = serve(app(layer)).await;
    for r in [1, 0] {
        let reply = request(addr, "/?plan=free", Some(("x-api-key", "a"))).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.field("ratelimit-policy"), Some(r#""free";q=2;w=10"#));
        assert_eq!(
            reply.field("ratelimit"),
            Some(format!(r#""free";r={r};t=8"#).as_str())
        );
    }
    let reply = request(addr, "/?plan=free", Some(("x-api-key", "a"))).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    for r in [4, 3, 2, 1, 0] {
        let reply = request(addr, "/?plan=pro", Some(("x-api-key", "b"))).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.field("ratelimit-policy"), Some(r#""pro";q=5;w=10"#));
        assert_eq!(
            reply.field("ratelimit"),
            Some(format!(r#""pro";r={r};t=8"#).as_str())
        );
    }
    let reply = request(addr, "/?plan=pro", Some(("x-api-key", "b"))).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    // No plan, or one the limits lack: the default tier.
    for (path, key) in [("/", "c"), ("/?plan=enterprise", "d")] {
        let reply = request(addr, path, Some(("x-api-key", key))).await;
        assert_eq!(reply.field("ratelimit"), Some(r#""free";r=1;t=8"#));
    }
    // Upgraded: the two units spent under free count under pro.
    let reply = request(addr, "/?plan=pro", Some(("x-api-key", "a"))).await;
    assert_eq!(reply.field("ratelimit"), Some(r#""pro";r=2;t=8"#));
}

#[test]
fn tier_names_are_checked() {
    let one = Config::new(Algorithm::Gcra, 2, S).capacity(16);
    let four = Config::new(Algorithm::Gcra, 4, S).capacity(16);
    let tiered = || {
        KeyedLimiter::builder()
            .tier(&[one])
            .tier(&[four])
            .build()
            .unwrap()
    };
    for names in [
        &["free"][..],
        &["free", "free"],
        &["free", ""],
        &["a", "b\n"],
    ] {
        assert!(Tiered::keyed(tiered(), names).is_err(), "{names:?}");
    }
    assert!(Tiered::keyed(tiered(), &["free", "pro"]).is_ok());
    let two = KeyedLimiter::builder().tier(&[one, four]).build().unwrap();
    let err = Tiered::keyed(two, &["free"]).unwrap_err();
    assert!(err.message.contains("one limit per tier"), "{err}");
}

/// `.enabled(false)`: every request passes, unchecked and unfielded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_layer_passes_every_request_unchecked() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let limits = std::sync::Arc::new(Named::keyed(limiter));
    let addr = serve(app(RateLimitLayer::new(limits.clone()).enabled(false))).await;
    for _ in 0..5 {
        let reply = request(addr, "/", None).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.field("ratelimit"), None);
    }
    assert_eq!(limits.limiter().stats().checks, 0);
    // Turned on again (the same limits): limited.
    let addr = serve(app(RateLimitLayer::new(limits).enabled(true))).await;
    assert_eq!(request(addr, "/", None).await.status, StatusCode::OK);
    assert_eq!(
        request(addr, "/", None).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The legacy X-RateLimit-* headers: the limit with the fewest units left,
/// or the refusing one; Reset is UNIX seconds, `t` from the server's now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_headers_beside_the_drafts_fields() {
    let (clock, _hand) = Clock::manual(T0);
    let limiter = KeyedLimiter::builder()
        .limit(Config::new(Algorithm::FixedWindow, 3, 10 * S).capacity(64))
        .limit(Config::new(Algorithm::FixedWindow, 5, 3600 * S).capacity(64))
        .names(&["burst", "hourly"])
        .clock(clock)
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(Multi::new(limiter, None).unwrap()).legacy_headers(true);
    let addr = serve(app(layer)).await;
    for remaining in ["2", "1", "0"] {
        let before = unix_now();
        let reply = request(addr, "/", None).await;
        let after = unix_now();
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.field("x-ratelimit-limit"), Some("3"));
        assert_eq!(reply.field("x-ratelimit-remaining"), Some(remaining));
        let reset: u64 = reply.field("x-ratelimit-reset").unwrap().parse().unwrap();
        // burst's t is 8 (T0's window has 7.5 s left).
        assert!((before + 8..=after + 8).contains(&reset), "{reset}");
        assert!(reply.field("ratelimit").is_some());
    }
    let reply = request(addr, "/", None).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.field("x-ratelimit-limit"), Some("3"));
    assert_eq!(reply.field("x-ratelimit-remaining"), Some("0"));
    assert_eq!(reply.field("retry-after"), Some("8"));
    // Off by default.
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 3, 10 * S));
    let addr = serve(app(RateLimitLayer::new(Named::keyed(limiter)))).await;
    assert_eq!(
        request(addr, "/", None).await.field("x-ratelimit-limit"),
        None
    );
}

/// A key of the client's address and the path: each route its own quota
/// per client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_the_address_and_the_path() {
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let layer = RateLimitLayer::new(Named::keyed(limiter))
        .key(Key::Parts(vec![KeyPart::ClientAddr, KeyPart::Path]));
    let addr = serve(app(layer)).await;
    for path in ["/", "/health"] {
        assert_eq!(request(addr, path, None).await.status, StatusCode::OK);
        assert_eq!(
            request(addr, path, None).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    // A header part missing: the missing-key policy (reject: 400).
    let (limiter, _hand) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let layer = RateLimitLayer::new(Named::keyed(limiter)).key(Key::Parts(vec![
        KeyPart::Header("x-api-key".parse().unwrap()),
        KeyPart::Method,
    ]));
    let addr = serve(app(layer)).await;
    assert_eq!(
        request(addr, "/", None).await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        request(addr, "/", Some(("x-api-key", "a"))).await.status,
        StatusCode::OK
    );
    assert_eq!(
        request(addr, "/", Some(("x-api-key", "a"))).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// Default limits for every route (a layer on the router, per client), an
/// application-wide limit (a global limiter, every client sharing it), a
/// route's own limit (`route_layer`) and an exempt route, composed from
/// the one layer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_application_wide_and_route_limits_compose() {
    let (clock, _hand) = Clock::manual(T0);
    let global = Limiter::builder()
        .limit(Config::new(Algorithm::FixedWindow, 4, 10 * S))
        .clock(clock)
        .build()
        .unwrap();
    let (per_client, _h1) = keyed(Config::new(Algorithm::FixedWindow, 3, 10 * S));
    let (login, _h2) = keyed(Config::new(Algorithm::FixedWindow, 1, 10 * S));
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .route(
            "/login",
            get(|| async { "in" }).route_layer(RateLimitLayer::new(
                Named::keyed(login).name("login").unwrap(),
            )),
        )
        .route("/health", get(|| async { "ok" }))
        .layer(
            RateLimitLayer::new(Named::keyed(per_client).name("client").unwrap())
                .exempt_paths(["/health"]),
        )
        .layer(
            RateLimitLayer::new(Named::global(global).name("app").unwrap())
                .exempt_paths(["/health"]),
        );
    let addr = serve(app).await;
    let reply = request(addr, "/login", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    // One item per layer, each its own field line.
    let items: Vec<_> = reply
        .headers
        .get_all("ratelimit")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        items,
        [
            r#""login";r=0;t=8"#,
            r#""client";r=2;t=8"#,
            r#""app";r=3;t=8"#
        ]
    );
    // The route's own limit refuses first.
    let reply = request(addr, "/login", None).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(reply.body.contains(r#""violated-policies":["login"]"#));
    // The outer layers admitted the refused login before the route's
    // limit refused it: it counted there.
    let reply = request(addr, "/", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply
            .headers
            .get_all("ratelimit")
            .iter()
            .collect::<Vec<_>>(),
        [r#""client";r=0;t=8"#, r#""app";r=1;t=8"#]
    );
    // The default per-client limit refuses...
    let reply = request(addr, "/", None).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(reply.body.contains(r#""violated-policies":["client"]"#));
    // ...and the application-wide one, which every client shares, is spent.
    let reply = request(addr, "/", None).await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(reply.body.contains(r#""violated-policies":["app"]"#));
    // Exempt: never counted, never refused.
    for _ in 0..5 {
        let reply = request(addr, "/health", None).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.field("ratelimit"), None);
    }
}

#[test]
fn policy_names_display_as_given() {
    let name = ratecell_tower::PolicyName::new("api \"v2\"").unwrap();
    assert_eq!(name.to_string(), "api \"v2\"");
    assert_eq!(format!("policy {name}"), "policy api \"v2\"");
}

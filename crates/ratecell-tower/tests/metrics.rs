//! RateLimitLayer::metrics behind a real axum server on 127.0.0.1: the
//! counters a Prometheus recorder renders after admitted, refused and
//! dry-run-refused requests, and store failures (run with `--features
//! metrics`).

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusBuilder;
use ratecell::{Algorithm, Config, KeyedLimiter};
use ratecell_tower::{
    AsyncRateLimits, LimitsFuture, Named, RateLimitLayer, StoreError, StoreFailurePolicy,
};
use tokio::net::{TcpListener, TcpStream};

async fn serve(layer: RateLimitLayer) -> SocketAddr {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
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

async fn status(addr: SocketAddr) -> StatusCode {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get("/")
        .header("host", "127.0.0.1")
        .body(Empty::<Bytes>::new())
        .unwrap();
    sender.send_request(req).await.unwrap().status()
}

/// A store that is never reachable.
struct Unreachable;

impl AsyncRateLimits for Unreachable {
    fn check(&self, _key: Vec<u8>, _cost: u64) -> LimitsFuture {
        Box::pin(async { Err(StoreError::Failed("connection refused".into())) })
    }
}

fn limiter(limit: u64) -> KeyedLimiter {
    KeyedLimiter::builder()
        .limit(Config::new(Algorithm::FixedWindow, limit, 3_600_000_000_000).capacity(64))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_per_policy_are_counted_and_scraped() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();

    let api =
        serve(RateLimitLayer::new(Named::keyed(limiter(2)).name("api").unwrap()).metrics()).await;
    let trial = serve(
        RateLimitLayer::new(Named::keyed(limiter(1)).name("trial").unwrap())
            .dry_run(true)
            .metrics(),
    )
    .await;
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(status(api).await.as_u16());
    }
    for _ in 0..3 {
        got.push(status(trial).await.as_u16());
    }
    let closed = serve(RateLimitLayer::new_async(Unreachable).metrics()).await;
    let open = serve(
        RateLimitLayer::new_async(Unreachable)
            .failure_policy(StoreFailurePolicy::FailOpen)
            .metrics(),
    )
    .await;
    for _ in 0..2 {
        got.push(status(closed).await.as_u16());
    }
    got.push(status(open).await.as_u16());
    assert_eq!(got, [200, 200, 429, 200, 200, 200, 503, 503, 200]);

    let text = handle.render();
    for line in [
        "ratecell_http_requests_total{policy=\"api\",outcome=\"admitted\"} 2",
        "ratecell_http_requests_total{policy=\"api\",outcome=\"refused\"} 1",
        "ratecell_http_requests_total{policy=\"trial\",outcome=\"admitted\"} 1",
        "ratecell_http_requests_total{policy=\"trial\",outcome=\"dry_run_refused\"} 2",
        "ratecell_http_store_errors_total{outcome=\"unavailable\"} 2",
        "ratecell_http_store_errors_total{outcome=\"failed_open\"} 1",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
}

//! What the layer adds to a hello-world axum handler. End to end over
//! loopback: one keep-alive hyper connection per server sends requests one
//! after another to a server with the layer and to one without, in
//! alternating short rounds (so load from other processes on a shared
//! machine hits both alike); the median of the paired rounds' ratios is
//! reported with each side's median time. A third server sends the same two
//! fields as fixed text, with no limiter: what axum, hyper and the client
//! spend on two more header lines, the floor of any layer that emits them.
//! The servers take turns in an order reversed every round, so neither goes
//! first throughout. In process: the plain and limited routers called
//! through `oneshot`, no network, the same pairing.
//! Run: `cargo bench -p ratecell-tower --bench overhead`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use ratecell::{Algorithm, Config, KeyedLimiter};
use ratecell_tower::{Named, RateLimitLayer};
use tokio::net::{TcpListener, TcpStream};

const ROUNDS: usize = 201;
const PER_ROUND: usize = 200;

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

async fn round(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    n: usize,
) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        sender.ready().await.unwrap();
        let req = Request::get("/")
            .header("host", "127.0.0.1")
            .body(Empty::new())
            .unwrap();
        let res = sender.send_request(req).await.unwrap();
        assert!(res.status().is_success());
        res.into_body().collect().await.unwrap();
    }
    start.elapsed() / n as u32
}

async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

fn median<T: PartialOrd + Copy>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn report(what: &str, without: Vec<Duration>, with: Vec<Duration>) {
    report_as(what, "layer", without, with);
}

fn report_as(what: &str, name: &str, without: Vec<Duration>, with: Vec<Duration>) {
    let ratios: Vec<f64> = without
        .iter()
        .zip(&with)
        .map(|(a, b)| b.as_secs_f64() / a.as_secs_f64())
        .collect();
    let ratio = median(ratios);
    println!(
        "{what}: {ROUNDS} paired rounds; median without {name} {:.2} us/request, with {name} {:.2} us/request; \
         median paired ratio {ratio:.3} ({:+.1} %)",
        median(without).as_nanos() as f64 / 1e3,
        median(with).as_nanos() as f64 / 1e3,
        (ratio - 1.0) * 100.0
    );
}

async fn in_process(router: &Router, n: usize) -> Duration {
    use tower::ServiceExt;
    let start = Instant::now();
    for _ in 0..n {
        let req = Request::get("/").extension(axum::extract::ConnectInfo(SocketAddr::from((
            [127, 0, 0, 1],
            5555,
        ))));
        let res = router
            .clone()
            .oneshot(req.body(axum::body::Body::empty()).unwrap())
            .await
            .unwrap();
        assert!(res.status().is_success());
    }
    start.elapsed() / n as u32
}

fn main() {
    // One thread runs the client and the servers: every request takes the
    // same path through the scheduler. With worker threads, whether a
    // server's connection task shares the client's thread or wakes the
    // other one is decided when it is spawned, and a cross-thread wake-up
    // costs more than the layer itself (ratios of 1.09 to 1.16 in runs of
    // one build).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let hello = || Router::new().route("/", get(|| async { "hello" }));
        // Never refuses in the run: the measured path is check + fields.
        let config = Config::new(Algorithm::Gcra, 1_000_000_000, 1_000_000_000).capacity(1024);
        let layer = RateLimitLayer::new(Named::keyed(
            KeyedLimiter::builder().limit(config).build().unwrap(),
        ));
        let (plain_router, limited_router) = (hello(), hello().layer(layer));
        let plain = serve(plain_router.clone()).await;
        let limited = serve(limited_router.clone()).await;
        let (mut a, mut b) = (connect(plain).await, connect(limited).await);
        // The fields exactly as the layer sends them for this limiter.
        let res = b
            .send_request(
                Request::get("/")
                    .header("host", "127.0.0.1")
                    .body(Empty::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        let field = |name: &str| res.headers()[name].clone();
        let fixed = [
            ("ratelimit-policy", field("ratelimit-policy")),
            ("ratelimit", field("ratelimit")),
        ];
        res.into_body().collect().await.unwrap();
        let fields_router = Router::new().route("/", get(move || async move { (fixed, "hello") }));
        let mut c = connect(serve(fields_router).await).await;
        round(&mut a, PER_ROUND).await;
        round(&mut b, PER_ROUND).await;
        round(&mut c, PER_ROUND).await;
        let (mut without, mut with, mut fields) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..ROUNDS {
            if i % 2 == 0 {
                without.push(round(&mut a, PER_ROUND).await);
                with.push(round(&mut b, PER_ROUND).await);
                fields.push(round(&mut c, PER_ROUND).await);
            } else {
                fields.push(round(&mut c, PER_ROUND).await);
                with.push(round(&mut b, PER_ROUND).await);
                without.push(round(&mut a, PER_ROUND).await);
            }
        }
        report("axum hello-world over loopback", without.clone(), with);
        report_as(
            "axum hello-world over loopback, the fields alone (no limiter)",
            "fields",
            without,
            fields,
        );
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            without.push(in_process(&plain_router, PER_ROUND * 5).await);
            with.push(in_process(&limited_router, PER_ROUND * 5).await);
        }
        report("axum hello-world in process (oneshot)", without, with);
    });
}

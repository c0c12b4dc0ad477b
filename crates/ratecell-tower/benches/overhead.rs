//! What the layer adds to a hello-world axum handler, end to end over
//! loopback: one keep-alive hyper connection sends requests one after
//! another to a server with the layer and to one without, in alternating
//! rounds (so drift on a shared machine hits both), and the median round of
//! each is reported. Run: `cargo bench -p ratecell-tower --bench overhead`.

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

const ROUNDS: usize = 15;
const PER_ROUND: usize = 4000;

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

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let hello = || Router::new().route("/", get(|| async { "hello" }));
        // Never refuses in the run: the measured path is check + fields.
        let config = Config::new(Algorithm::Gcra, 1_000_000_000, 1_000_000_000).capacity(1024);
        let layer = RateLimitLayer::new(Named::keyed(KeyedLimiter::new(config).unwrap()));
        let plain = serve(hello()).await;
        let limited = serve(hello().layer(layer)).await;
        let (mut a, mut b) = (connect(plain).await, connect(limited).await);
        round(&mut a, PER_ROUND).await;
        round(&mut b, PER_ROUND).await;
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            without.push(round(&mut a, PER_ROUND).await);
            with.push(round(&mut b, PER_ROUND).await);
        }
        let (w0, w1) = (median(without), median(with));
        let ratio = w1.as_nanos() as f64 / w0.as_nanos() as f64;
        println!(
            "axum hello-world, {ROUNDS} rounds x {PER_ROUND} requests, median round: \
             without layer {:.1} us/request, with layer {:.1} us/request, ratio {ratio:.3} ({:+.1} %)",
            w0.as_nanos() as f64 / 1e3,
            w1.as_nanos() as f64 / 1e3,
            (ratio - 1.0) * 100.0
        );
    });
}

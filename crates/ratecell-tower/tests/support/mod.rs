//! What the Redis store tests share: a redis-server with ratecell's module
//! on a free 127.0.0.1 port, stopped when its guard drops (on a failed
//! assertion too), and an axum app behind a layer with a client that
//! reads its fields. Each test file uses part of it.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use ratecell::{Algorithm, Config};
use ratecell_tower::RateLimitLayer;
use tokio::net::{TcpListener, TcpStream};

/// How long a request answered by its store's timeout may take: half of
/// [`get_as`]'s bound. A store that missed its timeout would wait on the
/// paused server until that bound (the connections these tests make set no
/// response timeout of their own), so this tells the two apart by what the
/// code controls, with the whole difference left to a busy machine's
/// scheduler.
pub const ANSWERED_WITHIN: Duration = Duration::from_secs(10);

/// How long [`get_as`] waits for an answer.
const NO_ANSWER: Duration = Duration::from_secs(20);

pub const HOUR_NS: u64 = 3_600_000_000_000;

pub fn module() -> PathBuf {
    let path = std::env::var_os("RATECELL_REDIS_MODULE")
        .map(PathBuf::from)
        .expect("set RATECELL_REDIS_MODULE to the built module (scripts/redis-tests.sh does)");
    assert!(path.exists(), "{} does not exist", path.display());
    path
}

pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server with the module loaded. Dropping it continues it if it
/// was paused, kills it and removes its directory.
pub struct Server {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Server {
    pub fn start() -> Server {
        Server::start_on(free_port())
    }

    pub fn start_on(port: u16) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "ratecell-tower-redis-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(&dir)
            .arg("--loadmodule")
            .arg(module())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let server = Server { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while server.ping().is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server on {port} did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn conn(&self) -> redis::RedisResult<redis::Connection> {
        let c =
            redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(5))?;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(c)
    }

    pub fn ping(&self) -> redis::RedisResult<String> {
        redis::cmd("PING").query(&mut self.conn()?)
    }

    /// `calls` of `command` (lower case) in `INFO commandstats`: what the
    /// server ran, whoever sent it.
    pub fn command_calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn().unwrap())
            .unwrap();
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    }

    pub fn exists(&self, key: &str) -> bool {
        redis::cmd("EXISTS")
            .arg(key)
            .query::<i64>(&mut self.conn().unwrap())
            .unwrap()
            == 1
    }

    fn signal(&self, signal: &str) {
        // The `kill` command rather than libc: this crate forbids unsafe code.
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("the kill command");
        assert!(status.success(), "kill {signal} {}", self.child.id());
    }

    /// Stops the server (SIGSTOP): it keeps its connections but answers
    /// nothing until `resume`.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A paused server would otherwise be killed stopped; harmless for
        // SIGKILL, but never leave one stopped if the kill failed.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn hour(algorithm: Algorithm, limit: u64) -> Config {
    Config::new(algorithm, limit, HOUR_NS)
}

/// An axum app with `layer`, keyed by the `x-key` header.
pub async fn serve(layer: RateLimitLayer) -> SocketAddr {
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer.key_header(http::HeaderName::from_static("x-key")));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
    pub took: Duration,
}

impl Answer {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// `r` of the RateLimit field's first item.
    pub fn remaining(&self) -> u64 {
        let field = self.field("ratelimit").expect("a RateLimit field");
        let r = field.split(";r=").nth(1).expect("an r parameter");
        r.split(';').next().unwrap().parse().unwrap()
    }
}

/// A request to `app` keyed `key`; fails the test when no answer comes
/// within 20 s, so that a hanging layer fails rather than hangs the test.
pub async fn get_as(app: SocketAddr, key: &str) -> Answer {
    tokio::time::timeout(NO_ANSWER, get_once(app, key))
        .await
        .unwrap_or_else(|_| panic!("no answer within {NO_ANSWER:?}: the layer hangs"))
}

pub async fn get_once(addr: SocketAddr, key: &str) -> Answer {
    let start = Instant::now();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get("/")
        .header("host", "127.0.0.1")
        .header("x-key", key)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let res = sender.send_request(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
        took: start.elapsed(),
    }
}

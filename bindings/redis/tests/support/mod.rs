//! What the server tests share: redis-server processes started on free
//! loopback ports with the module loaded, each stopped when its handle
//! drops (also on a failed assertion), and the helpers that drive them.
//! Every server test is `#[ignore]`d in a plain `cargo test`, which has
//! neither a server nor the built module; `scripts/redis-tests.sh` builds
//! the module, sets `RATECELL_REDIS_MODULE` and runs them with `--ignored`.
#![allow(dead_code)]

use ratecell::{Algorithm, Clock, Config, Decision, Limiter, Request};
use redis::{Connection, Value};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

pub const T0: u64 = 1_700_000_000_000_000_000;

pub fn module() -> PathBuf {
    let path = std::env::var_os("RATECELL_REDIS_MODULE")
        .expect("set RATECELL_REDIS_MODULE to the built module (scripts/redis-tests.sh does)");
    let path = PathBuf::from(path);
    assert!(path.exists(), "{} does not exist", path.display());
    path
}

pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A redis-server with the module loaded, in its own directory; killed on
/// drop.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: PathBuf,
    /// Stopped to be restarted: its directory (RDB, AOF) stays.
    pub keep_dir: bool,
}

impl Server {
    pub fn start(extra: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "ratecell-redis-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Server::start_in(dir, free_port(), extra)
    }

    pub fn start_in(dir: PathBuf, port: u16, extra: &[&str]) -> Server {
        let module = module();
        let mut args: Vec<String> = vec![
            "--port".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            dir.display().to_string(),
            "--save".into(),
            "".into(),
            "--loadmodule".into(),
            module.display().to_string(),
        ];
        // RATECELL_REDIS_LOG=<dir>: keep each server's log there (its
        // port in the name), for a test that fails.
        if let Some(logs) = std::env::var_os("RATECELL_REDIS_LOG") {
            let log = PathBuf::from(logs).join(format!("redis-{port}.log"));
            args.extend(["--logfile".into(), log.display().to_string()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let server = Server {
            child,
            port,
            dir,
            keep_dir: false,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = server.try_conn() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on {port} did not start"
            );
            thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn try_conn(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        client.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn conn(&self) -> Connection {
        let c = self.try_conn().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        c
    }

    pub fn stop(mut self) -> (PathBuf, u16) {
        self.keep_dir = true;
        (self.dir.clone(), self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The six-integer reply as a Decision (`-1` is `u64::MAX`).
pub fn decision(v: &[i64]) -> Decision {
    assert_eq!(v.len(), 6, "six integers: {v:?}");
    let u = |x: i64| if x == -1 { u64::MAX } else { x as u64 };
    Decision {
        allowed: v[0] == 1,
        limit: u(v[1]),
        remaining: u(v[2]),
        retry_after_ns: u(v[3]),
        reset_after_ns: u(v[4]),
        wait_ns: u(v[5]),
    }
}

pub fn check_cmd(key: &str, c: &Config, cost: u64, at: Option<u64>) -> redis::Cmd {
    let mut cmd = redis::cmd("RATECELL.CHECK");
    cmd.arg(key)
        .arg(c.algorithm.name())
        .arg(c.limit)
        .arg(format!("{}ns", c.period_ns));
    if c.burst != 0 {
        cmd.arg("BURST").arg(c.burst);
    }
    if c.algorithm == Algorithm::BucketedWindow {
        cmd.arg("SUBWINDOWS").arg(c.sub_windows);
    }
    cmd.arg("COST").arg(cost);
    if let Some(t) = at {
        cmd.arg("AT").arg(t);
    }
    cmd
}

pub fn check(con: &mut Connection, key: &str, c: &Config, cost: u64, at: Option<u64>) -> Decision {
    decision(&check_cmd(key, c, cost, at).query::<Vec<i64>>(con).unwrap())
}

pub fn error_of(con: &mut Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    match cmd.query::<Value>(con) {
        Err(e) => e.to_string(),
        Ok(v) => panic!("{args:?} answered {v:?}, not an error"),
    }
}

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Configurations that exercise every algorithm, small and odd ones too.
pub fn configs() -> Vec<Config> {
    let mut out = Vec::new();
    for alg in Algorithm::ALL {
        out.push(Config::new(alg, 5, 1_000_000_000));
        out.push(Config::new(alg, 3, 7_000_000).sub_windows(7));
        if alg.has_burst() {
            out.push(Config::new(alg, 10, 60_000_000_000).burst(4));
        }
    }
    out
}

/// A random trace: mostly forward, sometimes back; costs 0, in range and
/// above the limit.
pub fn trace(rng: &mut Rng, c: &Config, len: usize) -> Vec<(u64, u64)> {
    let mut t = T0;
    (0..len)
        .map(|_| {
            let step = rng.below(c.period_ns / 2 + 1);
            t = if rng.below(8) == 0 {
                // Back at most to a period before T0 (`t` may already be
                // below T0, so the period is added before T0 is taken away).
                t - step.min(t + c.period_ns - T0)
            } else {
                t + step
            };
            let cost = match rng.below(10) {
                0 => 0,
                1 => c.limit + 1 + rng.below(3),
                _ => 1 + rng.below(c.limit.min(4)),
            };
            (t, cost)
        })
        .collect()
}

pub fn limiter(c: &Config) -> Limiter {
    Limiter::builder()
        .limit(*c)
        .clock(Clock::manual(T0).0)
        .build()
        .unwrap()
}

/// Runs a trace through the server (pipelined, with AT) and the in-process
/// limiter and asserts identical decisions.
pub fn assert_same(con: &mut Connection, key: &str, c: &Config, trace: &[(u64, u64)], l: &Limiter) {
    let mut pipe = redis::pipe();
    for &(t, cost) in trace {
        pipe.add_command(check_cmd(key, c, cost, Some(t)));
    }
    let replies: Vec<Vec<i64>> = pipe.query(con).unwrap();
    for (i, (&(t, cost), r)) in trace.iter().zip(&replies).enumerate() {
        let want = l.check(Request::new(cost).at(t));
        assert_eq!(decision(r), want, "{c:?}, step {i}: cost {cost} at {t}");
    }
}

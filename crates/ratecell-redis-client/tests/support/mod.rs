//! What the server tests share: a redis-server of their own on a free
//! loopback port with the module loaded (stopped, and continued first if
//! paused, when its handle drops, also on a failed assertion), the
//! module's path, and the server's command counts.
#![allow(dead_code)]

pub mod cluster;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// The module: `RATECELL_REDIS_MODULE` (scripts/redis-tests.sh sets it to
/// its release build), else the debug build, made once per test process
/// with `cargo build -p ratecell-redis`.
pub fn module() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("RATECELL_REDIS_MODULE") {
            let p = PathBuf::from(p);
            assert!(
                p.exists(),
                "RATECELL_REDIS_MODULE: {} does not exist",
                p.display()
            );
            // Absolute: redis-server loads it after changing to its --dir.
            return p.canonicalize().unwrap();
        }
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "ratecell-redis"])
            .current_dir(&root)
            .status()
            .expect("running cargo build -p ratecell-redis");
        assert!(status.success(), "cargo build -p ratecell-redis failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map(|t| if t.is_absolute() { t } else { root.join(t) })
            .unwrap_or_else(|| root.join("target"));
        let p = target.join("debug/libratecell_redis.so");
        assert!(p.exists(), "{} missing after the build", p.display());
        p
    })
    .clone()
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server with the module; killed on drop.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    paused: bool,
}

impl Server {
    pub fn start() -> Server {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "ratecell-redis-client-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = Server {
            child: None,
            port,
            dir,
            paused: false,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--loadmodule")
            .arg(module())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = self.try_conn() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on {} did not start",
                self.port
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn conn(&self) -> redis::Connection {
        let c = self.try_conn().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c
    }

    fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().expect("running").id() as i32;
        // SAFETY: kill(2) on our own child's pid, which we have not yet
        // waited for (so it cannot have been reused); no memory is shared.
        let r = unsafe { libc::kill(pid, sig) };
        assert_eq!(r, 0, "kill({pid}, {sig})");
    }

    /// Freezes the server (SIGSTOP): connections open, nothing answers.
    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
        self.paused = true;
    }

    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
        self.paused = false;
    }

    /// Kills the server; `restart` starts a new one on the same port,
    /// with no state.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.paused {
                self.resume_pid(c.id());
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn resume_pid(&mut self, pid: u32) {
        // SAFETY: as in `signal`: our own unwaited child.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        self.paused = false;
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// `calls` of each command (`INFO commandstats`), by lower-case name.
    pub fn command_calls(&self) -> HashMap<String, u64> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .unwrap();
        info.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
                Some((name.to_string(), calls.parse().ok()?))
            })
            .collect()
    }

    /// Calls of `RATECELL.CHECK` and `RATECELL.LEASE` so far.
    pub fn ratecell_calls(&self) -> u64 {
        let c = self.command_calls();
        c.get("ratecell.check").copied().unwrap_or(0)
            + c.get("ratecell.lease").copied().unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The wall clock in UNIX ns: every process on the machine reads the
/// same one, so children can share one explicit timeline.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

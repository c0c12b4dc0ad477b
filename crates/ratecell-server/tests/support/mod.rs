//! The server binary as the tests run it: a configuration directory, the
//! process on free loopback ports (killed on drop), and HTTP/1.1 by hand
//! for `/json`, `/healthcheck` and `/metrics`. Every wait is a bounded
//! number of polls of a condition the server controls.

#![allow(dead_code)] // each test file uses its part

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_ratecell-server");
pub const POLLS: u32 = 400;
pub const POLL: Duration = Duration::from_millis(25);

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A temporary directory with a `config` directory in it, removed on drop.
pub struct Dir(pub PathBuf);

impl Dir {
    /// `name` apart: the tests of one process run at once.
    pub fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("ratecell-server-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("config")).unwrap();
        Dir(d)
    }

    pub fn config(&self) -> PathBuf {
        self.0.join("config")
    }

    /// Writes a configuration file aside and renames it in, as
    /// deployments swap files, so a reload never reads half a file.
    pub fn write(&self, name: &str, text: &str) {
        let tmp = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.config().join(name)).unwrap();
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The command line and environment every test starts the server with:
/// the configuration directory, loopback, the three ports.
pub fn command(config: &Path, http: u16, grpc: u16, debug: u16) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--config-dir")
        .arg(config)
        .env_clear()
        .env("HOST", "127.0.0.1")
        .env("GRPC_HOST", "127.0.0.1")
        .env("DEBUG_HOST", "127.0.0.1")
        .env("PORT", http.to_string())
        .env("GRPC_PORT", grpc.to_string())
        .env("DEBUG_PORT", debug.to_string());
    c
}

/// A running server, killed on drop.
pub struct Server {
    child: Child,
    pub http: u16,
    pub grpc: u16,
    pub debug: u16,
}

impl Server {
    /// Starts the server and waits until `/healthcheck` answers 200; a
    /// server that exits first fails the test with what it printed.
    pub fn start(config: &Path, env: &[(&str, &str)]) -> Server {
        let (http, grpc, debug) = (free_port(), free_port(), free_port());
        let child = command(config, http, grpc, debug)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut s = Server {
            child,
            http,
            grpc,
            debug,
        };
        for _ in 0..POLLS {
            if get(s.http, "/healthcheck").is_some_and(|(status, _)| status == 200) {
                return s;
            }
            if let Ok(Some(status)) = s.child.try_wait() {
                let mut err = String::new();
                let _ = s.child.stderr.take().unwrap().read_to_string(&mut err);
                panic!("the server exited ({status}): {err}");
            }
            sleep(POLL);
        }
        panic!("the server did not answer /healthcheck");
    }

    /// `POST /json`: the status and the body.
    pub fn json(&self, body: &str) -> (u16, String) {
        http(
            self.http,
            &format!(
                "POST /json HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
        .expect("an answer from /json")
    }

    /// SIGTERM; the exit status and what the process printed on stderr.
    pub fn terminate(mut self) -> (ExitStatus, String) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (status, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 exchange: the status and the body.
pub fn http(port: u16, request: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    s.write_all(request.as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Some((status, body))
}

pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    http(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
    )
}

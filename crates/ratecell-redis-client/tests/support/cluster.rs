//! A Redis Cluster of three masters (no replicas) with the module loaded,
//! each node on a free 127.0.0.1 port in a directory of its own, all
//! stopped when the handle drops (also on a failed assertion). Made as
//! the module's own cluster test makes one (bindings/redis/tests/server.rs):
//! `redis-server --cluster-enabled yes`, then `redis-cli --cluster create`,
//! then a bounded wait for `cluster_state:ok` on every node.
//!
//! Self-contained (no `unsafe`, the module's path passed in) so that
//! ratecell-server's tests include this file too (`#[path]`).
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The cluster; every node is killed and its directory removed on drop.
pub struct Cluster {
    nodes: Vec<(Child, u16, PathBuf)>,
}

impl Cluster {
    /// Three masters splitting the 16384 slots, `module` loaded in each.
    pub fn start(module: &Path) -> Cluster {
        let mut cluster = Cluster { nodes: Vec::new() };
        for _ in 0..3 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let dir = std::env::temp_dir()
                .join(format!("ratecell-cluster-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                .arg("--dir")
                .arg(&dir)
                .arg("--loadmodule")
                .arg(module)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server on PATH (apt-get install redis-server)");
            cluster.nodes.push((child, port, dir));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for port in cluster.ports() {
            while !cluster.answers(port) {
                assert!(
                    Instant::now() < deadline,
                    "redis-server on {port} did not start"
                );
                thread::sleep(Duration::from_millis(20));
            }
        }
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH (apt-get install redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Every node must know every slot's owner before a client reads
        // the slot map from any of them.
        let deadline = Instant::now() + Duration::from_secs(60);
        for port in cluster.ports() {
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut cluster.conn(port))
                    .unwrap();
                let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query(&mut cluster.conn(port))
                    .unwrap();
                if info.contains("cluster_state:ok") && slots.len() == 3 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {port}: the cluster did not become ok"
                );
                thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    fn answers(&self, port: u16) -> bool {
        redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// The masters' ports.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.1).collect()
    }

    /// `redis://127.0.0.1:<port>/` of each master.
    pub fn urls(&self) -> Vec<String> {
        self.ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    }

    /// A plain connection to one node (no redirects followed).
    pub fn conn(&self, port: u16) -> redis::Connection {
        let c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c
    }

    /// The port of the master that owns `key`'s slot, as the cluster
    /// itself says (`CLUSTER KEYSLOT`, then `CLUSTER SLOTS`).
    pub fn owner(&self, key: &[u8]) -> u16 {
        let port = self.ports()[0];
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.conn(port))
            .unwrap();
        let ranges: Vec<(i64, i64, (String, i64))> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<redis::Value>>(&mut self.conn(port))
            .unwrap()
            .into_iter()
            .map(|r| {
                let redis::Value::Array(items) = r else {
                    panic!("CLUSTER SLOTS: {r:?}")
                };
                let int = |v: &redis::Value| match v {
                    redis::Value::Int(i) => *i,
                    other => panic!("CLUSTER SLOTS: {other:?}"),
                };
                let redis::Value::Array(master) = &items[2] else {
                    panic!("CLUSTER SLOTS: {items:?}")
                };
                let host: String = redis::from_redis_value(&master[0]).unwrap();
                (int(&items[0]), int(&items[1]), (host, int(&master[1])))
            })
            .collect();
        let (_, _, (_, p)) = ranges
            .into_iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .unwrap_or_else(|| panic!("slot {slot} has no master"));
        p as u16
    }

    /// Freezes node `port` (SIGSTOP): its connections stay open and
    /// nothing answers. Drop kills it all the same (SIGKILL ends a
    /// stopped process).
    pub fn pause(&self, port: u16) {
        self.signal(port, "-STOP");
    }

    /// Continues node `port` (SIGCONT).
    pub fn resume(&self, port: u16) {
        self.signal(port, "-CONT");
    }

    fn signal(&self, port: u16, sig: &str) {
        let (child, _, _) = self.nodes.iter().find(|n| n.1 == port).unwrap();
        let ok = Command::new("kill")
            .arg(sig)
            .arg(child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} on node {port}");
    }

    /// `INFO` field `name` of node `port` (`connected_clients`, say).
    pub fn info(&self, port: u16, name: &str) -> String {
        let info: String = redis::cmd("INFO").query(&mut self.conn(port)).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("INFO has no {name}"))
            .trim()
            .to_owned()
    }

    /// How many times node `port` ran `command` (lower case), from
    /// `INFO commandstats`.
    pub fn calls(&self, port: u16, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn(port))
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
            .and_then(|rest| rest.split(',').find_map(|f| f.strip_prefix("calls=")))
            .map_or(0, |n| n.parse().unwrap())
    }

    /// The keys node `port` holds itself (`KEYS *` answers from the
    /// node's own keyspace, with no redirect).
    pub fn keys(&self, port: u16) -> Vec<Vec<u8>> {
        redis::cmd("KEYS")
            .arg("*")
            .query(&mut self.conn(port))
            .unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (child, _, dir) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

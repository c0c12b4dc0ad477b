//! `REDIS_TYPE=CLUSTER`: the binary on a three-master Redis Cluster with
//! ratecell's module, in the strict and the leased mode; exact counts for
//! keys on every master, each key on the master of its slot, and a
//! request whose descriptors fall in several slots decided as
//! docs/SERVER.md says (each slot's group all-or-nothing, the request
//! admitted only if every group admits, a group that admitted counted;
//! a master that does not answer makes the request the failure policy's).
//!
//! `#[ignore]`d in a plain `cargo test` (it needs redis-server, redis-cli
//! and the module); scripts/redis-tests.sh runs it with `--ignored` and
//! `RATECELL_REDIS_MODULE` set. Every wait is a bounded number of polls of
//! a condition the processes control; no assertion is on elapsed time.

#[path = "../../ratecell-redis-client/tests/support/cluster.rs"]
mod cluster;

mod support;

use cluster::Cluster;
use std::collections::BTreeSet;
use std::path::PathBuf;

use support::{Dir, Server};

const LIMIT: usize = 3;
const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";

fn module() -> PathBuf {
    let p = std::env::var_os("RATECELL_REDIS_MODULE")
        .expect("set RATECELL_REDIS_MODULE to the built module (scripts/redis-tests.sh does)");
    PathBuf::from(p).canonicalize().unwrap()
}

/// `/json` for one descriptor `user=<u>` per user: the status (200
/// admitted, 429 over the limit) and each descriptor's `limitRemaining`.
fn check_users(server: &Server, users: &[&str]) -> (u16, Vec<u64>) {
    let descriptors: Vec<String> = users
        .iter()
        .map(|u| format!(r#"{{"entries":[{{"key":"user","value":"{u}"}}]}}"#))
        .collect();
    let (status, text) = server.json(&format!(
        r#"{{"domain":"d","descriptors":[{}]}}"#,
        descriptors.join(",")
    ));
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let remaining = (0..users.len())
        .map(|i| v["statuses"][i]["limitRemaining"].as_u64().unwrap_or(0))
        .collect();
    (status, remaining)
}

/// A configuration directory holding the one file of these tests.
fn config_dir(name: &str) -> Dir {
    let dir = Dir::new(&format!("cluster-{name}"));
    dir.write("d.yaml", CONFIG);
    dir
}

/// The server on `cluster` (`REDIS_TYPE=CLUSTER`, every master in
/// `REDIS_URL`), with `env` besides.
fn start_on(cluster: &Cluster, dir: &Dir, env: &[(&str, &str)]) -> Server {
    let nodes: Vec<String> = cluster
        .ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let nodes = nodes.join(",");
    let mut all = vec![
        ("REDIS_TYPE", "CLUSTER"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", nodes.as_str()),
    ];
    all.extend_from_slice(env);
    Server::start(&dir.config(), &all)
}

/// The Redis key of user `u` under `prefix` (the incumbent's cache key
/// without the window).
fn key(prefix: &str, u: &str) -> Vec<u8> {
    format!("{prefix}d_user_{u}_").into_bytes()
}

/// One user whose key is on each master, in the masters' order.
fn users_on_every_master(cluster: &Cluster, prefix: &str) -> Vec<String> {
    cluster
        .ports()
        .iter()
        .map(|&port| {
            (0..1000)
                .map(|i| format!("u{i}"))
                .find(|u| cluster.owner(&key(prefix, u)) == port)
                .expect("a user on every master")
        })
        .collect()
}

/// Every master holds exactly the keys of its own slots, `expected` all
/// (the strict and leased modes name a key alike: `CACHE_KEY_PREFIX`
/// once, then the descriptor).
fn assert_on_their_masters(cluster: &Cluster, expected: &BTreeSet<Vec<u8>>) {
    let mut all = BTreeSet::new();
    for port in cluster.ports() {
        for k in cluster.keys(port) {
            assert_eq!(
                cluster.owner(&k),
                port,
                "{} is on {port}",
                String::from_utf8_lossy(&k)
            );
            all.insert(k);
        }
    }
    let text = |s: &BTreeSet<Vec<u8>>| {
        s.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(text(&all), text(expected));
}

#[test]
#[ignore = "needs redis-server, redis-cli and the module: run by scripts/redis-tests.sh"]
fn strict_and_leased_count_exactly_with_keys_on_every_master() {
    let cluster = Cluster::start(&module());
    let dir = config_dir("modes");
    let mut expected = BTreeSet::new();
    for mode in ["strict", "leased"] {
        let prefix = format!("{mode}:");
        let server = start_on(
            &cluster,
            &dir,
            &[
                ("REDIS_TIMEOUT", "5s"),
                ("RATECELL_REDIS_MODE", mode),
                ("CACHE_KEY_PREFIX", &prefix),
            ],
        );
        for u in users_on_every_master(&cluster, &prefix) {
            let admitted = (0..LIMIT + 2)
                .filter(|_| check_users(&server, &[&u]).0 == 200)
                .count();
            assert_eq!(admitted, LIMIT, "{mode}: user {u}");
            expected.insert(key(&prefix, &u));
        }
        assert_on_their_masters(&cluster, &expected);
    }
}

/// Strict mode, a request with descriptors in two slots: a `CHECKALL` per
/// slot, admitted only if both admit; when one denies, the other's
/// admission stays counted. With one hash tag in the prefix both keys
/// share a slot and the request is all-or-nothing again.
#[test]
#[ignore = "needs redis-server, redis-cli and the module: run by scripts/redis-tests.sh"]
fn strict_descriptors_in_several_slots_are_a_group_per_slot() {
    let cluster = Cluster::start(&module());
    let dir = config_dir("slots");
    for (prefix, all_or_nothing) in [("slots:", false), ("{tagged}:", true)] {
        let server = start_on(
            &cluster,
            &dir,
            &[("REDIS_TIMEOUT", "5s"), ("CACHE_KEY_PREFIX", prefix)],
        );
        let users = users_on_every_master(&cluster, "slots:");
        let (x, y) = (users[0].as_str(), users[1].as_str());
        // Two of x's three units, all of y's.
        assert_eq!(check_users(&server, &[x]), (200, vec![2]));
        for left in [2, 1, 0] {
            assert_eq!(check_users(&server, &[y]), (200, vec![left]), "{prefix}");
        }
        // Both descriptors: y denies, so the request is denied.
        let (status, _) = check_users(&server, &[x, y]);
        assert_eq!(status, 429, "{prefix}");
        // x's group admitted on its own master and was counted (no slot
        // is shared); under one hash tag the denial counted nothing.
        let x_left = if all_or_nothing { 1 } else { 0 };
        assert_eq!(check_users(&server, &[x]), (200, vec![x_left]), "{prefix}");
        let (kx, ky) = (key(prefix, x), key(prefix, y));
        assert_eq!(
            cluster.owner(&kx) == cluster.owner(&ky),
            all_or_nothing,
            "{prefix}: x and y on one master"
        );
    }
}

/// Strict mode, a master that stops answering under a request across two
/// slots: the request is the failure policy's (`deny` here: 429) within
/// `REDIS_TIMEOUT`, and the group that answered stays counted.
#[test]
#[ignore = "needs redis-server, redis-cli and the module: run by scripts/redis-tests.sh"]
fn strict_a_group_without_an_answer_is_the_failure_policys() {
    let cluster = Cluster::start(&module());
    let dir = config_dir("timeout");
    let server = start_on(
        &cluster,
        &dir,
        &[("REDIS_TIMEOUT", "1s"), ("RATECELL_FAILURE_POLICY", "deny")],
    );
    let users = users_on_every_master(&cluster, "");
    let (x, y) = (users[0].as_str(), users[1].as_str());
    assert_eq!(check_users(&server, &[x, y]), (200, vec![2, 2]));
    cluster.pause(cluster.ports()[1]);
    let (status, _) = check_users(&server, &[x, y]);
    cluster.resume(cluster.ports()[1]);
    assert_eq!(status, 429, "the deny policy's answer");
    // x's master answered and counted; y's ran its command once it
    // continued, or not at all.
    assert_eq!(check_users(&server, &[x]), (200, vec![0]));
    let (status, y_left) = check_users(&server, &[y]);
    assert_eq!(status, 200);
    assert!(y_left == vec![0] || y_left == vec![1], "{y_left:?}");
}

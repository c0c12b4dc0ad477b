//! Limits kept in a Redis Cluster (`Builder::cluster`): a three-master
//! cluster of its own with the module loaded, keys spread over every
//! master, each key's state on the master that owns its slot, and the
//! decisions exact in the strict and leased modes.
//!
//! The cluster tests are `#[ignore]`d in a plain `cargo test` (a cluster
//! takes three servers and `redis-cli --cluster create`);
//! scripts/redis-tests.sh runs them with `--ignored`, with
//! `RATECELL_REDIS_MODULE` set to its build of the module.

mod support;

use ratecell::{Algorithm, Config, Request};
use ratecell_redis_client::{Mode, RedisLimiter};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use support::cluster::Cluster;
use support::{free_port, module};

const HOUR: u64 = 3_600_000_000_000;
/// A time well inside one hour-long window (explicit times, `send_at`).
const T: u64 = 1_700_000_000 / 3600 * 3600 * 1_000_000_000 + HOUR / 2;
const KEYS: usize = 60;
const LIMIT: u64 = 5;

/// The cluster's first master is the builder's node and the other two are
/// the more nodes; a generous timeout, so that a machine busy with other
/// work does not send a check to the failure policy (no assertion is on
/// time).
fn limiter(cluster: &Cluster, mode: Mode, prefix: &str) -> RedisLimiter {
    let urls = cluster.urls();
    let more: Vec<&str> = urls[1..].iter().map(String::as_str).collect();
    RedisLimiter::builder(&urls[0], Config::new(Algorithm::FixedWindow, LIMIT, HOUR))
        .cluster(&more)
        .mode(mode)
        .prefix(prefix.as_bytes())
        .send_at(true)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[test]
#[ignore = "needs redis-server, redis-cli and the module: run by scripts/redis-tests.sh"]
fn strict_and_leased_decide_exactly_with_keys_on_every_master() {
    let cluster = Cluster::start(&module());
    let mut owners: HashMap<Vec<u8>, u16> = HashMap::new();
    for (mode, prefix) in [(Mode::Strict, "strict:"), (Mode::Leased, "leased:")] {
        let limiter = limiter(&cluster, mode, prefix);
        for i in 0..KEYS {
            let key = format!("user:{i}");
            // Eight checks of cost 1 in one window: exactly the limit is
            // admitted, in order, whichever master keeps the key.
            let admitted: Vec<bool> = (0..8)
                .map(|j| {
                    limiter
                        .check(key.as_str(), Request::new(1).at(T + j))
                        .allowed
                })
                .collect();
            assert_eq!(
                admitted,
                [true, true, true, true, true, false, false, false],
                "{mode:?} {key}"
            );
            let redis_key = format!("{prefix}{key}").into_bytes();
            owners.insert(redis_key.clone(), cluster.owner(&redis_key));
        }
        let s = limiter.stats();
        assert_eq!((s.failures, s.fallbacks), (0, 0), "{mode:?}: {s:?}");
        if mode == Mode::Strict {
            assert_eq!(s.commands, 8 * KEYS as u64, "one command per check");
        }
    }
    // The keys are spread over all three masters, and each master holds
    // exactly the keys whose slots it owns.
    let ports: HashSet<u16> = owners.values().copied().collect();
    assert_eq!(ports.len(), 3, "{} keys on {ports:?}", owners.len());
    for port in cluster.ports() {
        let held: HashSet<Vec<u8>> = cluster.keys(port).into_iter().collect();
        let owned: HashSet<Vec<u8>> = owners
            .iter()
            .filter(|(_, p)| **p == port)
            .map(|(k, _)| k.clone())
            .collect();
        assert!(!owned.is_empty(), "master {port} owns none of the keys");
        assert_eq!(held, owned, "master {port}");
    }
    // The count is the module's, on the key's master: a peek there (no
    // redirect) finds nothing left in the window.
    for (key, port) in &owners {
        let v: Vec<i64> = redis::cmd("RATECELL.CHECK")
            .arg(key.as_slice())
            .arg("fixed_window")
            .arg(LIMIT)
            .arg("1h")
            .arg("COST")
            .arg(0)
            .arg("AT")
            .arg(T + 100)
            .query(&mut cluster.conn(*port))
            .unwrap();
        assert_eq!(
            v[..3],
            [0, LIMIT as i64, 0],
            "{}",
            String::from_utf8_lossy(key)
        );
    }
}

/// A master that stops answering: the check goes to the failure policy
/// after one attempt, and its command is not sent again (redis-rs's
/// cluster connection resends a timed-out command at once; the first may
/// have counted, as it does here once the master continues).
#[test]
#[ignore = "needs redis-server, redis-cli and the module: run by scripts/redis-tests.sh"]
fn a_timed_out_command_is_sent_once_and_the_failure_policy_decides() {
    let cluster = Cluster::start(&module());
    let urls = cluster.urls();
    let limiter = RedisLimiter::builder(&urls[0], Config::new(Algorithm::FixedWindow, LIMIT, HOUR))
        .cluster(&[urls[1].as_str(), urls[2].as_str()])
        .send_at(true)
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let port = cluster.owner(b"frozen");
    // A first check, so the pool holds a connection to every master.
    assert!(limiter.check("frozen", Request::new(1).at(T)).allowed);
    cluster.pause(port);
    let d = limiter.check("frozen", Request::new(1).at(T + 1));
    cluster.resume(port);
    assert!(!d.allowed, "the deny policy's decision");
    let s = limiter.stats();
    assert_eq!((s.commands, s.failures, s.fallbacks), (2, 1, 1), "{s:?}");
    // The dropped connection's buffered command runs before the master
    // sees it closed; once only this test's connection is left, every
    // command the limiter sent has run.
    let mut polls = 0;
    while cluster.info(port, "connected_clients") != "1" {
        polls += 1;
        assert!(polls < 500, "the limiter's connection is still open");
        std::thread::sleep(Duration::from_millis(20));
    }
    let calls = cluster.calls(port, "ratecell.check");
    assert!(
        (1..=2).contains(&calls),
        "RATECELL.CHECK ran {calls} times for 2 checks"
    );
}

/// The builder's node need not answer: the more nodes are tried in turn.
#[test]
#[ignore = "needs redis-server, redis-cli and the module: run by scripts/redis-tests.sh"]
fn a_seed_node_that_does_not_answer_is_passed_over() {
    let cluster = Cluster::start(&module());
    let urls = cluster.urls();
    let down = format!("redis://127.0.0.1:{}/", free_port());
    let limiter = RedisLimiter::builder(&down, Config::new(Algorithm::Gcra, 3, HOUR))
        .cluster(&[urls[1].as_str(), urls[2].as_str()])
        .send_at(true)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let admitted = (0..5)
        .filter(|j| limiter.check("seed", Request::new(1).at(T + j)).allowed)
        .count();
    assert_eq!(admitted, 3);
    let owner = cluster.owner(b"seed");
    assert_eq!(cluster.keys(owner), [b"seed".to_vec()]);
}

/// A cluster's node is named by a URL of database 0; anything else is
/// refused when the limiter is built, naming the setting.
#[test]
fn a_cluster_node_of_another_database_or_no_url_is_refused() {
    let config = Config::new(Algorithm::FixedWindow, 5, HOUR);
    for (url, more) in [
        ("redis://127.0.0.1:7000/1", &["redis://127.0.0.1:7001/"][..]),
        ("redis://127.0.0.1:7000/", &["redis://127.0.0.1:7001/2"][..]),
        ("redis://127.0.0.1:7000/", &["not a url"][..]),
        ("unix:///tmp/redis.sock", &[][..]),
    ] {
        let e = RedisLimiter::builder(url, config)
            .cluster(more)
            .build()
            .err()
            .unwrap_or_else(|| panic!("{url} {more:?} was accepted"));
        assert_eq!(e.field, "cluster", "{url} {more:?}: {e}");
    }
}

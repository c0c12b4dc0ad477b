//! The module on real servers: decisions, persistence, replication,
//! cluster routing and errors (the harness is in `support/`).

mod support;

use ratecell::{Algorithm, Config, Limiter, Request};
use redis::{Connection, Value};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};
use support::*;

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn at_traces_decide_as_the_in_process_limiter() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for (i, c) in configs().iter().enumerate() {
        for round in 0..3 {
            let key = format!("parity:{i}:{round}");
            let t = trace(&mut rng, c, 400);
            assert_same(&mut con, &key, c, &t, &limiter(c));
            // AT states have no expiry.
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
            assert!(pttl == -1 || pttl == -2, "{key}: PTTL {pttl}");
        }
    }
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn pttl_matches_reset_after_on_the_server_clock() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    for (i, c) in configs().iter().enumerate() {
        let c = Config {
            period_ns: c.period_ns.max(1_000_000_000),
            ..*c
        };
        let c = if c.algorithm == Algorithm::BucketedWindow {
            c.sub_windows(5)
        } else {
            c
        };
        let key = format!("pttl:{i}");
        let d = check(&mut con, &key, &c, 2, None);
        assert!(d.allowed);
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        let want = d.reset_after_ns.div_ceil(1_000_000) as i64;
        // PTTL is read a little later than the decision was made (up to a
        // couple of seconds on a loaded machine); it may never be longer.
        assert!(
            pttl <= want && pttl >= want - 2_000,
            "{c:?}: PTTL {pttl} ms, reset_after {want} ms"
        );
    }
    // A state written with AT has none, until a request without AT.
    let c = Config::new(Algorithm::Gcra, 5, 10_000_000_000);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    check(&mut con, "at", &c, 1, Some(now));
    let pttl: i64 = redis::cmd("PTTL").arg("at").query(&mut con).unwrap();
    assert_eq!(pttl, -1);
    check(&mut con, "at", &c, 1, None);
    let pttl: i64 = redis::cmd("PTTL").arg("at").query(&mut con).unwrap();
    assert!(pttl > 0, "PTTL {pttl}");
    // A fresh peek or a denied first request stores nothing.
    check(&mut con, "peek", &c, 0, None);
    check(&mut con, "huge", &c, 99, None);
    let n: i64 = redis::cmd("EXISTS")
        .arg("peek")
        .arg("huge")
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 0);
}

fn used_memory(con: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("memory").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn memory_returns_to_baseline_after_a_million_keys_expire() {
    let server = Server::start(&[
        "--hz",
        "100",
        "--active-expire-effort",
        "10",
        "--enable-debug-command",
        "local",
    ]);
    let mut con = server.conn();
    let c = Config::new(Algorithm::SlidingWindow, 10, 500_000_000);
    // Warm up the allocator's size classes, then measure.
    for k in 0..1000 {
        check(&mut con, &format!("warm:{k}"), &c, 1, None);
    }
    wait_empty(&mut con);
    let baseline = used_memory(&mut con);
    const KEYS: usize = 1_000_000;
    // Hold expiry back while the keys go in, so all million are live at once.
    let _: () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(0)
        .query(&mut con)
        .unwrap();
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.add_command(check_cmd(&format!("k:{k}"), &c, 1, None))
                .ignore();
        }
        pipe.query::<()>(&mut con).unwrap();
    }
    let peak = used_memory(&mut con);
    let live: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(live, KEYS as i64);
    let _: () = redis::cmd("DEBUG")
        .arg("SET-ACTIVE-EXPIRE")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert!(
        peak > baseline + 50 * KEYS as i64,
        "a million states should show: {baseline} -> {peak}"
    );
    wait_empty(&mut con);
    let after = used_memory(&mut con);
    assert!(
        (after - baseline).abs() < 256 * 1024,
        "used_memory {baseline} before, {peak} at peak, {after} after the keys expired"
    );
}

fn wait_empty(con: &mut Connection) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let n: i64 = redis::cmd("DBSIZE").query(con).unwrap();
        if n == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{n} keys have not expired");
        thread::sleep(Duration::from_millis(100));
    }
}

/// Requests as `(t, cost)`.
type Trace = Vec<(u64, u64)>;

/// One trace per configuration, run in two halves around something that
/// moves the states (a restart, a failover); the limiters carry on in
/// process, so the second half checks that nothing was lost or changed.
struct Halves {
    cases: Vec<(String, Config, Trace)>,
    limiters: Vec<Limiter>,
}

impl Halves {
    fn new(seed: u64) -> Halves {
        let mut rng = Rng(seed);
        let cases: Vec<_> = configs()
            .into_iter()
            .enumerate()
            .map(|(i, c)| (format!("h:{i}"), c, trace(&mut rng, &c, 300)))
            .collect();
        let limiters = cases.iter().map(|(_, c, _)| limiter(c)).collect();
        Halves { cases, limiters }
    }
    fn first(&self, con: &mut Connection) {
        for ((key, c, t), l) in self.cases.iter().zip(&self.limiters) {
            assert_same(con, key, c, &t[..150], l);
        }
    }
    fn second(&self, con: &mut Connection) {
        for ((key, c, t), l) in self.cases.iter().zip(&self.limiters) {
            assert_same(con, key, c, &t[150..], l);
        }
    }
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn states_survive_save_and_restart() {
    let server = Server::start(&[]);
    let halves = Halves::new(0x1234_5678_9abc_def1);
    halves.first(&mut server.conn());
    let _: () = redis::cmd("SAVE").query(&mut server.conn()).unwrap();
    let (dir, port) = server.stop();
    let server = Server::start_in(dir, port, &[]);
    halves.second(&mut server.conn());
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn states_survive_an_aof_restart_and_a_rewrite() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    for rewrite in [false, true] {
        let server = Server::start(&aof);
        let halves = Halves::new(0x0bad_cafe_0000_0001 + rewrite as u64);
        let mut con = server.conn();
        halves.first(&mut con);
        if rewrite {
            // The rewritten AOF holds RATECELL.RESTORE per key (aof_rewrite).
            let _: Value = redis::cmd("BGREWRITEAOF").query(&mut con).unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let info: String = redis::cmd("INFO")
                    .arg("persistence")
                    .query(&mut con)
                    .unwrap();
                if info.contains("aof_rewrite_in_progress:0")
                    && info.contains("aof_rewrite_scheduled:0")
                {
                    break;
                }
                assert!(Instant::now() < deadline, "AOF rewrite did not finish");
                thread::sleep(Duration::from_millis(50));
            }
        }
        let (dir, port) = server.stop();
        let server = Server::start_in(dir, port, &aof);
        halves.second(&mut server.conn());
    }
}

/// Replication: DUMP (the RDB form of a value) equal on both sides.
fn dumps(con: &mut Connection, keys: &[String]) -> Vec<Option<Vec<u8>>> {
    keys.iter()
        .map(|k| redis::cmd("DUMP").arg(k).query(con).unwrap())
        .collect()
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn a_replica_holds_the_same_states_and_continues_them_when_promoted() {
    let master = Server::start(&[]);
    let port = master.port.to_string();
    let replica = Server::start(&["--replicaof", "127.0.0.1", &port]);
    let mut m = master.conn();
    let mut r = replica.conn();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "replica did not connect");
        thread::sleep(Duration::from_millis(50));
    }
    let halves = Halves::new(0x5eed_0000_0000_0003);
    halves.first(&mut m);
    // Expiring states too (no AT): the replica gets their PXAT.
    let c = Config::new(Algorithm::TokenBucket, 5, 3_600_000_000_000);
    check(&mut m, "live", &c, 2, None);
    // A lease's charge reaches the replica as a check's state does (§8).
    let granted: Vec<i64> = redis::cmd("RATECELL.LEASE")
        .arg("leased")
        .arg("fixed_window")
        .arg(10)
        .arg("1h")
        .arg("WANT")
        .arg(4)
        .query(&mut m)
        .unwrap();
    assert_eq!(granted[0], 4, "{granted:?}");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut m).unwrap();
    assert_eq!(acked, 1);
    let mut keys: Vec<String> = halves.cases.iter().map(|(k, _, _)| k.clone()).collect();
    keys.push("live".into());
    keys.push("leased".into());
    let on_master = dumps(&mut m, &keys);
    assert!(on_master.iter().all(Option::is_some));
    assert_eq!(dumps(&mut r, &keys), on_master);
    let ttl: i64 = redis::cmd("PTTL").arg("live").query(&mut r).unwrap();
    assert!(ttl > 0, "replica PTTL {ttl}");
    // A replica refuses the command; promoted, it continues every state.
    let e = error_of(&mut r, &["RATECELL.CHECK", "x", "gcra", "1", "1s"]);
    assert!(e.contains("read only replica"), "{e}");
    drop(m);
    drop(master);
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .unwrap();
    halves.second(&mut r);
    let d = check(&mut r, "live", &c, 4, None);
    assert!(!d.allowed && d.remaining == 3, "{d:?}");
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn many_clients_at_one_instant_admit_exactly_the_limit() {
    let server = Server::start(&[]);
    for alg in Algorithm::ALL {
        let c = Config::new(alg, 50, 1_000_000_000);
        let key = format!("race:{alg}");
        let admitted: u64 = thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    let mut con = server.conn();
                    let key = key.clone();
                    s.spawn(move || {
                        (0..20)
                            .filter(|_| check(&mut con, &key, &c, 1, Some(T0)).allowed)
                            .count() as u64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(admitted, 50, "{alg}");
    }
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn bad_arguments_are_named_errors_and_random_ones_never_crash() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let cases: &[(&[&str], &str)] = &[
        (&["RATECELL.CHECK", "k", "gcra", "1"], "wrong number"),
        (&["RATECELL.CHECK", "k", "nope", "1", "1s"], "algorithm"),
        (&["RATECELL.CHECK", "k", "gcra", "0", "1s"], "limit"),
        (
            &["RATECELL.CHECK", "k", "gcra", "4294967296", "1s"],
            "limit",
        ),
        (&["RATECELL.CHECK", "k", "gcra", "1", "1"], "period"),
        (&["RATECELL.CHECK", "k", "gcra", "1", "0s"], "period"),
        (
            &[
                "RATECELL.CHECK",
                "k",
                "gcra",
                "1",
                "1s",
                "BURST",
                "4294967296",
            ],
            "BURST",
        ),
        (
            &["RATECELL.CHECK", "k", "gcra", "1", "1s", "BURST", "x"],
            "BURST",
        ),
        (
            &[
                "RATECELL.CHECK",
                "k",
                "bucketed_window",
                "1",
                "1s",
                "SUBWINDOWS",
                "3",
            ],
            "SUBWINDOWS",
        ),
        (
            &["RATECELL.CHECK", "k", "gcra", "1", "1s", "COST", "-2"],
            "COST",
        ),
        (
            &["RATECELL.CHECK", "k", "gcra", "1", "1s", "AT", "soon"],
            "AT",
        ),
        (&["RATECELL.CHECK", "k", "gcra", "1", "1s", "COST"], "COST"),
        (
            &["RATECELL.CHECK", "k", "gcra", "1", "1s", "WHAT", "1"],
            "WHAT",
        ),
        (&["RATECELL.CHECKALL", "LIMIT", "a", "gcra", "1"], "period"),
        (&["RATECELL.CHECKALL", "a", "gcra", "1", "1s"], "LIMIT"),
        (&["CL.THROTTLE", "k", "-1", "1", "1"], "max_burst"),
        (&["CL.THROTTLE", "k", "1", "0", "1"], "count"),
        (&["CL.THROTTLE", "k", "1", "1", "0"], "period"),
        (&["CL.THROTTLE", "k", "1", "1", "1", "x"], "quantity"),
        (&["RATECELL.RESTORE", "k", "garbage"], "state"),
    ];
    for (args, name) in cases {
        let e = error_of(&mut con, args);
        assert!(e.contains(name), "{args:?}: {e}");
    }
    // WRONGTYPE, and a live state's shape may not change.
    let _: () = redis::cmd("SET")
        .arg("str")
        .arg("x")
        .query(&mut con)
        .unwrap();
    let e = error_of(&mut con, &["RATECELL.CHECK", "str", "gcra", "1", "1s"]);
    assert!(e.contains("WRONGTYPE"), "{e}");
    let base = Config::new(Algorithm::BucketedWindow, 5, 1_000_000_000).sub_windows(5);
    check(&mut con, "shape", &base, 1, Some(T0));
    for (args, name) in [
        (
            ["RATECELL.CHECK", "shape", "fixed_window", "5", "1s"],
            "algorithm",
        ),
        (
            ["RATECELL.CHECK", "shape", "bucketed_window", "5", "2s"],
            "period",
        ),
    ] {
        let e = error_of(&mut con, &args);
        assert!(
            e.contains("live") && e.contains(name) || e.contains("fixed_window"),
            "{e}"
        );
    }
    let e = error_of(
        &mut con,
        &[
            "RATECELL.CHECK",
            "shape",
            "bucketed_window",
            "5",
            "1s",
            "SUBWINDOWS",
            "10",
            "AT",
            "1700000000000000000",
        ],
    );
    assert!(e.contains("SUBWINDOWS"), "{e}");
    // Limit and burst may change: the state is decided under the new ones.
    let d = check(&mut con, "shape", &Config { limit: 1, ..base }, 1, Some(T0));
    assert!(!d.allowed && d.remaining == 0, "{d:?}");

    // Random argument vectors: errors or answers, never a crash.
    let words = [
        "RATECELL.CHECK",
        "RATECELL.CHECKALL",
        "CL.THROTTLE",
        "RATECELL.RESTORE",
        "LIMIT",
        "AT",
        "BURST",
        "SUBWINDOWS",
        "COST",
        "gcra",
        "sliding_log",
        "bucketed_window",
        "token_bucket",
        "0",
        "1",
        "-1",
        "18446744073709551615",
        "18446744073709551616",
        "4294967295",
        "1s",
        "1us",
        "366d",
        "999ns",
        "",
        "\u{0}",
        "k",
        "{t}k",
        "PXAT",
    ];
    let mut rng = Rng(0xdead_beef_1234_5678);
    for _ in 0..5000 {
        let cmd_name = words[rng.below(4) as usize];
        let mut cmd = redis::cmd(cmd_name);
        for _ in 0..rng.below(12) {
            if rng.below(10) == 0 {
                let n = rng.below(24) as usize;
                cmd.arg((0..n).map(|_| rng.next() as u8).collect::<Vec<u8>>());
            } else {
                cmd.arg(words[rng.below(words.len() as u64) as usize]);
            }
        }
        if let Err(e) = cmd.query::<Value>(&mut con) {
            if !e.is_io_error() && e.kind() != redis::ErrorKind::ParseError {
                continue;
            }
            // The client may give up on a reply; the server must not.
            con = server.conn();
        }
    }
    let pong: String = redis::cmd("PING").query(&mut server.conn()).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn check_all_is_all_or_nothing_and_counts_in_info() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let v: Value = redis::cmd("RATECELL.CHECKALL")
        .arg(&[
            "AT",
            "1700000000000000000",
            "LIMIT",
            "a",
            "gcra",
            "2",
            "1s",
            "LIMIT",
            "b",
            "fixed_window",
            "1",
            "1s",
        ])
        .query(&mut con)
        .unwrap();
    let Value::Array(v) = v else { panic!("{v:?}") };
    assert_eq!(v[0], Value::Int(1));
    // b is full: a is not charged either.
    let again = |con: &mut Connection| -> Vec<Value> {
        match redis::cmd("RATECELL.CHECKALL")
            .arg(&[
                "AT",
                "1700000000000000000",
                "LIMIT",
                "a",
                "gcra",
                "2",
                "1s",
                "LIMIT",
                "b",
                "fixed_window",
                "1",
                "1s",
            ])
            .query(con)
            .unwrap()
        {
            Value::Array(v) => v,
            v => panic!("{v:?}"),
        }
    };
    for _ in 0..3 {
        let v = again(&mut con);
        assert_eq!(v[0], Value::Int(0));
    }
    let a = check(
        &mut con,
        "a",
        &Config::new(Algorithm::Gcra, 2, 1_000_000_000),
        0,
        Some(T0),
    );
    assert_eq!(
        a.remaining, 1,
        "a was charged once, by the admitted request only"
    );
    let info: String = redis::cmd("INFO").arg("ratecell").query(&mut con).unwrap();
    // The peek at `a` counts as an admitted check.
    for field in ["checks:5", "admitted:2", "denied:3"] {
        assert!(info.contains(field), "{field} in {info}");
    }
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn cl_throttle_answers_in_redis_cells_shape() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    // max_burst 4: five at once, then one every 10 s.
    let mut replies = Vec::new();
    for _ in 0..6 {
        let r: Vec<i64> = redis::cmd("CL.THROTTLE")
            .arg(&["t", "4", "1", "10"])
            .query(&mut con)
            .unwrap();
        replies.push(r);
    }
    assert_eq!(replies[0][..4], [0, 5, 4, -1]);
    assert_eq!(replies[4][..4], [0, 5, 0, -1]);
    assert_eq!(replies[5][..3], [1, 5, 0]);
    assert!((9..=10).contains(&replies[5][3]), "{:?}", replies[5]);
    assert!((49..=50).contains(&replies[5][4]), "{:?}", replies[5]);
}

/// `encoding1.rdb` was saved by the module before its values were made
/// compact (encoding 1): seven keys `v1:<algorithm>`, each `<algorithm> 5
/// 1s` (bucketed window: 5 sub-windows) checked three times with `AT` at
/// T0, T0 + 1 ms and T0 + 2 ms, and one CL.THROTTLE key made persistent.
/// It still loads, and every state carries on as the in-process limiter
/// would.
#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn an_rdb_of_the_first_encoding_still_loads() {
    let dir = std::env::temp_dir().join(format!(
        "ratecell-redis-v1-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("dump.rdb"), include_bytes!("encoding1.rdb")).unwrap();
    let server = Server::start_in(dir, free_port(), &["--enable-debug-command", "yes"]);
    let mut con = server.conn();
    let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, 8);
    for alg in Algorithm::ALL {
        let c = Config::new(alg, 5, 1_000_000_000).sub_windows(5);
        let l = limiter(&c);
        for i in 0..3 {
            l.check(Request::new(1).at(T0 + i * 1_000_000));
        }
        for i in 3..8 {
            let t = T0 + i * 1_000_000;
            let key = format!("v1:{}", alg.name());
            assert_eq!(
                check(&mut con, &key, &c, 1, Some(t)),
                l.check(Request::new(1).at(t)),
                "{alg} at {i} ms"
            );
        }
    }
    let kind: String = redis::cmd("TYPE")
        .arg("v1:throttle")
        .query(&mut con)
        .unwrap();
    assert_eq!(kind, "ratecell1");
    // Saved again, it is saved in the current encoding, and loads again.
    let _: () = redis::cmd("DEBUG").arg("RELOAD").query(&mut con).unwrap();
    let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, 8);
}

/// Replays `redis_cell_replies.csv`, recorded from redis-cell 0.5.0: every
/// key's requests pipelined on a fresh key, as recorded, and every reply
/// equal to redis-cell's.
#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn cl_throttle_answers_as_redis_cell_did() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let recorded = include_str!("redis_cell_replies.csv");
    // Per key: its requests (max_burst, count, period, quantity), replies.
    type Group = (String, Vec<[i64; 4]>, Vec<Vec<i64>>);
    let mut groups: Vec<Group> = Vec::new();
    for line in recorded.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<i64> = line.split(',').map(|v| v.parse().unwrap()).collect();
        let key = format!("cell:{}", f[0]);
        if groups.last().is_none_or(|g| g.0 != key) {
            groups.push((key.clone(), Vec::new(), Vec::new()));
        }
        let g = groups.last_mut().unwrap();
        g.1.push([f[1], f[2], f[3], f[4]]);
        g.2.push(f[5..].to_vec());
    }
    let mut compared = 0;
    for (key, requests, want) in &groups {
        let mut pipe = redis::pipe();
        for r in requests {
            pipe.cmd("CL.THROTTLE").arg(key).arg(&r[..]);
        }
        let got: Vec<Vec<i64>> = pipe.query(&mut con).unwrap();
        for ((r, w), g) in requests.iter().zip(want).zip(&got) {
            assert_eq!(g, w, "CL.THROTTLE {key} {r:?}");
            compared += 1;
        }
    }
    assert!(compared > 9_000, "{compared}");
}

/// SPEC §8's grants on a real server: what remains, until the window's end,
/// charged to the key as checks of their cost; refused algorithms named.
#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn leases_grant_what_remains_and_charge_the_key() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let second = 1_000_000_000u64;
    let t = T0 + second / 4;
    let lease = |con: &mut Connection, key: &str, alg: &str, want: u64, at: u64| {
        redis::cmd("RATECELL.LEASE")
            .arg(key)
            .arg(alg)
            .arg(10)
            .arg("1s")
            .arg("WANT")
            .arg(want)
            .arg("AT")
            .arg(at)
            .query::<Vec<i64>>(con)
            .unwrap()
    };
    let got: Vec<Vec<i64>> = (0..4)
        .map(|_| lease(&mut con, "l", "fixed_window", 4, t))
        .collect();
    let end = (T0 + second) as i64;
    assert_eq!(got[0], [4, end, 0, 10, 6]);
    assert_eq!(got[1], [4, end, 0, 10, 2]);
    assert_eq!(got[2], [2, end, 0, 10, 0]);
    assert_eq!(got[3], [0, t as i64, (T0 + second - t) as i64, 10, 0]);
    // The key holds the charged state: a check sees it spent.
    let c = Config::new(Algorithm::FixedWindow, 10, second);
    assert!(!check(&mut con, "l", &c, 1, Some(t)).allowed);
    assert!(check(&mut con, "l", &c, 1, Some(T0 + second)).allowed);
    // GCRA: units last a tenth of the period by default.
    let g = lease(&mut con, "g", "gcra", 3, t);
    assert_eq!((g[0], g[1]), (3, (t + second / 10) as i64));
    for (alg, key) in [
        ("leaky_bucket", "q"),
        ("sliding_log", "s"),
        ("bucketed_window", "b"),
    ] {
        let e = error_of(
            &mut con,
            &["RATECELL.LEASE", key, alg, "10", "1s", "WANT", "1"],
        );
        assert!(e.contains(alg) && e.contains("leased"), "{e}");
    }
    let e = error_of(
        &mut con,
        &[
            "RATECELL.LEASE",
            "g",
            "fixed_window",
            "10",
            "1s",
            "WANT",
            "1",
        ],
    );
    assert!(e.contains("live"), "{e}");
    let e = error_of(&mut con, &["RATECELL.LEASE", "g", "gcra", "10", "1s"]);
    assert!(e.contains("wrong number") || e.contains("WANT"), "{e}");
}

/// SPEC §8's debts: a node's own admissions, sent as CHARGEs with its next
/// grant, are added to the key before the grant is decided, in the window
/// they were made in (an older window's count nothing).
#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn charges_are_added_before_the_grant() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let second = 1_000_000_000u64;
    let t = T0 + second / 2;
    let lease = |con: &mut Connection, key: &str, charges: &[(u64, u64)]| {
        let mut cmd = redis::cmd("RATECELL.LEASE");
        cmd.arg(key)
            .arg("fixed_window")
            .arg(10)
            .arg("1s")
            .arg("WANT")
            .arg(10)
            .arg("AT")
            .arg(t);
        for (at, units) in charges {
            cmd.arg("CHARGE").arg(at).arg(units);
        }
        cmd.query::<Vec<i64>>(con).unwrap()
    };
    // 7 admitted in this window by the node on its own: 3 left to grant.
    assert_eq!(lease(&mut con, "a", &[(T0 + 1, 7)])[0], 3);
    // An older window's admissions count nothing in this one.
    assert_eq!(lease(&mut con, "b", &[(T0 - second, 7), (T0 + 2, 1)])[0], 9);
    // Charged past the limit: nothing granted, and the count stays.
    assert_eq!(
        lease(&mut con, "c", &[(T0, 12)])[..3],
        [0, t as i64, (T0 + second - t) as i64]
    );
    let c = Config::new(Algorithm::FixedWindow, 10, second);
    assert!(!check(&mut con, "c", &c, 1, Some(t)).allowed);
    let e = error_of(
        &mut con,
        &[
            "RATECELL.LEASE",
            "d",
            "gcra",
            "10",
            "1s",
            "WANT",
            "1",
            "CHARGE",
            "5",
        ],
    );
    assert!(e.contains("CHARGE"), "{e}");
}

/// Sends a command to the node that owns its slot, following MOVED.
fn routed(ports: &[u16], args: &[&str]) -> redis::RedisResult<Value> {
    let mut port = ports[0];
    for _ in 0..3 {
        let mut con =
            redis::Client::open(format!("redis://127.0.0.1:{port}/"))?.get_connection()?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        match cmd.query::<Value>(&mut con) {
            Err(e) if e.code() == Some("MOVED") => {
                let to = e.redirect_node().expect("MOVED names a node").0.to_string();
                port = to.rsplit(':').next().unwrap().parse().unwrap();
            }
            r => return r,
        }
    }
    panic!("{args:?} moved too often")
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn a_three_master_cluster_routes_by_slot() {
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::start(&["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]))
        .collect();
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let mut create = Command::new("redis-cli");
    create.arg("--cluster").arg("create");
    for p in &ports {
        create.arg(format!("127.0.0.1:{p}"));
    }
    let out = create
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli on PATH");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in &nodes {
        loop {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut n.conn())
                .unwrap();
            if info.contains("cluster_state:ok") {
                break;
            }
            assert!(Instant::now() < deadline, "cluster did not become ok");
            thread::sleep(Duration::from_millis(100));
        }
    }
    for i in 0..300 {
        let key = format!("user:{i}");
        let v = routed(&ports, &["RATECELL.CHECK", &key, "gcra", "5", "1h"]).unwrap();
        assert!(
            matches!(v, Value::Array(ref a) if a[0] == Value::Int(1)),
            "{key}: {v:?}"
        );
    }
    for n in &nodes {
        let size: i64 = redis::cmd("DBSIZE").query(&mut n.conn()).unwrap();
        assert!(size > 50, "node {} holds {size} of 300 keys", n.port);
    }
    // Leases route by their key's slot too, and charge the key there.
    for i in 0..30 {
        let key = format!("user:{i}");
        let v = routed(
            &ports,
            &["RATECELL.LEASE", &key, "gcra", "5", "1h", "WANT", "2"],
        )
        .unwrap();
        assert!(
            matches!(v, Value::Array(ref a) if a[0] == Value::Int(2)),
            "{key}: {v:?}"
        );
        let v = routed(
            &ports,
            &["RATECELL.CHECK", &key, "gcra", "5", "1h", "COST", "3"],
        )
        .unwrap();
        assert!(
            matches!(v, Value::Array(ref a) if a[0] == Value::Int(0)),
            "{key}: 1 checked and 2 leased of 5, so 3 more are refused: {v:?}"
        );
    }
    // Keys in different slots: CROSSSLOT; one hash tag: one slot, admitted.
    let cross = routed(
        &ports,
        &[
            "RATECELL.CHECKALL",
            "LIMIT",
            "user:1",
            "gcra",
            "5",
            "1h",
            "LIMIT",
            "user:2",
            "gcra",
            "5",
            "1h",
        ],
    );
    let e = cross.unwrap_err();
    assert!(
        e.to_string().contains("CROSSSLOT") || e.code() == Some("CROSSSLOT"),
        "{e}"
    );
    let tagged = routed(
        &ports,
        &[
            "RATECELL.CHECKALL",
            "LIMIT",
            "{user:1}:a",
            "gcra",
            "5",
            "1h",
            "LIMIT",
            "{user:1}:b",
            "sliding_window",
            "5",
            "1h",
        ],
    )
    .unwrap();
    assert!(
        matches!(tagged, Value::Array(ref a) if a[0] == Value::Int(1)),
        "{tagged:?}"
    );
}

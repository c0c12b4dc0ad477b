//! The one-word states on real servers (SPEC.md §7): `gcra` and
//! `leaky_bucket` keys are the module value itself, of a data type per
//! algorithm, and keep what a block kept: their answers, WRONGTYPE and the
//! live-state errors, `AT` states without an expiry, `RATECELL.RESTORE`'s
//! validation, `DUMP`/`RESTORE`; a period change continues them, as a
//! limit change does, on a word and on a block an older version wrote.
//! (RDB, AOF and replicas carry them in server.rs's tests, which run every
//! algorithm; their memory is scripts/redis-memory.sh's `CHECK=1`.)

mod support;

use ratecell::{Algorithm, Config, state::Rule};
use redis::{Connection, Value};
use support::*;

const S: u64 = 1_000_000_000;

fn kind(con: &mut Connection, key: &str) -> String {
    redis::cmd("TYPE").arg(key).query(con).unwrap()
}

fn restore(con: &mut Connection, key: &str, ints: &[u64]) -> redis::RedisResult<String> {
    let bytes: Vec<u8> = ints.iter().flat_map(|v| v.to_le_bytes()).collect();
    redis::cmd("RATECELL.RESTORE")
        .arg(key)
        .arg(bytes)
        .query(con)
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn one_word_states_are_a_type_per_algorithm_and_decide_as_before() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    for (alg, name) in [
        (Algorithm::Gcra, "rcellgcra"),
        (Algorithm::LeakyBucket, "rcellleak"),
        (Algorithm::TokenBucket, "ratecell1"),
    ] {
        let c = Config::new(alg, 5, S);
        let key = format!("k:{}", alg.name());
        let l = limiter(&c);
        for i in 0..8 {
            let t = T0 + i * S / 10;
            assert_eq!(
                check(&mut con, &key, &c, 1, Some(t)),
                l.check(ratecell::Request::new(1).at(t)),
                "{alg} at {i}"
            );
        }
        assert_eq!(kind(&mut con, &key), name);
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        assert_eq!(pttl, -1, "{alg}: a state written with AT has no expiry");
    }
    // Another algorithm on a word: the live-state error, naming it; Redis's
    // own commands: WRONGTYPE.
    let e = error_of(
        &mut con,
        &["RATECELL.CHECK", "k:gcra", "leaky_bucket", "5", "1s"],
    );
    assert!(
        e.contains("live gcra state") && e.contains("leaky_bucket"),
        "{e}"
    );
    let e = error_of(&mut con, &["CL.THROTTLE", "k:leaky_bucket", "4", "5", "1"]);
    assert!(e.contains("live leaky_bucket state"), "{e}");
    let e = error_of(&mut con, &["GET", "k:gcra"]);
    assert!(e.contains("WRONGTYPE"), "{e}");
    let _: () = redis::cmd("SET").arg("s").arg("x").query(&mut con).unwrap();
    let e = error_of(
        &mut con,
        &["RATECELL.CHECK", "s", "leaky_bucket", "5", "1s"],
    );
    assert!(e.contains("WRONGTYPE"), "{e}");
    // DUMP and RESTORE: the same type and word, which decides the same.
    let payload: Vec<u8> = redis::cmd("DUMP").arg("k:gcra").query(&mut con).unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg("copy")
        .arg(0)
        .arg(&payload)
        .query(&mut con)
        .unwrap();
    assert_eq!(kind(&mut con, "copy"), "rcellgcra");
    let c = Config::new(Algorithm::Gcra, 5, S);
    let t = T0 + S;
    assert_eq!(
        check(&mut con, "copy", &c, 1, Some(t)),
        check(&mut con, "k:gcra", &c, 1, Some(t))
    );
    // CL.THROTTLE reads a gcra word and leaves redis-cell's string.
    let c = Config::new(Algorithm::Gcra, 10, 60 * S);
    let d = check(&mut con, "both", &c, 3, None);
    assert!(d.allowed);
    assert_eq!(kind(&mut con, "both"), "rcellgcra");
    let r: Vec<i64> = redis::cmd("CL.THROTTLE")
        .arg(&["both", "9", "10", "60"])
        .query(&mut con)
        .unwrap();
    assert_eq!((r[0], r[2]), (0, 6), "{r:?}");
    assert_eq!(kind(&mut con, "both"), "string");
}

/// A one-word state is one absolute time: a new period continues it, on a
/// word and on a block of encoding 2 (what earlier versions stored), as
/// the rule of the new period decides it; the windows still refuse one.
#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn a_period_change_continues_a_one_word_state() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let (short, long) = (
        Config::new(Algorithm::Gcra, 4, S),
        Config::new(Algorithm::Gcra, 4, 8 * S),
    );
    // A block of encoding 2: head = period | algorithm << 55.
    let tat = T0 + S / 2;
    let head = S | (Algorithm::Gcra as u64) << 55;
    assert_eq!(restore(&mut con, "block", &[2, head, tat]).unwrap(), "OK");
    assert_eq!(kind(&mut con, "block"), "ratecell1");
    let mut word = [0];
    Rule::new(&short).unwrap().decide(&mut word, T0, 1);
    check(&mut con, "word", &short, 1, Some(T0));
    assert_eq!(word, [T0 + S / 4]);
    for (key, mut state) in [("block", [tat]), ("word", word)] {
        for i in 0..4 {
            let t = T0 + i * S / 8;
            let want = Rule::new(&long).unwrap().decide(&mut state, t, 1);
            assert_eq!(
                check(&mut con, key, &long, 1, Some(t)),
                want,
                "{key} at {i}"
            );
        }
    }
    let fixed = Config::new(Algorithm::FixedWindow, 4, S);
    check(&mut con, "fixed", &fixed, 1, Some(T0));
    let e = error_of(
        &mut con,
        &["RATECELL.CHECK", "fixed", "fixed_window", "4", "2s"],
    );
    assert!(e.contains("live") && e.contains("period"), "{e}");
}

/// `RATECELL.RESTORE` of encoding 3, what replicas and the AOF receive for
/// a word: validated, and 0 (the fresh state, never stored) refused.
#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn restore_validates_one_word_states() {
    let server = Server::start(&[]);
    let mut con = server.conn();
    let gcra = Algorithm::Gcra as u64;
    assert_eq!(restore(&mut con, "w", &[3, gcra, T0]).unwrap(), "OK");
    assert_eq!(kind(&mut con, "w"), "rcellgcra");
    let leaky = Algorithm::LeakyBucket as u64;
    assert_eq!(restore(&mut con, "q", &[3, leaky, T0]).unwrap(), "OK");
    assert_eq!(kind(&mut con, "q"), "rcellleak");
    for (ints, why) in [
        (&[3, gcra, 0][..], "fresh"),
        (&[3, Algorithm::FixedWindow as u64, T0], "one-word"),
        (&[3, 99, T0], "one-word"),
        (&[3, gcra], "24 bytes"),
        (&[3, gcra, T0, 0], "24 bytes"),
    ] {
        let e = restore(&mut con, "bad", ints).unwrap_err().to_string();
        assert!(e.contains("state") && e.contains(why), "{ints:?}: {e}");
    }
    let n: i64 = redis::cmd("EXISTS").arg("bad").query(&mut con).unwrap();
    assert_eq!(n, 0);
    // A key of another type is not overwritten.
    let _: () = redis::cmd("SET").arg("s").arg("x").query(&mut con).unwrap();
    let e = restore(&mut con, "s", &[3, gcra, T0])
        .unwrap_err()
        .to_string();
    assert!(e.contains("WRONGTYPE"), "{e}");
    let v: Value = redis::cmd("GET").arg("s").query(&mut con).unwrap();
    assert_eq!(v, Value::BulkString(b"x".to_vec()));
}

//! What a hostile client or a hostile stored byte can do to the module on a
//! real server: nothing but get an error. Arguments of random bytes and
//! random Unicode in every position of every command (each error must be
//! printable ASCII, and the server must answer PING after each), and stored
//! states of random and mutated contents through every way a state enters
//! (`RATECELL.RESTORE`, which the AOF and replicas replay, and Redis's own
//! `RESTORE` of a `DUMP` payload, which goes through the RDB loader): each is
//! refused or, once loaded, answers every check promptly and admits no more
//! than its limit allows.

mod support;

use ratecell::{Algorithm, Config};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::*;

/// A RESP reply, as bytes: the test reads the server's own text.
#[derive(Debug, PartialEq)]
enum Resp {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

/// A plain RESP connection (no client library between the test and the
/// bytes the server sends).
struct Raw {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Raw {
    fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        // A reply that takes this long means a hang: the test fails.
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    fn call(&mut self, args: &[&[u8]]) -> Resp {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend(format!("${}\r\n", a.len()).bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&out).unwrap();
        self.read()
    }

    fn line(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        self.reader
            .read_until(b'\n', &mut line)
            .expect("a reply within the timeout");
        assert!(line.ends_with(b"\r\n"), "a truncated reply: {line:?}");
        line.truncate(line.len() - 2);
        line
    }

    fn read(&mut self) -> Resp {
        let line = self.line();
        let (kind, rest) = line.split_first().expect("a non-empty reply line");
        let number = || -> i64 { std::str::from_utf8(rest).unwrap().parse().unwrap() };
        match kind {
            b'+' => Resp::Simple(rest.to_vec()),
            b'-' => Resp::Error(rest.to_vec()),
            b':' => Resp::Int(number()),
            b'$' => {
                let n = number();
                if n < 0 {
                    return Resp::Bulk(None);
                }
                let mut buf = vec![0; n as usize + 2];
                self.reader.read_exact(&mut buf).unwrap();
                buf.truncate(n as usize);
                Resp::Bulk(Some(buf))
            }
            b'*' => {
                let n = number();
                if n < 0 {
                    return Resp::Array(None);
                }
                Resp::Array(Some((0..n).map(|_| self.read()).collect()))
            }
            other => panic!("not a RESP reply: {other} {rest:?}"),
        }
    }

    fn ping(&mut self) {
        assert_eq!(
            self.call(&[b"PING"]),
            Resp::Simple(b"PONG".to_vec()),
            "the server no longer answers"
        );
    }
}

fn printable(text: &[u8]) -> bool {
    text.iter().all(|&b| b == b' ' || b.is_ascii_graphic())
}

/// An argument a hostile client might send.
fn hostile(rng: &mut Rng) -> Vec<u8> {
    // Code points whose low byte is zero (the crash), others from every
    // plane, controls, and a few that look like numbers or units.
    const CHARS: [char; 14] = [
        'Ā',
        '\u{3000}',
        '一',
        '\u{10000}',
        'é',
        '\u{0}',
        '\r',
        '\n',
        '\u{7f}',
        '\u{ffff}',
        '\u{10ffff}',
        '１',
        's',
        '9',
    ];
    match rng.below(4) {
        0 => (0..rng.below(24)).map(|_| rng.next() as u8).collect(),
        1 => (0..1 + rng.below(8))
            .map(|_| CHARS[rng.below(CHARS.len() as u64) as usize])
            .collect::<String>()
            .into_bytes(),
        2 => {
            let c = char::from_u32(rng.below(0x11_0000) as u32).unwrap_or('\u{fffd}');
            format!("{}{c}", rng.below(100)).into_bytes()
        }
        _ => (0..200 + rng.below(200))
            .map(|_| rng.next() as u8)
            .collect(),
    }
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn hostile_arguments_get_printable_errors_and_never_crash_the_server() {
    let server = Server::start(&[]);
    let mut con = Raw::connect(server.port);
    // The cases that aborted the server.
    let named: &[&[&str]] = &[
        &["RATECELL.CHECK", "k", "一", "5", "1s"],
        &["CL.THROTTLE", "k", "一", "10", "60"],
        &["RATECELL.CHECKALL", "LIMIT", "k", "一", "5", "1s"],
        &["RATECELL.CHECK", "k", "gcra", "5", "1一"],
        &["RATECELL.CHECK", "k", "gcra", "5", "1s", "Ā", "3"],
        &["RATECELL.CHECK", "k", "gcra", "5", "1s", "COST", "é"],
        &["RATECELL.RESTORE", "k", "\u{3000}"],
    ];
    for args in named {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        match con.call(&args) {
            Resp::Error(e) => assert!(printable(&e), "{args:?}: {e:?}"),
            other => panic!("{args:?}: {other:?}"),
        }
        con.ping();
    }
    // A legitimate non-ASCII key, then a shape its live state refuses: the
    // error quotes the key, escaped.
    let key = "user:一".as_bytes();
    assert!(matches!(
        con.call(&[b"RATECELL.CHECK", key, b"gcra", b"5", b"1s"]),
        Resp::Array(_)
    ));
    match con.call(&[b"RATECELL.CHECK", key, b"fixed_window", b"5", b"1s"]) {
        Resp::Error(e) => {
            let e = String::from_utf8(e).unwrap();
            assert!(
                e.contains("user:\\xe4\\xb8\\x80") && e.contains("live"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }

    // Every command, each position replaced by hostile bytes.
    let bases: &[&[&str]] = &[
        &[
            "RATECELL.CHECK",
            "k",
            "gcra",
            "5",
            "1s",
            "BURST",
            "3",
            "COST",
            "1",
            "AT",
            "5",
        ],
        &[
            "RATECELL.CHECK",
            "b",
            "bucketed_window",
            "6",
            "1s",
            "SUBWINDOWS",
            "3",
        ],
        &["CL.THROTTLE", "t", "4", "1", "10", "1"],
        &[
            "RATECELL.CHECKALL",
            "AT",
            "7",
            "LIMIT",
            "a",
            "gcra",
            "1",
            "1s",
            "COST",
            "2",
            "LIMIT",
            "b",
            "sliding_log",
            "3",
            "1m",
        ],
        &["RATECELL.RESTORE", "r", "x", "PXAT", "1"],
        &[
            "RATECELL.LEASE",
            "l",
            "fixed_window",
            "10",
            "1s",
            "WANT",
            "4",
            "EXPIRE",
            "1s",
            "AT",
            "5",
        ],
    ];
    let mut rng = Rng(0x5eed_0fc0_ffee);
    let mut sent = 0;
    for base in bases {
        for pos in 1..=base.len() {
            for _ in 0..25 {
                let mut args: Vec<Vec<u8>> = base.iter().map(|a| a.as_bytes().to_vec()).collect();
                let word = hostile(&mut rng);
                if pos == base.len() {
                    args.push(word);
                } else {
                    args[pos] = word;
                }
                let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                if let Resp::Error(e) = con.call(&refs) {
                    assert!(printable(&e), "{refs:?}: {e:?}");
                }
                con.ping();
                sent += 1;
            }
        }
    }
    assert!(sent > 1_000, "{sent}");
    // Every command still answers.
    assert!(
        server_alive(&server),
        "the server exited during the argument fuzz"
    );
}

fn server_alive(server: &Server) -> bool {
    let mut c = Raw::connect(server.port);
    c.call(&[b"PING"]) == Resp::Simple(b"PONG".to_vec())
}

/// A random encoding-2 state for `shape`'s algorithm: a valid head, words
/// drawn from the values that break arithmetic.
fn random_state(rng: &mut Rng, c: &Config, words: usize) -> Vec<u8> {
    let mut ints = vec![2u64];
    let head = c.period_ns | (c.algorithm as u64) << 55 | rng.below(2) << 58;
    ints.push(head);
    match c.algorithm {
        Algorithm::BucketedWindow => ints.push(u64::from(c.sub_windows)),
        Algorithm::SlidingLog => ints.push(c.limit),
        _ => {}
    }
    for _ in 0..words {
        ints.push(match rng.below(8) {
            0 => 0,
            1 => u64::MAX - rng.below(4),
            2 => rng.below(16),
            3 => T0 + rng.below(10 * c.period_ns),
            4 => T0 / c.period_ns + rng.below(4),
            5 => u64::from(u32::MAX) + rng.below(3) - 1,
            6 => u64::MAX / c.period_ns + rng.below(3),
            _ => rng.next(),
        });
    }
    ints.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn state_words(c: &Config) -> usize {
    ratecell::state::Rule::new(c).unwrap().words()
}

/// `RATECELL.CHECK key ... COST cost AT t`, as raw arguments.
fn check_args(key: &str, c: &Config, cost: u64, t: u64) -> Vec<Vec<u8>> {
    let mut a: Vec<String> = vec![
        "RATECELL.CHECK".into(),
        key.into(),
        c.algorithm.name().into(),
        c.limit.to_string(),
        format!("{}ns", c.period_ns),
    ];
    if c.algorithm == Algorithm::BucketedWindow {
        a.extend(["SUBWINDOWS".into(), c.sub_windows.to_string()]);
    }
    a.extend(["COST".into(), cost.to_string(), "AT".into(), t.to_string()]);
    a.into_iter().map(String::into_bytes).collect()
}

fn admitted(reply: Resp) -> bool {
    match reply {
        Resp::Array(Some(v)) => v[0] == Resp::Int(1),
        other => panic!("a check answered {other:?}"),
    }
}

/// Whether `key` holds a state of `c`'s shape (a mutated payload may hold
/// a valid state of another: a check then answers the live-state error).
fn same_shape(con: &mut Raw, key: &str, c: &Config) -> bool {
    let args = check_args(key, c, 0, T0);
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    match con.call(&refs) {
        Resp::Array(_) => true,
        Resp::Error(e) if e.windows(4).any(|w| w == b"live") => false,
        other => panic!("a peek answered {other:?}"),
    }
}

/// Checks a loaded key over a trace: every check answers (within the read
/// timeout), and the key admits no more than any state of its limit may
/// over the trace's span `D`: a burst (at most the limit, for these
/// configurations) plus the limit once per period begun, plus one period's
/// limit for a window that straddles the start (`limit · (⌈D/P⌉ + 2)`).
fn admits_within_the_limit(con: &mut Raw, rng: &mut Rng, key: &str, c: &Config) {
    let mut admitted_cost = 0;
    let start = T0 + rng.below(c.period_ns);
    let mut t = start;
    for _ in 0..3 * c.limit + 6 {
        let cost = rng.below(3);
        let args = check_args(key, c, cost, t);
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        if admitted(con.call(&refs)) {
            admitted_cost += cost;
        }
        t += rng.below(c.period_ns / c.limit + 1);
    }
    let periods = (t - start).div_ceil(c.period_ns);
    let bound = c.limit * (periods + 2);
    assert!(
        admitted_cost <= bound,
        "{c:?}: a loaded state admitted {admitted_cost} over {periods} periods, more than {bound}"
    );
}

fn configs() -> Vec<Config> {
    Algorithm::ALL
        .into_iter()
        .flat_map(|alg| {
            [
                Config::new(alg, 4, 1_000_000_000).sub_windows(4),
                Config::new(alg, 3, 7_000).sub_windows(7),
            ]
        })
        .collect()
}

#[test]
#[ignore = "needs redis-server and the module: scripts/redis-tests.sh"]
fn stored_states_are_refused_or_read_within_the_limit() {
    let server = Server::start(&[]);
    let mut con = Raw::connect(server.port);
    // The state that made a check loop 2^64 times.
    let c = Config::new(Algorithm::BucketedWindow, 6, 1_000_000_000).sub_windows(3);
    let mut ints = vec![2u64, c.period_ns | 6 << 55, 3, u64::MAX];
    ints.extend([0; 2]);
    let bytes: Vec<u8> = ints.iter().flat_map(|v| v.to_le_bytes()).collect();
    if let Resp::Simple(_) = con.call(&[b"RATECELL.RESTORE", b"hang", &bytes]) {
        let args = check_args("hang", &c, 0, T0);
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        con.call(&refs);
    }
    con.ping();

    let mut rng = Rng(0xbad5_7a7e);
    let (mut refused, mut accepted) = (0, 0);
    for (i, c) in configs().iter().enumerate() {
        for round in 0..150 {
            let key = format!("s{i}:{round}");
            let state = random_state(&mut rng, c, state_words(c));
            match con.call(&[b"RATECELL.RESTORE", key.as_bytes(), &state]) {
                Resp::Error(e) => {
                    assert!(printable(&e) && e.starts_with(b"ERR state"), "{e:?}");
                    refused += 1;
                }
                Resp::Simple(_) => {
                    accepted += 1;
                    admits_within_the_limit(&mut con, &mut rng, &key, c);
                }
                other => panic!("{other:?}"),
            }
        }
        con.ping();
    }
    assert!(
        refused > 0 && accepted > 0,
        "{refused} refused, {accepted} accepted"
    );

    // Redis's RESTORE of a DUMP payload loads through the RDB callback:
    // mutate a real payload's bytes, keep its checksum right.
    let mut dumps = Vec::new();
    for (i, c) in configs().iter().enumerate() {
        let key = format!("d{i}");
        let args = check_args(&key, c, 1, T0);
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        assert!(admitted(con.call(&refs)));
        match con.call(&[b"DUMP", key.as_bytes()]) {
            Resp::Bulk(Some(p)) => dumps.push((key, *c, p)),
            other => panic!("{other:?}"),
        }
    }
    let (mut loaded, mut errors) = (0, 0);
    for (key, c, payload) in &dumps {
        for round in 0..150 {
            let mut p = payload.clone();
            let body = p.len() - 10;
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(body as u64) as usize;
                p[at] = match rng.below(3) {
                    0 => 0xff,
                    1 => 0,
                    _ => rng.next() as u8,
                };
            }
            let crc = crc64(&p[..p.len() - 8]);
            let n = p.len();
            p[n - 8..].copy_from_slice(&crc.to_le_bytes());
            let target = format!("{key}:m{round}");
            match con.call(&[b"RESTORE", target.as_bytes(), b"0", &p]) {
                Resp::Simple(_) => {
                    if let Resp::Simple(t) = con.call(&[b"TYPE", target.as_bytes()]) {
                        let ours = [&b"ratecell1"[..], b"rcellgcra", b"rcellleak"];
                        if ours.contains(&t.as_slice()) && same_shape(&mut con, &target, c) {
                            loaded += 1;
                            admits_within_the_limit(&mut con, &mut rng, &target, c);
                        }
                    }
                }
                Resp::Error(_) => errors += 1,
                other => panic!("{other:?}"),
            }
            con.ping();
        }
    }
    assert!(
        errors > 0,
        "no mutated payload was refused ({loaded} loaded)"
    );
    assert!(server_alive(&server));
}

/// Redis's CRC-64 (Jones polynomial, reflected), which seals DUMP payloads.
fn crc64(bytes: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &b in bytes {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

#[test]
fn crc64_is_redis_s() {
    assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
}

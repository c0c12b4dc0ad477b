//! Parity across languages: `tests/parity/trace.csv` is replayed here and by
//! the C, Go and Python bindings; each must print exactly
//! `tests/parity/expected.csv`.
//!
//! The trace (comma-separated, `#` starts a comment line):
//! - `limiter,<name>,<algorithm>,<limit>,<period_ns>,<burst>,<sub_windows>,<capacity>,<overflow>`
//!   makes a limiter (capacity 0: one shared state, keys ignored);
//! - `check,<limiter>,<u64 key>,<cost>,<now_ns>`;
//! - `check_bytes,<limiter>,<key as hex, possibly empty>,<cost>,<now_ns>`;
//! - `reset_key,<limiter>,<u64 key>`.
//!
//! The expected output has one line per check, in trace order:
//! `<trace line number>,<allowed 0|1>,<limit>,<remaining>,<retry_after_ns>,<reset_after_ns>,<wait_ns>`.
//!
//! `UPDATE_GOLDEN=1 cargo test --test parity` rewrites the expected file
//! from this implementation (review the diff: it is the contract).

use ratecell::{Algorithm, AnyLimiter, Clock, Config, Decision, Overflow, Request};
use std::collections::HashMap;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex key"))
        .collect()
}

fn line(number: usize, d: Decision) -> String {
    format!(
        "{number},{},{},{},{},{},{}",
        u8::from(d.allowed),
        d.limit,
        d.remaining,
        d.retry_after_ns,
        d.reset_after_ns,
        d.wait_ns
    )
}

fn replay(trace: &str) -> String {
    let mut limiters = HashMap::new();
    let mut out = String::new();
    for (i, text) in trace.lines().enumerate() {
        let number = i + 1;
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = text.split(',').collect();
        let num = |j: usize| -> u64 { f[j].parse().expect("number") };
        match f[0] {
            "limiter" => {
                let algorithm = Algorithm::from_name(f[2]).expect("algorithm");
                let config = Config::new(algorithm, num(3), num(4))
                    .burst(num(5))
                    .sub_windows(num(6) as u32)
                    .capacity(num(7))
                    .overflow(if f[8] == "allow" {
                        Overflow::Allow
                    } else {
                        Overflow::Deny
                    });
                // Capacity 0: one shared state, keys ignored.
                let limiter = AnyLimiter::builder()
                    .limit(config)
                    .clock(Clock::manual(0).0)
                    .build()
                    .unwrap();
                limiters.insert(f[1].to_string(), limiter);
            }
            "check" => {
                let d = limiters[f[1]].check(num(2), Request::new(num(3)).at(num(4)));
                out += &line(number, d);
                out.push('\n');
            }
            "check_bytes" => {
                let key = hex(f[2]);
                let d = limiters[f[1]].check(&key, Request::new(num(3)).at(num(4)));
                out += &line(number, d);
                out.push('\n');
            }
            "reset_key" => {
                limiters[f[1]].reset(num(2));
            }
            other => panic!("trace line {number}: unknown record {other:?}"),
        }
    }
    out
}

#[test]
fn rust_replays_the_parity_trace_exactly() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/parity");
    let trace = std::fs::read_to_string(format!("{dir}/trace.csv")).unwrap();
    let got = replay(&trace);
    let path = format!("{dir}/expected.csv");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let expected = std::fs::read_to_string(&path).expect("expected.csv (UPDATE_GOLDEN=1 makes it)");
    for (n, (g, e)) in got.lines().zip(expected.lines()).enumerate() {
        assert_eq!(g, e, "decision {} differs", n + 1);
    }
    assert_eq!(got.lines().count(), expected.lines().count());
    assert!(
        got.lines().count() > 800,
        "the trace exercises every limiter"
    );
}

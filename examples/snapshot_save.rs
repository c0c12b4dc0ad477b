//! How long saving a 1M-key table takes, and what it does to the latency
//! of checks on another thread meanwhile (docs/SNAPSHOT.md, "Speed").
//!
//! `cargo run --release --example snapshot_save [keys] [dir] [multi]`
//!
//! With `multi`, each key has two limits (GCRA 100 per hour and a fixed
//! window of 1000 per day, one 92-bit composite state per slot).
//!
//! Prints, for the same run: the time of a save to a file (atomic: temp
//! file, fsync, rename, directory fsync), of a snapshot to `io::sink()`
//! (the format alone), and of writing and fsyncing the same number of
//! bytes (the disk's floor); then the latency percentiles of checks on a
//! second thread while nothing is saved and while saves run back to back.

use ratecell::{Algorithm, Config, KeyedLimiter, Request, States};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

const IDLE: u8 = 0;
const SAVING: u8 = 1;
const DONE: u8 = 2;

fn percentiles(name: &str, mut ns: Vec<u32>) {
    if ns.is_empty() {
        println!("{name}: no checks");
        return;
    }
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize];
    println!(
        "{name:<22} checks {:>9}  p50 {:>6} ns  p99 {:>6} ns  p99.9 {:>7} ns  p99.99 {:>8} ns  max {:>9} ns",
        ns.len(),
        at(0.5),
        at(0.99),
        at(0.999),
        at(0.9999),
        ns[ns.len() - 1]
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let keys: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("keys"));
    let dir = args.next().map_or_else(std::env::temp_dir, Into::into);
    let path = dir.join(format!("ratecell-bench-{}.snap", std::process::id()));

    // An hour-long period: every key stays live, so every key is saved.
    let config = Config::new(Algorithm::Gcra, 100, 3_600_000_000_000).capacity(keys);
    let mut configs = vec![config];
    if args.next().as_deref() == Some("multi") {
        configs.push(Config::new(Algorithm::FixedWindow, 1000, 86_400_000_000_000).capacity(keys));
    }
    println!("{} limit(s) per key", configs.len());
    let limiter = Arc::new(KeyedLimiter::builder().limits(&configs).build().unwrap());
    let t = limiter.now_ns();
    for key in 0..keys {
        limiter.check(key, Request::new(1).at(t));
    }
    println!("{} keys tracked", limiter.stats().keys_tracked);

    let phase = Arc::new(AtomicU8::new(IDLE));
    let checker = {
        let (limiter, phase) = (limiter.clone(), phase.clone());
        std::thread::spawn(move || {
            let (mut idle, mut saving) = (Vec::with_capacity(1 << 24), Vec::with_capacity(1 << 24));
            let mut key = 0x9e37_79b9u64;
            loop {
                let now = phase.load(Ordering::Relaxed);
                if now == DONE {
                    return (idle, saving);
                }
                key = key
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let start = Instant::now();
                std::hint::black_box(limiter.check((key >> 20) % keys, 1));
                let ns = start.elapsed().as_nanos().min(u32::MAX as u128) as u32;
                let into = if now == SAVING {
                    &mut saving
                } else {
                    &mut idle
                };
                if into.len() < into.capacity() {
                    into.push(ns);
                }
            }
        })
    };

    std::thread::sleep(Duration::from_secs(1));
    phase.store(SAVING, Ordering::Relaxed);
    let mut saves = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        limiter.save(&path).unwrap();
        saves.push(start.elapsed());
    }
    let mut sinks = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        limiter.snapshot(std::io::sink()).unwrap();
        sinks.push(start.elapsed());
    }
    phase.store(IDLE, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(1));
    phase.store(DONE, Ordering::Relaxed);
    let (idle, saving) = checker.join().unwrap();

    let bytes = std::fs::metadata(&path).unwrap().len();
    let floor = {
        let buf = vec![0x5au8; bytes as usize];
        let raw = dir.join(format!("ratecell-bench-{}.raw", std::process::id()));
        let start = Instant::now();
        let mut f = std::fs::File::create(&raw).unwrap();
        f.write_all(&buf).unwrap();
        f.sync_all().unwrap();
        let took = start.elapsed();
        std::fs::remove_file(&raw).unwrap();
        took
    };
    let load_start = Instant::now();
    let back = KeyedLimiter::builder()
        .limits(&configs)
        .states(States::snapshot(&path))
        .build()
        .unwrap();
    let load = load_start.elapsed();
    std::fs::remove_file(&path).unwrap();

    println!(
        "snapshot file: {bytes} bytes ({:.1} per key)",
        bytes as f64 / keys as f64
    );
    println!("save to file (atomic, fsync): {saves:?}");
    println!("snapshot to io::sink():       {sinks:?}");
    println!("floor: write+fsync {bytes} bytes: {floor:?}");
    println!(
        "restore from file: {load:?} ({} keys)",
        back.stats().keys_tracked
    );
    percentiles("checks, no save", idle);
    percentiles("checks during saves", saving);
}

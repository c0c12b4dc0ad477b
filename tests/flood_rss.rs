//! SPEC §5, measured: a flood of new keys does not grow the process. The
//! table's memory is resident from construction, so 10× its capacity in new
//! keys must leave the resident set where it was. One test in its own
//! binary, so no other test allocates while it reads `VmRSS`.

use ratecell::{Algorithm, Clock, Config, KeyedLimiter, Request};

/// The process's resident set, from /proc (Linux).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Marked ignored where there is no /proc (the test list shows it); where
/// /proc should be but cannot be read, it says SKIPPED on stdout and
/// stderr, with the reason, rather than pass quietly.
#[test]
#[cfg_attr(
    not(target_os = "linux"),
    ignore = "reads VmRSS from /proc/self/status (Linux only)"
)]
fn a_flood_of_new_keys_leaves_resident_memory_unchanged() {
    let Some(start) = resident_bytes() else {
        let why = "SKIPPED a_flood_of_new_keys_leaves_resident_memory_unchanged: \
                   /proc/self/status has no VmRSS here, so resident memory cannot be measured";
        println!("{why}");
        eprintln!("{why}");
        return;
    };
    let t = 1_700_000_000_000_000_000;
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        let capacity = 20_000;
        let config = Config::new(algorithm, 5, 60_000_000_000).capacity(capacity);
        let lim = KeyedLimiter::builder()
            .limit(config)
            .clock(Clock::manual(t).0)
            .build()
            .unwrap();
        let table = lim.stats().bytes_allocated;
        // One check before the first reading: its stack (which reaches some
        // hundreds of KiB in a debug build, where every algorithm's copy of
        // the inlined check keeps its own slots), code pages and statistics
        // stripe are made resident once for any number of keys, so they are
        // not what the flood must leave unchanged.
        lim.check(u64::MAX, Request::new(1).at(t));
        let before = resident_bytes().unwrap();
        assert!(
            before >= start + table * 9 / 10,
            "{algorithm}: the table ({table} B) is resident from construction \
             (resident {start} -> {before})"
        );
        for key in 0..10 * capacity {
            lim.check(key, Request::new(1).at(t));
        }
        let after = resident_bytes().unwrap();
        let stats = lim.stats();
        assert!(
            stats.overflows > 0,
            "{algorithm}: the flood overflowed the table"
        );
        // Allow the allocator and the test harness a little slack, far below
        // the 3.2 MB that storing the flood's 200k keys at 16 bytes each
        // would take.
        assert!(
            after <= before + 256 * 1024,
            "{algorithm}: resident memory grew by {} B under a flood of {} new keys",
            after.saturating_sub(before),
            10 * capacity
        );
        drop(lim);
    }
}

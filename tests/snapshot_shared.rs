//! Snapshots of shared limiters (docs/SHARED.md, "Snapshot and restore"):
//! a shared region saves like any keyed limiter, and a snapshot restores
//! into a new region that every handle then shares, never into one in use;
//! several processes (threads here, each with its own handle) restoring at
//! once end up on one region.
// Snapshots are left out of loom builds.
#![cfg(not(ratecell_loom))]
#![cfg(target_os = "linux")]

use ratecell::{Algorithm, Config, KeyedLimiter, Request, SharedOptions, SnapshotError, States};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const SECOND: u64 = 1_000_000_000;

/// A fresh path under /dev/shm and a snapshot path beside the tests' temp
/// directory; both removed when dropped, with any stray temporary files.
struct Paths {
    region: PathBuf,
    snapshot: PathBuf,
}

impl Paths {
    fn new(tag: &str) -> Paths {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}-{tag}-{n}", std::process::id());
        Paths {
            region: PathBuf::from(format!("/dev/shm/ratecell-snaptest-{id}")),
            snapshot: std::env::temp_dir().join(format!("ratecell-snaptest-{id}.snap")),
        }
    }

    /// Files in /dev/shm whose names start with the region's.
    fn leftovers(&self) -> Vec<String> {
        let name = self
            .region
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|f| f.starts_with(&name) && *f != name)
            .collect()
    }
}

impl Drop for Paths {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.region);
        let _ = std::fs::remove_file(&self.snapshot);
        for f in self.leftovers() {
            let _ = std::fs::remove_file(Path::new("/dev/shm").join(f));
        }
    }
}

fn config() -> Config {
    Config::new(Algorithm::Gcra, 3, 3600 * SECOND).capacity(1000)
}

fn opts() -> SharedOptions {
    SharedOptions::default()
}

/// `config`'s limiter in `p`'s region, a new region filled from `p`'s
/// snapshot when it exists (`States::Shared` with a seed).
fn seeded(p: &Paths, config: Config) -> Result<KeyedLimiter, SnapshotError> {
    KeyedLimiter::builder()
        .limit(config)
        .states(States::Shared {
            region: p.region.clone(),
            options: opts(),
            seed: Some(p.snapshot.clone()),
        })
        .build()
}

#[test]
fn a_shared_region_saves_and_restores_into_a_new_region_every_handle_shares() {
    let p = Paths::new("roundtrip");
    let (a, b) = (
        KeyedLimiter::builder()
            .limit(config())
            .states(States::shared(&p.region))
            .build()
            .unwrap(),
        KeyedLimiter::builder()
            .limit(config())
            .states(States::shared(&p.region))
            .build()
            .unwrap(),
    );
    let now = a.now_ns();
    for key in 0..50u64 {
        // Three admissions per key across the two handles: every key spent.
        assert!(a.check(key, Request::new(2).at(now)).allowed);
        assert!(b.check(key, Request::new(1).at(now)).allowed);
        assert!(!a.check(key, Request::new(1).at(now)).allowed);
    }
    a.save_at(&p.snapshot, now).unwrap();
    drop((a, b));
    // The region is gone (a reboot, or a configuration change), the
    // snapshot is not.
    std::fs::remove_file(&p.region).unwrap();
    let back = seeded(&p, config()).unwrap();
    assert!(
        p.leftovers().is_empty(),
        "no temporary region left: {:?}",
        p.leftovers()
    );
    assert_eq!(back.stats().keys_tracked, 50);
    let other = KeyedLimiter::builder()
        .limit(config())
        .states(States::shared(&p.region))
        .build()
        .unwrap();
    for key in 0..50u64 {
        assert!(
            !back.check(key, Request::new(1).at(now)).allowed,
            "key {key} stays spent"
        );
        assert!(
            !other.check(key, Request::new(1).at(now)).allowed,
            "for every handle"
        );
    }
    assert!(
        other.check(999_999, Request::new(1).at(now)).allowed,
        "an unknown key is fresh"
    );
    // A region in use is attached as it is, never overwritten by a snapshot.
    let fresh = KeyedLimiter::builder()
        .limit(config())
        .clock(ratecell::Clock::manual(now).0)
        .build()
        .unwrap();
    fresh.save_at(&p.snapshot, now).unwrap();
    let again = seeded(&p, config()).unwrap();
    assert!(
        !again.check(3, Request::new(1).at(now)).allowed,
        "the region kept its states"
    );
    // A shared limiter's snapshot restored as an in-process limiter.
    again.save(&p.snapshot).unwrap();
    let local = KeyedLimiter::builder()
        .limit(config())
        .clock(ratecell::Clock::manual(now).0)
        .states(States::snapshot(&p.snapshot))
        .build()
        .unwrap();
    assert!(!local.check(3, Request::new(1).at(now)).allowed);
    assert!(local.check(999_998, Request::new(1).at(now)).allowed);
}

#[test]
fn a_snapshot_of_another_configuration_makes_no_region() {
    let p = Paths::new("mismatch");
    let keyed = KeyedLimiter::builder().limit(config()).build().unwrap();
    keyed.check(1, 1);
    keyed.save(&p.snapshot).unwrap();
    let other = Config::new(Algorithm::Gcra, 4, 3600 * SECOND).capacity(1000);
    let err = seeded(&p, other).unwrap_err();
    assert!(matches!(err, SnapshotError::ConfigMismatch { .. }), "{err}");
    assert!(!p.region.exists());
    // A damaged snapshot: refused, and nothing left behind either.
    let mut bytes = std::fs::read(&p.snapshot).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&p.snapshot, &bytes).unwrap();
    let err = seeded(&p, config()).unwrap_err();
    assert!(matches!(err, SnapshotError::Damaged(_)), "{err}");
    assert!(!p.region.exists());
    assert!(p.leftovers().is_empty(), "{:?}", p.leftovers());
    // A missing snapshot: a fresh region.
    std::fs::remove_file(&p.snapshot).unwrap();
    let l = seeded(&p, config()).unwrap();
    assert!(l.check(1, 1).allowed);
    assert_eq!(l.stats().keys_tracked, 1, "only the key just checked");
}

#[test]
fn processes_restoring_at_once_end_up_on_one_region() {
    let p = Paths::new("race");
    let keyed = KeyedLimiter::builder().limit(config()).build().unwrap();
    let now = keyed.now_ns();
    for key in 0..20u64 {
        keyed.check(key, Request::new(3).at(now));
    }
    keyed.save_at(&p.snapshot, now).unwrap();
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                let l = seeded(&p, config()).unwrap();
                // Whoever won, every handle sees the restored states.
                assert!(!l.check(7, Request::new(1).at(now)).allowed);
                assert_eq!(l.stats().keys_tracked, 20, "one region, filled once");
            });
        }
    });
    assert!(p.leftovers().is_empty(), "{:?}", p.leftovers());
}

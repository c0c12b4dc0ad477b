//! Shared regions (issue 24): separately started processes (this test
//! binary re-executed as a worker), processes SIGKILLed mid-run, eight
//! processes creating one region at once, files that are not regions, and
//! latches left by dead holders.
//!
//! A worker is this binary run with `RATECELL_SHARED_WORKER` set and the
//! test `worker` selected; it reads its orders from the environment.

use ratecell::{
    Algorithm, Config, Error, KeyedLimiter, Request, SharedErrorKind, SnapshotError, States,
};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const T0: u64 = 1_700_000_000_000_000_000;
const HOUR: u64 = 3_600_000_000_000;

/// The algorithms shared mode allows.
const SHAREABLE: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::LeakyBucket,
    Algorithm::TokenBucket,
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
];

/// A fresh path under /dev/shm, removed when dropped.
struct Region(PathBuf);

impl Region {
    fn new(tag: &str) -> Region {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = PathBuf::from(format!(
            "/dev/shm/ratecell-test-{}-{tag}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        Region(path)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn config(algorithm: Algorithm, limit: u64) -> Config {
    Config::new(algorithm, limit, HOUR).capacity(1000)
}

fn kind(result: Result<KeyedLimiter, SnapshotError>) -> SharedErrorKind {
    match result {
        Err(SnapshotError::Limiter(Error::Shared(e))) => {
            assert!(!e.message.is_empty());
            e.kind
        }
        other => panic!("expected a shared-region error, got {other:?}"),
    }
}

/// Starts this binary as a worker with `orders` in its environment.
fn spawn_worker(orders: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "worker", "--nocapture", "--test-threads=1"])
        .env("RATECELL_SHARED_WORKER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in orders {
        command.env(k, v);
    }
    command.spawn().unwrap()
}

/// The next line the worker marked with `@` (the test harness writes its
/// own lines to the same stdout).
fn marked(reader: &mut impl BufRead) -> String {
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the worker ended early"
        );
        // The harness's "test worker ... " may share the line.
        if let Some(at) = line.find('@') {
            return line[at + 1..].trim().to_string();
        }
    }
}

fn order(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker without {name}"))
}

/// Waits for a child with a bound; kills it and fails if it hangs.
fn wait_bounded(child: &mut Child, bound: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            panic!("a worker hung for {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The worker's body. Modes:
/// - `burst`: opens the region, says "ready", waits for a line on stdin,
///   then `THREADS` threads check `KEYS` keys at the instant `T` until
///   each key is denied; prints the number admitted.
/// - `churn`: opens the region and checks ever-new keys (each an insert
///   under a shard latch) plus the hot key 0, printing "+" per admission of
///   key 0, until killed or `ROUNDS` rounds pass.
/// - `open`: opens the region with `LIMIT` and prints the outcome.
#[test]
fn worker() {
    if std::env::var("RATECELL_SHARED_WORKER").is_err() {
        return;
    }
    let path = order("REGION");
    let algorithm = Algorithm::from_name(&order("ALGORITHM")).unwrap();
    let limit: u64 = order("LIMIT").parse().unwrap();
    let mode = order("MODE");
    let opened = KeyedLimiter::builder()
        .limit(config(algorithm, limit))
        .states(States::shared(&path))
        .build();
    let mut out = std::io::stdout();
    if mode == "open" {
        match opened {
            Ok(_) => writeln!(out, "@ok {limit}").unwrap(),
            Err(SnapshotError::Limiter(Error::Shared(e))) => {
                writeln!(out, "@err {:?}", e.kind).unwrap()
            }
            Err(e) => writeln!(out, "@other {e}").unwrap(),
        }
        return;
    }
    let limiter = opened.unwrap();
    match mode.as_str() {
        "burst" => {
            let t: u64 = order("T").parse().unwrap();
            let keys: u64 = order("KEYS").parse().unwrap();
            let threads: usize = order("THREADS").parse().unwrap();
            writeln!(out, "@ready").unwrap();
            out.flush().unwrap();
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).unwrap();
            let admitted: u64 = std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|_| {
                        s.spawn(|| {
                            let mut admitted = 0;
                            for key in 0..keys {
                                // A few more tries than the limit, so every
                                // thread keeps competing to the end.
                                for _ in 0..limit + 4 {
                                    admitted += u64::from(
                                        limiter.check(key, Request::new(1).at(t)).allowed,
                                    );
                                }
                            }
                            admitted
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).sum()
            });
            writeln!(out, "@{admitted}").unwrap();
        }
        "churn" => {
            let rounds: u64 = order("ROUNDS").parse().unwrap();
            let salt = u64::from(std::process::id()) << 32;
            for i in 0..rounds {
                // New keys: each placed under its shard's latch, so a kill
                // lands inside one now and then.
                limiter.check(salt | (i + 1), Request::new(1).at(T0));
                if limiter.check(0, Request::new(1).at(T0)).allowed {
                    out.write_all(b"+").unwrap();
                    out.flush().unwrap();
                }
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

#[test]
fn processes_started_separately_admit_exactly_the_limit() {
    for algorithm in SHAREABLE {
        let region = Region::new("burst");
        let limit = 50;
        let keys = 20;
        // One explicit instant, after the region's creation.
        let t = T0;
        let mut children: Vec<Child> = (0..4)
            .map(|_| {
                spawn_worker(&[
                    ("REGION", region.0.display().to_string()),
                    ("ALGORITHM", algorithm.name().into()),
                    ("LIMIT", limit.to_string()),
                    ("MODE", "burst".into()),
                    ("T", t.to_string()),
                    ("KEYS", keys.to_string()),
                    ("THREADS", "2".into()),
                ])
            })
            .collect();
        let mut readers: Vec<_> = children
            .iter_mut()
            .map(|c| BufReader::new(c.stdout.take().unwrap()))
            .collect();
        for r in &mut readers {
            assert_eq!(marked(r), "ready");
        }
        for c in &mut children {
            c.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        }
        let mut total = 0;
        for (c, r) in children.iter_mut().zip(&mut readers) {
            total += marked(r).parse::<u64>().unwrap();
            assert!(wait_bounded(c, Duration::from_secs(60)).success());
        }
        assert_eq!(
            total,
            limit * keys,
            "{algorithm}: 4 processes x 2 threads admit exactly the limit per key"
        );
    }
}

#[test]
fn processes_killed_mid_run_never_block_or_over_admit_the_others() {
    let region = Region::new("kill");
    let limit = 2000;
    let spawn = |rounds: u64| {
        spawn_worker(&[
            ("REGION", region.0.display().to_string()),
            ("ALGORITHM", "fixed_window".into()),
            ("LIMIT", limit.to_string()),
            ("MODE", "churn".into()),
            ("ROUNDS", rounds.to_string()),
        ])
    };
    // Make the region first, so every worker attaches to one.
    drop(
        KeyedLimiter::builder()
            .limit(config(Algorithm::FixedWindow, limit))
            .states(States::shared(&region.0))
            .build()
            .unwrap(),
    );
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id());
    let mut random = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut reported = 0u64;
    let count = |child: &mut Child| {
        let mut text = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut text).unwrap();
        text.iter().filter(|&&b| b == b'+').count() as u64
    };
    for _ in 0..12 {
        let mut victims: Vec<Child> = (0..3).map(|_| spawn(1_000_000)).collect();
        std::thread::sleep(Duration::from_millis(20 + random(80)));
        for v in &mut victims {
            std::thread::sleep(Duration::from_micros(random(3000)));
            v.kill().unwrap();
            v.wait().unwrap();
            reported += count(v);
        }
    }
    // Survivors, started after all the kills: they must get through every
    // shard latch the victims died holding.
    let mut survivors: Vec<Child> = (0..3).map(|_| spawn(20_000)).collect();
    for s in &mut survivors {
        assert!(wait_bounded(s, Duration::from_secs(120)).success());
        reported += count(s);
    }
    let check = KeyedLimiter::builder()
        .limit(config(Algorithm::FixedWindow, limit))
        .states(States::shared(&region.0))
        .build()
        .unwrap();
    let left = check.check(0, Request::new(0).at(T0)).remaining;
    assert!(
        reported <= limit - left,
        "the table counted {} admissions of key 0, the processes reported {reported}",
        limit - left
    );
    assert!(reported > 0, "the run admitted something");
}

#[test]
fn eight_processes_creating_at_once_agree_on_one_configuration() {
    for _ in 0..10 {
        let region = Region::new("race");
        let mut children: Vec<Child> = (1..=8)
            .map(|limit: u64| {
                spawn_worker(&[
                    ("REGION", region.0.display().to_string()),
                    ("ALGORITHM", "gcra".into()),
                    ("LIMIT", (10 * limit).to_string()),
                    ("MODE", "open".into()),
                ])
            })
            .collect();
        let mut winners = Vec::new();
        for c in &mut children {
            assert!(wait_bounded(c, Duration::from_secs(60)).success());
            let line = marked(&mut BufReader::new(c.stdout.take().unwrap()));
            if let Some(limit) = line.strip_prefix("ok ") {
                winners.push(limit.to_string());
            } else {
                assert_eq!(
                    line, "err ConfigMismatch",
                    "a loser sees the winner's whole configuration, never a half-made region"
                );
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "exactly one configuration wins: {winners:?}"
        );
        let won: u64 = winners[0].parse().unwrap();
        assert!(
            KeyedLimiter::builder()
                .limit(config(Algorithm::Gcra, won))
                .states(States::shared(&region.0))
                .build()
                .is_ok()
        );
    }
}

#[test]
fn files_that_are_not_this_region_give_named_errors() {
    let region = Region::new("bad");
    let path = &region.0;
    let good = config(Algorithm::Gcra, 5);
    drop(
        KeyedLimiter::builder()
            .limit(good)
            .states(States::shared(path))
            .build()
            .unwrap(),
    );

    // Another configuration.
    assert_eq!(
        kind(
            KeyedLimiter::builder()
                .limit(config(Algorithm::Gcra, 6))
                .states(States::shared(path))
                .build()
        ),
        SharedErrorKind::ConfigMismatch
    );
    assert_eq!(
        kind(
            KeyedLimiter::builder()
                .limit(config(Algorithm::TokenBucket, 5))
                .states(States::shared(path))
                .build()
        ),
        SharedErrorKind::ConfigMismatch
    );
    let bytes = std::fs::read(path).unwrap();

    // Another layout version (byte 8: the version, little-endian).
    let mut other = bytes.clone();
    other[8] = 99;
    std::fs::write(path, &other).unwrap();
    assert_eq!(
        kind(
            KeyedLimiter::builder()
                .limit(good)
                .states(States::shared(path))
                .build()
        ),
        SharedErrorKind::Version
    );

    // A damaged header.
    let mut damaged = bytes.clone();
    damaged[100] ^= 0xff;
    std::fs::write(path, &damaged).unwrap();
    assert_eq!(
        kind(
            KeyedLimiter::builder()
                .limit(good)
                .states(States::shared(path))
                .build()
        ),
        SharedErrorKind::NotARegion
    );

    // Truncated: inside the header page, and after it.
    for len in [0, 10, 4096, bytes.len() - 4096] {
        std::fs::write(path, &bytes[..len]).unwrap();
        assert_eq!(
            kind(
                KeyedLimiter::builder()
                    .limit(good)
                    .states(States::shared(path))
                    .build()
            ),
            SharedErrorKind::Truncated,
            "a file of {len} bytes"
        );
    }

    // Garbage.
    let garbage: Vec<u8> = (0..bytes.len()).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(path, &garbage).unwrap();
    assert_eq!(
        kind(
            KeyedLimiter::builder()
                .limit(good)
                .states(States::shared(path))
                .build()
        ),
        SharedErrorKind::NotARegion
    );

    // A directory, and a missing directory.
    assert_eq!(
        kind(
            KeyedLimiter::builder()
                .limit(good)
                .states(States::shared("/dev/shm"))
                .build()
        ),
        SharedErrorKind::Io
    );
    assert_eq!(
        kind(
            KeyedLimiter::builder()
                .limit(good)
                .states(States::shared("/nonexistent-dir/r"))
                .build()
        ),
        SharedErrorKind::Io
    );

    // What shared mode refuses.
    let refused = |c: Config| {
        kind(
            KeyedLimiter::builder()
                .limit(c)
                .states(States::shared(path))
                .build(),
        )
    };
    assert_eq!(
        refused(config(Algorithm::SlidingLog, 5)),
        SharedErrorKind::Unsupported
    );
    assert_eq!(
        refused(config(Algorithm::BucketedWindow, 5)),
        SharedErrorKind::Unsupported
    );
    assert_eq!(
        refused(Config::new(Algorithm::Gcra, 5, HOUR)),
        SharedErrorKind::Unsupported
    );
}

#[test]
fn a_new_region_has_mode_0600_and_a_bare_name_lives_in_dev_shm() {
    use std::os::unix::fs::PermissionsExt;
    let name = format!("ratecell-test-{}-bare", std::process::id());
    let region = Region(Path::new("/dev/shm").join(&name));
    let limiter = KeyedLimiter::builder()
        .limit(config(Algorithm::Gcra, 5))
        .states(States::shared(&name))
        .build()
        .unwrap();
    let mode = std::fs::metadata(&region.0).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Two handles in one process share the limit too.
    let other = KeyedLimiter::builder()
        .limit(config(Algorithm::Gcra, 5))
        .states(States::shared(&region.0))
        .build()
        .unwrap();
    let admitted = (0..10)
        .filter(|i| {
            let l = if i % 2 == 0 { &limiter } else { &other };
            l.check(7, Request::new(1).at(T0)).allowed
        })
        .count();
    assert_eq!(admitted, 5);
    // The clocks of two handles agree (one stored calibration).
    let (a, b) = (limiter.now_ns(), other.now_ns());
    assert!(b >= a && b - a < 1_000_000, "{a} {b}");
    let group = ratecell::SharedOptions {
        mode: 0o660,
        ..Default::default()
    };
    let second = Region::new("mode");
    drop(
        KeyedLimiter::builder()
            .limit(config(Algorithm::Gcra, 5))
            .states(States::Shared {
                region: (&second.0).into(),
                options: group,
                seed: None,
            })
            .build()
            .unwrap(),
    );
    let mode = std::fs::metadata(&second.0).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o660);
}

/// The token a latch records for process `pid` (see `shared::holder`).
fn token_of(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    let start: u64 = rest.split_whitespace().nth(19).unwrap().parse().unwrap();
    u64::from(pid) | ((start & 0x7fff_ffff) << 32)
}

/// Writes `word` into the insert latch of every shard of the region (the
/// shards start at 4096, 128 bytes apart; the latch is each one's first
/// word), as a process that died holding them would have left it.
fn latch_every_shard(path: &Path, word: u64, shards: usize) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    for s in 0..shards {
        file.write_all_at(&word.to_le_bytes(), 4096 + 128 * s as u64)
            .unwrap();
    }
}

#[test]
fn a_latch_left_by_a_dead_process_is_taken_over_and_a_live_one_waited_for() {
    const LATCHED: u64 = 1 << 63;
    let region = Region::new("latch");
    let limiter = KeyedLimiter::builder()
        .limit(config(Algorithm::Gcra, 5))
        .states(States::shared(&region.0))
        .build()
        .unwrap();
    // Capacity 1000: one shard.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let live = token_of(sleeper.id());
    latch_every_shard(&region.0, LATCHED | live, 1);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let inserter = s.spawn(|| {
            let d = limiter.check(42, Request::new(1).at(T0));
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            d
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !done.load(std::sync::atomic::Ordering::SeqCst),
            "a new key waits while a live process holds its shard's latch"
        );
        // The holder dies (and is reaped): the waiter takes the latch over.
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        let start = Instant::now();
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "still waiting for a dead holder"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(inserter.join().unwrap().allowed);
    });
    // A dead holder found at once, and a zombie (killed, not yet reaped).
    let mut gone = Command::new("true").spawn().unwrap();
    let token = token_of(gone.id());
    gone.wait().unwrap();
    latch_every_shard(&region.0, LATCHED | token, 1);
    assert!(limiter.check(43, Request::new(1).at(T0)).allowed);
    let mut zombie = Command::new("sleep").arg("30").spawn().unwrap();
    let token = token_of(zombie.id());
    zombie.kill().unwrap();
    latch_every_shard(&region.0, LATCHED | token, 1);
    assert!(limiter.check(44, Request::new(1).at(T0)).allowed);
    zombie.wait().unwrap();
    assert_eq!(limiter.stats().keys_tracked, 3);
    assert_eq!(
        limiter.check(42, Request::new(0).at(T0)).remaining,
        4,
        "key 42 kept its state"
    );
}

/// A private tmpfs mounted for one test, unmounted and removed on drop.
/// Mounting needs root (CAP_SYS_ADMIN): `None` elsewhere.
struct PrivateTmpfs(PathBuf);

impl PrivateTmpfs {
    fn mount(tag: &str, options: &str) -> Option<PrivateTmpfs> {
        let dir = std::env::temp_dir().join(format!("ratecell-test-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        let target = c(dir.to_str()?);
        let (fstype, data) = (c("tmpfs"), c(options));
        // SAFETY: NUL-terminated strings; a fresh directory of this test's.
        let r = unsafe {
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if r != 0 {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(PrivateTmpfs(dir))
    }
}

impl Drop for PrivateTmpfs {
    fn drop(&mut self) {
        let target = std::ffi::CString::new(self.0.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path this struct mounted.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_region_larger_than_its_file_system_is_refused_when_made() {
    // Every page is reserved when the region is made, so a file system
    // without room refuses it then, never with a SIGBUS in a later check.
    let Some(fs) = PrivateTmpfs::mount("small", "size=1m,huge=advise") else {
        eprintln!("skipped: mounting a private tmpfs needs root");
        return;
    };
    let path = fs.0.join("region");
    let big = Config::new(Algorithm::Gcra, 1, HOUR).capacity(1_000_000);
    match KeyedLimiter::builder()
        .limit(big)
        .states(States::shared(&path))
        .build()
    {
        Err(SnapshotError::Limiter(Error::OutOfMemory { bytes })) => {
            assert!(bytes > 1 << 20, "{bytes} bytes")
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    // The failed attempt leaves nothing behind, and a region that fits works.
    assert!(!path.exists());
    let lim = KeyedLimiter::builder()
        .limit(config(Algorithm::Gcra, 2))
        .states(States::shared(&path))
        .build()
        .unwrap();
    assert!(lim.check(7, Request::new(2).at(T0)).allowed);
    assert!(!lim.check(7, Request::new(1).at(T0)).allowed);
}

/// Cells any process that can write the file may change (issue 33 §2):
/// opening a region checks its header, not its cells (SPEC §4, "What a
/// loader accepts"), so every check must survive whatever they hold.
/// The slots are the region's last pages; random words written over them
/// (fingerprints, tombstones and states alike) make no check panic or
/// hang, on this process's attachment or a new one.
#[test]
fn hostile_cells_make_no_check_panic_or_hang() {
    use std::os::unix::fs::FileExt;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for algorithm in SHAREABLE {
        let region = Region::new("hostile");
        // 4096 keys: at least 64 KiB of slots, so the last 32 KiB are slots.
        let cfg = Config::new(algorithm, 1 + next() % 40, HOUR).capacity(4096);
        let limiter = KeyedLimiter::builder()
            .limit(cfg)
            .states(States::shared(&region.0))
            .build()
            .unwrap();
        for key in 0..500 {
            limiter.check(key, Request::new(1).at(T0));
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&region.0)
            .unwrap();
        let len = file.metadata().unwrap().len();
        let mut page = vec![0u8; 32 * 1024];
        for (i, b) in page.iter_mut().enumerate() {
            // Mostly random words, some all-ones and zero runs.
            *b = match (i / 16) % 4 {
                0 => 0xff,
                1 => 0,
                _ => next() as u8,
            };
        }
        file.write_all_at(&page, len - page.len() as u64).unwrap();
        let again = KeyedLimiter::builder()
            .limit(cfg)
            .states(States::shared(&region.0))
            .build()
            .unwrap();
        for l in [&limiter, &again] {
            for i in 0..20_000u64 {
                let t = match i % 3 {
                    0 => T0 + next() % (2 * HOUR),
                    1 => next(),
                    _ => u64::MAX - next() % HOUR,
                };
                l.check(next() % 8192, Request::new(next() % (cfg.limit + 2)).at(t));
            }
        }
    }
}

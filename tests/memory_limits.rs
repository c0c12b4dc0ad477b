//! A capacity larger than the process may use is `Error::OutOfMemory`, not
//! a process killed while its table is touched (issue 20, item 3). Each
//! test runs the allocation in a forked child, under the limit it sets
//! there, so nothing else shares the limit or the risk.

#![cfg(target_os = "linux")]

use ratecell::{Algorithm, Config, Error, KeyedLimiter, SnapshotError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// A keyed GCRA limiter whose table needs about 1 GiB (23.2 bytes a key).
fn one_gib_table() -> Result<KeyedLimiter, SnapshotError> {
    KeyedLimiter::builder()
        .limit(Config::new(Algorithm::Gcra, 10, 1_000_000_000).capacity(46_000_000))
        .build()
}

/// Runs `child` in a forked process (after `setup` there) and returns its
/// exit code, or the signal that ended it as `Err`. Kills it after 60 s.
fn in_child(setup: impl FnOnce(), child: impl FnOnce() -> i32) -> Result<i32, i32> {
    // SAFETY: the child calls only `setup`, the library and the allocator,
    // and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        setup();
        let code = child();
        // SAFETY: ends the child without the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut status = 0;
    loop {
        // SAFETY: our own child; a valid status pointer.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: kills and reaps the child we forked.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("the child did not finish in 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Err(libc::WTERMSIG(status))
    }
}

/// 0 if the table was refused as out of memory, 1 if it was made.
fn try_table() -> i32 {
    match one_gib_table() {
        Err(SnapshotError::Limiter(Error::OutOfMemory { bytes })) => {
            eprintln!("child: refused, {bytes} bytes");
            0
        }
        Err(e) => {
            eprintln!("child: unexpected error {e}");
            2
        }
        Ok(_) => {
            eprintln!("child: the table was made");
            1
        }
    }
}

/// A new memory cgroup of `limit` bytes under this process's own (v2, or
/// v1's memory hierarchy), or why none can be made here.
fn new_memory_cgroup(limit: u64) -> Result<PathBuf, String> {
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let name = format!("ratecell-test-{}", std::process::id());
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let path = path.trim_start_matches('/');
        let (dir, limit_file) = if controllers.is_empty() {
            let parent = Path::new("/sys/fs/cgroup").join(path);
            let enabled =
                std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "memory") {
                continue;
            }
            (parent.join(&name), "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                Path::new("/sys/fs/cgroup/memory").join(path).join(&name),
                "memory.limit_in_bytes",
            )
        } else {
            continue;
        };
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if let Err(e) = std::fs::write(dir.join(limit_file), limit.to_string()) {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!("{limit_file}: {e}"));
        }
        return Ok(dir);
    }
    Err("no memory cgroup controller is available to this process".into())
}

/// The case: inside a memory cgroup of 256 MiB, a table of 1 GiB
/// was calloc'ed (overcommit), then touched until the OOM killer ended the
/// process. Now the cgroup's limit is read first.
#[test]
fn a_table_larger_than_the_memory_cgroup_is_out_of_memory() {
    let cgroup = match new_memory_cgroup(256 * MIB) {
        Ok(dir) => dir,
        Err(why) => {
            // Needs root (or a delegated cgroup); say so instead of passing
            // silently as if it had run.
            eprintln!("SKIPPED: cannot make a memory cgroup here ({why})");
            return;
        }
    };
    let procs = cgroup.join("cgroup.procs");
    let result = in_child(
        || {
            std::fs::write(&procs, std::process::id().to_string())
                .expect("joining the test's memory cgroup");
        },
        try_table,
    );
    let _ = std::fs::remove_dir(&cgroup);
    assert_eq!(
        result,
        Ok(0),
        "Ok(0): refused; Ok(1): made; Err(9): killed by the OOM killer"
    );
}

/// Under `RLIMIT_AS`, the same table is refused as out of memory.
#[test]
fn a_table_larger_than_the_address_space_limit_is_out_of_memory() {
    let result = in_child(
        || {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let vm_kib: u64 = status
                .lines()
                .find_map(|l| l.strip_prefix("VmSize:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap();
            let limit = vm_kib * 1024 + 256 * MIB;
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            // SAFETY: sets this (child) process's limit from a valid struct.
            assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rlimit) }, 0);
        },
        try_table,
    );
    assert_eq!(result, Ok(0), "Ok(0): refused; Ok(1): made");
}

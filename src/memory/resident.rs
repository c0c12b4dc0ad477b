//! Whether the process may make a large allocation resident, and making it
//! so with a call that can fail ([SPEC §5](crate::spec#5-keyed-limiters): allocation failure is an error,
//! not an abort).
//!
//! Under overcommit, `calloc` of a table larger than the process may use
//! succeeds, and touching its pages then wakes the OOM killer, which ends
//! the process (or a neighbour). So before a keyed table is allocated,
//! [`fits`] compares its size with what is left under each limit the
//! process is known to run under, on Linux:
//!
//! - the memory cgroup: v2, `memory.max − memory.current` of the process's
//!   cgroup and of each ancestor; v1, `hierarchical_memory_limit` (from
//!   `memory.stat`) − `memory.usage_in_bytes`;
//! - the machine: `MemAvailable + SwapFree` from `/proc/meminfo`;
//! - the address space: `RLIMIT_AS` − the current `VmSize`.
//!
//! A limit that cannot be read is taken as absent (the check never refuses
//! for want of information). Then [`populate`] faults the pages in with
//! `MADV_POPULATE_WRITE` (Linux 5.14), which reports a failure as an error
//! where a page touch would be killed; on older kernels it falls back to
//! touching one byte per page. The checks own nothing and change nothing.

/// Allocations below this size are not checked: reading the limits costs
/// tens of microseconds, and a megabyte is within any limit's noise.
const CHECKED_FROM: usize = 1 << 20;

/// Whether `bytes` more can be made resident under every limit found.
pub(crate) fn fits(bytes: usize) -> bool {
    if bytes < CHECKED_FROM {
        return true;
    }
    headroom().is_none_or(|room| bytes as u64 <= room)
}

/// The least room left under the limits that could be read, in bytes.
fn headroom() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        [cgroup_room(), machine_room(), address_space_room()]
            .into_iter()
            .flatten()
            .min()
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The first number on the line of `text` that starts with `key`.
#[cfg(target_os = "linux")]
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(target_os = "linux")]
fn read_u64(path: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Room under the memory cgroup (v2, else v1), if limited.
#[cfg(target_os = "linux")]
fn cgroup_room() -> Option<u64> {
    use std::path::Path;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut room: Option<u64> = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_start_matches('/');
        if id == "0" && controllers.is_empty() {
            // v2: every level from the process's cgroup up limits it. In a
            // cgroup namespace the path is relative to the mount, as here.
            let mut dir = Path::new("/sys/fs/cgroup").join(path);
            loop {
                let max = read_u64(&dir.join("memory.max"));
                let current = read_u64(&dir.join("memory.current"));
                if let (Some(max), Some(current)) = (max, current) {
                    let left = max.saturating_sub(current);
                    room = Some(room.map_or(left, |r| r.min(left)));
                }
                if dir == Path::new("/sys/fs/cgroup") || !dir.pop() {
                    break;
                }
            }
        } else if controllers.split(',').any(|c| c == "memory") {
            // v1: memory.stat's hierarchical limit already covers the
            // ancestors. The path may be the host's, seen from a
            // container whose mount is its own cgroup: try both.
            let v1 = Path::new("/sys/fs/cgroup/memory");
            for dir in [v1.join(path), v1.to_path_buf()] {
                let stat = std::fs::read_to_string(dir.join("memory.stat"));
                let usage = read_u64(&dir.join("memory.usage_in_bytes"));
                if let (Ok(stat), Some(usage)) = (stat, usage) {
                    if let Some(limit) = field(&stat, "hierarchical_memory_limit ") {
                        let left = limit.saturating_sub(usage);
                        room = Some(room.map_or(left, |r| r.min(left)));
                    }
                    break;
                }
            }
        }
    }
    room
}

/// Memory the machine can still give without killing anyone.
#[cfg(target_os = "linux")]
fn machine_room() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available = field(&meminfo, "MemAvailable:")?;
    let swap = field(&meminfo, "SwapFree:").unwrap_or(0);
    Some(available.saturating_add(swap).saturating_mul(1024))
}

/// Address space left under `RLIMIT_AS`, if set.
#[cfg(target_os = "linux")]
fn address_space_room() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &raw mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let size = field(&status, "VmSize:")?.saturating_mul(1024);
    Some(limit.rlim_cur.saturating_sub(size))
}

/// Makes `[base, base + bytes)` resident, returning false if the kernel
/// could not (the memory stays allocated; the caller frees it).
///
/// # Safety
/// The range must lie inside one live allocation of the caller's, whose
/// contents are zero or not yet initialised (a fallback page touch writes
/// a zero).
pub(crate) unsafe fn populate(base: *mut u8, bytes: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        // The UAPI value (linux/mman.h); the libc crate does not name it.
        const MADV_POPULATE_WRITE: libc::c_int = 23;
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        // madvise wants a page-aligned start; the page holding the start
        // is mapped (it holds the allocation's first byte).
        let start = (base as usize) & !(page - 1);
        let len = base as usize + bytes - start;
        // SAFETY: the range is mapped (it covers the allocation and the
        // rest of its first page); POPULATE_WRITE faults pages in writable
        // without changing their contents.
        let r = unsafe { libc::madvise(start as *mut libc::c_void, len, MADV_POPULATE_WRITE) };
        if r == 0 {
            return true;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            // ENOMEM, EFAULT, EHWPOISON: the pages cannot be had.
            return false;
        }
        // EINVAL: a kernel before 5.14; touch the pages instead.
    }
    let mut offset = 0;
    while offset < bytes {
        // SAFETY: offset < bytes, inside the allocation; volatile so the
        // write is not elided (the value written is the zero already there).
        unsafe { base.add(offset).write_volatile(0) };
        offset += 4096;
    }
    true
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_small_allocation_always_fits_and_an_impossible_one_never() {
        assert!(fits(4096));
        assert!(!fits(usize::MAX / 2), "more than any machine has");
    }

    #[test]
    fn populate_keeps_zeros() {
        let mut v = vec![0u8; 3 * 4096 + 5];
        // SAFETY: the range is the vector's, all zeros.
        assert!(unsafe { populate(v.as_mut_ptr().wrapping_add(1), v.len() - 1) });
        assert!(v.iter().all(|&b| b == 0));
    }
}

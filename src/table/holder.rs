//! Who holds a table latch, and whether that holder still exists.
//!
//! A latch that records its holder (`cell::latch_recording`) stores this
//! process's *token*: its pid in the low 32 bits and the low 31 bits of its
//! start time (clock ticks since boot, `/proc/<pid>/stat` field 22) above
//! them. The start time tells a dead holder from a new process that was
//! given the same pid.
//!
//! - In a private table, every holder is a thread of this process, so a
//!   token that is not ours was written by the process we were forked from
//!   and its holder thread does not exist in our copy: gone, at no cost.
//! - In a shared region (`crate::shared`), a token that is not ours is
//!   another process: alive while `kill(pid, 0)` finds it, it is not a
//!   zombie, and its start time matches.
//!
//! The token is computed once per process and forgotten in the child of a
//! fork (a `pthread_atfork` handler), so taking a latch never makes a
//! system call.

use crate::sync::UNDER_LOOM;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// This process's token (0: not computed yet in this process).
static TOKEN: AtomicU64 = AtomicU64::new(0);

/// This process's token: non-zero, below bit 63 (under loom, whose models
/// run in one process and never fork, 1).
#[inline]
pub(crate) fn me() -> u64 {
    if UNDER_LOOM {
        return 1;
    }
    let token = TOKEN.load(Relaxed);
    if token != 0 {
        return token;
    }
    compute_me()
}

#[cold]
fn compute_me() -> u64 {
    static AT_FORK: Once = Once::new();
    AT_FORK.call_once(|| {
        #[cfg(unix)]
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe, as a child-side fork handler must be.
        unsafe {
            libc::pthread_atfork(None, None, Some(forget_in_child));
        }
    });
    let pid = std::process::id();
    let token = token_of(pid, stat_of(pid).map_or(0, |s| s.start));
    TOKEN.store(token, Relaxed);
    token
}

#[cfg(unix)]
extern "C" fn forget_in_child() {
    TOKEN.store(0, Relaxed);
}

fn token_of(pid: u32, start: u64) -> u64 {
    u64::from(pid) | ((start & 0x7fff_ffff) << 32)
}

/// Whether the holder whose token is `token` still exists, for a latch in
/// a private table (`shared == false`) or in a shared region.
pub(crate) fn alive(token: u64, shared: bool) -> bool {
    let mine = me();
    if token == mine {
        return true;
    }
    let pid = token as u32;
    if UNDER_LOOM || !shared || pid == mine as u32 {
        // Private: the holder was a thread of the process we were forked
        // from. Shared with our pid but not our start time: a process that
        // had our pid before us. (Under loom every holder is this
        // process's.)
        return false;
    }
    process_alive(pid, token >> 32)
}

#[cfg(unix)]
fn process_alive(pid: u32, start_bits: u64) -> bool {
    let Ok(pid_t) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 sends nothing; it only asks whether the pid exists.
    let found = unsafe { libc::kill(pid_t, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
    if !found {
        return false;
    }
    match stat_of(pid) {
        // A zombie (killed, not yet reaped) holds nothing any more.
        Some(stat) => {
            !matches!(stat.state, b'Z' | b'X') && (stat.start & 0x7fff_ffff) == start_bits
        }
        // No /proc to ask: the pid exists, so wait (never take a latch
        // from a holder that may be alive).
        None => true,
    }
}

#[cfg(not(unix))]
fn process_alive(_pid: u32, _start_bits: u64) -> bool {
    true
}

/// A process's state letter and start time, from `/proc/<pid>/stat`.
struct Stat {
    state: u8,
    start: u64,
}

fn stat_of(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself: the fields that follow start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    // Field 3 is the state; the start time is field 22, 19 further on.
    let start = fields.nth(18)?.parse().ok()?;
    Some(Stat { state, start })
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;

    #[test]
    fn our_token_is_alive_and_a_reaped_child_is_not() {
        let token = me();
        assert_ne!(token, 0);
        assert_eq!(token as u32, std::process::id());
        assert!(alive(token, true));
        assert!(alive(token, false));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let child_token = token_of(pid, stat_of(pid).map_or(0, |s| s.start));
        child.wait().unwrap();
        assert!(!alive(child_token, true), "a reaped child is gone");
        assert!(!alive(child_token, false), "another pid in a private table");
        // Our pid with another start time: a process before us.
        assert!(!alive(token ^ (1 << 40), true));
    }

    #[test]
    fn a_zombie_holds_nothing() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let mut token = None;
        // Until it exits, then while it is a zombie (not yet waited for).
        for _ in 0..1000 {
            match stat_of(pid) {
                Some(stat) if stat.state == b'Z' => {
                    token = Some(token_of(pid, stat.start));
                    break;
                }
                _ => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        let token = token.expect("the child became a zombie within a second");
        assert!(!alive(token, true));
        child.wait().unwrap();
    }
}

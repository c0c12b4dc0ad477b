//! Snapshots in the C ABI: saving a limiter to a file (docs/SNAPSHOT.md),
//! stopping a persisted limiter's saves, and the status of every snapshot
//! error. A limiter restored from a file
//! or saved to one periodically is made by `ratecell_limiter_build`
//! (`ratecell_options.states`).

use super::limiter::{Held, Inner, handle};
use super::types::ratecell_status;
use crate::ptr::path_arg;
use ratecell_lib::SnapshotError;
use ratecell_lib::snapshot::Save;
use std::ffi::c_char;
use std::io;

use ratecell_status::*;

/// The status a failed save becomes: a missing directory is an I/O error
/// of the save, not a missing snapshot.
fn save_status(e: &SnapshotError) -> ratecell_status {
    match status(e) {
        RATECELL_SNAPSHOT_NOT_FOUND => RATECELL_SNAPSHOT_IO,
        s => s,
    }
}

/// The status a snapshot error becomes (a limiter's error, as a build
/// returns it, too).
pub(crate) fn status(e: &SnapshotError) -> ratecell_status {
    match e {
        SnapshotError::Io(e) if e.kind() == io::ErrorKind::NotFound => RATECELL_SNAPSHOT_NOT_FOUND,
        SnapshotError::Io(_) => RATECELL_SNAPSHOT_IO,
        SnapshotError::UnsupportedVersion { .. } => RATECELL_SNAPSHOT_VERSION,
        SnapshotError::ConfigMismatch { .. } => RATECELL_SNAPSHOT_CONFIG_MISMATCH,
        SnapshotError::Limiter(e) => ratecell_status::from_error(e),
        // NotASnapshot, Truncated, Damaged, and any added later.
        _ => RATECELL_SNAPSHOT_DAMAGED,
    }
}

/// Saves a snapshot of the limiter (its configuration and every live
/// state, at the limiter's clock) to the file at `path`, atomically: the
/// snapshot goes to a temporary file in the same directory, which is
/// flushed to disk and renamed over `path`, so a crash during the call
/// leaves the previous file whole. Other threads may keep checking
/// meanwhile; each state saved is one its key had during the call.
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT`, or
/// `RATECELL_SNAPSHOT_IO`. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `path` is NULL or a NUL-terminated
/// string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_snapshot_save(
    limiter: *const super::limiter::ratecell_limiter,
    path: *const c_char,
) -> ratecell_status {
    ffi_panic_boundary! {
        // SAFETY: as promised by the caller.
        let l = try_status!(unsafe { handle(limiter) });
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        match l.inner.save_to(&path) {
            Ok(()) => RATECELL_OK,
            Err(e) => save_status(&e),
        }
    }
}

/// `ratecell_snapshot_save` judging which states are live (not equivalent
/// to fresh) at the caller's time `now_ns` (UNIX ns) instead of the
/// limiter's clock: for limiters whose requests carry their own time
/// (`ratecell_request.at_ns`).
///
/// # Safety
/// As for `ratecell_snapshot_save`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_snapshot_save_at(
    limiter: *const super::limiter::ratecell_limiter,
    path: *const c_char,
    now_ns: u64,
) -> ratecell_status {
    ffi_panic_boundary! {
        // SAFETY: as promised by the caller.
        let l = try_status!(unsafe { handle(limiter) });
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let saved = match &*l.inner {
            Inner::Direct(d) => d.save_at(&path, now_ns),
            Inner::Keyed(k) => k.save_at(&path, now_ns),
        };
        match saved {
            Ok(()) => RATECELL_OK,
            Err(e) => save_status(&e),
        }
    }
}

/// Stops a persisted limiter's saving thread (`RATECELL_STATES_PERSISTED`),
/// joining it, and saves a last time, returning that save's status: the
/// one way to learn it, since `ratecell_limiter_free` returns none. The
/// limiter goes on checking, unsaved; later calls, and its free, save
/// nothing more and return `RATECELL_OK`. A limiter that is not persisted:
/// `RATECELL_OK`, nothing done.
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT` or
/// `RATECELL_SNAPSHOT_IO`. Thread-safe; checks running meanwhile on other
/// threads are saved only if they end before the last save begins.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_snapshot_stop(
    limiter: *const super::limiter::ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        // SAFETY: as promised by the caller.
        let l = try_status!(unsafe { handle(limiter) });
        let stopped = match &l.inner {
            Held::Persisted(p) => p.stop_saving(),
            Held::Plain(_) => Ok(()),
        };
        match stopped {
            Ok(()) => RATECELL_OK,
            Err(e) => save_status(&e),
        }
    }
}

//! Snapshots in the C ABI: saving a limiter to a file, restoring one from
//! a file, and `ratecell_persisted`, a limiter saved periodically by a
//! background thread (docs/SNAPSHOT.md).

use super::build::{builder_of, ratecell_options};
use super::limiter::{Inner, clock_of, handle, put};
use super::types::{ratecell_clock, ratecell_status};
use crate::ptr::{into_raw, out_ptr, path_arg};
use ratecell_lib::snapshot::{Save, saved_tiers};
use ratecell_lib::{AnyLimiter, Persisted, SnapshotError};
use std::ffi::c_char;
use std::io::{self, Seek};
use std::path::Path;
use std::time::Duration;

use ratecell_status::*;

/// The status a failed save becomes: a missing directory is an I/O error
/// of the save, not a missing snapshot.
fn save_status(e: &SnapshotError) -> ratecell_status {
    match status(e) {
        RATECELL_SNAPSHOT_NOT_FOUND => RATECELL_SNAPSHOT_IO,
        s => s,
    }
}

/// The status a snapshot error becomes.
fn status(e: &SnapshotError) -> ratecell_status {
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

impl Save for super::limiter::ratecell_limiter {
    fn save_to(&self, path: &Path) -> Result<(), SnapshotError> {
        self.inner.save_to(path)
    }
}

/// Writes a restored handle to `*out`, or returns the error's status.
///
/// # Safety
/// `out` is non-NULL and writable.
unsafe fn publish_restored(
    restored: Result<super::limiter::ratecell_limiter, SnapshotError>,
    out: *mut *mut super::limiter::ratecell_limiter,
) -> ratecell_status {
    let l = match restored {
        Ok(l) => l,
        Err(e) => return status(&e),
    };
    let ptr = try_status!(into_raw(l));
    // SAFETY: non-NULL and writable, as promised.
    unsafe { put(out, ptr) };
    RATECELL_OK
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
        match l.save_to(&path) {
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
        let saved = match &l.inner {
            Inner::Direct(d) => d.save_at(&path, now_ns),
            Inner::Keyed(k) => k.save_at(&path, now_ns),
        };
        match saved {
            Ok(()) => RATECELL_OK,
            Err(e) => save_status(&e),
        }
    }
}

/// Builds a limiter holding the states saved in the snapshot file at
/// `path` and writes its handle to `*out`:
///
/// - **`options` NULL**: the configuration saved in the file (every limit,
///   for a limiter of several; every tier, for a tiered one), on the TSC
///   clock. The saved configuration sizes the table, as one passed to
///   `ratecell_limiter_build` would: restore this way only files you
///   would take a configuration from.
/// - **`options` not NULL**: the limiter `ratecell_limiter_build` makes of
///   `*options` (its limits or tiers, its clock), read and checked exactly
///   as `ratecell_limiter_build` reads and checks them. The snapshot must
///   hold the same limits in the same order (the same tiers of them, for
///   `n_tiers` ≥ 1; a snapshot of a limiter made without tiers is no
///   tiered limiter's, nor the reverse), else
///   `RATECELL_SNAPSHOT_CONFIG_MISMATCH`, before anything is allocated.
///   The overflow policy and the clock are the caller's to choose; a
///   burst of 0 equals a burst of `limit`. A `shared_path` is refused with
///   `RATECELL_SHARED_UNSUPPORTED`: a shared region outlives its
///   processes and is made or attached by `ratecell_limiter_build`, never
///   filled from a snapshot here.
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `path` or `out`
/// is NULL; the statuses of `ratecell_limiter_build` for invalid
/// `*options` (`RATECELL_INVALID_LENGTH` for an unknown `size`);
/// `RATECELL_SNAPSHOT_NOT_FOUND`, `RATECELL_SNAPSHOT_IO`,
/// `RATECELL_SNAPSHOT_DAMAGED`, `RATECELL_SNAPSHOT_VERSION`,
/// `RATECELL_SNAPSHOT_CONFIG_MISMATCH`; an `RATECELL_INVALID_*` status for
/// an invalid saved configuration; or `RATECELL_OUT_OF_MEMORY`. On
/// failure `*out` is left unchanged.
///
/// Ownership: the caller owns the new limiter and releases it with
/// `ratecell_limiter_free`; `*options` and what it points to are only read
/// during the call. Thread-safe.
///
/// # Safety
/// `options` is NULL or as for `ratecell_limiter_build`; `path` is NULL or
/// a NUL-terminated string; `out` is NULL or points to a writable
/// `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_restore(
    options: *const ratecell_options,
    path: *const c_char,
    out: *mut *mut super::limiter::ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        let given = if options.is_null() {
            None
        } else {
            // SAFETY: as promised by the caller.
            Some(try_status!(unsafe { builder_of(options) }))
        };
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let restored = match given {
            Some((builder, clock)) => builder
                .load(&path)
                .map(|inner| super::limiter::ratecell_limiter { inner, clock }),
            None => restore_as_saved(&path),
        };
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish_restored(restored, out) }
    }
}

/// The limiter of the configuration saved in the snapshot file at `path`
/// (every limit, every tier), on the TSC clock, holding the states saved
/// there. The file is opened once: the configuration and the states come
/// from one snapshot even if the file is replaced meanwhile.
fn restore_as_saved(path: &Path) -> Result<super::limiter::ratecell_limiter, SnapshotError> {
    let mut input = io::BufReader::new(std::fs::File::open(path)?);
    let (tiers, tiered) = saved_tiers(&mut input)?;
    input.seek(io::SeekFrom::Start(0))?;
    let builder = if tiered {
        tiers
            .iter()
            .fold(AnyLimiter::builder(), |b, tier| b.tier(tier))
    } else {
        AnyLimiter::builder().limits(&tiers[0])
    };
    let clock = ratecell_clock::RATECELL_CLOCK_TSC;
    let inner = builder.clock(clock_of(clock)).restore(input)?;
    Ok(super::limiter::ratecell_limiter { inner, clock })
}

/// A limiter saved to a file periodically by a background thread.
///
/// Opaque; made by `ratecell_persisted_open`, stopped and released by
/// `ratecell_persisted_close`. Its limiter (`ratecell_persisted_limiter`)
/// is used like any other from any number of threads, until the close.
pub struct ratecell_persisted {
    inner: Persisted<super::limiter::ratecell_limiter>,
}

/// Restores the limiter of `*options` (as `ratecell_limiter_restore`
/// does with options) from the snapshot file at `path` if the file exists,
/// else makes it fresh (as `ratecell_limiter_build` does), and starts a
/// thread that saves it there atomically every `every_ns` nanoseconds (at
/// least 1 ms). Writes the handle to `*out`. Crash-safe limits in one
/// call: a process killed at any moment leaves the last whole snapshot.
/// Only a missing file starts fresh: a file that exists but cannot be
/// restored (damaged, or of another configuration: other limits, other
/// tiers, tiers where the file has none) is an error; remove it, or use
/// another path, to start afresh.
///
/// `options` is required (NULL is `RATECELL_NULL_ARGUMENT`: a missing file
/// leaves no configuration to start from); a `shared_path` is refused with
/// `RATECELL_SHARED_UNSUPPORTED`, as `ratecell_limiter_restore` refuses
/// it. Every check on its limiter may name a tier
/// (`ratecell_request.tier`, `ratecell_batch.tiers`) when `n_tiers` ≥ 1.
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `options`, `path`
/// or `out` is NULL; the statuses of `ratecell_limiter_build` for invalid
/// `*options` or a fresh limiter that cannot be made; those of
/// `ratecell_limiter_restore` for a file that exists but cannot be
/// restored; or `RATECELL_SNAPSHOT_IO` when the thread cannot start. On
/// failure `*out` is left unchanged.
///
/// Ownership: release with `ratecell_persisted_close`; `*options` and what
/// it points to are only read during the call. Thread-safe.
///
/// # Safety
/// `options` is NULL or as for `ratecell_limiter_build`; `path` is NULL or
/// a NUL-terminated string; `out` is NULL or points to a writable
/// `ratecell_persisted *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_persisted_open(
    options: *const ratecell_options,
    path: *const c_char,
    every_ns: u64,
    out: *mut *mut ratecell_persisted,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: as promised by the caller.
        let (builder, clock) = try_status!(unsafe { builder_of(options) });
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let handle = |inner| super::limiter::ratecell_limiter { inner, clock };
        let fresh = builder.clone();
        // The builder's own `persisted` would give a `Persisted<AnyLimiter>`;
        // the handle's limiter must be a `ratecell_limiter` (what
        // `ratecell_persisted_limiter` lends), so this opens through the
        // same rule with the handle's type.
        let opened = Persisted::open_or_build(
            &path,
            Duration::from_nanos(every_ns),
            |path| builder.load(path).map(handle),
            || fresh.build().map(handle),
        );
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish_persisted(opened, out) }
    }
}

/// Writes an opened persisted handle to `*out`, or returns the error's
/// status.
///
/// # Safety
/// `out` is non-NULL and writable.
unsafe fn publish_persisted(
    opened: Result<Persisted<super::limiter::ratecell_limiter>, SnapshotError>,
    out: *mut *mut ratecell_persisted,
) -> ratecell_status {
    let persisted = match opened {
        Ok(p) => p,
        Err(e) => return status(&e),
    };
    let ptr = try_status!(into_raw(ratecell_persisted { inner: persisted }));
    // SAFETY: non-NULL and writable, as promised.
    unsafe { put(out, ptr) };
    RATECELL_OK
}

/// The limiter of a persisted handle, written to `*out`: use it with every
/// `ratecell_check*` call. It stays valid until `ratecell_persisted_close`
/// and must not be passed to `ratecell_limiter_free`.
///
/// Returns `RATECELL_OK` or `RATECELL_NULL_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `persisted` is NULL or a live handle; `out` is NULL or points to a
/// writable `const ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_persisted_limiter(
    persisted: *const ratecell_persisted,
    out: *mut *const super::limiter::ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: the caller promises a live handle or NULL.
        let Some(p) = (unsafe { persisted.as_ref() }) else {
            return RATECELL_NULL_ARGUMENT;
        };
        // SAFETY: non-NULL and writable, as promised.
        unsafe { put(out, std::sync::Arc::as_ptr(p.inner.limiter())) };
        RATECELL_OK
    }
}

/// Saves now, in the calling thread (the periodic thread goes on).
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT` or
/// `RATECELL_SNAPSHOT_IO`. Thread-safe.
///
/// # Safety
/// `persisted` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_persisted_save(
    persisted: *const ratecell_persisted,
) -> ratecell_status {
    ffi_panic_boundary! {
        // SAFETY: the caller promises a live handle or NULL.
        let Some(p) = (unsafe { persisted.as_ref() }) else {
            return RATECELL_NULL_ARGUMENT;
        };
        match p.inner.save_now() {
            Ok(()) => RATECELL_OK,
            Err(e) => save_status(&e),
        }
    }
}

/// Stops the periodic thread (joining it), saves a last time, and releases
/// the handle and its limiter. Returns the last save's status
/// (`RATECELL_OK` or `RATECELL_SNAPSHOT_IO`); the handle is released
/// either way. NULL is a no-op returning `RATECELL_OK`.
///
/// Must be the last call on `persisted` and on its limiter: no other
/// thread may be using either.
///
/// # Safety
/// `persisted` is NULL or a live handle from `ratecell_persisted_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_persisted_close(
    persisted: *mut ratecell_persisted,
) -> ratecell_status {
    ffi_panic_boundary! {
        if persisted.is_null() {
            return RATECELL_OK;
        }
        // SAFETY: allocated by `into_raw` with this type's layout and, as
        // promised, not yet released.
        let p = unsafe { Box::from_raw(persisted) };
        match p.inner.close() {
            Ok(()) => RATECELL_OK,
            Err(e) => save_status(&e),
        }
    }
}

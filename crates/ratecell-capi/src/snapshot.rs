//! Snapshots in the C ABI: saving a limiter to a file, restoring one from
//! a file, and `ratecell_persisted`, a limiter saved periodically by a
//! background thread (docs/SNAPSHOT.md).

use super::limiter::{Inner, clock_of, handle, put};
use super::multi::configs_arg;
use super::tiers::tiers_arg;
use super::types::{ratecell_clock, ratecell_config, ratecell_status};
use super::{into_raw, out_ptr, path_arg};
use ratecell_lib::snapshot::{Save, saved_tiers};
use ratecell_lib::{AnyLimiter, Config, KeyedLimiter, Persisted, SnapshotError};
use std::ffi::c_char;
use std::io;
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

/// Restores a handle of `configs` (one limit, or several as one) from the
/// file at `path`.
fn restore(
    path: &Path,
    configs: &[Config],
    clock: ratecell_clock,
) -> Result<super::limiter::ratecell_limiter, SnapshotError> {
    let inner = AnyLimiter::builder()
        .limits(configs)
        .clock(clock_of(clock))
        .load(path)?;
    Ok(super::limiter::ratecell_limiter { inner, clock })
}

/// Restores a tiered handle (`ratecell_limiter_build` with tiers) of
/// `tiers` from the file at `path`.
fn restore_tiered(
    path: &Path,
    tiers: &[&[Config]],
    clock: ratecell_clock,
) -> Result<super::limiter::ratecell_limiter, SnapshotError> {
    let keyed = tiers
        .iter()
        .fold(KeyedLimiter::builder(), |b, tier| b.tier(tier))
        .clock(clock_of(clock))
        .load(path)?;
    Ok(super::limiter::ratecell_limiter {
        inner: Inner::Keyed(keyed),
        clock,
    })
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
/// limiter's clock: for limiters checked with the `_at` calls.
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

/// Builds a limiter from the snapshot file at `path`, with the
/// configuration saved in it (every limit, for a limiter of several: the
/// result is as `ratecell_limiter_build` makes it; every tier, for a
/// tiered limiter), on the TSC clock,
/// and writes its handle to `*out`. The saved configuration sizes the table, as one passed to
/// `ratecell_limiter_new` would: restore this way only files you would
/// take a configuration from; `ratecell_limiter_restore_config` refuses
/// any snapshot that does not fit the caller's configuration before
/// allocating anything.
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT`,
/// `RATECELL_SNAPSHOT_NOT_FOUND`, `RATECELL_SNAPSHOT_IO`,
/// `RATECELL_SNAPSHOT_DAMAGED`, `RATECELL_SNAPSHOT_VERSION`, an
/// `RATECELL_INVALID_*` status for an invalid saved configuration, or
/// `RATECELL_OUT_OF_MEMORY`. On failure `*out` is left unchanged.
///
/// Ownership: the caller owns the new limiter and releases it with
/// `ratecell_limiter_free`. Thread-safe.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or points to a
/// writable `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_restore(
    path: *const c_char,
    out: *mut *mut super::limiter::ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let (tiers, tiered) = match std::fs::File::open(&path)
            .map_err(SnapshotError::from)
            .and_then(|f| saved_tiers(io::BufReader::new(f)))
        {
            Ok(saved) => saved,
            Err(e) => return status(&e),
        };
        let tsc = ratecell_clock::RATECELL_CLOCK_TSC;
        let restored = if tiered {
            let rows: Vec<&[Config]> = tiers.iter().map(Vec::as_slice).collect();
            restore_tiered(&path, &rows, tsc)
        } else {
            restore(&path, &tiers[0], tsc)
        };
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish_restored(restored, out) }
    }
}

/// Builds a limiter of configuration `*cfg` (its clock included) from the
/// snapshot file at `path` and writes its handle to `*out`. A snapshot of
/// another configuration is refused with
/// `RATECELL_SNAPSHOT_CONFIG_MISMATCH` before anything is allocated (the
/// overflow policy and the clock are the caller's to choose; a burst of 0
/// equals a burst of `limit`).
///
/// Returns the statuses of `ratecell_limiter_restore`, the
/// `RATECELL_INVALID_*` status naming an invalid field of `*cfg`, or
/// `RATECELL_SNAPSHOT_CONFIG_MISMATCH`. On failure `*out` is left
/// unchanged. Ownership as for `ratecell_limiter_new`. Thread-safe.
///
/// # Safety
/// `cfg` is NULL or points to a readable `ratecell_config`; `path` is NULL
/// or a NUL-terminated string; `out` is NULL or points to a writable
/// `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_restore_config(
    cfg: *const ratecell_config,
    path: *const c_char,
    out: *mut *mut super::limiter::ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        if cfg.is_null() {
            return RATECELL_NULL_ARGUMENT;
        }
        // SAFETY: non-NULL and readable, as promised; every field is an
        // integer, so any bit pattern is a valid value.
        let (config, clock) = try_status!(unsafe { cfg.read() }.to_rust());
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let restored = restore(&path, &[config], clock);
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish_restored(restored, out) }
    }
}

/// `ratecell_limiter_restore_config` for a limiter of several limits
/// (`ratecell_options.n_limits` > 1): builds the limiter of `configs[0..n]`
/// from the snapshot file at `path`. The snapshot must hold the same
/// limits in the same order; otherwise `RATECELL_SNAPSHOT_CONFIG_MISMATCH`
/// before anything is allocated. `n` = 1 is `ratecell_limiter_restore_config`.
///
/// Returns the statuses of `ratecell_limiter_restore_config`, and those of
/// `ratecell_limiter_build` for invalid `configs`. On failure `*out` is
/// left unchanged. Ownership as for `ratecell_limiter_new`. Thread-safe.
///
/// # Safety
/// `configs` is NULL or points to `n` readable configs; `path` is NULL or
/// a NUL-terminated string; `out` is NULL or points to a writable
/// `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_restore_multi(
    configs: *const ratecell_config,
    n: usize,
    path: *const c_char,
    out: *mut *mut super::limiter::ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: as promised by the caller.
        let (configs, clock) = try_status!(unsafe { configs_arg(configs, n) });
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let restored = restore(&path, &configs, clock);
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish_restored(restored, out) }
    }
}

/// `ratecell_limiter_restore_config` for a tiered limiter
/// (`ratecell_options.n_tiers` ≥ 1): builds the limiter of
/// `n_tiers` tiers of `n_limits` limits, `configs` tier by tier, from the
/// snapshot file at `path`. The snapshot must hold the same tiers of the
/// same limits in the same order; otherwise
/// `RATECELL_SNAPSHOT_CONFIG_MISMATCH` before anything is allocated (a
/// snapshot of a limiter made without tiers is refused so too).
///
/// Returns the statuses of `ratecell_limiter_restore_config`, and those of
/// `ratecell_limiter_build` for invalid `configs`. On failure
/// `*out` is left unchanged. Ownership as for `ratecell_limiter_new`.
/// Thread-safe.
///
/// # Safety
/// `configs` is NULL or points to `n_limits * n_tiers` readable configs;
/// `path` is NULL or a NUL-terminated string; `out` is NULL or points to
/// a writable `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_restore_tiered(
    configs: *const ratecell_config,
    n_limits: usize,
    n_tiers: usize,
    path: *const c_char,
    out: *mut *mut super::limiter::ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: as promised by the caller.
        let (configs, clock) = try_status!(unsafe { tiers_arg(configs, n_limits, n_tiers) });
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let rows: Vec<&[Config]> = configs.chunks(n_limits).collect();
        let restored = restore_tiered(&path, &rows, clock);
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish_restored(restored, out) }
    }
}

/// A limiter saved to a file periodically by a background thread.
///
/// Opaque; made by `ratecell_persisted_open*`, stopped and released by
/// `ratecell_persisted_close`. Its limiter (`ratecell_persisted_limiter`)
/// is used like any other from any number of threads, until the close.
pub struct ratecell_persisted {
    inner: Persisted<super::limiter::ratecell_limiter>,
}

/// Restores a limiter of configuration `*cfg` from the snapshot file at
/// `path` if the file exists (else makes it fresh), and starts a thread
/// that saves it there atomically every `every_ns` nanoseconds (at least
/// 1 ms). Writes the handle to `*out`. Crash-safe limits in one call: a
/// process killed at any moment leaves the last whole snapshot.
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT`, the statuses of
/// `ratecell_limiter_restore_config` for a file that exists but cannot be
/// restored (remove it, or use another path, to start afresh), or
/// `RATECELL_SNAPSHOT_IO` when the thread cannot start. On failure `*out`
/// is left unchanged. Ownership: release with `ratecell_persisted_close`.
/// Thread-safe.
///
/// # Safety
/// `cfg` is NULL or points to a readable `ratecell_config`; `path` is NULL
/// or a NUL-terminated string; `out` is NULL or points to a writable
/// `ratecell_persisted *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_persisted_open(
    cfg: *const ratecell_config,
    path: *const c_char,
    every_ns: u64,
    out: *mut *mut ratecell_persisted,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        if cfg.is_null() {
            return RATECELL_NULL_ARGUMENT;
        }
        // SAFETY: non-NULL and readable, as promised.
        let (config, clock) = try_status!(unsafe { cfg.read() }.to_rust());
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let opened = open_multi(&[config], clock, &path, every_ns);
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish_persisted(opened, out) }
    }
}

/// `ratecell_persisted_open` for a limiter of several limits checked as
/// one (`ratecell_options.n_limits` > 1): restores `configs[0..n]`'s limiter
/// from `path` if the file exists (the same limits in the same order, else
/// `RATECELL_SNAPSHOT_CONFIG_MISMATCH`), else makes it fresh, and saves it
/// there every `every_ns`. `n` = 1 is `ratecell_persisted_open`.
///
/// Returns the statuses of `ratecell_persisted_open`, and those of
/// `ratecell_limiter_build` for invalid `configs`. On failure `*out`
/// is left unchanged. Ownership: release with `ratecell_persisted_close`.
/// Thread-safe.
///
/// # Safety
/// `configs` is NULL or points to `n` readable configs; `path` is NULL or
/// a NUL-terminated string; `out` is NULL or points to a writable
/// `ratecell_persisted *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_persisted_open_multi(
    configs: *const ratecell_config,
    n: usize,
    path: *const c_char,
    every_ns: u64,
    out: *mut *mut ratecell_persisted,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: as promised by the caller.
        let (configs, clock) = try_status!(unsafe { configs_arg(configs, n) });
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let opened = open_multi(&configs, clock, &path, every_ns);
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish_persisted(opened, out) }
    }
}

/// `ratecell_persisted_open` for a tiered limiter
/// (`ratecell_options.n_tiers` ≥ 1): restores the limiter of
/// `n_tiers` tiers of `n_limits` limits, `configs` tier by tier, from
/// `path` if the file exists, else makes it fresh, and saves it there
/// every `every_ns` with every tier. A file of other tiers, another number
/// of them, or of a limiter made without tiers is refused with
/// `RATECELL_SNAPSHOT_CONFIG_MISMATCH` (as `ratecell_limiter_restore_tiered`
/// refuses it) before anything is allocated. Every check on its limiter
/// may name a tier (`ratecell_request.tier`, `ratecell_batch.tiers`).
///
/// Returns the statuses of `ratecell_persisted_open`, and those of
/// `ratecell_limiter_build` for invalid `configs` or counts.
/// On failure `*out` is left unchanged. Ownership: release with
/// `ratecell_persisted_close`. Thread-safe.
///
/// # Safety
/// `configs` is NULL or points to `n_limits * n_tiers` readable configs;
/// `path` is NULL or a NUL-terminated string; `out` is NULL or points to
/// a writable `ratecell_persisted *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_persisted_open_tiered(
    configs: *const ratecell_config,
    n_limits: usize,
    n_tiers: usize,
    path: *const c_char,
    every_ns: u64,
    out: *mut *mut ratecell_persisted,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: as promised by the caller.
        let (configs, clock) = try_status!(unsafe { tiers_arg(configs, n_limits, n_tiers) });
        // SAFETY: as promised by the caller.
        let path = try_status!(unsafe { path_arg(path) });
        let rows: Vec<&[Config]> = configs.chunks(n_limits).collect();
        let opened = Persisted::open_or_build(
            &path,
            Duration::from_nanos(every_ns),
            |path| restore_tiered(path, &rows, clock),
            || {
                rows.iter()
                    .fold(KeyedLimiter::builder().clock(clock_of(clock)), |b, tier| {
                        b.tier(tier)
                    })
                    .build()
                    .map(|k| super::limiter::ratecell_limiter {
                        inner: Inner::Keyed(k),
                        clock,
                    })
            },
        );
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish_persisted(opened, out) }
    }
}

/// A persisted handle of `configs` (one limit, or several as one),
/// restored from `path` or made fresh, saving every `every_ns`.
fn open_multi(
    configs: &[Config],
    clock: ratecell_clock,
    path: &Path,
    every_ns: u64,
) -> Result<Persisted<super::limiter::ratecell_limiter>, SnapshotError> {
    Persisted::open_or_build(
        path,
        Duration::from_nanos(every_ns),
        |path| restore(path, configs, clock),
        || {
            build_multi(configs, clock)
                .map(|inner| super::limiter::ratecell_limiter { inner, clock })
        },
    )
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
/// `persisted` is NULL or a live handle from `ratecell_persisted_open*`.
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

/// A direct or keyed limiter of `configs` (1 to `RATECELL_MAX_LIMITS`) as
/// one, on the clock `clock_kind` names (a restored snapshot's limits).
fn build_multi(
    configs: &[Config],
    clock_kind: ratecell_clock,
) -> Result<Inner, ratecell_lib::Error> {
    AnyLimiter::builder()
        .limits(configs)
        .clock(clock_of(clock_kind))
        .build()
}

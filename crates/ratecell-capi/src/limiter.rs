//! The opaque `ratecell_limiter` handle and every exported function that
//! takes one.
//!
//! A handle holds an [`AnyLimiter`](ratecell_lib::AnyLimiter): a direct
//! [`Limiter`](ratecell_lib::Limiter) (capacity 0: one shared state, keys ignored)
//! or a `KeyedLimiter` (capacity > 0); a persisted one also the thread that
//! saves it.

use super::types::{ratecell_clock, ratecell_config, ratecell_stats, ratecell_status};
use crate::ptr::{into_raw, out_ptr};
use ratecell_lib::{AnyLimiter, Clock, Config, Persisted};
use std::ops::Deref;

use ratecell_status::*;

/// A rate limiter: one shared state (configured capacity 0, every key
/// ignored) or one state per key (capacity > 0).
///
/// Opaque; made by `ratecell_limiter_new` or `ratecell_limiter_build`,
/// released by `ratecell_limiter_free`. Thread-safe: any number of threads may call
/// any function on the same limiter at once, except `ratecell_limiter_free`,
/// which must be the last call on it.
pub struct ratecell_limiter {
    pub(super) inner: Held,
    pub(super) clock: ratecell_clock,
}

/// The library's own direct-or-keyed limiter, as a handle's functions
/// match on it.
pub(super) type Inner = AnyLimiter;

/// What a handle holds: the limiter, or a persisted one (which owns the
/// thread that saves it, stopped and joined, with a last save, when the
/// handle is freed). Dereferences to the limiter.
// Boxed once, in the handle: boxing the limiter too would add a pointer
// chase to every check.
#[allow(clippy::large_enum_variant)]
pub(super) enum Held {
    Plain(AnyLimiter),
    Persisted(Persisted<AnyLimiter>),
}

impl Deref for Held {
    type Target = AnyLimiter;

    #[inline]
    fn deref(&self) -> &AnyLimiter {
        match self {
            Held::Plain(l) => l,
            Held::Persisted(p) => p,
        }
    }
}

/// The limiter behind a handle, or `RATECELL_NULL_ARGUMENT`.
///
/// # Safety
/// A non-NULL `limiter` came from `ratecell_limiter_new` or
/// `ratecell_limiter_build` and was not freed.
pub(super) unsafe fn handle<'a>(
    limiter: *const ratecell_limiter,
) -> Result<&'a ratecell_limiter, ratecell_status> {
    // SAFETY: the caller promises a live handle (or NULL, refused here).
    unsafe { limiter.as_ref() }.ok_or(RATECELL_NULL_ARGUMENT)
}

/// Writes an out-parameter the caller has already checked for NULL.
///
/// # Safety
/// `out` is non-NULL and points to a writable `T`.
pub(super) unsafe fn put<T>(out: *mut T, value: T) {
    // SAFETY: as promised by the caller.
    unsafe { out.write(value) }
}

/// Checks `*cfg` and makes a limiter, writing its handle to `*out`.
///
/// Capacity 0 makes a limiter with one shared state (every key argument is
/// ignored); capacity > 0 a per-key table of that many keys, allocated here
/// and never grown.
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT`, the
/// `RATECELL_INVALID_*` status naming the first invalid field (the enum
/// fields algorithm, overflow and clock first, then limit, period_ns,
/// burst, sub_windows, capacity), or `RATECELL_OUT_OF_MEMORY`. On failure
/// `*out` is left unchanged.
///
/// Ownership: the caller owns the new limiter and must release it with
/// `ratecell_limiter_free`. `*cfg` is only read during the call.
/// Thread-safe.
///
/// # Safety
/// `cfg` is NULL or points to a readable `ratecell_config`; `out` is NULL
/// or points to a writable `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_new(
    cfg: *const ratecell_config,
    out: *mut *mut ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        let cfg = try_read!(cfg);
        let (config, clock_kind) = try_status!(cfg.to_rust());
        let inner = try_status!(build(config, clock_kind));
        // SAFETY: `out` is non-NULL and, as the caller promises, writable.
        unsafe { publish(inner, clock_kind, out) }
    }
}

/// The clock a configuration's `clock` field names.
pub(super) fn clock_of(kind: ratecell_clock) -> Clock {
    match kind {
        ratecell_clock::RATECELL_CLOCK_TSC => Clock::tsc(),
        ratecell_clock::RATECELL_CLOCK_COARSE => Clock::coarse(),
    }
}

/// A direct limiter for `config` when its capacity is 0, else a keyed one.
pub(super) fn build(config: Config, clock_kind: ratecell_clock) -> Result<Held, ratecell_status> {
    let built = AnyLimiter::builder()
        .limit(config)
        .clock(clock_of(clock_kind))
        .build();
    built
        .map(Held::Plain)
        .map_err(|e| crate::snapshot::status(&e))
}

/// Moves a new limiter to the heap and writes its handle to `*out`.
///
/// # Safety
/// `out` is non-NULL and writable.
pub(super) unsafe fn publish(
    inner: Held,
    clock_kind: ratecell_clock,
    out: *mut *mut ratecell_limiter,
) -> ratecell_status {
    let ptr = try_status!(into_raw(ratecell_limiter {
        inner,
        clock: clock_kind,
    }));
    // SAFETY: `out` is non-NULL and writable, as promised.
    unsafe { put(out, ptr) };
    RATECELL_OK
}

/// Releases a limiter made by `ratecell_limiter_new` or
/// `ratecell_limiter_build`. NULL is a no-op. A persisted limiter
/// (`RATECELL_STATES_PERSISTED`) first stops its saving thread and saves a
/// last time, unless `ratecell_snapshot_stop` did (which returns that
/// save's status: call it first to learn it).
///
/// Must be the last call on `limiter`: no other thread may be using it, and
/// it must not be used or freed again afterwards.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_free(limiter: *mut ratecell_limiter) {
    ffi_panic_boundary! {
        // SAFETY: NULL or a live handle, as the caller promises.
        unsafe { crate::ptr::free_raw(limiter) }
    }
}

/// Copies the limiter's configuration to `*out` (its first limit's, as
/// given or restored; a burst of 0 stays 0).
///
/// Returns `RATECELL_OK` or `RATECELL_NULL_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or points to a
/// writable `ratecell_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_config(
    limiter: *const ratecell_limiter,
    out: *mut ratecell_config,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        answer!(out, ratecell_config::from_rust(l.inner.config(), l.clock))
    }
}

/// The limiter's current time in UNIX nanoseconds (what `ratecell_check`
/// uses). Returns 0 when `limiter` is NULL. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_now_ns(limiter: *const ratecell_limiter) -> u64 {
    ffi_panic_boundary! {
        // SAFETY: the caller promises a live handle or NULL.
        match unsafe { handle(limiter) } {
            Ok(l) => l.inner.now_ns(),
            Err(_) => 0,
        }
    }
}

/// Writes a snapshot of the limiter's counters to `*out`.
///
/// Returns `RATECELL_OK` or `RATECELL_NULL_ARGUMENT`. Thread-safe (the
/// snapshot is approximate while other threads check).
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or points to a
/// writable `ratecell_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_stats(
    limiter: *const ratecell_limiter,
    out: *mut ratecell_stats,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        answer!(out, l.inner.stats().into())
    }
}

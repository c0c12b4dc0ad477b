//! `ratecell_denials`: `cached_deny`'s memory (SPEC §8) for C and every
//! binding that brings its own Redis client: the denials Redis gave, per
//! key, answered here until their `retry_after`. Its calls take the
//! request of the check (`ratecell_request`), whose time is the time.

use super::limiter::clock_of;
use super::request::read_key;
use super::types::{ratecell_clock, ratecell_decision, ratecell_status};
use crate::ptr::{into_raw, out_ptr};
use ratecell_lib::lease::DenialCache;
use ratecell_lib::{Clock, Decision, Key};

use ratecell_status::*;

/// `cached_deny`'s memory: denials Redis gave, per key, kept until their
/// `retry_after`. Opaque; made by `ratecell_denials_new`, released by
/// `ratecell_denials_free`. Thread-safe, but for `ratecell_denials_free`.
pub struct ratecell_denials {
    cache: DenialCache,
    clock: Clock,
}

/// Makes a cache of denials for up to about `capacity` keys denied at once
/// (0: 65,536; a key beyond it is not remembered), reading the clock
/// `clock` (a `RATECELL_CLOCK_*`) for a time of `RATECELL_NOW`, and writes
/// its handle to `*out`.
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT`,
/// `RATECELL_INVALID_CAPACITY` (above 2^40 keys) or
/// `RATECELL_INVALID_CLOCK`. Release it with `ratecell_denials_free`.
///
/// # Safety
/// `out` is NULL or points to a writable `ratecell_denials *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_denials_new(
    capacity: u64,
    clock: u32,
    out: *mut *mut ratecell_denials,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        if capacity > 1 << 40 {
            return RATECELL_INVALID_CAPACITY;
        }
        let clock = match clock {
            0 => ratecell_clock::RATECELL_CLOCK_TSC,
            1 => ratecell_clock::RATECELL_CLOCK_COARSE,
            _ => return RATECELL_INVALID_CLOCK,
        };
        let handle = try_status!(into_raw(ratecell_denials {
            cache: DenialCache::new(capacity),
            clock: clock_of(clock),
        }));
        // SAFETY: non-NULL and writable, as the caller promises.
        unsafe { out.write(handle) };
        RATECELL_OK
    }
}

/// Releases a denial cache. NULL is a no-op.
///
/// # Safety
/// `denials` is NULL or a live handle, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_denials_free(denials: *mut ratecell_denials) {
    ffi_panic_boundary! {
        // SAFETY: NULL or a live handle, as the caller promises.
        unsafe { crate::ptr::free_raw(denials) }
    }
}

/// The key and time of a request for a denial cache: its `at_ns`, or the
/// cache's clock for `RATECELL_NOW`.
///
/// # Safety
/// `request` is NULL or points to a readable `ratecell_request` whose key
/// bytes stay valid for `'a`.
unsafe fn denial_request<'a>(
    c: &ratecell_denials,
    request: *const super::ratecell_request,
) -> Result<(Key<'a>, u64), ratecell_status> {
    // SAFETY: as promised by the caller.
    let (key, r) = unsafe { read_key(request) }?;
    let now = match r.at_ns {
        super::RATECELL_NOW => c.clock.now_ns(),
        at => at,
    };
    Ok((key, now))
}

/// Whether `*request`'s key has a remembered denial still running at the
/// request's time (its `at_ns`, or the cache's clock for `RATECELL_NOW`):
/// writes `true` to `*found_out` and that denial to `*out` (its
/// `retry_after_ns` and `reset_after_ns` reduced by the time since), or
/// `false` when there is none (ask Redis; `*out` is not written). The cost
/// and tier are not read.
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` for a NULL `denials`,
/// `request`, `found_out` or `out`; `RATECELL_INVALID_LENGTH` for an
/// unknown `size` or a `key_len` above `PTRDIFF_MAX`. No failed call
/// writes anything. Thread-safe.
///
/// # Safety
/// `denials` is NULL or a live handle; `request` as for
/// `ratecell_leases_check`; `found_out` is NULL or points to a writable
/// `bool`; `out` is NULL or points to a writable `ratecell_decision`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_denials_check(
    denials: *const ratecell_denials,
    request: *const super::ratecell_request,
    found_out: *mut bool,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let c = try_ref!(denials);
        // SAFETY: as promised by the caller.
        let (key, now) = try_status!(unsafe { denial_request(c, request) });
        let found_out = try_status!(out_ptr(found_out));
        let out = try_status!(out_ptr(out));
        let found = c.cache.check(key, 1, now);
        if let Some(d) = &found {
            // SAFETY: non-NULL and writable, as the caller promises.
            unsafe { ratecell_decision::write_fields(out, d) };
        }
        // SAFETY: non-NULL and writable, as the caller promises.
        unsafe { found_out.write(found.is_some()) };
        RATECELL_OK
    }
}

/// Remembers Redis's `*decision` for `*request`'s key, made at the
/// request's time (its `at_ns`, or the cache's clock for `RATECELL_NOW`),
/// when it is a denial that a wait can end (an admission, or a
/// `retry_after_ns` of `UINT64_MAX`, is not remembered).
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT`, or
/// `RATECELL_INVALID_LENGTH` as `ratecell_denials_check`. Thread-safe.
///
/// # Safety
/// `denials` is NULL or a live handle; `request` as for
/// `ratecell_leases_check`; `decision` is NULL or points to a readable
/// `ratecell_decision`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_denials_remember(
    denials: *const ratecell_denials,
    request: *const super::ratecell_request,
    decision: *const ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let c = try_ref!(denials);
        // SAFETY: as promised by the caller.
        let (key, now) = try_status!(unsafe { denial_request(c, request) });
        if decision.is_null() {
            return RATECELL_NULL_ARGUMENT;
        }
        // SAFETY: non-NULL and readable, as the caller promises. `allowed`
        // is read as its byte: a C caller may have put any value in it,
        // and a Rust bool must be 0 or 1.
        let allowed = unsafe { std::ptr::addr_of!((*decision).allowed).cast::<u8>().read() };
        // SAFETY: as above; the other fields are integers, any bits valid.
        let d = unsafe {
            Decision {
                allowed: allowed != 0,
                limit: std::ptr::addr_of!((*decision).limit).read(),
                remaining: std::ptr::addr_of!((*decision).remaining).read(),
                retry_after_ns: std::ptr::addr_of!((*decision).retry_after_ns).read(),
                reset_after_ns: std::ptr::addr_of!((*decision).reset_after_ns).read(),
                wait_ns: std::ptr::addr_of!((*decision).wait_ns).read(),
            }
        };
        c.cache.remember(key, 1, &d, now);
        RATECELL_OK
    }
}

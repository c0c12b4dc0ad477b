//! The exported functions that need no limiter: configuration defaults,
//! names of statuses and algorithms, and the library version.

use super::types::{ratecell_algorithm_raw, ratecell_config, ratecell_status};
use crate::ptr::{input, out_ptr};
use ratecell_lib::Algorithm;
use std::ffi::c_char;

/// Fills `*cfg` with the defaults for `(algorithm, limit, period_ns)`:
/// burst = limit, sub_windows = 10 when 10 divides `period_ns` (else 1),
/// capacity 0, overflow `RATECELL_OVERFLOW_DENY`, clock
/// `RATECELL_CLOCK_TSC`. Nothing is validated here; `ratecell_limiter_new`
/// does that.
///
/// Burst is written as the value of `limit`: if you change `limit`
/// afterwards, set `burst` too (0 also means "same as limit").
///
/// A NULL `cfg` is a no-op. Thread-safe; `*cfg` is the caller's.
///
/// # Safety
/// `cfg` is NULL or points to a writable `ratecell_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_config_init(
    cfg: *mut ratecell_config,
    algorithm: ratecell_algorithm_raw,
    limit: u64,
    period_ns: u64,
) {
    ffi_panic_boundary! {
        if let Ok(cfg) = out_ptr(cfg) {
            // SAFETY: non-NULL, and the caller promises it is writable.
            unsafe { cfg.write(ratecell_config::new(algorithm, limit, period_ns)) };
        }
    }
}

/// A static, NUL-terminated English description of `status` (never NULL;
/// "unknown status" for a value that is no `RATECELL_*` status). The string
/// is owned by the library and must not be freed. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn ratecell_status_str(status: ratecell_status_raw) -> *const c_char {
    ffi_panic_boundary! {
        let text: &'static [u8] = ratecell_status::from_u32(status)
            .map_or(b"unknown status\0", |s| s.c_description());
        text.as_ptr().cast()
    }
}

/// The Rust side of a `ratecell_status` passed in from C: any integer.
/// Printed as `ratecell_status` in the header (see `cbindgen.toml`).
pub type ratecell_status_raw = u32;

/// The library version, e.g. "0.1.0": static, NUL-terminated, owned by the
/// library. It equals `RATECELL_VERSION_MAJOR.MINOR.PATCH` of the header
/// the program was compiled with when the two match. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn ratecell_version() -> *const c_char {
    ffi_panic_boundary! {
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
    }
}

/// The SPEC name of `algorithm` ("gcra", "leaky_bucket", "token_bucket",
/// "fixed_window", "sliding_window", "bucketed_window", "sliding_log"):
/// static, NUL-terminated, owned by the library. NULL when `algorithm` is
/// not a `RATECELL_ALGORITHM_*` value. Thread-safe.
#[unsafe(no_mangle)]
pub extern "C" fn ratecell_algorithm_name(algorithm: ratecell_algorithm_raw) -> *const c_char {
    ffi_panic_boundary! {
        let Some(algorithm) = Algorithm::from_u32(algorithm) else {
            return std::ptr::null();
        };
        let name: &'static [u8] = match algorithm {
            Algorithm::Gcra => b"gcra\0",
            Algorithm::LeakyBucket => b"leaky_bucket\0",
            Algorithm::TokenBucket => b"token_bucket\0",
            Algorithm::FixedWindow => b"fixed_window\0",
            Algorithm::SlidingWindow => b"sliding_window\0",
            Algorithm::BucketedWindow => b"bucketed_window\0",
            Algorithm::SlidingLog => b"sliding_log\0",
        };
        debug_assert_eq!(&name[..name.len() - 1], algorithm.name().as_bytes());
        name.as_ptr().cast()
    }
}

/// Looks up an algorithm by its SPEC name (`name_len` bytes, no NUL
/// needed; "-" is accepted for "_") and writes it to `*out`.
///
/// Returns `RATECELL_UNKNOWN_ALGORITHM` when the name names none,
/// `RATECELL_NULL_ARGUMENT` when `out` is NULL or `name` is NULL with a
/// non-zero length. Thread-safe.
///
/// # Safety
/// `name` points to `name_len` readable bytes (or is NULL); `out` is NULL
/// or points to a writable `ratecell_algorithm`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_algorithm_from_name(
    name: *const u8,
    name_len: usize,
    out: *mut ratecell_algorithm_raw,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: the caller promises `name_len` readable bytes.
        let name = try_status!(unsafe { input(name, name_len) });
        let algorithm = std::str::from_utf8(name).ok().and_then(Algorithm::from_name);
        let Some(algorithm) = algorithm else {
            return ratecell_status::RATECELL_UNKNOWN_ALGORITHM;
        };
        // SAFETY: non-NULL, and the caller promises it is writable.
        unsafe { out.write(algorithm as u32) };
        ratecell_status::RATECELL_OK
    }
}

//! `ratecell_options`: every limiter the C ABI makes beyond
//! `ratecell_limiter_new` (several limits, tiers, a shared region), as the
//! Rust `Builder` makes them: fresh (`ratecell_limiter_build`), from a
//! snapshot (`ratecell_limiter_restore`) or saved periodically
//! (`ratecell_persisted_open`), all three reading the options here.

use super::limiter::{clock_of, publish, ratecell_limiter};
use super::multi::configs_arg;
use super::tiers::tiers_arg;
use super::types::{ratecell_clock, ratecell_config, ratecell_status};
use crate::ptr::{out_ptr, path_arg};
use ratecell_lib::{AnyLimiter, Builder, SharedOptions};
use std::ffi::c_char;

/// What `ratecell_limiter_build` makes, `ratecell_limiter_restore`
/// restores and `ratecell_persisted_open` opens: one struct for every way
/// of making a limiter, so that a new option is a new field, not a new
/// function. Set it up with `ratecell_options_init`, then set what
/// differs.
///
/// `configs` holds `n_limits` configs (tier 0's limits) when `n_tiers` is
/// 0, else `n_tiers` rows of `n_limits` configs, tier by tier (tier `t`'s
/// limit `i` is `configs[t * n_limits + i]`): every tier lists the same
/// limits in the same order, with its own values.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratecell_options {
    /// `sizeof(ratecell_options)` as the caller was compiled with; a size
    /// this library does not know is `RATECELL_INVALID_LENGTH`.
    pub size: u32,
    /// The permission bits of a shared region this call creates (exactly
    /// `mode & 07777`; the umask is not applied); 0 for 0600. An existing
    /// region keeps its mode.
    pub shared_mode: u32,
    /// The limits' configs (see above).
    pub configs: *const ratecell_config,
    /// Limits per tier, 1 to `RATECELL_MAX_LIMITS`: a request is admitted
    /// only when every one admits it, and only then is anything stored.
    pub n_limits: usize,
    /// Tiers, 0 (none: one list of limits) to `RATECELL_MAX_TIERS`.
    pub n_tiers: usize,
    /// NULL, or the file whose region holds the table, shared by every
    /// process that opens it (a name without `/` lies under `/dev/shm`).
    /// `ratecell_limiter_build` only: `ratecell_limiter_restore` and
    /// `ratecell_persisted_open` refuse it with
    /// `RATECELL_SHARED_UNSUPPORTED` (a region outlives its processes).
    pub shared_path: *const c_char,
}

/// Sets `*options` to one limit (`configs` NULL, to be set), no tiers, not
/// shared, and its size. Does nothing when `options` is NULL.
///
/// # Safety
/// `options` is NULL or points to a writable `ratecell_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_options_init(options: *mut ratecell_options) {
    ffi_panic_boundary! {
        if !options.is_null() {
            // SAFETY: non-NULL and writable, as the caller promises.
            unsafe {
                options.write(ratecell_options {
                    size: size_of::<ratecell_options>() as u32,
                    shared_mode: 0,
                    configs: std::ptr::null(),
                    n_limits: 1,
                    n_tiers: 0,
                    shared_path: std::ptr::null(),
                });
            }
        }
    }
}

/// Makes the limiter `*options` describes and writes its handle to `*out`:
///
/// - **Several limits** (`n_limits` > 1), any algorithms mixed, checked as
///   one: a request is admitted only when every limit admits it. Every
///   check returns the combined decision (see `ratecell_multi_decision`);
///   `ratecell_check_each` also returns each limit's. All configs share
///   one capacity (0: one shared state; > 0: a table of that many keys),
///   one overflow policy and one clock.
/// - **Tiers** (`n_tiers` ≥ 1): a keyed limiter serving a quota per tier
///   (free, paid, internal...); each request names its key's tier
///   (`ratecell_request.tier`), tier 0 by default. A key whose tier
///   changes keeps its state, read by its new tier's limits (the
///   carry-over rules of docs/ALGORITHMS.md, "A quota per tier"), so tiers
///   may differ in limit, burst and the period of gcra, leaky_bucket and
///   token_bucket, not in algorithm, a window's period, sub_windows, a
///   sliding_log's limit, capacity, overflow or clock. A tiered limiter
///   cannot be reconfigured live.
/// - **Shared** (`shared_path` not NULL): the table lies in that file,
///   shared by every process that opens it: one limit across the processes
///   of a machine. One keyed limit (capacity ≥ 1) of a word algorithm
///   (gcra, leaky_bucket, token_bucket, fixed_window, sliding_window), no
///   tiers. `configs[0].clock` picks this process's clock:
///   `RATECELL_CLOCK_TSC` reads the calibration stored in the region, so
///   every process reads the same time. `ratecell_limiter_free` unmaps it
///   and never removes the file (docs/SHARED.md: lifecycle).
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `options`, `out`
/// or `configs` is NULL; `RATECELL_INVALID_LENGTH` for a `size` this
/// library does not know, or `n_limits` or `n_tiers` out of range; the
/// `RATECELL_INVALID_*` status naming the first invalid field of the first
/// invalid config, or the field in which a config differs from the first
/// where it may not (`RATECELL_INVALID_CLOCK` for another clock,
/// `RATECELL_INVALID_CAPACITY` for a tiered capacity 0); one of the
/// `RATECELL_SHARED_*` statuses for a shared region (the file, its version
/// or configuration, the platform; `RATECELL_SHARED_UNSUPPORTED` for
/// several limits or tiers); or `RATECELL_OUT_OF_MEMORY`. On failure
/// `*out` is left unchanged.
///
/// Ownership: the caller owns the new limiter and must release it with
/// `ratecell_limiter_free`; `*options` and what it points to are only
/// read during the call. Thread-safe, and a shared region safe for
/// several processes at once.
///
/// # Safety
/// `options` is NULL or points to a readable `ratecell_options` whose
/// `configs` points to its `n_limits * max(n_tiers, 1)` readable configs
/// and whose `shared_path` is NULL or NUL-terminated; `out` is NULL or
/// points to a writable `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_build(
    options: *const ratecell_options,
    out: *mut *mut ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: as promised by the caller.
        let (builder, clock_kind) = try_status!(unsafe { builder_of(options) });
        let inner = try_status!(builder.build().map_err(|e| ratecell_status::from_error(&e)));
        // SAFETY: `out` is non-NULL and, as the caller promises, writable.
        unsafe { publish(inner, clock_kind, out) }
    }
}

/// The builder `*options` describes, and the clock its configs name: the
/// one reading of a `ratecell_options` (its size, counts, configs, clock
/// and shared region), for every function that takes one
/// (`ratecell_limiter_build`, `ratecell_limiter_restore`,
/// `ratecell_persisted_open`). Returns the status of the first thing
/// wrong, as `ratecell_limiter_build` documents.
///
/// # Safety
/// As `ratecell_limiter_build`'s `options`.
pub(super) unsafe fn builder_of(
    options: *const ratecell_options,
) -> Result<(Builder<AnyLimiter>, ratecell_clock), ratecell_status> {
    // SAFETY: as promised by the caller.
    let o = unsafe { super::request::read_sized(options) }?;
    // SAFETY: as promised by the caller.
    let (configs, clock_kind) = unsafe {
        if o.n_tiers == 0 {
            configs_arg(o.configs, o.n_limits)
        } else {
            tiers_arg(o.configs, o.n_limits, o.n_tiers)
        }
    }?;
    let mut builder = AnyLimiter::builder();
    if o.n_tiers == 0 {
        builder = builder.limits(&configs);
    } else {
        for tier in configs.chunks(o.n_limits) {
            builder = builder.tier(tier);
        }
    }
    if o.shared_path.is_null() {
        builder = builder.clock(clock_of(clock_kind));
    } else {
        // SAFETY: NUL-terminated, as the caller promises.
        let path = unsafe { path_arg(o.shared_path) }?;
        let options = SharedOptions {
            mode: if o.shared_mode == 0 {
                0o600
            } else {
                o.shared_mode
            },
            coarse_clock: clock_kind == ratecell_clock::RATECELL_CLOCK_COARSE,
        };
        builder = builder.shared(path, options);
    }
    Ok((builder, clock_kind))
}

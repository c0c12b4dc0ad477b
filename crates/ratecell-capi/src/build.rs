//! `ratecell_options` and `ratecell_limiter_build`: every limiter the C ABI
//! makes beyond `ratecell_limiter_new`'s one limit (several limits, tiers),
//! wherever its states come from (fresh, a snapshot file, a persisted file,
//! a shared region), read into the Rust `Builder`, which resolves them.

use super::limiter::{Held, clock_of, publish, ratecell_limiter};
use super::multi::configs_arg;
use super::tiers::tiers_arg;
use super::types::{ratecell_clock, ratecell_config, ratecell_states, ratecell_status};
use crate::ptr::{out_ptr, path_arg};
use ratecell_lib::{AnyLimiter, Builder, SharedOptions, States};
use std::ffi::c_char;
use std::time::Duration;

use ratecell_states::*;
use ratecell_status::*;

/// What `ratecell_limiter_build` makes: one struct for every way of making
/// a limiter, so that a new option is a new field, not a new function. Set
/// it up with `ratecell_options_init`, then set what differs.
///
/// `configs` holds `n_limits` configs (tier 0's limits) when `n_tiers` is
/// 0, else `n_tiers` rows of `n_limits` configs, tier by tier (tier `t`'s
/// limit `i` is `configs[t * n_limits + i]`): every tier lists the same
/// limits in the same order, with its own values. With states from a
/// snapshot (`RATECELL_STATES_SNAPSHOT`, `RATECELL_STATES_PERSISTED`),
/// `n_limits` 0 (and `configs` NULL, `n_tiers` 0) takes the limits and
/// tiers saved in the file, on the TSC clock: the saved configuration then
/// sizes the table, so take it only from files you would take a
/// configuration from.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratecell_options {
    /// `sizeof(ratecell_options)` as the caller was compiled with; a size
    /// this library does not know is `RATECELL_INVALID_LENGTH`.
    pub size: u32,
    /// Where the states come from: a `ratecell_states` value
    /// (`RATECELL_STATES_FRESH` unless set).
    pub states: u32,
    /// The limits' configs (see above).
    pub configs: *const ratecell_config,
    /// Limits per tier, 1 to `RATECELL_MAX_LIMITS` (0 only to take a
    /// snapshot's): a request is admitted only when every one admits it,
    /// and only then is anything stored.
    pub n_limits: usize,
    /// Tiers, 0 (none: one list of limits) to `RATECELL_MAX_TIERS`.
    pub n_tiers: usize,
    /// The snapshot file: the states' (`RATECELL_STATES_SNAPSHOT`), the
    /// one restored if it exists and saved to (`RATECELL_STATES_PERSISTED`),
    /// or NULL or the one that fills a new region
    /// (`RATECELL_STATES_SHARED`). NULL for fresh states.
    pub path: *const c_char,
    /// `RATECELL_STATES_PERSISTED`: nanoseconds between two saves (at
    /// least 1 ms: less is 1 ms). 0 for any other states.
    pub save_every_ns: u64,
    /// `RATECELL_STATES_SHARED`: the file whose region holds the table,
    /// shared by every process that opens it (a name without `/` lies
    /// under `/dev/shm`). NULL for any other states.
    pub shared_path: *const c_char,
    /// `RATECELL_STATES_SHARED`: the permission bits of a region this call
    /// creates (exactly `mode & 07777`; the umask is not applied); 0 for
    /// 0600. An existing region keeps its mode.
    pub shared_mode: u32,
}

/// Sets `*options` to one limit (`configs` NULL, to be set), no tiers,
/// fresh states, and its size. Does nothing when `options` is NULL.
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
                    states: RATECELL_STATES_FRESH as u32,
                    configs: std::ptr::null(),
                    n_limits: 1,
                    n_tiers: 0,
                    path: std::ptr::null(),
                    save_every_ns: 0,
                    shared_path: std::ptr::null(),
                    shared_mode: 0,
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
/// - **States** (`states`, SPEC §2):
///   - `RATECELL_STATES_FRESH`: every key unused.
///   - `RATECELL_STATES_SNAPSHOT`: the states saved in the file `path`,
///     with its key hasher's seed, so every key finds the state it had.
///     The snapshot must hold the same limits in the same order (the same
///     tiers of them; a snapshot of a limiter made without tiers is no
///     tiered limiter's, nor the reverse), else
///     `RATECELL_SNAPSHOT_CONFIG_MISMATCH`, before anything is allocated;
///     the overflow policy and the clock are the caller's; a burst of 0
///     equals a burst of `limit`.
///   - `RATECELL_STATES_PERSISTED`: as `RATECELL_STATES_SNAPSHOT` when the
///     file `path` exists, else fresh (only a missing file starts fresh: a
///     damaged one, or one of another configuration, is an error); then a
///     background thread saves the limiter there atomically every
///     `save_every_ns`, so a process killed at any moment leaves the last
///     whole snapshot. `ratecell_snapshot_stop` stops the thread and saves
///     a last time, returning that save's status; `ratecell_limiter_free`
///     does the same when it has not been called, reporting to nobody.
///   - `RATECELL_STATES_SHARED`: the table lies in the file `shared_path`,
///     shared by every process that opens it: one limit across the
///     processes of a machine. One keyed limit (capacity ≥ 1) of a word
///     algorithm (gcra, leaky_bucket, token_bucket, fixed_window,
///     sliding_window), no tiers. `configs[0].clock` picks this process's
///     clock: `RATECELL_CLOCK_TSC` reads the calibration stored in the
///     region, so every process reads the same time. An existing region is
///     attached as it is; a new one is filled from the snapshot file `path`
///     when `path` is not NULL and the file exists (under a private name,
///     then linked: no process sees a half-filled region).
///     `ratecell_limiter_free` unmaps it and never removes the file
///     (docs/SHARED.md: lifecycle).
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `options`, `out`,
/// `configs` (with `n_limits` > 0), or the path the states need is NULL;
/// `RATECELL_INVALID_LENGTH` for a `size` this library does not know, or
/// `n_limits` or `n_tiers` out of range; `RATECELL_INVALID_STATES` for
/// `states` out of range or a field those states do not read set; the `RATECELL_INVALID_*` status
/// naming the first invalid field of the first invalid config, or the
/// field in which a config differs from the first where it may not
/// (`RATECELL_INVALID_CLOCK` for another clock, `RATECELL_INVALID_CAPACITY`
/// for a tiered capacity 0); `RATECELL_SNAPSHOT_NOT_FOUND`,
/// `RATECELL_SNAPSHOT_IO`, `RATECELL_SNAPSHOT_DAMAGED`,
/// `RATECELL_SNAPSHOT_VERSION` or `RATECELL_SNAPSHOT_CONFIG_MISMATCH` for a
/// snapshot that cannot be restored (`RATECELL_SNAPSHOT_IO` also when the
/// saving thread cannot start); one of the `RATECELL_SHARED_*` statuses
/// for a shared region (the file, its version or configuration, the
/// platform; `RATECELL_SHARED_UNSUPPORTED` for several limits or tiers);
/// or `RATECELL_OUT_OF_MEMORY`. On failure `*out` is left unchanged.
///
/// Ownership: the caller owns the new limiter and must release it with
/// `ratecell_limiter_free`; `*options` and what it points to are only
/// read during the call. Thread-safe, and a shared region safe for
/// several processes at once.
///
/// # Safety
/// `options` is NULL or points to a readable `ratecell_options` whose
/// `configs` points to its `n_limits * max(n_tiers, 1)` readable configs
/// and whose `path` and `shared_path` are NULL or NUL-terminated; `out` is
/// NULL or points to a writable `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_build(
    options: *const ratecell_options,
    out: *mut *mut ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        // SAFETY: as promised by the caller.
        let (made, clock_kind) = try_status!(unsafe { made_of(options) });
        let held = try_status!(made.build().map_err(|e| crate::snapshot::status(&e)));
        // SAFETY: `out` is non-NULL and, as the caller promises, writable.
        unsafe { publish(held, clock_kind, out) }
    }
}

/// A builder of the handle's limiter: plain, or persisted (the one states
/// whose limiter owns a saving thread, a type apart in Rust).
enum Made {
    Plain(Builder<AnyLimiter>),
    Persisted(Builder<ratecell_lib::Persisted<AnyLimiter>>),
}

impl Made {
    fn build(self) -> Result<Held, ratecell_lib::SnapshotError> {
        Ok(match self {
            Made::Plain(b) => Held::Plain(b.build()?),
            Made::Persisted(b) => Held::Persisted(b.build()?),
        })
    }
}

/// The builder `*options` describes, and the clock its configs name: the
/// one reading of a `ratecell_options` (its size, states, counts, configs,
/// paths). Returns the status of the first thing wrong, as
/// `ratecell_limiter_build` documents.
///
/// # Safety
/// As `ratecell_limiter_build`'s `options`.
unsafe fn made_of(
    options: *const ratecell_options,
) -> Result<(Made, ratecell_clock), ratecell_status> {
    // SAFETY: as promised by the caller.
    let o = unsafe { super::request::read_sized(options) }?;
    let states = ratecell_states::from_u32(o.states)?;
    let from_snapshot = matches!(states, RATECELL_STATES_SNAPSHOT | RATECELL_STATES_PERSISTED);
    // A field these states do not read is a mistake in the caller's
    // options (a path set, the states forgotten): refused, not ignored.
    let unread = match states {
        RATECELL_STATES_FRESH => !o.path.is_null() || o.save_every_ns != 0,
        RATECELL_STATES_SNAPSHOT => o.save_every_ns != 0,
        RATECELL_STATES_PERSISTED => false,
        RATECELL_STATES_SHARED => o.save_every_ns != 0,
    };
    if unread || (states != RATECELL_STATES_SHARED && !o.shared_path.is_null()) {
        return Err(RATECELL_INVALID_STATES);
    }
    let mut builder = AnyLimiter::builder();
    let mut clock_kind = ratecell_clock::RATECELL_CLOCK_TSC;
    // No limit, from a snapshot: the snapshot's own.
    if !(from_snapshot && o.n_limits == 0 && o.n_tiers == 0 && o.configs.is_null()) {
        // SAFETY: as promised by the caller.
        let (configs, clock) = unsafe {
            if o.n_tiers == 0 {
                configs_arg(o.configs, o.n_limits)
            } else {
                tiers_arg(o.configs, o.n_limits, o.n_tiers)
            }
        }?;
        clock_kind = clock;
        if o.n_tiers == 0 {
            builder = builder.limits(&configs);
        } else {
            for tier in configs.chunks(o.n_limits) {
                builder = builder.tier(tier);
            }
        }
    }
    // SAFETY: NULL or NUL-terminated, as the caller promises.
    let path = || unsafe { path_arg(o.path) };
    Ok(match states {
        RATECELL_STATES_FRESH => (Made::Plain(builder.clock(clock_of(clock_kind))), clock_kind),
        RATECELL_STATES_SNAPSHOT => {
            let builder = builder.clock(clock_of(clock_kind));
            (
                Made::Plain(builder.states(States::snapshot(path()?))),
                clock_kind,
            )
        }
        RATECELL_STATES_PERSISTED => {
            let every = Duration::from_nanos(o.save_every_ns);
            let builder = builder.clock(clock_of(clock_kind));
            (
                Made::Persisted(builder.persisted(path()?, every)),
                clock_kind,
            )
        }
        RATECELL_STATES_SHARED => {
            // SAFETY: NUL-terminated, as the caller promises.
            let region = unsafe { path_arg(o.shared_path) }?;
            let seed = if o.path.is_null() {
                None
            } else {
                Some(path()?)
            };
            let options = SharedOptions {
                mode: if o.shared_mode == 0 {
                    0o600
                } else {
                    o.shared_mode
                },
                coarse_clock: clock_kind == ratecell_clock::RATECELL_CLOCK_COARSE,
            };
            let states = States::Shared {
                region,
                options,
                seed,
            };
            (Made::Plain(builder.states(states)), clock_kind)
        }
    })
}

//! A quota per tier through the C ABI: `ratecell_limiter_new_tiered` makes
//! an ordinary keyed `ratecell_limiter` whose `ratecell_check_tier*` calls
//! name the key's tier, as do `ratecell_check_batch_tier*` (a tier per
//! request) and `ratecell_acquire*_tier`; every other call on it is tier
//! 0's, the default tier.

use super::limiter::{Inner, check_batch, clock_of, finish_acquire, publish, ratecell_limiter};
use super::multi::ratecell_multi_decision;
use super::types::{ratecell_clock, ratecell_config, ratecell_decision, ratecell_status};
use super::{input, out_ptr};
use crate::{Config, KeyedLimiter, MultiDecision, TierError};
use std::time::Duration;

use ratecell_status::*;

/// The most tiers one limiter serves (`n_tiers` of
/// `ratecell_limiter_new_tiered`).
pub const RATECELL_MAX_TIERS: usize = 16;
// A literal for cbindgen, which does not evaluate paths; kept equal here.
const _: () = assert!(RATECELL_MAX_TIERS == crate::MAX_TIERS);

/// Makes a keyed limiter serving `n_tiers` tiers (free, paid, internal...),
/// one config per tier: `configs[0..n_tiers]`. Each check names its key's
/// tier (`ratecell_check_tier`, `ratecell_check_batch_tier`,
/// `ratecell_acquire_tier`); every call that names none (`ratecell_check`,
/// `ratecell_check_batch`, `ratecell_acquire`, ...) is tier 0's, the
/// default tier, as on a limiter made without tiers.
///
/// A key whose tier changes keeps its state, read by the new tier's limits
/// at its next check by the carry-over rules of live reconfiguration
/// (docs/ALGORITHMS.md, "A quota per tier"): what it spent counts against
/// its new quota. So tiers may differ in limit, burst, and the period of
/// gcra, leaky_bucket and token_bucket; not in algorithm, a window's
/// period, sub_windows, a sliding_log's limit, capacity, overflow or
/// clock.
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `out` is NULL or
/// `configs` is NULL with `n_tiers > 0`; `RATECELL_INVALID_LENGTH` when
/// `n_tiers` is 0 or above `RATECELL_MAX_TIERS`; the `RATECELL_INVALID_*`
/// status naming the first invalid field of the first invalid config, or
/// the field in which a tier differs from tier 0 where it may not
/// (`RATECELL_INVALID_CAPACITY` also for capacity 0: tiers are keyed;
/// `RATECELL_INVALID_CLOCK` for another clock); or
/// `RATECELL_OUT_OF_MEMORY`. On failure `*out` is left unchanged.
///
/// A tiered limiter is saved by `ratecell_snapshot_save*` with every tier
/// (snapshot format version 3), and restored by
/// `ratecell_limiter_restore_tiered` or `ratecell_limiter_restore`
/// (docs/SNAPSHOT.md). It cannot be reconfigured live:
/// `ratecell_limiter_reconfigure` on it returns
/// `RATECELL_RECONFIGURE_REFUSED`.
///
/// Ownership: as `ratecell_limiter_new`; `configs` is only read during the
/// call. Thread-safe.
///
/// # Safety
/// `configs` is NULL or points to `n_tiers` readable configs; `out` is NULL
/// or points to a writable `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_new_tiered(
    configs: *const ratecell_config,
    n_tiers: usize,
    out: *mut *mut ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        // SAFETY: as promised by the caller.
        unsafe { new_tiered(configs, 1, n_tiers, out) }
    }
}

/// `ratecell_limiter_new_tiered` for tiers of several limits each (as
/// `ratecell_limiter_new_multi`): `configs` holds `n_tiers` rows of
/// `n_limits` configs, tier by tier (tier `t`'s limit `i` is
/// `configs[t * n_limits + i]`); every tier lists the same limits in the
/// same order, with its own values. `RATECELL_INVALID_LENGTH` also when
/// `n_limits` is 0 or above `RATECELL_MAX_LIMITS`.
///
/// # Safety
/// `configs` is NULL or points to `n_limits * n_tiers` readable configs;
/// `out` is NULL or points to a writable `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_new_tiered_multi(
    configs: *const ratecell_config,
    n_limits: usize,
    n_tiers: usize,
    out: *mut *mut ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        // SAFETY: as promised by the caller.
        unsafe { new_tiered(configs, n_limits, n_tiers, out) }
    }
}

/// Both constructors.
///
/// # Safety
/// As for `ratecell_limiter_new_tiered_multi`.
unsafe fn new_tiered(
    configs: *const ratecell_config,
    n_limits: usize,
    n_tiers: usize,
    out: *mut *mut ratecell_limiter,
) -> ratecell_status {
    let out = try_status!(out_ptr(out));
    // SAFETY: as promised by the caller.
    let (rust, clock_kind) = try_status!(unsafe { tiers_arg(configs, n_limits, n_tiers) });
    let tiers: Vec<&[Config]> = rust.chunks(n_limits).collect();
    let keyed = try_status!(
        KeyedLimiter::with_clock_tiered_multi(&tiers, clock_of(clock_kind))
            .map_err(|e| ratecell_status::from_error(&e))
    );
    // SAFETY: `out` is non-NULL and, as the caller promises, writable.
    unsafe { publish(Inner::Keyed(keyed), clock_kind, out) }
}

/// The configs of `n_tiers` tiers of `n_limits` limits, tier by tier, and
/// the clock they share; the status of the first bad one otherwise
/// (`RATECELL_INVALID_LENGTH` for a count out of range,
/// `RATECELL_INVALID_CLOCK` for configs naming different clocks).
///
/// # Safety
/// `configs` is NULL or points to `n_limits * n_tiers` readable configs.
pub(super) unsafe fn tiers_arg(
    configs: *const ratecell_config,
    n_limits: usize,
    n_tiers: usize,
) -> Result<(Vec<Config>, ratecell_clock), ratecell_status> {
    if !(1..=crate::MAX_LIMITS).contains(&n_limits) || !(1..=RATECELL_MAX_TIERS).contains(&n_tiers)
    {
        return Err(RATECELL_INVALID_LENGTH);
    }
    // SAFETY: the caller promises `n_limits * n_tiers` readable configs (at
    // most 8 × 16, no overflow); every field is an integer.
    let raw = unsafe { input(configs, n_limits * n_tiers) }?;
    let mut rust: Vec<Config> = Vec::with_capacity(raw.len());
    let mut clock_kind: Option<ratecell_clock> = None;
    for cfg in raw {
        let (config, kind) = cfg.to_rust()?;
        if *clock_kind.get_or_insert(kind) != kind {
            return Err(RATECELL_INVALID_CLOCK);
        }
        rust.push(config);
    }
    Ok((rust, clock_kind.expect("at least one config")))
}

/// How many tiers the limiter serves (1 for one made without tiers); 0
/// for NULL (or an internal panic). Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_tiers(limiter: *const ratecell_limiter) -> u32 {
    ffi_panic_boundary! {
        // SAFETY: the caller promises a live handle or NULL.
        match unsafe { limiter.as_ref() } {
            None => 0,
            Some(l) => match &l.inner {
                Inner::Keyed(k) => k.tiers() as u32,
                Inner::Direct(_) => 1,
            },
        }
    }
}

impl ratecell_limiter {
    /// A check of `key` (a `u64` or bytes) under `tier`; a limiter without
    /// tiers has tier 0 only.
    fn check_tier(
        &self,
        key: Key<'_>,
        tier: u32,
        cost: u64,
        now_ns: Option<u64>,
    ) -> Result<MultiDecision, ratecell_status> {
        let tier = tier as usize;
        let t = now_ns.unwrap_or_else(|| self.inner.now_ns());
        let d = match (&self.inner, key) {
            (Inner::Keyed(k), Key::U64(key)) => k.check_tier_each_at(key, tier, cost, t),
            (Inner::Keyed(k), Key::Bytes(key)) => k.check_bytes_tier_each_at(key, tier, cost, t),
            (Inner::Direct(l), _) if tier == 0 => Ok(l.check_each_at(cost, t)),
            (Inner::Direct(_), _) => Err(TierError { tier, tiers: 1 }),
        };
        d.map_err(|_| RATECELL_INVALID_TIER)
    }
}

#[derive(Clone, Copy)]
enum Key<'a> {
    U64(u64),
    Bytes(&'a [u8]),
}

/// Decides a request of `cost` for `key` under tier `tier`'s limits, now,
/// and writes the decision to `*out` (as `ratecell_check`). A limiter made
/// without tiers has tier 0 only.
///
/// Returns `RATECELL_OK` (a denial is `out->allowed == false`);
/// `RATECELL_NULL_ARGUMENT` when `limiter` or `out` is NULL;
/// `RATECELL_INVALID_TIER` when `tier` is not below
/// `ratecell_limiter_tiers(limiter)`: nothing is checked or stored and
/// `*out` is left unchanged. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or points to a
/// writable `ratecell_decision`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_tier(
    limiter: *const ratecell_limiter,
    key: u64,
    tier: u32,
    cost: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let out = try_status!(out_ptr(out));
        let d = try_status!(l.check_tier(Key::U64(key), tier, cost, None));
        answer!(out, d.decision.into())
    }
}

/// `ratecell_check_tier` at the caller's time `now_ns` (UNIX nanoseconds).
///
/// # Safety
/// As for `ratecell_check_tier`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_tier_at(
    limiter: *const ratecell_limiter,
    key: u64,
    tier: u32,
    cost: u64,
    now_ns: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let out = try_status!(out_ptr(out));
        let d = try_status!(l.check_tier(Key::U64(key), tier, cost, Some(now_ns)));
        answer!(out, d.decision.into())
    }
}

/// `ratecell_check_tier` for a byte-string key (as `ratecell_check_bytes`:
/// `key` may be NULL only when `key_len` is 0).
///
/// # Safety
/// As for `ratecell_check_tier`; `key` is NULL or points to `key_len`
/// readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_bytes_tier(
    limiter: *const ratecell_limiter,
    key: *const u8,
    key_len: usize,
    tier: u32,
    cost: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let key = try_slice!(key, key_len);
        let out = try_status!(out_ptr(out));
        let d = try_status!(l.check_tier(Key::Bytes(key), tier, cost, None));
        answer!(out, d.decision.into())
    }
}

/// `ratecell_check_bytes_tier` at the caller's time `now_ns`.
///
/// # Safety
/// As for `ratecell_check_bytes_tier`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_bytes_tier_at(
    limiter: *const ratecell_limiter,
    key: *const u8,
    key_len: usize,
    tier: u32,
    cost: u64,
    now_ns: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let key = try_slice!(key, key_len);
        let out = try_status!(out_ptr(out));
        let d = try_status!(l.check_tier(Key::Bytes(key), tier, cost, Some(now_ns)));
        answer!(out, d.decision.into())
    }
}

/// `ratecell_check_tier_at` with each limit's own decision and the
/// denying limit's index (as `ratecell_check_each_at`), for tiers of
/// several limits. The same statuses as `ratecell_check_tier`.
///
/// # Safety
/// As for `ratecell_check_tier`, with `out` NULL or pointing to a writable
/// `ratecell_multi_decision`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_tier_each_at(
    limiter: *const ratecell_limiter,
    key: u64,
    tier: u32,
    cost: u64,
    now_ns: u64,
    out: *mut ratecell_multi_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let out = try_status!(out_ptr(out));
        let d = try_status!(l.check_tier(Key::U64(key), tier, cost, Some(now_ns)));
        answer!(out, d.into())
    }
}

/// `ratecell_check_batch` with a tier per request: `keys[i]` under tier
/// `tiers[i]` at cost `costs[i]` (every cost 1 when `costs` is NULL), in
/// order, with one clock read, exactly as `n` calls of
/// `ratecell_check_tier_at` at that time would. Writes `allowed_out[i]`
/// and, when `decisions_out` is not NULL, `decisions_out[i]`.
///
/// Returns the statuses of `ratecell_check_batch` (`RATECELL_NULL_ARGUMENT`
/// also when `tiers` is NULL with `n > 0`), and `RATECELL_INVALID_TIER`
/// when any `tiers[i]` is not below `ratecell_limiter_tiers(limiter)`:
/// every tier is checked first, so then nothing is decided, stored or
/// written. Thread-safe.
///
/// # Safety
/// As for `ratecell_check_batch`, and `tiers` points to `n` readable
/// `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_batch_tier(
    limiter: *const ratecell_limiter,
    keys: *const u64,
    tiers: *const u32,
    costs: *const u64,
    n: usize,
    allowed_out: *mut u8,
    decisions_out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        // SAFETY: forwarded with the caller's promises.
        unsafe { tier_batch(l, keys, tiers, costs, n, None, allowed_out, decisions_out) }
    }
}

/// `ratecell_check_batch_tier` at the caller's time `now_ns` (UNIX
/// nanoseconds).
///
/// # Safety
/// As for `ratecell_check_batch_tier`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_batch_tier_at(
    limiter: *const ratecell_limiter,
    keys: *const u64,
    tiers: *const u32,
    costs: *const u64,
    n: usize,
    now_ns: u64,
    allowed_out: *mut u8,
    decisions_out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        // SAFETY: forwarded with the caller's promises.
        unsafe { tier_batch(l, keys, tiers, costs, n, Some(now_ns), allowed_out, decisions_out) }
    }
}

/// The untiered batch's implementation, given the tiers (never NULL here:
/// a NULL `tiers` would be the untiered batch, silently tier 0).
///
/// # Safety
/// As for `ratecell_check_batch_tier`.
#[allow(
    clippy::too_many_arguments,
    reason = "the C signature's arguments, one to one"
)]
unsafe fn tier_batch(
    l: &ratecell_limiter,
    keys: *const u64,
    tiers: *const u32,
    costs: *const u64,
    n: usize,
    now_ns: Option<u64>,
    allowed_out: *mut u8,
    decisions_out: *mut ratecell_decision,
) -> ratecell_status {
    if tiers.is_null() && n > 0 {
        return RATECELL_NULL_ARGUMENT;
    }
    // SAFETY: forwarded with the caller's promises.
    unsafe { check_batch(l, keys, tiers, costs, n, now_ns, allowed_out, decisions_out) }
}

/// `ratecell_acquire` under tier `tier`'s limits: waits until a request of
/// `cost` for `key` is admitted by that tier, as `ratecell_acquire` does.
///
/// Returns the statuses of `ratecell_acquire`, and `RATECELL_INVALID_TIER`
/// at once when `tier` is not below `ratecell_limiter_tiers(limiter)`:
/// nothing is checked or stored and `*out` is left unchanged.
/// Thread-safe.
///
/// # Safety
/// As for `ratecell_acquire`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_acquire_tier(
    limiter: *const ratecell_limiter,
    key: u64,
    tier: u32,
    cost: u64,
    timeout_ns: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        // A u64 key is its 8 little-endian bytes (the same state either way).
        let key = key.to_le_bytes();
        // SAFETY: forwarded with the caller's promises; `key` is 8 readable bytes.
        unsafe {
            ratecell_acquire_bytes_tier(limiter, key.as_ptr(), key.len(), tier, cost, timeout_ns, out)
        }
    }
}

/// `ratecell_acquire_tier` for the byte-string key `key[0 .. key_len)`
/// (see `ratecell_check_bytes` for byte keys).
///
/// # Safety
/// As for `ratecell_acquire_bytes`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_acquire_bytes_tier(
    limiter: *const ratecell_limiter,
    key: *const u8,
    key_len: usize,
    tier: u32,
    cost: u64,
    timeout_ns: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let key = try_slice!(key, key_len);
        let out = try_status!(out_ptr(out));
        let timeout = Duration::from_nanos(timeout_ns);
        let tier = tier as usize;
        let result = match &l.inner {
            Inner::Keyed(k) => k.acquire_bytes_tier(key, tier, cost, timeout),
            Inner::Direct(d) if tier == 0 => Ok(d.acquire(cost, timeout)),
            Inner::Direct(_) => Err(TierError { tier, tiers: 1 }),
        };
        let result = try_status!(result.map_err(|_| RATECELL_INVALID_TIER));
        // SAFETY: non-NULL and writable as promised.
        unsafe { finish_acquire(result, out) }
    }
}

//! The opaque `ratecell_limiter` handle and every exported function that
//! takes one.
//!
//! A handle holds an [`AnyLimiter`](crate::AnyLimiter): a direct
//! [`Limiter`](crate::Limiter) (capacity 0: one shared state, keys ignored)
//! or a [`KeyedLimiter`] (capacity > 0).

use super::types::{
    ratecell_clock, ratecell_config, ratecell_decision, ratecell_stats, ratecell_status,
};
use super::{into_raw, max_len, out_ptr, output, path_arg};
use crate::{AcquireError, Clock, Config, Decision, KeyedLimiter, MultiDecision};
use std::time::Duration;

use ratecell_status::*;

/// A rate limiter: one shared state (configured capacity 0, every key
/// ignored) or one state per key (capacity > 0).
///
/// Opaque; made by `ratecell_limiter_new`, released by
/// `ratecell_limiter_free`. Thread-safe: any number of threads may call
/// any function on the same limiter at once, except `ratecell_limiter_free`,
/// which must be the last call on it.
pub struct ratecell_limiter {
    pub(super) inner: Inner,
    pub(super) clock: ratecell_clock,
}

/// What a handle holds: the library's own direct-or-keyed limiter.
pub(super) type Inner = crate::AnyLimiter;

impl ratecell_limiter {
    /// Decides at the caller's time, or with `None` at the limiter's own
    /// clock, read by the limiter itself: a keyed limiter starts loading
    /// the key's bucket before it reads the clock (`WordTable::check`).
    fn check(&self, key: u64, cost: u64, now_ns: Option<u64>) -> Decision {
        match now_ns {
            Some(t) => self.inner.check_at(key, cost, t),
            None => self.inner.check(key, cost),
        }
    }

    /// Whether one request of cost 1 for `key` is admitted. The direct
    /// limiter takes its lean path (no decision built); the keyed one
    /// decides in full: a keyed yes/no path saved too little to be worth a
    /// second copy of the table's check (docs/ARCHITECTURE.md).
    fn allow(&self, key: u64, now_ns: Option<u64>) -> bool {
        match (&self.inner, now_ns) {
            (Inner::Direct(l), Some(t)) => l.allow_at(t),
            (Inner::Direct(l), None) => l.allow(),
            (Inner::Keyed(_), _) => self.check(key, 1, now_ns).allowed,
        }
    }

    fn check_bytes(&self, key: &[u8], cost: u64, now_ns: Option<u64>) -> Decision {
        match now_ns {
            Some(t) => self.inner.check_bytes_at(key, cost, t),
            None => self.inner.check_bytes(key, cost),
        }
    }

    /// [`ratecell_limiter::check`] with each limit's own decision.
    pub(super) fn check_each(&self, key: u64, cost: u64, now_ns: Option<u64>) -> MultiDecision {
        match now_ns {
            Some(t) => self.inner.check_each_at(key, cost, t),
            None => self.inner.check_each(key, cost),
        }
    }

    /// [`ratecell_limiter::check_bytes`] with each limit's own decision.
    pub(super) fn check_bytes_each(
        &self,
        key: &[u8],
        cost: u64,
        now_ns: Option<u64>,
    ) -> MultiDecision {
        match now_ns {
            Some(t) => self.inner.check_bytes_each_at(key, cost, t),
            None => self.inner.check_bytes_each(key, cost),
        }
    }
}

/// The limiter behind a handle, or `RATECELL_NULL_ARGUMENT`.
///
/// # Safety
/// A non-NULL `limiter` came from `ratecell_limiter_new` and was not freed.
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
pub(super) fn build(config: Config, clock_kind: ratecell_clock) -> Result<Inner, ratecell_status> {
    Inner::with_clock(config, clock_of(clock_kind)).map_err(|e| ratecell_status::from_error(&e))
}

/// Moves a new limiter to the heap and writes its handle to `*out`.
///
/// # Safety
/// `out` is non-NULL and writable.
pub(super) unsafe fn publish(
    inner: Inner,
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

/// Creates or attaches the limiter whose table lies in the file `path`,
/// shared by every process that opens it (one limit across the processes
/// of a machine), writing its handle to `*out`. A `path` without a `/` is a
/// name under `/dev/shm`. A new region gets mode 0600 (see
/// `ratecell_limiter_open_shared_mode`).
///
/// Only keyed limiters (capacity >= 1) of the word algorithms (gcra,
/// leaky_bucket, token_bucket, fixed_window, sliding_window) can be shared.
/// `cfg->clock` picks this process's clock: `RATECELL_CLOCK_TSC` reads the
/// calibration stored in the region, so every process reads the same time.
/// Every other function works on the result; `ratecell_limiter_free`
/// unmaps it and never removes the file (docs/SHARED.md: lifecycle).
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT`, a
/// `RATECELL_INVALID_*` status for the configuration, one of the
/// `RATECELL_SHARED_*` statuses (the file, the region's version or
/// configuration, the platform), or `RATECELL_OUT_OF_MEMORY` (no room for a
/// new region). On failure `*out` is left unchanged.
///
/// Ownership as for `ratecell_limiter_new`; `path` and `*cfg` are only read
/// during the call. Thread-safe, and safe for several processes at once.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `cfg` is NULL or points to a
/// readable `ratecell_config`; `out` is NULL or points to a writable
/// `ratecell_limiter *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_open_shared(
    path: *const std::ffi::c_char,
    cfg: *const ratecell_config,
    out: *mut *mut ratecell_limiter,
) -> ratecell_status {
    // SAFETY: as promised by our caller.
    unsafe { ratecell_limiter_open_shared_mode(path, cfg, 0o600, out) }
}

/// `ratecell_limiter_open_shared` with the permission bits of a region this
/// call creates (exactly `mode & 07777`; the umask is not applied), e.g.
/// 0660 to share with the file's group. An existing region keeps its mode.
///
/// # Safety
/// As `ratecell_limiter_open_shared`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_open_shared_mode(
    path: *const std::ffi::c_char,
    cfg: *const ratecell_config,
    mode: u32,
    out: *mut *mut ratecell_limiter,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        let cfg = try_read!(cfg);
        // SAFETY: NULL (refused) or NUL-terminated, as the caller promises.
        let path = try_status!(unsafe { path_arg(path) });
        let (config, clock_kind) = try_status!(cfg.to_rust());
        let options = crate::SharedOptions {
            mode,
            coarse_clock: clock_kind == ratecell_clock::RATECELL_CLOCK_COARSE,
        };
        let keyed = try_status!(KeyedLimiter::open_shared_with(path, config, &options)
            .map_err(|e| ratecell_status::from_error(&e)));
        // SAFETY: `out` is non-NULL and writable, as promised.
        unsafe { publish(Inner::Keyed(keyed), clock_kind, out) }
    }
}

/// Releases a limiter made by `ratecell_limiter_new`. NULL is a no-op.
///
/// Must be the last call on `limiter`: no other thread may be using it, and
/// it must not be used or freed again afterwards.
///
/// # Safety
/// `limiter` is NULL or a live handle from `ratecell_limiter_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_free(limiter: *mut ratecell_limiter) {
    ffi_panic_boundary! {
        if !limiter.is_null() {
            // SAFETY: allocated in `ratecell_limiter_new` with the global
            // allocator and this type's layout, and (as promised) not yet freed.
            drop(unsafe { Box::from_raw(limiter) });
        }
    }
}

/// Copies the limiter's configuration to `*out` (as given to
/// `ratecell_limiter_new`; a burst of 0 stays 0).
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

/// Decides a request of `cost` for `key` now (`cost` 0 is a peek: nothing
/// is stored) and writes the decision to `*out`. A limiter of capacity 0
/// ignores `key`.
///
/// A denied request is `RATECELL_OK` with `out->allowed == false`. Returns
/// `RATECELL_NULL_ARGUMENT` when `limiter` or `out` is NULL. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or points to a
/// writable `ratecell_decision`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check(
    limiter: *const ratecell_limiter,
    key: u64,
    cost: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        answer_decision!(out, l.check(key, cost, None))
    }
}

/// `ratecell_check` at the caller's time `now_ns` (UNIX nanoseconds) instead
/// of the limiter's clock: deterministic, and one clock read saved.
///
/// # Safety
/// As for `ratecell_check`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_at(
    limiter: *const ratecell_limiter,
    key: u64,
    cost: u64,
    now_ns: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        answer_decision!(out, l.check(key, cost, Some(now_ns)))
    }
}

/// Whether one request (cost 1) for `key` is admitted now, written to
/// `*allowed`: the `allowed` of `ratecell_check` with cost 1, for callers
/// that need nothing else. A limiter of capacity 0 ignores `key` and
/// computes nothing but the answer.
///
/// A denied request is `RATECELL_OK` with `*allowed == false`. Returns
/// `RATECELL_NULL_ARGUMENT` when `limiter` or `allowed` is NULL, leaving
/// `*allowed` unchanged. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `allowed` is NULL or points to a
/// writable `bool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_allow(
    limiter: *const ratecell_limiter,
    key: u64,
    allowed: *mut bool,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        answer!(allowed, l.allow(key, None))
    }
}

/// `ratecell_allow` with the answer as the return value: 1 when one request
/// (cost 1) for `key` is admitted now, 0 when it is denied, and a negated
/// `ratecell_status` (below 0) when the call fails: `-RATECELL_NULL_ARGUMENT`
/// for a NULL `limiter`. The same decision as `ratecell_allow`; it exists
/// because every argument and out-parameter costs a binding whose calls are
/// dear (tens of ns each through Python's ctypes, an escaping pointer in Go).
/// Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_allow_key(limiter: *const ratecell_limiter, key: u64) -> i32 {
    ffi_panic_boundary! {
        // SAFETY: the caller promises a live handle or NULL.
        match unsafe { handle(limiter) } {
            Ok(l) => i32::from(l.allow(key, None)),
            Err(status) => -(status as i32),
        }
    }
}

/// `ratecell_allow` at the caller's time `now_ns` (UNIX nanoseconds) instead
/// of the limiter's clock: deterministic, and one clock read saved.
///
/// # Safety
/// As for `ratecell_allow`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_allow_at(
    limiter: *const ratecell_limiter,
    key: u64,
    now_ns: u64,
    allowed: *mut bool,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        answer!(allowed, l.allow(key, Some(now_ns)))
    }
}

/// Decides a request of `cost` for the byte-string key `key[0 .. key_len)`
/// now. The same bytes always reach the same state, and the `uint64_t` key
/// k is the same key as its 8 little-endian bytes. The library keeps no
/// pointer to `key`. A limiter of capacity 0 ignores the key.
///
/// `key` may be NULL when `key_len` is 0 (the empty key). Returns
/// `RATECELL_NULL_ARGUMENT` when `limiter` or `out` is NULL, or `key` is
/// NULL with a non-zero `key_len`; `RATECELL_INVALID_LENGTH` when
/// `key_len > PTRDIFF_MAX`. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` points to `key_len` readable
/// bytes (or is NULL); `out` is NULL or points to a writable
/// `ratecell_decision`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_bytes(
    limiter: *const ratecell_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let key = try_slice!(key, key_len);
        answer_decision!(out, l.check_bytes(key, cost, None))
    }
}

/// `ratecell_check_bytes` at the caller's time `now_ns` (UNIX nanoseconds).
///
/// # Safety
/// As for `ratecell_check_bytes`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_bytes_at(
    limiter: *const ratecell_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ns: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let key = try_slice!(key, key_len);
        answer_decision!(out, l.check_bytes(key, cost, Some(now_ns)))
    }
}

/// Decides `n` requests now, with one clock read: `keys[i]` at cost
/// `costs[i]` (every cost 1 when `costs` is NULL), in order, exactly as `n`
/// calls of `ratecell_check_at` at that time would. Writes
/// `allowed_out[i]` (1 admitted, 0 denied) and, when `decisions_out` is not
/// NULL, `decisions_out[i]`.
///
/// With `n == 0` the buffers may be NULL and nothing is written. Returns
/// `RATECELL_NULL_ARGUMENT` when `limiter` is NULL or, with `n > 0`, `keys`
/// or `allowed_out` is; `RATECELL_INVALID_LENGTH` when `n` is larger than
/// any buffer of decisions can be. Nothing is written on failure. The
/// buffers are only used during the call. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `keys` and `costs` (if not NULL)
/// point to `n` readable `uint64_t`; `allowed_out` to `n` writable bytes;
/// `decisions_out` is NULL or points to `n` writable decisions. The output
/// buffers must not overlap the inputs or each other.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_batch(
    limiter: *const ratecell_limiter,
    keys: *const u64,
    costs: *const u64,
    n: usize,
    allowed_out: *mut u8,
    decisions_out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        // SAFETY: forwarded with the caller's promises.
        unsafe { check_batch(l, keys, std::ptr::null(), costs, n, None, allowed_out, decisions_out) }
    }
}

/// `ratecell_check_batch` at the caller's time `now_ns` (UNIX nanoseconds).
///
/// # Safety
/// As for `ratecell_check_batch`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_batch_at(
    limiter: *const ratecell_limiter,
    keys: *const u64,
    costs: *const u64,
    n: usize,
    now_ns: u64,
    allowed_out: *mut u8,
    decisions_out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        // SAFETY: forwarded with the caller's promises.
        unsafe {
            check_batch(l, keys, std::ptr::null(), costs, n, Some(now_ns), allowed_out, decisions_out)
        }
    }
}

/// The batch check behind every exported form; `now_ns` None reads the
/// clock once, after every argument has been checked. `tiers` NULL is the
/// untiered batch (tier 0); else request `i` is decided under `tiers[i]`
/// (`ratecell_check_batch_tier`), every tier checked before anything is
/// decided or written.
///
/// # Safety
/// As for `ratecell_check_batch`; `tiers` is NULL or points to `n`
/// readable `uint32_t`.
#[allow(
    clippy::too_many_arguments,
    reason = "the C signature's arguments, one to one"
)]
pub(super) unsafe fn check_batch(
    l: &ratecell_limiter,
    keys: *const u64,
    tiers: *const u32,
    costs: *const u64,
    n: usize,
    now_ns: Option<u64>,
    allowed_out: *mut u8,
    decisions_out: *mut ratecell_decision,
) -> ratecell_status {
    // One bound for every buffer: the decisions are the largest elements,
    // so no buffer of a valid batch can be longer.
    if n > max_len::<ratecell_decision>() {
        return RATECELL_INVALID_LENGTH;
    }
    let keys = try_slice!(keys, n);
    let tiers = if tiers.is_null() {
        None
    } else {
        Some(try_slice!(tiers, n))
    };
    let costs = if costs.is_null() {
        None
    } else {
        Some(try_slice!(costs, n))
    };
    // Written element by element, never borrowed as slices: the caller's
    // buffers may be uninitialised.
    // SAFETY: the caller promises a buffer of `n` elements, disjoint from
    // everything else.
    let mut allowed = try_status!(unsafe { output(allowed_out, n) });
    let mut decisions = if decisions_out.is_null() {
        None
    } else {
        // SAFETY: as for `allowed_out`.
        Some(try_status!(unsafe { output(decisions_out, n) }))
    };
    let now_ns = now_ns.unwrap_or_else(|| l.inner.now_ns());
    let mut each = |i: usize, d: Decision| {
        allowed.write(i, u8::from(d.allowed));
        if let Some(decisions) = decisions.as_mut() {
            decisions.write(i, d.into());
        }
    };
    match (&l.inner, tiers) {
        (Inner::Direct(_), Some(tiers)) if tiers.iter().any(|&t| t != 0) => {
            return RATECELL_INVALID_TIER;
        }
        (Inner::Direct(direct), _) => {
            for i in 0..n {
                each(i, direct.check_at(costs.map_or(1, |c| c[i]), now_ns));
            }
        }
        (Inner::Keyed(keyed), None) => keyed.check_batch_with(keys, costs, now_ns, each),
        (Inner::Keyed(keyed), Some(tiers)) => {
            let tier_of = |i: usize| tiers[i] as usize;
            try_status!(
                keyed
                    .batch_tiers(keys, tier_of, costs, now_ns, each)
                    .map_err(|_| RATECELL_INVALID_TIER)
            );
        }
    }
    RATECELL_OK
}

/// Waits until a request of `cost` for `key` is admitted (and, for the
/// leaky bucket, until its `wait_ns` has passed), sleeping by
/// `retry_after_ns` (never spinning), for at most about `timeout_ns`.
/// Blocks the calling thread only.
///
/// Returns `RATECELL_OK` with the admitting decision in `*out`;
/// `RATECELL_TIMED_OUT` with the last (denied) decision in `*out` when the
/// request would not be admitted in time (nothing is taken from the
/// limit); `RATECELL_COST_EXCEEDS_LIMIT` at once, with its decision
/// (`retry_after_ns == UINT64_MAX`) in `*out`, when no wait can ever admit
/// the cost; `RATECELL_NULL_ARGUMENT` when `limiter` or `out` is NULL.
/// A limiter of capacity 0 ignores `key`. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or points to a
/// writable `ratecell_decision`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_acquire(
    limiter: *const ratecell_limiter,
    key: u64,
    cost: u64,
    timeout_ns: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        // A u64 key is its 8 little-endian bytes (the same state either way).
        let key = key.to_le_bytes();
        // SAFETY: forwarded with the caller's promises; `key` is 8 readable bytes.
        unsafe { ratecell_acquire_bytes(limiter, key.as_ptr(), key.len(), cost, timeout_ns, out) }
    }
}

/// `ratecell_acquire` for the byte-string key `key[0 .. key_len)` (see
/// `ratecell_check_bytes` for byte keys).
///
/// # Safety
/// As for `ratecell_acquire`, and `key` points to `key_len` readable bytes
/// (or is NULL with `key_len` 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_acquire_bytes(
    limiter: *const ratecell_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    timeout_ns: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let key = try_slice!(key, key_len);
        let out = try_status!(out_ptr(out));
        let timeout = Duration::from_nanos(timeout_ns);
        let result = l.inner.acquire_bytes(key, cost, timeout);
        // SAFETY: non-NULL and writable as promised.
        unsafe { finish_acquire(result, out) }
    }
}

/// Writes an acquire's decision (on success and on both give-ups) and
/// returns its status.
///
/// # Safety
/// `out` is non-NULL and writable.
pub(super) unsafe fn finish_acquire(
    result: Result<Decision, AcquireError>,
    out: *mut ratecell_decision,
) -> ratecell_status {
    let (decision, status) = match result {
        Ok(d) => (d, RATECELL_OK),
        Err(AcquireError::TimedOut(d)) => (d, RATECELL_TIMED_OUT),
        Err(AcquireError::Unsatisfiable(d)) => (d, RATECELL_COST_EXCEEDS_LIMIT),
    };
    // SAFETY: as promised by the caller.
    unsafe { put(out, decision.into()) };
    status
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

/// Forgets `key`'s state: its next request is decided as a fresh key's (an
/// operator unblocking a user). A limiter of capacity 0 forgets its one
/// shared state. Resetting a key that has no state is not an error.
///
/// Returns `RATECELL_OK` or `RATECELL_NULL_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_reset_key(
    limiter: *const ratecell_limiter,
    key: u64,
) -> ratecell_status {
    ffi_panic_boundary! {
        // A u64 key is its 8 little-endian bytes (the same state either way).
        let key = key.to_le_bytes();
        // SAFETY: forwarded with the caller's promises; `key` is 8 readable bytes.
        unsafe { ratecell_reset_bytes(limiter, key.as_ptr(), key.len()) }
    }
}

/// `ratecell_reset_key` for the byte-string key `key[0 .. key_len)`.
///
/// Returns `RATECELL_OK`, `RATECELL_NULL_ARGUMENT` (NULL `limiter`, or NULL
/// `key` with a non-zero `key_len`) or `RATECELL_INVALID_LENGTH`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` points to `key_len` readable
/// bytes (or is NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_reset_bytes(
    limiter: *const ratecell_limiter,
    key: *const u8,
    key_len: usize,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        let key = try_slice!(key, key_len);
        l.inner.reset_bytes(key);
        RATECELL_OK
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::ratecell_config_init;

    #[test]
    fn allow_key_returns_the_answer_or_a_negated_status() {
        let mut cfg = std::mem::MaybeUninit::<ratecell_config>::uninit();
        let mut l: *mut ratecell_limiter = std::ptr::null_mut();
        // SAFETY: valid pointers to local values; the limiter is freed once.
        unsafe {
            ratecell_config_init(cfg.as_mut_ptr(), 1, 3, 3_600_000_000_000);
            let cfg = cfg.assume_init();
            assert_eq!(
                ratecell_limiter_new(&cfg, &mut l),
                ratecell_status::RATECELL_OK
            );
            let answers: Vec<i32> = (0..5).map(|_| ratecell_allow_key(l, 7)).collect();
            assert_eq!(answers, [1, 1, 1, 0, 0], "3 per hour, then denied");
            ratecell_limiter_free(l);
            assert_eq!(
                ratecell_allow_key(std::ptr::null(), 7),
                -(ratecell_status::RATECELL_NULL_ARGUMENT as i32)
            );
        }
    }
}

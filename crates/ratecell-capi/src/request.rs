//! What a check asks through the C ABI, and every function that answers
//! it: one `ratecell_request` (key, cost, time, tier) for `ratecell_check`,
//! `ratecell_check_each`, `ratecell_acquire` and `ratecell_reset`; one
//! `ratecell_batch` for `ratecell_check_batch`; `ratecell_allow` for the
//! yes-or-no of one unit. Each struct starts with its size, so a later
//! version can add fields and still read a caller compiled against this
//! one.

use super::limiter::{Held, Inner, ratecell_limiter};
use super::multi::ratecell_multi_decision;
use super::types::{ratecell_decision, ratecell_status};
use crate::ptr::{input, max_len, output};
use ratecell_lib::{AcquireError, Batch, Decision, Key, Request, Tier};
use std::time::Duration;

use ratecell_status::*;

/// `at_ns` of a request decided at the limiter's own clock (the default).
pub const RATECELL_NOW: u64 = u64::MAX;

/// One request: for which key, of what cost, at what time, under which
/// tier. Set it up with `ratecell_request_init` (cost 1, now, tier 0, key
/// id 0), then set what differs.
///
/// The key is `key_bytes[0 .. key_len)` when `key_bytes` is not NULL, else
/// the number `key_id`. The same bytes always reach the same state, and
/// the `uint64_t` key k is the same key as its 8 little-endian bytes. A
/// limiter of capacity 0 ignores the key. The library keeps no pointer to
/// the key.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratecell_request {
    /// `sizeof(ratecell_request)` as the caller was compiled with; a size
    /// this library does not know is `RATECELL_INVALID_LENGTH`.
    pub size: u32,
    /// The tier, below `ratecell_limiter_tiers`; 0 for a limiter without
    /// tiers.
    pub tier: u32,
    /// The key when `key_bytes` is NULL.
    pub key_id: u64,
    /// A byte-string key, or NULL for `key_id`.
    pub key_bytes: *const u8,
    /// The length of `key_bytes`; 0 when it is NULL.
    pub key_len: usize,
    /// Units asked for; 0 is a peek (nothing is stored).
    pub cost: u64,
    /// The time, UNIX nanoseconds from the caller's clock, or
    /// `RATECELL_NOW` for the limiter's.
    pub at_ns: u64,
}

/// Many requests decided in one call, in order, at one time: request `i`
/// is for `keys[i]`, of cost `costs[i]` (1 each when `costs` is NULL),
/// under tier `tiers[i]` (tier 0 each when `tiers` is NULL). Set it up
/// with `ratecell_batch_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratecell_batch {
    /// `sizeof(ratecell_batch)` as the caller was compiled with.
    pub size: u32,
    /// How many requests.
    pub n: usize,
    /// `n` keys.
    pub keys: *const u64,
    /// `n` costs, or NULL.
    pub costs: *const u64,
    /// `n` tiers, or NULL.
    pub tiers: *const u32,
    /// The time of every request, or `RATECELL_NOW` for one read of the
    /// limiter's clock.
    pub at_ns: u64,
}

/// Sets `*request` to its defaults: key id 0, cost 1, now, tier 0, and its
/// size. Does nothing when `request` is NULL.
///
/// # Safety
/// `request` is NULL or points to a writable `ratecell_request`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_request_init(request: *mut ratecell_request) {
    ffi_panic_boundary! {
        if !request.is_null() {
            // SAFETY: non-NULL and writable, as the caller promises.
            unsafe {
                request.write(ratecell_request {
                    size: size_of::<ratecell_request>() as u32,
                    tier: 0,
                    key_id: 0,
                    key_bytes: std::ptr::null(),
                    key_len: 0,
                    cost: 1,
                    at_ns: RATECELL_NOW,
                });
            }
        }
    }
}

/// Sets `*batch` to no requests, now, and its size. Does nothing when
/// `batch` is NULL.
///
/// # Safety
/// `batch` is NULL or points to a writable `ratecell_batch`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_batch_init(batch: *mut ratecell_batch) {
    ffi_panic_boundary! {
        if !batch.is_null() {
            // SAFETY: non-NULL and writable, as the caller promises.
            unsafe {
                batch.write(ratecell_batch {
                    size: size_of::<ratecell_batch>() as u32,
                    n: 0,
                    keys: std::ptr::null(),
                    costs: std::ptr::null(),
                    tiers: std::ptr::null(),
                    at_ns: RATECELL_NOW,
                });
            }
        }
    }
}

/// A sized C struct: its size field checked before the rest is read.
///
/// # Safety
/// `ptr` is NULL or points to a readable `T` whose first field is its
/// `u32` size.
pub(super) unsafe fn read_sized<T: Copy>(ptr: *const T) -> Result<T, ratecell_status> {
    if ptr.is_null() {
        return Err(RATECELL_NULL_ARGUMENT);
    }
    // SAFETY: non-NULL, and (as promised) a struct starting with a u32.
    let size = unsafe { ptr.cast::<u32>().read() };
    if size as usize != size_of::<T>() {
        return Err(RATECELL_INVALID_LENGTH);
    }
    // SAFETY: non-NULL and readable, as promised; its size is this
    // library's, so every field is there.
    Ok(unsafe { ptr.read() })
}

/// A C request and its key (its id, or its bytes).
///
/// # Safety
/// `request` is NULL or points to a readable `ratecell_request` whose
/// `key_bytes` are NULL or `key_len` readable bytes valid for `'a`.
pub(super) unsafe fn read_key<'a>(
    request: *const ratecell_request,
) -> Result<(Key<'a>, ratecell_request), ratecell_status> {
    // SAFETY: as promised by the caller.
    let r = unsafe { read_sized(request) }?;
    let key = if r.key_bytes.is_null() {
        if r.key_len != 0 {
            return Err(RATECELL_NULL_ARGUMENT);
        }
        Key::Id(r.key_id)
    } else {
        // SAFETY: the caller promises `key_len` readable bytes.
        Key::Bytes(unsafe { input(r.key_bytes, r.key_len) }?)
    };
    Ok((key, r))
}

impl ratecell_limiter {
    /// The tier `tier` names on this limiter, or `RATECELL_INVALID_TIER`.
    fn tier(&self, tier: u32) -> Result<Tier, ratecell_status> {
        match &*self.inner {
            Inner::Keyed(k) => k.tier(tier as usize).map_err(|_| RATECELL_INVALID_TIER),
            Inner::Direct(_) if tier == 0 => Ok(Tier::DEFAULT),
            Inner::Direct(_) => Err(RATECELL_INVALID_TIER),
        }
    }

    /// The key and request a C request asks for.
    ///
    /// # Safety
    /// `request` is NULL or points to a readable `ratecell_request` whose
    /// key bytes (if any) stay valid for `'a`.
    unsafe fn read<'a>(
        &self,
        request: *const ratecell_request,
    ) -> Result<(Key<'a>, Request), ratecell_status> {
        // SAFETY: as promised by the caller.
        let (key, r) = unsafe { read_key(request) }?;
        let mut request = Request::new(r.cost).tier(self.tier(r.tier)?);
        if r.at_ns != RATECELL_NOW {
            request = request.at(r.at_ns);
        }
        Ok((key, request))
    }
}

/// Decides `*request` and writes the decision to `*out`.
///
/// A denied request is `RATECELL_OK` with `out->allowed == false`. Returns
/// `RATECELL_NULL_ARGUMENT` when `limiter`, `request` or `out` is NULL, or
/// the key's bytes are NULL with a non-zero `key_len`;
/// `RATECELL_INVALID_LENGTH` for a `size` this library does not know or a
/// `key_len` above `PTRDIFF_MAX`; `RATECELL_INVALID_TIER` for a tier the
/// limiter does not have. On failure nothing is checked and `*out` is
/// left unchanged. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `request` is NULL or points to a
/// readable `ratecell_request` (its `key_bytes` NULL or `key_len`
/// readable bytes); `out` is NULL or points to a writable
/// `ratecell_decision`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check(
    limiter: *const ratecell_limiter,
    request: *const ratecell_request,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        // SAFETY: as promised by the caller.
        let (key, request) = try_status!(unsafe { l.read(request) });
        answer_decision!(out, l.inner.check(key, request))
    }
}

/// `ratecell_check` with each limit's own decision and the denying limit's
/// index, written to `*out` (the same combined decision in
/// `out->decision`, the same effect on the limiter). Works on any limiter:
/// one made by `ratecell_limiter_new` has one limit.
///
/// Returns as `ratecell_check`.
///
/// # Safety
/// As for `ratecell_check`; `out` is NULL or points to a writable
/// `ratecell_multi_decision`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_each(
    limiter: *const ratecell_limiter,
    request: *const ratecell_request,
    out: *mut ratecell_multi_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        // SAFETY: as promised by the caller.
        let (key, request) = try_status!(unsafe { l.read(request) });
        answer!(out, l.inner.check_each(key, request).into())
    }
}

/// Decides every request of `*batch` in order, with one clock read (or
/// the batch's `at_ns`), writing whether request `i` was admitted to
/// `allowed_out[i]` (1 or 0) and, when `decisions_out` is not NULL, its
/// decision to `decisions_out[i]`. The decisions are those of the same
/// checks made one by one.
///
/// With `n == 0` the buffers may be NULL and nothing is written. Returns
/// `RATECELL_NULL_ARGUMENT` when `limiter` or `batch` is NULL or, with
/// `n > 0`, `keys` or `allowed_out` is; `RATECELL_INVALID_LENGTH` for a
/// `size` this library does not know or an `n` larger than any buffer of
/// decisions can be; `RATECELL_INVALID_TIER` when any tier is one the
/// limiter does not have (every tier is checked first). Nothing is
/// decided or written on failure. The buffers are only used during the
/// call. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `batch` is NULL or points to a
/// readable `ratecell_batch` whose `keys`, `costs` and `tiers` (when not
/// NULL) hold `n` readable elements; `allowed_out` points to `n` writable
/// bytes; `decisions_out` is NULL or points to `n` writable decisions. The
/// output buffers must not overlap the inputs or each other.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_check_batch(
    limiter: *const ratecell_limiter,
    batch: *const ratecell_batch,
    allowed_out: *mut u8,
    decisions_out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        // SAFETY: as promised by the caller.
        let b = try_status!(unsafe { read_sized(batch) });
        let n = b.n;
        // One bound for every buffer: the decisions are the largest
        // elements, so no buffer of a valid batch can be longer.
        if n > max_len::<ratecell_decision>() {
            return RATECELL_INVALID_LENGTH;
        }
        let keys = try_slice!(b.keys, n);
        let costs = if b.costs.is_null() { None } else { Some(try_slice!(b.costs, n)) };
        let tiers: Option<Vec<Tier>> = if b.tiers.is_null() {
            None
        } else {
            let raw = try_slice!(b.tiers, n);
            Some(try_status!(raw.iter().map(|&t| l.tier(t)).collect()))
        };
        // Written element by element, never borrowed as slices: the
        // caller's buffers may be uninitialised.
        // SAFETY: the caller promises a buffer of `n` elements, disjoint
        // from everything else.
        let mut allowed = try_status!(unsafe { output(allowed_out, n) });
        let mut decisions = if decisions_out.is_null() {
            None
        } else {
            // SAFETY: as for `allowed_out`.
            Some(try_status!(unsafe { output(decisions_out, n) }))
        };
        let now_ns = if b.at_ns == RATECELL_NOW { l.inner.now_ns() } else { b.at_ns };
        let mut each = |i: usize, d: Decision| {
            allowed.write(i, u8::from(d.allowed));
            if let Some(decisions) = decisions.as_mut() {
                decisions.write(i, d.into());
            }
        };
        match &*l.inner {
            Inner::Direct(direct) => {
                // Every tier was checked: a direct limiter's are all 0.
                for i in 0..n {
                    let cost = costs.map_or(1, |c| c[i]);
                    each(i, direct.check(Request::new(cost).at(now_ns)));
                }
            }
            Inner::Keyed(keyed) => {
                let mut batch = Batch::new(keys).at(now_ns);
                if let Some(costs) = costs {
                    batch = batch.costs(costs);
                }
                if let Some(tiers) = &tiers {
                    batch = batch.tiers(tiers);
                }
                keyed.check_batch(batch, each);
            }
        }
        RATECELL_OK
    }
}

/// Whether one request (cost 1, now, tier 0) for the key `key` is
/// admitted: `RATECELL_OK` when it is, `RATECELL_DENIED` when it is not
/// (the same decision as `ratecell_check`'s). It exists because every
/// argument and out-parameter costs a binding whose calls are dear (tens
/// of ns each through Python's ctypes): one key in, one status out, no
/// request or decision to build. A direct limiter computes nothing but
/// the answer.
///
/// Any other status is an error, and nothing was decided:
/// `RATECELL_NULL_ARGUMENT` for a NULL `limiter`. So `== RATECELL_OK`
/// admits only what the limiter admitted. Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_allow(
    limiter: *const ratecell_limiter,
    key: u64,
) -> ratecell_status {
    // The handle check and the choice of limiter cannot panic, so they
    // stand outside the panic boundary, and each kind's check is a tail
    // call into its own function, inside one: a direct limiter's check
    // then never pays for the registers a keyed one's hashing and probing
    // save, nor a keyed one's for a second frame. The plain limiters are
    // matched first, so neither pays for the persisted one's indirection.
    // SAFETY: NULL or a live handle, as the function's contract says.
    let Some(l) = (unsafe { limiter.as_ref() }) else {
        return RATECELL_NULL_ARGUMENT;
    };
    match &l.inner {
        Held::Plain(Inner::Direct(direct)) => allow_direct(direct),
        Held::Plain(Inner::Keyed(keyed)) => allow_keyed(keyed, key),
        Held::Persisted(p) => match &**p {
            Inner::Direct(direct) => allow_direct(direct),
            Inner::Keyed(keyed) => allow_keyed(keyed, key),
        },
    }
}

/// `RATECELL_OK` when admitted, else `RATECELL_DENIED`.
#[inline]
fn answer(allowed: bool) -> ratecell_status {
    if allowed {
        RATECELL_OK
    } else {
        RATECELL_DENIED
    }
}

/// `ratecell_allow` of a direct limiter.
#[inline(never)]
extern "C" fn allow_direct(direct: &ratecell_lib::Limiter) -> ratecell_status {
    ffi_panic_boundary! { answer(direct.allow()) }
}

/// `ratecell_allow` of a keyed limiter.
#[inline(never)]
extern "C" fn allow_keyed(keyed: &ratecell_lib::KeyedLimiter, key: u64) -> ratecell_status {
    ffi_panic_boundary! { answer(keyed.check(key, 1).allowed) }
}

/// Waits until `*request` is admitted (and, for the leaky bucket, until
/// its `wait_ns` has passed), sleeping by `retry_after_ns` (never
/// spinning), for at most about `timeout_ns`, on the limiter's clock (the
/// request's `at_ns` is not used). Blocks the calling thread only.
///
/// Returns `RATECELL_OK` with the admitting decision in `*out`;
/// `RATECELL_TIMED_OUT` with the last (denied) decision in `*out` when the
/// request would not be admitted in time (nothing is taken from the
/// limit); `RATECELL_COST_EXCEEDS_LIMIT` at once, with its decision
/// (`retry_after_ns == UINT64_MAX`) in `*out`, when no wait can ever admit
/// the cost; otherwise as `ratecell_check`. Thread-safe.
///
/// # Safety
/// As for `ratecell_check`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_acquire(
    limiter: *const ratecell_limiter,
    request: *const ratecell_request,
    timeout_ns: u64,
    out: *mut ratecell_decision,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        // SAFETY: as promised by the caller.
        let (key, request) = try_status!(unsafe { l.read(request) });
        let out = try_status!(crate::ptr::out_ptr(out));
        let (decision, status) =
            match l.inner.acquire(key, request, Duration::from_nanos(timeout_ns)) {
                Ok(d) => (d, RATECELL_OK),
                Err(AcquireError::TimedOut(d)) => (d, RATECELL_TIMED_OUT),
                Err(AcquireError::Unsatisfiable(d)) => (d, RATECELL_COST_EXCEEDS_LIMIT),
            };
        // SAFETY: non-NULL, and writable as the caller promises.
        unsafe { ratecell_decision::write_fields(out, &decision) };
        status
    }
}

/// Forgets the state of `*request`'s key (its cost, time and tier are not
/// used): its next request is decided as a fresh key's (an operator
/// unblocking a user). A limiter of capacity 0 forgets its one shared
/// state. Resetting a key that has no state is not an error.
///
/// Returns `RATECELL_OK`, or as `ratecell_check` for a bad argument (but
/// for the tier, which is not read). Thread-safe.
///
/// # Safety
/// `limiter` is NULL or a live handle; `request` as for `ratecell_check`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_reset(
    limiter: *const ratecell_limiter,
    request: *const ratecell_request,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(limiter);
        // SAFETY: as promised by the caller.
        let (key, _) = try_status!(unsafe { read_key(request) });
        l.inner.reset(key);
        RATECELL_OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        ratecell_config, ratecell_config_init, ratecell_limiter_free, ratecell_limiter_new,
    };

    #[test]
    fn allow_answers_with_a_status() {
        let mut cfg = std::mem::MaybeUninit::<ratecell_config>::uninit();
        let mut l: *mut ratecell_limiter = std::ptr::null_mut();
        // SAFETY: valid pointers to local values; the limiter is freed once.
        unsafe {
            ratecell_config_init(cfg.as_mut_ptr(), 1, 3, 3_600_000_000_000);
            let cfg = cfg.assume_init();
            assert_eq!(ratecell_limiter_new(&cfg, &mut l), RATECELL_OK);
            let answers: Vec<ratecell_status> = (0..5).map(|_| ratecell_allow(l, 7)).collect();
            assert_eq!(
                answers,
                [
                    RATECELL_OK,
                    RATECELL_OK,
                    RATECELL_OK,
                    RATECELL_DENIED,
                    RATECELL_DENIED
                ],
                "3 per hour"
            );
            ratecell_limiter_free(l);
            assert_eq!(ratecell_allow(std::ptr::null(), 7), RATECELL_NULL_ARGUMENT);
        }
    }

    #[test]
    fn a_request_of_an_unknown_size_or_tier_is_refused() {
        let mut cfg = std::mem::MaybeUninit::<ratecell_config>::uninit();
        let mut l: *mut ratecell_limiter = std::ptr::null_mut();
        let mut request = std::mem::MaybeUninit::<ratecell_request>::uninit();
        let mut out = ratecell_decision::default();
        // SAFETY: valid pointers to local values; the limiter is freed once.
        unsafe {
            ratecell_config_init(cfg.as_mut_ptr(), 1, 3, 3_600_000_000_000);
            assert_eq!(
                ratecell_limiter_new(&cfg.assume_init(), &mut l),
                RATECELL_OK
            );
            ratecell_request_init(request.as_mut_ptr());
            let mut request = request.assume_init();
            assert_eq!(ratecell_check(l, &request, &mut out), RATECELL_OK);
            assert!(out.allowed);
            request.tier = 1;
            assert_eq!(ratecell_check(l, &request, &mut out), RATECELL_INVALID_TIER);
            request.tier = 0;
            request.size -= 8;
            assert_eq!(
                ratecell_check(l, &request, &mut out),
                RATECELL_INVALID_LENGTH
            );
            request.size += 8;
            request.key_len = 3;
            assert_eq!(
                ratecell_check(l, &request, &mut out),
                RATECELL_NULL_ARGUMENT
            );
            ratecell_limiter_free(l);
        }
    }
}

//! The lease protocol of SPEC §8 for C and every binding that brings its
//! own Redis client: `ratecell_leases`, a node's grants of one leased
//! limit, spent locally (its options, checks, the completion of a grant and
//! its retry, its counters). The grant a check asks for is `grant.rs`'s;
//! `cached_deny`'s remembered denials are `denials.rs`'s.
//!
//! The library does no I/O here. A check answers with a step: decided
//! (units spent, or a denial), decided with a grant to fetch in the
//! background, a grant to fetch now (the check waits on it), or "ask Redis
//! directly". The caller sends the grant's command (its argv is built
//! here, so every binding sends the same bytes), and hands the reply's
//! integers, or nothing when there was no answer in time, to
//! `ratecell_leases_complete`. So the protocol and the local spending exist
//! once, in Rust, and a binding brings only its Redis client and a thread.

use super::grant::ratecell_grant;
use super::limiter::clock_of;
use super::request::{read_key, read_sized};
use super::types::{ratecell_config, ratecell_decision, ratecell_status};
use crate::ptr::{into_raw, out_ptr};
use ratecell_lib::Clock;
use ratecell_lib::lease::{
    FailurePolicy, GrantReply, GrantRequest, LeaseConfig, LeaseError, Leases, Step,
};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ratecell_status::*;

/// `ratecell_lease_options.failure`: deny while no grant can be had.
pub const RATECELL_FAILURE_DENY: u32 = 0;
/// `ratecell_lease_options.failure`: decide by a local limiter of the
/// limit divided by `expected_nodes`.
pub const RATECELL_FAILURE_LOCAL: u32 = 1;

/// `ratecell_leases_check`: decided here; the decision is in `*out`.
pub const RATECELL_STEP_DECIDED: u32 = 0;
/// `ratecell_leases_check`: decided here (in `*out`); send `*grant_out` in
/// the background, then complete it.
pub const RATECELL_STEP_REFILL: u32 = 1;
/// `ratecell_leases_check`: no units; send `*grant_out` now (within the
/// timeout) and complete it: the completion's decision is the check's.
pub const RATECELL_STEP_FETCH: u32 = 2;
/// `ratecell_leases_check`: the key cannot be tracked; decide it with a
/// `RATECELL.CHECK` of its own.
pub const RATECELL_STEP_DIRECT: u32 = 3;

/// How a node holds grants of a leased limit (SPEC §8). Set it up with
/// `ratecell_lease_options_init`, then set what differs. Every duration is
/// in ns; 0 for `max_grant`, `horizon_ns` and `expire_ns` is SPEC §8's
/// default.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratecell_lease_options {
    /// `sizeof(ratecell_lease_options)` as the caller was compiled with; a
    /// size this library does not know is `RATECELL_INVALID_LENGTH`.
    pub size: u32,
    /// `RATECELL_FAILURE_DENY` (the default) or `RATECELL_FAILURE_LOCAL`.
    pub failure: u32,
    /// `RATECELL_FAILURE_LOCAL`: how many nodes share the limit (1 or more).
    pub expected_nodes: u32,
    /// 1: the grant's command carries `AT <the check's time>`, so the server
    /// decides on the node's timeline (explicit times: tests, replays); 0:
    /// the server's clock (the default).
    pub send_at: u32,
    /// `W`, the largest grant (0: a tenth of the limit, at least 1).
    pub max_grant: u64,
    /// `H`, the refill horizon (0: a tenth of the period, at least 1 ms).
    pub horizon_ns: u64,
    /// `E`, a GCRA grant's lifetime (0: the module's default); only GCRA
    /// takes another value.
    pub expire_ns: u64,
    /// The most the node's clock may differ from the server's (1 ms by
    /// default; 0 when both read one timeline, as with `send_at`): a
    /// grant's units are spent only on requests dated in their period, and
    /// this long or more before it ends (SPEC §8).
    pub skew_ns: u64,
    /// Prepended to a key's bytes to make its Redis key; may be NULL when
    /// `prefix_len` is 0. Copied: the library keeps no pointer to it.
    pub prefix: *const u8,
    /// The length of `prefix`.
    pub prefix_len: usize,
}

/// A node's grants of one leased limit, per key: the units in hand, spent
/// by `ratecell_leases_check` on an atomic word per key, and the protocol's
/// bookkeeping. Opaque; made by `ratecell_leases_new`, released by
/// `ratecell_leases_free`. Thread-safe: any number of threads may call any
/// function on it at once, except `ratecell_leases_free`.
pub struct ratecell_leases {
    leases: Leases,
    clock: Clock,
    prefix: Box<[u8]>,
    /// Tells this handle's grants from another's.
    id: u64,
}

/// What a grant's reply, or its absence, decided
/// (`ratecell_leases_complete`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ratecell_completion {
    /// Whether `decision` is the waiting check's (a fetch's completion).
    pub has_decision: bool,
    /// The decision of the check that waited on a fetch.
    pub decision: ratecell_decision,
    /// Whether the grant failed and should be asked again, in the
    /// background, at `retry_at_ns` (`ratecell_leases_retry`).
    pub has_retry: bool,
    /// When to ask again (UNIX ns, on the leases' timeline).
    pub retry_at_ns: u64,
}

/// A node's lease counters (`ratecell_leases_stats`), SPEC §8's
/// `lease_fallbacks` among them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ratecell_lease_stats {
    /// Grants asked for with a check waiting.
    pub fetches: u64,
    /// Grants asked for in the background (refills).
    pub refills: u64,
    /// Replies received.
    pub replies: u64,
    /// Units granted, over every reply.
    pub units_granted: u64,
    /// Replies that granted nothing (the limit is spent for now).
    pub empty_grants: u64,
    /// Grant requests completed with no reply.
    pub failures: u64,
    /// Checks decided by the failure policy.
    pub lease_fallbacks: u64,
    /// Checks denied here by a denial Redis gave, not yet over.
    pub remembered_denials: u64,
    /// Checks the node could not track (`RATECELL_STEP_DIRECT`).
    pub direct: u64,
    /// Keys tracked now.
    pub keys: u64,
}

/// Sets `*options` to SPEC §8's defaults (deny, no prefix, the server's
/// clock, a skew of 1 ms) and its size. Does nothing when `options` is
/// NULL.
///
/// # Safety
/// `options` is NULL or points to a writable `ratecell_lease_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_lease_options_init(options: *mut ratecell_lease_options) {
    ffi_panic_boundary! {
        if !options.is_null() {
            // SAFETY: non-NULL and writable, as the caller promises.
            unsafe {
                options.write(ratecell_lease_options {
                    size: size_of::<ratecell_lease_options>() as u32,
                    failure: RATECELL_FAILURE_DENY,
                    expected_nodes: 1,
                    send_at: 0,
                    max_grant: 0,
                    horizon_ns: 0,
                    expire_ns: 0,
                    skew_ns: 1_000_000,
                    prefix: std::ptr::null(),
                    prefix_len: 0,
                });
            }
        }
    }
}

/// The status a refused lease configuration becomes: each lease field
/// has its own, and the limit's fields theirs.
fn lease_status(e: &LeaseError) -> ratecell_status {
    match e.field {
        "algorithm" => RATECELL_NOT_LEASABLE,
        "max_grant" => RATECELL_INVALID_MAX_GRANT,
        "horizon_ns" => RATECELL_INVALID_HORIZON,
        "expire_ns" => RATECELL_INVALID_EXPIRE,
        "skew_ns" => RATECELL_INVALID_SKEW,
        "expected_nodes" | "failure" => RATECELL_INVALID_FAILURE,
        "limit" => RATECELL_INVALID_LIMIT,
        "period_ns" => RATECELL_INVALID_PERIOD_NS,
        "burst" => RATECELL_INVALID_BURST,
        "sub_windows" => RATECELL_INVALID_SUB_WINDOWS,
        "capacity" => RATECELL_INVALID_CAPACITY,
        _ => RATECELL_INVALID_LENGTH,
    }
}

/// A fresh id per `ratecell_leases`, so a grant is never completed on
/// leases that did not make it.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Makes the leases of the limit `*cfg` (its algorithm, limit, period_ns,
/// burst; `capacity` is how many keys the node tracks at once, 0 for
/// 65,536; `clock` the clock read for `RATECELL_NOW`) held as `*options`
/// says, and writes its handle to `*out`.
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `cfg`, `options`
/// or `out` is NULL (or `prefix` is with a non-zero `prefix_len`);
/// `RATECELL_INVALID_LENGTH` for an options `size` this library does not
/// know or a `prefix_len` above `PTRDIFF_MAX`; the `RATECELL_INVALID_*`
/// status of the first invalid field of `*cfg`; `RATECELL_NOT_LEASABLE`
/// for an algorithm that cannot be leased (leaky_bucket, bucketed_window,
/// sliding_log); `RATECELL_INVALID_MAX_GRANT`, `_HORIZON`, `_EXPIRE`,
/// `_SKEW` or `_FAILURE` for a lease option out of range. On failure
/// `*out` is left unchanged.
///
/// Ownership: the caller owns the leases and releases them with
/// `ratecell_leases_free`. The arguments are only read during the call.
///
/// # Safety
/// `cfg` is NULL or points to a readable `ratecell_config`; `options` is
/// NULL or points to a readable `ratecell_lease_options` (its `prefix`
/// NULL or `prefix_len` readable bytes); `out` is NULL or points to a
/// writable `ratecell_leases *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_leases_new(
    cfg: *const ratecell_config,
    options: *const ratecell_lease_options,
    out: *mut *mut ratecell_leases,
) -> ratecell_status {
    ffi_panic_boundary! {
        let out = try_status!(out_ptr(out));
        let cfg = try_read!(cfg);
        // SAFETY: as promised by the caller.
        let o = try_status!(unsafe { read_sized(options) });
        let prefix = try_slice!(o.prefix, o.prefix_len);
        let (limit, clock_kind) = try_status!(cfg.to_rust());
        if let Err(e) = ratecell_lib::state::Rule::new(&limit) {
            return ratecell_status::from_field(e.field);
        }
        let failure = match o.failure {
            RATECELL_FAILURE_DENY => FailurePolicy::Deny,
            RATECELL_FAILURE_LOCAL => FailurePolicy::Local { expected_nodes: o.expected_nodes },
            _ => return RATECELL_INVALID_FAILURE,
        };
        let config = LeaseConfig::new(limit)
            .max_grant(o.max_grant)
            .horizon_ns(o.horizon_ns)
            .expire_ns(o.expire_ns)
            .skew_ns(o.skew_ns)
            .send_at(o.send_at != 0)
            .failure(failure);
        let leases = try_status!(Leases::new(config).map_err(|e| lease_status(&e)));
        let handle = try_status!(into_raw(ratecell_leases {
            leases,
            clock: clock_of(clock_kind),
            prefix: prefix.into(),
            id: NEXT_ID.fetch_add(1, Relaxed),
        }));
        // SAFETY: non-NULL and writable, as the caller promises.
        unsafe { out.write(handle) };
        RATECELL_OK
    }
}

/// Releases leases made by `ratecell_leases_new`. NULL is a no-op. Must be
/// the last call on them; grants they made must not be used afterwards
/// (free them first).
///
/// # Safety
/// `leases` is NULL or a live handle from `ratecell_leases_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_leases_free(leases: *mut ratecell_leases) {
    ffi_panic_boundary! {
        // SAFETY: NULL or a live handle, as the caller promises.
        unsafe { crate::ptr::free_raw(leases) }
    }
}

/// The leases' clock (`cfg.clock` at `ratecell_leases_new`) in UNIX ns:
/// the time a call given `RATECELL_NOW` uses. 0 for NULL.
///
/// # Safety
/// `leases` is NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_leases_now_ns(leases: *const ratecell_leases) -> u64 {
    ffi_panic_boundary! {
        // SAFETY: NULL or a live handle, as the caller promises.
        match unsafe { leases.as_ref() } {
            Some(l) => l.clock.now_ns(),
            None => 0,
        }
    }
}

impl ratecell_leases {
    /// `now_ns`, or the clock's time for `RATECELL_NOW`.
    fn time(&self, now_ns: u64) -> u64 {
        if now_ns == super::RATECELL_NOW {
            self.clock.now_ns()
        } else {
            now_ns
        }
    }

    /// Boxes `req` with its command, for C.
    fn grant(&self, req: GrantRequest) -> Result<*mut ratecell_grant, ratecell_status> {
        let args = self.leases.command(&req, &self.prefix);
        into_raw(ratecell_grant {
            req,
            args,
            leases_id: self.id,
        })
    }
}

/// Checks `*request` against the units this node holds for its key, and
/// writes what to do to `*step_out` (a `RATECELL_STEP_*` value):
///
/// - `RATECELL_STEP_DECIDED`: the decision is in `*out`; `*grant_out` is
///   set to NULL.
/// - `RATECELL_STEP_REFILL`: the decision is in `*out`, and `*grant_out` a
///   grant to fetch in the background and complete.
/// - `RATECELL_STEP_FETCH`: no units for the key: `*grant_out` is a grant
///   to fetch now, within the timeout; `ratecell_leases_complete` gives the
///   check's decision. `*out` is not written.
/// - `RATECELL_STEP_DIRECT`: the key cannot be tracked now (the node's
///   keys are at capacity); decide it with a `RATECELL.CHECK`. Nothing
///   is written but the step and `*grant_out = NULL`.
///
/// The time is the request's `at_ns`, or the leases' clock for
/// `RATECELL_NOW`, as for `ratecell_check`. A cost of 0 is a peek: always
/// decided here, never a grant.
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` for a NULL `leases`,
/// `request`, `step_out`, `out` or `grant_out` (or NULL key bytes with a
/// non-zero `key_len`); `RATECELL_INVALID_LENGTH` for a `size` this
/// library does not know or a `key_len` above `PTRDIFF_MAX`;
/// `RATECELL_INVALID_TIER` for a tier other than 0 (a leased limit has
/// one); `RATECELL_OUT_OF_MEMORY` when the grant could not be allocated
/// (its check's units may have been spent: a loss, never an admission). A
/// call refused for its arguments spends nothing; no failed call writes
/// anything. Thread-safe.
///
/// Ownership: a grant written to `*grant_out` is the caller's, to pass to
/// `ratecell_leases_complete` and then `ratecell_grant_free`.
///
/// # Safety
/// `leases` is NULL or a live handle; `request` is NULL or points to a
/// readable `ratecell_request` (its `key_bytes` NULL or `key_len` readable
/// bytes); `step_out` is NULL or points to a writable `uint32_t`; `out`
/// is NULL or points to a writable `ratecell_decision`; `grant_out` is
/// NULL or points to a writable `ratecell_grant *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_leases_check(
    leases: *const ratecell_leases,
    request: *const super::ratecell_request,
    step_out: *mut u32,
    out: *mut ratecell_decision,
    grant_out: *mut *mut ratecell_grant,
) -> ratecell_status {
    ffi_panic_boundary! {
        // SAFETY: as promised by the caller.
        match unsafe { leases_check(leases, request, step_out, out, grant_out) } {
            Ok(()) => RATECELL_OK,
            Err(status) => status,
        }
    }
}

/// `ratecell_leases_check`'s body, with `?` for its statuses.
///
/// # Safety
/// As for `ratecell_leases_check`.
#[inline]
unsafe fn leases_check(
    leases: *const ratecell_leases,
    request: *const super::ratecell_request,
    step_out: *mut u32,
    out: *mut ratecell_decision,
    grant_out: *mut *mut ratecell_grant,
) -> Result<(), ratecell_status> {
    // SAFETY: NULL or a live handle, as the caller promises.
    let l = unsafe { leases.as_ref() }.ok_or(RATECELL_NULL_ARGUMENT)?;
    // SAFETY: as promised by the caller.
    let (key, r) = unsafe { read_key(request) }?;
    if r.tier != 0 {
        return Err(RATECELL_INVALID_TIER);
    }
    let step_out = out_ptr(step_out)?;
    let out = out_ptr(out)?;
    let grant_out = out_ptr(grant_out)?;
    let now = l.time(r.at_ns);
    let (step, decision, grant) = match l.leases.check(key, r.cost, now) {
        Step::Decided(d) => (RATECELL_STEP_DECIDED, Some(d), None),
        Step::Refill(d, req) => (RATECELL_STEP_REFILL, Some(d), Some(req)),
        Step::Fetch(req) => (RATECELL_STEP_FETCH, None, Some(req)),
        Step::Direct => (RATECELL_STEP_DIRECT, None, None),
    };
    // A grant that cannot be boxed is lost: its units (none yet) never
    // admit anything, and a fetch's check is refused.
    let grant = match grant {
        Some(req) => l.grant(req)?,
        None => std::ptr::null_mut(),
    };
    if let Some(d) = decision {
        // SAFETY: non-NULL and writable, as the caller promises.
        unsafe { ratecell_decision::write_fields(out, &d) };
    }
    // SAFETY: non-NULL and writable, as the caller promises.
    unsafe {
        grant_out.write(grant);
        step_out.write(step);
    }
    Ok(())
}

/// Hands back the answer to `grant`: `RATECELL.LEASE`'s reply, its `n`
/// integers `reply[0 .. n)` (`[units, expires_at_ns, retry_after_ns,
/// limit, remaining]`, -1 for a retry that can never succeed), or `reply`
/// NULL with `n` 0 when there was no answer in time or an error. `now_ns`
/// is when it came (`RATECELL_NOW`: the leases' clock; with explicit
/// times, the grant's `at_ns`). Writes to `*out` the waiting check's
/// decision (a fetch) and, when the grant failed, when to ask again.
///
/// A grant may be completed more than once (the units of a reply given
/// twice are taken twice: do not); its leases must be those that made it.
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `leases`, `grant`
/// or `out` is NULL, or `reply` is with `n` > 0;
/// `RATECELL_INVALID_LENGTH` for an `n` above any buffer;
/// `RATECELL_INVALID_GRANT` for a grant made by other leases;
/// `RATECELL_INVALID_REPLY` for a reply that is not five integers, or
/// holds a negative one where none may be. On failure nothing is done
/// and `*out` is left unchanged: complete a bad reply again with `reply`
/// NULL (no answer) so that its check is decided. Thread-safe.
///
/// # Safety
/// `leases` is NULL or a live handle; `grant` is NULL or a live grant;
/// `reply` is NULL or points to `n` readable integers; `out` is NULL or
/// points to a writable `ratecell_completion`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_leases_complete(
    leases: *const ratecell_leases,
    grant: *const ratecell_grant,
    reply: *const i64,
    n: usize,
    now_ns: u64,
    out: *mut ratecell_completion,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(leases);
        let g = try_ref!(grant);
        let out = try_status!(out_ptr(out));
        if g.leases_id != l.id {
            return RATECELL_INVALID_GRANT;
        }
        let reply = if reply.is_null() && n == 0 {
            None
        } else {
            let ints = try_slice!(reply, n);
            Some(try_status!(GrantReply::from_ints(ints).map_err(|_| RATECELL_INVALID_REPLY)))
        };
        let c = l.leases.complete(&g.req, reply, l.time(now_ns));
        let completion = ratecell_completion {
            has_decision: c.decision.is_some(),
            decision: c.decision.map(Into::into).unwrap_or_default(),
            has_retry: c.retry_at_ns.is_some(),
            retry_at_ns: c.retry_at_ns.unwrap_or(0),
        };
        // SAFETY: non-NULL and writable, as the caller promises.
        unsafe { out.write(completion) };
        RATECELL_OK
    }
}

/// A new grant asking again for what `grant` asked, at `at_ns` (a
/// completion's `retry_at_ns`), in the background (no check waits on it),
/// written to `*out`. The old grant stays the caller's to free.
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `leases`, `grant`
/// or `out` is NULL; `RATECELL_INVALID_GRANT` for a grant of other
/// leases; `RATECELL_OUT_OF_MEMORY`. Thread-safe.
///
/// # Safety
/// `leases` is NULL or a live handle; `grant` is NULL or a live grant;
/// `out` is NULL or points to a writable `ratecell_grant *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_leases_retry(
    leases: *const ratecell_leases,
    grant: *const ratecell_grant,
    at_ns: u64,
    out: *mut *mut ratecell_grant,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(leases);
        let g = try_ref!(grant);
        let out = try_status!(out_ptr(out));
        if g.leases_id != l.id {
            return RATECELL_INVALID_GRANT;
        }
        let retry = try_status!(l.grant(l.leases.retry(&g.req, at_ns)));
        // SAFETY: non-NULL and writable, as the caller promises.
        unsafe { out.write(retry) };
        RATECELL_OK
    }
}

/// Writes the leases' counters to `*out`.
///
/// Returns `RATECELL_OK` or `RATECELL_NULL_ARGUMENT`. Thread-safe.
///
/// # Safety
/// `leases` is NULL or a live handle; `out` is NULL or points to a
/// writable `ratecell_lease_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_leases_stats(
    leases: *const ratecell_leases,
    out: *mut ratecell_lease_stats,
) -> ratecell_status {
    ffi_panic_boundary! {
        let l = try_ref!(leases);
        let s = l.leases.stats();
        answer!(out, ratecell_lease_stats {
            fetches: s.fetches,
            refills: s.refills,
            replies: s.replies,
            units_granted: s.units_granted,
            empty_grants: s.empty_grants,
            failures: s.failures,
            lease_fallbacks: s.lease_fallbacks,
            remembered_denials: s.remembered_denials,
            direct: s.direct,
            keys: s.keys,
        })
    }
}

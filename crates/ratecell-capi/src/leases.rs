//! The lease protocol of SPEC §8 for C and every binding that brings its
//! own Redis client: `ratecell_leases` (a node's grants of one leased
//! limit, spent locally), `ratecell_grant` (one `RATECELL.LEASE` to send)
//! and `ratecell_denials` (`cached_deny`'s remembered denials).
//!
//! The library does no I/O here. A check answers with a step: decided
//! (units spent, or a denial), decided with a grant to fetch in the
//! background, a grant to fetch now (the check waits on it), or "ask Redis
//! directly". The caller sends the grant's command (its argv is built
//! here, so every binding sends the same bytes), and hands the reply's
//! integers, or nothing when there was no answer in time, to
//! `ratecell_leases_complete`. So the protocol and the local spending exist
//! once, in Rust, and a binding brings only its Redis client and a thread.

use super::limiter::clock_of;
use super::request::read_sized;
use super::types::{ratecell_clock, ratecell_config, ratecell_decision, ratecell_status};
use super::{input, into_raw, out_ptr};
use ratecell_lib::lease::{
    DenialCache, FailurePolicy, GrantReply, GrantRequest, LeaseConfig, LeaseError, Leases, Step,
};
use ratecell_lib::{Clock, Decision, Key};
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

/// The most arguments a grant's command has (`RATECELL.LEASE` included):
/// thirteen, and two `CHARGE <at_ns> <units>` triples for a key's debt.
pub const RATECELL_LEASE_MAX_ARGS: usize = 19;

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

/// A grant to ask Redis for, with the command that asks for it. Opaque;
/// made by `ratecell_leases_check` (a refill or a fetch) or
/// `ratecell_leases_retry`, released by `ratecell_grant_free`. Owned by one
/// caller at a time; it may be moved to another thread (the refill
/// thread). It keeps the key's entry alive, not the `ratecell_leases`:
/// free the grants before the leases that made them, or at least never
/// use a grant after its leases is freed.
pub struct ratecell_grant {
    req: GrantRequest,
    args: Vec<Vec<u8>>,
    leases_id: u64,
}

/// What `ratecell_grant_info` tells of a grant.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratecell_grant_info {
    /// The key's bytes (a `uint64_t` key's 8 little-endian bytes), without
    /// the prefix; owned by the grant, valid until it is freed.
    pub key: *const u8,
    /// The length of `key`.
    pub key_len: usize,
    /// `w`, the units asked for.
    pub want: u64,
    /// The time of the check that asked (UNIX ns).
    pub at_ns: u64,
    /// Whether a check waits on it (a fetch) rather than none (a refill, a
    /// retry).
    pub is_fetch: bool,
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

/// `cached_deny`'s memory: denials Redis gave, per key, kept until their
/// `retry_after`. Opaque; made by `ratecell_denials_new`, released by
/// `ratecell_denials_free`. Thread-safe, but for `ratecell_denials_free`.
pub struct ratecell_denials {
    cache: DenialCache,
    clock: Clock,
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
        unsafe { crate::free_raw(leases) }
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

/// A request's key, read from C.
///
/// # Safety
/// `r.key_bytes` is NULL or points to `r.key_len` readable bytes, valid for
/// `'a`.
unsafe fn key_of<'a>(r: &super::ratecell_request) -> Result<Key<'a>, ratecell_status> {
    if r.key_bytes.is_null() {
        if r.key_len != 0 {
            return Err(RATECELL_NULL_ARGUMENT);
        }
        return Ok(Key::Id(r.key_id));
    }
    // SAFETY: `key_len` readable bytes, as the caller promises.
    Ok(Key::Bytes(unsafe { input(r.key_bytes, r.key_len) }?))
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
    let r = unsafe { read_sized(request) }?;
    // SAFETY: the request's key bytes, as promised by the caller.
    let key = unsafe { key_of(&r) }?;
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

/// Writes what `grant` asks for to `*out`.
///
/// Returns `RATECELL_OK` or `RATECELL_NULL_ARGUMENT`.
///
/// # Safety
/// `grant` is NULL or a live grant; `out` is NULL or points to a writable
/// `ratecell_grant_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_grant_info(
    grant: *const ratecell_grant,
    out: *mut ratecell_grant_info,
) -> ratecell_status {
    ffi_panic_boundary! {
        let g = try_ref!(grant);
        let key = g.req.key();
        answer!(out, ratecell_grant_info {
            key: key.as_ptr(),
            key_len: key.len(),
            want: g.req.want(),
            at_ns: g.req.at_ns(),
            is_fetch: g.req.is_fetch(),
        })
    }
}

/// The `RATECELL.LEASE` command that asks for `grant`, its name first:
/// writes the number of arguments to `*argc` and, when `cap` is at least
/// that, argument `i` to `args[i]` (owned by the grant, valid until it is
/// freed) and its length to `lens[i]`. The Redis key is the leases'
/// prefix followed by the key's bytes; `AT` is sent when the options said
/// `send_at`; the key's debt under the `local` policy follows as `CHARGE`
/// triples. At most `RATECELL_LEASE_MAX_ARGS` arguments.
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `grant` or `argc`
/// is NULL, or `args` or `lens` is with `cap` > 0; `RATECELL_INVALID_LENGTH`
/// when `cap` is below the count (only `*argc` is written).
///
/// # Safety
/// `grant` is NULL or a live grant; `argc` is NULL or writable; `args`
/// and `lens` are NULL or point to `cap` writable elements each.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_grant_command(
    grant: *const ratecell_grant,
    args: *mut *const u8,
    lens: *mut usize,
    cap: usize,
    argc: *mut usize,
) -> ratecell_status {
    ffi_panic_boundary! {
        let g = try_ref!(grant);
        let argc = try_status!(out_ptr(argc));
        let n = g.args.len();
        // SAFETY: non-NULL and writable, as the caller promises.
        unsafe { argc.write(n) };
        if cap < n {
            return RATECELL_INVALID_LENGTH;
        }
        // SAFETY: `cap` writable elements each, as the caller promises.
        let mut a = try_status!(unsafe { super::output(args, cap) });
        // SAFETY: as for `args`.
        let mut l = try_status!(unsafe { super::output(lens, cap) });
        for (i, arg) in g.args.iter().enumerate() {
            a.write(i, arg.as_ptr());
            l.write(i, arg.len());
        }
        RATECELL_OK
    }
}

/// Releases a grant. NULL is a no-op. Dropping a grant unanswered is
/// allowed: its units were never granted, so nothing is lost but a refill
/// (the key asks again when it runs out).
///
/// # Safety
/// `grant` is NULL or a live grant, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_grant_free(grant: *mut ratecell_grant) {
    ffi_panic_boundary! {
        // SAFETY: NULL or a live handle, as the caller promises.
        unsafe { crate::free_raw(grant) }
    }
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
        unsafe { crate::free_raw(denials) }
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
    let r = unsafe { read_sized(request) }?;
    // SAFETY: as promised by the caller.
    let key = unsafe { key_of(&r) }?;
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

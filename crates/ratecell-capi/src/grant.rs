//! `ratecell_grant`: one `RATECELL.LEASE` a node's leases ask Redis for
//! (SPEC §8), made by `ratecell_leases_check` or `ratecell_leases_retry`
//! (`leases.rs`), with the command's arguments built here so that every
//! binding sends the same bytes; what it asks for, read back; and its
//! release. The reply goes back through `ratecell_leases_complete`.

use super::types::ratecell_status;
use crate::ptr::{out_ptr, output};
use ratecell_lib::lease::GrantRequest;

use ratecell_status::*;

/// The most arguments a grant's command has (`RATECELL.LEASE` included):
/// thirteen, and two `CHARGE <at_ns> <units>` triples for a key's debt.
pub const RATECELL_LEASE_MAX_ARGS: usize = 19;

/// A grant to ask Redis for, with the command that asks for it. Opaque;
/// made by `ratecell_leases_check` (a refill or a fetch) or
/// `ratecell_leases_retry`, released by `ratecell_grant_free`. Owned by one
/// caller at a time; it may be moved to another thread (the refill
/// thread). It keeps the key's entry alive, not the `ratecell_leases`:
/// free the grants before the leases that made them, or at least never
/// use a grant after its leases is freed.
pub struct ratecell_grant {
    pub(crate) req: GrantRequest,
    pub(crate) args: Vec<Vec<u8>>,
    /// Tells the grants of one `ratecell_leases` from another's.
    pub(crate) leases_id: u64,
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
        let mut a = try_status!(unsafe { output(args, cap) });
        // SAFETY: as for `args`.
        let mut l = try_status!(unsafe { output(lens, cap) });
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
        unsafe { crate::ptr::free_raw(grant) }
    }
}

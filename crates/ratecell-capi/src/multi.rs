//! Several limits as one through the C ABI: `ratecell_limiter_build` with
//! `n_limits` > 1 makes an ordinary `ratecell_limiter` (every check,
//! acquire and batch returns the combined decision on it), and
//! `ratecell_check_each` also returns each limit's own decision and which
//! limit denied, in one `ratecell_multi_decision`; and the live change of
//! a limiter's limits.

use super::limiter::{Inner, ratecell_limiter};
use super::types::{ratecell_clock, ratecell_config, ratecell_decision, ratecell_status};
use crate::ptr::input;
use ratecell_lib::{Config, MultiDecision};

use ratecell_status::*;

/// The most limits one limiter checks together (`n_limits` of
/// `ratecell_options`).
pub const RATECELL_MAX_LIMITS: usize = 8;
// A literal for cbindgen, which does not evaluate paths; kept equal here.
const _: () = assert!(RATECELL_MAX_LIMITS == ratecell_lib::MAX_LIMITS);

/// `denied_by` of a `ratecell_multi_decision` when no limit denied.
pub const RATECELL_NO_LIMIT: u32 = u32::MAX;

/// One request's answer from a limiter of several limits.
///
/// `decision` is the combined decision (what `ratecell_check` returns):
/// admitted when every limit admits; `remaining` the least over the limits
/// and `limit` that limit's (the first on ties), each on its state after
/// the decision (unchanged when denied); `retry_after_ns` the largest of the
/// limits' own (`UINT64_MAX` if any says never); `reset_after_ns` the
/// largest; `wait_ns` the largest when admitted.
///
/// `limits[0..count]` are the limits' own decisions, in the order of the
/// configs given to `ratecell_limiter_build` (one for a limiter made by
/// `ratecell_limiter_new`); the rest is zeroed. A limit that alone would
/// admit a request another denies says `allowed` with the `remaining` and
/// `reset_after_ns` of its unchanged state.
///
/// `denied_by` is the index of the limit that denied (the one whose wait is
/// the combined `retry_after_ns`, the lowest on ties), or
/// `RATECELL_NO_LIMIT` when admitted or when no limit denied but a keyed
/// table had no room for a new key (overflow deny). Names are the caller's:
/// index them by `denied_by`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ratecell_multi_decision {
    /// The combined decision.
    pub decision: ratecell_decision,
    /// The denying limit's index, or `RATECELL_NO_LIMIT`.
    pub denied_by: u32,
    /// How many entries of `limits` are set.
    pub count: u32,
    /// Each limit's own decision.
    pub limits: [ratecell_decision; RATECELL_MAX_LIMITS],
}

impl From<MultiDecision> for ratecell_multi_decision {
    fn from(d: MultiDecision) -> Self {
        let mut out = ratecell_multi_decision {
            decision: d.decision.into(),
            denied_by: d.denied_by.map_or(RATECELL_NO_LIMIT, |i| i as u32),
            count: d.limits().len() as u32,
            ..Default::default()
        };
        for (o, each) in out.limits.iter_mut().zip(d.limits()) {
            *o = (*each).into();
        }
        out
    }
}

/// Reads `configs[0..n]` from C: 1 to `RATECELL_MAX_LIMITS` configs on one
/// clock, else the status naming what is wrong (`RATECELL_INVALID_LENGTH`,
/// `RATECELL_NULL_ARGUMENT`, a field's `RATECELL_INVALID_*`,
/// `RATECELL_INVALID_CLOCK` when the clocks differ).
///
/// # Safety
/// `configs` is NULL or points to `n` readable configs.
pub(super) unsafe fn configs_arg(
    configs: *const ratecell_config,
    n: usize,
) -> Result<(Vec<Config>, ratecell_clock), ratecell_status> {
    if n == 0 || n > RATECELL_MAX_LIMITS {
        return Err(RATECELL_INVALID_LENGTH);
    }
    // SAFETY: the caller promises `n` readable configs (or NULL, refused);
    // every field is an integer, so any bit pattern is valid.
    let raw = unsafe { input(configs, n) }?;
    let mut rust: Vec<Config> = Vec::with_capacity(n);
    let mut clock_kind = None;
    for cfg in raw {
        let (config, kind) = cfg.to_rust()?;
        if *clock_kind.get_or_insert(kind) != kind {
            return Err(RATECELL_INVALID_CLOCK);
        }
        rust.push(config);
    }
    Ok((rust, clock_kind.expect("n > 0")))
}

/// Changes a running limiter's limits to `configs[0..n]`, keeping every
/// state: checks on other threads go on and each sees the old limits or
/// the new ones, never a mix. `n` is the limiter's number of limits (1 for
/// one made by `ratecell_limiter_new`). What a state's `remaining` is
/// right after the change follows each algorithm's carry-over rule
/// (docs/ALGORITHMS.md, "Live reconfiguration").
///
/// Returns `RATECELL_OK`; `RATECELL_NULL_ARGUMENT` when `limiter` is NULL
/// or `configs` is NULL with `n > 0`; `RATECELL_INVALID_LENGTH` when `n` is
/// 0 or above `RATECELL_MAX_LIMITS`; the `RATECELL_INVALID_*` status naming
/// the first invalid field of the first invalid config (as at
/// construction); `RATECELL_RECONFIGURE_REFUSED` when the change is not
/// allowed live: another number of limits, algorithm, capacity, overflow
/// or clock; a window algorithm's period; the bucketed window's
/// sub-windows; the sliding log's limit; a limit or burst whose counts need
/// another bit width than at construction; a shared-region limiter. On any
/// failure nothing changed.
///
/// Thread-safe, with every other call on the handle; `configs` is only
/// read during the call. Every reconfiguration keeps the replaced
/// parameters (a few hundred bytes) until `ratecell_limiter_free`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `configs` is NULL or points to `n`
/// readable configs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ratecell_limiter_reconfigure(
    limiter: *const ratecell_limiter,
    configs: *const ratecell_config,
    n: usize,
) -> ratecell_status {
    ffi_panic_boundary! {
        // SAFETY: the caller promises a live handle or NULL.
        let limiter = try_status!(unsafe { super::limiter::handle(limiter) });
        // SAFETY: as promised by the caller.
        let (rust, clock_kind) = try_status!(unsafe { configs_arg(configs, n) });
        if clock_kind != limiter.clock {
            return RATECELL_RECONFIGURE_REFUSED;
        }
        let done = match &*limiter.inner {
            Inner::Direct(l) => l.reconfigure(&rust),
            Inner::Keyed(k) => k.reconfigure(&rust),
        };
        try_status!(done.map_err(|e| ratecell_status::from_error(&e)));
        RATECELL_OK
    }
}

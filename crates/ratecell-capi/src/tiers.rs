//! A quota per tier through the C ABI: `ratecell_limiter_build` with
//! `n_tiers` ≥ 1 makes an ordinary keyed `ratecell_limiter` whose requests
//! name their key's tier (`ratecell_request.tier`, `ratecell_batch.tiers`);
//! a request that names none is tier 0's, the default tier.

use super::limiter::{Inner, ratecell_limiter};
use super::types::{ratecell_clock, ratecell_config, ratecell_status};
use crate::ptr::input;
use ratecell_lib::Config;

use ratecell_status::*;

/// The most tiers one limiter serves (`n_tiers` of `ratecell_options`).
pub const RATECELL_MAX_TIERS: usize = 16;
// A literal for cbindgen, which does not evaluate paths; kept equal here.
const _: () = assert!(RATECELL_MAX_TIERS == ratecell_lib::MAX_TIERS);

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
    if !(1..=ratecell_lib::MAX_LIMITS).contains(&n_limits)
        || !(1..=RATECELL_MAX_TIERS).contains(&n_tiers)
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
            Some(l) => match &*l.inner {
                Inner::Keyed(k) => k.tiers() as u32,
                Inner::Direct(_) => 1,
            },
        }
    }
}

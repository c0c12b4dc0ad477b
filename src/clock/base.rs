//! Where a clock's counter stands on the UNIX timeline: the one
//! calibration the in-process clocks and a shared region's clock share.

use std::time::{SystemTime, UNIX_EPOCH};

/// A counter value and the UNIX time (ns) of the same instant: the
/// counter is read on both sides of the wall clock and the middle taken,
/// so the offset is off by at most half of one read. (A shared region's
/// calibration places its counter the same way.)
pub(crate) fn unix_base(raw: impl Fn() -> u64) -> (u64, u64) {
    let before = raw();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let after = raw();
    (before + (after.wrapping_sub(before)) / 2, wall)
}

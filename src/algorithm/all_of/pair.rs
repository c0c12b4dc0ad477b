//! Two single-word limits decided by one copy of the check made for their
//! pair of algorithms (`decide_pair`), in either layout.

use super::*;

/// A composite of one single-word limit with its rule's type known (a tier
/// of one limit, `crate::policy::tiers`): its own decision is the combined one,
/// denied or not; nothing to decide again or combine.
#[derive(Clone, Copy, Debug)]
pub(super) struct One<A> {
    pub(super) a: A,
    pub(super) bits: u32,
}
impl<A: WordAlgorithm> WordAlgorithm for One<A> {
    type State = u128;

    fn algorithm(&self) -> Algorithm {
        self.a.algorithm()
    }

    #[inline]
    fn decide(&self, state: u128, t: u64, n: u64) -> (Decision, Option<u128>) {
        self.decide_each(state, t, n, &mut [])
    }

    #[allow(clippy::inline_always, reason = "as decide_pair")]
    #[inline(always)]
    fn decide_each(
        &self,
        state: u128,
        t: u64,
        n: u64,
        out: &mut [Decision],
    ) -> (Decision, Option<u128>) {
        let own = state & mask(self.bits);
        let (d, stored) = self.a.decide(self.a.unpack(own), t, n);
        if let Some(o) = out.first_mut() {
            *o = d;
        }
        let stored = stored.map(|s| self.a.pack(s));
        (d, (d.allowed && n > 0).then(|| stored.unwrap_or(own)))
    }

    fn is_fresh_at(&self, state: u128, t: u64) -> bool {
        self.a.is_fresh_at(self.a.unpack(state), t)
    }

    #[inline]
    fn pack(&self, state: u128) -> u128 {
        state
    }

    #[inline]
    fn unpack(&self, word: u128) -> u128 {
        word & mask(self.bits)
    }

    fn state_bits(&self) -> u32 {
        self.bits
    }

    fn validate(&self, state: u128) -> Result<(), StateError> {
        packed_validate(&self.a, state)
    }
}
/// A composite of two single-word limits with both rules' types known:
/// the first's state in the low bits, the second's from bit `at`. The
/// rules by reference: copied into the check, their fields would be
/// loaded once and spilled to the stack.
#[derive(Clone, Copy, Debug)]
#[cfg(feature = "pair-checks")]
pub(super) struct Pair<'r, A, B> {
    pub(super) a: &'r A,
    pub(super) b: &'r B,
    pub(super) at: u32,
    pub(super) size: u32,
}
#[cfg(feature = "pair-checks")]
impl<A: WordAlgorithm, B: WordAlgorithm> WordAlgorithm for Pair<'_, A, B> {
    type State = u128;

    fn algorithm(&self) -> Algorithm {
        self.a.algorithm()
    }

    #[inline]
    fn decide(&self, state: u128, t: u64, n: u64) -> (Decision, Option<u128>) {
        self.decide_each(state, t, n, &mut [])
    }

    #[allow(clippy::inline_always, reason = "as decide_pair")]
    #[inline(always)]
    fn decide_each(
        &self,
        state: u128,
        t: u64,
        n: u64,
        out: &mut [Decision],
    ) -> (Decision, Option<u128>) {
        // Each state's bits above its own are ignored by its `unpack`.
        let at = self.at();
        let (sa, sb) = (state, state >> at);
        let (d, next) = decide_pair(self.a, self.b, (sa, sb), t, n, out);
        (d, next.map(|(na, nb)| na | nb << at))
    }

    fn is_fresh_at(&self, state: u128, t: u64) -> bool {
        self.a.is_fresh_at(self.a.unpack(state), t)
            && self.b.is_fresh_at(self.b.unpack(state >> self.at()), t)
    }

    #[inline]
    fn pack(&self, state: u128) -> u128 {
        state
    }

    /// The word as it is: each limit's `unpack` ignores the bits above its
    /// own state, which is all a check needs (the bits above `size` are
    /// the owner's: the table masks its fingerprint off before this).
    #[inline]
    fn unpack(&self, word: u128) -> u128 {
        word
    }

    fn state_bits(&self) -> u32 {
        self.size
    }

    fn validate(&self, state: u128) -> Result<(), StateError> {
        let at = self.at();
        packed_validate(self.a, state & mask(at))?;
        packed_validate(self.b, (state >> at) & mask(self.size - at))
    }
}
#[cfg(feature = "pair-checks")]
impl<A: WordAlgorithm, B: WordAlgorithm> Pair<'_, A, B> {
    /// Where the second state starts: a constant when the first's width
    /// is (`WordAlgorithm::FIXED_BITS`), so the split and the join of the
    /// two states are no shifts by a variable amount.
    #[inline]
    pub(super) fn at(&self) -> u32 {
        debug_assert!(A::FIXED_BITS.is_none_or(|bits| bits == self.at));
        A::FIXED_BITS.unwrap_or(self.at)
    }
}
#[inline(always)]
#[cfg(feature = "pair-checks")]
pub(super) fn decide_pair<A: WordAlgorithm, B: WordAlgorithm>(
    a: &A,
    b: &B,
    (sa, sb): (u128, u128),
    t: u64,
    n: u64,
    out: &mut [Decision],
) -> (Decision, Option<(u128, u128)>) {
    let (da, na) = a.decide(a.unpack(sa), t, n);
    let (db, nb) = b.decide(b.unpack(sb), t, n);
    if da.allowed && db.allowed {
        let combined = combine_pair(da, db, true, out);
        let next = match (na, nb) {
            (Some(na), Some(nb)) => Some((a.pack(na), b.pack(nb))),
            _ => None,
        };
        return (combined, next);
    }
    denied_pair(a, b, (sa, sb), (da, db), t, out)
}

/// [`decide_pair`]'s denial: a limit that admitted reports its unchanged
/// state ([`AllOf::unspent`]), then the two decisions combine as
/// [`combine`] combines any list. Always inlined, as [`decide_pair`] is: a
/// denied check is as common as an admitted one under load, and left to
/// the inliner this is a call on the denial's path.
#[allow(
    clippy::inline_always,
    reason = "part of decide_pair's body, whose decisions stay in registers"
)]
#[inline(always)]
#[cfg(feature = "pair-checks")]
pub(super) fn denied_pair<A: WordAlgorithm, B: WordAlgorithm>(
    a: &A,
    b: &B,
    (sa, sb): (u128, u128),
    (mut da, mut db): (Decision, Decision),
    t: u64,
    out: &mut [Decision],
) -> (Decision, Option<(u128, u128)>) {
    if da.allowed {
        let never = a.decide(a.unpack(sa), t, da.limit.saturating_add(1)).0;
        da = AllOf::unspent(da, never);
    }
    if db.allowed {
        let never = b.decide(b.unpack(sb), t, db.limit.saturating_add(1)).0;
        db = AllOf::unspent(db, never);
    }
    (combine_pair(da, db, false, out), None)
}

/// [`combine`] for two decisions, built in registers, and [`report`] of
/// both to `out`. When denied, an admitting limit's `retry_after_ns` is 0,
/// so the largest of both is the largest of the denying ones.
#[allow(
    clippy::inline_always,
    reason = "part of decide_pair's body, whose decisions stay in registers"
)]
#[inline(always)]
#[cfg(feature = "pair-checks")]
pub(super) fn combine_pair(
    da: Decision,
    db: Decision,
    allowed: bool,
    out: &mut [Decision],
) -> Decision {
    // Not a loop over `out.iter_mut().zip([da, db])`: that zip was left
    // out of line, a call per check.
    if let Some(o) = out.get_mut(0) {
        *o = da;
    }
    if let Some(o) = out.get_mut(1) {
        *o = db;
    }
    let least = if db.remaining < da.remaining { db } else { da };
    Decision {
        allowed,
        limit: least.limit,
        remaining: least.remaining,
        retry_after_ns: if allowed {
            0
        } else {
            da.retry_after_ns.max(db.retry_after_ns)
        },
        reset_after_ns: da.reset_after_ns.max(db.reset_after_ns),
        wait_ns: if allowed {
            da.wait_ns.max(db.wait_ns)
        } else {
            0
        },
    }
}

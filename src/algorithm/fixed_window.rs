//! Fixed window ([SPEC §4](crate::spec#4-the-algorithms)): `limit` per window `[w·P, (w+1)·P)`.
//!
//! Packing: the window index `w = t / P` in the low `bits_for(u64::MAX / P)`
//! bits (at most 55, for P = 1 µs), then the count in `bits_for(limit)` bits
//! (at most 32): at most 87 bits, so a keyed table keeps at least 41 bits of
//! fingerprint beside it.

use super::{StateError, WordAlgorithm, at_most, bits_for, effective_cost, mask};
use crate::check::decision::{Decision, saturate};
use crate::config::{Algorithm, MAX_LIMIT, Params};

#[derive(Clone, Copy, Debug)]
pub(crate) struct FixedWindow {
    limit: u64,
    period: u64,
    window_bits: u32,
    count_bits: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub window: u64,
    pub count: u64,
}

impl FixedWindow {
    pub(crate) fn new(p: &Params) -> FixedWindow {
        FixedWindow {
            limit: p.limit,
            period: p.period,
            window_bits: bits_for(u64::MAX / p.period),
            count_bits: bits_for(p.limit),
        }
    }

    /// The bits each count is packed in (from the limit or burst).
    pub(crate) fn count_bits(&self) -> u32 {
        self.count_bits
    }

    /// The same rule packing its counts in `bits` (at least its own): the
    /// layout several tiers with different limits share (`crate::policy::tiers`).
    pub(crate) fn with_count_bits(mut self, bits: u32) -> Self {
        debug_assert!(bits >= self.count_bits && bits <= 32);
        self.count_bits = bits;
        self
    }

    /// Adds `n` units admitted at `t` without a decision of this rule (a
    /// leased node's admissions while Redis was away, SPEC §8): counted in
    /// `t`'s window, nothing if that window is over in `s`. The count
    /// saturates at the largest limit, which every loader accepts.
    pub(crate) fn charge(&self, s: State, t: u64, n: u64) -> State {
        let w = t / self.period;
        let (window, count) = match s.window.cmp(&w) {
            std::cmp::Ordering::Greater => return s,
            std::cmp::Ordering::Equal => (w, s.count),
            std::cmp::Ordering::Less => (w, 0),
        };
        State {
            window,
            count: count.saturating_add(n).min(MAX_LIMIT),
        }
    }
}

impl WordAlgorithm for FixedWindow {
    type State = State;

    fn algorithm(&self) -> Algorithm {
        Algorithm::FixedWindow
    }

    /// [`WordAlgorithm::decide_each`], always inlined: a forwarding call.
    /// Through the trait's default (`#[inline]` only), the direct fixed
    /// window's check left `WordCell::decide` out of line, its decision
    /// returned through memory.
    #[allow(
        clippy::inline_always,
        reason = "see above: the check's decision stays in registers"
    )]
    #[inline(always)]
    fn decide_each(
        &self,
        s: State,
        t: u64,
        n: u64,
        _each: &mut [Decision],
    ) -> (Decision, Option<State>) {
        self.decide(s, t, n)
    }

    #[allow(
        clippy::inline_always,
        reason = "two limits in a block decide in one generic body, too large for the inliner's own choice; a call passes the decision through memory"
    )]
    #[inline(always)]
    fn decide(&self, s: State, t: u64, n: u64) -> (Decision, Option<State>) {
        let q = effective_cost(n);
        let w = t / self.period;
        // A window in the future (time went back) keeps its count.
        let (window, mut count) = if s.window >= w {
            (s.window, s.count)
        } else {
            (w, 0)
        };
        let allowed = u128::from(count) + u128::from(q) <= u128::from(self.limit);
        if allowed && n > 0 {
            count += n;
        }
        let until_end =
            saturate((u128::from(window) + 1) * u128::from(self.period) - u128::from(t));
        let decision = Decision {
            allowed,
            limit: self.limit,
            // Saturating: a state kept while the limit was lowered (the
            // Redis module allows that) may count more than the new limit.
            remaining: self.limit.saturating_sub(count),
            retry_after_ns: if allowed {
                0
            } else if q > self.limit {
                u64::MAX
            } else {
                until_end
            },
            reset_after_ns: if count == 0 { 0 } else { until_end },
            wait_ns: 0,
        };
        (
            decision,
            (allowed && n > 0).then_some(State { window, count }),
        )
    }

    #[inline]
    fn is_fresh_at(&self, s: State, t: u64) -> bool {
        s.window < t / self.period || s.count == 0
    }

    #[inline]
    fn pack(&self, s: State) -> u128 {
        u128::from(s.window) | (u128::from(s.count) << self.window_bits)
    }

    #[inline]
    fn unpack(&self, word: u128) -> State {
        State {
            window: (word & mask(self.window_bits)) as u64,
            count: ((word >> self.window_bits) & mask(self.count_bits)) as u64,
        }
    }

    fn state_bits(&self) -> u32 {
        self.window_bits + self.count_bits
    }

    /// The window is one some time has (`w ≤ u64::MAX / P`); the count
    /// is at most the largest limit any configuration has (a lowered
    /// limit keeps a larger count: it is denied until the window ends).
    fn validate(&self, s: State) -> Result<(), StateError> {
        let alg = Algorithm::FixedWindow;
        at_most(
            alg,
            0,
            "window",
            s.window,
            u64::MAX / self.period,
            "the last window any time has",
        )?;
        at_most(alg, 1, "count", s.count, MAX_LIMIT, "the largest limit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Algorithm, Config};

    const MINUTE: u64 = 60_000_000_000;
    const SECOND: u64 = 1_000_000_000;

    /// Seed "Rate Limiting Part 1": 2 per minute; requests at 00:00:24 and
    /// 00:00:36 pass, 00:00:49 is rejected, 00:01:12 passes (a new window).
    #[test]
    fn seed_two_per_minute() {
        let p = Config::new(Algorithm::FixedWindow, 2, MINUTE)
            .params()
            .unwrap();
        let fw = FixedWindow::new(&p);
        let mut s = State::default();
        for (at, admitted) in [(24, true), (36, true), (49, false), (72, true)] {
            let (d, next) = fw.decide(s, at * SECOND, 1);
            assert_eq!(d.allowed, admitted, "request at {at} s");
            if let Some(next) = next {
                s = next;
            }
        }
        let (d, next) = fw.decide(s, 80 * SECOND, 1);
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
        let (d, _) = fw.decide(next.unwrap(), 90 * SECOND, 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ns, 30 * SECOND, "denied until 00:02:00");
    }

    /// The edge burst the seeds warn about: 2 per minute admits 4 within a
    /// few seconds across a window boundary.
    #[test]
    fn admits_twice_the_limit_across_a_boundary() {
        let p = Config::new(Algorithm::FixedWindow, 2, MINUTE)
            .params()
            .unwrap();
        let fw = FixedWindow::new(&p);
        let mut s = State::default();
        let mut admitted = 0;
        for at in [58, 59, 61, 62] {
            let (d, next) = fw.decide(s, at * SECOND, 1);
            admitted += u32::from(d.allowed);
            s = next.unwrap_or(s);
        }
        assert_eq!(admitted, 4);
    }

    #[test]
    fn pack_round_trips_at_the_widest_layout() {
        let p = Config::new(Algorithm::FixedWindow, u32::MAX.into(), 1_000)
            .params()
            .unwrap();
        let fw = FixedWindow::new(&p);
        assert_eq!(fw.state_bits(), 55 + 32);
        let s = State {
            window: u64::MAX / 1_000,
            count: u32::MAX.into(),
        };
        assert_eq!(fw.unpack(fw.pack(s)), s);
    }
}

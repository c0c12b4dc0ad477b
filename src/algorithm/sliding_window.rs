//! Sliding window counter ([SPEC §4](crate::spec#4-the-algorithms)): the current window's count plus the
//! previous window's, weighted by how much of it the sliding window still
//! covers. Decided in exact 128-bit integers, never floats.
//!
//! Packing: window index in `bits_for(u64::MAX / P)` bits (at most 55), then
//! `prev` and `cur` in `bits_for(limit)` bits each (at most 32): at most 119
//! bits. That is one 128-bit cell for a direct limiter; a keyed table needs
//! 32 bits of fingerprint beside it, so it refuses a limit and period whose
//! state exceeds 96 bits (for example limit ≥ 2^20 with a 1 µs period; any
//! limit below 2^20 fits every period).

use super::{StateError, WordAlgorithm, at_most, bits_for, effective_cost, mask};
use crate::check::decision::{Decision, saturate};
use crate::config::{Algorithm, MAX_LIMIT, Params};

#[derive(Clone, Copy, Debug)]
pub(crate) struct SlidingWindow {
    limit: u64,
    period: u64,
    window_bits: u32,
    count_bits: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub window: u64,
    pub prev: u64,
    pub cur: u64,
}

impl SlidingWindow {
    pub(crate) fn new(p: &Params) -> SlidingWindow {
        SlidingWindow {
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
    /// `t`'s window, which is `s`'s current or previous one, or a later one
    /// (then rolled to); nothing if it is older. Counts saturate at the
    /// largest limit, which every loader accepts.
    pub(crate) fn charge(&self, s: State, t: u64, n: u64) -> State {
        let w = t / self.period;
        let add = |c: u64| c.saturating_add(n).min(MAX_LIMIT);
        let mut s = self.roll(s, t);
        if s.window == w {
            s.cur = add(s.cur);
        } else if s.window == w + 1 {
            s.prev = add(s.prev);
        }
        s
    }

    /// Rolls the stored state to the window of `t`; a stored window in the
    /// future (time went back) is kept.
    #[inline]
    fn roll(&self, s: State, t: u64) -> State {
        let w = t / self.period;
        if s.window >= w {
            s
        } else if s.window + 1 == w {
            State {
                window: w,
                prev: s.cur,
                cur: 0,
            }
        } else {
            State {
                window: w,
                prev: 0,
                cur: 0,
            }
        }
    }

    /// The least wait from `t` until a request of cost `q` fits, given the
    /// rolled state `s` and the elapsed part `e` of its window; `q ≤ limit`.
    fn earliest(&self, s: State, e: u128, q: u64, t: u64) -> u64 {
        let (p, l) = (u128::from(self.period), u128::from(self.limit));
        let start = u128::from(s.window) * p;
        let since = |at: u128| saturate(at - u128::from(t));
        // In this window: prev·(P − e') ≤ (L − cur − q)·P, for e' in (e, P).
        let room = l.checked_sub(u128::from(s.cur) + u128::from(q));
        if let (Some(room), true) = (room, s.prev > 0) {
            let covered = room * p / u128::from(s.prev);
            let e_min = p.saturating_sub(covered).max(e + 1);
            if e_min < p {
                return since(start + e_min);
            }
        }
        // Next window: prev' = cur, cur' = 0: cur·(P − e') ≤ (L − q)·P.
        let next = start + p;
        if s.cur == 0 {
            return since(next);
        }
        let covered = (l - u128::from(q)) * p / u128::from(s.cur);
        let e_min = p.saturating_sub(covered);
        if e_min < p {
            return since(next + e_min);
        }
        // The window after: both counts have left.
        since(next + p)
    }
}

impl WordAlgorithm for SlidingWindow {
    type State = State;

    fn algorithm(&self) -> Algorithm {
        Algorithm::SlidingWindow
    }

    #[allow(
        clippy::inline_always,
        reason = "two limits in a block decide in one generic body, too large for the inliner's own choice; a call passes the decision through memory"
    )]
    #[inline(always)]
    fn decide(&self, s: State, t: u64, n: u64) -> (Decision, Option<State>) {
        let q = effective_cost(n);
        let (p, l) = (u128::from(self.period), u128::from(self.limit));
        let mut s = self.roll(s, t);
        let start = u128::from(s.window) * p;
        let e = u128::from(t).max(start) - start;
        let weighted = u128::from(s.prev) * (p - e);
        let allowed = weighted + (u128::from(s.cur) + u128::from(q)) * p <= l * p;
        let before = s;
        if allowed && n > 0 {
            s.cur += n;
        }
        let used = weighted + u128::from(s.cur) * p;
        let remaining = if s.prev == 0 {
            // Nothing weighted: (L·P − cur·P) / P, without the 128-bit
            // division (a call to `__udivti3`, 14% of the samples of a
            // token bucket + sliding window check).
            self.limit.saturating_sub(s.cur)
        } else {
            ((l * p).saturating_sub(used) / p) as u64
        };
        let after = |windows: u128| saturate(start + windows * p - u128::from(t));
        let reset_after_ns = if s.cur > 0 {
            after(2)
        } else if s.prev > 0 {
            after(1)
        } else {
            0
        };
        let retry_after_ns = if allowed {
            0
        } else if q > self.limit {
            u64::MAX
        } else {
            self.earliest(before, e, q, t)
        };
        let decision = Decision {
            allowed,
            limit: self.limit,
            remaining,
            retry_after_ns,
            reset_after_ns,
            wait_ns: 0,
        };
        (decision, (allowed && n > 0).then_some(s))
    }

    #[inline]
    fn is_fresh_at(&self, s: State, t: u64) -> bool {
        let s = self.roll(s, t);
        s.prev == 0 && s.cur == 0
    }

    #[inline]
    fn pack(&self, s: State) -> u128 {
        u128::from(s.window)
            | (u128::from(s.prev) << self.window_bits)
            | (u128::from(s.cur) << (self.window_bits + self.count_bits))
    }

    #[inline]
    fn unpack(&self, word: u128) -> State {
        let counts = mask(self.count_bits);
        State {
            window: (word & mask(self.window_bits)) as u64,
            prev: ((word >> self.window_bits) & counts) as u64,
            cur: ((word >> (self.window_bits + self.count_bits)) & counts) as u64,
        }
    }

    fn state_bits(&self) -> u32 {
        self.window_bits + 2 * self.count_bits
    }

    /// The window is one some time has (`w ≤ u64::MAX / P`); each count
    /// is at most the largest limit any configuration has (a lowered
    /// limit keeps larger counts, which then deny).
    fn validate(&self, s: State) -> Result<(), StateError> {
        let alg = Algorithm::SlidingWindow;
        at_most(
            alg,
            0,
            "window",
            s.window,
            u64::MAX / self.period,
            "the last window any time has",
        )?;
        at_most(
            alg,
            1,
            "previous count",
            s.prev,
            MAX_LIMIT,
            "the largest limit",
        )?;
        at_most(
            alg,
            2,
            "current count",
            s.cur,
            MAX_LIMIT,
            "the largest limit",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Algorithm, Config};

    const MINUTE: u64 = 60_000_000_000;
    const SECOND: u64 = 1_000_000_000;

    fn window(limit: u64) -> SlidingWindow {
        let p = Config::new(Algorithm::SlidingWindow, limit, MINUTE)
            .params()
            .unwrap();
        SlidingWindow::new(&p)
    }

    /// Seed "Rate limiting algorithms": 100/min, 88 in the previous window,
    /// 12 in this one, 15 s in: 88·45/60 + 12 + 1 = 79 ≤ 100, admitted.
    #[test]
    fn seed_hundred_per_minute_admits_at_79() {
        let sw = window(100);
        let s = State {
            window: 2,
            prev: 88,
            cur: 12,
        };
        let (d, next) = sw.decide(s, 2 * MINUTE + 15 * SECOND, 1);
        assert!(d.allowed);
        assert_eq!(next.unwrap().cur, 13);
        // 100 − 66 − 13 = 21 more fit now.
        assert_eq!(d.remaining, 21);
    }

    /// Seed "Rate Limiting Part 1", as corrected by its reader: 10/min,
    /// prev 9, cur 5, 25 % in: 9·0.75 + 5 + 1 = 12.75 > 10, denied.
    #[test]
    fn seed_ten_per_minute_denies_at_12_75() {
        let sw = window(10);
        let s = State {
            window: 1,
            prev: 9,
            cur: 5,
        };
        let (d, next) = sw.decide(s, MINUTE + 15 * SECOND, 1);
        assert!(!d.allowed);
        assert_eq!(next, None);
        // Admitted once 9·(60 − e)/60 ≤ 4, i.e. e ≥ 33.33 s: at e = 33.333…4 s.
        let e_min = MINUTE - 4 * MINUTE / 9;
        assert_eq!(d.retry_after_ns, e_min - 15 * SECOND);
    }

    #[test]
    fn pack_round_trips_at_the_widest_layout() {
        let p = Config::new(Algorithm::SlidingWindow, u32::MAX.into(), 1_000)
            .params()
            .unwrap();
        let sw = SlidingWindow::new(&p);
        assert_eq!(sw.state_bits(), 119);
        let s = State {
            window: u64::MAX / 1_000,
            prev: u32::MAX.into(),
            cur: 7,
        };
        assert_eq!(sw.unpack(sw.pack(s)), s);
    }
}

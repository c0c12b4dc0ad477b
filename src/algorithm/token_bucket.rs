//! Token bucket with interval refill ([SPEC §4](crate::spec#4-the-algorithms)): `limit` tokens are added
//! every whole `period` since the last refill, up to `burst`.
//!
//! Packing: `last` (UNIX ns) in the low 64 bits, then `used = burst − tokens`
//! in the next `bits_for(burst)` bits (at most 32). Storing tokens *used*
//! rather than tokens left makes the all-zero word the fresh, full bucket.
//! Limits: none beyond SPEC's, a 128-bit word leaves at least 32 bits for a
//! keyed table's fingerprint.

use super::{StateError, WordAlgorithm, at_most, bits_for, effective_cost, mask};
use crate::check::decision::{Decision, saturate};
use crate::config::{Algorithm, MAX_LIMIT, Params};

#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenBucket {
    limit: u64,
    period: u64,
    burst: u64,
    used_bits: u32,
}

/// Tokens taken since the bucket was last full, and the refill clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub used: u64,
    pub last: u64,
}

impl TokenBucket {
    pub(crate) fn new(p: &Params) -> TokenBucket {
        TokenBucket {
            limit: p.limit,
            period: p.period,
            burst: p.burst,
            used_bits: bits_for(p.burst),
        }
    }

    /// The bits each count is packed in (from the limit or burst).
    pub(crate) fn count_bits(&self) -> u32 {
        self.used_bits
    }

    /// The same rule packing its counts in `bits` (at least its own): the
    /// layout several tiers with different limits share (`crate::policy::tiers`).
    pub(crate) fn with_count_bits(mut self, bits: u32) -> Self {
        debug_assert!(bits >= self.used_bits && bits <= 32);
        self.used_bits = bits;
        self
    }

    /// Takes `n` tokens used at `t` without a decision of this rule (a
    /// leased node's admissions while Redis was away, SPEC §8), from the
    /// bucket as refilled at `t` (at `s.last` if `t` is earlier: a refill
    /// step already counted); the bucket empties and goes no lower.
    pub(crate) fn charge(&self, s: State, t: u64, n: u64) -> State {
        let (tokens, last) = self.refill(s, t);
        State {
            used: self.burst - tokens.saturating_sub(n),
            last,
        }
    }

    /// Refills at `t`: returns (tokens, last) as SPEC's refill step leaves them.
    #[inline]
    fn refill(&self, s: State, t: u64) -> (u64, u64) {
        let t_e = t.max(s.last);
        let mut tokens = self.burst - s.used.min(self.burst);
        let mut last = s.last;
        let elapsed = t_e - last;
        if elapsed >= self.period {
            let k = elapsed / self.period;
            let refilled = u128::from(tokens) + u128::from(k) * u128::from(self.limit);
            tokens = refilled.min(u128::from(self.burst)) as u64;
            last += k * self.period;
        }
        if tokens == self.burst {
            last = t_e;
        }
        (tokens, last)
    }

    /// Time from `t` until `need` more tokens have been refilled after `last`.
    ///
    /// `need` is at most `burst`, so with a burst no larger than the limit
    /// (the default, burst = limit) one period always refills it: that
    /// case takes no division (a hardware `div`, which took 7% of the
    /// samples of a token bucket + sliding window check; GCRA's
    /// reciprocal, `Divisor`, measured slower than the `div` here).
    #[inline]
    fn until_refilled(&self, last: u64, need: u64, t: u64) -> u64 {
        let periods = if need <= self.limit {
            u64::from(need != 0)
        } else {
            need.div_ceil(self.limit)
        };
        let periods = u128::from(periods);
        saturate(u128::from(last) + periods * u128::from(self.period) - u128::from(t))
    }
}

impl WordAlgorithm for TokenBucket {
    type State = State;

    fn algorithm(&self) -> Algorithm {
        Algorithm::TokenBucket
    }

    #[allow(
        clippy::inline_always,
        reason = "two limits in a block decide in one generic body, too large for the inliner's own choice; a call passes the decision through memory"
    )]
    #[inline(always)]
    fn decide(&self, s: State, t: u64, n: u64) -> (Decision, Option<State>) {
        let q = effective_cost(n);
        let (mut tokens, last) = self.refill(s, t);
        let allowed = q <= tokens;
        if allowed && n > 0 {
            tokens -= n;
        }
        let retry_after_ns = if allowed {
            0
        } else if q > self.burst {
            u64::MAX
        } else {
            self.until_refilled(last, q - tokens, t)
        };
        let reset_after_ns = if tokens == self.burst {
            0
        } else {
            self.until_refilled(last, self.burst - tokens, t)
        };
        let decision = Decision {
            allowed,
            limit: self.burst,
            remaining: tokens,
            retry_after_ns,
            reset_after_ns,
            wait_ns: 0,
        };
        let stored = State {
            used: self.burst - tokens,
            last,
        };
        (decision, (allowed && n > 0).then_some(stored))
    }

    #[inline]
    fn is_fresh_at(&self, s: State, t: u64) -> bool {
        self.refill(s, t).0 == self.burst
    }

    #[inline]
    fn pack(&self, s: State) -> u128 {
        u128::from(s.last) | (u128::from(s.used) << 64)
    }

    #[inline]
    fn unpack(&self, word: u128) -> State {
        State {
            last: word as u64,
            used: ((word >> 64) & mask(self.used_bits)) as u64,
        }
    }

    fn state_bits(&self) -> u32 {
        64 + self.used_bits
    }

    /// `used` is at most the largest burst any configuration has (a
    /// lowered burst keeps a larger `used`, read as an empty bucket);
    /// `last` is a time, and every `u64` is one.
    fn validate(&self, s: State) -> Result<(), StateError> {
        at_most(
            Algorithm::TokenBucket,
            0,
            "tokens used",
            s.used,
            MAX_LIMIT,
            "the largest burst",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Algorithm, Config};

    /// The seed's example: capacity 3, refilled with 3 tokens per minute.
    #[test]
    fn seed_three_per_minute_refills_after_a_minute() {
        let p = Config::new(Algorithm::TokenBucket, 3, 60_000_000_000)
            .params()
            .unwrap();
        let tb = TokenBucket::new(&p);
        let t0 = 120_000_000_000;
        let mut s = State::default();
        for left in [2, 1, 0] {
            let (d, next) = tb.decide(s, t0 + 1_000_000_000, 1);
            assert!(d.allowed);
            assert_eq!(d.remaining, left);
            s = next.unwrap();
        }
        let (d, _) = tb.decide(s, t0 + 30_000_000_000, 1);
        assert!(
            !d.allowed,
            "the fourth request in the same minute is rejected"
        );
        assert_eq!(d.retry_after_ns, 31_000_000_000);
        let (d, _) = tb.decide(s, t0 + 61_000_000_000, 1);
        assert!(d.allowed, "refilled one minute after the first take");
        assert_eq!(d.remaining, 2);
    }

    /// The refill wait without a division (need ≤ limit) agrees with
    /// `div_ceil` on both sides of the limit, for bursts below, at and
    /// above it.
    #[test]
    fn until_refilled_matches_div_ceil() {
        for limit in [1u64, 2, 3, 7, 1000] {
            for burst in [
                1,
                limit.saturating_sub(1).max(1),
                limit,
                limit + 1,
                3 * limit,
            ] {
                let p = Config::new(Algorithm::TokenBucket, limit, 1_000)
                    .burst(burst)
                    .params()
                    .unwrap();
                let tb = TokenBucket::new(&p);
                for need in 0..=burst {
                    let at = 5_000;
                    assert_eq!(
                        tb.until_refilled(at, need, at),
                        need.div_ceil(limit) * 1_000,
                        "limit {limit}, burst {burst}, need {need}"
                    );
                }
            }
        }
    }

    #[test]
    fn pack_round_trips() {
        let p = Config::new(Algorithm::TokenBucket, 7, 1_000_000)
            .burst(u32::MAX.into())
            .params()
            .unwrap();
        let tb = TokenBucket::new(&p);
        let s = State {
            used: u32::MAX.into(),
            last: u64::MAX,
        };
        assert_eq!(tb.unpack(tb.pack(s)), s);
        assert_eq!(tb.state_bits(), 96);
    }
}

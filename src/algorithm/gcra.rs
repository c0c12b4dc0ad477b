//! GCRA and the leaky bucket as a queue ([SPEC §4](crate::spec#4-the-algorithms)): one theoretical arrival
//! time per state.
//!
//! Packing: the state is `tat`, a UNIX time in ns, the whole low 64 bits of
//! the word (a direct limiter keeps it in an `AtomicU64`). The limits this
//! sets: `burst × T` must stay below 2^62 ns (checked at construction, see
//! [`crate::MAX_GCRA_TOLERANCE_NS`]), so a `tat` fits for every time
//! before 2^63 ns (the year 2262); a request whose new `tat` would pass
//! `u64::MAX` is denied, never stored wrapped.

use super::{Divisor, WordAlgorithm, effective_cost};
use crate::check::decision::Decision;
use crate::config::{Algorithm, Params};

/// GCRA with emission interval `T` and tolerance `B·T`; with `queue` set it
/// is the leaky bucket, and admitted requests learn their place in the queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gcra {
    interval: u64,
    /// Divides by `interval` (`remaining`, on every check).
    per_interval: Divisor,
    tolerance: u64,
    burst: u64,
    queue: bool,
}

impl Gcra {
    pub(crate) fn new(p: &Params, queue: bool) -> Gcra {
        Gcra {
            interval: p.interval,
            per_interval: Divisor::new(p.interval),
            // Below 2^62 by validation.
            tolerance: p.burst * p.interval,
            burst: p.burst,
            queue,
        }
    }

    /// Adds `n` units admitted at `t` without a decision of this rule (a
    /// leased node's admissions while Redis was away, SPEC §8): `tat`
    /// moves on by `n` emission intervals from `max(tat, t)`, as an
    /// admission would move it, saturating at the end of time.
    pub(crate) fn charge(&self, tat: u64, t: u64, n: u64) -> u64 {
        tat.max(t).saturating_add(n.saturating_mul(self.interval))
    }

    /// The emission interval `T`.
    pub(crate) fn interval(&self) -> u64 {
        self.interval
    }
}

impl WordAlgorithm for Gcra {
    /// `tat`; 0 is fresh.
    type State = u64;

    fn algorithm(&self) -> Algorithm {
        if self.queue {
            Algorithm::LeakyBucket
        } else {
            Algorithm::Gcra
        }
    }

    #[allow(
        clippy::inline_always,
        reason = "two limits in a block decide in one generic body, too large for the inliner's own choice; a call passes the decision through memory"
    )]
    #[inline(always)]
    fn decide(&self, tat: u64, t: u64, n: u64) -> (Decision, Option<u64>) {
        let q = effective_cost(n);
        let base = tat.max(t);
        // The new `tat`, base + q·T, and its wait `new - t` (new ≥ base ≥ t
        // unless it passed u64::MAX, `past`, which is denied: never stored
        // wrapped). In u64 with carries, not in u128 or with `checked_*`
        // options: the same values in half the instructions, on the path of
        // every check.
        let (step, step_past) = q.overflowing_mul(self.interval);
        let (new, new_past) = base.overflowing_add(step);
        let past = step_past | new_past;
        let wait = new.wrapping_sub(t);
        let allowed = !past & (wait <= self.tolerance);
        let stores = allowed && n > 0;
        let stored = if stores { new } else { tat };
        // stored.max(t) - t
        let reset_after = if stores { wait } else { base - t };
        // Each further cost-1 request adds T to max(stored, t) = t +
        // reset_after, which must stay within the tolerance of t and within
        // u64::MAX: near the end of the timeline fewer fit than the
        // tolerance allows (none, for the one denied as `past`). Both
        // bounds in one division, floor(min(a, b) / T) being the lesser of
        // the two floors; `u64::MAX - t` is at least `reset_after`.
        let room = self.tolerance.min(u64::MAX - t);
        let remaining = self.per_interval.divide(room.saturating_sub(reset_after));
        let retry_after_ns = if allowed {
            0
        } else if past || q > self.burst {
            // Never: a cost beyond the burst, or a `tat` past u64::MAX.
            u64::MAX
        } else {
            wait - self.tolerance
        };
        let decision = Decision {
            allowed,
            limit: self.burst,
            remaining,
            retry_after_ns,
            reset_after_ns: reset_after,
            wait_ns: if self.queue && allowed { base - t } else { 0 },
        };
        (decision, stores.then_some(stored))
    }

    #[inline]
    fn is_fresh_at(&self, tat: u64, t: u64) -> bool {
        tat <= t
    }

    #[inline]
    fn pack(&self, tat: u64) -> u128 {
        u128::from(tat)
    }

    #[inline]
    fn unpack(&self, word: u128) -> u64 {
        word as u64
    }

    fn state_bits(&self) -> u32 {
        64
    }

    const FIXED_BITS: Option<u32> = Some(64);

    // `validate` is the default: every `tat` is one some time stores (at
    // `t`, any `tat ≤ t + B·T` that fits a `u64`), and a `tat` far ahead
    // of the clock only keeps its key denied until then.
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;
    use crate::config::{Algorithm, Config};
    use proptest::prelude::*;

    fn gcra(limit: u64, period: u64, burst: u64) -> Gcra {
        let p = Config::new(Algorithm::Gcra, limit, period)
            .burst(burst)
            .params()
            .unwrap();
        Gcra::new(&p, false)
    }

    /// [SPEC §2](crate::spec#2-configuration): the seed's "100 req/s with a burst of 5" is burst = 6 here:
    /// six at once, then one every 10 ms.
    #[test]
    fn seed_burst_of_five_admits_six_then_spaces_by_interval() {
        let g = gcra(100, 1_000_000_000, 6);
        let t0 = 1_000_000_000_000;
        let mut tat = 0;
        for i in 0..6 {
            let (d, s) = g.decide(tat, t0, 1);
            assert!(d.allowed, "request {i}");
            assert_eq!(d.remaining, 5 - i);
            tat = s.unwrap();
        }
        let (d, s) = g.decide(tat, t0, 1);
        assert!(!d.allowed);
        assert_eq!(s, None);
        assert_eq!(d.retry_after_ns, 10_000_000);
        assert_eq!(d.reset_after_ns, 60_000_000);
        let (d, _) = g.decide(tat, t0 + 10_000_000, 1);
        assert!(d.allowed);
    }

    /// The decision as it was computed in u128 before it moved to u64
    /// with overflow checks: the reference the u64 form must match.
    fn decide_u128(g: &Gcra, tat: u64, t: u64, n: u64) -> (Decision, Option<u64>) {
        use crate::check::decision::saturate;
        let q = effective_cost(n);
        let base = tat.max(t);
        let new = u128::from(base) + u128::from(q) * u128::from(g.interval);
        let wait = new - u128::from(t);
        let allowed = wait <= u128::from(g.tolerance) && new <= u128::from(u64::MAX);
        let stored = if allowed && n > 0 { new as u64 } else { tat };
        let reset_after = stored.max(t) - t;
        let remaining = (g.tolerance.saturating_sub(reset_after) / g.interval)
            .min((u64::MAX - stored.max(t)) / g.interval);
        let retry_after_ns = if allowed {
            0
        } else if q > g.burst || new > u128::from(u64::MAX) {
            u64::MAX
        } else {
            saturate(wait - u128::from(g.tolerance))
        };
        let decision = Decision {
            allowed,
            limit: g.burst,
            remaining,
            retry_after_ns,
            reset_after_ns: reset_after,
            wait_ns: if g.queue && allowed { base - t } else { 0 },
        };
        (decision, (allowed && n > 0).then_some(stored))
    }

    /// Times near a state's `tat`, near u64::MAX and anywhere.
    fn near(anchor: u64) -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            (0u64..1 << 40).prop_map(move |d| anchor.saturating_sub(d)),
            (0u64..1 << 40).prop_map(move |d| anchor.saturating_add(d)),
            (0u64..1 << 40).prop_map(|d| u64::MAX - d),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        #[test]
        fn u64_decision_is_the_u128_one(
            period in prop_oneof![1_000u64..1 << 24, 1_000u64..1 << 40, 1_000u64..31_622_400_000_000_000],
            limit_seed: u64,
            burst in prop_oneof![1u64..64, 1u64..1 << 32],
            queue: bool,
            tat in near(1 << 62),
            t in near(1 << 62),
            n in prop_oneof![0u64..4, any::<u64>(), 0u64..1 << 33],
        ) {
            let limit = 1 + limit_seed % period.min(u64::from(u32::MAX));
            let algorithm = if queue { Algorithm::LeakyBucket } else { Algorithm::Gcra };
            let p = Config::new(algorithm, limit, period).burst(burst).params();
            prop_assume!(p.is_ok(), "an invalid config");
            let p = p.unwrap();
            let g = Gcra::new(&p, queue);
            prop_assert_eq!(g.decide(tat, t, n), decide_u128(&g, tat, t, n));
            // And from a state at the request's own time.
            prop_assert_eq!(g.decide(t, t, n), decide_u128(&g, t, t, n));
        }
    }

    /// SPEC §4: at the end of the timeline a fresh key is denied for
    /// ever (its `tat` would pass u64::MAX), and `remaining` says so: no
    /// cost-1 request fits, whatever the burst. Just before, as many as
    /// fit.
    #[test]
    fn remaining_counts_only_the_tats_that_fit_in_a_u64() {
        for queue in [false, true] {
            let algorithm = if queue {
                Algorithm::LeakyBucket
            } else {
                Algorithm::Gcra
            };
            let p = Config::new(algorithm, 10, 1_000_000_000)
                .burst(5)
                .params()
                .unwrap();
            let g = Gcra::new(&p, queue);
            let t = u64::MAX - 1;
            let (d, stored) = g.decide(0, t, 1);
            assert!(!d.allowed && stored.is_none());
            assert_eq!(d.retry_after_ns, u64::MAX);
            assert_eq!(d.remaining, 0, "{algorithm:?}: denied for ever");
            // Room for two intervals of 100 ms: two are admitted, and the
            // decisions count down to 0 as they are.
            let t = u64::MAX - 2 * 100_000_000;
            let (d, stored) = g.decide(0, t, 0);
            assert!(d.allowed && stored.is_none());
            assert_eq!(d.remaining, 2, "{algorithm:?}: a peek");
            let (d, tat) = g.decide(0, t, 1);
            assert_eq!((d.allowed, d.remaining), (true, 1));
            let (d, tat) = g.decide(tat.unwrap(), t, 1);
            assert_eq!((d.allowed, d.remaining), (true, 0));
            let (d, _) = g.decide(tat.unwrap(), t, 1);
            assert_eq!(
                (d.allowed, d.remaining, d.retry_after_ns),
                (false, 0, u64::MAX)
            );
        }
    }

    #[test]
    fn leaky_bucket_returns_queue_position() {
        let p = Config::new(Algorithm::LeakyBucket, 10, 1_000_000_000)
            .burst(3)
            .params()
            .unwrap();
        let q = Gcra::new(&p, true);
        let mut tat = 0;
        let waits: Vec<u64> = (0..3)
            .map(|_| {
                let (d, s) = q.decide(tat, 5_000_000_000, 1);
                tat = s.unwrap();
                d.wait_ns
            })
            .collect();
        assert_eq!(waits, [0, 100_000_000, 200_000_000]);
    }
}

//! A keyed limiter's tiers: a quota per tier, the tier named by each
//! check (`Builder::tier`, `KeyedLimiter::tier`).

use super::*;

impl KeyedLimiter {
    /// How many tiers this limiter serves (1 for a limiter built without
    /// tiers: tier 0 is its limits).
    #[inline]
    pub fn tiers(&self) -> usize {
        self.tiers.len().max(1)
    }

    /// Tier `tier`'s limits, in order; `None` past the last tier.
    pub fn tier_limits(&self, tier: usize) -> Option<&[Config]> {
        if self.tiers.is_empty() {
            return (tier == 0).then(|| self.limits());
        }
        self.tiers.get(tier).map(|t| &t[..])
    }

    /// Tier `index`, for a [`Request::tier`] or a [`crate::Batch::tiers`];
    /// refused past the last tier.
    ///
    /// ```
    /// use ratecell::{Algorithm, Config, KeyedLimiter, Request};
    ///
    /// let free = Config::new(Algorithm::Gcra, 2, 1_000_000_000).capacity(10_000);
    /// let paid = Config::new(Algorithm::Gcra, 100, 1_000_000_000).capacity(10_000);
    /// let limiter = KeyedLimiter::builder().tier(&[free]).tier(&[paid]).build().unwrap();
    /// let paid_tier = limiter.tier(1).unwrap();
    /// let t = 1_700_000_000_000_000_000;
    /// assert_eq!((0..10).filter(|_| limiter.check(1, Request::new(1).at(t)).allowed).count(), 2);
    /// let paid_request = Request::new(1).at(t).tier(paid_tier);
    /// assert_eq!((0..10).filter(|_| limiter.check(2, paid_request).allowed).count(), 10);
    /// assert!(limiter.tier(2).is_err(), "no tier 2");
    /// ```
    // Inlined: a caller may name its tier on every check (the `tiers`
    // benchmark does), and as a call it returns the `Result` through
    // memory.
    #[inline]
    pub fn tier(&self, index: usize) -> Result<Tier, TierError> {
        let tiers = self.tiers();
        if index < tiers {
            Ok(Tier::checked(index))
        } else {
            Err(TierError { tier: index, tiers })
        }
    }

    /// Decides one request for the key hashed to `h` under `tier`'s limits
    /// and counts it, writing each limit's own decision to `each` (as many
    /// as fit): the decision's six words, then the tier's number of limits.
    /// A tier this limiter lacks is never admitted: [`Decision::NEVER`],
    /// counted, and 0 limits. (A limiter without tiers lacks every tier
    /// here: its callers decide its tier 0 by its own check.)
    ///
    /// Out of line, and words: returned as a decision and a count, the
    /// result came back through memory, copied with wider loads than its
    /// stores.
    #[inline(never)]
    fn decide_in_tier_words(
        &self,
        h: u64,
        at: impl At,
        n: u64,
        tier: usize,
        each: &mut [Decision],
    ) -> [u64; 7] {
        // Each arm counts and packs its own decision: where the two arms
        // met in one decision, it was copied through the stack twice.
        let counted = |d: Decision, len: usize| {
            self.checks.record(d.allowed);
            let Words([a, b, c, e, f, g]) = Words::of(d);
            [a, b, c, e, f, g, len as u64]
        };
        match &self.tables {
            Tables::TieredWord(t) => {
                let tiers = t.alg().get();
                if let Ok(alg) = tiers.get(tier) {
                    let d = t.check_as(alg, h, at, n, u64::MAX, each).0;
                    return counted(d, tiers.limits());
                }
            }
            Tables::TieredBlock(t) => {
                let tiers = t.alg().get();
                if let Ok(alg) = tiers.get(tier) {
                    return counted(t.check_as(alg, h, at, n, each), tiers.limits());
                }
            }
            _ => {}
        }
        let Words([a, b, c, e, f, g]) = Words::of(self.never());
        [a, b, c, e, f, g, 0]
    }

    /// Decides one request for the key hashed to `h` under `tier`'s limits,
    /// with each limit's own decision, and counts it (a tier this limiter
    /// lacks: [`Decision::NEVER`] alone).
    pub(super) fn decide_tier(&self, h: u64, at: impl At, n: u64, tier: usize) -> MultiDecision {
        let mut each = [Decision::default(); MAX_LIMITS];
        let [words @ .., len] = self.decide_in_tier_words(h, at, n, tier, &mut each);
        let d = Words(words).decision();
        match len {
            0 => MultiDecision::of_one(d),
            len => MultiDecision::of_many(d, each, len as usize),
        }
    }

    /// The decision of a tiered table for `tier` (one it lacks is never
    /// admitted), counted: the table's check out of line, in one call
    /// whatever the tier, and no other table's check inline beside it.
    #[allow(
        clippy::inline_always,
        reason = "a call would return the result through memory"
    )]
    #[inline(always)]
    pub(super) fn tiered_decision(&self, h: u64, at: impl At, n: u64, tier: usize) -> Decision {
        let [words @ .., _] = self.decide_in_tier_words(h, at, n, tier, &mut []);
        Words(words).decision()
    }

    /// The decision of a request naming a tier this limiter does not have,
    /// counted as a denial (as a batch counts it). Built where it is used,
    /// so a check whose arms meet in one decision keeps it in registers
    /// (from a call, it comes back through memory); only the count is out
    /// of line.
    #[inline]
    pub(super) fn never(&self) -> Decision {
        self.count_never();
        Decision::NEVER
    }

    #[cold]
    #[inline(never)]
    fn count_never(&self) {
        self.checks.record(false);
    }

    /// The tiered batch: the one batch loop, each request under its tier
    /// (one this limiter does not have is denied, [`Decision::NEVER`]).
    pub(super) fn batch_tiers(
        &self,
        keys: &[u64],
        tiers: &[Tier],
        costs: Option<&[u64]>,
        now_ns: u64,
        mut each: impl FnMut(usize, Decision),
    ) {
        match &self.tables {
            Tables::TieredWord(t) => {
                let all = t.alg().get();
                self.batch(
                    |h| t.prefetch(h),
                    |i, h, cost| match all.get(tiers[i].index()) {
                        Ok(alg) => t.check_as(alg, h, now_ns, cost, u64::MAX, &mut []).0,
                        Err(_) => Decision::NEVER,
                    },
                    keys,
                    costs,
                    &mut each,
                );
            }
            Tables::TieredBlock(t) => {
                let all = t.alg().get();
                self.batch(
                    |h| t.prefetch(h),
                    |i, h, cost| match all.get(tiers[i].index()) {
                        Ok(alg) => t.check_as(alg, h, now_ns, cost, &mut []),
                        Err(_) => Decision::NEVER,
                    },
                    keys,
                    costs,
                    &mut each,
                );
            }
            // One tier, the limiter's limits: tier 0's requests decided
            // by them, any other denied.
            _ => with_table!(&self.tables, table => self.batch(
                |h| table.prefetch(h),
                |i, h, cost| if tiers[i] == Tier::DEFAULT {
                    table.decide(h, now_ns, cost, u64::MAX).0
                } else {
                    Decision::NEVER
                },
                keys,
                costs,
                &mut each,
            )),
        }
    }

    /// [`KeyedLimiter::acquire`] under tier `tier`'s limits; a tier this
    /// limiter does not have is never admitted.
    pub(super) fn acquire_tier_hashed(
        &self,
        h: u64,
        tier: usize,
        cost: u64,
        timeout: Duration,
    ) -> Result<Decision, AcquireError> {
        let unknown = |_: TierError| AcquireError::Unsatisfiable(self.never());
        let counted = |(d, taken): (Decision, bool)| {
            if taken {
                self.checks.record(d.allowed);
            }
            (d, taken)
        };
        match &self.tables {
            Tables::TieredWord(t) => {
                let alg = t.alg().get().get(tier).map_err(unknown)?;
                acquire(&self.clock, timeout, |at, max_wait| {
                    counted(t.check_as(alg, h, at, cost, max_wait, &mut []))
                })
            }
            Tables::TieredBlock(t) => {
                let alg = t.alg().get().get(tier).map_err(unknown)?;
                acquire(&self.clock, timeout, |at, _| {
                    counted((t.check_as(alg, h, at, cost, &mut []), true))
                })
            }
            _ if tier == 0 => self.acquire_hashed(h, cost, timeout),
            _ => Err(AcquireError::Unsatisfiable(self.never())),
        }
    }
}

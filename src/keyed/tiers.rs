//! A keyed limiter's tiers: a quota per tier, the tier named by each
//! check (`KeyedLimiter::new_tiered`).

use super::*;

impl KeyedLimiter {
    /// How many tiers this limiter serves (1 for a limiter built without
    /// tiers: tier 0 is its limits).
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

    /// Decides one request for the key hashed to `h` under `tier`'s limits
    /// of a tiered table, writes each limit's own decision to `each` (as
    /// many as fit) and counts it: the decision and how many limits a tier
    /// has. `None` for a limiter without tiers, which decides nothing.
    #[allow(
        clippy::inline_always,
        reason = "a call would return the result through memory"
    )]
    #[inline(always)]
    fn decide_in_tier(
        &self,
        h: u64,
        at: impl At,
        n: u64,
        tier: usize,
        each: &mut [Decision],
    ) -> Result<Option<(Decision, usize)>, TierError> {
        let [words @ .., len, tiers] = self.decide_in_tier_words(h, at, n, tier, each);
        match (len, tiers) {
            (0, 0) => Ok(None),
            (0, tiers) => Err(TierError {
                tier,
                tiers: tiers as usize,
            }),
            (len, _) => Ok(Some((Words(words).decision(), len as usize))),
        }
    }

    /// [`KeyedLimiter::decide_in_tier`] out of line, its result as words:
    /// the decision's six, then the tier's number of limits, then 0 (or,
    /// when there is no tier `tier`, 0 limits and the number of tiers; 0
    /// limits and 0 for a limiter without tiers). Returned as a
    /// `Result<Option<(Decision, usize)>, TierError>`, it came back
    /// through memory, copied with wider loads than its stores.
    #[inline(never)]
    fn decide_in_tier_words(
        &self,
        h: u64,
        at: impl At,
        n: u64,
        tier: usize,
        each: &mut [Decision],
    ) -> [u64; 8] {
        let (d, len) = match &self.tables {
            Tables::TieredWord(t) => {
                let tiers = t.alg().get();
                let alg = match tiers.get(tier) {
                    Ok(alg) => alg,
                    Err(e) => return [0, 0, 0, 0, 0, 0, 0, e.tiers as u64],
                };
                (t.check_as(alg, h, at, n, u64::MAX, each).0, tiers.limits())
            }
            Tables::TieredBlock(t) => {
                let tiers = t.alg().get();
                let alg = match tiers.get(tier) {
                    Ok(alg) => alg,
                    Err(e) => return [0, 0, 0, 0, 0, 0, 0, e.tiers as u64],
                };
                (t.check_as(alg, h, at, n, each), tiers.limits())
            }
            _ => return [0; 8],
        };
        self.checks.record(d.allowed);
        let Words([a, b, c, e, f, g]) = Words::of(d);
        [a, b, c, e, f, g, len as u64, 0]
    }

    /// Decides one request for the key hashed to `h` under `tier`'s limits,
    /// with each limit's own decision, and counts it.
    pub(super) fn decide_tier(
        &self,
        h: u64,
        at: impl At,
        n: u64,
        tier: usize,
    ) -> Result<MultiDecision, TierError> {
        let mut each = [Decision::default(); MAX_LIMITS];
        match self.decide_in_tier(h, at, n, tier, &mut each)? {
            Some((d, len)) => Ok(MultiDecision::of_many(d, each, len)),
            None if tier == 0 => Ok(self.decide_each(h, at, n)),
            None => Err(TierError { tier, tiers: 1 }),
        }
    }

    /// [`KeyedLimiter::decide_tier`] without each limit's decision (none
    /// is copied out: the common, single-decision path).
    #[inline]
    fn decide_tier_one(
        &self,
        h: u64,
        at: impl At,
        n: u64,
        tier: usize,
    ) -> Result<Decision, TierError> {
        match self.decide_in_tier(h, at, n, tier, &mut [])? {
            Some((d, _)) => Ok(d),
            None if tier == 0 => Ok(self.decide(h, at, n, u64::MAX).0),
            None => Err(TierError { tier, tiers: 1 }),
        }
    }

    /// Decides a request of `cost` for `key` under tier `tier`'s limits,
    /// now (see [`KeyedLimiter::new_tiered`] for a key whose tier changes).
    /// A limiter without tiers has tier 0 only.
    #[inline]
    pub fn check_tier(&self, key: u64, tier: usize, cost: u64) -> Result<Decision, TierError> {
        self.decide_tier_one(self.hash_u64(key), &self.clock, cost, tier)
    }

    /// [`KeyedLimiter::check_tier`] at `now_ns`.
    #[inline]
    pub fn check_tier_at(
        &self,
        key: u64,
        tier: usize,
        cost: u64,
        now_ns: u64,
    ) -> Result<Decision, TierError> {
        self.decide_tier_one(self.hash_u64(key), now_ns, cost, tier)
    }

    /// [`KeyedLimiter::check_tier`] for a byte-string key.
    #[inline]
    pub fn check_bytes_tier(
        &self,
        key: &[u8],
        tier: usize,
        cost: u64,
    ) -> Result<Decision, TierError> {
        self.decide_tier_one(self.hash_bytes(key), &self.clock, cost, tier)
    }

    /// [`KeyedLimiter::check_bytes_tier`] at `now_ns`.
    #[inline]
    pub fn check_bytes_tier_at(
        &self,
        key: &[u8],
        tier: usize,
        cost: u64,
        now_ns: u64,
    ) -> Result<Decision, TierError> {
        self.decide_tier_one(self.hash_bytes(key), now_ns, cost, tier)
    }

    /// [`KeyedLimiter::check_tier_at`] with each limit's own decision.
    pub fn check_tier_each_at(
        &self,
        key: u64,
        tier: usize,
        cost: u64,
        now_ns: u64,
    ) -> Result<MultiDecision, TierError> {
        self.decide_tier(self.hash_u64(key), now_ns, cost, tier)
    }

    /// [`KeyedLimiter::check_tier_each_at`] for a byte-string key.
    pub fn check_bytes_tier_each_at(
        &self,
        key: &[u8],
        tier: usize,
        cost: u64,
        now_ns: u64,
    ) -> Result<MultiDecision, TierError> {
        self.decide_tier(self.hash_bytes(key), now_ns, cost, tier)
    }

    /// [`KeyedLimiter::check_batch`] with a tier per request: `keys[i]`
    /// under tier `tiers[i]` at cost `costs[i]` (1 each when `costs` is
    /// `None`), in order, with one clock read, writing `out[i]`; the
    /// decisions are those of the same [`KeyedLimiter::check_tier_at`]
    /// calls made one by one. Every tier is checked first: a tier the
    /// limiter does not have refuses the whole batch, nothing decided or
    /// written.
    ///
    /// # Panics
    /// If `tiers`, `costs` or `out` is not as long as `keys`.
    pub fn check_batch_tier(
        &self,
        keys: &[u64],
        tiers: &[usize],
        costs: Option<&[u64]>,
        out: &mut [Decision],
    ) -> Result<(), TierError> {
        self.check_batch_tier_at(keys, tiers, costs, self.clock.now_ns(), out)
    }

    /// [`KeyedLimiter::check_batch_tier`] at an explicit time.
    ///
    /// # Panics
    /// If `tiers`, `costs` or `out` is not as long as `keys`.
    pub fn check_batch_tier_at(
        &self,
        keys: &[u64],
        tiers: &[usize],
        costs: Option<&[u64]>,
        now_ns: u64,
        out: &mut [Decision],
    ) -> Result<(), TierError> {
        assert_eq!(
            out.len(),
            keys.len(),
            "check_batch_tier: out.len() != keys.len()"
        );
        self.check_batch_tier_with(keys, tiers, costs, now_ns, |i, d| out[i] = d)
    }

    /// [`KeyedLimiter::check_batch_tier_at`], handing each decision to
    /// `each(index, decision)` (see [`KeyedLimiter::check_batch_with`]).
    ///
    /// # Panics
    /// If `tiers` or `costs` is not as long as `keys`.
    pub fn check_batch_tier_with(
        &self,
        keys: &[u64],
        tiers: &[usize],
        costs: Option<&[u64]>,
        now_ns: u64,
        each: impl FnMut(usize, Decision),
    ) -> Result<(), TierError> {
        assert_eq!(
            tiers.len(),
            keys.len(),
            "check_batch_tier: tiers.len() != keys.len()"
        );
        self.batch_tiers(keys, |i| tiers[i], costs, now_ns, each)
    }

    /// The tiered batch, request `i`'s tier read by `tier_of(i)` (the C
    /// ABI's are `u32`): every tier checked, then the one batch loop.
    pub(crate) fn batch_tiers(
        &self,
        keys: &[u64],
        tier_of: impl Fn(usize) -> usize,
        costs: Option<&[u64]>,
        now_ns: u64,
        mut each: impl FnMut(usize, Decision),
    ) -> Result<(), TierError> {
        if let Some(c) = costs {
            assert_eq!(
                c.len(),
                keys.len(),
                "check_batch: costs.len() != keys.len()"
            );
        }
        let tiers = self.tiers();
        if let Some(tier) = (0..keys.len()).map(&tier_of).find(|&t| t >= tiers) {
            return Err(TierError { tier, tiers });
        }
        let checked = "every tier was checked before the batch";
        match &self.tables {
            Tables::TieredWord(t) => {
                let all = t.alg().get();
                self.batch(
                    |h| t.prefetch(h),
                    |i, h, cost| {
                        let alg = all.get(tier_of(i)).expect(checked);
                        t.check_as(alg, h, now_ns, cost, u64::MAX, &mut []).0
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
                    |i, h, cost| {
                        let alg = all.get(tier_of(i)).expect(checked);
                        t.check_as(alg, h, now_ns, cost, &mut [])
                    },
                    keys,
                    costs,
                    &mut each,
                );
            }
            // One tier: every request named tier 0, the limiter's limits.
            _ => self.check_batch_with(keys, costs, now_ns, each),
        }
        Ok(())
    }

    /// [`KeyedLimiter::acquire`] under tier `tier`'s limits: waits until a
    /// request of `cost` for `key` is admitted by that tier. The outer
    /// error is a tier the limiter does not have (refused at once,
    /// nothing checked); the inner result is the acquire's own.
    pub fn acquire_tier(
        &self,
        key: u64,
        tier: usize,
        cost: u64,
        timeout: Duration,
    ) -> Result<Result<Decision, AcquireError>, TierError> {
        self.acquire_tier_hashed(self.hash_u64(key), tier, cost, timeout)
    }

    /// [`KeyedLimiter::acquire_tier`] for a byte-string key.
    pub fn acquire_bytes_tier(
        &self,
        key: &[u8],
        tier: usize,
        cost: u64,
        timeout: Duration,
    ) -> Result<Result<Decision, AcquireError>, TierError> {
        self.acquire_tier_hashed(self.hash_bytes(key), tier, cost, timeout)
    }

    fn acquire_tier_hashed(
        &self,
        h: u64,
        tier: usize,
        cost: u64,
        timeout: Duration,
    ) -> Result<Result<Decision, AcquireError>, TierError> {
        let counted = |(d, taken): (Decision, bool)| {
            if taken {
                self.checks.record(d.allowed);
            }
            (d, taken)
        };
        Ok(match &self.tables {
            Tables::TieredWord(t) => {
                let alg = t.alg().get().get(tier)?;
                acquire(&self.clock, timeout, |at, max_wait| {
                    counted(t.check_as(alg, h, at, cost, max_wait, &mut []))
                })
            }
            Tables::TieredBlock(t) => {
                let alg = t.alg().get().get(tier)?;
                acquire(&self.clock, timeout, |at, _| {
                    counted((t.check_as(alg, h, at, cost, &mut []), true))
                })
            }
            _ if tier == 0 => self.acquire_hashed(h, cost, timeout),
            _ => return Err(TierError { tier, tiers: 1 }),
        })
    }
}

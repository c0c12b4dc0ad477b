//! Building a keyed limiter: one limit, several checked as one, or a quota
//! per tier, on the TSC clock or another.

use super::*;

impl KeyedLimiter {
    /// A keyed limiter on the TSC clock; `config.capacity` ≥ 1 keys.
    pub fn new(config: Config) -> Result<KeyedLimiter, Error> {
        KeyedLimiter::with_clock(config, Clock::tsc())
    }

    /// A [`Builder`](crate::Builder) for a keyed limiter of several limits,
    /// tiers, another clock, named limits or a shared table.
    pub fn builder() -> crate::Builder<KeyedLimiter> {
        crate::Builder::new()
    }

    /// A keyed limiter reading `clock`.
    pub(crate) fn with_clock(config: Config, clock: Clock) -> Result<KeyedLimiter, Error> {
        KeyedLimiter::with_hasher(config, clock, KeyHasher::random())
    }

    /// A keyed limiter hashing keys with `hasher` (a restored snapshot's).
    pub(crate) fn with_hasher(
        config: Config,
        clock: Clock,
        hasher: KeyHasher,
    ) -> Result<KeyedLimiter, Error> {
        let (tables, owner) = Tables::new(&config, &mut None)?;
        Ok(KeyedLimiter::assemble(
            tables,
            owner,
            Limits::one(config),
            clock,
            hasher,
        ))
    }

    pub(super) fn assemble(
        tables: Tables,
        owner: Owner,
        limits: Limits,
        clock: Clock,
        hasher: KeyHasher,
    ) -> KeyedLimiter {
        KeyedLimiter {
            hasher,
            tables,
            tiers: Box::new([]),
            _owner: owner,
            checks: CheckCounters::default(),
            limits: Swap::new(limits),
            reconfiguring: std::sync::Mutex::new(()),
            shared: false,
            clock,
        }
    }

    /// A keyed limiter enforcing every one of `configs` (1 to
    /// [`MAX_LIMITS`], any algorithms) as one for each key, on the TSC
    /// clock: see [`crate::Limiter::new_multi`] for the combined decision.
    /// Every config has the same capacity (≥ 1) and overflow policy.
    ///
    /// A key's limits share one place in the table: one 128-bit slot
    /// updated by one CAS when their states fit 96 bits (leaving the slot
    /// 32 bits of fingerprint; e.g. GCRA with a fixed window of up to 2^19
    /// per second), else a block of words under the place's latch. The
    /// collision table above applies with `f` = 128 − the states' bits
    /// (at most 64) in the first case, 62 in the second.
    pub(crate) fn new_multi(configs: &[Config]) -> Result<KeyedLimiter, Error> {
        KeyedLimiter::with_clock_multi(configs, Clock::tsc())
    }

    /// [`KeyedLimiter::new_multi`] reading `clock`.
    pub(crate) fn with_clock_multi(configs: &[Config], clock: Clock) -> Result<KeyedLimiter, Error> {
        KeyedLimiter::with_hasher_multi(configs, clock, KeyHasher::random())
    }

    /// [`KeyedLimiter::with_clock_multi`] hashing keys with `hasher` (a
    /// restored snapshot's).
    pub(crate) fn with_hasher_multi(
        configs: &[Config],
        clock: Clock,
        hasher: KeyHasher,
    ) -> Result<KeyedLimiter, Error> {
        let all = crate::multi::all_of(configs, 128 - MIN_FINGERPRINT_BITS)?;
        let config = configs[0];
        if configs.len() == 1 || config.capacity == 0 {
            // One limit needs no composite; capacity 0 is refused there.
            return KeyedLimiter::with_hasher(config, clock, hasher);
        }
        let overflow = config.overflow;
        let (live, owner) = Live::new(all);
        let tables = if all.is_word() {
            Tables::AllOfWord(WordTable::new(live, config.capacity, overflow)?)
        } else {
            Tables::AllOfBlock(BlockTable::new(live, config.capacity, overflow)?)
        };
        let limits = Limits {
            configs: configs.into(),
            names: vec![None; configs.len()].into(),
        };
        Ok(KeyedLimiter::assemble(tables, owner, limits, clock, hasher))
    }

    /// A keyed limiter serving several tiers (free, paid, internal), one
    /// config per tier, on the TSC clock: each check names its key's tier
    /// ([`KeyedLimiter::check_tier`], [`KeyedLimiter::check_batch_tier`]
    /// with a tier per request, [`KeyedLimiter::acquire_tier`]). One table
    /// holds every key whatever its tier.
    ///
    /// Tier 0 is the default tier: every call that names no tier
    /// ([`KeyedLimiter::check`], [`KeyedLimiter::check_batch`],
    /// [`KeyedLimiter::acquire`], ...) is tier 0's, as on a limiter built
    /// without tiers, whose one tier is tier 0. List the tier most keys
    /// belong to (or the strictest) first.
    ///
    /// A key whose tier changes keeps its state, read by its new tier's
    /// limits at its next check, as a live reconfiguration reads every
    /// key's (the carry-over rules in docs/ALGORITHMS.md): what it spent
    /// under the old tier counts against the new one. So tiers may differ
    /// in limit, burst and (GCRA, leaky bucket, token bucket) period, and
    /// not in what [`KeyedLimiter::reconfigure`] refuses to change: the
    /// algorithm, a window algorithm's period, sub-windows, a sliding log's
    /// limit, the capacity or the overflow policy. Unlike a live change,
    /// tiers may be any size apart: each count is packed in the width the
    /// largest tier needs.
    ///
    /// Errors name the field: [`Field::Tiers`] for no configs or more than
    /// [`crate::MAX_TIERS`], [`Field::Capacity`] for capacity 0, and the
    /// field in which a tier differs from tier 0 where it may not.
    ///
    /// ```
    /// use ratecell::{Algorithm, Config, KeyedLimiter};
    ///
    /// let free = Config::new(Algorithm::Gcra, 2, 1_000_000_000).capacity(10_000);
    /// let paid = Config::new(Algorithm::Gcra, 100, 1_000_000_000).capacity(10_000);
    /// let limiter = KeyedLimiter::new_tiered(&[free, paid]).unwrap();
    /// let t = 1_700_000_000_000_000_000;
    /// let (free_user, paid_user) = (1, 2);
    /// assert_eq!((0..10).filter(|_| limiter.check_tier_at(free_user, 0, 1, t).unwrap().allowed).count(), 2);
    /// assert_eq!((0..10).filter(|_| limiter.check_tier_at(paid_user, 1, 1, t).unwrap().allowed).count(), 10);
    /// assert!(limiter.check_tier_at(paid_user, 2, 1, t).is_err(), "no tier 2");
    /// ```
    pub(crate) fn new_tiered(tiers: &[Config]) -> Result<KeyedLimiter, Error> {
        KeyedLimiter::with_clock_tiered(tiers, Clock::tsc())
    }

    /// [`KeyedLimiter::new_tiered`] reading `clock`.
    pub(crate) fn with_clock_tiered(tiers: &[Config], clock: Clock) -> Result<KeyedLimiter, Error> {
        let tiers: Vec<&[Config]> = tiers.iter().map(std::slice::from_ref).collect();
        KeyedLimiter::with_clock_tiered_multi(&tiers, clock)
    }

    /// Tiers of several limits each ([`KeyedLimiter::new_multi`] per
    /// tier, [`KeyedLimiter::new_tiered`] across them): every tier lists
    /// the same limits in the same order, with its own values. Errors as
    /// both name them ([`Field::Limits`] when a tier has not as many
    /// limits as tier 0).
    pub(crate) fn new_tiered_multi(tiers: &[&[Config]]) -> Result<KeyedLimiter, Error> {
        KeyedLimiter::with_clock_tiered_multi(tiers, Clock::tsc())
    }

    /// [`KeyedLimiter::new_tiered_multi`] reading `clock`.
    pub(crate) fn with_clock_tiered_multi(
        tiers: &[&[Config]],
        clock: Clock,
    ) -> Result<KeyedLimiter, Error> {
        KeyedLimiter::with_hasher_tiered_multi(tiers, clock, KeyHasher::random())
    }

    /// [`KeyedLimiter::with_clock_tiered_multi`] hashing keys with
    /// `hasher` (a restored snapshot's).
    pub(crate) fn with_hasher_tiered_multi(
        tiers: &[&[Config]],
        clock: Clock,
        hasher: KeyHasher,
    ) -> Result<KeyedLimiter, Error> {
        let built = crate::tiers::tiers(tiers)?;
        let config = tiers[0][0];
        let overflow = config.overflow;
        let (live, owner) = Live::new(built);
        let tables = if built.is_word() {
            Tables::TieredWord(WordTable::new(live, config.capacity, overflow)?)
        } else {
            Tables::TieredBlock(BlockTable::new(live, config.capacity, overflow)?)
        };
        let limits = Limits {
            configs: tiers[0].into(),
            names: vec![None; built.limits()].into(),
        };
        let mut keyed = KeyedLimiter::assemble(tables, owner, limits, clock, hasher);
        keyed.tiers = tiers.iter().map(|t| (*t).into()).collect();
        Ok(keyed)
    }
}

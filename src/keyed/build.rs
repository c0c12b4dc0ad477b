//! Building a keyed limiter: one limit, several checked as one, or a quota
//! per tier, on a clock, hashing keys with a given hasher (a fresh one's
//! or a restored snapshot's). The two constructors here are the only
//! ones: `crate::Builder` calls them for every limiter it makes, fresh or
//! restored (a shared region is `shared.rs`'s).

use super::*;

impl KeyedLimiter {
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

    /// A keyed limiter of `configs` (one limit, or several checked as one:
    /// [`crate::Builder::limit`]) reading `clock`, hashing keys with
    /// `hasher`.
    pub(crate) fn made(
        configs: &[Config],
        clock: Clock,
        hasher: KeyHasher,
    ) -> Result<KeyedLimiter, Error> {
        // One limit needs no composite, and is judged alone: its errors
        // name no limit's index.
        if let [config] = configs {
            let (tables, owner) = Tables::new(config, &mut None)?;
            let limits = Limits::one(*config);
            return Ok(KeyedLimiter::assemble(tables, owner, limits, clock, hasher));
        }
        let all = crate::policy::multi::all_of(configs, 128 - MIN_FINGERPRINT_BITS)?;
        let config = configs[0];
        if config.capacity == 0 {
            // Refused there.
            return KeyedLimiter::made(&configs[..1], clock, hasher);
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

    /// A keyed limiter of tiers ([`crate::Builder::tier`]) reading
    /// `clock`, hashing keys with `hasher`.
    pub(crate) fn made_tiered(
        tiers: &[&[Config]],
        clock: Clock,
        hasher: KeyHasher,
    ) -> Result<KeyedLimiter, Error> {
        let built = crate::policy::tiers::tiers(tiers)?;
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

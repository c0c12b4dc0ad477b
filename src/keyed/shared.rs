//! A keyed limiter whose table lies in a region shared by the processes
//! of a machine (`States::Shared`).

use super::*;

impl KeyedLimiter {
    /// A keyed limiter whose table lies in the region at `path`
    /// ([`crate::States::Shared`]), a new region getting `hash_keys` (a
    /// snapshot's) when given, else random ones.
    pub(crate) fn open_shared_keyed(
        path: &std::path::Path,
        config: Config,
        options: &SharedOptions,
        hash_keys: Option<(u64, u64)>,
    ) -> Result<KeyedLimiter, Error> {
        let path = crate::shared::resolve(path);
        crate::shared::check_supported(&path, &config)?;
        let mut opening = Some(Opening {
            path,
            config,
            options: *options,
            hash_keys,
            attached: None,
        });
        let (tables, owner) = Tables::new(&config, &mut opening)?;
        let (hash_keys, calibration) = opening
            .and_then(|o| o.attached)
            .expect("a shared table was attached");
        let clock = if options.coarse_clock {
            Clock::coarse()
        } else {
            Self::shared_clock(calibration)
        };
        let (k0, k1) = hash_keys;
        let mut keyed = KeyedLimiter::assemble(
            tables,
            owner,
            Limits::one(config),
            clock,
            KeyHasher::from_keys(k0, k1),
        );
        keyed.shared = true;
        Ok(keyed)
    }

    fn shared_clock(calibration: crate::clock::shared::Calibration) -> Clock {
        Clock::shared(crate::clock::shared::SharedClock::new(
            quanta::Clock::new(),
            calibration,
        ))
    }
}

//! [`AnyLimiter`]: a direct or a keyed limiter behind one type, for callers
//! whose configuration, not their code, says which one they need.

use crate::acquire::AcquireError;
use crate::clock::Clock;
use crate::config::{Config, Error};
use crate::decision::Decision;
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;
use crate::multi::MultiDecision;
use crate::stats::Stats;
use std::time::Duration;

/// A [`Limiter`] or a [`KeyedLimiter`], as `config.capacity` chooses: 0
/// makes one shared state (every key argument is then ignored), more makes
/// one state per key.
///
/// For a caller that reads its configuration at run time (a file, a command
/// line, a C struct) and checks keys either way; the C ABI's handle is one.
/// Code that knows which form it wants uses that type directly.
///
/// ```
/// use ratecell::{AnyLimiter, Algorithm, Config};
///
/// let per_user = Config::new(Algorithm::Gcra, 2, 1_000_000_000).capacity(1000);
/// let limiter = AnyLimiter::new(per_user).unwrap();
/// assert!(matches!(limiter, AnyLimiter::Keyed(_)));
/// let t = 1_700_000_000_000_000_000;
/// assert!(limiter.check_at(7, 2, t).allowed);
/// assert!(!limiter.check_at(7, 1, t).allowed);
/// assert!(limiter.check_at(8, 1, t).allowed, "another key, another state");
/// ```
// A limiter is made once and kept where it is: boxing the larger variant
// would only add a pointer chase to every check.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnyLimiter {
    /// One shared state: keys are ignored.
    Direct(Limiter),
    /// One state per key.
    Keyed(KeyedLimiter),
}

impl AnyLimiter {
    /// A direct limiter when `config.capacity` is 0, else a keyed one, on
    /// the TSC clock.
    pub fn new(config: Config) -> Result<AnyLimiter, Error> {
        AnyLimiter::with_clock(config, Clock::default())
    }

    /// [`AnyLimiter::new`] on the given clock.
    pub fn with_clock(config: Config, clock: Clock) -> Result<AnyLimiter, Error> {
        Ok(if config.capacity == 0 {
            AnyLimiter::Direct(Limiter::with_clock(config, clock)?)
        } else {
            AnyLimiter::Keyed(KeyedLimiter::with_clock(config, clock)?)
        })
    }

    /// Several limits checked as one ([`Limiter::with_clock_multi`] when
    /// the capacity is 0, else [`KeyedLimiter::with_clock_multi`]).
    pub fn with_clock_multi(configs: &[Config], clock: Clock) -> Result<AnyLimiter, Error> {
        Ok(if configs.first().is_some_and(|c| c.capacity == 0) {
            AnyLimiter::Direct(Limiter::with_clock_multi(configs, clock)?)
        } else {
            AnyLimiter::Keyed(KeyedLimiter::with_clock_multi(configs, clock)?)
        })
    }

    /// The configuration (the first limit's, for a multi-limit limiter).
    pub fn config(&self) -> &Config {
        match self {
            AnyLimiter::Direct(l) => l.config(),
            AnyLimiter::Keyed(k) => k.config(),
        }
    }

    /// The limiter's current time, UNIX ns.
    pub fn now_ns(&self) -> u64 {
        match self {
            AnyLimiter::Direct(l) => l.now_ns(),
            AnyLimiter::Keyed(k) => k.now_ns(),
        }
    }

    /// Decides a request of `cost` for `key` now ([`Limiter::check`],
    /// [`KeyedLimiter::check`]).
    #[inline]
    pub fn check(&self, key: u64, cost: u64) -> Decision {
        match self {
            AnyLimiter::Direct(l) => l.check(cost),
            AnyLimiter::Keyed(k) => k.check(key, cost),
        }
    }

    /// [`AnyLimiter::check`] at `now_ns` (UNIX ns).
    #[inline]
    pub fn check_at(&self, key: u64, cost: u64, now_ns: u64) -> Decision {
        match self {
            AnyLimiter::Direct(l) => l.check_at(cost, now_ns),
            AnyLimiter::Keyed(k) => k.check_at(key, cost, now_ns),
        }
    }

    /// [`AnyLimiter::check`] for a byte-string key.
    #[inline]
    pub fn check_bytes(&self, key: &[u8], cost: u64) -> Decision {
        match self {
            AnyLimiter::Direct(l) => l.check(cost),
            AnyLimiter::Keyed(k) => k.check_bytes(key, cost),
        }
    }

    /// [`AnyLimiter::check_bytes`] at `now_ns` (UNIX ns).
    #[inline]
    pub fn check_bytes_at(&self, key: &[u8], cost: u64, now_ns: u64) -> Decision {
        match self {
            AnyLimiter::Direct(l) => l.check_at(cost, now_ns),
            AnyLimiter::Keyed(k) => k.check_bytes_at(key, cost, now_ns),
        }
    }

    /// [`AnyLimiter::check`] with each limit's own decision.
    pub fn check_each(&self, key: u64, cost: u64) -> MultiDecision {
        match self {
            AnyLimiter::Direct(l) => l.check_each(cost),
            AnyLimiter::Keyed(k) => k.check_each(key, cost),
        }
    }

    /// [`AnyLimiter::check_each`] at `now_ns` (UNIX ns).
    pub fn check_each_at(&self, key: u64, cost: u64, now_ns: u64) -> MultiDecision {
        match self {
            AnyLimiter::Direct(l) => l.check_each_at(cost, now_ns),
            AnyLimiter::Keyed(k) => k.check_each_at(key, cost, now_ns),
        }
    }

    /// [`AnyLimiter::check_each`] for a byte-string key.
    pub fn check_bytes_each(&self, key: &[u8], cost: u64) -> MultiDecision {
        match self {
            AnyLimiter::Direct(l) => l.check_each(cost),
            AnyLimiter::Keyed(k) => k.check_bytes_each(key, cost),
        }
    }

    /// [`AnyLimiter::check_bytes_each`] at `now_ns` (UNIX ns).
    pub fn check_bytes_each_at(&self, key: &[u8], cost: u64, now_ns: u64) -> MultiDecision {
        match self {
            AnyLimiter::Direct(l) => l.check_each_at(cost, now_ns),
            AnyLimiter::Keyed(k) => k.check_bytes_each_at(key, cost, now_ns),
        }
    }

    /// Waits until a request of `cost` for `key` is admitted
    /// ([`Limiter::acquire`]).
    pub fn acquire_bytes(
        &self,
        key: &[u8],
        cost: u64,
        timeout: Duration,
    ) -> Result<Decision, AcquireError> {
        match self {
            AnyLimiter::Direct(l) => l.acquire(cost, timeout),
            AnyLimiter::Keyed(k) => k.acquire_bytes(key, cost, timeout),
        }
    }

    /// Forgets `key`'s state; a direct limiter forgets its one state.
    /// Returns whether a keyed limiter had a state for the key (a direct
    /// limiter always answers `true`).
    pub fn reset_bytes(&self, key: &[u8]) -> bool {
        match self {
            AnyLimiter::Direct(l) => {
                l.reset();
                true
            }
            AnyLimiter::Keyed(k) => k.reset_bytes(key),
        }
    }

    /// [`AnyLimiter::reset_bytes`] for a `u64` key.
    pub fn reset_key(&self, key: u64) -> bool {
        match self {
            AnyLimiter::Direct(l) => {
                l.reset();
                true
            }
            AnyLimiter::Keyed(k) => k.reset_key(key),
        }
    }

    /// The limiter's counters.
    pub fn stats(&self) -> Stats {
        match self {
            AnyLimiter::Direct(l) => l.stats(),
            AnyLimiter::Keyed(k) => k.stats(),
        }
    }
}

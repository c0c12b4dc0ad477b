//! [`AnyLimiter`]: a direct or a keyed limiter behind one type, for callers
//! whose configuration, not their code, says which one they need.

use crate::check::acquire::AcquireError;
use crate::check::decision::Decision;
use crate::check::request::{Key, Request};
use crate::config::Config;
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;
use crate::policy::multi::MultiDecision;
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
/// use ratecell::{AnyLimiter, Algorithm, Config, Request};
///
/// let per_user = Config::new(Algorithm::Gcra, 2, 1_000_000_000).capacity(1000);
/// let limiter = AnyLimiter::builder().limit(per_user).build().unwrap();
/// assert!(matches!(limiter, AnyLimiter::Keyed(_)));
/// let t = 1_700_000_000_000_000_000;
/// assert!(limiter.check(7, Request::new(2).at(t)).allowed);
/// assert!(!limiter.check(7, Request::new(1).at(t)).allowed);
/// assert!(limiter.check(8, Request::new(1).at(t)).allowed, "another key, another state");
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

    /// Decides `request` for `key` ([`Limiter::check`], which ignores
    /// the key; [`KeyedLimiter::check`]).
    #[inline]
    pub fn check<'k>(&self, key: impl Into<Key<'k>>, request: impl Into<Request>) -> Decision {
        match self {
            AnyLimiter::Direct(l) => l.check(request),
            AnyLimiter::Keyed(k) => k.check(key, request),
        }
    }

    /// [`AnyLimiter::check`] with each limit's own decision.
    pub fn check_each<'k>(
        &self,
        key: impl Into<Key<'k>>,
        request: impl Into<Request>,
    ) -> MultiDecision {
        match self {
            AnyLimiter::Direct(l) => l.check_each(request),
            AnyLimiter::Keyed(k) => k.check_each(key, request),
        }
    }

    /// Waits until `request` for `key` is admitted ([`Limiter::acquire`]).
    pub fn acquire<'k>(
        &self,
        key: impl Into<Key<'k>>,
        request: impl Into<Request>,
        timeout: Duration,
    ) -> Result<Decision, AcquireError> {
        match self {
            AnyLimiter::Direct(l) => l.acquire(request, timeout),
            AnyLimiter::Keyed(k) => k.acquire(key, request, timeout),
        }
    }

    /// Forgets `key`'s state; a direct limiter forgets its one state.
    /// Returns whether a keyed limiter had a state for the key (a direct
    /// limiter always answers `true`).
    pub fn reset<'k>(&self, key: impl Into<Key<'k>>) -> bool {
        match self {
            AnyLimiter::Direct(l) => {
                l.reset();
                true
            }
            AnyLimiter::Keyed(k) => k.reset(key),
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

/// What [`crate::Builder::persisted`] needs of an `AnyLimiter`: the save
/// of whichever limiter it holds.
impl crate::snapshot::Save for AnyLimiter {
    fn save_to(&self, path: &std::path::Path) -> Result<(), crate::snapshot::SnapshotError> {
        match self {
            AnyLimiter::Direct(l) => l.save(path),
            AnyLimiter::Keyed(k) => k.save(path),
        }
    }
}

//! [`Builder`]: every way to make a limiter (its limits or tiers, its
//! clock, its limits' names, a shared region) as options of one value.

use crate::any::AnyLimiter;
use crate::clock::Clock;
use crate::config::{Config, ConfigError, Error, Field, SharedError, SharedErrorKind};
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;
use crate::shared::SharedOptions;
use std::marker::PhantomData;
use std::path::PathBuf;

/// The options of a limiter, built by [`Builder::build`] into a
/// [`Limiter`], a [`KeyedLimiter`] or an [`AnyLimiter`] (made by
/// `Limiter::builder()`, `KeyedLimiter::builder()` and
/// `AnyLimiter::builder()`).
///
/// - [`Builder::limit`] adds a limit; several are enforced as one (a
///   request is admitted only when every limit admits it, SPEC §5).
/// - [`Builder::tier`] adds a tier instead: a keyed limiter then serves a
///   quota per tier, each request naming its tier
///   ([`KeyedLimiter::tier`]).
/// - [`Builder::clock`]: the TSC clock unless given (a manual clock for
///   simulations, the coarse clock).
/// - [`Builder::names`]: a name per limit, reported with each limit's
///   decision.
/// - [`Builder::shared`]: a keyed table in a file shared by the processes
///   that open it (`docs/SHARED.md`).
///
/// Errors name the field at fault: [`Field::Limits`] for no limit, and
/// whatever each limiter's rules refuse.
///
/// ```
/// use ratecell::{Algorithm, Clock, Config, KeyedLimiter, Request};
///
/// const S: u64 = 1_000_000_000;
/// let t = 1_700_000_000_000_000_000;
/// let (clock, _hand) = Clock::manual(t);
/// let limiter = KeyedLimiter::builder()
///     .limit(Config::new(Algorithm::Gcra, 10, S).capacity(1000))
///     .limit(Config::new(Algorithm::FixedWindow, 1000, 86_400 * S).capacity(1000))
///     .names(&["per_second", "per_day"])
///     .clock(clock)
///     .build()
///     .unwrap();
/// let d = limiter.check_each("alice", 1);
/// assert!(d.decision.allowed);
/// assert_eq!(d.limits()[1].remaining, 999);
/// assert_eq!(limiter.limit_name(1), Some("per_day"));
/// ```
#[must_use = "a builder makes nothing until `build` is called"]
#[derive(Debug)]
pub struct Builder<L> {
    limits: Vec<Config>,
    tiers: Vec<Vec<Config>>,
    clock: Option<Clock>,
    names: Option<Vec<String>>,
    shared: Option<(PathBuf, SharedOptions)>,
    kind: PhantomData<fn() -> L>,
}

impl Limiter {
    /// A [`Builder`] for a limiter of several limits, another clock or
    /// named limits.
    pub fn builder() -> Builder<Limiter> {
        Builder::new()
    }
}

impl KeyedLimiter {
    /// A [`Builder`] for a keyed limiter of several limits, tiers, another
    /// clock, named limits or a shared table.
    pub fn builder() -> Builder<KeyedLimiter> {
        Builder::new()
    }
}

impl AnyLimiter {
    /// A [`Builder`] for several limits, another clock or named limits
    /// (direct when the first limit's capacity is 0, else keyed).
    pub fn builder() -> Builder<AnyLimiter> {
        Builder::new()
    }
}

impl<L> Builder<L> {
    fn new() -> Builder<L> {
        Builder {
            limits: Vec::new(),
            tiers: Vec::new(),
            clock: None,
            names: None,
            shared: None,
            kind: PhantomData,
        }
    }

    /// Adds a limit, enforced with every other one added (1 to
    /// [`crate::MAX_LIMITS`], any algorithms): a request is admitted only
    /// when every limit admits it, and only then is anything stored; its
    /// decision is the combined one ([`crate::MultiDecision`]). Every
    /// limit has the same capacity and overflow policy.
    ///
    /// A direct limiter keeps all its limits' states in one cell: one
    /// 128-bit CAS when they fit 128 bits (any two of GCRA, leaky bucket,
    /// token bucket, fixed window, sliding window with ordinary limits),
    /// one latch otherwise. A keyed limiter keeps a key's limits in one
    /// place of its table: one 128-bit slot updated by one CAS when their
    /// states fit 96 bits (leaving 32 bits of fingerprint), else a block
    /// of words under the place's latch; the collision table of
    /// [`KeyedLimiter`] applies with `f` = 128 − the states' bits (at most
    /// 64) in the first case, 62 in the second.
    pub fn limit(mut self, config: Config) -> Builder<L> {
        self.limits.push(config);
        self
    }

    /// Adds each of `configs` ([`Builder::limit`] for each).
    pub fn limits(mut self, configs: &[Config]) -> Builder<L> {
        self.limits.extend_from_slice(configs);
        self
    }

    /// Adds a tier (free, paid, internal...) of `configs` limits, a keyed
    /// limiter's only: every tier lists the same limits in the same order,
    /// with its own values, and one table holds every key whatever its
    /// tier. Tier 0 is the first added and every request's unless it
    /// names another ([`KeyedLimiter::tier`]): list the tier most keys
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
    /// largest tier needs. A tiered limiter's tiers are fixed: it cannot
    /// be reconfigured live.
    ///
    /// Errors name the field: [`Field::Tiers`] for more than
    /// [`crate::MAX_TIERS`], [`Field::Capacity`] for capacity 0, and the
    /// field in which a tier differs from tier 0 where it may not.
    pub fn tier(mut self, configs: &[Config]) -> Builder<L> {
        self.tiers.push(configs.to_vec());
        self
    }

    /// The clock the limiter reads when a request gives no time.
    pub fn clock(mut self, clock: Clock) -> Builder<L> {
        self.clock = Some(clock);
        self
    }

    /// Names the limits, in order: one name per limit (an empty name is
    /// none), for callers that report which limit denied.
    pub fn names(mut self, names: &[&str]) -> Builder<L> {
        self.names = Some(names.iter().map(|n| (*n).to_owned()).collect());
        self
    }

    /// Keeps a keyed limiter's table in the file `path`, shared by every
    /// process that opens it ([`SharedOptions`]: the mode of a new region,
    /// its clock). A bare name (no `/`) is placed under `/dev/shm`. One
    /// limit of a word algorithm, capacity ≥ 1; `docs/SHARED.md` says how
    /// a region is created, attached, and what happens when a process dies.
    pub fn shared(mut self, path: impl Into<PathBuf>, options: SharedOptions) -> Builder<L> {
        self.shared = Some((path.into(), options));
        self
    }

    /// The same options, for another kind of limiter.
    fn into_kind<M>(self) -> Builder<M> {
        Builder {
            limits: self.limits,
            tiers: self.tiers,
            clock: self.clock,
            names: self.names,
            shared: self.shared,
            kind: PhantomData,
        }
    }

    /// Refuses limits and tiers given together, and neither.
    fn checked_limits(&self) -> Result<(), Error> {
        let refuse = |field, message: &str| {
            Err(Error::Config(ConfigError {
                field,
                message: message.into(),
            }))
        };
        if !self.tiers.is_empty() && !self.limits.is_empty() {
            return refuse(
                Field::Tiers,
                "both limits and tiers were given: give every limit in its tier",
            );
        }
        if self.tiers.is_empty() && self.limits.is_empty() {
            return refuse(Field::Limits, "no limit was given");
        }
        Ok(())
    }

    fn clock_or_tsc(&mut self) -> Clock {
        self.clock.take().unwrap_or_else(Clock::tsc)
    }

    fn named<T>(
        &self,
        limiter: T,
        name: impl FnOnce(T, &[&str]) -> Result<T, Error>,
    ) -> Result<T, Error> {
        match &self.names {
            None => Ok(limiter),
            Some(names) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                name(limiter, &names)
            }
        }
    }
}

impl Builder<Limiter> {
    /// The direct limiter: one state, every limit's capacity 0.
    pub fn build(mut self) -> Result<Limiter, Error> {
        self.checked_limits()?;
        if !self.tiers.is_empty() {
            return Err(Error::Config(ConfigError {
                field: Field::Tiers,
                message: "a direct Limiter has one state and no tiers; tiers are a KeyedLimiter's"
                    .into(),
            }));
        }
        if let Some((path, _)) = &self.shared {
            return Err(Error::Shared(SharedError {
                kind: SharedErrorKind::Unsupported,
                path: path.clone(),
                message: "a shared region holds a keyed table: build a KeyedLimiter (capacity >= 1) and check one key".into(),
            }));
        }
        let clock = self.clock_or_tsc();
        let limiter = Limiter::with_clock_multi(&self.limits, clock)?;
        self.named(limiter, Limiter::with_names)
    }
}

impl Builder<KeyedLimiter> {
    /// The keyed limiter: one state per key, every limit's capacity ≥ 1.
    pub fn build(mut self) -> Result<KeyedLimiter, Error> {
        self.checked_limits()?;
        let limiter = if let Some((path, options)) = self.shared.take() {
            if let Some(clock) = &self.clock {
                return Err(Error::Shared(SharedError {
                    kind: SharedErrorKind::Unsupported,
                    path,
                    message: format!(
                        "a shared region reads its own clock, not {clock:?}; SharedOptions::coarse_clock chooses the coarse one"
                    ),
                }));
            }
            let [config] = self.limits[..] else {
                return Err(Error::Shared(SharedError {
                    kind: SharedErrorKind::Unsupported,
                    path,
                    message: "a shared region holds one limit, without tiers".into(),
                }));
            };
            KeyedLimiter::open_shared_keyed(&path, config, &options, None)?
        } else if self.tiers.is_empty() {
            let clock = self.clock_or_tsc();
            KeyedLimiter::with_clock_multi(&self.limits, clock)?
        } else {
            let clock = self.clock_or_tsc();
            let tiers: Vec<&[Config]> = self.tiers.iter().map(Vec::as_slice).collect();
            KeyedLimiter::with_clock_tiered_multi(&tiers, clock)?
        };
        self.named(limiter, KeyedLimiter::with_names)
    }
}

impl Builder<AnyLimiter> {
    /// A direct limiter when the first limit's capacity is 0, else a keyed
    /// one: for callers whose configuration, not their code, says which.
    pub fn build(self) -> Result<AnyLimiter, Error> {
        let direct = self.tiers.is_empty()
            && self.shared.is_none()
            && self.limits.first().is_some_and(|c| c.capacity == 0);
        Ok(if direct {
            AnyLimiter::Direct(self.into_kind::<Limiter>().build()?)
        } else {
            AnyLimiter::Keyed(self.into_kind::<KeyedLimiter>().build()?)
        })
    }
}

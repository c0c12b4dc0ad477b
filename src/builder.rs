//! [`Builder`]: every way to make a limiter (its limits or tiers, its
//! clock, its limits' names, a shared region) as options of one value,
//! and every way to make it: fresh ([`Builder::build`]), from a snapshot
//! ([`Builder::restore`], [`Builder::load`]) or saved periodically to a
//! file ([`Builder::persisted`]). A new option is one method here, never
//! a new constructor per way of making.

use crate::any::AnyLimiter;
use crate::clock::Clock;
use crate::config::{Config, ConfigError, Error, Field, SharedError, SharedErrorKind};
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;
use crate::shared::SharedOptions;
#[cfg(not(ratecell_loom))]
use crate::snapshot::{Persisted, SnapshotError};
use crate::table::KeyHasher;
use std::marker::PhantomData;
use std::path::PathBuf;
#[cfg(not(ratecell_loom))]
use std::{fs::File, io::BufReader, io::Read, path::Path, time::Duration};

/// The options of a limiter, made into a [`Limiter`], a [`KeyedLimiter`]
/// or an [`AnyLimiter`] (the builders of `Limiter::builder()`,
/// `KeyedLimiter::builder()` and `AnyLimiter::builder()`) by one of its
/// terminal methods:
///
/// - [`Builder::build`]: a fresh limiter.
/// - [`Builder::restore`]: the limiter of these options holding the states
///   saved in a snapshot (`snapshot` and `save` on every limiter write
///   one); [`Builder::load`] from a file. A snapshot of another
///   configuration is refused before anything is allocated.
/// - [`Builder::persisted`]: restored from a file if it exists, else
///   fresh; then saved there periodically ([`Persisted`]).
///
/// The options:
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
/// A shared region is built, never restored by the builder: `restore`,
/// `load` and `persisted` with [`Builder::shared`] are refused with
/// [`crate::SharedErrorKind::Unsupported`] (the region outlives the
/// process and is its own persistence; [`KeyedLimiter::restore_shared`]
/// and [`KeyedLimiter::load_shared`] fill a new region from a snapshot and
/// say whether they did).
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
#[must_use = "a builder makes nothing until `build`, `restore`, `load` or `persisted` is called"]
#[derive(Debug)]
pub struct Builder<L> {
    limits: Vec<Config>,
    tiers: Vec<Vec<Config>>,
    clock: Option<Clock>,
    names: Option<Vec<String>>,
    shared: Option<(PathBuf, SharedOptions)>,
    kind: PhantomData<fn() -> L>,
}

// Not derived: a derive would ask `L: Clone`, and no limiter is.
impl<L> Clone for Builder<L> {
    fn clone(&self) -> Builder<L> {
        Builder {
            limits: self.limits.clone(),
            tiers: self.tiers.clone(),
            clock: self.clock.clone(),
            names: self.names.clone(),
            shared: self.shared.clone(),
            kind: PhantomData,
        }
    }
}

impl Limiter {
    /// A [`Builder`] for a limiter of several limits, another clock or
    /// named limits, or one restored from a snapshot.
    pub fn builder() -> Builder<Limiter> {
        Builder::new()
    }
}

impl KeyedLimiter {
    /// A [`Builder`] for a keyed limiter of several limits, tiers, another
    /// clock, named limits or a shared table, or one restored from a
    /// snapshot.
    pub fn builder() -> Builder<KeyedLimiter> {
        Builder::new()
    }
}

impl AnyLimiter {
    /// A [`Builder`] for several limits, tiers, another clock or named
    /// limits (direct when the first limit's capacity is 0, else keyed),
    /// fresh or restored from a snapshot.
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

    /// Refuses a shared region to `restore`, `load` and `persisted`: a
    /// region is built or attached, never filled by the builder.
    #[cfg(not(ratecell_loom))]
    fn refuse_shared_restore(&self) -> Result<(), Error> {
        match &self.shared {
            None => Ok(()),
            Some((path, _)) => Err(Error::Shared(SharedError {
                kind: SharedErrorKind::Unsupported,
                path: path.clone(),
                message: "a builder restores no shared region: KeyedLimiter::restore_shared and load_shared fill a new region from a snapshot (and say whether they did); build() attaches one as it is".into(),
            })),
        }
    }

    /// The tiers as the tiered constructors take them.
    fn tier_rows(&self) -> Vec<&[Config]> {
        self.tiers.iter().map(Vec::as_slice).collect()
    }
}

impl Builder<Limiter> {
    /// The direct limiter: one state, every limit's capacity 0.
    pub fn build(mut self) -> Result<Limiter, Error> {
        self.checked_direct()?;
        let clock = self.clock_or_tsc();
        let limiter = Limiter::made(&self.limits, clock)?;
        self.named(limiter, Limiter::with_names)
    }

    /// The direct limiter of these options (limits, clock, names) holding
    /// the state saved in `snapshot`. The snapshot must be of the same
    /// limits in the same order, else [`SnapshotError::ConfigMismatch`]
    /// names the first field that differs ([`Field::Limits`] when their
    /// number does), before anything is allocated; damaged input is
    /// refused with the error that says how. Names are not saved: the
    /// restored limiter has these options' names, or none.
    ///
    /// ```
    /// use ratecell::{Algorithm, Config, Limiter};
    ///
    /// let t = 1_700_000_000_000_000_000;
    /// let config = Config::new(Algorithm::Gcra, 2, 1_000_000_000);
    /// let limiter = Limiter::builder().limit(config).build().unwrap();
    /// assert!(limiter.check(ratecell::Request::new(2).at(t)).allowed);
    /// let mut saved = Vec::new();
    /// limiter.snapshot_at(&mut saved, t).unwrap();
    ///
    /// let back = Limiter::builder().limit(config).restore(&saved[..]).unwrap();
    /// assert!(!back.check(ratecell::Request::new(1).at(t)).allowed, "the state came back");
    /// ```
    #[cfg(not(ratecell_loom))]
    pub fn restore(mut self, snapshot: impl Read) -> Result<Limiter, SnapshotError> {
        self.checked_direct()?;
        let clock = self.clock_or_tsc();
        let limiter = Limiter::from_snapshot(snapshot, &self.limits, clock)?;
        Ok(self.named(limiter, Limiter::with_names)?)
    }

    /// [`Builder::restore`] from the snapshot file at `path` (a missing
    /// file is [`SnapshotError::Io`] of kind `NotFound`).
    #[cfg(not(ratecell_loom))]
    pub fn load(self, path: impl AsRef<Path>) -> Result<Limiter, SnapshotError> {
        self.checked_direct()?;
        let file = File::open(path)?;
        self.restore(BufReader::new(file))
    }

    /// The direct limiter of these options, restored from the snapshot
    /// file at `path` if it exists ([`Builder::load`]), else built fresh
    /// ([`Builder::build`]), and saved there every `every` (at least
    /// 1 ms) by a background thread ([`Persisted`]). A file that exists
    /// but cannot be restored (damaged, or of another configuration) is
    /// an error: remove it, or use another path, to start afresh.
    #[cfg(not(ratecell_loom))]
    pub fn persisted(
        self,
        path: impl AsRef<Path>,
        every: Duration,
    ) -> Result<Persisted<Limiter>, SnapshotError> {
        let fresh = self.clone();
        Persisted::open_or_build(path.as_ref(), every, |p| self.load(p), || fresh.build())
    }

    /// What a direct limiter refuses before anything is read or
    /// allocated: no limits, tiers, a shared region.
    fn checked_direct(&self) -> Result<(), Error> {
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
        Ok(())
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
            KeyedLimiter::made(&self.limits, clock, KeyHasher::random())?
        } else {
            let clock = self.clock_or_tsc();
            KeyedLimiter::made_tiered(&self.tier_rows(), clock, KeyHasher::random())?
        };
        self.named(limiter, KeyedLimiter::with_names)
    }

    /// The keyed limiter of these options (limits or tiers, clock, names)
    /// holding the states saved in `snapshot`, hashing keys with the
    /// saved seed, so every key finds the state it had. The snapshot must
    /// be of the same limits in the same order, or of the same tiers,
    /// else [`SnapshotError::ConfigMismatch`] names the first field that
    /// differs, before the table is allocated: [`Field::Limits`] when the
    /// number of limits does, [`Field::Tiers`] when the number of tiers
    /// does (a limiter without tiers counting 0), else the field, with
    /// `limit` its index in the tiers' flat list (tier `t`'s limit `i` is
    /// `t × limits + i`). Keys keep their states under whichever tier they
    /// name next. Names are not saved: the restored limiter has these
    /// options' names, or none. With [`Builder::shared`], refused
    /// ([`crate::SharedErrorKind::Unsupported`]; see
    /// [`KeyedLimiter::restore_shared`]).
    ///
    /// ```
    /// use ratecell::{Algorithm, Config, KeyedLimiter, Request};
    ///
    /// let t = 1_700_000_000_000_000_000;
    /// let free = Config::new(Algorithm::Gcra, 1, 1_000_000_000).capacity(100);
    /// let paid = Config { limit: 10, ..free };
    /// let builder = KeyedLimiter::builder().tier(&[free]).tier(&[paid]).names(&["per_second"]);
    /// let limiter = builder.clone().build().unwrap();
    /// assert!(limiter.check("alice", Request::new(1).at(t)).allowed);
    /// let mut saved = Vec::new();
    /// limiter.snapshot_at(&mut saved, t).unwrap();
    ///
    /// let back = builder.restore(&saved[..]).unwrap();
    /// assert!(!back.check("alice", Request::new(1).at(t)).allowed, "alice's state came back");
    /// assert_eq!(back.limit_name(0), Some("per_second"));
    /// ```
    #[cfg(not(ratecell_loom))]
    pub fn restore(mut self, snapshot: impl Read) -> Result<KeyedLimiter, SnapshotError> {
        self.checked_keyed_restore()?;
        let clock = self.clock_or_tsc();
        let limiter = if self.tiers.is_empty() {
            KeyedLimiter::from_snapshot(snapshot, &self.limits, clock)?
        } else {
            KeyedLimiter::from_snapshot_tiered(snapshot, &self.tier_rows(), clock)?
        };
        Ok(self.named(limiter, KeyedLimiter::with_names)?)
    }

    /// [`Builder::restore`] from the snapshot file at `path` (a missing
    /// file is [`SnapshotError::Io`] of kind `NotFound`).
    #[cfg(not(ratecell_loom))]
    pub fn load(self, path: impl AsRef<Path>) -> Result<KeyedLimiter, SnapshotError> {
        self.checked_keyed_restore()?;
        let file = File::open(path)?;
        self.restore(BufReader::new(file))
    }

    /// The keyed limiter of these options, restored from the snapshot
    /// file at `path` if it exists ([`Builder::load`]), else built fresh
    /// ([`Builder::build`]), and saved there every `every` (at least
    /// 1 ms) by a background thread ([`Persisted`]). A file that exists
    /// but cannot be restored (damaged, or of another configuration: other
    /// limits, other tiers, or tiers where the file has none) is an
    /// error: remove it, or use another path, to start afresh. With
    /// [`Builder::shared`], refused as [`Builder::restore`] refuses it.
    #[cfg(not(ratecell_loom))]
    pub fn persisted(
        self,
        path: impl AsRef<Path>,
        every: Duration,
    ) -> Result<Persisted<KeyedLimiter>, SnapshotError> {
        let fresh = self.clone();
        Persisted::open_or_build(path.as_ref(), every, |p| self.load(p), || fresh.build())
    }

    /// What a keyed restore refuses before anything is read or
    /// allocated: no limits, limits beside tiers, a shared region.
    #[cfg(not(ratecell_loom))]
    fn checked_keyed_restore(&self) -> Result<(), Error> {
        self.checked_limits()?;
        self.refuse_shared_restore()
    }
}

impl Builder<AnyLimiter> {
    /// A direct limiter when the first limit's capacity is 0, else a keyed
    /// one: for callers whose configuration, not their code, says which.
    pub fn build(self) -> Result<AnyLimiter, Error> {
        Ok(if self.is_direct() {
            AnyLimiter::Direct(self.into_kind::<Limiter>().build()?)
        } else {
            AnyLimiter::Keyed(self.into_kind::<KeyedLimiter>().build()?)
        })
    }

    /// [`Builder::restore`] of a direct limiter when the first limit's
    /// capacity is 0 (and there are no tiers, no shared region), else of
    /// a keyed one: the options choose, as for [`Builder::build`], never
    /// the snapshot (a snapshot of the other kind is refused as of
    /// another configuration).
    #[cfg(not(ratecell_loom))]
    pub fn restore(self, snapshot: impl Read) -> Result<AnyLimiter, SnapshotError> {
        Ok(if self.is_direct() {
            AnyLimiter::Direct(self.into_kind::<Limiter>().restore(snapshot)?)
        } else {
            AnyLimiter::Keyed(self.into_kind::<KeyedLimiter>().restore(snapshot)?)
        })
    }

    /// [`Builder::load`] of a direct or a keyed limiter, as
    /// [`Builder::restore`] chooses.
    #[cfg(not(ratecell_loom))]
    pub fn load(self, path: impl AsRef<Path>) -> Result<AnyLimiter, SnapshotError> {
        Ok(if self.is_direct() {
            AnyLimiter::Direct(self.into_kind::<Limiter>().load(path)?)
        } else {
            AnyLimiter::Keyed(self.into_kind::<KeyedLimiter>().load(path)?)
        })
    }

    /// [`Builder::persisted`] of a direct or a keyed limiter, as
    /// [`Builder::restore`] chooses.
    #[cfg(not(ratecell_loom))]
    pub fn persisted(
        self,
        path: impl AsRef<Path>,
        every: Duration,
    ) -> Result<Persisted<AnyLimiter>, SnapshotError> {
        let fresh = self.clone();
        Persisted::open_or_build(path.as_ref(), every, |p| self.load(p), || fresh.build())
    }

    /// Whether these options make a direct limiter.
    fn is_direct(&self) -> bool {
        self.tiers.is_empty()
            && self.shared.is_none()
            && self.limits.first().is_some_and(|c| c.capacity == 0)
    }
}

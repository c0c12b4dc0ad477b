//! [`Builder`]: every way to make a limiter as options of one value: its
//! limits or tiers, its clock, its limits' names, and where its states
//! come from ([`States`]: fresh, a snapshot, a shared region; a file it is
//! also saved to with [`Builder::persisted`]). One terminal,
//! [`Builder::build`], resolves them; a new option is one method here,
//! never a new constructor.

use crate::any::AnyLimiter;
use crate::clock::Clock;
use crate::config::{Config, ConfigError, Error, Field, SharedError, SharedErrorKind};
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;
use crate::shared::SharedOptions;
use crate::snapshot::{Persisted, SnapshotError, saved_tiers};
use crate::table::KeyHasher;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Cursor, Read, Seek, SeekFrom};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where a limiter's states come from ([`Builder::states`]; SPEC §2,
/// "Where states come from"). A snapshot's configuration must be the
/// builder's (else [`SnapshotError::ConfigMismatch`] names the first field
/// that differs, before anything is allocated), or the builder gives no
/// limit and the snapshot's own limits and tiers are taken.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum States {
    /// Every key starts unused (the default).
    #[default]
    Fresh,
    /// The states saved in the snapshot file at this path (a missing file
    /// is [`SnapshotError::Io`] of kind `NotFound`). The key hasher's seed
    /// is the saved one, so every key finds the state it had.
    Snapshot(PathBuf),
    /// The states saved in a snapshot held in memory (as
    /// [`States::Snapshot`] reads a file).
    Bytes(Arc<[u8]>),
    /// A keyed table in the region at `region`, shared by every process
    /// that opens it (a bare name, without `/`, lies under `/dev/shm`;
    /// `docs/SHARED.md`): one keyed limit of a word algorithm, no tiers,
    /// the region's own clock. An existing region is attached as it is; a
    /// new one is filled from the snapshot file `seed` when it is given and
    /// exists (written under a private name, then linked: no process sees
    /// a half-filled region), else fresh.
    Shared {
        /// The region's file.
        region: PathBuf,
        /// The mode of a region this call creates, and the clock.
        options: SharedOptions,
        /// A snapshot file that fills a new region, if any.
        seed: Option<PathBuf>,
    },
}

impl States {
    /// [`States::Snapshot`] of the file at `path`.
    pub fn snapshot(path: impl Into<PathBuf>) -> States {
        States::Snapshot(path.into())
    }

    /// [`States::Bytes`] of a snapshot in memory.
    pub fn bytes(snapshot: impl Into<Arc<[u8]>>) -> States {
        States::Bytes(snapshot.into())
    }

    /// [`States::Shared`] with the default options and no seed.
    pub fn shared(region: impl Into<PathBuf>) -> States {
        States::Shared {
            region: region.into(),
            options: SharedOptions::default(),
            seed: None,
        }
    }

    /// Whether the states are read from a snapshot (a file or bytes).
    fn is_snapshot(&self) -> bool {
        matches!(self, States::Snapshot(_) | States::Bytes(_))
    }
}

// By hand: a derive would print every byte of a snapshot in memory.
impl fmt::Debug for States {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            States::Fresh => f.write_str("Fresh"),
            States::Snapshot(path) => f.debug_tuple("Snapshot").field(path).finish(),
            States::Bytes(bytes) => write!(f, "Bytes({} bytes)", bytes.len()),
            States::Shared {
                region,
                options,
                seed,
            } => f
                .debug_struct("Shared")
                .field("region", region)
                .field("options", options)
                .field("seed", seed)
                .finish(),
        }
    }
}

/// The options of a limiter, made into a [`Limiter`], a [`KeyedLimiter`]
/// or an [`AnyLimiter`] (the builders of `Limiter::builder()`,
/// `KeyedLimiter::builder()` and `AnyLimiter::builder()`), or into a
/// [`Persisted`] one of these ([`Builder::persisted`]), by its one
/// terminal, [`Builder::build`].
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
/// - [`Builder::states`]: where the states come from ([`States`]): fresh,
///   a snapshot file or bytes, a region shared by the processes that open
///   it.
/// - [`Builder::persisted`]: restored from a file if it exists, else
///   fresh, then saved there periodically; the limiter is then a
///   [`Persisted`] one (it owns the thread that saves it), so this option
///   is typed apart from [`Builder::states`].
///
/// Errors name the field at fault: [`Field::Limits`] for no limit (and no
/// snapshot to take them from), [`Field::States`] for states the limiter
/// cannot take, [`SnapshotError::ConfigMismatch`] for a snapshot of
/// another configuration, and whatever each limiter's rules refuse
/// (wrapped in [`SnapshotError::Limiter`]).
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
    states: States,
    persisted: Option<(PathBuf, Duration)>,
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
            states: self.states.clone(),
            persisted: self.persisted.clone(),
            kind: PhantomData,
        }
    }
}

impl Limiter {
    /// A [`Builder`] for a direct limiter: several limits, another clock,
    /// named limits, states from a snapshot.
    pub fn builder() -> Builder<Limiter> {
        Builder::new()
    }
}

impl KeyedLimiter {
    /// A [`Builder`] for a keyed limiter: several limits, tiers, another
    /// clock, named limits, states from a snapshot or a shared region.
    pub fn builder() -> Builder<KeyedLimiter> {
        Builder::new()
    }
}

impl AnyLimiter {
    /// A [`Builder`] for a direct limiter when the first limit's capacity
    /// is 0 (and the states are not a shared region's), else a keyed one.
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
            states: States::Fresh,
            persisted: None,
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

    /// Where the states come from ([`States`]): fresh unless given.
    ///
    /// ```
    /// use ratecell::{Algorithm, Config, Limiter, Request, States};
    ///
    /// let t = 1_700_000_000_000_000_000;
    /// let config = Config::new(Algorithm::Gcra, 2, 1_000_000_000);
    /// let limiter = Limiter::builder().limit(config).build().unwrap();
    /// assert!(limiter.check(Request::new(2).at(t)).allowed);
    /// let mut saved = Vec::new();
    /// limiter.snapshot_at(&mut saved, t).unwrap();
    ///
    /// let back = Limiter::builder()
    ///     .limit(config)
    ///     .states(States::bytes(saved.clone()))
    ///     .build()
    ///     .unwrap();
    /// assert!(!back.check(Request::new(1).at(t)).allowed, "the state came back");
    /// // No limit given: the snapshot's own are taken (burst resolved).
    /// let as_saved = Limiter::builder().states(States::bytes(saved)).build().unwrap();
    /// assert_eq!(as_saved.limits(), &[config.burst(2).sub_windows(1)]);
    /// ```
    pub fn states(mut self, states: States) -> Builder<L> {
        self.states = states;
        self
    }

    /// Restores the limiter from the snapshot file at `path` if it exists,
    /// else makes it fresh, and saves it there every `every` (at least
    /// 1 ms) by a background thread, atomically (a crash leaves the last
    /// whole snapshot): a [`Persisted`] limiter, which dereferences to the
    /// limiter and saves once more when dropped. Only a missing file
    /// starts fresh: a file that exists but cannot be restored (damaged,
    /// or of another configuration) is an error; remove it, or use
    /// another path, to start afresh. The file is where the states come
    /// from, so [`Builder::states`] must be left fresh ([`Field::States`]).
    ///
    /// ```
    /// use ratecell::{Algorithm, Config, KeyedLimiter};
    /// use std::time::Duration;
    ///
    /// # let dir = std::env::temp_dir().join(format!("ratecell-doc-builder-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// # let path = dir.join("limits.snap");
    /// let hourly = Config::new(Algorithm::Gcra, 1, 3_600_000_000_000).capacity(100);
    /// let builder = KeyedLimiter::builder().limit(hourly).persisted(&path, Duration::from_secs(5));
    /// let limiter = builder.clone().build()?;
    /// assert!(limiter.check(42, 1).allowed);
    /// drop(limiter); // saved once more
    /// let again = builder.build()?;
    /// assert!(!again.check(42, 1).allowed, "42's state came back from the file");
    /// # drop(again);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), ratecell::SnapshotError>(())
    /// ```
    pub fn persisted(self, path: impl Into<PathBuf>, every: Duration) -> Builder<Persisted<L>>
    where
        L: crate::snapshot::Save,
    {
        let mut builder = self.into_kind();
        builder.persisted = Some((path.into(), every));
        builder
    }

    /// The same options, for another kind of limiter.
    fn into_kind<M>(self) -> Builder<M> {
        Builder {
            limits: self.limits,
            tiers: self.tiers,
            clock: self.clock,
            names: self.names,
            states: self.states,
            persisted: self.persisted,
            kind: PhantomData,
        }
    }

    /// Refuses limits and tiers given together, and neither.
    fn checked_limits(&self) -> Result<(), Error> {
        if !self.tiers.is_empty() && !self.limits.is_empty() {
            return Err(refusal(
                Field::Tiers,
                "both limits and tiers were given: give every limit in its tier",
            ));
        }
        if self.tiers.is_empty() && self.limits.is_empty() {
            return Err(refusal(Field::Limits, "no limit was given"));
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

    /// The tiers as the tiered constructors take them.
    fn tier_rows(&self) -> Vec<&[Config]> {
        self.tiers.iter().map(Vec::as_slice).collect()
    }

    /// The snapshot the states come from, opened once: with no limit and
    /// no tier given, its own limits (or tiers) become the builder's, read
    /// from its header, then the same input is read from its start, so
    /// the configuration and the states come from one snapshot even if the
    /// file is replaced meanwhile. `None` for states not from a snapshot.
    fn snapshot_input(&mut self) -> Result<Option<Box<dyn ReadSeek>>, SnapshotError> {
        let mut input: Box<dyn ReadSeek> = match &self.states {
            States::Snapshot(path) => Box::new(BufReader::new(File::open(path)?)),
            States::Bytes(bytes) => Box::new(Cursor::new(bytes.clone())),
            States::Fresh | States::Shared { .. } => return Ok(None),
        };
        if self.limits.is_empty() && self.tiers.is_empty() {
            let (tiers, tiered) = saved_tiers(&mut input)?;
            input.seek(SeekFrom::Start(0))?;
            if tiered {
                self.tiers = tiers;
            } else {
                self.limits = tiers.into_iter().next().unwrap_or_default();
            }
        }
        Ok(Some(input))
    }
}

/// A snapshot's input: read once for its header, then again from its start.
trait ReadSeek: Read + Seek {}
impl<T: Read + Seek> ReadSeek for T {}

/// The error of an option refused: which field, and why.
fn refusal(field: Field, message: &str) -> Error {
    Error::Config(ConfigError {
        field,
        message: message.into(),
    })
}

impl Builder<Limiter> {
    /// The direct limiter of these options: one state, every limit's
    /// capacity 0, its state fresh or a snapshot's ([`States`]; a shared
    /// region holds a keyed table, [`Field::States`]). Names are not
    /// saved in snapshots: a restored limiter has these options' names,
    /// or none.
    pub fn build(mut self) -> Result<Limiter, SnapshotError> {
        if matches!(self.states, States::Shared { .. }) {
            return Err(refusal(
                Field::States,
                "a shared region holds a keyed table: build a KeyedLimiter (capacity >= 1) and check one key",
            )
            .into());
        }
        let input = self.snapshot_input()?;
        self.checked_direct()?;
        let clock = self.clock_or_tsc();
        let limiter = match input {
            None => Limiter::made(&self.limits, clock)?,
            Some(input) => Limiter::from_snapshot(input, &self.limits, clock)?,
        };
        Ok(self.named(limiter, Limiter::with_names)?)
    }

    /// What a direct limiter refuses before anything is allocated: no
    /// limits, tiers.
    fn checked_direct(&self) -> Result<(), Error> {
        self.checked_limits()?;
        if !self.tiers.is_empty() {
            return Err(refusal(
                Field::Tiers,
                "a direct Limiter has one state and no tiers; tiers are a KeyedLimiter's",
            ));
        }
        Ok(())
    }
}

impl Builder<KeyedLimiter> {
    /// The keyed limiter of these options: one state per key, every
    /// limit's capacity ≥ 1, the states fresh, a snapshot's or a shared
    /// region's ([`States`]).
    ///
    /// A snapshot restores with its saved key hasher's seed, so every key
    /// finds the state it had, and must be of the same limits in the same
    /// order, or of the same tiers, else [`SnapshotError::ConfigMismatch`]
    /// names the first field that differs, before the table is allocated:
    /// [`Field::Limits`] when the number of limits does, [`Field::Tiers`]
    /// when the number of tiers does (a limiter without tiers counting 0),
    /// else the field, with `limit` its index in the tiers' flat list (tier
    /// `t`'s limit `i` is `t × limits + i`). Keys keep their states under
    /// whichever tier they name next. Names are not saved: a restored
    /// limiter has these options' names, or none.
    ///
    /// ```
    /// use ratecell::{Algorithm, Config, KeyedLimiter, Request, States};
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
    /// let back = builder.states(States::bytes(saved)).build().unwrap();
    /// assert!(!back.check("alice", Request::new(1).at(t)).allowed, "alice's state came back");
    /// assert_eq!(back.limit_name(0), Some("per_second"));
    /// ```
    pub fn build(mut self) -> Result<KeyedLimiter, SnapshotError> {
        let limiter = match std::mem::take(&mut self.states) {
            States::Shared {
                region,
                options,
                seed,
            } => self.shared(region, options, seed)?,
            states => {
                self.states = states;
                let input = self.snapshot_input()?;
                self.checked_limits()?;
                let clock = self.clock_or_tsc();
                match (input, self.tiers.is_empty()) {
                    (None, true) => KeyedLimiter::made(&self.limits, clock, KeyHasher::random())?,
                    (None, false) => {
                        KeyedLimiter::made_tiered(&self.tier_rows(), clock, KeyHasher::random())?
                    }
                    (Some(input), true) => KeyedLimiter::from_snapshot(input, &self.limits, clock)?,
                    (Some(input), false) => {
                        KeyedLimiter::from_snapshot_tiered(input, &self.tier_rows(), clock)?
                    }
                }
            }
        };
        Ok(self.named(limiter, KeyedLimiter::with_names)?)
    }

    /// The limiter of [`States::Shared`]: one limit, no tiers, the
    /// region's clock.
    fn shared(
        &self,
        region: PathBuf,
        options: SharedOptions,
        seed: Option<PathBuf>,
    ) -> Result<KeyedLimiter, SnapshotError> {
        self.checked_limits()?;
        let unsupported = |path: PathBuf, message: String| {
            Err(Error::Shared(SharedError {
                kind: SharedErrorKind::Unsupported,
                path,
                message,
            }))
        };
        if let Some(clock) = &self.clock {
            return Ok(unsupported(
                region,
                format!(
                    "a shared region reads its own clock, not {clock:?}; SharedOptions::coarse_clock chooses the coarse one"
                ),
            )?);
        }
        let [config] = self.limits[..] else {
            return Ok(unsupported(
                region,
                "a shared region holds one limit, without tiers".into(),
            )?);
        };
        KeyedLimiter::open_shared_seeded(&region, config, &options, seed.as_deref())
    }
}

impl Builder<AnyLimiter> {
    /// A direct limiter when the first limit's capacity is 0 (and there
    /// are no tiers, the states are not a shared region's), else a keyed
    /// one: for callers whose configuration, not their code, says which.
    /// With no limit given and the states a snapshot's, the snapshot's
    /// first limit's capacity chooses.
    pub fn build(mut self) -> Result<AnyLimiter, SnapshotError> {
        // The snapshot's limits choose the kind, then the kind's build
        // reads the snapshot again and checks it against those limits: a
        // file replaced between the two reads by one of another
        // configuration is refused, never mixed with the first.
        if self.limits.is_empty() && self.tiers.is_empty() && self.states.is_snapshot() {
            let mut probe = self.clone();
            drop(probe.snapshot_input()?);
            (self.limits, self.tiers) = (probe.limits, probe.tiers);
        }
        let direct = self.tiers.is_empty()
            && !matches!(self.states, States::Shared { .. })
            && self.limits.first().is_some_and(|c| c.capacity == 0);
        Ok(if direct {
            AnyLimiter::Direct(self.into_kind::<Limiter>().build()?)
        } else {
            AnyLimiter::Keyed(self.into_kind::<KeyedLimiter>().build()?)
        })
    }
}

/// [`Builder::persisted`]'s terminal for each kind of limiter: the limiter
/// of these options restored from the file if it exists, else fresh, then
/// saved periodically (`Persisted::open_or_build` holds the rule).
macro_rules! build_persisted {
    ($($limiter:ty),*) => {$(
        impl Builder<Persisted<$limiter>> {
            /// The [`Persisted`] limiter of these options
            /// ([`Builder::persisted`]).
            pub fn build(self) -> Result<Persisted<$limiter>, SnapshotError> {
                let (path, every) = self.persisted.clone().expect("made by Builder::persisted");
                if self.states != States::Fresh {
                    return Err(refusal(
                        Field::States,
                        "a persisted limiter's states come from its own file: leave states fresh",
                    )
                    .into());
                }
                let load: Builder<$limiter> = self.into_kind();
                let fresh = load.clone();
                Persisted::open_or_build(
                    &path,
                    every,
                    |p| load.states(States::snapshot(p)).build(),
                    || fresh.build(),
                )
            }
        }
    )*};
}

build_persisted!(Limiter, KeyedLimiter, AnyLimiter);

//! What a limiter is asked to enforce, and the checks that refuse anything
//! outside [SPEC §2](crate::spec#2-configuration) with an error naming the field.
//!
//! Validation happens once, at construction; the result is [`Params`], the
//! plain integers the algorithms read on every check.

pub(crate) mod duration;

use std::fmt;
use std::path::PathBuf;

/// One of the seven algorithms of [SPEC §4](crate::spec#4-the-algorithms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Algorithm {
    /// Generic cell rate algorithm: a theoretical arrival time per key.
    Gcra = 1,
    /// GCRA's admission rule, plus a queue position (`wait_ns`) per request.
    LeakyBucket = 2,
    /// A bucket of `burst` tokens refilled by `limit` every `period`.
    TokenBucket = 3,
    /// `limit` per calendar-aligned window of `period`.
    FixedWindow = 4,
    /// The current window's count plus the previous one's, weighted.
    SlidingWindow = 5,
    /// `sub_windows` counters; the limit applies to their sum.
    BucketedWindow = 6,
    /// Exact: every admitted request's time and cost, for one period.
    SlidingLog = 7,
}

impl Algorithm {
    /// Every algorithm, in SPEC order.
    pub const ALL: [Algorithm; 7] = [
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::BucketedWindow,
        Algorithm::SlidingLog,
    ];

    /// The SPEC name (`gcra`, `leaky_bucket`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Gcra => "gcra",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::BucketedWindow => "bucketed_window",
            Algorithm::SlidingLog => "sliding_log",
        }
    }

    /// Parses a SPEC name (also accepts `-` for `_`).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        let name = name.replace('-', "_");
        Algorithm::ALL.into_iter().find(|a| a.name() == name)
    }

    /// Converts the C ABI's numbering (1..=7).
    pub fn from_u32(value: u32) -> Option<Algorithm> {
        Algorithm::ALL
            .get((value as usize).wrapping_sub(1))
            .copied()
    }

    /// Whether `burst` means anything for this algorithm.
    pub fn has_burst(self) -> bool {
        matches!(
            self,
            Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a keyed limiter does with a new key when its table has no free or
/// evictable (equivalent to fresh) place for it ([SPEC §5](crate::spec#5-keyed-limiters)). The event is
/// counted: as an overflow under `Deny` and `Allow`, as a live eviction
/// ([`Stats::evicted_live`](crate::Stats::evicted_live)) under `Evict`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Overflow {
    /// Deny the request (fail closed).
    #[default]
    Deny = 0,
    /// Admit the request as a fresh, untracked key (fail open).
    Allow = 1,
    /// Evict the live state nearest to fresh among the key's places and
    /// track the new key there: every new key is tracked, so a flood of
    /// new keys cannot lock out the next legitimate one, at the price of
    /// a bounded gain for the evicted key (SPEC §5 states it).
    Evict = 2,
}

/// The largest `limit` and `burst`: counters are 32-bit in every state.
pub const MAX_LIMIT: u64 = u32::MAX as u64;
/// The shortest period: 1 µs.
pub const MIN_PERIOD_NS: u64 = 1_000;
/// The longest period: 366 days.
pub const MAX_PERIOD_NS: u64 = 366 * 86_400 * 1_000_000_000;
/// The most keys a keyed limiter may be sized for (2^40, about 10^12): far
/// beyond any memory, so a larger value is a mistake, not a big table. A
/// capacity below this that memory cannot hold is `Error::OutOfMemory`.
pub const MAX_CAPACITY: u64 = 1 << 40;
/// The most sub-windows a bucketed window may have.
pub const MAX_SUB_WINDOWS: u32 = 64;
/// The bound on GCRA's and the leaky bucket's tolerance: `burst × T`, with
/// `T = ceil(period_ns / limit)` the emission interval, must stay below this
/// (2^62 ns, about 146 years), so a theoretical arrival time always fits its
/// 64-bit cell for any time before the year 2262. A larger product is refused
/// with [`Field::Burst`].
pub const MAX_GCRA_TOLERANCE_NS: u128 = 1 << 62;

/// A limiter's configuration ([SPEC §2](crate::spec#2-configuration)). Build it with [`Config::new`] and
/// the setters; it is checked when a limiter is made from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// `L`: units per period.
    pub limit: u64,
    /// `P`: the period in nanoseconds.
    pub period_ns: u64,
    /// `B`: units admitted at once from a fresh state (GCRA, leaky bucket,
    /// token bucket). 0 means "same as limit"; the window and log algorithms
    /// take only 0 or `limit`. GCRA and the leaky bucket also bound
    /// `burst × T` by [`MAX_GCRA_TOLERANCE_NS`].
    pub burst: u64,
    /// `N`: bucketed window only; must divide the period.
    pub sub_windows: u32,
    /// The live keys a keyed limiter's table is sized to hold; 0 for one
    /// shared state. A size to provide for, not a cap: the table holds this
    /// many, and takes more into its spare places (up to about 1.45 times
    /// as many) until a new key finds no room ([SPEC §5](crate::spec#5-keyed-limiters)).
    pub capacity: u64,
    /// What a full table does with a new key.
    pub overflow: Overflow,
}

impl Config {
    /// A configuration with SPEC defaults: burst = limit, no capacity (one
    /// shared state), overflow deny, and 10 sub-windows when 10 divides the
    /// period (else 1).
    pub fn new(algorithm: Algorithm, limit: u64, period_ns: u64) -> Config {
        Config {
            algorithm,
            limit,
            period_ns,
            burst: 0,
            sub_windows: if period_ns % 10 == 0 { 10 } else { 1 },
            capacity: 0,
            overflow: Overflow::Deny,
        }
    }

    /// Sets the burst.
    #[must_use = "a Config setter returns the changed copy and leaves the original as it was"]
    pub fn burst(mut self, burst: u64) -> Config {
        self.burst = burst;
        self
    }

    /// Sets the number of sub-windows (bucketed window).
    #[must_use = "a Config setter returns the changed copy and leaves the original as it was"]
    pub fn sub_windows(mut self, sub_windows: u32) -> Config {
        self.sub_windows = sub_windows;
        self
    }

    /// Sets the capacity: the live keys a keyed limiter's table is sized to
    /// hold (see the `capacity` field).
    #[must_use = "a Config setter returns the changed copy and leaves the original as it was"]
    pub fn capacity(mut self, capacity: u64) -> Config {
        self.capacity = capacity;
        self
    }

    /// Sets the overflow policy (keyed limiters).
    #[must_use = "a Config setter returns the changed copy and leaves the original as it was"]
    pub fn overflow(mut self, overflow: Overflow) -> Config {
        self.overflow = overflow;
        self
    }

    /// Checks every field and derives the integers the algorithms use.
    pub(crate) fn params(&self) -> Result<Params, ConfigError> {
        let err = |field, message: String| Err(ConfigError { field, message });
        let (limit, period) = (self.limit, self.period_ns);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return err(Field::Limit, format!("{limit} is outside 1..={MAX_LIMIT}"));
        }
        if !(MIN_PERIOD_NS..=MAX_PERIOD_NS).contains(&period) {
            return err(
                Field::PeriodNs,
                format!(
                    "{period} ns is outside {MIN_PERIOD_NS}..={MAX_PERIOD_NS} ns (1 µs to 366 days)"
                ),
            );
        }
        let burst = match self.burst {
            0 => limit,
            b if self.algorithm.has_burst() && b > MAX_LIMIT => {
                return err(
                    Field::Burst,
                    format!("{b} is outside 1..={MAX_LIMIT} (0 means limit)"),
                );
            }
            b if !self.algorithm.has_burst() && b != limit => {
                return err(
                    Field::Burst,
                    format!(
                        "{} has no burst: leave it 0 or equal to limit ({limit}), not {b}",
                        self.algorithm
                    ),
                );
            }
            b => b,
        };
        let mut interval = 0;
        if matches!(self.algorithm, Algorithm::Gcra | Algorithm::LeakyBucket) {
            if limit > period {
                return err(
                    Field::Limit,
                    format!(
                        "{limit} exceeds period_ns = {period}: {} cannot space requests closer than 1 ns",
                        self.algorithm
                    ),
                );
            }
            interval = period.div_ceil(limit);
            if u128::from(burst) * u128::from(interval) >= MAX_GCRA_TOLERANCE_NS {
                return err(
                    Field::Burst,
                    format!(
                        "{burst} times the emission interval ({interval} ns) reaches 2^62 ns (146 years); the theoretical arrival time would not fit its 64-bit cell"
                    ),
                );
            }
        }
        if self.capacity > MAX_CAPACITY {
            return err(
                Field::Capacity,
                format!("{} is above {MAX_CAPACITY} keys (2^40)", self.capacity),
            );
        }
        let mut sub_windows = 1;
        if self.algorithm == Algorithm::BucketedWindow {
            let n = self.sub_windows;
            if !(1..=MAX_SUB_WINDOWS).contains(&n) {
                return err(
                    Field::SubWindows,
                    format!("{n} is outside 1..={MAX_SUB_WINDOWS}"),
                );
            }
            if period % u64::from(n) != 0 {
                return err(
                    Field::SubWindows,
                    format!("{n} does not divide period_ns = {period}"),
                );
            }
            sub_windows = n;
        }
        Ok(Params {
            algorithm: self.algorithm,
            limit,
            period,
            burst,
            interval,
            sub_windows,
        })
    }
}

/// The validated integers every algorithm reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Params {
    pub algorithm: Algorithm,
    /// L
    pub limit: u64,
    /// P, ns
    pub period: u64,
    /// B (never 0: 0 was resolved to L)
    pub burst: u64,
    /// T = ceil(P / L) for GCRA and leaky bucket; 0 otherwise.
    pub interval: u64,
    /// N for the bucketed window; 1 otherwise.
    pub sub_windows: u32,
}

/// A configuration field, as named in errors and by the C ABI's statuses.
/// Fields may be added as configurations grow: match with a wildcard arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// `algorithm`
    Algorithm,
    /// `limit`
    Limit,
    /// `period_ns`
    PeriodNs,
    /// `burst`
    Burst,
    /// `sub_windows`
    SubWindows,
    /// `capacity`
    Capacity,
    /// `overflow`
    Overflow,
    /// The number of limits given to a multi-limit constructor (1 to
    /// [`crate::MAX_LIMITS`]), or of names given for them.
    Limits,
    /// The tiers given to a tiered keyed limiter (1 to
    /// [`crate::MAX_TIERS`], each the same number of limits).
    Tiers,
    /// Where a limiter's states come from (`crate::States`): states this
    /// limiter cannot take (a shared region for a direct limiter, a
    /// snapshot beside a persisted file's own).
    States,
}

impl Field {
    /// The field's name in [`Config`] and in `ratecell_config`.
    pub fn name(self) -> &'static str {
        match self {
            Field::Algorithm => "algorithm",
            Field::Limit => "limit",
            Field::PeriodNs => "period_ns",
            Field::Burst => "burst",
            Field::SubWindows => "sub_windows",
            Field::Capacity => "capacity",
            Field::Overflow => "overflow",
            Field::Limits => "limits",
            Field::Tiers => "tiers",
            Field::States => "states",
        }
    }
}

/// A configuration refused at construction: which field, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field at fault.
    pub field: Field,
    /// What is wrong with the field's value: the value and its valid range
    /// (Display puts the field's name in front: "invalid limit: 0 is
    /// outside 1..=4294967295").
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.field.name(), self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Why a limiter could not be built. Causes may be added: match with a
/// wildcard arm.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// A field is outside its valid range.
    Config(ConfigError),
    /// The state could not be allocated.
    OutOfMemory {
        /// The size of the allocation that failed.
        bytes: usize,
    },
    /// A shared region could not be created or attached
    /// (`States::Shared`).
    Shared(SharedError),
    /// A live reconfiguration (`Limiter::reconfigure`) was refused: the
    /// change has no carry-over rule for the states already kept, or
    /// would change what cannot change while running. Nothing changed.
    Reconfigure(ReconfigureError),
}

/// Why a live reconfiguration was refused: which limit, which field, and
/// why (see "Live reconfiguration" in docs/ALGORITHMS.md for the rules).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconfigureError {
    /// The index of the limit at fault (0 for a single limit).
    pub limit: usize,
    /// The field whose change is refused.
    pub field: Field,
    /// A sentence naming the field, the old and new values, and why.
    pub message: String,
}

impl fmt::Display for ReconfigureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot reconfigure limit {} live ({}): {}",
            self.limit,
            self.field.name(),
            self.message
        )
    }
}

impl std::error::Error for ReconfigureError {}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::Config(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(e) => e.fmt(f),
            Error::OutOfMemory { bytes } => write!(f, "could not allocate {bytes} bytes of state"),
            Error::Shared(e) => e.fmt(f),
            Error::Reconfigure(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Config(e) => Some(e),
            Error::OutOfMemory { .. } => None,
            Error::Shared(e) => Some(e),
            Error::Reconfigure(e) => Some(e),
        }
    }
}

/// What went wrong opening a shared region (see [`SharedError`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedErrorKind {
    /// The file could not be opened, created, sized or mapped (the message
    /// holds the OS error).
    Io,
    /// The file is not a ratecell region (wrong magic, damaged header).
    NotARegion,
    /// The file is shorter than its header says (or than a header).
    Truncated,
    /// The region has another layout version.
    Version,
    /// The region was made with another configuration (the message names
    /// the first field that differs).
    ConfigMismatch,
    /// The region was made before the machine last booted (its clock
    /// calibration means nothing now): remove the file.
    Stale,
    /// This configuration or platform cannot be shared safely (multi-word
    /// algorithms, capacity 0, no lock-free 128-bit atomics, another pid
    /// namespace).
    Unsupported,
}

/// A shared region that could not be opened or attached: which kind of
/// failure, the path, and what exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedError {
    /// What went wrong.
    pub kind: SharedErrorKind,
    /// The region's path.
    pub path: PathBuf,
    /// A sentence saying what exactly.
    pub message: String,
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shared region {}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for SharedError {}

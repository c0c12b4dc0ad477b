//! The plain data that crosses the C ABI: statuses, the integer enums, the
//! configuration, decisions and statistics, and their conversions to and
//! from the Rust types.
//!
//! Every value C hands us is read as an integer and checked before it
//! becomes a Rust enum: a C caller can put any number in an enum-typed
//! field, and an out-of-range discriminant in a Rust enum is undefined
//! behaviour. Enums only flow from Rust to C as Rust enums (the status).

use ratecell_lib::{Algorithm, Config, Decision, Error, Field, Overflow, SharedErrorKind, Stats};

/// The result of every fallible `ratecell_*` call. `RATECELL_OK` is 0;
/// every other value names one reason for failure. Values are stable:
/// new codes are only ever added at the end.
///
/// A check that is *denied* by the limiter is not an error: it returns
/// `RATECELL_OK` with `allowed == false` in its decision.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ratecell_status {
    /// Success.
    RATECELL_OK = 0,
    /// A required pointer argument was NULL (also: a NULL key or buffer
    /// with a non-zero length).
    RATECELL_NULL_ARGUMENT = 1,
    /// `config.algorithm` is not one of the `RATECELL_ALGORITHM_*` values.
    RATECELL_INVALID_ALGORITHM = 2,
    /// `config.limit` is out of range (1 ..= 2^32 - 1; and, for GCRA and
    /// the leaky bucket, at most `period_ns`).
    RATECELL_INVALID_LIMIT = 3,
    /// `config.period_ns` is out of range (1 us ..= 366 days).
    RATECELL_INVALID_PERIOD_NS = 4,
    /// `config.burst` is out of range (0 = limit, or 1 ..= 2^32 - 1; the
    /// window and log algorithms take only 0 or `limit`; GCRA and the leaky
    /// bucket refuse a burst times emission interval of 2^62 ns or more).
    RATECELL_INVALID_BURST = 5,
    /// `config.sub_windows` is out of range (bucketed window only: 1 ..= 64
    /// and dividing `period_ns`).
    RATECELL_INVALID_SUB_WINDOWS = 6,
    /// `config.capacity` is out of range (above 2^40 keys). A capacity
    /// below that which memory cannot hold is `RATECELL_OUT_OF_MEMORY`.
    RATECELL_INVALID_CAPACITY = 7,
    /// `config.overflow` is not one of the `RATECELL_OVERFLOW_*` values.
    RATECELL_INVALID_OVERFLOW = 8,
    /// `config.clock` is not one of the `RATECELL_CLOCK_*` values.
    RATECELL_INVALID_CLOCK = 9,
    /// `ratecell_algorithm_from_name` was given a name that names no
    /// algorithm.
    RATECELL_UNKNOWN_ALGORITHM = 10,
    /// The limiter's state could not be allocated.
    RATECELL_OUT_OF_MEMORY = 11,
    /// `ratecell_acquire` gave up: the request would not be admitted before
    /// the time-out. Its last decision is written to `out`.
    RATECELL_TIMED_OUT = 12,
    /// `ratecell_acquire` gave up at once: the cost exceeds what the limiter
    /// can ever admit (`retry_after_ns == UINT64_MAX`), so no wait helps.
    /// Its decision is written to `out`.
    RATECELL_COST_EXCEEDS_LIMIT = 13,
    /// A length is out of range: a struct's `size` field is not the size
    /// this library was built with (the caller was compiled against another
    /// header, or did not set the struct up with its `_init` function); or
    /// a byte length is above `PTRDIFF_MAX`, or a batch's decisions would
    /// not fit in memory; or a count of `ratecell_options` (`n_limits`,
    /// `n_tiers`) is out of range.
    RATECELL_INVALID_LENGTH = 14,
    /// A bug: the library panicked inside the call. The panic was caught
    /// and did not cross into C; the limiter is still safe to use and free.
    RATECELL_PANIC = 15,
    /// A snapshot file could not be read or written (permissions, a full
    /// disk, a directory that does not exist...).
    RATECELL_SNAPSHOT_IO = 16,
    /// `RATECELL_STATES_SNAPSHOT`: no file at the path. (Persisted states
    /// start fresh from a missing file instead.)
    RATECELL_SNAPSHOT_NOT_FOUND = 17,
    /// The file is not a snapshot, is truncated, or is damaged (a checksum
    /// or a field that does not hold).
    RATECELL_SNAPSHOT_DAMAGED = 18,
    /// The snapshot is of a format version this library does not read.
    RATECELL_SNAPSHOT_VERSION = 19,
    /// The snapshot was taken of a limiter configured differently from the
    /// configuration given (algorithm, limit, period_ns, burst,
    /// sub_windows or capacity of any limit, or the number of limits; see
    /// docs/SNAPSHOT.md).
    RATECELL_SNAPSHOT_CONFIG_MISMATCH = 20,
    /// Reserved, no longer returned: limiters of several limits are saved
    /// and restored since snapshot format version 2. The number stays so
    /// no status is renumbered.
    RATECELL_SNAPSHOT_SEVERAL_LIMITS = 21,
    /// `RATECELL_STATES_SHARED`: the region's file could not be
    /// opened, created, sized or mapped (permissions, a missing directory,
    /// a file system without hard links).
    RATECELL_SHARED_IO = 22,
    /// `RATECELL_STATES_SHARED`: the file is not a ratecell region
    /// (garbage, or a damaged header).
    RATECELL_SHARED_NOT_A_REGION = 23,
    /// `RATECELL_STATES_SHARED`: the file is shorter than the region
    /// its header describes.
    RATECELL_SHARED_TRUNCATED = 24,
    /// `RATECELL_STATES_SHARED`: the region has another layout
    /// version (made by another release of ratecell).
    RATECELL_SHARED_VERSION = 25,
    /// `RATECELL_STATES_SHARED`: the region was made with another
    /// configuration.
    RATECELL_SHARED_CONFIG_MISMATCH = 26,
    /// `RATECELL_STATES_SHARED`: the region was made before the
    /// machine last booted; remove the file.
    RATECELL_SHARED_STALE = 27,
    /// `RATECELL_STATES_SHARED`: this configuration cannot be shared
    /// (the bucketed window and sliding log algorithms, capacity 0), or this
    /// platform cannot share (not Linux, no lock-free 128-bit CAS, another
    /// pid namespace).
    RATECELL_SHARED_UNSUPPORTED = 28,
    /// `ratecell_limiter_reconfigure`: the change has no carry-over for the
    /// states kept (another algorithm, a window's period, a count width,
    /// ...) or changes what is fixed (number of limits, capacity,
    /// overflow, a shared region); nothing changed.
    RATECELL_RECONFIGURE_REFUSED = 29,
    /// A request's tier is not below the limiter's number of tiers
    /// (`ratecell_limiter_tiers`); nothing was checked.
    RATECELL_INVALID_TIER = 30,
    /// `ratecell_leases_new`: the algorithm cannot be leased (leaky_bucket,
    /// bucketed_window, sliding_log; docs/SPEC.md §8).
    RATECELL_NOT_LEASABLE = 31,
    /// `ratecell_lease_options.max_grant` is above the limit.
    RATECELL_INVALID_MAX_GRANT = 32,
    /// `ratecell_lease_options.horizon_ns` is longer than the period.
    RATECELL_INVALID_HORIZON = 33,
    /// `ratecell_lease_options.expire_ns` is not 0 for an algorithm other
    /// than gcra, or is outside one emission interval ..= the period.
    RATECELL_INVALID_EXPIRE = 34,
    /// `ratecell_lease_options.skew_ns` is not less than the period.
    RATECELL_INVALID_SKEW = 35,
    /// `ratecell_lease_options.failure` is not a `RATECELL_FAILURE_*` value,
    /// or `expected_nodes` is 0 with `RATECELL_FAILURE_LOCAL`.
    RATECELL_INVALID_FAILURE = 36,
    /// `ratecell_leases_complete`: the reply is not `RATECELL.LEASE`'s (not
    /// five integers, or a negative one where none may be); nothing done.
    RATECELL_INVALID_REPLY = 37,
    /// A grant given to other leases than those that made it.
    RATECELL_INVALID_GRANT = 38,
    /// `ratecell_options.states` is not a `RATECELL_STATES_*` value, or a
    /// field that those states do not read is set (`path` or
    /// `save_every_ns` for fresh states, `shared_path` for any states but
    /// `RATECELL_STATES_SHARED`, `save_every_ns` for a snapshot or a
    /// shared region).
    RATECELL_INVALID_STATES = 39,
    /// `ratecell_allow`'s answer when the request is not admitted: an
    /// outcome, not an error (every other check writes a denial into its
    /// decision and returns `RATECELL_OK`).
    RATECELL_DENIED = 40,
}

use ratecell_status::*;

/// Every status, in numeric order (kept out of the header: cbindgen would
/// print a public associated constant as a macro).
const STATUSES: [ratecell_status; 41] = [
    RATECELL_OK,
    RATECELL_NULL_ARGUMENT,
    RATECELL_INVALID_ALGORITHM,
    RATECELL_INVALID_LIMIT,
    RATECELL_INVALID_PERIOD_NS,
    RATECELL_INVALID_BURST,
    RATECELL_INVALID_SUB_WINDOWS,
    RATECELL_INVALID_CAPACITY,
    RATECELL_INVALID_OVERFLOW,
    RATECELL_INVALID_CLOCK,
    RATECELL_UNKNOWN_ALGORITHM,
    RATECELL_OUT_OF_MEMORY,
    RATECELL_TIMED_OUT,
    RATECELL_COST_EXCEEDS_LIMIT,
    RATECELL_INVALID_LENGTH,
    RATECELL_PANIC,
    RATECELL_SNAPSHOT_IO,
    RATECELL_SNAPSHOT_NOT_FOUND,
    RATECELL_SNAPSHOT_DAMAGED,
    RATECELL_SNAPSHOT_VERSION,
    RATECELL_SNAPSHOT_CONFIG_MISMATCH,
    RATECELL_SNAPSHOT_SEVERAL_LIMITS,
    RATECELL_SHARED_IO,
    RATECELL_SHARED_NOT_A_REGION,
    RATECELL_SHARED_TRUNCATED,
    RATECELL_SHARED_VERSION,
    RATECELL_SHARED_CONFIG_MISMATCH,
    RATECELL_SHARED_STALE,
    RATECELL_SHARED_UNSUPPORTED,
    RATECELL_RECONFIGURE_REFUSED,
    RATECELL_INVALID_TIER,
    RATECELL_NOT_LEASABLE,
    RATECELL_INVALID_MAX_GRANT,
    RATECELL_INVALID_HORIZON,
    RATECELL_INVALID_EXPIRE,
    RATECELL_INVALID_SKEW,
    RATECELL_INVALID_FAILURE,
    RATECELL_INVALID_REPLY,
    RATECELL_INVALID_GRANT,
    RATECELL_INVALID_STATES,
    RATECELL_DENIED,
];

impl ratecell_status {
    /// The status numbered `value`, if there is one.
    pub fn from_u32(value: u32) -> Option<ratecell_status> {
        STATUSES.get(usize::try_from(value).ok()?).copied()
    }

    /// The status a configuration error on `field` becomes.
    pub fn from_field(field: Field) -> ratecell_status {
        match field {
            Field::Algorithm => RATECELL_INVALID_ALGORITHM,
            Field::Limit => RATECELL_INVALID_LIMIT,
            Field::PeriodNs => RATECELL_INVALID_PERIOD_NS,
            Field::Burst => RATECELL_INVALID_BURST,
            Field::SubWindows => RATECELL_INVALID_SUB_WINDOWS,
            Field::Capacity => RATECELL_INVALID_CAPACITY,
            Field::Overflow => RATECELL_INVALID_OVERFLOW,
            // The count `n_limits` of `ratecell_options`: a length.
            Field::Limits => RATECELL_INVALID_LENGTH,
            // The count of tiers, or a tier of another length.
            Field::Tiers => RATECELL_INVALID_LENGTH,
            Field::States => RATECELL_INVALID_STATES,
            // `Field` is non-exhaustive outside the library: a field it
            // adds has no status of its own until one is added here and
            // in the header; until then it is refused as this one.
            _ => RATECELL_INVALID_LENGTH,
        }
    }

    /// The status a construction error becomes.
    pub fn from_error(error: &Error) -> ratecell_status {
        match error {
            Error::Config(e) => ratecell_status::from_field(e.field),
            Error::OutOfMemory { .. } => RATECELL_OUT_OF_MEMORY,
            Error::Shared(e) => match e.kind {
                SharedErrorKind::Io => RATECELL_SHARED_IO,
                SharedErrorKind::NotARegion => RATECELL_SHARED_NOT_A_REGION,
                SharedErrorKind::Truncated => RATECELL_SHARED_TRUNCATED,
                SharedErrorKind::Version => RATECELL_SHARED_VERSION,
                SharedErrorKind::ConfigMismatch => RATECELL_SHARED_CONFIG_MISMATCH,
                SharedErrorKind::Stale => RATECELL_SHARED_STALE,
                SharedErrorKind::Unsupported => RATECELL_SHARED_UNSUPPORTED,
            },
            Error::Reconfigure(_) => RATECELL_RECONFIGURE_REFUSED,
            // `Error` is non-exhaustive outside the library: a cause it
            // adds has no status of its own until one is added here and
            // in the header; until then it is a refused configuration.
            _ => RATECELL_INVALID_LENGTH,
        }
    }

    /// The NUL-terminated description `ratecell_status_str` returns.
    pub(crate) fn c_description(self) -> &'static [u8] {
        match self {
            RATECELL_OK => b"ok\0",
            RATECELL_NULL_ARGUMENT => b"a required pointer argument is NULL\0",
            RATECELL_INVALID_ALGORITHM => {
                b"invalid algorithm: not one of the RATECELL_ALGORITHM_* values\0"
            }
            RATECELL_INVALID_LIMIT => {
                b"invalid limit: outside 1..=2^32-1, above period_ns for gcra/leaky_bucket, or too large for a keyed sliding_window with this period (the key's fingerprint needs 32 bits)\0"
            }
            RATECELL_INVALID_PERIOD_NS => b"invalid period_ns: outside 1 us..=366 days\0",
            RATECELL_INVALID_BURST => b"invalid burst: out of range for this algorithm\0",
            RATECELL_INVALID_SUB_WINDOWS => {
                b"invalid sub_windows: outside 1..=64 or not dividing period_ns\0"
            }
            RATECELL_INVALID_CAPACITY => b"invalid capacity\0",
            RATECELL_INVALID_OVERFLOW => {
                b"invalid overflow: not one of the RATECELL_OVERFLOW_* values\0"
            }
            RATECELL_INVALID_CLOCK => b"invalid clock: not one of the RATECELL_CLOCK_* values\0",
            RATECELL_UNKNOWN_ALGORITHM => b"unknown algorithm name\0",
            RATECELL_OUT_OF_MEMORY => b"out of memory\0",
            RATECELL_TIMED_OUT => b"timed out before the request could be admitted\0",
            RATECELL_COST_EXCEEDS_LIMIT => {
                b"the cost exceeds the limit: the request can never be admitted\0"
            }
            RATECELL_INVALID_LENGTH => {
                b"invalid length: a struct's size field is not the size this library was built with (compiled against another ratecell.h, or not set up with the struct's _init function), or a byte length above PTRDIFF_MAX, or a count out of range\0"
            }
            RATECELL_PANIC => b"internal error: a panic was caught at the C boundary\0",
            RATECELL_SNAPSHOT_IO => b"the snapshot file could not be read or written\0",
            RATECELL_SNAPSHOT_NOT_FOUND => b"no snapshot file at this path\0",
            RATECELL_SNAPSHOT_DAMAGED => b"the snapshot is damaged, truncated, or not a snapshot\0",
            RATECELL_SNAPSHOT_VERSION => b"the snapshot's format version is not supported\0",
            RATECELL_SNAPSHOT_CONFIG_MISMATCH => {
                b"the snapshot's configuration differs from the one given\0"
            }
            RATECELL_SNAPSHOT_SEVERAL_LIMITS => {
                b"reserved: no longer returned (several limits are saved since format version 2)\0"
            }
            RATECELL_SHARED_IO => {
                b"shared region: the file could not be opened, created, sized or mapped\0"
            }
            RATECELL_SHARED_NOT_A_REGION => {
                b"shared region: the file is not a ratecell region (garbage or a damaged header)\0"
            }
            RATECELL_SHARED_TRUNCATED => {
                b"shared region: the file is shorter than the region its header describes\0"
            }
            RATECELL_SHARED_VERSION => {
                b"shared region: made by a ratecell with another layout version\0"
            }
            RATECELL_SHARED_CONFIG_MISMATCH => b"shared region: made with another configuration\0",
            RATECELL_SHARED_STALE => {
                b"shared region: made before the machine last booted; remove the file\0"
            }
            RATECELL_SHARED_UNSUPPORTED => {
                b"shared region: not available for this algorithm, capacity 0, or this platform\0"
            }
            RATECELL_RECONFIGURE_REFUSED => {
                b"reconfigure refused: the change has no carry-over for the kept states (algorithm, a window's period, a count width) or changes what is fixed (number of limits, capacity, overflow, clock, a shared region); nothing changed\0"
            }
            RATECELL_INVALID_TIER => {
                b"invalid tier: not below the limiter's number of tiers; nothing was checked\0"
            }
            RATECELL_NOT_LEASABLE => {
                b"invalid algorithm: cannot be leased (only gcra, token_bucket, fixed_window and sliding_window can)\0"
            }
            RATECELL_INVALID_MAX_GRANT => b"invalid max_grant: above the limit\0",
            RATECELL_INVALID_HORIZON => b"invalid horizon_ns: longer than the period\0",
            RATECELL_INVALID_EXPIRE => {
                b"invalid expire_ns: only gcra takes one, from one emission interval to the period\0"
            }
            RATECELL_INVALID_SKEW => b"invalid skew_ns: not less than the period\0",
            RATECELL_INVALID_FAILURE => {
                b"invalid failure: not a RATECELL_FAILURE_* value, or expected_nodes is 0\0"
            }
            RATECELL_INVALID_REPLY => {
                b"invalid reply: not RATECELL.LEASE's five integers (units, expires_at_ns, retry_after_ns, limit, remaining); nothing was done\0"
            }
            RATECELL_INVALID_GRANT => b"invalid grant: made by other leases\0",
            RATECELL_INVALID_STATES => {
                b"invalid states: not a RATECELL_STATES_* value, or a field those states do not read is set\0"
            }
            RATECELL_DENIED => b"denied: the request is over the limit\0",
        }
    }
}

/// The seven algorithms of docs/SPEC.md §4, numbered for C.
///
/// In C this is a `uint32_t`; a configuration holding any other value is
/// refused with `RATECELL_INVALID_ALGORITHM`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ratecell_algorithm {
    /// Generic cell rate algorithm ("gcra").
    RATECELL_ALGORITHM_GCRA = 1,
    /// Leaky bucket as a queue ("leaky_bucket"): GCRA plus a `wait_ns`.
    RATECELL_ALGORITHM_LEAKY_BUCKET = 2,
    /// Token bucket with interval refill ("token_bucket").
    RATECELL_ALGORITHM_TOKEN_BUCKET = 3,
    /// Fixed window aligned to multiples of the period ("fixed_window").
    RATECELL_ALGORITHM_FIXED_WINDOW = 4,
    /// Sliding window counter ("sliding_window").
    RATECELL_ALGORITHM_SLIDING_WINDOW = 5,
    /// Bucketed sliding window of `sub_windows` counters ("bucketed_window").
    RATECELL_ALGORITHM_BUCKETED_WINDOW = 6,
    /// Exact sliding log ("sliding_log").
    RATECELL_ALGORITHM_SLIDING_LOG = 7,
}

/// The Rust side of every `ratecell_algorithm` that comes from C: a plain
/// integer, checked with [`Algorithm::from_u32`] before use. cbindgen is
/// told to print it as `ratecell_algorithm` (see `cbindgen.toml`), so the
/// header keeps SPEC's types while Rust never holds an unchecked enum.
pub type ratecell_algorithm_raw = u32;

/// What a keyed limiter does with a new key when its table is full
/// (`ratecell_config.overflow`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ratecell_overflow {
    /// Deny the request (fail closed). The default.
    RATECELL_OVERFLOW_DENY = 0,
    /// Admit the request as an untracked fresh key (fail open).
    RATECELL_OVERFLOW_ALLOW = 1,
    /// Evict the live state nearest to fresh among the key's places and
    /// track the new key there (docs/SPEC.md §5 bounds what the evicted
    /// key gains). Counted in `ratecell_stats.evicted_live`.
    RATECELL_OVERFLOW_EVICT = 2,
}

/// `ratecell_config.clock`: which clock a limiter reads for the requests
/// that carry no time of their own (`at_ns` = `RATECELL_NOW`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ratecell_clock {
    /// The CPU time-stamp counter, calibrated to UNIX time when the limiter
    /// is made (the default).
    RATECELL_CLOCK_TSC = 0,
    /// A process-wide time refreshed every millisecond by a background
    /// thread: one load per read, up to about a millisecond behind.
    RATECELL_CLOCK_COARSE = 1,
}

/// Where a limiter's states come from: `ratecell_options.states` (SPEC §2,
/// "Where states come from").
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ratecell_states {
    /// Every key starts unused (the default).
    RATECELL_STATES_FRESH = 0,
    /// The states saved in the snapshot file `path` (which must exist).
    RATECELL_STATES_SNAPSHOT = 1,
    /// The states saved in the snapshot file `path` if it exists, else
    /// fresh; saved there every `save_every_ns` by a background thread.
    RATECELL_STATES_PERSISTED = 2,
    /// The table in the region `shared_path`, shared by every process that
    /// opens it; a new region is filled from the snapshot file `path` when
    /// `path` is not NULL and the file exists.
    RATECELL_STATES_SHARED = 3,
}

impl ratecell_states {
    /// The states numbered `value`, or `RATECELL_INVALID_STATES`.
    pub(crate) fn from_u32(value: u32) -> Result<ratecell_states, ratecell_status> {
        Ok(match value {
            0 => ratecell_states::RATECELL_STATES_FRESH,
            1 => ratecell_states::RATECELL_STATES_SNAPSHOT,
            2 => ratecell_states::RATECELL_STATES_PERSISTED,
            3 => ratecell_states::RATECELL_STATES_SHARED,
            _ => return Err(RATECELL_INVALID_STATES),
        })
    }
}

/// A limiter's configuration. Fill it with `ratecell_config_init` first,
/// then change the fields you need: fields added in later versions get
/// their defaults that way. Plain data; the library keeps no pointer to it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ratecell_config {
    /// One of `RATECELL_ALGORITHM_*`.
    pub algorithm: ratecell_algorithm_raw,
    /// L: units admitted per period (1 ..= 2^32 - 1).
    pub limit: u64,
    /// P: the period in nanoseconds (1 us ..= 366 days).
    pub period_ns: u64,
    /// B: units admitted at once from a fresh state (GCRA, leaky bucket,
    /// token bucket); 0 means "same as limit". The window and log
    /// algorithms take only 0 or `limit`.
    pub burst: u64,
    /// N: bucketed window only, the number of sub-windows (1 ..= 64,
    /// dividing `period_ns`). Ignored by the other algorithms.
    pub sub_windows: u32,
    /// 0 for one shared state (every key is ignored), more for a per-key
    /// table sized to hold that many live keys, allocated up front. A size
    /// to provide for, not a cap: the table may take up to about 1.45
    /// times as many into its spare places (docs/SPEC.md §5).
    pub capacity: u64,
    /// One of `RATECELL_OVERFLOW_*`: what a full table does with a new key.
    pub overflow: u32,
    /// One of `RATECELL_CLOCK_*` (added beyond SPEC; default TSC).
    pub clock: u32,
}

impl ratecell_config {
    /// SPEC defaults for `(algorithm, limit, period_ns)`, as
    /// `ratecell_config_init` writes them.
    pub fn new(algorithm: ratecell_algorithm_raw, limit: u64, period_ns: u64) -> ratecell_config {
        // Borrow the Rust defaults so the two cannot drift apart; the
        // algorithm only matters for validation, not for the defaults.
        let defaults = Config::new(Algorithm::Gcra, limit, period_ns);
        ratecell_config {
            algorithm,
            limit,
            period_ns,
            burst: defaults.limit,
            sub_windows: defaults.sub_windows,
            capacity: defaults.capacity,
            overflow: defaults.overflow as u32,
            clock: ratecell_clock::RATECELL_CLOCK_TSC as u32,
        }
    }

    /// The Rust configuration and clock selector, or the status naming the
    /// first field that is not a valid enum value. Range checks are left to
    /// the limiter's constructor.
    pub fn to_rust(&self) -> Result<(Config, ratecell_clock), ratecell_status> {
        let algorithm = Algorithm::from_u32(self.algorithm).ok_or(RATECELL_INVALID_ALGORITHM)?;
        let overflow = match self.overflow {
            0 => Overflow::Deny,
            1 => Overflow::Allow,
            2 => Overflow::Evict,
            _ => return Err(RATECELL_INVALID_OVERFLOW),
        };
        let clock = match self.clock {
            0 => ratecell_clock::RATECELL_CLOCK_TSC,
            1 => ratecell_clock::RATECELL_CLOCK_COARSE,
            _ => return Err(RATECELL_INVALID_CLOCK),
        };
        let config = Config {
            algorithm,
            limit: self.limit,
            period_ns: self.period_ns,
            burst: self.burst,
            sub_windows: self.sub_windows,
            capacity: self.capacity,
            overflow,
        };
        Ok((config, clock))
    }

    /// The C form of a Rust configuration.
    pub fn from_rust(config: &Config, clock: ratecell_clock) -> ratecell_config {
        ratecell_config {
            algorithm: config.algorithm as u32,
            limit: config.limit,
            period_ns: config.period_ns,
            burst: config.burst,
            sub_windows: config.sub_windows,
            capacity: config.capacity,
            overflow: config.overflow as u32,
            clock: clock as u32,
        }
    }
}

/// The answer to one request (docs/SPEC.md §3). Durations are
/// nanoseconds from the request's time and saturate at `UINT64_MAX`, which
/// `retry_after_ns` also uses for "never".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ratecell_decision {
    /// Whether the request was admitted (for a peek, cost 0: whether a
    /// cost-1 request would be).
    pub allowed: bool,
    /// B for GCRA, leaky bucket and token bucket; L for the others.
    pub limit: u64,
    /// Cost-1 requests that would be admitted now, after this decision.
    pub remaining: u64,
    /// 0 when admitted; else the least wait after which this same request
    /// would be admitted; `UINT64_MAX` when it never can.
    pub retry_after_ns: u64,
    /// Time until the key is fresh again (`remaining == limit`); 0 if it is.
    pub reset_after_ns: u64,
    /// Leaky bucket only: how long an admitted request waits for its turn
    /// before acting; 0 for every other algorithm.
    pub wait_ns: u64,
}

impl ratecell_decision {
    /// Writes `d` to `out` one field at a time, each with a store of the
    /// field's own size.
    ///
    /// Written as one struct, `d` is stored with 16-byte vector stores that
    /// straddle fields, and a caller that loads a field right after the call
    /// (a binding converting the answer) cannot have the load forwarded from
    /// a wider, misaligned store: it waits for the store to reach the cache.
    /// The Go binding's `Check`, which reads every field at once, is such a
    /// caller. The stores are volatile so that the compiler does not merge
    /// them back into vector stores.
    ///
    /// # Safety
    /// `out` is non-NULL, aligned and writable.
    #[inline(always)]
    pub(crate) unsafe fn write_fields(out: *mut ratecell_decision, d: &Decision) {
        // SAFETY: each field of a valid, writable `ratecell_decision`.
        unsafe {
            std::ptr::addr_of_mut!((*out).allowed).write_volatile(d.allowed);
            std::ptr::addr_of_mut!((*out).limit).write_volatile(d.limit);
            std::ptr::addr_of_mut!((*out).remaining).write_volatile(d.remaining);
            std::ptr::addr_of_mut!((*out).retry_after_ns).write_volatile(d.retry_after_ns);
            std::ptr::addr_of_mut!((*out).reset_after_ns).write_volatile(d.reset_after_ns);
            std::ptr::addr_of_mut!((*out).wait_ns).write_volatile(d.wait_ns);
        }
    }
}

impl From<Decision> for ratecell_decision {
    #[inline]
    fn from(d: Decision) -> ratecell_decision {
        ratecell_decision {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            retry_after_ns: d.retry_after_ns,
            reset_after_ns: d.reset_after_ns,
            wait_ns: d.wait_ns,
        }
    }
}

/// A snapshot of a limiter's counters. Each counter is exact on its own;
/// counters read while other threads check may be a few events apart.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ratecell_stats {
    /// Requests decided (`allowed + denied`).
    pub checks: u64,
    /// Requests admitted (peeks that would be admitted included).
    pub allowed: u64,
    /// Requests denied (overflow denials included).
    pub denied: u64,
    /// Keys with a state in the table now (0 for a limiter of capacity 0).
    pub keys_tracked: u64,
    /// Entries dropped because they were equivalent to fresh.
    pub evictions: u64,
    /// New keys that found no free or evictable place and were denied or
    /// admitted untracked (`RATECELL_OVERFLOW_DENY`, `_ALLOW`).
    pub overflows: u64,
    /// Keys the table was sized for (0 for a limiter of capacity 0).
    pub capacity: u64,
    /// Bytes of state allocated at construction.
    pub bytes_allocated: u64,
    /// Live states evicted for new keys (`RATECELL_OVERFLOW_EVICT`). Last,
    /// so the fields before it keep their offsets.
    pub evicted_live: u64,
}

impl From<Stats> for ratecell_stats {
    fn from(s: Stats) -> ratecell_stats {
        ratecell_stats {
            checks: s.checks,
            allowed: s.allowed,
            denied: s.denied,
            keys_tracked: s.keys_tracked,
            evictions: s.evictions,
            overflows: s.overflows,
            capacity: s.capacity,
            bytes_allocated: s.bytes_allocated,
            evicted_live: s.evicted_live,
        }
    }
}

//! ratecell: lock-free, in-process rate limiting.
//!
//! Seven algorithms from the rate-limiting literature (GCRA, leaky bucket,
//! token bucket, fixed window, sliding window counter, bucketed sliding
//! window, sliding log), each decided exactly as [the specification](crate::spec) defines, on
//! atomic cells updated by compare-and-swap: a check is one clock read, a
//! little integer arithmetic and one CAS.
//!
//! - [`Limiter`]: one shared state (a global limit).
//! - [`KeyedLimiter`]: one state per key (`u64` or bytes) in a fixed-capacity,
//!   sharded table of atomic slots, with lossless eviction and batch checks.
//! - [`AnyLimiter`]: either of them, as the configuration's capacity says.
//! - [`Config`]: what to enforce; refused with a [`ConfigError`] naming the
//!   field when out of range.
//! - [`Decision`]: admitted or not, remaining, and when to retry.
//! - [`Builder`]: every other way to make one (`Limiter::builder()`,
//!   `KeyedLimiter::builder()`, `AnyLimiter::builder()`): several limits,
//!   tiers, a clock, names, a shared region.
//! - [`Request`]: what a check asks besides its key ([`Key`]): its cost,
//!   its time (UNIX nanoseconds, else the limiter's clock) and its tier;
//!   a `u64` is a request of that cost, now. [`Batch`]: many at once.
//! - Several limits as one ("10 per second and 1000 per day"):
//!   [`Builder::limit`] given more than once; a request is admitted only
//!   if every limit admits it, and [`MultiDecision`] says which limit
//!   denied and what each decided.
//! - A quota per tier (free, paid, internal) in one table:
//!   [`Builder::tier`], each request naming its key's tier
//!   ([`KeyedLimiter::tier`], [`Request::tier`]).
//! - [`Clock`]: the TSC clock (default), a coarse cached clock, or a manual
//!   clock ([`Builder::clock`]); a request may give its own time instead
//!   ([`Request::at`]).
//! - Where a limiter's states come from is one option of its builder
//!   ([`Builder::states`], [`States`]): fresh, a [`snapshot`] (every
//!   limiter saves its states while checks go on), a region shared by the
//!   processes of a machine; [`Builder::persisted`] restores from a file at
//!   start and saves there periodically ([`Persisted`]).
//!
//! ```
//! use ratecell::{Algorithm, Clock, Config, Limiter};
//!
//! // 5 requests per second with a sliding window, on a clock we move by hand.
//! let (clock, hand) = Clock::manual(1_700_000_000_000_000_000);
//! let config = Config::new(Algorithm::SlidingWindow, 5, 1_000_000_000);
//! let limiter = Limiter::builder().limit(config).clock(clock).build().unwrap();
//!
//! let admitted = (0..8).filter(|_| limiter.check(1).allowed).count();
//! assert_eq!(admitted, 5);
//!
//! let denied = limiter.check(1);
//! assert!(!denied.allowed && denied.remaining == 0);
//! hand.advance(denied.retry_after_ns);
//! assert!(limiter.check(1).allowed, "admitted exactly at retry_after");
//! ```

#![warn(missing_docs, unsafe_op_in_unsafe_fn)]
// What `cargo clippy -- -W clippy::pedantic` finds and the crate keeps,
// each with its reason (the rest of that run is fixed):
#![allow(
    clippy::cast_possible_truncation,
    reason = "states are packed into bit fields whose widths validation bounds; a narrowing cast there is the packing"
)]
#![allow(
    clippy::many_single_char_names,
    reason = "the algorithms use SPEC's names: L, P, B, T, N and t"
)]
#![allow(
    clippy::must_use_candidate,
    reason = "#[must_use] marks results whose loss is a bug (setters, consuming calls), not every pure getter"
)]
#![allow(
    clippy::missing_errors_doc,
    reason = "each function's prose says when it fails, and the error types list every cause"
)]

mod algorithm;
mod any;
mod builder;
mod cell;
mod check;
mod clock;
mod config;
/// The specification every limiter follows: what a request decides, for
/// each algorithm, and the C ABI's contract. The API docs cite it as
/// "SPEC §N".
#[doc = include_str!("../docs/SPEC.md")]
pub mod spec {}

mod keyed;
/// Leases (SPEC §8): a limit kept in Redis, spent locally from grants; the protocol without I/O.
pub mod lease;
mod limiter;
mod memory;
mod policy;
mod shared;
/// Snapshots: save a limiter's states and restore them after a restart
/// (docs/SNAPSHOT.md).
pub mod snapshot;
pub mod state;
mod stats;
mod sync;
mod table;

pub use any::AnyLimiter;
pub use builder::{Builder, States};
pub use check::acquire::AcquireError;
pub use check::decision::Decision;
pub use check::request::{Batch, Key, Request, Tier};
pub use clock::{COARSE_INTERVAL, Clock, ManualClock};
pub use config::duration::{DurationError, parse_duration};
pub use config::{
    Algorithm, Config, ConfigError, Error, Field, MAX_CAPACITY, MAX_GCRA_TOLERANCE_NS, MAX_LIMIT,
    MAX_PERIOD_NS, MAX_SUB_WINDOWS, MIN_PERIOD_NS, Overflow, ReconfigureError, SharedError,
    SharedErrorKind,
};
pub use keyed::KeyedLimiter;
pub use limiter::Limiter;
pub use policy::multi::{MAX_LIMITS, MultiDecision};
pub use policy::tiers::{MAX_TIERS, TierError};
pub use shared::SharedOptions;
pub use snapshot::{Persisted, SnapshotError};
pub use stats::Stats;

/// Entry points for the loom models in `tests/loom_latch.rs` (not API).
#[cfg(ratecell_loom)]
#[doc(hidden)]
pub mod loom_hooks {
    /// What `crate::sync::AtomicU64` is under loom: loom's.
    pub use crate::sync::AtomicU64;

    /// The index of the statistics stripe of threads beyond the stripes.
    pub const SHARED_STRIPE: usize = crate::stats::SHARED_STRIPE;

    /// The statistics stripe this thread bumps, taken on first use
    /// (`sync::stripes`).
    pub fn stripe() -> usize {
        crate::stats::stripe()
    }

    /// Which stripes threads hold now, one bit each (models of the
    /// stripes only).
    pub fn stripes_held() -> u32 {
        crate::sync::stripes::stripes_held()
    }

    /// From now on, this process's models run the statistics stripes on
    /// loom's atomics (every other model keeps the processor's, which
    /// order nothing it checks).
    pub fn model_stripes() {
        crate::sync::model_stripes();
    }

    /// Runs `body(taken_over)` holding the holder-recording latch `word`
    /// as `me`, judging other holders with `alive`.
    pub fn with_latch_recording(
        word: &AtomicU64,
        me: u64,
        alive: impl Fn(u64) -> bool,
        body: impl FnOnce(bool),
    ) {
        let (_guard, taken_over) = crate::cell::latch_recording(word, me, alive);
        body(taken_over);
    }

    /// Takes the latch as `me` and never releases it: a holder that dies.
    pub fn take_and_die(word: &AtomicU64, me: u64) {
        let (guard, _) = crate::cell::latch_recording(word, me, |_| true);
        std::mem::forget(guard);
    }

    pub use crate::sync::{Race, clear, saw, seen};

    /// The global index of the bucket `key` hashes to in `limiter`'s table,
    /// and how many buckets the table has (loom's hash key is fixed, so
    /// a model can pick keys that share a bucket, and check that they do).
    pub fn home_bucket(limiter: &crate::KeyedLimiter, key: u64) -> (usize, usize) {
        let (tables, hasher) = limiter.parts();
        let geometry = tables.geometry();
        let buckets = geometry.buckets(geometry.shards as usize);
        (geometry.home(hasher.hash_u64(key)).bucket, buckets)
    }
}

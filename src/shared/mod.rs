//! Keyed tables in shared memory: one limit across the processes of one
//! machine (`States::Shared`).
//!
//! This module owns the region: a file mapped `MAP_SHARED` (under
//! `/dev/shm` by default), its header, and how it is created and attached.
//! The table inside is the ordinary word table (`table::word`), given the
//! region's memory instead of the heap (`table::storage`); this module
//! never touches a slot.
//!
//! # Layout (version [`VERSION`])
//! Offsets from the start of the file, never pointers:
//!
//! | offset | what |
//! |---|---|
//! | 0 | [`Header`]: magic, version, sizes, boot id, pid namespace, the configuration, the SipHash key, the clock's calibration, the table's offsets, a checksum |
//! | 4096 | the shards (`CachePadded<Shard>`, 128 bytes each: the insert latch and counters) |
//! | next 4096 boundary | the slots (16 bytes each) |
//!
//! # Creation
//! A region is never visible half made: the creator builds it complete
//! under a temporary name in the same directory (`<path>.<pid>.<n>.tmp`),
//! then `link`s it to `path`, which fails if `path` exists. Of several
//! processes creating at once exactly one link succeeds; every other
//! process removes its temporary file and attaches to the winner's, whose
//! header it checks against its own configuration. Nobody waits.
//!
//! # Processes that die
//! Word algorithms change a slot with one CAS, so a process killed at any
//! instant leaves every state either updated or not. The one latch (a
//! shard's insert latch) records its holder's pid and start time; a waiter
//! that finds the holder dead takes the latch over (`cell::latch_recording`,
//! `table::holder`). The multi-word algorithms (bucketed window, sliding log) keep
//! a state under a latch across several writes, whose recovery is not built
//! yet: they are refused in shared mode ([`SharedErrorKind::Unsupported`]).

#[cfg(target_os = "linux")]
use crate::config::Overflow;
use crate::config::{Algorithm, Config, Error, SharedError, SharedErrorKind};
use std::path::{Path, PathBuf};

/// The layout version this build reads and writes.
#[cfg(target_os = "linux")]
pub const VERSION: u32 = 1;

/// How a region is created or attached (`States::Shared`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedOptions {
    /// The permission bits of a region this call creates (exactly these:
    /// the umask is not applied). Default 0o600: only this user.
    pub mode: u32,
    /// Read time from the process's coarse clock instead of the region's
    /// calibrated TSC clock (cheaper reads, up to about a millisecond late,
    /// and calibrated per process: see the lifecycle docs).
    pub coarse_clock: bool,
}

impl Default for SharedOptions {
    fn default() -> SharedOptions {
        SharedOptions {
            mode: 0o600,
            coarse_clock: false,
        }
    }
}

/// Where a name without a slash is placed.
pub const DEFAULT_DIR: &str = "/dev/shm";

/// `path` as given, or under [`DEFAULT_DIR`] when it is a bare name.
pub(crate) fn resolve(path: &Path) -> PathBuf {
    if path.components().count() == 1 && !path.has_root() && !path.starts_with(".") {
        Path::new(DEFAULT_DIR).join(path)
    } else {
        path.to_path_buf()
    }
}

/// Refuses what shared mode cannot do safely, before any file is touched.
pub(crate) fn check_supported(path: &Path, config: &Config) -> Result<(), Error> {
    let refuse = |message: String| {
        Err(Error::Shared(SharedError {
            kind: SharedErrorKind::Unsupported,
            path: path.to_path_buf(),
            message,
        }))
    };
    if matches!(
        config.algorithm,
        Algorithm::BucketedWindow | Algorithm::SlidingLog
    ) {
        return refuse(format!(
            "the {} algorithm keeps a state in several words under a latch, whose recovery after a process dies holding it is not built yet; use gcra, leaky_bucket, token_bucket, fixed_window or sliding_window in shared mode",
            config.algorithm
        ));
    }
    if config.capacity == 0 {
        return refuse(
            "capacity = 0: a shared limiter is keyed (capacity >= 1); for one limit across processes, check one key".into(),
        );
    }
    if !cfg!(target_os = "linux") {
        return refuse("shared regions are built for Linux only".into());
    }
    if crate::sync::UNDER_LOOM {
        // loom's atomics are not plain memory another process can map.
        return refuse("shared regions are not modelled under loom".into());
    }
    if !crate::sync::SlotU128::is_lock_free() {
        return refuse("this processor has no lock-free 128-bit compare-and-swap (cmpxchg16b), and a lock-based one cannot be shared between processes".into());
    }
    Ok(())
}

#[cfg(target_os = "linux")]
mod region;
#[cfg(target_os = "linux")]
pub(crate) use region::attach;

/// The stand-in where regions are not built: `check_supported` refuses
/// first, so this is never reached.
#[cfg(not(target_os = "linux"))]
pub(crate) fn attach(
    _path: &Path,
    _config: &Config,
    _options: &SharedOptions,
    _hash_keys: Option<(u64, u64)>,
    _shards: usize,
    _slots: usize,
) -> Result<Attached, Error> {
    unreachable!("check_supported refuses shared mode on this platform")
}

/// What a region gives its limiter besides the table.
#[cfg(not(target_os = "linux"))]
pub(crate) struct Attached {
    pub shards: crate::table::storage::Storage<crossbeam_utils::CachePadded<crate::table::Shard>>,
    pub slots: crate::table::storage::Storage<crate::sync::SlotU128>,
    pub hash_keys: (u64, u64),
    pub calibration: crate::clock::shared::Calibration,
}

/// The configuration as stored in a region: the normalised parameters
/// (a burst of 0 is the limit; sub-windows count only for the bucketed
/// window), so two callers who mean the same limit agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
#[cfg(target_os = "linux")]
pub(crate) struct StoredConfig {
    pub algorithm: u32,
    pub overflow: u32,
    pub limit: u64,
    pub period_ns: u64,
    pub burst: u64,
    pub sub_windows: u64,
    pub capacity: u64,
}

#[cfg(target_os = "linux")]
impl StoredConfig {
    pub(crate) fn of(config: &Config) -> Result<StoredConfig, Error> {
        let p = config.params()?;
        Ok(StoredConfig {
            algorithm: p.algorithm as u32,
            overflow: match config.overflow {
                Overflow::Deny => 0,
                Overflow::Allow => 1,
                Overflow::Evict => 2,
            },
            limit: p.limit,
            period_ns: p.period,
            burst: p.burst,
            sub_windows: u64::from(p.sub_windows),
            capacity: config.capacity,
        })
    }

    /// The first field that differs, with both values.
    pub(crate) fn first_difference(&self, other: &StoredConfig) -> Option<String> {
        let fields = [
            (
                "algorithm",
                u64::from(self.algorithm),
                u64::from(other.algorithm),
            ),
            ("limit", self.limit, other.limit),
            ("period_ns", self.period_ns, other.period_ns),
            ("burst", self.burst, other.burst),
            ("sub_windows", self.sub_windows, other.sub_windows),
            ("capacity", self.capacity, other.capacity),
            (
                "overflow",
                u64::from(self.overflow),
                u64::from(other.overflow),
            ),
        ];
        fields
            .iter()
            .find(|(_, a, b)| a != b)
            .map(|(name, region, ours)| {
                let show = |v: u64| {
                    if *name == "algorithm" {
                        Algorithm::from_u32(v as u32)
                            .map_or(v.to_string(), |a| a.name().to_string())
                    } else {
                        v.to_string()
                    }
                };
                format!(
                    "the region was made with {name} = {}, this limiter asks for {name} = {}",
                    show(*region),
                    show(*ours)
                )
            })
    }
}

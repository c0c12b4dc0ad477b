//! Snapshots: a limiter's configuration and live states written to a byte
//! stream or a file while other threads keep checking, and a limiter
//! rebuilt from them, in this process or another (docs/SNAPSHOT.md has the
//! format and the guarantees).
//!
//! This module owns the format (`format`), its checksum (`crc`), saving
//! and restoring each kind of limiter in it (`direct`, `keyed`), the
//! atomic file write and the periodic saver (`file`). It reads states only
//! through the hooks of the cells and tables (one atomic load per word
//! state, the latch for a block), and writes them only into a limiter it
//! has just built and no other thread can see yet.

mod crc;
mod direct;
mod file;
mod format;
mod keyed;

pub use file::{Persisted, Save};
pub use format::VERSION;
pub(crate) use format::saved_tiers;

use crate::config::{Error, Field};
use std::fmt;
use std::io;

/// Why a snapshot could not be written or restored, or a limiter made
/// ([`crate::Builder::build`], which may read one).
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Reading or writing failed (the file is missing, the disk is full...).
    Io(io::Error),
    /// The input does not start with a snapshot's magic bytes.
    NotASnapshot,
    /// A snapshot of a format version this build does not read.
    UnsupportedVersion {
        /// The version in the input.
        found: u32,
        /// The newest version this build reads (it reads every version
        /// from 1 to this one).
        supported: u32,
    },
    /// The input ends before the snapshot does.
    Truncated,
    /// The snapshot is damaged: a checksum does not match, or a field or a
    /// state is not one a limiter writes. The reason names which.
    Damaged(String),
    /// The snapshot was taken of a limiter configured differently from the
    /// one asked for (see docs/SNAPSHOT.md for what may differ).
    ConfigMismatch {
        /// The limit (its index in the list, 0 for a limiter of one limit;
        /// for a tiered limiter, tier `t`'s limit `i` is `t × limits + i`)
        /// whose field differs; 0 when the number of tiers differs
        /// (`field` is then [`Field::Tiers`], a limiter built without
        /// tiers counting 0); when the number of limits differs (`field`
        /// is then [`Field::Limits`]), its first limit's.
        limit: usize,
        /// The first field that differs.
        field: Field,
        /// Its value in the snapshot (burst and sub-windows resolved:
        /// a burst of 0 is the limit).
        saved: u64,
        /// Its value in the configuration asked for.
        wanted: u64,
    },
    /// The limiter could not be built: its options are refused (the error
    /// names the field; an invalid saved configuration too), or out of
    /// memory. [`crate::Builder::build`] returns every error of a limiter
    /// this way, a fresh one's too.
    Limiter(Error),
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io(e) => write!(f, "snapshot I/O failed: {e}"),
            SnapshotError::NotASnapshot => f.write_str("not a ratecell snapshot (bad magic bytes)"),
            SnapshotError::UnsupportedVersion { found, supported } => write!(
                f,
                "snapshot format version {found} is not supported (this build reads versions 1 to {supported})"
            ),
            SnapshotError::Truncated => f.write_str("the snapshot is truncated"),
            SnapshotError::Damaged(reason) => write!(f, "the snapshot is damaged: {reason}"),
            SnapshotError::ConfigMismatch {
                field: Field::Limits,
                saved,
                wanted,
                ..
            } => write!(
                f,
                "the snapshot holds {saved} limits, the configuration gives {wanted}"
            ),
            SnapshotError::ConfigMismatch {
                field: Field::Tiers,
                saved,
                wanted,
                ..
            } => write!(
                f,
                "the snapshot holds {saved} tiers, the configuration gives {wanted} (0: a limiter built without tiers)"
            ),
            SnapshotError::ConfigMismatch {
                limit,
                field,
                saved,
                wanted,
            } => {
                if *limit > 0 {
                    write!(f, "limit {limit}: ")?;
                }
                write!(
                    f,
                    "the snapshot's {} is {saved}, the configuration asks for {wanted}",
                    field.name()
                )
            }
            SnapshotError::Limiter(e) => write!(f, "cannot build the limiter: {e}"),
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Io(e) => Some(e),
            SnapshotError::Limiter(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for SnapshotError {
    fn from(e: io::Error) -> SnapshotError {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            SnapshotError::Truncated
        } else {
            SnapshotError::Io(e)
        }
    }
}

impl From<Error> for SnapshotError {
    fn from(e: Error) -> SnapshotError {
        SnapshotError::Limiter(e)
    }
}

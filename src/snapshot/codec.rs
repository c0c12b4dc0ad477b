//! The snapshot format, versions 1 to 3 (docs/SNAPSHOT.md is the normative
//! description): a fixed header (version 2: followed by a table of the
//! further limits of a limiter of several; version 3: then every further
//! tier's limits, for a tiered limiter) with its own checksum, the
//! states, and a footer with the record count and a checksum of everything
//! before it.
//!
//! Reading allocates nothing sized by the input: the limiter is built from
//! the configuration the caller asks for (compared with the header before
//! anything is allocated), records must name places in increasing order
//! below the table's size, and a state's words are written straight into
//! the new limiter, never buffered.

use super::SnapshotError;
use super::crc::Crc32c;
use crate::algorithm::{BlockAlgorithm, StateError, WordAlgorithm, Words, packed_validate};
use crate::cell::LatchedWords;
use crate::clock::Clock;
use crate::config::{Algorithm, Config, Field, Overflow};
use crate::keyed::{KeyedLimiter, Tables};
use crate::limiter::{Engine, Limiter};
use crate::multi::MAX_LIMITS;
use crate::sync::AtomicU64;
use crate::table::KeyHasher;
use crate::table::block::BlockTable;
use crate::table::word::WordTable;
use crate::tiers::MAX_TIERS;
use std::io::{BufReader, BufWriter, Read, Write};
use std::sync::atomic::Ordering::Relaxed;

/// The first eight bytes: a non-ASCII byte first (a text file is not a
/// snapshot), the name, and a line feed (a transfer that rewrites line
/// ends damages the magic, not the states).
pub(crate) const MAGIC: [u8; 8] = *b"\x89RCSNAP\n";

/// The newest format version this build writes and reads: 3, which adds
/// the tiers of a tiered limiter (`KeyedLimiter::new_tiered`). Each
/// snapshot is written in the oldest version that holds it: a limiter of
/// one limit in version 1, of several in version 2 (version 1 with a table
/// of limits), a tiered one in version 3 (version 2 with every tier's
/// limits); a build that reads only older versions refuses a tiered
/// snapshot as [`SnapshotError::UnsupportedVersion`], and reads the others
/// as ever.
pub const VERSION: u32 = 3;

/// The version that adds tiers.
const TIERED: u32 = 3;

const DIRECT: u32 = 1;
const KEYED: u32 = 2;

/// The place number that ends a keyed snapshot's records.
const END: u64 = u64::MAX;

/// Bytes of the header before its checksum.
const HEADER_LEN: usize = 112;

/// Buffered writes with a running checksum.
struct Out<W: Write> {
    w: BufWriter<W>,
    crc: Crc32c,
}

impl<W: Write> Out<W> {
    fn new(w: W) -> Self {
        Out {
            w: BufWriter::with_capacity(1 << 20, w),
            crc: Crc32c::new(),
        }
    }

    fn bytes(&mut self, b: &[u8]) -> Result<(), SnapshotError> {
        self.crc.update(b);
        Ok(self.w.write_all(b)?)
    }

    fn u64(&mut self, v: u64) -> Result<(), SnapshotError> {
        self.bytes(&v.to_le_bytes())
    }

    fn word(&mut self, packed: u128) -> Result<(), SnapshotError> {
        self.u64(packed as u64)?;
        self.u64((packed >> 64) as u64)
    }

    /// The footer: the record count, then the checksum of every byte
    /// before the checksum.
    fn finish(mut self, records: u64) -> Result<(), SnapshotError> {
        self.u64(records)?;
        let crc = self.crc.value();
        self.w.write_all(&crc.to_le_bytes())?;
        self.w.flush()?;
        Ok(())
    }
}

/// Buffered reads with a running checksum.
struct In<R: Read> {
    r: BufReader<R>,
    crc: Crc32c,
}

impl<R: Read> In<R> {
    fn new(r: R) -> Self {
        In {
            r: BufReader::with_capacity(1 << 16, r),
            crc: Crc32c::new(),
        }
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        self.crc.update(&b);
        Ok(b)
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    /// Fills `buf` (a fixed buffer the caller bounded) from the input.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), SnapshotError> {
        self.r.read_exact(buf)?;
        self.crc.update(buf);
        Ok(())
    }

    fn word(&mut self) -> Result<u128, SnapshotError> {
        Ok(u128::from(self.u64()?) | (u128::from(self.u64()?) << 64))
    }

    /// Checks the footer: the record count, the checksum, and nothing
    /// after it.
    fn finish(mut self, records: u64) -> Result<(), SnapshotError> {
        let saved = self.u64()?;
        let computed = self.crc.value();
        let mut crc = [0u8; 4];
        self.r.read_exact(&mut crc)?;
        if u32::from_le_bytes(crc) != computed {
            return Err(damaged("the checksum does not match the contents"));
        }
        if saved != records {
            return Err(damaged(format!(
                "the footer counts {saved} records, the snapshot holds {records}"
            )));
        }
        let mut extra = [0u8; 1];
        if self.r.read(&mut extra)? != 0 {
            return Err(damaged("bytes follow the end of the snapshot"));
        }
        Ok(())
    }
}

fn damaged(reason: impl Into<String>) -> SnapshotError {
    SnapshotError::Damaged(reason.into())
}

/// One limit's fields in a header: the first limit's sit in the fixed
/// header, the others' (format version 2) in the limits table after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LimitFields {
    algorithm: u32,
    sub_windows: u32,
    limit: u64,
    period_ns: u64,
    burst: u64,
}

/// Bytes of one entry of a version 2 header's limits table.
const LIMIT_LEN: usize = 32;

impl LimitFields {
    fn of(config: &Config) -> LimitFields {
        let p = config
            .params()
            .expect("a limiter's configuration was validated when it was built");
        LimitFields {
            algorithm: p.algorithm as u32,
            sub_windows: p.sub_windows,
            limit: p.limit,
            period_ns: p.period,
            burst: p.burst,
        }
    }

    fn to_bytes(self) -> [u8; LIMIT_LEN] {
        let mut b = [0u8; LIMIT_LEN];
        b[0..4].copy_from_slice(&self.algorithm.to_le_bytes());
        b[4..8].copy_from_slice(&self.sub_windows.to_le_bytes());
        b[8..16].copy_from_slice(&self.limit.to_le_bytes());
        b[16..24].copy_from_slice(&self.period_ns.to_le_bytes());
        b[24..32].copy_from_slice(&self.burst.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> LimitFields {
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        LimitFields {
            algorithm: u32_at(0),
            sub_windows: u32_at(4),
            limit: u64_at(8),
            period_ns: u64_at(16),
            burst: u64_at(24),
        }
    }
}

/// The header (docs/SNAPSHOT.md, "Header"): fixed for one limit (format
/// version 1), followed by a table of the other limits for several
/// (version 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    kind: u32,
    overflow: u32,
    capacity: u64,
    saved_at_ns: u64,
    state_words: u64,
    hash_k0: u64,
    hash_k1: u64,
    places: u64,
    fingerprint_bits: u64,
    /// Only `limits[t][..count]` are limits, of tiers `t < tiers.max(1)`.
    limits: [[LimitFields; MAX_LIMITS]; MAX_TIERS],
    count: usize,
    /// 0 for a limiter built without tiers (versions 1 and 2), else how
    /// many tiers (version 3).
    tiers: usize,
}

impl Header {
    /// The header of a limiter built from `configs` (validated then; 1 to
    /// `MAX_LIMITS`, sharing capacity and overflow).
    fn of(configs: &[Config], saved_at_ns: u64, state_words: u64) -> Header {
        let first = &configs[0];
        let mut limits = [[LimitFields::default(); MAX_LIMITS]; MAX_TIERS];
        for (l, c) in limits[0].iter_mut().zip(configs) {
            *l = LimitFields::of(c);
        }
        Header {
            kind: if first.capacity == 0 { DIRECT } else { KEYED },
            overflow: first.overflow as u32,
            capacity: first.capacity,
            saved_at_ns,
            state_words,
            hash_k0: 0,
            hash_k1: 0,
            places: 1,
            fingerprint_bits: 0,
            limits,
            count: configs.len(),
            tiers: 0,
        }
    }

    /// This header with the tiers of a tiered limiter (each a list of as
    /// many limits as tier 0, sharing capacity and overflow).
    fn with_tiers<'a>(mut self, tiers: impl ExactSizeIterator<Item = &'a [Config]>) -> Header {
        self.tiers = tiers.len();
        for (row, tier) in self.limits.iter_mut().zip(tiers) {
            for (l, c) in row.iter_mut().zip(tier) {
                *l = LimitFields::of(c);
            }
        }
        self
    }

    /// The version this header is written in, the oldest that holds it: 1
    /// for one limit (so builds that read only version 1 still read it), 2
    /// for several, 3 for tiers.
    fn version(&self) -> u32 {
        match (self.tiers, self.count) {
            (0, 1) => 1,
            (0, _) => 2,
            _ => TIERED,
        }
    }

    fn write<W: Write>(&self, out: &mut Out<W>) -> Result<(), SnapshotError> {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(&MAGIC);
        let first = self.limits[0][0];
        // Bytes 28..32: reserved (0) in version 1, the number of limits in
        // versions 2 and 3.
        let count = if self.version() == 1 {
            0
        } else {
            self.count as u32
        };
        let fields32 = [
            self.version(),
            self.kind,
            first.algorithm,
            first.sub_windows,
            self.overflow,
            count,
        ];
        for (i, v) in fields32.iter().enumerate() {
            b[8 + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
        let fields64 = [
            first.limit,
            first.period_ns,
            first.burst,
            self.capacity,
            self.saved_at_ns,
            self.state_words,
            self.hash_k0,
            self.hash_k1,
            self.places,
            self.fingerprint_bits,
        ];
        for (i, v) in fields64.iter().enumerate() {
            b[32 + 8 * i..][..8].copy_from_slice(&v.to_le_bytes());
        }
        let mut crc = Crc32c::new();
        crc.update(&b);
        out.bytes(&b)?;
        let mut entry = |bytes: &[u8]| {
            crc.update(bytes);
            out.bytes(bytes)
        };
        for limit in &self.limits[0][1..self.count] {
            entry(&limit.to_bytes())?;
        }
        if self.tiers > 0 {
            entry(&(self.tiers as u32).to_le_bytes())?;
            for tier in &self.limits[1..self.tiers] {
                for limit in &tier[..self.count] {
                    entry(&limit.to_bytes())?;
                }
            }
        }
        out.bytes(&crc.value().to_le_bytes())
    }

    fn read<R: Read>(input: &mut In<R>) -> Result<Header, SnapshotError> {
        // The magic and the version first: a header of another version may
        // be laid out differently, its checksum elsewhere.
        let magic: [u8; 8] = input.bytes().map_err(|e| match e {
            SnapshotError::Truncated => SnapshotError::NotASnapshot,
            e => e,
        })?;
        if magic != MAGIC {
            return Err(SnapshotError::NotASnapshot);
        }
        let version = u32::from_le_bytes(input.bytes()?);
        if !(1..=VERSION).contains(&version) {
            return Err(SnapshotError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let rest: [u8; HEADER_LEN - 12] = input.bytes()?;
        let mut crc = Crc32c::new();
        crc.update(&magic);
        crc.update(&version.to_le_bytes());
        crc.update(&rest);
        let u32_at = |at: usize| u32::from_le_bytes(rest[at - 12..][..4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(rest[at - 12..][..8].try_into().unwrap());
        // The number of limits bounds the table read next (at most
        // `MAX_LIMITS - 1` entries, into a fixed buffer), before the
        // checksum can vouch for it.
        let fewest = if version == TIERED { 1 } else { 2 };
        let count = match (version, u32_at(28)) {
            (1, 0) => 1,
            (1, _) => return Err(damaged("the header's reserved bytes are not zero")),
            (_, n) if (fewest..=MAX_LIMITS as u32).contains(&n) => n as usize,
            (_, n) => {
                return Err(damaged(format!(
                    "the header counts {n} limits (a version {version} snapshot holds {fewest} to {MAX_LIMITS})"
                )));
            }
        };
        let mut table = [0u8; LIMIT_LEN * (MAX_LIMITS - 1)];
        let table = &mut table[..LIMIT_LEN * (count - 1)];
        input.fill(table)?;
        crc.update(table);
        // Version 3: the number of tiers, which bounds the tiers' table
        // read next (into a fixed buffer) before the checksum can vouch
        // for it, then every tier's limits after tier 0's.
        let mut tiers = 0;
        let mut tier_buf = [0u8; LIMIT_LEN * MAX_LIMITS * (MAX_TIERS - 1)];
        let mut tier_table: &mut [u8] = &mut [];
        if version == TIERED {
            let n: [u8; 4] = input.bytes()?;
            crc.update(&n);
            tiers = u32::from_le_bytes(n) as usize;
            if !(1..=MAX_TIERS).contains(&tiers) {
                return Err(damaged(format!(
                    "the header counts {tiers} tiers (a version 3 snapshot holds 1 to {MAX_TIERS})"
                )));
            }
            tier_table = &mut tier_buf[..LIMIT_LEN * count * (tiers - 1)];
            input.fill(tier_table)?;
            crc.update(tier_table);
        }
        if u32::from_le_bytes(input.bytes()?) != crc.value() {
            return Err(damaged("the header's checksum does not match the header"));
        }
        let mut limits = [[LimitFields::default(); MAX_LIMITS]; MAX_TIERS];
        limits[0][0] = LimitFields {
            algorithm: u32_at(16),
            sub_windows: u32_at(20),
            limit: u64_at(32),
            period_ns: u64_at(40),
            burst: u64_at(48),
        };
        for (l, entry) in limits[0][1..count]
            .iter_mut()
            .zip(table.chunks_exact(LIMIT_LEN))
        {
            *l = LimitFields::from_bytes(entry);
        }
        for (row, entries) in limits[1..]
            .iter_mut()
            .zip(tier_table.chunks_exact(LIMIT_LEN * count))
        {
            for (l, entry) in row.iter_mut().zip(entries.chunks_exact(LIMIT_LEN)) {
                *l = LimitFields::from_bytes(entry);
            }
        }
        Ok(Header {
            kind: u32_at(12),
            overflow: u32_at(24),
            capacity: u64_at(56),
            saved_at_ns: u64_at(64),
            state_words: u64_at(72),
            hash_k0: u64_at(80),
            hash_k1: u64_at(88),
            places: u64_at(96),
            fingerprint_bits: u64_at(104),
            limits,
            count,
            tiers,
        })
    }

    /// The configurations saved, in order (burst and sub-windows
    /// resolved); tier 0's for a tiered limiter.
    fn configs(&self) -> Result<Vec<Config>, SnapshotError> {
        self.tier_configs(0)
    }

    /// Every tier's configurations, in order (one tier for a limiter
    /// built without tiers).
    fn all_tiers(&self) -> Result<Vec<Vec<Config>>, SnapshotError> {
        (0..self.tiers.max(1))
            .map(|t| self.tier_configs(t))
            .collect()
    }

    /// Tier `tier`'s configurations (burst and sub-windows resolved).
    fn tier_configs(&self, tier: usize) -> Result<Vec<Config>, SnapshotError> {
        let overflow = match self.overflow {
            0 => Overflow::Deny,
            1 => Overflow::Allow,
            2 => Overflow::Evict,
            v => return Err(damaged(format!("overflow {v} is not a policy"))),
        };
        self.limits[tier][..self.count]
            .iter()
            .map(|l| {
                let algorithm = Algorithm::from_u32(l.algorithm)
                    .ok_or_else(|| damaged(format!("algorithm {} is not one", l.algorithm)))?;
                Ok(Config {
                    algorithm,
                    limit: l.limit,
                    period_ns: l.period_ns,
                    burst: l.burst,
                    sub_windows: l.sub_windows,
                    capacity: self.capacity,
                    overflow,
                })
            })
            .collect()
    }

    /// Refuses a snapshot of other limits than `wanted`, naming the first
    /// field that differs and its limit: the number of limits, then each
    /// limit in order. Burst and sub-windows are compared resolved (a burst
    /// of 0 is the limit; only the bucketed window has sub-windows); the
    /// overflow policy is the caller's to choose. An invalid `wanted` is
    /// refused as its constructor would refuse it.
    fn check(&self, wanted: &[Config]) -> Result<(), SnapshotError> {
        if wanted.len() != 1 {
            // The constructor's own checks (count, each limit, shared
            // capacity and overflow); its layout is not needed here.
            crate::multi::all_of(wanted, 128)?;
        }
        self.check_tier_count(0)?;
        self.check_limits(0, wanted)?;
        self.check_kind(wanted)
    }

    /// [`Header::check`] for a tiered limiter: the number of tiers
    /// ([`Field::Tiers`]), then each tier's limits as `check` compares
    /// them, `limit` in a mismatch being the index in the tiers' flat
    /// list (tier `t`'s limit `i` is `t × limits + i`).
    fn check_tiers(&self, wanted: &[&[Config]]) -> Result<(), SnapshotError> {
        // The constructor's own checks, as in `check`.
        crate::tiers::tiers(wanted)?;
        self.check_tier_count(wanted.len())?;
        for (t, tier) in wanted.iter().enumerate() {
            self.check_limits(t, tier)?;
        }
        self.check_kind(wanted[0])
    }

    /// Refuses a snapshot of another number of tiers than `wanted` (0: a
    /// limiter built without tiers, whose states are laid out otherwise
    /// than a tiered limiter's of one tier).
    fn check_tier_count(&self, wanted: usize) -> Result<(), SnapshotError> {
        if self.tiers != wanted {
            return Err(SnapshotError::ConfigMismatch {
                limit: 0,
                field: Field::Tiers,
                saved: self.tiers as u64,
                wanted: wanted as u64,
            });
        }
        Ok(())
    }

    /// Refuses a snapshot whose tier `tier` holds other limits than
    /// `wanted` (validated), naming the first field that differs.
    fn check_limits(&self, tier: usize, wanted: &[Config]) -> Result<(), SnapshotError> {
        let mut resolved = [LimitFields::default(); MAX_LIMITS];
        for (r, c) in resolved.iter_mut().zip(wanted) {
            let p = c.params().map_err(crate::config::Error::from)?;
            *r = LimitFields {
                algorithm: p.algorithm as u32,
                sub_windows: p.sub_windows,
                limit: p.limit,
                period_ns: p.period,
                burst: p.burst,
            };
        }
        if wanted.len() != self.count {
            return Err(SnapshotError::ConfigMismatch {
                limit: tier * self.count,
                field: Field::Limits,
                saved: self.count as u64,
                wanted: wanted.len() as u64,
            });
        }
        for (i, (saved, want)) in self.limits[tier][..self.count]
            .iter()
            .zip(&resolved)
            .enumerate()
        {
            let pairs = [
                (
                    Field::Algorithm,
                    u64::from(saved.algorithm),
                    u64::from(want.algorithm),
                ),
                (Field::Capacity, self.capacity, wanted[i].capacity),
                (Field::Limit, saved.limit, want.limit),
                (Field::PeriodNs, saved.period_ns, want.period_ns),
                (Field::Burst, saved.burst, want.burst),
                (
                    Field::SubWindows,
                    u64::from(saved.sub_windows),
                    u64::from(want.sub_windows),
                ),
            ];
            for (field, saved, wanted) in pairs {
                if saved != wanted {
                    return Err(SnapshotError::ConfigMismatch {
                        limit: tier * self.count + i,
                        field,
                        saved,
                        wanted,
                    });
                }
            }
        }
        Ok(())
    }

    /// Refuses a header whose kind does not fit `wanted`'s capacity.
    fn check_kind(&self, wanted: &[Config]) -> Result<(), SnapshotError> {
        let kind = if wanted[0].capacity == 0 {
            DIRECT
        } else {
            KEYED
        };
        if self.kind != kind {
            return Err(damaged(format!(
                "kind {} does not fit its capacity",
                self.kind
            )));
        }
        Ok(())
    }

    /// Refuses a snapshot whose table layout differs from the one this
    /// build makes for the same configuration (the places states are
    /// saved at would mean other keys).
    fn check_layout(
        &self,
        places: u64,
        fingerprint_bits: u64,
        state_words: u64,
    ) -> Result<(), SnapshotError> {
        if (self.places, self.fingerprint_bits, self.state_words)
            != (places, fingerprint_bits, state_words)
        {
            return Err(damaged(format!(
                "its layout ({} places, {}-bit fingerprints, {} words a state) is not this build's for the same configuration ({places}, {fingerprint_bits}, {state_words})",
                self.places, self.fingerprint_bits, self.state_words
            )));
        }
        Ok(())
    }
}

/// The configuration saved in a snapshot, read from its header alone (the
/// header's checksum checked): for a caller that restores whatever was
/// saved, to build the limiter the snapshot fits. The snapshot's
/// configuration then sizes the table, as a configuration passed to
/// `KeyedLimiter::new` would: take it only from a file you would take a
/// configuration from.
///
/// For a snapshot of several limits this is the first limit's
/// configuration, which a restore refuses (the number of limits differs):
/// read them all with [`saved_configs`].
pub fn saved_config(input: impl Read) -> Result<Config, SnapshotError> {
    Ok(saved_configs(input)?.swap_remove(0))
}

/// The configurations of every limit saved in a snapshot, in order (one
/// for a limiter of one limit, at most [`crate::MAX_LIMITS`]), read from
/// its header alone: what [`saved_config`] reads, for limiters of several
/// limits ([`crate::Limiter::new_multi`]).
pub fn saved_configs(input: impl Read) -> Result<Vec<Config>, SnapshotError> {
    Header::read(&mut In::new(input))?.configs()
}

/// Every tier's configurations saved in a snapshot (tier by tier, each
/// tier's limits in order), read from its header alone, and whether the
/// snapshot is of a tiered limiter ([`KeyedLimiter::new_tiered`]); for a
/// limiter built without tiers, one tier: [`saved_configs`]'s list.
pub fn saved_tiers(input: impl Read) -> Result<(Vec<Vec<Config>>, bool), SnapshotError> {
    let header = Header::read(&mut In::new(input))?;
    Ok((header.all_tiers()?, header.tiers > 0))
}

/// Words of a word algorithm's state in a record: the packed 128-bit word.
const WORD_STATE_WORDS: u64 = 2;

/// Refuses a packed state a word algorithm cannot have stored (SPEC §4,
/// "What a loader accepts").
fn check_word<A: WordAlgorithm>(alg: &A, packed: u128) -> Result<(), SnapshotError> {
    packed_validate(alg, packed).map_err(cannot_have_stored)
}

fn cannot_have_stored(e: StateError) -> SnapshotError {
    damaged(format!("a state the algorithm cannot have stored: {e}"))
}

/// Copies the saved words of a block (under its latch) into `buf`.
fn collect<A: BlockAlgorithm>(alg: &A, words: &LatchedWords, buf: &mut Vec<u64>) {
    buf.clear();
    alg.saved_words(words, &mut |i| buf.push(words.get(i)));
}

/// Reads a block's saved words into `words` (as `BlockAlgorithm::saved_words`
/// lists them), storing each as it is read.
fn read_block<R: Read, A: BlockAlgorithm>(
    input: &mut In<R>,
    alg: &A,
    words: &[AtomicU64],
) -> Result<(), SnapshotError> {
    let view = LatchedWords(words);
    let mut result = Ok(());
    alg.saved_words(&view, &mut |i| {
        if result.is_ok() {
            result = input.u64().map(|v| words[i].store(v, Relaxed));
        }
    });
    result
}

impl Limiter {
    /// Writes the configuration and the state to `out`, at the limiter's
    /// current time (see [`Limiter::snapshot_at`]).
    pub fn snapshot(&self, out: impl Write) -> Result<(), SnapshotError> {
        self.snapshot_at(out, self.now_ns())
    }

    /// Writes the configuration (every limit's, for a limiter of several)
    /// and the state to `out`, recording `now_ns` as the time of the
    /// snapshot. Checks on other threads go on: the state saved is one the
    /// limiter had during the call (one atomic load, or a copy under the
    /// latch of a multi-word state).
    pub fn snapshot_at(&self, out: impl Write, now_ns: u64) -> Result<(), SnapshotError> {
        let mut out = Out::new(out);
        let mut buf = Vec::new();
        let header = |state_words: u64| Header::of(self.limits(), now_ns, state_words);
        // A single-word state: one atomic load, from cells of three word types.
        let save_word = |mut out: Out<_>, packed: u128| {
            header(WORD_STATE_WORDS).write(&mut out)?;
            out.word(packed).and_then(|()| out.finish(1))
        };
        let state_words = match self.engine() {
            Engine::Gcra(_, cell) => return save_word(out, cell.load()),
            Engine::TokenBucket(_, cell)
            | Engine::FixedWindow(_, cell)
            | Engine::SlidingWindow(_, cell) => return save_word(out, cell.load()),
            Engine::AllOfWord(_, cell) => return save_word(out, cell.load()),
            Engine::BucketedWindow(alg, cell) => {
                cell.latched(|w| collect(alg, w, &mut buf));
                alg.words()
            }
            Engine::SlidingLog(alg, cell) => {
                cell.latched(|w| collect(alg, w, &mut buf));
                alg.words()
            }
            Engine::AllOfBlock(alg, cell) => {
                cell.latched(|w| collect(alg, w, &mut buf));
                BlockAlgorithm::words(alg)
            }
        };
        header(state_words as u64).write(&mut out)?;
        for &w in &buf {
            out.u64(w)?;
        }
        out.finish(1)
    }

    /// Builds a limiter of `config` on `clock` holding the state saved in
    /// `input`. A snapshot of another configuration is refused with
    /// [`SnapshotError::ConfigMismatch`] before anything is allocated;
    /// damaged input with the error that says how.
    pub fn restore(
        input: impl Read,
        config: Config,
        clock: Clock,
    ) -> Result<Limiter, SnapshotError> {
        Limiter::restore_multi(input, std::slice::from_ref(&config), clock)
    }

    /// [`Limiter::restore`] for a limiter of several limits
    /// ([`Limiter::new_multi`]): `configs` must be the saved limits, in
    /// the same order, else [`SnapshotError::ConfigMismatch`] names the
    /// first that differs (or [`Field::Limits`] when their number does).
    /// Names are not saved: give them again with [`Limiter::with_names`].
    pub fn restore_multi(
        input: impl Read,
        configs: &[Config],
        clock: Clock,
    ) -> Result<Limiter, SnapshotError> {
        let mut input = In::new(input);
        let header = Header::read(&mut input)?;
        header.check(configs)?;
        let limiter = Limiter::with_clock_multi(configs, clock)?;
        match limiter.engine() {
            Engine::Gcra(alg, cell) => {
                header.check_layout(1, 0, WORD_STATE_WORDS)?;
                let packed = input.word()?;
                check_word(alg, packed)?;
                cell.store(packed);
            }
            Engine::TokenBucket(alg, cell) => restore_word_cell(&header, &mut input, alg, cell)?,
            Engine::FixedWindow(alg, cell) => restore_word_cell(&header, &mut input, alg, cell)?,
            Engine::SlidingWindow(alg, cell) => restore_word_cell(&header, &mut input, alg, cell)?,
            Engine::AllOfWord(alg, cell) => restore_word_cell(&header, &mut input, alg, cell)?,
            Engine::BucketedWindow(alg, cell) => {
                restore_block_cell(&header, &mut input, alg, cell)?;
            }
            Engine::SlidingLog(alg, cell) => restore_block_cell(&header, &mut input, alg, cell)?,
            Engine::AllOfBlock(alg, cell) => restore_block_cell(&header, &mut input, alg, cell)?,
        }
        input.finish(1)?;
        Ok(limiter)
    }
}

fn restore_word_cell<R: Read, A: WordAlgorithm, W: crate::cell::AtomicWord>(
    header: &Header,
    input: &mut In<R>,
    alg: &A,
    cell: &crate::cell::WordCell<W>,
) -> Result<(), SnapshotError> {
    header.check_layout(1, 0, WORD_STATE_WORDS)?;
    let packed = input.word()?;
    check_word(alg, packed)?;
    cell.store(packed);
    Ok(())
}

fn restore_block_cell<R: Read, A: BlockAlgorithm>(
    header: &Header,
    input: &mut In<R>,
    alg: &A,
    cell: &crate::cell::BlockCell,
) -> Result<(), SnapshotError> {
    header.check_layout(1, 0, alg.words() as u64)?;
    // No other thread sees this limiter yet: no latch is needed, and none
    // is held while the caller's reader runs (a fork would wait for it).
    cell.unshared(|w| {
        read_block(input, alg, w.0)?;
        alg.validate(w).map_err(cannot_have_stored)
    })
}

impl KeyedLimiter {
    /// Writes the configuration, the key hasher's seed and every live
    /// state to `out`, at the limiter's current time (see
    /// [`KeyedLimiter::snapshot_at`]).
    pub fn snapshot(&self, out: impl Write) -> Result<(), SnapshotError> {
        self.snapshot_at(out, self.now_ns())
    }

    /// Writes the configuration, the key hasher's seed and every state
    /// that is live at `now_ns` to `out`; empty places, tombstones and
    /// states equivalent to fresh at `now_ns` are left out. Other threads
    /// keep checking meanwhile: each saved state is one its key had during
    /// the call (one atomic load of its slot, or a copy of its block under
    /// the key's latch, which holds that key's checks for the copy).
    pub fn snapshot_at(&self, out: impl Write, now_ns: u64) -> Result<(), SnapshotError> {
        let mut out = Out::new(out);
        let (tables, hasher) = self.parts();
        let (k0, k1) = hasher.keys();
        let header = |places: usize, state_words: u64| {
            let header = Header {
                hash_k0: k0,
                hash_k1: k1,
                places: places as u64,
                fingerprint_bits: u64::from(self.fingerprint_bits()),
                ..Header::of(self.limits(), now_ns, state_words)
            };
            match tables {
                Tables::TieredWord(_) | Tables::TieredBlock(_) => header.with_tiers(
                    (0..self.tiers()).map(|t| self.tier_limits(t).expect("below tiers()")),
                ),
                _ => header,
            }
        };
        let records = match tables {
            Tables::Gcra(t) => save_words(&mut out, header(t.places(), 2), t, now_ns),
            Tables::TokenBucket(t) => save_words(&mut out, header(t.places(), 2), t, now_ns),
            Tables::FixedWindow(t) => save_words(&mut out, header(t.places(), 2), t, now_ns),
            Tables::SlidingWindow(t) => save_words(&mut out, header(t.places(), 2), t, now_ns),
            Tables::BucketedWindow(t) => {
                let h = header(t.places(), t.alg().words() as u64);
                save_blocks(&mut out, h, t, now_ns)
            }
            Tables::SlidingLog(t) => {
                let h = header(t.places(), t.alg().words() as u64);
                save_blocks(&mut out, h, t, now_ns)
            }
            Tables::AllOfWord(t) => save_words(&mut out, header(t.places(), 2), t, now_ns),
            Tables::AllOfBlock(t) => {
                let h = header(t.places(), BlockAlgorithm::words(t.alg()) as u64);
                save_blocks(&mut out, h, t, now_ns)
            }
            Tables::TieredWord(t) => save_words(&mut out, header(t.places(), 2), t, now_ns),
            Tables::TieredBlock(t) => {
                let h = header(t.places(), BlockAlgorithm::words(t.alg()) as u64);
                save_blocks(&mut out, h, t, now_ns)
            }
        }?;
        out.finish(records)
    }

    /// Builds a keyed limiter of `config` on `clock` holding the states
    /// saved in `input`, hashing keys with the saved seed, so every key
    /// finds the state it had. A snapshot of another configuration is
    /// refused with [`SnapshotError::ConfigMismatch`] before the table is
    /// allocated; damaged input with the error that says how.
    pub fn restore(
        input: impl Read,
        config: Config,
        clock: Clock,
    ) -> Result<KeyedLimiter, SnapshotError> {
        KeyedLimiter::restore_multi(input, std::slice::from_ref(&config), clock)
    }

    /// [`KeyedLimiter::restore`] for a keyed limiter of several limits
    /// ([`KeyedLimiter::new_multi`]): `configs` must be the saved limits,
    /// in the same order (see [`Limiter::restore_multi`]).
    pub fn restore_multi(
        input: impl Read,
        configs: &[Config],
        clock: Clock,
    ) -> Result<KeyedLimiter, SnapshotError> {
        let mut input = In::new(input);
        let header = Header::read(&mut input)?;
        header.check(configs)?;
        let hasher = KeyHasher::from_keys(header.hash_k0, header.hash_k1);
        let limiter = KeyedLimiter::with_hasher_multi(configs, clock, hasher)?;
        let records = restore_records(&header, &mut input, &limiter)?;
        input.finish(records)?;
        Ok(limiter)
    }

    /// [`KeyedLimiter::restore`] for a tiered limiter
    /// ([`KeyedLimiter::new_tiered_multi`]; one limit per tier is
    /// `&[&[free], &[paid]]`): `tiers` must be the saved tiers, each with
    /// the saved limits in the same order, else
    /// [`SnapshotError::ConfigMismatch`] names the first that differs:
    /// [`Field::Tiers`] when the number of tiers does (a snapshot of a
    /// limiter without tiers counts 0), else the field, with `limit` the
    /// index in the tiers' flat list (tier `t`'s limit `i` is
    /// `t × limits + i`). Keys keep the states they had, under whichever
    /// tier they name next.
    pub fn restore_tiered(
        input: impl Read,
        tiers: &[&[Config]],
        clock: Clock,
    ) -> Result<KeyedLimiter, SnapshotError> {
        let mut input = In::new(input);
        let header = Header::read(&mut input)?;
        header.check_tiers(tiers)?;
        let hasher = KeyHasher::from_keys(header.hash_k0, header.hash_k1);
        let limiter = KeyedLimiter::with_hasher_tiered_multi(tiers, clock, hasher)?;
        let records = restore_records(&header, &mut input, &limiter)?;
        input.finish(records)?;
        Ok(limiter)
    }

    /// Opens the shared region at `region` (see
    /// [`KeyedLimiter::open_shared_with`]) holding the states saved in
    /// `input`, when no region exists there yet; returns the limiter and
    /// whether it was restored (`false`: a region was there, or appeared
    /// meanwhile, and was attached as it is, the snapshot unused).
    ///
    /// The restore fills a new region under a private temporary name in
    /// the same directory, with the snapshot's hash key, then links it to
    /// `region`: no process ever attaches to a half-restored region, and
    /// of several processes restoring at once one wins and the others
    /// attach to its region. The snapshot must be of `config` (else
    /// [`SnapshotError::ConfigMismatch`]), of one limit (shared regions
    /// hold one). Errors of the region are [`SnapshotError::Limiter`]
    /// with [`crate::Error::Shared`].
    pub fn restore_shared(
        input: impl Read,
        region: impl AsRef<std::path::Path>,
        config: Config,
        options: &crate::shared::SharedOptions,
    ) -> Result<(KeyedLimiter, bool), SnapshotError> {
        let region = crate::shared::resolve(region.as_ref());
        if region.exists() {
            return Ok((
                KeyedLimiter::open_shared_with(&region, config, options)?,
                false,
            ));
        }
        let mut input = In::new(input);
        let header = Header::read(&mut input)?;
        header.check(&[config])?;
        static UNIQUE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut temp = region.as_os_str().to_owned();
        temp.push(format!(
            ".restore.{}.{}",
            std::process::id(),
            UNIQUE.fetch_add(1, Relaxed)
        ));
        let temp = std::path::PathBuf::from(temp);
        let filled = KeyedLimiter::open_shared_keyed(
            &temp,
            config,
            options,
            Some((header.hash_k0, header.hash_k1)),
        )
        .map_err(SnapshotError::from)
        .and_then(|limiter| {
            // The region was just made under a name nobody else knows: no
            // other process can see it while it is filled.
            let records = restore_records(&header, &mut input, &limiter)?;
            input.finish(records)
        });
        let linked = filled.and_then(|()| match std::fs::hard_link(&temp, &region) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(SnapshotError::Io(e)),
        });
        let _ = std::fs::remove_file(&temp);
        let restored = linked?;
        Ok((
            KeyedLimiter::open_shared_with(&region, config, options)?,
            restored,
        ))
    }
}

/// Reads a keyed snapshot's records into `limiter` (which no other thread
/// or process uses yet, built from the configuration the header was checked
/// against and hashing with its key); returns how many, for the footer.
fn restore_records<R: Read>(
    header: &Header,
    input: &mut In<R>,
    limiter: &KeyedLimiter,
) -> Result<u64, SnapshotError> {
    let bits = u64::from(limiter.fingerprint_bits());
    match limiter.parts().0 {
        Tables::Gcra(t) => restore_words(header, input, t, bits),
        Tables::TokenBucket(t) => restore_words(header, input, t, bits),
        Tables::FixedWindow(t) => restore_words(header, input, t, bits),
        Tables::SlidingWindow(t) => restore_words(header, input, t, bits),
        Tables::AllOfWord(t) => restore_words(header, input, t, bits),
        Tables::BucketedWindow(t) => restore_blocks(header, input, t, bits),
        Tables::SlidingLog(t) => restore_blocks(header, input, t, bits),
        Tables::AllOfBlock(t) => restore_blocks(header, input, t, bits),
        Tables::TieredWord(t) => restore_words(header, input, t, bits),
        Tables::TieredBlock(t) => restore_blocks(header, input, t, bits),
    }
}

fn save_words<W: Write, A: WordAlgorithm>(
    out: &mut Out<W>,
    header: Header,
    table: &WordTable<A>,
    now_ns: u64,
) -> Result<u64, SnapshotError> {
    header.write(out)?;
    let alg = table.alg();
    let mut records = 0;
    for place in 0..table.places() {
        let Some((fingerprint, packed)) = table.saved(place) else {
            continue;
        };
        if alg.is_fresh_at(alg.unpack(packed), now_ns) {
            continue;
        }
        out.u64(place as u64)?;
        out.u64(fingerprint)?;
        out.word(packed)?;
        records += 1;
    }
    out.u64(END)?;
    Ok(records)
}

fn save_blocks<W: Write, A: BlockAlgorithm>(
    out: &mut Out<W>,
    header: Header,
    table: &BlockTable<A>,
    now_ns: u64,
) -> Result<u64, SnapshotError> {
    header.write(out)?;
    let alg = table.alg();
    let mut buf = Vec::new();
    let mut records = 0;
    for place in 0..table.places() {
        // Copied under the key's latch, written after it is released (a
        // write may wait on the disk; the key's checks should not).
        let live = table.saved(place, |fingerprint, words| {
            (!alg.is_fresh_at(words, now_ns)).then(|| {
                collect(alg, words, &mut buf);
                fingerprint
            })
        });
        let Some(Some(fingerprint)) = live else {
            continue;
        };
        out.u64(place as u64)?;
        out.u64(fingerprint)?;
        for &w in &buf {
            out.u64(w)?;
        }
        records += 1;
    }
    out.u64(END)?;
    Ok(records)
}

/// Reads the next record's place, or `None` at the end; refuses places out
/// of order or beyond the table (so a restore visits each place at most
/// once: it ends, whatever the input).
fn next_place<R: Read>(
    input: &mut In<R>,
    last: Option<u64>,
    places: usize,
) -> Result<Option<usize>, SnapshotError> {
    let place = input.u64()?;
    if place == END {
        return Ok(None);
    }
    if place >= places as u64 || last.is_some_and(|last| place <= last) {
        return Err(damaged(format!(
            "record place {place} is out of order or beyond the table's {places} places"
        )));
    }
    Ok(Some(place as usize))
}

fn restore_words<R: Read, A: WordAlgorithm>(
    header: &Header,
    input: &mut In<R>,
    table: &WordTable<A>,
    fingerprint_bits: u64,
) -> Result<u64, SnapshotError> {
    header.check_layout(table.places() as u64, fingerprint_bits, WORD_STATE_WORDS)?;
    let (mut last, mut records) = (None, 0);
    while let Some(place) = next_place(input, last, table.places())? {
        let fingerprint = input.u64()?;
        let packed = input.word()?;
        check_word(table.alg(), packed)?;
        table
            .restore(place, fingerprint, packed)
            .map_err(|why| damaged(format!("record at place {place}: {why}")))?;
        last = Some(place as u64);
        records += 1;
    }
    Ok(records)
}

fn restore_blocks<R: Read, A: BlockAlgorithm>(
    header: &Header,
    input: &mut In<R>,
    table: &BlockTable<A>,
    fingerprint_bits: u64,
) -> Result<u64, SnapshotError> {
    let words = table.alg().words() as u64;
    header.check_layout(table.places() as u64, fingerprint_bits, words)?;
    let (mut last, mut records) = (None, 0);
    while let Some(place) = next_place(input, last, table.places())? {
        let fingerprint = input.u64()?;
        table
            .restore(place, fingerprint, |i, block| {
                input.u64().map(|v| block[i].store(v, Relaxed))
            })?
            .map_err(|why| damaged(format!("record at place {place}: {why}")))?;
        last = Some(place as u64);
        records += 1;
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    //! Hostile snapshots: well-formed, with both checksums right, but
    //! holding what no limiter writes. Each must be refused by name.
    use super::*;
    use crate::algorithm::mask;
    use crate::config::Algorithm;

    const T0: u64 = 1_700_000_000_000_000_000;
    const SECOND: u64 = 1_000_000_000;

    fn clock() -> Clock {
        Clock::manual(T0).0
    }

    /// Recomputes both checksums after an edit.
    fn reseal(bytes: &mut [u8]) {
        let mut crc = Crc32c::new();
        crc.update(&bytes[..HEADER_LEN]);
        bytes[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&crc.value().to_le_bytes());
        let end = bytes.len() - 4;
        let mut crc = Crc32c::new();
        crc.update(&bytes[..end]);
        bytes[end..].copy_from_slice(&crc.value().to_le_bytes());
    }

    fn put(bytes: &mut [u8], at: usize, v: u64) {
        bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn get(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
    }

    fn keyed(algorithm: Algorithm, limit: u64, keys: u64) -> (Config, Vec<u8>) {
        let cfg = Config::new(algorithm, limit, SECOND).capacity(64);
        let l = KeyedLimiter::with_clock(cfg, clock()).unwrap();
        for key in 0..keys {
            assert!(l.check_at(key, 1, T0).allowed);
        }
        let mut bytes = Vec::new();
        l.snapshot_at(&mut bytes, T0).unwrap();
        (cfg, bytes)
    }

    fn refused(cfg: Config, bytes: &[u8], why: &str) {
        match KeyedLimiter::restore(bytes, cfg, clock()) {
            Err(SnapshotError::Damaged(reason)) => {
                assert!(reason.contains(why), "{reason:?} does not say {why:?}")
            }
            other => panic!("expected Damaged({why:?}), got {other:?}"),
        }
    }

    /// The first record starts after the header and its checksum.
    const FIRST: usize = HEADER_LEN + 4;
    /// A word record: place, fingerprint, two words of state.
    const WORD_RECORD: usize = 32;

    #[test]
    fn a_resealed_copy_still_restores() {
        let (cfg, mut bytes) = keyed(Algorithm::FixedWindow, 5, 3);
        reseal(&mut bytes);
        KeyedLimiter::restore(&bytes[..], cfg, clock()).unwrap();
    }

    #[test]
    fn places_out_of_order_or_beyond_the_table_are_refused() {
        let (cfg, bytes) = keyed(Algorithm::Gcra, 5, 3);
        let places = get(&bytes, 96);
        let mut beyond = bytes.clone();
        put(&mut beyond, FIRST, places);
        reseal(&mut beyond);
        refused(cfg, &beyond, "beyond the table");
        let mut repeated = bytes.clone();
        let first = get(&bytes, FIRST);
        put(&mut repeated, FIRST + WORD_RECORD, first);
        reseal(&mut repeated);
        refused(cfg, &repeated, "out of order");
    }

    #[test]
    fn fingerprints_no_key_has_are_refused() {
        let (cfg, bytes) = keyed(Algorithm::TokenBucket, 5, 2);
        for fingerprint in [0, 1, u64::MAX] {
            let mut b = bytes.clone();
            put(&mut b, FIRST + 8, fingerprint);
            reseal(&mut b);
            refused(cfg, &b, "fingerprint");
        }
    }

    #[test]
    fn states_no_limiter_stores_are_refused() {
        // A fixed window's window beyond the last any time has.
        let (cfg, bytes) = keyed(Algorithm::FixedWindow, 5, 1);
        let mut b = bytes.clone();
        let window_bits = crate::algorithm::bits_for(u64::MAX / SECOND);
        let packed = u128::from(get(&b, FIRST + 16)) | (u128::from(get(&b, FIRST + 24)) << 64);
        let beyond = (packed & !mask(window_bits)) | mask(window_bits);
        put(&mut b, FIRST + 16, beyond as u64);
        put(&mut b, FIRST + 24, (beyond >> 64) as u64);
        reseal(&mut b);
        refused(cfg, &b, "word 0 (window) 34359738367 is above 18446744073");
        // A count above the limit (6 of 5) is one a lowered limit leaves
        // (SPEC §4, "What a loader accepts"): restored, and it denies.
        let mut b = bytes.clone();
        let count_6 = (packed & mask(window_bits)) | (6u128 << window_bits);
        put(&mut b, FIRST + 16, count_6 as u64);
        put(&mut b, FIRST + 24, (count_6 >> 64) as u64);
        reseal(&mut b);
        let l = KeyedLimiter::restore(&b[..], cfg, clock()).unwrap();
        let key = (0..64).find(|&k| !l.check_at(k, 0, T0).allowed);
        assert!(key.is_some(), "the key holding 6 of 5 is denied");
        // Bits above the state's width.
        let mut b = bytes.clone();
        put(&mut b, FIRST + 24, 1 << 40);
        reseal(&mut b);
        refused(cfg, &b, "cannot have stored");
    }

    #[test]
    fn sliding_log_rings_out_of_range_are_refused() {
        // Record: place, fingerprint, head, len, base, then (ts, total).
        let (cfg, bytes) = keyed(Algorithm::SlidingLog, 3, 1);
        let state = FIRST + 16;
        assert_eq!(get(&bytes, state + 8), 1, "one entry");
        // head beyond the ring: the listing stops at the header, so the
        // entry's words are read as the END marker's place: refused either way.
        let mut b = bytes.clone();
        put(&mut b, state, 3);
        reseal(&mut b);
        assert!(KeyedLimiter::restore(&b[..], cfg, clock()).is_err());
        // An entry adding more than the limit.
        let mut b = bytes.clone();
        put(&mut b, state + 32, get(&bytes, state + 16) + 4);
        reseal(&mut b);
        refused(cfg, &b, "cannot have stored");
        // An entry adding nothing.
        let mut b = bytes.clone();
        put(&mut b, state + 32, get(&bytes, state + 16));
        reseal(&mut b);
        refused(cfg, &b, "cannot have stored");
    }

    #[test]
    fn a_footer_count_that_differs_is_refused() {
        let (cfg, mut bytes) = keyed(Algorithm::SlidingWindow, 5, 3);
        let at = bytes.len() - 12;
        put(&mut bytes, at, 2);
        reseal(&mut bytes);
        refused(cfg, &bytes, "counts 2 records");
    }

    /// A keyed snapshot of two limits (version 2: one 32-byte entry in the
    /// header's limits table).
    fn two_limits() -> (Vec<Config>, Vec<u8>) {
        let configs = [
            Config::new(Algorithm::Gcra, 5, SECOND).capacity(64),
            Config::new(Algorithm::SlidingLog, 3, SECOND).capacity(64),
        ];
        let l = KeyedLimiter::with_clock_multi(&configs, clock()).unwrap();
        l.check_at(1, 1, T0);
        let mut bytes = Vec::new();
        l.snapshot_at(&mut bytes, T0).unwrap();
        (configs.to_vec(), bytes)
    }

    /// Recomputes both checksums of a version 2 snapshot whose header
    /// holds `entries` table entries.
    fn reseal_v2(bytes: &mut [u8], entries: usize) {
        let at = HEADER_LEN + LIMIT_LEN * entries;
        let mut crc = Crc32c::new();
        crc.update(&bytes[..at]);
        bytes[at..at + 4].copy_from_slice(&crc.value().to_le_bytes());
        let end = bytes.len() - 4;
        let mut crc = Crc32c::new();
        crc.update(&bytes[..end]);
        bytes[end..].copy_from_slice(&crc.value().to_le_bytes());
    }

    #[test]
    fn a_count_of_limits_out_of_range_is_refused_before_the_table_is_read() {
        let (configs, bytes) = two_limits();
        assert_eq!(get(&bytes, 8) as u32, 2, "version 2");
        assert_eq!(u32::from_le_bytes(bytes[28..32].try_into().unwrap()), 2);
        let mut b = bytes.clone();
        reseal_v2(&mut b, 1);
        KeyedLimiter::restore_multi(&b[..], &configs, clock()).unwrap();
        for count in [0u32, 1, 9, u32::MAX] {
            let mut b = bytes.clone();
            b[28..32].copy_from_slice(&count.to_le_bytes());
            reseal_v2(&mut b, 1);
            match KeyedLimiter::restore_multi(&b[..], &configs, clock()) {
                Err(SnapshotError::Damaged(r)) => assert!(r.contains("limits"), "{r}"),
                other => panic!("count {count}: {other:?}"),
            }
        }
        // A version 1 header with the count field set: refused as before.
        let (cfg, mut v1) = keyed(Algorithm::Gcra, 5, 1);
        v1[28] = 2;
        reseal(&mut v1);
        refused(cfg, &v1, "reserved");
    }

    #[test]
    fn a_limits_table_entry_no_limiter_writes_is_refused() {
        let (configs, bytes) = two_limits();
        // The entry's algorithm (its first u32) out of range.
        let mut b = bytes.clone();
        b[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&99u32.to_le_bytes());
        reseal_v2(&mut b, 1);
        assert!(matches!(
            saved_configs(&b[..]),
            Err(SnapshotError::Damaged(_))
        ));
        assert!(matches!(
            KeyedLimiter::restore_multi(&b[..], &configs, clock()),
            Err(SnapshotError::ConfigMismatch {
                limit: 1,
                field: Field::Algorithm,
                saved: 99,
                ..
            })
        ));
        // Its limit changed: the saved configuration differs, named.
        let mut b = bytes.clone();
        put(&mut b, HEADER_LEN + 8, 4);
        reseal_v2(&mut b, 1);
        assert!(matches!(
            KeyedLimiter::restore_multi(&b[..], &configs, clock()),
            Err(SnapshotError::ConfigMismatch {
                limit: 1,
                field: Field::Limit,
                saved: 4,
                wanted: 3,
            })
        ));
    }

    #[test]
    fn a_direct_log_claiming_more_entries_than_it_holds_is_truncated() {
        let cfg = Config::new(Algorithm::SlidingLog, 1000, SECOND);
        let l = Limiter::with_clock(cfg, clock()).unwrap();
        l.check_at(1, T0);
        let mut bytes = Vec::new();
        l.snapshot_at(&mut bytes, T0).unwrap();
        put(&mut bytes, FIRST + 8, 1000);
        reseal(&mut bytes);
        assert!(matches!(
            Limiter::restore(&bytes[..], cfg, clock()),
            Err(SnapshotError::Truncated | SnapshotError::Damaged(_))
        ));
    }
}

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

use super::SnapshotError;
use super::crc::Crc32c;
use crate::algorithm::{BlockAlgorithm, StateError, WordAlgorithm, Words, packed_validate};
use crate::cell::LatchedWords;
use crate::config::{Algorithm, Config, Field, Overflow};
use crate::policy::multi::MAX_LIMITS;
use crate::policy::tiers::MAX_TIERS;
use crate::sync::AtomicU64;
use std::io::{BufReader, BufWriter, Read, Write};
use std::sync::atomic::Ordering::Relaxed;

/// The first eight bytes: a non-ASCII byte first (a text file is not a
/// snapshot), the name, and a line feed (a transfer that rewrites line
/// ends damages the magic, not the states).
pub(crate) const MAGIC: [u8; 8] = *b"\x89RCSNAP\n";

/// The newest format version this build writes and reads: 3, which adds
/// the tiers of a tiered limiter (`Builder::tier`). Each
/// snapshot is written in the oldest version that holds it: a limiter of
/// one limit in version 1, of several in version 2 (version 1 with a table
/// of limits), a tiered one in version 3 (version 2 with every tier's
/// limits); a build that reads only older versions refuses a tiered
/// snapshot as [`SnapshotError::UnsupportedVersion`], and reads the others
/// as ever.
pub const VERSION: u32 = 3;

/// The version that adds tiers.
pub(super) const TIERED: u32 = 3;

pub(super) const DIRECT: u32 = 1;
pub(super) const KEYED: u32 = 2;

/// The place number that ends a keyed snapshot's records.
pub(super) const END: u64 = u64::MAX;

/// Bytes of the header before its checksum.
pub(super) const HEADER_LEN: usize = 112;

/// Buffered writes with a running checksum.
pub(super) struct Out<W: Write> {
    pub(super) w: BufWriter<W>,
    pub(super) crc: Crc32c,
}

impl<W: Write> Out<W> {
    pub(super) fn new(w: W) -> Self {
        Out {
            w: BufWriter::with_capacity(1 << 20, w),
            crc: Crc32c::new(),
        }
    }

    pub(super) fn bytes(&mut self, b: &[u8]) -> Result<(), SnapshotError> {
        self.crc.update(b);
        Ok(self.w.write_all(b)?)
    }

    pub(super) fn u64(&mut self, v: u64) -> Result<(), SnapshotError> {
        self.bytes(&v.to_le_bytes())
    }

    pub(super) fn word(&mut self, packed: u128) -> Result<(), SnapshotError> {
        self.u64(packed as u64)?;
        self.u64((packed >> 64) as u64)
    }

    /// The footer: the record count, then the checksum of every byte
    /// before the checksum.
    pub(super) fn finish(mut self, records: u64) -> Result<(), SnapshotError> {
        self.u64(records)?;
        let crc = self.crc.value();
        self.w.write_all(&crc.to_le_bytes())?;
        self.w.flush()?;
        Ok(())
    }
}

/// Buffered reads with a running checksum.
pub(super) struct In<R: Read> {
    pub(super) r: BufReader<R>,
    pub(super) crc: Crc32c,
}

impl<R: Read> In<R> {
    pub(super) fn new(r: R) -> Self {
        In {
            r: BufReader::with_capacity(1 << 16, r),
            crc: Crc32c::new(),
        }
    }

    pub(super) fn bytes<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let mut b = [0u8; N];
        self.r.read_exact(&mut b)?;
        self.crc.update(&b);
        Ok(b)
    }

    pub(super) fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    /// Fills `buf` (a fixed buffer the caller bounded) from the input.
    pub(super) fn fill(&mut self, buf: &mut [u8]) -> Result<(), SnapshotError> {
        self.r.read_exact(buf)?;
        self.crc.update(buf);
        Ok(())
    }

    pub(super) fn word(&mut self) -> Result<u128, SnapshotError> {
        Ok(u128::from(self.u64()?) | (u128::from(self.u64()?) << 64))
    }

    /// Checks the footer: the record count, the checksum, and nothing
    /// after it.
    pub(super) fn finish(mut self, records: u64) -> Result<(), SnapshotError> {
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

pub(super) fn damaged(reason: impl Into<String>) -> SnapshotError {
    SnapshotError::Damaged(reason.into())
}

/// One limit's fields in a header: the first limit's sit in the fixed
/// header, the others' (format version 2) in the limits table after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct LimitFields {
    pub(super) algorithm: u32,
    pub(super) sub_windows: u32,
    pub(super) limit: u64,
    pub(super) period_ns: u64,
    pub(super) burst: u64,
}

/// Bytes of one entry of a version 2 header's limits table.
pub(super) const LIMIT_LEN: usize = 32;

impl LimitFields {
    pub(super) fn of(config: &Config) -> LimitFields {
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

    pub(super) fn to_bytes(self) -> [u8; LIMIT_LEN] {
        let mut b = [0u8; LIMIT_LEN];
        b[0..4].copy_from_slice(&self.algorithm.to_le_bytes());
        b[4..8].copy_from_slice(&self.sub_windows.to_le_bytes());
        b[8..16].copy_from_slice(&self.limit.to_le_bytes());
        b[16..24].copy_from_slice(&self.period_ns.to_le_bytes());
        b[24..32].copy_from_slice(&self.burst.to_le_bytes());
        b
    }

    pub(super) fn from_bytes(b: &[u8]) -> LimitFields {
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
pub(super) struct Header {
    pub(super) kind: u32,
    pub(super) overflow: u32,
    pub(super) capacity: u64,
    pub(super) saved_at_ns: u64,
    pub(super) state_words: u64,
    pub(super) hash_k0: u64,
    pub(super) hash_k1: u64,
    pub(super) places: u64,
    pub(super) fingerprint_bits: u64,
    /// Only `limits[t][..count]` are limits, of tiers `t < tiers.max(1)`.
    pub(super) limits: [[LimitFields; MAX_LIMITS]; MAX_TIERS],
    pub(super) count: usize,
    /// 0 for a limiter built without tiers (versions 1 and 2), else how
    /// many tiers (version 3).
    pub(super) tiers: usize,
}

impl Header {
    /// The header of a limiter built from `configs` (validated then; 1 to
    /// `MAX_LIMITS`, sharing capacity and overflow).
    pub(super) fn of(configs: &[Config], saved_at_ns: u64, state_words: u64) -> Header {
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
    pub(super) fn with_tiers<'a>(
        mut self,
        tiers: impl ExactSizeIterator<Item = &'a [Config]>,
    ) -> Header {
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
    pub(super) fn version(&self) -> u32 {
        match (self.tiers, self.count) {
            (0, 1) => 1,
            (0, _) => 2,
            _ => TIERED,
        }
    }

    pub(super) fn write<W: Write>(&self, out: &mut Out<W>) -> Result<(), SnapshotError> {
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

    pub(super) fn read<R: Read>(input: &mut In<R>) -> Result<Header, SnapshotError> {
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

    /// Every tier's configurations, in order (one tier for a limiter
    /// built without tiers).
    pub(super) fn all_tiers(&self) -> Result<Vec<Vec<Config>>, SnapshotError> {
        (0..self.tiers.max(1))
            .map(|t| self.tier_configs(t))
            .collect()
    }

    /// Tier `tier`'s configurations (burst and sub-windows resolved).
    pub(super) fn tier_configs(&self, tier: usize) -> Result<Vec<Config>, SnapshotError> {
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
    pub(super) fn check(&self, wanted: &[Config]) -> Result<(), SnapshotError> {
        if wanted.len() != 1 {
            // The constructor's own checks (count, each limit, shared
            // capacity and overflow); its layout is not needed here.
            crate::policy::multi::all_of(wanted, 128)?;
        }
        self.check_tier_count(0)?;
        self.check_limits(0, wanted)?;
        self.check_kind(wanted)
    }

    /// [`Header::check`] for a tiered limiter: the number of tiers
    /// ([`Field::Tiers`]), then each tier's limits as `check` compares
    /// them, `limit` in a mismatch being the index in the tiers' flat
    /// list (tier `t`'s limit `i` is `t × limits + i`).
    pub(super) fn check_tiers(&self, wanted: &[&[Config]]) -> Result<(), SnapshotError> {
        // The constructor's own checks, as in `check`.
        crate::policy::tiers::tiers(wanted)?;
        self.check_tier_count(wanted.len())?;
        for (t, tier) in wanted.iter().enumerate() {
            self.check_limits(t, tier)?;
        }
        self.check_kind(wanted[0])
    }

    /// Refuses a snapshot of another number of tiers than `wanted` (0: a
    /// limiter built without tiers, whose states are laid out otherwise
    /// than a tiered limiter's of one tier).
    pub(super) fn check_tier_count(&self, wanted: usize) -> Result<(), SnapshotError> {
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
    pub(super) fn check_limits(&self, tier: usize, wanted: &[Config]) -> Result<(), SnapshotError> {
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
    pub(super) fn check_kind(&self, wanted: &[Config]) -> Result<(), SnapshotError> {
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
    pub(super) fn check_layout(
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

/// Every tier's configurations saved in a snapshot (tier by tier, each
/// tier's limits in order), read from its header alone (its checksum
/// checked), and whether the snapshot is of a tiered limiter
/// ([`crate::Builder::tier`]); for a limiter built without tiers, one tier
/// of its limits. What a builder given no limit takes from the snapshot
/// its states come from: the saved configuration then sizes the table, as
/// one given to the builder would.
pub(crate) fn saved_tiers(input: impl Read) -> Result<(Vec<Vec<Config>>, bool), SnapshotError> {
    let header = Header::read(&mut In::new(input))?;
    Ok((header.all_tiers()?, header.tiers > 0))
}

/// Words of a word algorithm's state in a record: the packed 128-bit word.
pub(super) const WORD_STATE_WORDS: u64 = 2;

/// Refuses a packed state a word algorithm cannot have stored (SPEC §4,
/// "What a loader accepts").
pub(super) fn check_word<A: WordAlgorithm>(alg: &A, packed: u128) -> Result<(), SnapshotError> {
    packed_validate(alg, packed).map_err(cannot_have_stored)
}

pub(super) fn cannot_have_stored(e: StateError) -> SnapshotError {
    damaged(format!("a state the algorithm cannot have stored: {e}"))
}

/// Copies the saved words of a block (under its latch) into `buf`.
pub(super) fn collect<A: BlockAlgorithm>(alg: &A, words: &LatchedWords, buf: &mut Vec<u64>) {
    buf.clear();
    alg.saved_words(words, &mut |i| buf.push(words.get(i)));
}

/// Reads a block's saved words into `words` (as `BlockAlgorithm::saved_words`
/// lists them), storing each as it is read.
pub(super) fn read_block<R: Read, A: BlockAlgorithm>(
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

#[cfg(test)]
mod tests;

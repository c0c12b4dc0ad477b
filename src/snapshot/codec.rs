//! The snapshot format, version 1 (docs/SNAPSHOT.md is the normative
//! description): a fixed header with its own checksum, the states, and a
//! footer with the record count and a checksum of everything before it.
//!
//! Reading allocates nothing sized by the input: the limiter is built from
//! the configuration the caller asks for (compared with the header before
//! anything is allocated), records must name places in increasing order
//! below the table's size, and a state's words are written straight into
//! the new limiter, never buffered.

use super::SnapshotError;
use super::crc::Crc32c;
use crate::algorithm::{BlockAlgorithm, WordAlgorithm, Words, mask};
use crate::cell::LatchedWords;
use crate::clock::Clock;
use crate::config::{Algorithm, Config, Field, Overflow};
use crate::keyed::{KeyedLimiter, Tables};
use crate::limiter::{Engine, Limiter};
use crate::sync::AtomicU64;
use crate::table::KeyHasher;
use crate::table::block::BlockTable;
use crate::table::word::WordTable;
use std::io::{BufReader, BufWriter, Read, Write};
use std::sync::atomic::Ordering::Relaxed;

/// The first eight bytes: a non-ASCII byte first (a text file is not a
/// snapshot), the name, and a line feed (a transfer that rewrites line
/// ends damages the magic, not the states).
pub(crate) const MAGIC: [u8; 8] = *b"\x89RCSNAP\n";

/// The format version this build writes and reads.
pub const VERSION: u32 = 1;

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

/// The fixed header (docs/SNAPSHOT.md, "Header").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    kind: u32,
    algorithm: u32,
    sub_windows: u32,
    overflow: u32,
    limit: u64,
    period_ns: u64,
    burst: u64,
    capacity: u64,
    saved_at_ns: u64,
    state_words: u64,
    hash_k0: u64,
    hash_k1: u64,
    places: u64,
    fingerprint_bits: u64,
}

impl Header {
    /// The header of a limiter built from `config` (validated then).
    fn of(config: &Config, saved_at_ns: u64, state_words: u64) -> Header {
        let p = config
            .params()
            .expect("a limiter's configuration was validated when it was built");
        Header {
            kind: if config.capacity == 0 { DIRECT } else { KEYED },
            algorithm: p.algorithm as u32,
            sub_windows: p.sub_windows,
            overflow: config.overflow as u32,
            limit: p.limit,
            period_ns: p.period,
            burst: p.burst,
            capacity: config.capacity,
            saved_at_ns,
            state_words,
            hash_k0: 0,
            hash_k1: 0,
            places: 1,
            fingerprint_bits: 0,
        }
    }

    fn write<W: Write>(&self, out: &mut Out<W>) -> Result<(), SnapshotError> {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(&MAGIC);
        let fields32 = [
            VERSION,
            self.kind,
            self.algorithm,
            self.sub_windows,
            self.overflow,
        ];
        for (i, v) in fields32.iter().enumerate() {
            b[8 + 4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
        // Bytes 28..32 are reserved (zero).
        for (i, v) in self.fields64().iter().enumerate() {
            b[32 + 8 * i..][..8].copy_from_slice(&v.to_le_bytes());
        }
        let mut crc = Crc32c::new();
        crc.update(&b);
        out.bytes(&b)?;
        out.bytes(&crc.value().to_le_bytes())
    }

    fn fields64(&self) -> [u64; 10] {
        [
            self.limit,
            self.period_ns,
            self.burst,
            self.capacity,
            self.saved_at_ns,
            self.state_words,
            self.hash_k0,
            self.hash_k1,
            self.places,
            self.fingerprint_bits,
        ]
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
        if version != VERSION {
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
        if u32::from_le_bytes(input.bytes()?) != crc.value() {
            return Err(damaged("the header's checksum does not match the header"));
        }
        let u32_at = |at: usize| u32::from_le_bytes(rest[at - 12..][..4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(rest[at - 12..][..8].try_into().unwrap());
        if u32_at(28) != 0 {
            return Err(damaged("the header's reserved bytes are not zero"));
        }
        Ok(Header {
            kind: u32_at(12),
            algorithm: u32_at(16),
            sub_windows: u32_at(20),
            overflow: u32_at(24),
            limit: u64_at(32),
            period_ns: u64_at(40),
            burst: u64_at(48),
            capacity: u64_at(56),
            saved_at_ns: u64_at(64),
            state_words: u64_at(72),
            hash_k0: u64_at(80),
            hash_k1: u64_at(88),
            places: u64_at(96),
            fingerprint_bits: u64_at(104),
        })
    }

    /// The configuration saved, as a `Config` (burst and sub-windows
    /// resolved).
    fn config(&self) -> Result<Config, SnapshotError> {
        let algorithm = Algorithm::from_u32(self.algorithm)
            .ok_or_else(|| damaged(format!("algorithm {} is not one", self.algorithm)))?;
        let overflow = match self.overflow {
            0 => Overflow::Deny,
            1 => Overflow::Allow,
            v => return Err(damaged(format!("overflow {v} is not a policy"))),
        };
        Ok(Config {
            algorithm,
            limit: self.limit,
            period_ns: self.period_ns,
            burst: self.burst,
            sub_windows: self.sub_windows,
            capacity: self.capacity,
            overflow,
        })
    }

    /// Refuses a snapshot of another configuration than `wanted`, naming
    /// the first field that differs. Burst and sub-windows are compared
    /// resolved (a burst of 0 is the limit; only the bucketed window has
    /// sub-windows); the overflow policy is the caller's to choose.
    fn check(&self, wanted: &Config) -> Result<(), SnapshotError> {
        let p = wanted.params().map_err(crate::config::Error::from)?;
        let pairs = [
            (
                Field::Algorithm,
                u64::from(self.algorithm),
                p.algorithm as u64,
            ),
            (Field::Capacity, self.capacity, wanted.capacity),
            (Field::Limit, self.limit, p.limit),
            (Field::PeriodNs, self.period_ns, p.period),
            (Field::Burst, self.burst, p.burst),
            (
                Field::SubWindows,
                u64::from(self.sub_windows),
                u64::from(p.sub_windows),
            ),
        ];
        for (field, saved, wanted) in pairs {
            if saved != wanted {
                return Err(SnapshotError::ConfigMismatch {
                    field,
                    saved,
                    wanted,
                });
            }
        }
        let kind = if wanted.capacity == 0 { DIRECT } else { KEYED };
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
pub fn saved_config(input: impl Read) -> Result<Config, SnapshotError> {
    Header::read(&mut In::new(input))?.config()
}

/// Words of a word algorithm's state in a record: the packed 128-bit word.
const WORD_STATE_WORDS: u64 = 2;

/// Refuses a packed state a word algorithm cannot have stored.
fn check_word<A: WordAlgorithm>(alg: &A, packed: u128) -> Result<(), SnapshotError> {
    let state = alg.unpack(packed);
    if packed & !mask(alg.state_bits()) != 0 || alg.pack(state) != packed || !alg.is_valid(state) {
        return Err(damaged("a state the algorithm cannot have stored"));
    }
    Ok(())
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

    /// Writes the configuration and the state to `out`, recording `now_ns`
    /// as the time of the snapshot. Checks on other threads go on: the
    /// state saved is one the limiter had during the call (one atomic load,
    /// or a copy under the latch of a multi-word state).
    pub fn snapshot_at(&self, out: impl Write, now_ns: u64) -> Result<(), SnapshotError> {
        let mut out = Out::new(out);
        let mut buf = Vec::new();
        let state_words = match self.engine() {
            Engine::Gcra(_, cell) => {
                let packed = cell.load();
                Header::of(self.config(), now_ns, WORD_STATE_WORDS).write(&mut out)?;
                return out.word(packed).and_then(|()| out.finish(1));
            }
            Engine::TokenBucket(_, cell)
            | Engine::FixedWindow(_, cell)
            | Engine::SlidingWindow(_, cell) => {
                let packed = cell.load();
                Header::of(self.config(), now_ns, WORD_STATE_WORDS).write(&mut out)?;
                return out.word(packed).and_then(|()| out.finish(1));
            }
            Engine::BucketedWindow(alg, cell) => {
                cell.latched(|w| collect(alg, w, &mut buf));
                alg.words()
            }
            Engine::SlidingLog(alg, cell) => {
                cell.latched(|w| collect(alg, w, &mut buf));
                alg.words()
            }
            Engine::AllOfWord(..) | Engine::AllOfBlock(..) => {
                return Err(SnapshotError::SeveralLimits);
            }
        };
        Header::of(self.config(), now_ns, state_words as u64).write(&mut out)?;
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
        let mut input = In::new(input);
        let header = Header::read(&mut input)?;
        header.check(&config)?;
        let limiter = Limiter::with_clock(config, clock)?;
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
            Engine::BucketedWindow(alg, cell) => {
                restore_block_cell(&header, &mut input, alg, cell)?;
            }
            Engine::SlidingLog(alg, cell) => restore_block_cell(&header, &mut input, alg, cell)?,
            // `with_clock` above builds one limit, never several.
            Engine::AllOfWord(..) | Engine::AllOfBlock(..) => {
                return Err(SnapshotError::SeveralLimits);
            }
        }
        input.finish(1)?;
        Ok(limiter)
    }
}

fn restore_word_cell<R: Read, A: WordAlgorithm>(
    header: &Header,
    input: &mut In<R>,
    alg: &A,
    cell: &crate::cell::WordCell<crate::sync::AtomicU128>,
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
    // No other thread sees this limiter yet: the latch is uncontended.
    cell.latched(|w| {
        read_block(input, alg, w.0)?;
        if !alg.is_valid(w) {
            return Err(damaged("a state the algorithm cannot have stored"));
        }
        Ok(())
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
        let header = |places: usize, state_words: u64| Header {
            hash_k0: k0,
            hash_k1: k1,
            places: places as u64,
            fingerprint_bits: u64::from(self.fingerprint_bits()),
            ..Header::of(self.config(), now_ns, state_words)
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
            Tables::AllOfWord(_) | Tables::AllOfBlock(_) => Err(SnapshotError::SeveralLimits),
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
        let mut input = In::new(input);
        let header = Header::read(&mut input)?;
        header.check(&config)?;
        let hasher = KeyHasher::from_keys(header.hash_k0, header.hash_k1);
        let limiter = KeyedLimiter::with_hasher(config, clock, hasher)?;
        let bits = u64::from(limiter.fingerprint_bits());
        let records = match limiter.parts().0 {
            Tables::Gcra(t) => restore_words(&header, &mut input, t, bits),
            Tables::TokenBucket(t) => restore_words(&header, &mut input, t, bits),
            Tables::FixedWindow(t) => restore_words(&header, &mut input, t, bits),
            Tables::SlidingWindow(t) => restore_words(&header, &mut input, t, bits),
            Tables::BucketedWindow(t) => restore_blocks(&header, &mut input, t, bits),
            Tables::SlidingLog(t) => restore_blocks(&header, &mut input, t, bits),
            // `with_hasher` above builds one limit, never several.
            Tables::AllOfWord(_) | Tables::AllOfBlock(_) => Err(SnapshotError::SeveralLimits),
        }?;
        input.finish(records)?;
        Ok(limiter)
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
        // A fixed window's count above the limit.
        let (cfg, bytes) = keyed(Algorithm::FixedWindow, 5, 1);
        let mut b = bytes.clone();
        let window_bits = crate::algorithm::bits_for(u64::MAX / SECOND);
        let packed = u128::from(get(&b, FIRST + 16)) | (u128::from(get(&b, FIRST + 24)) << 64);
        let count_6 = (packed & mask(window_bits)) | (6u128 << window_bits);
        put(&mut b, FIRST + 16, count_6 as u64);
        put(&mut b, FIRST + 24, (count_6 >> 64) as u64);
        reseal(&mut b);
        refused(cfg, &b, "cannot have stored");
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

//! Saving and restoring a keyed limiter ([`KeyedLimiter`]) in the snapshot
//! format (`format.rs`), one record per live key.

use super::SnapshotError;
use super::format::*;
use crate::algorithm::{BlockAlgorithm, WordAlgorithm};
use crate::clock::Clock;
use crate::config::Config;
use crate::keyed::{KeyedLimiter, Tables};
use crate::table::KeyHasher;
use crate::table::block::BlockTable;
use crate::table::word::WordTable;
use std::io::{Read, Write};
use std::sync::atomic::Ordering::Relaxed;

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

    /// Builds a keyed limiter of `configs` (one limit, or several as one)
    /// on `clock` holding the states saved in `input`, hashing keys with
    /// the saved seed, so every key finds the state it had: what
    /// [`crate::Builder::build`] makes of a snapshot's states. A snapshot of another
    /// configuration is refused with [`SnapshotError::ConfigMismatch`]
    /// before the table is allocated (see `Limiter::from_snapshot`);
    /// damaged input with the error that says how.
    pub(crate) fn from_snapshot(
        input: impl Read,
        configs: &[Config],
        clock: Clock,
    ) -> Result<KeyedLimiter, SnapshotError> {
        let mut input = In::new(input);
        let header = Header::read(&mut input)?;
        header.check(configs)?;
        let hasher = KeyHasher::from_keys(header.hash_k0, header.hash_k1);
        let limiter = KeyedLimiter::made(configs, clock, hasher)?;
        let records = restore_records(&header, &mut input, &limiter)?;
        input.finish(records)?;
        Ok(limiter)
    }

    /// [`KeyedLimiter::from_snapshot`] for a tiered limiter (what
    /// [`crate::Builder::tier`] then [`crate::Builder::build`] makes of a
    /// snapshot's states):
    /// `tiers` must be the saved tiers, each with the saved limits in the
    /// same order, else [`SnapshotError::ConfigMismatch`] names the first
    /// that differs: [`crate::Field::Tiers`] when the number of tiers does
    /// (a snapshot of a limiter without tiers counts 0), else the field,
    /// with `limit` the index in the tiers' flat list (tier `t`'s limit
    /// `i` is `t × limits + i`). Keys keep the states they had, under
    /// whichever tier they name next.
    pub(crate) fn from_snapshot_tiered(
        input: impl Read,
        tiers: &[&[Config]],
        clock: Clock,
    ) -> Result<KeyedLimiter, SnapshotError> {
        let mut input = In::new(input);
        let header = Header::read(&mut input)?;
        header.check_tiers(tiers)?;
        let hasher = KeyHasher::from_keys(header.hash_k0, header.hash_k1);
        let limiter = KeyedLimiter::made_tiered(tiers, clock, hasher)?;
        let records = restore_records(&header, &mut input, &limiter)?;
        input.finish(records)?;
        Ok(limiter)
    }

    /// The shared region at `region` ([`crate::States::Shared`]): an
    /// existing region attached as it is; a new one filled from the
    /// snapshot file `seed` when it is given and exists, else fresh.
    ///
    /// The fill writes a new region under a private temporary name in the
    /// same directory, with the snapshot's hash key, then links it to
    /// `region`: no process ever attaches to a half-filled region, and of
    /// several processes filling at once one wins and the others attach
    /// to its region. The snapshot must be of `config` (else
    /// [`SnapshotError::ConfigMismatch`]), of one limit (shared regions
    /// hold one). Errors of the region are [`SnapshotError::Limiter`]
    /// with [`crate::Error::Shared`].
    pub(crate) fn open_shared_seeded(
        region: &std::path::Path,
        config: Config,
        options: &crate::shared::SharedOptions,
        seed: Option<&std::path::Path>,
    ) -> Result<KeyedLimiter, SnapshotError> {
        let region = crate::shared::resolve(region);
        let attach = || {
            Ok(KeyedLimiter::open_shared_keyed(
                &region, config, options, None,
            )?)
        };
        if region.exists() {
            return attach();
        }
        let input = match seed.map(std::fs::File::open) {
            None => return attach(),
            Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => return attach(),
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(file)) => std::io::BufReader::new(file),
        };
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
        // A region linked meanwhile by another process wins: this one
        // attaches to it, its own fill unused.
        let linked = filled.and_then(|()| match std::fs::hard_link(&temp, &region) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(SnapshotError::Io(e)),
        });
        let _ = std::fs::remove_file(&temp);
        linked?;
        attach()
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

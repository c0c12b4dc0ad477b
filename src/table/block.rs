//! The keyed table for multi-word states (bucketed window, sliding log):
//! each place has an 8-byte header, eight to a 64-byte bucket, and a block
//! of words in a second array. The header holds the key's fingerprint and
//! the state's latch bit; a check latches the header *expecting its own
//! fingerprint*, so taking the latch also proves the place still belongs to
//! the key, and the block is then read and written under it.
//!
//! Per-key cost: 8 bytes of header plus the algorithm's block (bucketed
//! window: `8·(1 + ceil(N/2))` bytes; sliding log: `8·(3 + 2L)` bytes), times
//! 1.45 places per key of capacity, all allocated at construction.

use super::place::{Pass, Place, Took, Windows};
use super::storage::Storage;
use super::{FREED, Geometry, Home, KeyedTable, Shard, new_shards};
use crate::algorithm::{BlockAlgorithm, Words};
use crate::cell::fork::LATCHED;
use crate::cell::{LatchGuard, LatchedWords, latch};
use crate::check::decision::Decision;
use crate::clock::At;
use crate::config::{Error, Overflow};
use crate::memory::prefetch;
use crate::memory::{Residency, zeroed_words};
use crate::stats::Stats;
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::Relaxed;

/// Headers per 64-byte bucket.
const SLOTS: usize = 8;

/// Fingerprints leave the latch bit free.
const FINGERPRINT_BITS: u32 = 62;

pub(crate) struct BlockTable<A: BlockAlgorithm> {
    alg: A,
    geometry: Geometry,
    shards: Storage<CachePadded<Shard>>,
    headers: crate::memory::AlignedWords<AtomicU64>,
    blocks: crate::memory::AlignedWords<AtomicU64>,
    words: usize,
    capacity: u64,
    overflow: Overflow,
}

/// The fresh state, read-only: decisions for keys with no state. Writes are
/// dropped, and are never reached: a decision on it is only used when it
/// stores nothing (a peek or a denial).
struct Fresh;

impl Words for Fresh {
    fn get(&self, _: usize) -> u64 {
        0
    }
    fn set(&mut self, _: usize, _: u64) {}
}

impl<A: BlockAlgorithm> BlockTable<A> {
    pub(crate) fn new(alg: A, capacity: u64, overflow: Overflow) -> Result<Self, Error> {
        crate::cell::fork::install();
        let (geometry, shards) = Geometry::new(capacity, SLOTS as u64, FINGERPRINT_BITS);
        let places = geometry.buckets(shards) * SLOTS;
        let words = alg.words();
        let headers =
            zeroed_words(places, Residency::Now).map_err(|bytes| Error::OutOfMemory { bytes })?;
        let blocks = zeroed_words(places.saturating_mul(words), Residency::Now)
            .map_err(|bytes| Error::OutOfMemory { bytes })?;
        Ok(BlockTable {
            alg,
            geometry,
            shards: new_shards(shards),
            headers,
            blocks,
            words,
            capacity,
            overflow,
        })
    }

    pub(crate) fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub(crate) fn bytes(&self) -> usize {
        size_of_val(&*self.headers)
            + size_of_val(&*self.blocks)
            + size_of_val(&*self.shards)
            + size_of::<Self>()
    }

    pub(crate) fn stats(&self) -> Stats {
        super::stats(&self.shards, self.capacity, self.bytes())
    }

    fn block(&self, place: usize) -> LatchedWords<'_> {
        LatchedWords(&self.blocks[place * self.words..][..self.words])
    }

    /// The key's place, if it has one now. Stops at the first empty place:
    /// the key would be there or before (see "Places" in `table`).
    fn find(&self, home: Home) -> Option<usize> {
        for bucket in self.geometry.window(home) {
            for place in bucket * SLOTS..(bucket + 1) * SLOTS {
                let header = self.headers[place].load(Ordering::Relaxed) & !LATCHED;
                if header == home.fingerprint {
                    return Some(place);
                }
                if header == 0 {
                    return None;
                }
            }
        }
        None
    }

    /// The key's home bucket of headers is requested before the time is
    /// read from a clock, as in `WordTable::check`.
    pub(crate) fn check(&self, h: u64, at: impl At, n: u64) -> Decision {
        self.check_each(h, at, n, &mut [])
    }

    /// [`BlockTable::check`], writing each limit's own decision to `each`
    /// (several limits as one, `algorithm::all_of`).
    pub(crate) fn check_each(
        &self,
        h: u64,
        at: impl At,
        n: u64,
        each: &mut [Decision],
    ) -> Decision {
        self.check_as(&self.alg, h, at, n, each)
    }

    /// [`BlockTable::check_each`] deciding with `alg`, one of several
    /// tiers over the same layout (see `WordTable::check_as`).
    pub(crate) fn check_as<D: BlockAlgorithm>(
        &self,
        alg: &D,
        h: u64,
        at: impl At,
        n: u64,
        each: &mut [Decision],
    ) -> Decision {
        let home = self.geometry.home(h);
        let shard = &self.shards[home.shard];
        prefetch(&self.headers[home.bucket * SLOTS]);
        let t = at.ns();
        loop {
            if let Some(place) = self.find(home) {
                // Latching with our fingerprint fails if the place changed
                // owner since we found it: then look again.
                if let Ok(_latch) = latch(&self.headers[place], home.fingerprint) {
                    return alg.decide_each(&mut self.block(place), t, n, each);
                }
                crate::sync::saw(crate::sync::Race::Moved);
                continue;
            }
            if let Some(d) = self.insert(alg, home, shard, t, n, each) {
                return d;
            }
        }
    }

    /// The path of a key with no state; `None` if another thread placed the
    /// key meanwhile.
    fn insert<D: BlockAlgorithm>(
        &self,
        alg: &D,
        home: Home,
        shard: &Shard,
        t: u64,
        n: u64,
        each: &mut [Decision],
    ) -> Option<Decision> {
        let fresh = shard.unfound(alg.decide_each(&mut Fresh, t, n, each), t);
        if !fresh.allowed {
            return Some(fresh);
        }
        if n == 0 {
            // A peek: it stores nothing, but says what the cost-1 request
            // would be told, which on a full table failing closed is no.
            return Some(self.peek_new(home, fresh, t));
        }
        self.windows().place(
            shard,
            home,
            t,
            fresh,
            || self.find(home).is_some(),
            |i, pass| {
                let header = &self.headers[i];
                let owner = header.load(Ordering::Relaxed);
                let free = owner == 0 || owner == FREED;
                if pass == Pass::Free && !free {
                    return Place::Kept { frees_in: u64::MAX };
                }
                if pass == Pass::Evict && free {
                    // Free since the first pass (a reset): the next
                    // insert's first pass takes it.
                    return Place::Kept { frees_in: u64::MAX };
                }
                // Latch the place as it is (empty or another key's), so no
                // check of its owner runs while we judge and replace it.
                let Some(held) = Self::latch_as_is(header, owner) else {
                    crate::sync::saw(crate::sync::Race::PlaceContended);
                    return Place::Busy { frees_in: 1 };
                };
                let mut block = self.block(i);
                let took = if free {
                    Took::Free
                } else if self.alg.is_fresh_at(&block, t) {
                    Took::Fresh
                } else {
                    let frees_in = self.alg.fresh_after_ns(&mut block, t);
                    match pass {
                        Pass::Live { within } if frees_in <= within => Took::Live,
                        _ => return Place::Kept { frees_in },
                    }
                };
                if took != Took::Free {
                    shard.evicting_at(t);
                }
                self.alg.clear(&mut block);
                let decision = alg.decide_each(&mut block, t, n, each);
                held.release_as(home.fingerprint);
                Place::Taken { decision, took }
            },
        )
    }

    /// The latch of a place whose header read `owner`, unless it is held
    /// (being checked right now: it may be evictable once that check is
    /// done, so a retry soon may succeed; never "never", which would tell
    /// `acquire` the cost exceeds the limit) or changed meanwhile.
    fn latch_as_is(header: &AtomicU64, owner: u64) -> Option<LatchGuard<'_>> {
        match owner & LATCHED {
            0 => latch(header, owner).ok(),
            _ => None,
        }
    }

    /// The peek of a key not in the table, whose fresh decision admits
    /// (`place::Windows::peek`). Stores nothing; a state is judged under
    /// its latch, as `insert` does.
    #[cold]
    fn peek_new(&self, home: Home, fresh: Decision, t: u64) -> Decision {
        self.windows().peek(home, fresh, |i| {
            let header = &self.headers[i];
            let owner = header.load(Ordering::Relaxed);
            if owner == 0 || owner == FREED {
                return Ok(());
            }
            let Some(_held) = Self::latch_as_is(header, owner) else {
                return Err(1);
            };
            let mut block = self.block(i);
            if self.alg.is_fresh_at(&block, t) {
                return Ok(());
            }
            Err(self.alg.fresh_after_ns(&mut block, t))
        })
    }

    /// This table's windows, as placing a new key sees them.
    #[inline]
    fn windows(&self) -> Windows<'_> {
        Windows {
            geometry: &self.geometry,
            per_bucket: SLOTS,
            shared: false,
            overflow: self.overflow,
        }
    }

    /// Forgets the key's state, leaving a tombstone in its place. Returns
    /// whether it had one.
    pub(crate) fn reset(&self, h: u64) -> bool {
        let home = self.geometry.home(h);
        let shard = &self.shards[home.shard];
        let _latch = shard.lock(false);
        let Some(place) = self.find(home) else {
            return false;
        };
        let Ok(held) = latch(&self.headers[place], home.fingerprint) else {
            return false;
        };
        self.alg.clear(&mut self.block(place));
        held.release_as(FREED);
        shard.counters.tracked.fetch_sub(1, Relaxed);
        true
    }
}

/// What a snapshot (`crate::snapshot`) needs of the table: each key's
/// block read under its latch, so a saved state is one the key really had,
/// and places written on a table no other thread uses yet.
impl<A: BlockAlgorithm> BlockTable<A> {
    pub(crate) fn alg(&self) -> &A {
        &self.alg
    }

    /// Headers in the table (the positions a snapshot names).
    pub(crate) fn places(&self) -> usize {
        self.headers.len()
    }

    /// Runs `read(fingerprint, block)` on the key in place `i` while
    /// holding its latch (a check of that key waits meanwhile); nothing
    /// for an empty place or a tombstone.
    pub(crate) fn saved<R>(
        &self,
        i: usize,
        read: impl FnOnce(u64, &LatchedWords) -> R,
    ) -> Option<R> {
        let header = &self.headers[i];
        loop {
            let owner = header.load(Ordering::Relaxed) & !LATCHED;
            if owner <= FREED {
                return None;
            }
            // Fails only if the place changed owner meanwhile: look again.
            if let Ok(_latch) = latch(header, owner) {
                return Some(read(owner, &self.block(i)));
            }
        }
    }

    /// Restores a key into place `i`: `fill(index, block)` writes each
    /// saved word (see `BlockAlgorithm::saved_words`), then the block is
    /// checked. The empty places a lookup for the key may pass first become
    /// tombstones, as in `WordTable::restore`. Only for a table that no
    /// other thread uses yet, with places restored in increasing order.
    pub(crate) fn restore<E>(
        &self,
        i: usize,
        fingerprint: u64,
        mut fill: impl FnMut(usize, &[AtomicU64]) -> Result<(), E>,
    ) -> Result<Result<(), String>, E> {
        if fingerprint <= FREED || fingerprint >> FINGERPRINT_BITS != 0 {
            return Ok(Err("a fingerprint no key has".into()));
        }
        let block = self.block(i);
        self.alg.clear(&mut self.block(i));
        let mut result = Ok(());
        self.alg.saved_words(&block, &mut |index| {
            if result.is_ok() {
                result = fill(index, block.0);
            }
        });
        result?;
        if let Err(e) = self.alg.validate(&block) {
            return Ok(Err(format!(
                "a state the algorithm cannot have stored: {e}"
            )));
        }
        let bucket = i / SLOTS;
        // A load first: most of these places are taken (see WordTable::restore).
        let fill_empty = |header: &AtomicU64| {
            if header.load(Ordering::Relaxed) == 0 {
                let _ = header.compare_exchange(0, FREED, Ordering::Relaxed, Ordering::Relaxed);
            }
        };
        self.headers[bucket * SLOTS..i].iter().for_each(fill_empty);
        for before in self.geometry.reaching(bucket) {
            self.headers[before * SLOTS..][..SLOTS]
                .iter()
                .for_each(fill_empty);
        }
        self.headers[i].store(fingerprint, Ordering::Release);
        let shard = &self.shards[self.geometry.shard_of(bucket)];
        shard.counters.tracked.fetch_add(1, Relaxed);
        Ok(Ok(()))
    }
}

impl<A: BlockAlgorithm> KeyedTable for BlockTable<A> {
    /// The home bucket of headers (the block is found through it).
    #[inline]
    fn prefetch(&self, h: u64) {
        let home = self.geometry.home(h);
        prefetch(&self.headers[home.bucket * SLOTS]);
    }

    /// Only the leaky bucket queues, and it is a word table: a block
    /// algorithm never waits, so nothing is ever refused for `max_wait`.
    #[inline]
    fn decide(&self, h: u64, at: impl At, n: u64, _max_wait: u64) -> (Decision, bool) {
        (self.check(h, at, n), true)
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;
    use crate::algorithm::bucketed_window::BucketedWindow;
    use crate::config::{Algorithm, Config};

    const T0: u64 = 1_000_000_000_000;

    #[test]
    fn every_bucket_of_headers_is_one_whole_cache_line() {
        let p = Config::new(Algorithm::BucketedWindow, 3, 3_600_000_000_000)
            .sub_windows(4)
            .params()
            .unwrap();
        for capacity in [1, 16, 1000, 100_000] {
            let table = BlockTable::new(BucketedWindow::new(&p), capacity, Overflow::Deny).unwrap();
            assert_eq!(SLOTS * size_of::<AtomicU64>(), crate::memory::LINE);
            for bucket in table.headers.chunks(SLOTS) {
                assert_eq!(
                    bucket.as_ptr() as usize % crate::memory::LINE,
                    0,
                    "capacity {capacity}"
                );
            }
            assert_eq!(table.blocks.as_ptr() as usize % crate::memory::LINE, 0);
        }
    }

    /// An overflow whose every candidate place is latched (being checked
    /// by other threads) must not answer "never" (`u64::MAX`), which
    /// `acquire` reads as a cost above the limit: the places may be
    /// evictable once those checks end.
    #[test]
    fn an_overflow_among_latched_places_can_be_retried() {
        let p = Config::new(Algorithm::BucketedWindow, 3, 3_600_000_000_000)
            .sub_windows(1)
            .params()
            .unwrap();
        // Capacity 1: one shard of one bucket of eight places.
        let table = BlockTable::new(BucketedWindow::new(&p), 1, Overflow::Deny).unwrap();
        assert_eq!(table.headers.len(), SLOTS);
        let hashes: Vec<u64> = (1..=SLOTS as u64 + 1).map(|i| i << 32).collect();
        for &h in &hashes[..SLOTS] {
            assert!(table.check(h, T0, 1).allowed);
        }
        for header in &*table.headers {
            header.fetch_or(LATCHED, Ordering::Relaxed);
        }
        let d = table.check(hashes[SLOTS], T0, 1);
        for header in &*table.headers {
            header.fetch_and(!LATCHED, Ordering::Relaxed);
        }
        assert!(!d.allowed, "no room");
        assert!(
            d.retry_after_ns >= 1 && d.retry_after_ns < u64::MAX,
            "retry_after_ns = {}",
            d.retry_after_ns
        );
    }
}

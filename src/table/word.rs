//! The keyed table for single-word states: each slot is one 128-bit word,
//! the fingerprint in its top bits and the packed state in its bottom bits,
//! so the CAS that updates a state also proves the slot still belongs to the
//! key. The fingerprint sits at the top whatever its width, so whether a
//! slot is the key's is one 64-bit mask and compare on the high half.
//!
//! A slot is 16 bytes; four fill a 64-byte bucket. Empty is the all-zero
//! word (a fingerprint is never 0); a tombstone is the fingerprint
//! [`FREED`] over a zero state.

use super::place::{Pass, Place, Took, Windows};
use super::storage::Storage;
use super::{FREED, Geometry, Home, KeyedTable, Shard, new_shards};
use crate::algorithm::{Visit, WordAlgorithm, mask, packed_validate};
use crate::cell::{AtomicWord, cas_loop_from};
use crate::check::decision::{Decision, Words};
use crate::clock::At;
use crate::config::{ConfigError, Error, Field, Overflow};
use crate::memory::prefetch;
use crate::memory::{Residency, zeroed_wide_words};
use crate::stats::Stats;
use crate::sync::SlotU128;
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::Relaxed;

/// Slots per 64-byte bucket.
const SLOTS: usize = 4;

/// The fewest fingerprint bits a configuration may leave (see the module
/// doc of `table` for what that means in collisions).
pub(crate) const MIN_FINGERPRINT_BITS: u32 = 32;

pub(crate) struct WordTable<A: WordAlgorithm> {
    alg: A,
    geometry: Geometry,
    shards: Storage<CachePadded<Shard>>,
    slots: Storage<SlotU128>,
    /// Whether the table lies in a region shared between processes (how a
    /// shard latch's holder is judged: `Shard::lock`).
    shared: bool,
    /// The bits of a slot that hold the state.
    state_mask: u128,
    /// The bits of a slot's high half that hold the owner's fingerprint.
    owner_mask: u64,
    /// How far a fingerprint is shifted up to the top of the high half.
    fingerprint_shift: u32,
    capacity: u64,
    overflow: Overflow,
}

/// [`WordTable::check_as`]'s check, run with the algorithm's concrete form.
struct CheckAs<'a, A: WordAlgorithm, T: At> {
    table: &'a WordTable<A>,
    h: u64,
    at: T,
    n: u64,
    max_wait: u64,
    each: &'a mut [Decision],
}

impl<A: WordAlgorithm, T: At> Visit<A::State> for CheckAs<'_, A, T> {
    type Out = (Decision, bool);
    #[allow(
        clippy::inline_always,
        reason = "a transparent call, as WordAlgorithm::with_concrete"
    )]
    #[inline(always)]
    fn visit<D: WordAlgorithm<State = A::State>>(self, alg: &D) -> (Decision, bool) {
        let CheckAs {
            table,
            h,
            at,
            n,
            max_wait,
            each,
        } = self;
        table.check_concrete(alg, h, at, n, max_wait, each)
    }
}

/// What happened to a check.
enum Outcome {
    Done(Decision, bool),
    /// The slot changed owner under us: look again.
    Moved,
}

impl<A: WordAlgorithm> WordTable<A> {
    pub(crate) fn new(alg: A, capacity: u64, overflow: Overflow) -> Result<Self, Error> {
        WordTable::new_in(alg, capacity, overflow, |shards, slots| {
            let slots = zeroed_wide_words(slots, Residency::Now)
                .map_err(|bytes| Error::OutOfMemory { bytes })?;
            Ok((new_shards(shards), slots.into(), false))
        })
    }

    /// A table whose shards and slots come from `storage(shards, slots)`,
    /// which returns them (all zero for a new table) and whether they lie
    /// in a region shared between processes (`crate::shared`).
    pub(crate) fn new_in(
        alg: A,
        capacity: u64,
        overflow: Overflow,
        storage: impl FnOnce(
            usize,
            usize,
        )
            -> Result<(Storage<CachePadded<Shard>>, Storage<SlotU128>, bool), Error>,
    ) -> Result<Self, Error> {
        let state_bits = alg.state_bits();
        let fingerprint_bits = (128 - state_bits).min(64);
        if fingerprint_bits < MIN_FINGERPRINT_BITS {
            return Err(ConfigError {
                field: Field::Limit,
                message: format!(
                    "this limit and period need {state_bits} bits of state per key, which leaves {fingerprint_bits} bits of the 128-bit slot for the key's fingerprint; a keyed limiter needs {MIN_FINGERPRINT_BITS} (lower the limit, or lengthen the period)"
                ),
            }
            .into());
        }
        let (geometry, shards) = Geometry::new(capacity, SLOTS as u64, fingerprint_bits);
        let len = geometry.buckets(shards) * SLOTS;
        let (shards, slots, shared) = storage(shards, len)?;
        assert!(slots.len() == len && shards.len() == geometry.shards as usize);
        Ok(WordTable {
            alg,
            geometry,
            shards,
            slots,
            shared,
            state_mask: mask(state_bits),
            owner_mask: u64::MAX << (64 - fingerprint_bits),
            fingerprint_shift: 64 - fingerprint_bits,
            capacity,
            overflow,
        })
    }

    pub(crate) fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub(crate) fn bytes(&self) -> usize {
        size_of_val(&*self.slots) + size_of_val(&*self.shards) + size_of::<Self>()
    }

    pub(crate) fn stats(&self) -> Stats {
        super::stats(&self.shards, self.capacity, self.bytes())
    }

    /// The owner bits (of the high half) of a slot holding a state of the
    /// key with this fingerprint. Never 0 (a fingerprint is never 0), so a
    /// slot whose owner bits equal a tag is not empty.
    #[inline]
    fn tag(&self, fingerprint: u64) -> u64 {
        fingerprint << self.fingerprint_shift
    }

    /// The word a reset leaves: a tombstone.
    #[inline]
    fn freed(&self) -> u128 {
        u128::from(self.tag(FREED)) << 64
    }

    #[inline]
    fn owned_by(&self, word: u128, tag: u64) -> bool {
        (word >> 64) as u64 & self.owner_mask == tag
    }

    #[inline]
    fn state(&self, word: u128) -> A::State {
        self.alg.unpack(word & self.state_mask)
    }

    #[inline]
    fn word(&self, tag: u64, state: A::State) -> u128 {
        (u128::from(tag) << 64) | self.alg.pack(state)
    }

    /// The key's slot and the word just loaded from it, if it has one now.
    /// Stops at the first empty slot: the key would be there or before (see
    /// "Places" in `table`).
    #[inline]
    fn find(&self, home: Home, tag: u64) -> Option<(&SlotU128, u128)> {
        for bucket in self.geometry.window(home) {
            for slot in &self.slots[bucket * SLOTS..][..SLOTS] {
                let word = slot.load_word();
                if self.owned_by(word, tag) {
                    return Some((slot, word));
                }
                if word == 0 {
                    return None;
                }
            }
        }
        None
    }

    /// Decides a request for the key hashed to `h`; an admission whose
    /// queue wait exceeds `max_wait` is refused (see `WordCell::decide`).
    /// Returns whether the decision was taken (not refused); the caller
    /// counts it (a batch counts once for all its keys).
    ///
    /// The common case, a key in its home bucket or the next whose first
    /// CAS succeeds (nine keys in ten are in the home bucket at the fullest
    /// sizing), is this function alone; every other case (further buckets,
    /// a new key, a lost CAS) goes to
    /// [`WordTable::check_beyond_home`], kept out of line so that what the
    /// common case runs is short.
    ///
    /// The home bucket is requested from memory before the time is read
    /// from a clock. A TSC read waits for the loads before it: read first,
    /// it holds the bucket's miss back until it is done; after a load of
    /// the bucket, it waits the miss out. Prefetched, the miss runs during
    /// the read. (The measurements behind both choices are in
    /// docs/ARCHITECTURE.md, "Why the keyed check is shaped as it is".)
    #[allow(clippy::inline_always, reason = "see check_concrete")]
    #[inline(always)]
    pub(crate) fn check(&self, h: u64, at: impl At, n: u64, max_wait: u64) -> (Decision, bool) {
        self.check_each(h, at, n, max_wait, &mut [])
    }

    /// [`WordTable::check`], writing each limit's own decision to `each`
    /// (several limits as one, `algorithm::all_of`).
    #[allow(clippy::inline_always, reason = "see check_concrete")]
    #[inline(always)]
    pub(crate) fn check_each(
        &self,
        h: u64,
        at: impl At,
        n: u64,
        max_wait: u64,
        each: &mut [Decision],
    ) -> (Decision, bool) {
        self.check_as(&self.alg, h, at, n, max_wait, each)
    }

    /// [`WordTable::check_each`] deciding with `alg` instead of the
    /// table's own algorithm: one of several tiers that read the same
    /// state layout (`crate::policy::tiers`). Eviction still asks the table's
    /// algorithm whether a state may be dropped.
    #[allow(clippy::inline_always, reason = "see check_concrete")]
    #[inline(always)]
    pub(crate) fn check_as<D: WordAlgorithm<State = A::State>>(
        &self,
        alg: &D,
        h: u64,
        at: impl At,
        n: u64,
        max_wait: u64,
        each: &mut [Decision],
    ) -> (Decision, bool) {
        alg.with_concrete(CheckAs {
            table: self,
            h,
            at,
            n,
            max_wait,
            each,
        })
    }

    /// [`WordTable::check_as`] with the algorithm's concrete form
    /// ([`WordAlgorithm::with_concrete`]).
    ///
    /// Always inlined, as is everything from [`KeyedTable::decide`] down to
    /// here: a two-limit table's check is one copy of this per pair of
    /// rules, and left to the inliner one level of it was kept out of line
    /// (a different level at each try), the decision then returned through
    /// the stack and copied in 16-byte moves over 8-byte stores: a failed
    /// store-to-load forward per check.
    #[allow(clippy::inline_always, reason = "see above")]
    #[inline(always)]
    fn check_concrete<D: WordAlgorithm<State = A::State>>(
        &self,
        alg: &D,
        h: u64,
        at: impl At,
        n: u64,
        max_wait: u64,
        each: &mut [Decision],
    ) -> (Decision, bool) {
        let home = self.geometry.home(h);
        let tag = self.tag(home.fingerprint);
        let bucket = &self.slots[home.bucket * SLOTS..][..SLOTS];
        prefetch(&raw const bucket[0]);
        let t = at.ns();
        let mut last = 0;
        for slot in bucket {
            let word = slot.load_word();
            if self.owned_by(word, tag) {
                return self.update_or_search(alg, slot, word, home, tag, t, n, max_wait, each);
            }
            last = word;
        }
        // The second bucket of the window, where about one key in ten
        // lives, when the home bucket is full: a bucket's empty places
        // are the last ones (a key takes the first free place of its
        // window, and a taken place is never empty again), so its last
        // word says whether a lookup (`find`) would have stopped there.
        // Inline, those keys skip `check_beyond_home`, its call and its
        // second pass over the home bucket; nothing is added before the
        // home bucket's hit. (Testing every home word for 0 instead, so as
        // to stop early, puts more instructions behind the slot's load,
        // which over a large table is the check's wait.)
        if last != 0 {
            for slot in &self.slots[self.geometry.second(home) * SLOTS..][..SLOTS] {
                let word = slot.load_word();
                if self.owned_by(word, tag) {
                    return self.update_or_search(alg, slot, word, home, tag, t, n, max_wait, each);
                }
            }
        }
        let (words, taken) = self.check_beyond_home(alg, home, tag, t, n, max_wait, each);
        (words.decision(), taken)
    }

    /// The update of the key's `slot`, found holding `word`, with one CAS;
    /// [`WordTable::check_beyond_home`] if the CAS is lost.
    #[allow(clippy::inline_always, reason = "see check_concrete")]
    #[inline(always)]
    #[allow(
        clippy::too_many_arguments,
        reason = "the check's inputs, passed down unchanged"
    )]
    fn update_or_search<D: WordAlgorithm<State = A::State>>(
        &self,
        alg: &D,
        slot: &SlotU128,
        word: u128,
        home: Home,
        tag: u64,
        t: u64,
        n: u64,
        max_wait: u64,
        each: &mut [Decision],
    ) -> (Decision, bool) {
        // A lost CAS (another thread changed the slot) takes the
        // long way, which starts from a fresh load.
        if let (Outcome::Done(d, taken), next) = self.step(alg, word, tag, t, n, max_wait, each) {
            if next.is_none_or(|next| slot.cas_word(word, next).is_ok()) {
                return (d, taken);
            }
            crate::sync::saw(crate::sync::Race::CasLost);
        }
        let (words, taken) = self.check_beyond_home(alg, home, tag, t, n, max_wait, each);
        (words.decision(), taken)
    }

    /// The full check: the whole probe window, the update retried until its
    /// CAS succeeds, and the insert of a new key.
    ///
    /// Its decision comes back as words (`decision::Words`, rebuilt field
    /// by field by the inlined caller): returned as a `Decision`, the
    /// caller's inline paths wrote theirs to the same place in memory,
    /// and the benchmark's copy of it read 16 bytes over two 8-byte
    /// stores, a failed store-to-load forward on every check.
    #[cold]
    #[inline(never)]
    #[allow(
        clippy::too_many_arguments,
        reason = "the check's inputs, passed down unchanged"
    )]
    fn check_beyond_home<D: WordAlgorithm<State = A::State>>(
        &self,
        alg: &D,
        home: Home,
        tag: u64,
        t: u64,
        n: u64,
        max_wait: u64,
        each: &mut [Decision],
    ) -> (Words, bool) {
        loop {
            if let Some((slot, word)) = self.find(home, tag) {
                match cas_loop_from(slot, word, |word| {
                    self.step(alg, word, tag, t, n, max_wait, each)
                }) {
                    Outcome::Done(d, taken) => return (Words::of(d), taken),
                    Outcome::Moved => continue,
                }
            }
            match self.insert(alg, home, tag, t, n, max_wait, each) {
                Outcome::Done(d, taken) => return (Words::of(d), taken),
                // Placed or evicted by another thread meanwhile: look again.
                Outcome::Moved => {}
            }
        }
    }

    /// One step of the update of the key's slot holding `word`: the
    /// decision, and the word to install (`None`: nothing to write).
    #[allow(clippy::inline_always, reason = "see check_concrete")]
    #[inline(always)]
    #[allow(
        clippy::too_many_arguments,
        reason = "the check's inputs, passed down unchanged"
    )]
    fn step<D: WordAlgorithm<State = A::State>>(
        &self,
        alg: &D,
        word: u128,
        tag: u64,
        t: u64,
        n: u64,
        max_wait: u64,
        each: &mut [Decision],
    ) -> (Outcome, Option<u128>) {
        if !self.owned_by(word, tag) {
            crate::sync::saw(crate::sync::Race::Moved);
            return (Outcome::Moved, None);
        }
        let (d, next) = alg.decide_each(self.state(word), t, n, each);
        if d.allowed && d.wait_ns > max_wait {
            return (Outcome::Done(d, false), None);
        }
        (Outcome::Done(d, true), next.map(|s| self.word(tag, s)))
    }

    /// The path of a key with no state: decide on the fresh state, and
    /// place the key (`place`) only if there is a state to store.
    #[cold]
    #[allow(
        clippy::too_many_arguments,
        reason = "the check's inputs, passed down unchanged"
    )]
    fn insert<D: WordAlgorithm<State = A::State>>(
        &self,
        alg: &D,
        home: Home,
        tag: u64,
        t: u64,
        n: u64,
        max_wait: u64,
        each: &mut [Decision],
    ) -> Outcome {
        let shard = &self.shards[home.shard];
        let (fresh, next) = alg.decide_each(A::State::default(), t, n, each);
        let fresh = shard.unfound(fresh, t);
        if !fresh.allowed {
            return Outcome::Done(fresh, true);
        }
        if fresh.wait_ns > max_wait {
            return Outcome::Done(fresh, false);
        }
        let Some(next) = next else {
            // A peek: it stores nothing, but says what the cost-1 request
            // would be told, which on a full table failing closed is no.
            return Outcome::Done(self.peek_new(home, fresh, t), true);
        };
        let new = self.word(tag, next);
        let placed = self.windows().place(
            shard,
            home,
            t,
            fresh,
            || self.find(home, tag).is_some(),
            |i, pass| {
                let slot = &self.slots[i];
                let mut word = slot.load_word();
                loop {
                    let took = if word == 0 || word == self.freed() {
                        Took::Free
                    } else if pass == Pass::Free {
                        return Place::Kept { frees_in: u64::MAX };
                    } else if self.alg.is_fresh_at(self.state(word), t) {
                        Took::Fresh
                    } else {
                        let frees_in = self.alg.fresh_after_ns(self.state(word), t);
                        match pass {
                            Pass::Live { within } if frees_in <= within => Took::Live,
                            _ => return Place::Kept { frees_in },
                        }
                    };
                    if took != Took::Free {
                        shard.evicting_at(t);
                    }
                    // One CAS from the exact word judged: a state updated
                    // meanwhile makes it fail, and is judged again.
                    match slot.cas_word(word, new) {
                        Ok(()) => {
                            return Place::Taken {
                                decision: fresh,
                                took,
                            };
                        }
                        Err(found) => {
                            crate::sync::saw(crate::sync::Race::PlaceContended);
                            word = found;
                        }
                    }
                }
            },
        );
        // `None`: placed or evicted by another thread meanwhile.
        placed.map_or(Outcome::Moved, |d| Outcome::Done(d, true))
    }

    /// The peek of a key not in the table, whose fresh decision admits
    /// (`place::Windows::peek`). Reads only.
    #[cold]
    fn peek_new(&self, home: Home, fresh: Decision, t: u64) -> Decision {
        self.windows().peek(home, fresh, |i| {
            let word = self.slots[i].load_word();
            if word == 0 || word == self.freed() || self.alg.is_fresh_at(self.state(word), t) {
                return Ok(());
            }
            Err(self.alg.fresh_after_ns(self.state(word), t))
        })
    }

    /// This table's windows, as placing a new key sees them.
    #[inline]
    fn windows(&self) -> Windows<'_> {
        Windows {
            geometry: &self.geometry,
            per_bucket: SLOTS,
            shared: self.shared,
            overflow: self.overflow,
        }
    }

    /// Forgets the key's state, leaving a tombstone in its place. Returns
    /// whether it had one.
    pub(crate) fn reset(&self, h: u64) -> bool {
        let home = self.geometry.home(h);
        let tag = self.tag(home.fingerprint);
        let shard = &self.shards[home.shard];
        let _latch = shard.lock(self.shared);
        let Some((slot, word)) = self.find(home, tag) else {
            return false;
        };
        // Under the shard latch nobody else moves this key; its updaters
        // may still change the state, which the loop re-reads.
        let removed = cas_loop_from(slot, word, |word| {
            if self.owned_by(word, tag) {
                (true, Some(self.freed()))
            } else {
                (false, None)
            }
        });
        if removed {
            shard.counters.tracked.fetch_sub(1, Relaxed);
        }
        removed
    }
}

/// What a snapshot (`crate::snapshot`) needs of the table: each place read
/// with one atomic load, so a saved state is one its key really had, and
/// places written on a table no other thread uses yet.
impl<A: WordAlgorithm> WordTable<A> {
    pub(crate) fn alg(&self) -> &A {
        &self.alg
    }

    /// Slots in the table (the positions a snapshot names).
    pub(crate) fn places(&self) -> usize {
        self.slots.len()
    }

    /// The fingerprint and packed state of the key in slot `i`, from one
    /// 128-bit load; `None` for an empty slot or a tombstone.
    pub(crate) fn saved(&self, i: usize) -> Option<(u64, u128)> {
        let word = self.slots[i].load_word();
        let fingerprint = ((word >> 64) as u64 & self.owner_mask) >> self.fingerprint_shift;
        (fingerprint > FREED).then_some((fingerprint, word & self.state_mask))
    }

    /// Puts a restored key's packed state in slot `i`. Every empty slot a
    /// lookup for the key may pass first (its bucket's slots before `i`,
    /// and the buckets whose window reaches it) becomes a tombstone, so the
    /// lookup cannot stop short of it: a snapshot leaves out empty and
    /// fresh places, and the ones it left out before a key were not empty.
    /// Only for a table that no other thread uses yet, with slots restored
    /// in increasing order. Refuses (naming the fault) a fingerprint no key
    /// has or a state this algorithm could not have stored.
    pub(crate) fn restore(&self, i: usize, fingerprint: u64, packed: u128) -> Result<(), String> {
        let bits = self.geometry.fingerprint_bits();
        if fingerprint <= FREED || (bits < 64 && fingerprint >> bits != 0) {
            return Err("a fingerprint no key has".into());
        }
        if packed & !self.state_mask != 0 {
            return Err(format!(
                "a state with bits beyond the slot's state: {packed:#x}"
            ));
        }
        packed_validate(&self.alg, packed)
            .map_err(|e| format!("a state the algorithm cannot have stored: {e}"))?;
        let state = self.alg.unpack(packed);
        let bucket = i / SLOTS;
        let freed = self.freed();
        // A load first: most of these places are taken, and a CAS on each
        // (a locked 16-byte instruction) made restoring a million keys take
        // 15 s instead of well under one.
        let fill = |slot: &SlotU128| {
            if slot.load_word() == 0 {
                cas_loop_from(slot, 0, |w| ((), (w == 0).then_some(freed)));
            }
        };
        self.slots[bucket * SLOTS..i].iter().for_each(fill);
        for before in self.geometry.reaching(bucket) {
            self.slots[before * SLOTS..][..SLOTS].iter().for_each(fill);
        }
        let word = self.word(self.tag(fingerprint), state);
        cas_loop_from(&self.slots[i], self.slots[i].load_word(), |_| {
            ((), Some(word))
        });
        let shard = &self.shards[self.geometry.shard_of(bucket)];
        shard.counters.tracked.fetch_add(1, Relaxed);
        Ok(())
    }
}

impl<A: WordAlgorithm> KeyedTable for WordTable<A> {
    /// The home bucket, and the next: one key in fifteen lives there
    /// (about 7 % at 69 % load, the fullest the sizing allows).
    #[inline]
    fn prefetch(&self, h: u64) {
        let home = self.geometry.home(h);
        prefetch(&raw const self.slots[home.bucket * SLOTS]);
        if let Some(next) = self.slots.get((home.bucket + 1) * SLOTS) {
            prefetch(next);
        }
    }

    #[allow(clippy::inline_always, reason = "see WordTable::check_concrete")]
    #[inline(always)]
    fn decide(&self, h: u64, at: impl At, n: u64, max_wait: u64) -> (Decision, bool) {
        self.check(h, at, n, max_wait)
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;
    use crate::algorithm::gcra::Gcra;
    use crate::config::{Algorithm, Config};

    const T0: u64 = 1_000_000_000_000;

    /// A GCRA table, 3 per hour, for 16 keys: one shard of several buckets.
    fn table() -> WordTable<Gcra> {
        let p = Config::new(Algorithm::Gcra, 3, 3_600_000_000_000)
            .params()
            .unwrap();
        WordTable::new(Gcra::new(&p, false), 16, Overflow::Deny).unwrap()
    }

    /// Hashes of `n` keys whose home is bucket 0 (the low 32 bits pick the
    /// bucket), with distinct fingerprints.
    fn crowd(table: &WordTable<Gcra>, n: u64) -> Vec<u64> {
        let hashes: Vec<u64> = (1..=n).map(|i| i << 32).collect();
        let mut fingerprints: Vec<u64> = hashes
            .iter()
            .map(|&h| table.geometry.home(h).fingerprint)
            .collect();
        fingerprints.sort();
        fingerprints.dedup();
        assert_eq!(fingerprints.len(), n as usize);
        assert!(hashes.iter().all(|&h| table.geometry.home(h).bucket == 0));
        hashes
    }

    fn remaining(table: &WordTable<Gcra>, h: u64) -> u64 {
        table.check(h, T0, 0, u64::MAX).0.remaining
    }

    #[test]
    fn every_bucket_is_one_whole_cache_line() {
        for capacity in [1, 16, 1000, 100_000] {
            let p = Config::new(Algorithm::Gcra, 3, 3_600_000_000_000)
                .params()
                .unwrap();
            let table = WordTable::new(Gcra::new(&p, false), capacity, Overflow::Deny).unwrap();
            assert_eq!(SLOTS * size_of::<SlotU128>(), crate::memory::LINE);
            for bucket in table.slots.chunks(SLOTS) {
                assert_eq!(
                    bucket.as_ptr() as usize % crate::memory::LINE,
                    0,
                    "capacity {capacity}"
                );
            }
        }
    }

    #[test]
    fn a_key_past_a_tombstone_is_still_found() {
        let table = table();
        // Six keys with one home bucket of four slots: two spill into the
        // next bucket.
        let keys = crowd(&table, 7);
        for &h in &keys[..6] {
            assert!(table.check(h, T0, 1, u64::MAX).0.allowed);
        }
        assert!(table.reset(keys[1]), "a placed key has a state");
        assert!(!table.reset(keys[1]), "a reset key has none");
        assert_eq!(table.stats().keys_tracked, 5);
        // The tombstone in the home bucket does not end the search for the
        // keys placed after it.
        for &h in &keys[4..6] {
            assert_eq!(remaining(&table, h), 2, "the spilled key kept its state");
        }
        assert_eq!(remaining(&table, keys[1]), 3, "the reset key is fresh");
        // A new key takes the tombstone's place, as it would an empty one.
        assert!(table.check(keys[6], T0, 1, u64::MAX).0.allowed);
        let stats = table.stats();
        assert_eq!((stats.keys_tracked, stats.evictions), (6, 0));
        let home = table.geometry.home(keys[6]);
        let tag = table.tag(home.fingerprint);
        assert!(
            table.slots[..SLOTS]
                .iter()
                .any(|slot| table.owned_by(slot.load_word(), tag)),
            "the new key lives in its home bucket, where the tombstone was"
        );
        for &h in &keys[4..6] {
            assert_eq!(remaining(&table, h), 2);
        }
    }
}

//! The keyed table for single-word states: each slot is one 128-bit word,
//! the fingerprint in the high bits above the packed state, so the CAS that
//! updates a state also proves the slot still belongs to the key.
//!
//! A slot is 16 bytes; four fill a 64-byte bucket. Empty is the all-zero
//! word (a fingerprint is never 0).

use super::{Geometry, Home, Shard, new_shards, prefetch};
use crate::algorithm::{WordAlgorithm, mask};
use crate::cell::{AtomicWord, cas_loop, latch};
use crate::config::{ConfigError, Error, Field};
use crate::decision::Decision;
use crate::stats::{CheckCounters, Stats};
use crate::sync::{AtomicU128, Residency, zeroed_wide_words};
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
    shards: Box<[CachePadded<Shard>]>,
    checks: CheckCounters,
    slots: Box<[AtomicU128]>,
    state_bits: u32,
    capacity: u64,
    allow_overflow: bool,
}

/// What happened to a check.
enum Outcome {
    Done(Decision, bool),
    /// The slot changed owner under us: look again.
    Moved,
}

impl<A: WordAlgorithm> WordTable<A> {
    pub(crate) fn new(alg: A, capacity: u64, allow_overflow: bool) -> Result<Self, Error> {
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
        let slots =
            zeroed_wide_words(len, Residency::Now).map_err(|bytes| Error::OutOfMemory { bytes })?;
        Ok(WordTable {
            alg,
            geometry,
            shards: new_shards(shards),
            checks: CheckCounters::default(),
            slots,
            state_bits,
            capacity,
            allow_overflow,
        })
    }

    pub(crate) fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub(crate) fn bytes(&self) -> usize {
        size_of_val(&*self.slots) + size_of_val(&*self.shards) + size_of::<Self>()
    }

    pub(crate) fn stats(&self) -> Stats {
        super::stats(&self.checks, &self.shards, self.capacity, self.bytes())
    }

    #[inline]
    fn owner(&self, word: u128) -> u64 {
        (word >> self.state_bits) as u64
    }

    #[inline]
    fn state(&self, word: u128) -> A::State {
        self.alg.unpack(word & mask(self.state_bits))
    }

    #[inline]
    fn word(&self, fingerprint: u64, state: A::State) -> u128 {
        (u128::from(fingerprint) << self.state_bits) | self.alg.pack(state)
    }

    /// The key's slot, if it has one now.
    #[inline]
    fn find(&self, home: Home) -> Option<&AtomicU128> {
        for bucket in self.geometry.window(home) {
            for slot in &self.slots[bucket * SLOTS..][..SLOTS] {
                let word = slot.load_word();
                if word != 0 && self.owner(word) == home.fingerprint {
                    return Some(slot);
                }
            }
        }
        None
    }

    /// Starts loading the key's home bucket (batch checks).
    #[inline]
    pub(crate) fn prefetch(&self, h: u64) {
        let home = self.geometry.home(h);
        prefetch(&self.slots[home.bucket * SLOTS]);
    }

    /// Decides a request for the key hashed to `h`; an admission whose
    /// queue wait exceeds `max_wait` is refused (see `WordCell::decide`).
    #[inline]
    pub(crate) fn check(&self, h: u64, t: u64, n: u64, max_wait: u64) -> (Decision, bool) {
        let home = self.geometry.home(h);
        let shard = &self.shards[home.shard];
        let (decision, taken) = loop {
            if let Some(slot) = self.find(home) {
                match self.update(slot, home.fingerprint, t, n, max_wait) {
                    Outcome::Done(d, taken) => break (d, taken),
                    Outcome::Moved => continue,
                }
            }
            match self.insert(home, shard, t, n, max_wait) {
                Outcome::Done(d, taken) => break (d, taken),
                Outcome::Moved => continue,
            }
        };
        if taken {
            self.checks.record(decision.allowed);
        }
        (decision, taken)
    }

    #[inline]
    fn update(
        &self,
        slot: &AtomicU128,
        fingerprint: u64,
        t: u64,
        n: u64,
        max_wait: u64,
    ) -> Outcome {
        cas_loop(slot, |word| {
            if word == 0 || self.owner(word) != fingerprint {
                return (Outcome::Moved, None);
            }
            let (d, next) = self.alg.decide(self.state(word), t, n);
            if d.allowed && d.wait_ns > max_wait {
                return (Outcome::Done(d, false), None);
            }
            (
                Outcome::Done(d, true),
                next.map(|s| self.word(fingerprint, s)),
            )
        })
    }

    /// The path of a key with no state: decide on the fresh state, and
    /// place the key only if there is a state to store.
    fn insert(&self, home: Home, shard: &Shard, t: u64, n: u64, max_wait: u64) -> Outcome {
        let (fresh, next) = self.alg.decide(A::State::default(), t, n);
        if fresh.allowed && fresh.wait_ns > max_wait {
            return Outcome::Done(fresh, false);
        }
        let Some(next) = next else {
            return Outcome::Done(fresh, true);
        };
        let _latch = latch(&shard.latch, 0).expect("a shard latch holds only 0 or LATCHED");
        if self.find(home).is_some() {
            // Another thread placed this key since we looked.
            return Outcome::Moved;
        }
        let new = self.word(home.fingerprint, next);
        // An empty place anywhere in the window first; only when there is
        // none, the first state equivalent to fresh. Dropping a state is
        // lossless only for times from `t` on, so it is never done while a
        // free place exists.
        let mut frees_in = u64::MAX;
        for evict in [false, true] {
            for bucket in self.geometry.window(home) {
                for slot in &self.slots[bucket * SLOTS..][..SLOTS] {
                    let mut word = slot.load_word();
                    loop {
                        let evicting = word != 0;
                        if evicting && !(evict && self.alg.is_fresh_at(self.state(word), t)) {
                            if evict {
                                let (peek, _) = self.alg.decide(self.state(word), t, 0);
                                frees_in = frees_in.min(peek.reset_after_ns);
                            }
                            break;
                        }
                        match slot.cas_word(word, new) {
                            Ok(()) => {
                                let counter = if evicting {
                                    &shard.counters.evictions
                                } else {
                                    &shard.counters.tracked
                                };
                                counter.fetch_add(1, Relaxed);
                                return Outcome::Done(fresh, true);
                            }
                            // Updated or taken meanwhile: judge it again.
                            Err(found) => word = found,
                        }
                    }
                }
            }
        }
        shard.counters.overflows.fetch_add(1, Relaxed);
        if self.allow_overflow {
            return Outcome::Done(fresh, true);
        }
        Outcome::Done(
            Decision {
                allowed: false,
                remaining: 0,
                retry_after_ns: frees_in.max(1),
                reset_after_ns: 0,
                wait_ns: 0,
                ..fresh
            },
            true,
        )
    }

    /// Forgets the key's state. Returns whether it had one.
    pub(crate) fn reset(&self, h: u64) -> bool {
        let home = self.geometry.home(h);
        let shard = &self.shards[home.shard];
        let _latch = latch(&shard.latch, 0).expect("a shard latch holds only 0 or LATCHED");
        let Some(slot) = self.find(home) else {
            return false;
        };
        // Under the shard latch nobody else moves this key; its updaters
        // may still change the state, which the loop re-reads.
        let removed = cas_loop(slot, |word| {
            if word == 0 || self.owner(word) != home.fingerprint {
                (false, None)
            } else {
                (true, Some(0))
            }
        });
        if removed {
            shard.counters.tracked.fetch_sub(1, Relaxed);
        }
        removed
    }
}

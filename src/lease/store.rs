//! Keys to their entries for the lease and denial caches, found without a
//! lock: a fixed array of places, in a fixed number of shards, each place
//! a tag (the key's keyed hash, on the table's [`KeyHasher`], so `u64`
//! keys are their 8 little-endian bytes, as in a `KeyedLimiter`) and a
//! pointer to a node holding the key's bytes (which the command to Redis
//! needs and which tell two keys of one hash apart) beside the entry.
//!
//! # Finding a key
//! A key's places are the [`PROBE`] places of its shard from its home
//! place (wrapping). A lookup reads tags up to the first never-used place;
//! at each place whose tag is the key's, it loads the node, runs the
//! caller's `open` on the entry (the load of the word the caller will
//! commit to, say), and only then compares the key's bytes. No lock, no
//! reference count, no write: for a key in its home place, a line of
//! places and the node's first line.
//!
//! # Reuse, and why a stale lookup commits nothing
//! A node, once made, lives as long as the store: a place's entry is
//! retired (under the shard's lock, only when idle) and its node reused
//! for the next key placed there, so a lookup never reads freed memory.
//! An entry keeps its own generation (`Tracked`), which its retirement
//! changes before the key's bytes are rewritten, and which its reopening
//! (after the new key is written) changes again. The key's bytes are
//! written with `Release` and compared with `Acquire`, so a lookup that
//! reads any byte of a later key, or of a key written after the
//! generation it opened, will find a later generation when it loads the
//! entry's generation again (in its commit's CAS, or a reread). Hence: a
//! commit that compares the generation `open` loaded lands on the key
//! whose bytes the lookup compared. A lookup that races a rewrite may
//! find no key (its caller then takes the locked path, which looks
//! again), or one whose commit fails (its caller looks again).
//!
//! # Inserting and evicting
//! Only a new key takes its shard's lock: under it, the key is looked for
//! again (no key is placed twice), and placed in the first free place of
//! its window (never used, or a tombstone an eviction left). A shard holds
//! at most its share of the capacity: a new key that finds it full, or its
//! window without a free place, first retires the idle entries (every one
//! of the shard's, or those of its window); if that frees nothing it is
//! not tracked, and the caller decides it another way.
//!
//! This module owns the places, the nodes, the keys' bytes and the shard
//! locks; what an entry holds, when it is idle and how its generation is
//! kept belong to the entry's module (`Tracked`).

use crate::check::request::Key;
use crate::memory::{AlignedWords, Residency, zeroed_array};
use crate::sync::{AtomicPtr, AtomicU64, Mutex, MutexGuard, Ordering};
use crate::table::KeyHasher;
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;
use std::sync::Arc;

/// Shards (a power of two) at most: enough that a new key rarely waits for
/// another's insertion.
const SHARDS: usize = 64;

/// Places a key may take from its home place. Its shard has twice its
/// share of places, so a window is rarely all taken.
const PROBE: usize = 32;

/// The tag of a place never used: a lookup stops there.
const EMPTY: u64 = 0;
/// The tag of a place whose entry was retired: a lookup goes on past it,
/// an insertion may take it (and its node).
const TOMBSTONE: u64 = 1;

/// A key's tag: its hash, kept off the two reserved tags (two keys that
/// share a tag are told apart by their bytes).
#[inline]
fn tag_of(hash: u64) -> u64 {
    hash.max(TOMBSTONE + 1)
}

/// What the store asks of an entry.
pub(crate) trait Tracked {
    /// Under the shard's lock: if nothing is lost by dropping the entry at
    /// `now`, ends its generation (a lookup that opened it commits
    /// nothing) and returns `Done` or `Worn` (the node may not be
    /// reopened); `Busy` otherwise.
    fn retire(&self, now: u64) -> Retire;

    /// Under the shard's lock, after [`Tracked::retire`] and once the new
    /// key's bytes are written: starts the next generation, with `Release`
    /// (a lookup that opens it sees that key), holding nothing.
    fn reopen(&self);
}

/// What [`Tracked::retire`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retire {
    /// Not idle: left as it is.
    Busy,
    /// Retired: its node takes the next key placed there.
    Done,
    /// Retired for good: its node stays (lookups may hold it), unused.
    Worn,
}

/// A key as the caller gave it: its hash and its bytes.
#[derive(Clone, Copy)]
pub(crate) struct KeyRef<'a> {
    pub hash: u64,
    pub bytes: &'a [u8],
}

/// A key's bytes, readable while a new key is written over them (the
/// lookup's compare is then wrong only in a way its commit detects, see
/// the module docs). The first 8 bytes are in the node's first line; a
/// longer key's rest in words of their own.
struct KeyBytes {
    len: AtomicU64,
    head: AtomicU64,
    /// Bytes 8.., little-endian words; null for a key of 8 bytes or less.
    /// Replaced only by a longer one: the old is kept until the store
    /// drops (a lookup may still read it), in its shard's `retired_tails`.
    tail: AtomicPtr<Tail>,
}

struct Tail(Box<[AtomicU64]>);

/// Bytes as the little-endian word they make, zero-padded (at most 8).
/// Made in registers from at most two loads: copied into a zeroed word in
/// memory first, the word's load would wait for the copy's narrower
/// stores to reach the cache.
#[inline]
fn word_of(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    let u32_at = |i: usize| {
        u64::from(u32::from_le_bytes([
            bytes[i],
            bytes[i + 1],
            bytes[i + 2],
            bytes[i + 3],
        ]))
    };
    match n {
        8.. => u64::from_le_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
        ]),
        // Two 4-byte reads that overlap: the bytes both read land twice in
        // the same place.
        4..=7 => u32_at(0) | (u32_at(n - 4) << (8 * (n - 4))),
        1..=3 => {
            u64::from(bytes[0])
                | (u64::from(bytes[n / 2]) << (8 * (n / 2)))
                | (u64::from(bytes[n - 1]) << (8 * (n - 1)))
        }
        0 => 0,
    }
}

impl KeyBytes {
    fn new(bytes: &[u8]) -> KeyBytes {
        let k = KeyBytes {
            len: AtomicU64::new(0),
            head: AtomicU64::new(0),
            tail: AtomicPtr::new(std::ptr::null_mut()),
        };
        k.write(bytes, &mut Vec::new());
        k
    }

    /// Whether the key is `bytes` (see the type's docs for a key being
    /// rewritten).
    #[inline]
    fn matches(&self, bytes: &[u8]) -> bool {
        let (head, rest) = bytes.split_at(bytes.len().min(8));
        if self.len.load(Ordering::Acquire) != bytes.len() as u64
            || self.head.load(Ordering::Acquire) != word_of(head)
        {
            return false;
        }
        rest.is_empty() || self.tail_matches(rest)
    }

    #[cold]
    fn tail_matches(&self, rest: &[u8]) -> bool {
        let tail = self.tail.load(Ordering::Acquire);
        if tail.is_null() {
            return false;
        }
        // SAFETY: a non-null tail was made by `Box::into_raw` in `write`
        // and is freed only when the store drops (its node's, or from
        // `retired_tails`), and `&self` borrows the store.
        let words = unsafe { &(*tail).0 };
        let mut chunks = rest.chunks(8);
        // The words may belong to another key than the length read: bound
        // the reads by the words themselves.
        words.len() >= chunks.len()
            && chunks
                .by_ref()
                .zip(words.iter())
                .all(|(c, w)| w.load(Ordering::Acquire) == word_of(c))
    }

    /// Writes `bytes` over the key (under the shard's lock, with the entry
    /// retired), keeping a tail it outgrows in `retired`.
    fn write(&self, bytes: &[u8], retired: &mut Vec<*mut Tail>) {
        let (head, rest) = bytes.split_at(bytes.len().min(8));
        self.head.store(word_of(head), Ordering::Release);
        if !rest.is_empty() {
            let words = rest.len().div_ceil(8);
            let mut tail = self.tail.load(Ordering::Relaxed);
            // SAFETY: as in `tail_matches`; this thread, holding the shard's
            // lock, is the only one that replaces it.
            if tail.is_null() || unsafe { &*tail }.0.len() < words {
                let grown = Box::new(Tail(
                    (0..words.next_power_of_two())
                        .map(|_| AtomicU64::new(0))
                        .collect(),
                ));
                if !tail.is_null() {
                    retired.push(tail);
                }
                tail = Box::into_raw(grown);
                self.tail.store(tail, Ordering::Release);
            }
            // SAFETY: as above.
            let slots = unsafe { &(*tail).0 };
            for (c, w) in rest.chunks(8).zip(slots.iter()) {
                w.store(word_of(c), Ordering::Release);
            }
        }
        self.len.store(bytes.len() as u64, Ordering::Release);
    }
}

impl Drop for KeyBytes {
    fn drop(&mut self) {
        let tail = self.tail.load(Ordering::Relaxed);
        if !tail.is_null() {
            // SAFETY: made by `Box::into_raw` in `write`, owned by this key
            // alone (an outgrown one moved to `retired_tails`).
            drop(unsafe { Box::from_raw(tail) });
        }
    }
}

/// A key's node: its bytes and its entry. The first 24 bytes are the
/// key's length, first word and tail; the entry follows on the same
/// 64-byte line (its hot words first, `leases::Entry`), so a `u64` key's
/// check reads one line of the node.
#[repr(C, align(64))]
pub(crate) struct Node<E> {
    key: KeyBytes,
    value: E,
}

impl<E> std::ops::Deref for Node<E> {
    type Target = E;

    #[inline]
    fn deref(&self) -> &E {
        &self.value
    }
}

/// A place: the tag of its key and its node (null until first used).
struct Place<E> {
    tag: AtomicU64,
    node: AtomicPtr<Node<E>>,
}

/// A shard's lock and what it guards.
struct Shard<E> {
    /// Keys held.
    live: usize,
    /// Tails outgrown, freed with the store.
    retired_tails: Vec<*mut Tail>,
    /// Nodes whose generations are used up, kept for lookups that may
    /// still read them.
    worn: Vec<Arc<Node<E>>>,
}

// SAFETY: the raw tails are owned boxes of atomics (Send and Sync), only
// touched under the shard's lock and freed on drop.
unsafe impl<E: Send + Sync> Send for Shard<E> {}

impl<E> Drop for Shard<E> {
    fn drop(&mut self) {
        for &tail in &self.retired_tails {
            // SAFETY: made by `Box::into_raw` in `KeyBytes::write`, moved
            // here when outgrown, freed once.
            drop(unsafe { Box::from_raw(tail) });
        }
    }
}

pub(crate) struct Store<E> {
    hasher: KeyHasher,
    /// Allocated once and made resident, as a keyed table's: a flood of
    /// new keys grows the nodes (to two per key of the capacity at most),
    /// never the places.
    places: AlignedWords<Place<E>>,
    /// Padded: each is written on every insertion into its shard, and
    /// must not share a line with the next shard's.
    shards: Box<[CachePadded<Mutex<Shard<E>>>]>,
    /// Places per shard, a power of two.
    per_shard_places: usize,
    /// Keys per shard at most.
    per_shard: usize,
    /// `64 - log2(shards)`: a hash's top bits pick its shard.
    shard_shift: u32,
    probe: usize,
    /// The places own their nodes (one strong count each, through a raw
    /// pointer), and lookups share them between threads: the store is
    /// Send and Sync only when `Arc<Node<E>>` would be.
    owns: PhantomData<Arc<Node<E>>>,
}

impl<E> Drop for Store<E> {
    fn drop(&mut self) {
        for place in self.places.iter() {
            let node = place.node.load(Ordering::Relaxed);
            if !node.is_null() {
                // SAFETY: made by `Arc::into_raw` in `place`, this store's
                // strong count, released once.
                drop(unsafe { Arc::from_raw(node) });
            }
        }
    }
}

impl<E: Tracked> Store<E> {
    /// A store for `capacity` keys (at least 1), or the bytes of places
    /// that could not be allocated.
    pub(crate) fn new(capacity: u64) -> Result<Store<E>, u64> {
        let too_many = capacity.saturating_mul(2 * size_of::<Place<E>>() as u64);
        let capacity = usize::try_from(capacity.max(1)).map_err(|_| too_many)?;
        let shards = capacity.next_power_of_two().min(SHARDS);
        let per_shard = capacity.div_ceil(shards);
        let per_shard_places = per_shard
            .checked_mul(2)
            .and_then(usize::checked_next_power_of_two)
            .ok_or(too_many)?;
        let len = shards.checked_mul(per_shard_places).ok_or(too_many)?;
        // SAFETY: a place of all-zero bytes is EMPTY with no node, and
        // needs no drop (the store releases the nodes itself).
        let places = unsafe {
            zeroed_array(len, Residency::Now, || Place {
                tag: AtomicU64::new(EMPTY),
                node: AtomicPtr::new(std::ptr::null_mut()),
            })
        }
        .map_err(|bytes| bytes as u64)?;
        Ok(Store {
            hasher: KeyHasher::random(),
            places,
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(Mutex::new(Shard {
                        live: 0,
                        retired_tails: Vec::new(),
                        worn: Vec::new(),
                    }))
                })
                .collect(),
            per_shard_places,
            per_shard,
            shard_shift: 64 - shards.trailing_zeros(),
            probe: PROBE.min(per_shard_places),
            owns: PhantomData,
        })
    }

    /// Runs `f` on `key` as the store sees it: its hash and its bytes (a
    /// `u64` key's 8 little-endian bytes, on the stack). `f` is called in
    /// one place, so that it is inlined, and a check's answer is made
    /// where its caller reads it rather than copied there.
    #[inline]
    pub(crate) fn with_key<R>(&self, key: Key<'_>, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        let id_bytes;
        let key = match key {
            Key::Id(id) => {
                id_bytes = id.to_le_bytes();
                KeyRef {
                    hash: self.hasher.hash_u64(id),
                    bytes: &id_bytes,
                }
            }
            Key::Bytes(bytes) => KeyRef {
                hash: self.hasher.hash(bytes),
                bytes,
            },
        };
        f(key)
    }

    #[inline]
    fn shard_of(&self, hash: u64) -> usize {
        // The top bits (a 64-bit shift when there is one shard, which
        // `checked_shr` makes 0); the home place uses the low ones.
        hash.checked_shr(self.shard_shift).unwrap_or(0) as usize
    }

    /// The places of `hash`'s window, in order.
    #[inline]
    fn window(&self, hash: u64) -> impl Iterator<Item = &Place<E>> {
        let base = self.shard_of(hash) * self.per_shard_places;
        let mask = self.per_shard_places - 1;
        let home = hash as usize;
        (0..self.probe).map(move |i| &self.places[base + (home.wrapping_add(i) & mask)])
    }

    /// `key`'s node and what `open` made of its entry, `open` having run
    /// before the key's bytes were compared (the module docs say what a
    /// commit may then rely on); `None` when no place holds the key now.
    #[inline]
    pub(crate) fn find<S>(
        &self,
        key: KeyRef<'_>,
        mut open: impl FnMut(&E) -> S,
    ) -> Option<(&Node<E>, S)> {
        let tag = tag_of(key.hash);
        for place in self.window(key.hash) {
            let t = place.tag.load(Ordering::Acquire);
            if t == tag {
                let node = place.node.load(Ordering::Acquire);
                if !node.is_null() {
                    // SAFETY: a node, once in a place, is freed only when
                    // the store drops (a worn one is kept in its shard),
                    // and `&self` borrows the store.
                    let node = unsafe { &*node };
                    let opened = open(&node.value);
                    if node.key.matches(key.bytes) {
                        return Some((node, opened));
                    }
                }
            } else if t == EMPTY {
                break;
            }
        }
        None
    }

    /// A handle on `node` that outlives the store (a grant request's).
    pub(crate) fn share(&self, node: &Node<E>) -> Arc<Node<E>> {
        let ptr: *const Node<E> = node;
        // SAFETY: every node a lookup returns was made by `Arc::into_raw`
        // (`place`), and the store holds that strong count while `&self`
        // lives, so adding one and taking it back as an `Arc` is sound.
        unsafe {
            Arc::increment_strong_count(ptr);
            Arc::from_raw(ptr)
        }
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard<E>> {
        // A poisoned lock means a panic inside a closure that keeps no
        // invariant across the shard: its places are intact.
        self.shards[shard].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on `key`'s entry under its shard's lock, placing the key
    /// first (its entry made by `make`) if it has none; `None` when its
    /// shard is full of entries that are not idle at `now`, or its window
    /// has no place to free.
    pub(crate) fn upsert<R>(
        &self,
        key: KeyRef<'_>,
        now: u64,
        make: impl FnOnce() -> E,
        f: impl FnOnce(&E) -> R,
    ) -> Option<R> {
        let mut shard = self.lock(self.shard_of(key.hash));
        // Under the lock no key is being written: this lookup is exact.
        if let Some((node, ())) = self.find(key, |_| ()) {
            return Some(f(node));
        }
        if shard.live >= self.per_shard {
            self.sweep(key.hash, &mut shard, now);
            if shard.live >= self.per_shard {
                return None;
            }
        }
        let free = |p: &Place<E>| matches!(p.tag.load(Ordering::Relaxed), EMPTY | TOMBSTONE);
        let place = match self.window(key.hash).find(|p| free(p)) {
            Some(p) => p,
            None => self
                .window(key.hash)
                .find(|p| self.evict(p, &mut shard, now))?,
        };
        let node = self.place(place, key, make, &mut shard);
        shard.live += 1;
        Some(f(node))
    }

    /// Puts `key` in the free place `place`: in its node, reopened, or in
    /// a new one.
    fn place<'s>(
        &'s self,
        place: &'s Place<E>,
        key: KeyRef<'_>,
        make: impl FnOnce() -> E,
        shard: &mut Shard<E>,
    ) -> &'s Node<E> {
        let mut node = place.node.load(Ordering::Relaxed);
        if node.is_null() {
            node = Arc::into_raw(Arc::new(Node {
                key: KeyBytes::new(key.bytes),
                value: make(),
            }))
            .cast_mut();
            place.node.store(node, Ordering::Release);
        } else {
            // SAFETY: as in `find`.
            let n = unsafe { &*node };
            n.key.write(key.bytes, &mut shard.retired_tails);
            n.value.reopen();
        }
        place.tag.store(tag_of(key.hash), Ordering::Release);
        // SAFETY: as in `find`.
        unsafe { &*node }
    }

    /// Retires the entry in `place` if idle at `now`: whether it did.
    fn evict(&self, place: &Place<E>, shard: &mut Shard<E>, now: u64) -> bool {
        if place.tag.load(Ordering::Relaxed) <= TOMBSTONE {
            return false;
        }
        let ptr = place.node.load(Ordering::Relaxed);
        // SAFETY: a place with a key's tag has a node (set before the
        // tag), alive as in `find`.
        let node = unsafe { &*ptr };
        match node.value.retire(now) {
            Retire::Busy => return false,
            Retire::Done => {}
            Retire::Worn => {
                // SAFETY: the store's strong count, moved to `worn` (the
                // node stays alive for lookups that may hold it).
                shard.worn.push(unsafe { Arc::from_raw(ptr) });
                place.node.store(std::ptr::null_mut(), Ordering::Relaxed);
            }
        }
        place.tag.store(TOMBSTONE, Ordering::Release);
        shard.live -= 1;
        true
    }

    /// Retires every idle entry of `hash`'s shard.
    fn sweep(&self, hash: u64, shard: &mut Shard<E>, now: u64) {
        let base = self.shard_of(hash) * self.per_shard_places;
        for place in &self.places[base..base + self.per_shard_places] {
            self.evict(place, shard, now);
        }
    }

    /// Keys held now.
    pub(crate) fn len(&self) -> usize {
        (0..self.shards.len()).map(|s| self.lock(s).live).sum()
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;

    /// An entry idle from a time on, counting its retirements.
    struct Value {
        idle_from: AtomicU64,
        generation: AtomicU64,
        wears_out: bool,
    }

    fn value(idle_from: u64) -> Value {
        Value {
            idle_from: AtomicU64::new(idle_from),
            generation: AtomicU64::new(0),
            wears_out: false,
        }
    }

    impl Tracked for Value {
        fn retire(&self, now: u64) -> Retire {
            if now < self.idle_from.load(Ordering::Relaxed) {
                return Retire::Busy;
            }
            self.generation.fetch_add(1, Ordering::Relaxed);
            if self.wears_out {
                Retire::Worn
            } else {
                Retire::Done
            }
        }
        fn reopen(&self) {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn key(hash: u64, bytes: &[u8]) -> KeyRef<'_> {
        KeyRef { hash, bytes }
    }

    fn found(store: &Store<Value>, k: KeyRef<'_>) -> Option<u64> {
        store
            .find(k, |v| v.generation.load(Ordering::Relaxed))
            .map(|(_, g)| g)
    }

    #[test]
    fn a_words_bytes_are_the_keys_zero_padded() {
        let bytes = *b"\x01\x02\x03\x04\x05\x06\x07\x08";
        for n in 0..=8 {
            let mut padded = [0; 8];
            padded[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(
                word_of(&bytes[..n]),
                u64::from_le_bytes(padded),
                "{n} bytes"
            );
        }
    }

    #[test]
    fn keys_of_one_hash_are_told_apart_by_their_bytes() {
        let store = Store::new(1000).unwrap();
        let long = b"a key longer than one word, and then some";
        let keys: [&[u8]; 5] = [b"", b"k", b"12345678", long, &long[..long.len() - 1]];
        for k in keys {
            assert!(found(&store, key(7, k)).is_none());
            store
                .upsert(key(7, k), 0, || value(u64::MAX), |_| ())
                .unwrap();
        }
        assert_eq!(store.len(), keys.len());
        for k in keys {
            assert_eq!(found(&store, key(7, k)), Some(0), "{k:?}");
        }
        assert!(found(&store, key(7, b"12345679")).is_none());
        assert!(found(&store, key(8, b"k")).is_none(), "another hash");
        // Placing a key again finds it.
        store.upsert(key(7, b"k"), 0, || value(0), |_| ()).unwrap();
        assert_eq!(store.len(), keys.len());
    }

    #[test]
    fn a_reused_node_holds_the_new_key_only() {
        // One key at most: each new key evicts the last, in its node.
        let store = Store::new(1).unwrap();
        let keys: [&[u8]; 4] = [
            b"a key of twenty bytes",
            b"short",
            b"a key of many more bytes than the first had, forty-odd",
            b"a key of twenty bytez",
        ];
        for (i, k) in keys.iter().enumerate() {
            store.upsert(key(3, k), 0, || value(0), |_| ()).unwrap();
            assert_eq!(store.len(), 1);
            // Retired and reopened once per key before.
            assert_eq!(found(&store, key(3, k)), Some(2 * i as u64));
            for other in keys.iter().filter(|o| *o != k) {
                assert!(found(&store, key(3, other)).is_none());
            }
        }
    }

    #[test]
    fn a_full_shard_keeps_busy_entries_and_refuses_a_new_key() {
        let store = Store::new(1).unwrap();
        store.upsert(key(3, b"a"), 0, || value(10), |_| ()).unwrap();
        assert!(store.upsert(key(5, b"b"), 9, || value(0), |_| ()).is_none());
        assert_eq!(found(&store, key(3, b"a")), Some(0));
        assert!(
            store
                .upsert(key(5, b"b"), 10, || value(0), |_| ())
                .is_some()
        );
        assert!(found(&store, key(3, b"a")).is_none());
        assert_eq!(found(&store, key(5, b"b")), Some(2), "a's node, reused");
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_worn_entry_leaves_its_node_to_lookups_and_the_place_to_a_new_one() {
        let store = Store::new(1).unwrap();
        store
            .upsert(
                key(3, b"a"),
                0,
                || Value {
                    wears_out: true,
                    ..value(0)
                },
                |_| (),
            )
            .unwrap();
        let (worn, _) = store.find(key(3, b"a"), |_| ()).unwrap();
        let worn: *const Node<Value> = worn;
        store.upsert(key(3, b"b"), 0, || value(0), |_| ()).unwrap();
        let (node, generation) = store
            .find(key(3, b"b"), |v| v.generation.load(Ordering::Relaxed))
            .unwrap();
        assert!(!std::ptr::eq(node, worn));
        assert_eq!(generation, 0, "a new node");
        assert_eq!(store.lock(0).worn.len(), 1);
    }
}

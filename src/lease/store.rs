//! Keys to their entries for the lease and denial caches: a fixed number
//! of shards, each a map from the key's keyed hash (the table's
//! [`KeyHasher`], so `u64` keys are their 8 little-endian bytes, as in a
//! `KeyedLimiter`) to an entry that keeps the key's bytes, which the
//! command to Redis needs and which tell two keys of one hash apart.
//!
//! A lookup holds its shard's read lock while it works on the entry (a
//! spend is a CAS on the entry's own word, so readers never wait for each
//! other); only a new key, or the removal of idle entries to make room
//! for one, takes the write lock. A shard holds at most its share of the
//! capacity: a new key that finds it full, even after idle entries are
//! dropped, is not tracked, and the caller decides it another way.

use crate::request::Key;
use crate::table::KeyHasher;
use crossbeam_utils::CachePadded;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, RwLock};

/// Shards (a power of two): enough that a new key's write lock rarely
/// stops another shard's readers, few enough to sweep one at a time.
const SHARDS: usize = 64;

/// The keys are keyed hashes already: the map uses them as they are.
#[derive(Default)]
pub(crate) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys are hashed")
    }
    fn write_u64(&mut self, h: u64) {
        self.0 = h;
    }
}

type Shard<E> = HashMap<u64, Arc<E>, BuildHasherDefault<Prehashed>>;

/// An entry's key.
pub(crate) trait Keyed {
    fn key(&self) -> &[u8];
}

/// A key as the caller gave it: its hash and its bytes.
#[derive(Clone, Copy)]
pub(crate) struct KeyRef<'a> {
    pub hash: u64,
    pub bytes: &'a [u8],
}

/// What a lookup found.
pub(crate) enum Found<R> {
    /// The key's entry, and what the caller's closure made of it.
    Entry(R),
    /// No entry for the key.
    Missing,
    /// Another key with the same 64-bit hash holds the place.
    Collision,
}

/// Whether two keys are equal; a `u64` key's 8 bytes in one compare, not
/// a call to `memcmp`.
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    match (<&[u8; 8]>::try_from(a), <&[u8; 8]>::try_from(b)) {
        (Ok(a), Ok(b)) => u64::from_ne_bytes(*a) == u64::from_ne_bytes(*b),
        _ => a == b,
    }
}

pub(crate) struct Store<E> {
    hasher: KeyHasher,
    shards: Box<[CachePadded<RwLock<Shard<E>>>]>,
    per_shard: usize,
}

impl<E: Keyed> Store<E> {
    pub(crate) fn new(capacity: u64) -> Store<E> {
        let per_shard = usize::try_from(capacity.div_ceil(SHARDS as u64))
            .unwrap_or(usize::MAX)
            .max(1);
        Store {
            hasher: KeyHasher::random(),
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(RwLock::new(Shard::default())))
                .collect(),
            per_shard,
        }
    }

    /// Runs `f` on `key` as the store sees it: its hash and its bytes (a
    /// `u64` key's 8 little-endian bytes, on the stack).
    #[inline]
    pub(crate) fn with_key<R>(&self, key: Key<'_>, f: impl FnOnce(KeyRef<'_>) -> R) -> R {
        match key {
            Key::Id(id) => {
                let bytes = id.to_le_bytes();
                f(KeyRef {
                    hash: self.hasher.hash_u64(id),
                    bytes: &bytes,
                })
            }
            Key::Bytes(bytes) => f(KeyRef {
                hash: self.hasher.hash(bytes),
                bytes,
            }),
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Shard<E>> {
        // The top bits: the map's own buckets use the low ones.
        &self.shards[(hash >> (64 - SHARDS.trailing_zeros())) as usize]
    }

    /// Runs `f` on `key`'s entry, under its shard's read lock.
    #[inline]
    pub(crate) fn with<R>(&self, key: KeyRef<'_>, f: impl FnOnce(&Arc<E>) -> R) -> Found<R> {
        // A poisoned lock means a panic inside a closure that keeps no
        // invariant across the map: the map itself is intact.
        let map = self
            .shard(key.hash)
            .read()
            .unwrap_or_else(|e| e.into_inner());
        match map.get(&key.hash) {
            Some(e) if same_key(e.key(), key.bytes) => Found::Entry(f(e)),
            Some(_) => Found::Collision,
            None => Found::Missing,
        }
    }

    /// `key`'s entry, made by `make` if it has none; `None` when its shard
    /// is full of entries `idle` does not let go, or another key holds the
    /// hash. An entry is dropped only when `idle` says so and nothing else
    /// holds it (no request in flight keeps a reference).
    pub(crate) fn get_or_insert(
        &self,
        key: KeyRef<'_>,
        make: impl FnOnce() -> E,
        idle: impl Fn(&E) -> bool,
    ) -> Option<Arc<E>> {
        let mut map = self
            .shard(key.hash)
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(e) = map.get(&key.hash) {
            return same_key(e.key(), key.bytes).then(|| e.clone());
        }
        if map.len() >= self.per_shard {
            map.retain(|_, e| Arc::strong_count(e) > 1 || !idle(e));
            if map.len() >= self.per_shard {
                return None;
            }
        }
        let e = Arc::new(make());
        map.insert(key.hash, e.clone());
        Some(e)
    }

    /// Entries now.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

//! `cached_deny`'s memory (SPEC §8): a denial Redis gave a key, kept by
//! the node until its `retry_after`, so the key's requests meanwhile are
//! denied without a command.

use super::store::{Found, KeyRef, Keyed, Store};
use crate::decision::Decision;
use crate::request::Key;
use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

/// The denials a node remembers, per key (`u64` keys as their 8
/// little-endian bytes, as a `KeyedLimiter`'s). A check of a remembered key
/// costs a hash, a shard's read lock and a few loads.
///
/// ```
/// use ratecell::{Decision, lease::DenialCache};
///
/// let cache = DenialCache::new(1000);
/// let denied = Decision { allowed: false, limit: 5, remaining: 0, retry_after_ns: 100, reset_after_ns: 300, wait_ns: 0 };
/// cache.remember(7, &denied, 1_000);
/// let d = cache.check(7, 1_040).unwrap();
/// assert_eq!((d.allowed, d.retry_after_ns, d.reset_after_ns), (false, 60, 260));
/// assert!(cache.check(7, 1_100).is_none(), "Redis decides again");
/// ```
pub struct DenialCache {
    store: Store<Denial>,
}

struct Denial {
    key: Box<[u8]>,
    /// Denied until this time (UNIX ns); 0 for none. Written last.
    until: AtomicU64,
    reset_at: AtomicU64,
    limit: AtomicU64,
    remaining: AtomicU64,
}

impl Keyed for Denial {
    fn key(&self) -> &[u8] {
        &self.key
    }
}

impl DenialCache {
    /// A cache for up to about `capacity` keys denied at once (0: 65,536);
    /// a key beyond it is not remembered (Redis decides its requests).
    pub fn new(capacity: u64) -> DenialCache {
        let capacity = if capacity == 0 { 65_536 } else { capacity };
        DenialCache {
            store: Store::new(capacity),
        }
    }

    /// The remembered denial of `key` at `now_ns`, its `retry_after` and
    /// `reset_after` reduced by the time since; `None` when there is none
    /// running (ask Redis).
    #[inline]
    pub fn check<'k>(&self, key: impl Into<Key<'k>>, now_ns: u64) -> Option<Decision> {
        self.store
            .with_key(key.into(), |k| self.check_key(k, now_ns))
    }

    fn check_key(&self, key: KeyRef<'_>, now: u64) -> Option<Decision> {
        let found = self.store.with(key, |d| {
            let until = d.until.load(Acquire);
            (now < until).then(|| Decision {
                allowed: false,
                limit: d.limit.load(Relaxed),
                remaining: d.remaining.load(Relaxed),
                retry_after_ns: until - now,
                reset_after_ns: d.reset_at.load(Relaxed).saturating_sub(now),
                wait_ns: 0,
            })
        });
        match found {
            Found::Entry(d) => d,
            Found::Missing | Found::Collision => None,
        }
    }

    /// Remembers Redis's `decision` for `key`, made at `now_ns`, if it is
    /// a denial that a wait can end.
    pub fn remember<'k>(&self, key: impl Into<Key<'k>>, decision: &Decision, now_ns: u64) {
        self.store
            .with_key(key.into(), |k| self.remember_key(k, decision, now_ns));
    }

    fn remember_key(&self, key: KeyRef<'_>, d: &Decision, now: u64) {
        // An admission, or a cost no wait admits: nothing to remember.
        if d.allowed || d.retry_after_ns == u64::MAX {
            return;
        }
        let write = |e: &Denial| {
            e.reset_at
                .store(now.saturating_add(d.reset_after_ns), Relaxed);
            e.limit.store(d.limit, Relaxed);
            e.remaining.store(d.remaining, Relaxed);
            e.until.store(now.saturating_add(d.retry_after_ns), Release);
        };
        if let Found::Entry(()) = self.store.with(key, |e| write(e)) {
            return;
        }
        let make = || Denial {
            key: key.bytes.into(),
            until: AtomicU64::new(0),
            reset_at: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            remaining: AtomicU64::new(0),
        };
        if let Some(e) = self
            .store
            .get_or_insert(key, make, |e| e.until.load(Relaxed) <= now)
        {
            write(&e);
        }
    }

    /// Keys remembered now (expired ones included until their place is
    /// needed).
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

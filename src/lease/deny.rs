//! `cached_deny`'s memory (SPEC §8): a denial Redis gave a key, kept by
//! the node until its `retry_after`, so the key's requests meanwhile are
//! denied without a command.

use super::store::{KeyRef, Retire, Store, Tracked};
use crate::check::decision::Decision;
use crate::check::request::{Key, Request};
use crate::sync::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};

/// The denials a node remembers, per key (`u64` keys as their 8
/// little-endian bytes, as a `KeyedLimiter`'s). A check of a remembered key
/// costs a hash, a lookup with no lock and a few loads; remembering one
/// (after a command to Redis) takes its shard's lock.
///
/// Its calls take the shape of [`Leases::check`](super::Leases::check):
/// the key, the request, and the caller's clock reading, which a time set
/// on the request ([`Request::at`]) overrides. The request's cost and tier
/// are not read: a denial is the key's, whatever it asked.
///
/// ```
/// use ratecell::{Decision, Request, lease::DenialCache};
///
/// let cache = DenialCache::new(1000);
/// let denied = Decision { allowed: false, limit: 5, remaining: 0, retry_after_ns: 100, reset_after_ns: 300, wait_ns: 0 };
/// cache.remember(7, Request::new(1).at(1_000), &denied, 0);
/// let d = cache.check(7, 1, 1_040).unwrap();
/// assert_eq!((d.allowed, d.retry_after_ns, d.reset_after_ns), (false, 60, 260));
/// assert!(cache.check(7, Request::new(1).at(1_100), 0).is_none(), "Redis decides again");
/// ```
pub struct DenialCache {
    store: Store<Denial>,
}

/// A key's remembered denial. The store may reuse it for another key: a
/// check reads its words between two reads of `generation` (even while it
/// holds a key), and uses them only if both are the same.
struct Denial {
    generation: AtomicU64,
    /// Denied until this time (UNIX ns); 0 for none. Written last.
    until: AtomicU64,
    reset_at: AtomicU64,
    limit: AtomicU64,
    remaining: AtomicU64,
}

impl Tracked for Denial {
    /// Idle: its denial is over. Remembering and retiring both take the
    /// shard's lock, so no write races this one.
    fn retire(&self, now: u64) -> Retire {
        if self.until.load(Relaxed) > now {
            return Retire::Busy;
        }
        // An odd generation, then the words (`Release`): a check that reads
        // one of them sees the generation changed.
        self.generation.fetch_add(1, Release);
        for w in [&self.until, &self.reset_at, &self.limit, &self.remaining] {
            w.store(0, Release);
        }
        // 2^63 reuses of one entry: never worn.
        Retire::Done
    }

    fn reopen(&self) {
        self.generation.fetch_add(1, Release);
    }
}

impl DenialCache {
    /// A cache for up to about `capacity` keys denied at once (0: 65,536;
    /// at most [`DenialCache::MAX_CAPACITY`]); a key beyond it is not
    /// remembered (Redis decides its requests).
    pub fn new(capacity: u64) -> DenialCache {
        let capacity = match capacity {
            0 => 65_536,
            c => c.min(Self::MAX_CAPACITY),
        };
        DenialCache {
            store: Store::new(capacity).expect("the places of 2^20 keys (32 MiB)"),
        }
    }

    /// The most keys a cache remembers at once, 2^20: its places (32 bytes
    /// a key) are allocated up front.
    pub const MAX_CAPACITY: u64 = 1 << 20;

    /// The remembered denial of `key` at `request`'s time (its own, else
    /// `now_ns`), its `retry_after` and `reset_after` reduced by the time
    /// since; `None` when there is none running (ask Redis).
    #[inline]
    pub fn check<'k>(
        &self,
        key: impl Into<Key<'k>>,
        request: impl Into<Request>,
        now_ns: u64,
    ) -> Option<Decision> {
        let now = request.into().at_ns.unwrap_or(now_ns);
        self.store.with_key(key.into(), |k| self.check_key(k, now))
    }

    fn check_key(&self, key: KeyRef<'_>, now: u64) -> Option<Decision> {
        let (d, generation) = self.store.find(key, |d| d.generation.load(Acquire))?;
        if generation % 2 != 0 {
            return None;
        }
        let until = d.until.load(Acquire);
        let decision = (now < until).then(|| Decision {
            allowed: false,
            limit: d.limit.load(Acquire),
            remaining: d.remaining.load(Acquire),
            retry_after_ns: until - now,
            reset_after_ns: d.reset_at.load(Acquire).saturating_sub(now),
            wait_ns: 0,
        });
        // Another key's since the lookup: Redis decides.
        (d.generation.load(Acquire) == generation)
            .then_some(decision)
            .flatten()
    }

    /// Remembers Redis's `decision` for `key`'s `request`, made at its
    /// time (its own, else `now_ns`), if it is a denial that a wait can end.
    pub fn remember<'k>(
        &self,
        key: impl Into<Key<'k>>,
        request: impl Into<Request>,
        decision: &Decision,
        now_ns: u64,
    ) {
        let now = request.into().at_ns.unwrap_or(now_ns);
        self.store
            .with_key(key.into(), |k| self.remember_key(k, decision, now));
    }

    fn remember_key(&self, key: KeyRef<'_>, d: &Decision, now: u64) {
        // An admission, or a cost no wait admits: nothing to remember.
        if d.allowed || d.retry_after_ns == u64::MAX {
            return;
        }
        let make = || Denial {
            generation: AtomicU64::new(0),
            until: AtomicU64::new(0),
            reset_at: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            remaining: AtomicU64::new(0),
        };
        self.store.upsert(key, now, make, |e| {
            e.reset_at
                .store(now.saturating_add(d.reset_after_ns), Release);
            e.limit.store(d.limit, Release);
            e.remaining.store(d.remaining, Release);
            e.until.store(now.saturating_add(d.retry_after_ns), Release);
        });
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

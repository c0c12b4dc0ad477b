//! A key's entry in the node's leases (SPEC §8): the grant word and the
//! words a check reads beside it, the bookkeeping only the key's lock
//! guards (the next grant, demand, the debt of the `local` policy), its
//! retirement when idle; and the node's health, which every key shares.
//! The protocol that reads and writes them is `leases`'s.

use super::cell::{GrantCell, Held, Retired};
use super::protocol::Demand;
use super::store::{Retire, Tracked};
use crate::state::Rule;
use crate::sync::{
    AtomicU64, Mutex, MutexGuard,
    Ordering::{Relaxed, Release},
};
use std::sync::atomic::{AtomicBool, AtomicU32};

/// Whether Redis answers, for the whole node (SPEC §8, "When Redis is slow
/// or unreachable"): one failed grant puts every key on the failure policy
/// at once, and one probe in the background, the retry of that grant,
/// finds Redis again; the first reply of any grant puts every key back.
#[derive(Default)]
pub(super) struct Health {
    pub(super) down: AtomicBool,
    /// Failed grants in a row: the probe's delay doubles with them.
    pub(super) failures: AtomicU32,
    /// A probe is asked for and not yet answered: no other failure asks
    /// for one.
    pub(super) probing: AtomicBool,
    /// When the probe is due (the node's clock, as the completions give
    /// it): a denial's `retry_after` under the `deny` policy.
    pub(super) probe_at: AtomicU64,
}

/// A key's lease. The words a check that finds units reads come first, on
/// the line of the store's node that holds the key (`store::Node`).
///
/// A check reads the entry without a lock, and the store may reuse it for
/// another key ([`Tracked`]): a check commits only through the grant
/// word's CAS, which fails once the generation it loaded has ended, and a
/// decision made from the other words is made only if the word's
/// generation is unchanged after reading them ([`Leases::still`]), or
/// under the lock, which retirement takes. Those words are written with
/// `Release` and read with `Acquire` for that reread to be sound.
#[derive(Debug)]
#[repr(C)]
pub(super) struct Entry {
    pub(super) cell: GrantCell,
    /// While a refill may be asked for (none since the grant in hand
    /// came), the refill threshold plus one: a refill is due when a spend
    /// leaves fewer units than this (a quarter of the grant or fewer)...
    /// 0 while not armed. One word, so the check reads one line.
    pub(super) refill: AtomicU64,
    /// ...or at this time (a fifth of the grant's lifetime left).
    pub(super) refill_at: AtomicU64,
    /// Redis granted nothing: denied here until this time.
    pub(super) denied_until: AtomicU64,
    /// Checks that found no units and spent none (demand the units do
    /// not show).
    pub(super) unmet: AtomicU64,
    pub(super) slow: Mutex<Slow>,
}

/// What only the key's lock guards.
#[derive(Debug, Default)]
pub(super) struct Slow {
    /// A grant that came while the one in hand still had units, with
    /// another expiry: spent once that one is spent or expired.
    pub(super) next: Option<Held>,
    /// The units in hand when last counted: spends since are this less
    /// what the cell holds.
    pub(super) counted_units: u64,
    /// The refill threshold of the grant in hand, for re-arming `refill`.
    pub(super) refill_below: u64,
    pub(super) demand: Demand,
    /// Grant requests alive for this key: while any is, the entry is not
    /// retired.
    pub(super) requests: u64,
    /// What the `local` policy admitted for this key that Redis has not
    /// been told: a state of the limit's rule fed only by those admissions
    /// (empty: none), sent as charges with the key's next grant.
    pub(super) debt: Vec<u64>,
}

impl Slow {
    /// Adds `units` admitted here at `at` to the key's debt.
    pub(super) fn charge(&mut self, rule: &Rule, at: u64, units: u64) {
        if self.debt.is_empty() {
            self.debt = vec![0; rule.words()];
        }
        rule.charge(&mut self.debt, at, units);
    }
}

impl Entry {
    pub(super) fn new() -> Entry {
        Entry {
            cell: GrantCell::new(),
            refill: AtomicU64::new(0),
            refill_at: AtomicU64::new(u64::MAX),
            denied_until: AtomicU64::new(0),
            unmet: AtomicU64::new(0),
            slow: Mutex::new(Slow::default()),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Slow> {
        // The lock guards bookkeeping that no panic leaves half-made in a
        // way that could admit more: a poisoned lock is used as it is.
        self.slow.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Tracked for Entry {
    /// Idle: no units, no denial still running, no grant request alive,
    /// no debt to tell Redis. A grant kept for later (`Slow::next`) is
    /// dropped with it: losing units never admits more.
    fn retire(&self, now: u64) -> Retire {
        let mut s = self.lock();
        if s.requests != 0 || self.denied_until.load(Relaxed) > now || !s.debt.is_empty() {
            return Retire::Busy;
        }
        let retired = self.cell.retire(|held| held.is_spent(now));
        if retired == Retired::Busy {
            return Retire::Busy;
        }
        // After the generation ended, with `Release`: a check that reads
        // one of these values and then the word finds it ended.
        self.refill.store(0, Release);
        self.refill_at.store(u64::MAX, Release);
        self.denied_until.store(0, Release);
        self.unmet.store(0, Release);
        *s = Slow::default();
        match retired {
            Retired::Worn => Retire::Worn,
            _ => Retire::Done,
        }
    }

    fn reopen(&self) {
        let _s = self.lock();
        self.cell.reopen();
    }
}

//! A grant request on its way to Redis (SPEC §8): the key and units it
//! asks for, the check waiting on it, the key's debt it carries, and, for
//! the node's probe, the health its answer settles. It keeps its key's
//! entry from being retired while it lives, and gives the debt back if no
//! reply takes it.

use super::entry::{Entry, Health, Slow};
use super::grant::{Charge, charges};
use super::store::Node;
use crate::state::Rule;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// A grant to ask Redis for: which key, how many units, at what time.
///
/// While it lives, its key's entry is not dropped or reused (the entry
/// counts its requests, `Slow::requests`), so its reply always finds the
/// key it was asked for.
pub struct GrantRequest {
    pub(super) entry: Arc<Node<Entry>>,
    pub(super) key: Box<[u8]>,
    pub(super) want: u64,
    pub(super) at: u64,
    /// The check waiting on it (a fetch), or none (a refill, a retry).
    pub(super) cost: Option<u64>,
    /// The node's health, when this is the retry of a failed grant that
    /// stands for its probe.
    pub(super) probe: Option<Arc<Health>>,
    /// The key's debt, sent with this request: taken from the key, and
    /// given back to it unless a reply takes it.
    debt: Option<Box<Debt>>,
    /// Completed ([`Leases::complete`](super::Leases::complete)): its reply or failure is handled.
    pub(super) done: AtomicBool,
}

/// A debt on its way to Redis: the charges sent, and the rule that gives
/// them back to the key.
struct Debt {
    rule: Rule,
    charges: Vec<Charge>,
}

impl std::fmt::Debug for GrantRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantRequest")
            .field("key", &self.key)
            .field("want", &self.want)
            .field("at", &self.at)
            .field("cost", &self.cost)
            .finish()
    }
}

impl Drop for GrantRequest {
    fn drop(&mut self) {
        let mut s = self.entry.lock();
        s.requests -= 1;
        if self.done.load(Relaxed) {
            return;
        }
        // Dropped unanswered (never sent, or its answer not handed back):
        // the key keeps its debt for its next grant, and the next failure
        // asks for a probe.
        self.give_back(&mut s);
        if let Some(h) = &self.probe {
            h.probing.store(false, Relaxed);
        }
    }
}

impl GrantRequest {
    /// A request for `entry`'s key, counted in its entry (`s` is its lock),
    /// carrying the key's debt, if any (`rule` reads it at `at`).
    pub(super) fn new(
        entry: Arc<Node<Entry>>,
        s: &mut Slow,
        key: &[u8],
        want: u64,
        at: u64,
        cost: Option<u64>,
        rule: &Rule,
    ) -> GrantRequest {
        s.requests += 1;
        let debt = std::mem::take(&mut s.debt);
        let debt = (!debt.is_empty()).then(|| {
            Box::new(Debt {
                rule: *rule,
                charges: charges(rule, &debt, at),
            })
        });
        GrantRequest {
            entry,
            key: key.into(),
            want,
            at,
            cost,
            probe: None,
            debt,
            done: AtomicBool::new(false),
        }
    }

    /// Gives the charges back to the key's debt (`s`, its lock).
    pub(super) fn give_back(&self, s: &mut Slow) {
        if let Some(d) = &self.debt {
            for c in &d.charges {
                s.charge(&d.rule, c.at_ns, c.units);
            }
        }
    }

    /// The charges it carries: the key's own admissions, made while Redis
    /// was away, that the server adds to the key before the grant.
    pub fn charges(&self) -> &[Charge] {
        self.debt.as_ref().map_or(&[], |d| &d.charges)
    }

    /// The key's bytes (a `u64` key's 8 little-endian bytes).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// `w`, the units asked for.
    pub fn want(&self) -> u64 {
        self.want
    }

    /// The time of the check that asked (UNIX ns), to send as `AT` when the
    /// node and the server keep one explicit timeline.
    pub fn at_ns(&self) -> u64 {
        self.at
    }

    /// Whether a check waits on this request (a fetch rather than a refill).
    pub fn is_fetch(&self) -> bool {
        self.cost.is_some()
    }
}

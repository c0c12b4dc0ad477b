//! The node's leases (SPEC §8): per key, the grant in hand, the next one
//! if it arrived early, and the bookkeeping that decides when to ask for
//! more, how much, and what to do when Redis does not answer.

use super::cell::{Held, Spend, Word};
use super::config::{LeaseConfig, LeaseError, Resolved};
use super::entry::{Entry, Health, Slow};
use super::protocol::{GrantReply, When, grant_size, lease_args, probe_delay_ns};
use super::request::GrantRequest;
use super::store::{KeyRef, Node, Store};
use crate::check::decision::Decision;
use crate::check::request::{Key, Request, Tier};
use crate::config::Algorithm;
use crate::keyed::KeyedLimiter;
use crate::state::Rule;
use crate::sync::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;
use std::sync::atomic::AtomicU64 as Counter;

/// Lookups a check makes before Redis decides it instead: each but the
/// first follows one that lost a race with the retirement of the entry it
/// found.
const LOOKUPS: usize = 4;

/// A lookup found an entry that was retired or reused before the check
/// decided anything: look again.
struct Moved;

/// A node's grants of one leased limit, per key: the local spending and
/// the protocol's decisions, with no I/O (the module docs say who carries
/// the requests).
///
/// [`Leases::check`] answers with a [`Step`]: decided here (units were
/// spent, or a denial Redis gave is remembered, or the failure policy
/// decided while grants fail), decided here with a refill to fetch in the
/// background, fetch a grant now, or check with Redis directly (the key
/// cannot be tracked). A fetched grant, or its failure, goes back through
/// [`Leases::complete`].
///
/// ```
/// use ratecell::{Algorithm, Config};
/// use ratecell::lease::{GrantReply, LeaseConfig, Leases, Step};
///
/// let s = 1_000_000_000;
/// let leases = Leases::new(LeaseConfig::new(Config::new(Algorithm::FixedWindow, 100, s)).skew_ns(0)).unwrap();
/// let t = 10 * s;
/// let Step::Fetch(req) = leases.check(7, 1, t) else { panic!("no units yet") };
/// // ... send leases.command(&req, b"", false) to Redis; it granted 1 unit until the window's end:
/// let reply = GrantReply { units: 1, expires_at_ns: 11 * s, retry_after_ns: 0, limit: 100, remaining: 99 };
/// let done = leases.complete(&req, Some(reply), t);
/// assert!(done.decision.unwrap().allowed);
/// ```
pub struct Leases {
    config: Resolved,
    /// The limit as a rule on plain words: a key's debt under the `local`
    /// policy is a state of it.
    rule: Rule,
    store: Store<Entry>,
    /// The `local` failure policy's limiter.
    local: Option<KeyedLimiter>,
    health: Arc<Health>,
    counts: Counts,
}

/// What a check found to do.
#[derive(Debug)]
pub enum Step {
    /// Decided here.
    Decided(Decision),
    /// Decided here; send this request for the key's next grant in the
    /// background, then [`Leases::complete`] it.
    Refill(Decision, GrantRequest),
    /// No units: ask for this grant now (within the timeout), then
    /// [`Leases::complete`] it, whose decision is this check's.
    Fetch(GrantRequest),
    /// This key cannot be tracked (the node's keys are at capacity, every
    /// one holding units): decide it with a `RATECELL.CHECK` of its own.
    Direct,
}

/// What a grant reply, or its absence, decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The decision of the check that waited on a fetch (`None` for a
    /// refill).
    pub decision: Option<Decision>,
    /// When the grant failed and it stands for the node's probe: ask again
    /// at this time (the timeline of the completion's `now_ns`), in the
    /// background, with [`Leases::retry`]. One failed grant at a time
    /// gets one; the others' keys wait for its answer on the failure
    /// policy.
    pub retry_at_ns: Option<u64>,
}

/// A node's lease counters. Counted when a grant is asked for or answered
/// and on every decision not made from units, never on a spend (which
/// would put a shared write on every check): the checks themselves are
/// the caller's to count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Grants asked for with a check waiting.
    pub fetches: u64,
    /// Grants asked for in the background (refills).
    pub refills: u64,
    /// Replies received.
    pub replies: u64,
    /// Units granted, over every reply.
    pub units_granted: u64,
    /// Replies that granted nothing (the limit is spent for now).
    pub empty_grants: u64,
    /// Grant requests that had no answer (timeout, error, refused).
    pub failures: u64,
    /// Checks decided by the failure policy (SPEC §8's `lease_fallbacks`).
    pub lease_fallbacks: u64,
    /// Checks denied here by a denial Redis gave, not yet over.
    pub remembered_denials: u64,
    /// Checks the node could not track ([`Step::Direct`]).
    pub direct: u64,
    /// Keys tracked now.
    pub keys: u64,
}

#[derive(Default)]
struct Counts {
    fetches: Counter,
    refills: Counter,
    replies: Counter,
    units_granted: Counter,
    empty_grants: Counter,
    failures: Counter,
    lease_fallbacks: Counter,
    remembered_denials: Counter,
    direct: Counter,
}

fn bump(c: &Counter, n: u64) {
    c.fetch_add(n, Relaxed);
}

impl Leases {
    /// The leases of one limit, with nothing held.
    pub fn new(config: LeaseConfig) -> Result<Leases, LeaseError> {
        let resolved = config.resolve()?;
        let local = config.failure.limiter(&config.limit)?;
        let rule =
            Rule::new(&config.limit).map_err(|e| LeaseError::new(e.field.name(), e.message))?;
        Ok(Leases {
            config: resolved,
            rule,
            store: Store::new(resolved.capacity).map_err(|bytes| {
                LeaseError::new(
                    "capacity",
                    format!(
                        "{} keys need {bytes} bytes of places, which memory cannot hold",
                        resolved.capacity
                    ),
                )
            })?,
            local,
            health: Arc::default(),
            counts: Counts::default(),
        })
    }

    /// A check of `key` (a `u64` key is its 8 little-endian bytes, as in
    /// a [`KeyedLimiter`]) for `request`: its cost (0 is a peek, which
    /// never asks Redis), at its time.
    ///
    /// The core reads no clock, so the time is an argument: `now_ns` is the
    /// caller's clock reading (UNIX ns), and a time set on the request
    /// ([`Request::at`]) wins over it, as it wins over a limiter's clock. A
    /// leased limit has one tier: a request for another is never admitted
    /// ([`Decision::NEVER`]), as with a limiter that lacks the tier.
    #[inline]
    pub fn check<'k>(
        &self,
        key: impl Into<Key<'k>>,
        request: impl Into<Request>,
        now_ns: u64,
    ) -> Step {
        let r = request.into();
        if r.tier != Tier::DEFAULT {
            return Step::Decided(Decision::NEVER);
        }
        let now = r.at_ns.unwrap_or(now_ns);
        self.store
            .with_key(key.into(), |k| self.check_key(k, r.cost, now))
    }

    #[inline]
    fn check_key(&self, key: KeyRef<'_>, cost: u64, now: u64) -> Step {
        // A check whose entry was retired or reused under it (another
        // key's insertion evicted it) looks again; one that loses that race
        // every turn meets keys churning faster than they are checked, and
        // Redis decides.
        for _ in 0..LOOKUPS {
            match self.store.find(key, |e| e.cell.open()) {
                Some((e, word)) => {
                    if let Ok(step) = self.check_entry(e, key.bytes, word, cost, now) {
                        return step;
                    }
                }
                None => {
                    if self.store.upsert(key, now, Entry::new, |_| ()).is_none() {
                        break;
                    }
                }
            }
        }
        self.direct()
    }

    #[cold]
    fn direct(&self) -> Step {
        bump(&self.counts.direct, 1);
        Step::Direct
    }

    /// The decision of a spend that left `left` units.
    #[inline]
    fn spent(&self, left: u64) -> Decision {
        Decision {
            allowed: true,
            limit: self.config.reported_limit(),
            remaining: left,
            retry_after_ns: 0,
            reset_after_ns: 0,
            wait_ns: 0,
        }
    }

    fn denial(&self, retry_after_ns: u64) -> Decision {
        Decision {
            allowed: false,
            limit: self.config.reported_limit(),
            remaining: 0,
            retry_after_ns: retry_after_ns.max(1),
            reset_after_ns: 0,
            wait_ns: 0,
        }
    }

    /// Whether `e` is still in the generation of `word`, the word its
    /// lookup opened: the entry's words read since (with `Acquire`), and
    /// the key's bytes the lookup compared, are then that key's.
    #[inline]
    fn still(e: &Entry, word: Word) -> bool {
        e.cell.open().generation() == word.generation()
    }

    /// A check of the entry its lookup found, `word` loaded before the
    /// key's bytes were compared; `Err` when the entry was retired or
    /// reused meanwhile (nothing was spent or decided).
    #[inline]
    fn check_entry(
        &self,
        e: &Node<Entry>,
        key: &[u8],
        word: Word,
        cost: u64,
        now: u64,
    ) -> Result<Step, Moved> {
        let q = cost.max(1);
        if cost == 0 {
            // A peek never asks Redis: it says whether a unit is in hand.
            let held = word.held();
            let denied = e.denied_until.load(Acquire);
            if !word.is_live() || !Self::still(e, word) {
                return Err(Moved);
            }
            return Ok(Step::Decided(if held.covers(1, now, self.config.span) {
                self.spent(held.units)
            } else {
                self.denial(denied.saturating_sub(now))
            }));
        }
        match e.cell.spend(word, q, now, self.config.span) {
            Spend::Left(left) => {
                let refill = e.refill.load(Relaxed);
                if refill != 0 && (left < refill || now >= e.refill_at.load(Relaxed)) {
                    return Ok(self.refill(e, key, word, left, now));
                }
                Ok(Step::Decided(self.spent(left)))
            }
            Spend::Short(held) => self.no_units(e, key, word, held, q, now),
            Spend::Moved => Err(Moved),
        }
    }

    /// A spend crossed a refill threshold: one check per grant gets here
    /// and asks for the next one.
    #[cold]
    fn refill(&self, e: &Node<Entry>, key: &[u8], word: Word, left: u64, now: u64) -> Step {
        let d = self.spent(left);
        // No refill while Redis has said "nothing yet" or is away: the
        // remembered denial and the probe cover those.
        if now < e.denied_until.load(Relaxed) || self.health.down.load(Relaxed) {
            return Step::Decided(d);
        }
        // Under the lock the generation is either the spend's, whose
        // threshold one check disarms, or over (nothing to refill).
        let mut s = e.lock();
        if !Self::still(e, word) || e.refill.swap(0, Relaxed) == 0 {
            return Step::Decided(d);
        }
        let want = self.want(e, &mut s, 0, now);
        bump(&self.counts.refills, 1);
        Step::Refill(d, self.request(e, &mut s, key, want, now, None))
    }

    /// A request for `e`'s key (`s` its lock), carrying its debt.
    fn request(
        &self,
        e: &Node<Entry>,
        s: &mut Slow,
        key: &[u8],
        want: u64,
        at: u64,
        cost: Option<u64>,
    ) -> GrantRequest {
        GrantRequest::new(self.store.share(e), s, key, want, at, cost, &self.rule)
    }

    /// `w` for a request made at `now` with `pending` more checks waiting.
    fn want(&self, e: &Entry, s: &mut Slow, pending: u64, now: u64) -> u64 {
        let h = self.config.horizon;
        let held = e.cell.load().units;
        let spent = s.counted_units.saturating_sub(held);
        s.counted_units = held;
        let unmet = e.unmet.swap(0, Relaxed);
        s.demand.add(now, spent.saturating_add(unmet), h);
        let seen = s.demand.estimate(now, h).saturating_add(pending);
        grant_size(seen, self.config.max_grant).max(pending)
    }

    /// A check that found too few units for a request of `q` dated `now`
    /// (`held`, what the cell held).
    #[cold]
    fn no_units(
        &self,
        e: &Node<Entry>,
        key: &[u8],
        word: Word,
        held: Held,
        q: u64,
        now: u64,
    ) -> Result<Step, Moved> {
        let limit = self.config.reported_limit();
        if q > limit {
            // No grant can cover it (SPEC §3: never).
            return Ok(Step::Decided(Decision {
                retry_after_ns: u64::MAX,
                ..self.denial(1)
            }));
        }
        let denied = e.denied_until.load(Acquire);
        if !word.is_live() || !Self::still(e, word) {
            return Err(Moved);
        }
        if now < denied {
            e.unmet.fetch_add(q, Relaxed);
            bump(&self.counts.remembered_denials, 1);
            return Ok(Step::Decided(self.denial(denied - now)));
        }
        let span = self.config.span;
        if !self.config.send_at && held.units >= q && now < held.from(span) {
            // Dated before the period of the units in hand: its own period's
            // units, had this node any, are gone, and on the server's clock
            // a grant now would be of the later period too.
            return Ok(Step::Decided(self.denial(held.from(span) - now)));
        }
        if self.health.down.load(Relaxed) {
            e.unmet.fetch_add(q, Relaxed);
            return Ok(Step::Decided(self.fallback(e, key, q, now)));
        }
        let mut s = e.lock();
        // Under the lock the generation cannot end: the key's, if it is
        // the one the lookup opened.
        if !Self::still(e, word) {
            return Err(Moved);
        }
        // A grant may have come while this check waited for the lock, or
        // one kept for later may be due now.
        self.promote(e, &mut s, now);
        if let Spend::Left(left) = e.cell.spend(e.cell.open(), q, now, span) {
            return Ok(Step::Decided(self.spent(left)));
        }
        let want = self.want(e, &mut s, q, now);
        bump(&self.counts.fetches, 1);
        Ok(Step::Fetch(self.request(
            e,
            &mut s,
            key,
            want,
            now,
            Some(q),
        )))
    }

    /// Puts the kept grant in hand once the one in hand is spent or has
    /// expired (its leftover, fewer units than a check wanted, is lost:
    /// losing units never admits more).
    fn promote(&self, e: &Entry, s: &mut Slow, now: u64) {
        let Some(next) = s.next else { return };
        if now >= next.until {
            s.next = None;
            return;
        }
        let (old, new) = e
            .cell
            .update(|held| (held.is_spent(now) || held.units < next.units).then_some(next));
        if new.is_some() {
            s.next = None;
            self.rebase(e, s, old, next, now);
        }
    }

    /// The cell went from `old` to `new` (a grant applied or promoted):
    /// counts the spends up to `old`, and sets the refill thresholds of
    /// `new`.
    fn rebase(&self, e: &Entry, s: &mut Slow, old: Held, new: Held, now: u64) {
        let spent = s.counted_units.saturating_sub(old.units);
        s.demand.add(now, spent, self.config.horizon);
        s.counted_units = new.units;
        s.refill_below = new.units / 4;
        e.refill_at
            .store(new.until - new.until.saturating_sub(now) / 5, Release);
        e.refill.store(s.refill_below + 1, Release);
    }

    /// Hands back the answer to `req`: the reply, or `None` when there was
    /// none in time (or an error). `now_ns` is when it came, on the node's
    /// clock (or the explicit timeline of `send_at`): a grant already
    /// expired then is lost, and a failure's probe is due a delay after
    /// it. A fetch's check is decided at its own time.
    pub fn complete(
        &self,
        req: &GrantRequest,
        reply: Option<GrantReply>,
        now_ns: u64,
    ) -> Completion {
        let e = &req.entry;
        let now = now_ns;
        let Some(reply) = reply else {
            return self.failed(req, now);
        };
        bump(&self.counts.replies, 1);
        bump(&self.counts.units_granted, reply.units);
        // Redis answers: every key is back on the global limit.
        let h = &self.health;
        h.failures.store(0, Relaxed);
        h.down.store(false, Relaxed);
        if req.probe.is_some() {
            h.probing.store(false, Relaxed);
        }
        let mut s = e.lock();
        // The reply took the debt it carried.
        req.done.store(true, Relaxed);
        if reply.units == 0 {
            bump(&self.counts.empty_grants, 1);
            let retry = reply.retry_after_ns;
            // "Never" cannot happen for a cost-1 grant; it is remembered
            // for one horizon rather than forever.
            let retry = if retry == u64::MAX {
                self.config.horizon
            } else {
                retry
            };
            e.denied_until
                .store(req.at.saturating_add(retry).max(now), Release);
            // Whatever is still in hand keeps its refill thresholds; the
            // next refill waits for the denial to end.
            e.refill.store(s.refill_below + 1, Release);
        } else {
            e.denied_until.store(0, Release);
            let until = reply.expires_at_ns.saturating_sub(self.config.skew);
            self.apply(
                e,
                &mut s,
                Held {
                    units: reply.units,
                    until,
                },
                now,
            );
        }
        drop(s);
        // The request keeps the entry in its generation: no `Moved`. The
        // grant was decided at this check's date, so its period holds that
        // date: only the skew at its end is taken off (a unit of another
        // period in hand may pay only as any check's would).
        let decision = req.cost.map(|q| {
            let span = self.config.span;
            match e.cell.spend(e.cell.open(), q, req.at, span) {
                Spend::Left(left) => self.spent(left),
                _ if reply.units == 0 => {
                    self.denial(e.denied_until.load(Relaxed).saturating_sub(req.at))
                }
                // Dated before the grant's period: its own period's units
                // are gone.
                Spend::Short(held) if held.units >= q && req.at < held.from(span) => {
                    self.denial(held.from(span) - req.at)
                }
                // Granted fewer than the cost, or others spent them first.
                _ => self.denial(1),
            }
        });
        Completion {
            decision,
            retry_at_ns: None,
        }
    }

    /// A grant of `g` (its `until` with the skew taken off) arrives.
    fn apply(&self, e: &Entry, s: &mut Slow, g: Held, now: u64) {
        if now >= g.until {
            return; // Expired on arrival: lost.
        }
        let (old, new) = e.cell.update(|held| {
            if held.is_spent(now) {
                Some(g)
            } else if held.until == g.until {
                // The same period: one pool.
                Some(Held {
                    units: held.units.saturating_add(g.units),
                    until: g.until,
                })
            } else {
                None
            }
        });
        match new {
            Some(new) => {
                // A merge keeps the spends before it counted: rebase from
                // the old units plus the grant.
                let old = if old.until == new.until && !old.is_spent(now) {
                    s.counted_units = s.counted_units.saturating_add(g.units);
                    Held {
                        units: old.units + g.units,
                        ..old
                    }
                } else {
                    old
                };
                self.rebase(e, s, old, new, now);
            }
            None => {
                // Units in hand of another expiry: keep this grant for
                // when they are gone (the later-expiring of two, or both
                // as one when they expire together).
                s.next = Some(match s.next {
                    Some(n) if now < n.until && n.until == g.until => Held {
                        units: n.units.saturating_add(g.units),
                        ..g
                    },
                    Some(n) if now < n.until && n.until > g.until => n,
                    _ => g,
                });
            }
        }
    }

    /// No answer: the node is down until a reply comes, and every key's
    /// checks without units go to the failure policy. The first failure
    /// while no probe is on its way, or the probe's own, asks for the
    /// (next) probe.
    fn failed(&self, req: &GrantRequest, now: u64) -> Completion {
        let e = &req.entry;
        bump(&self.counts.failures, 1);
        let h = &self.health;
        let failures = h.failures.fetch_add(1, Relaxed).saturating_add(1);
        h.down.store(true, Relaxed);
        let probe = req.probe.is_some() || !h.probing.swap(true, Relaxed);
        let retry_at_ns = probe.then(|| {
            let at = now.saturating_add(probe_delay_ns(failures));
            h.probe_at.store(at, Relaxed);
            at
        });
        {
            let mut s = e.lock();
            req.give_back(&mut s);
            req.done.store(true, Relaxed);
        }
        let decision = req.cost.map(|q| self.fallback(e, &req.key, q, req.at));
        Completion {
            decision,
            retry_at_ns,
        }
    }

    /// The failure policy's decision for `e`'s key, counted; an admission
    /// by the `local` policy is added to the key's debt.
    fn fallback(&self, e: &Entry, key: &[u8], q: u64, now: u64) -> Decision {
        bump(&self.counts.lease_fallbacks, 1);
        match &self.local {
            Some(local) => {
                let d = local.check(key, Request::new(q).at(now));
                if d.allowed {
                    e.lock().charge(&self.rule, now, q);
                }
                d
            }
            None => {
                let next = self.health.probe_at.load(Relaxed);
                self.denial(next.saturating_sub(now))
            }
        }
    }

    /// The grant `req` asked for, asked again at `at_ns` (a completion's
    /// `retry_at_ns`) in the background, as the node's probe: no check
    /// waits on it, and it carries the key's debt as it is now.
    #[must_use]
    pub fn retry(&self, req: &GrantRequest, at_ns: u64) -> GrantRequest {
        let e = &req.entry;
        let mut s = e.lock();
        let mut retry = self.request(e, &mut s, &req.key, req.want, at_ns, None);
        retry.probe = Some(self.health.clone());
        retry
    }

    /// Whether the node's last grant failed and no reply has come since:
    /// every key without units is then decided by the failure policy.
    pub fn is_down(&self) -> bool {
        self.health.down.load(Relaxed)
    }

    /// The `RATECELL.LEASE` command for `req` (its name first), the Redis
    /// key being `prefix` followed by the key's bytes; with the key's
    /// debt as `CHARGE` pairs. A fetch is decided at its check's date
    /// (`DATED`), so that the grant is of that check's period; a refill or
    /// probe on the server's clock; either at the request's time on the
    /// node's timeline (`AT`) when grants are ([`LeaseConfig::send_at`]).
    pub fn command(&self, req: &GrantRequest, prefix: &[u8]) -> Vec<Vec<u8>> {
        let mut key = prefix.to_vec();
        key.extend_from_slice(&req.key);
        let when = if self.config.send_at {
            When::At(req.at)
        } else if req.is_fetch() {
            When::Dated(req.at)
        } else {
            When::Server
        };
        lease_args(&self.config, key, req.want, when, req.charges())
    }

    /// The counters.
    pub fn stats(&self) -> LeaseStats {
        let c = &self.counts;
        let get = |x: &Counter| x.load(Relaxed);
        LeaseStats {
            fetches: get(&c.fetches),
            refills: get(&c.refills),
            replies: get(&c.replies),
            units_granted: get(&c.units_granted),
            empty_grants: get(&c.empty_grants),
            failures: get(&c.failures),
            lease_fallbacks: get(&c.lease_fallbacks),
            remembered_denials: get(&c.remembered_denials),
            direct: get(&c.direct),
            keys: self.store.len() as u64,
        }
    }

    /// The algorithm leased.
    pub fn algorithm(&self) -> Algorithm {
        self.config.params.algorithm
    }
}

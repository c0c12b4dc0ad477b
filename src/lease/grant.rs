//! The grant rule of [SPEC §8](crate::spec#8-leases-one-limit-for-a-fleet-decided-locally):
//! how many units a node may spend on its own, and the period they belong
//! to; and the charges that carry a node's own admissions (made while
//! Redis was away) into the key's state. Pure functions on a key's plain
//! words ([`Rule`]'s layouts): the Redis module decides every grant with
//! them, and the protocol's model (`tests/lease_model.rs`) checks them.

use crate::check::decision::Decision;
use crate::config::{Algorithm, Params};
use crate::state::Rule;

/// A grant: `units` to spend before `expires_at_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Units granted; 0 when the algorithm admits none now.
    pub units: u64,
    /// When the units expire, in UNIX ns (for no units: `t`). They belong
    /// to the period that ends then: a window, a refill step, or for GCRA
    /// the lease's lifetime `E` from `t` (SPEC §8).
    pub expires_at_ns: u64,
    /// For no units, when a grant of one can next succeed (ns from `t`;
    /// `u64::MAX` for never); else 0.
    pub retry_after_ns: u64,
    /// The decision of the grant's own cost (a peek when `units` is 0).
    pub decision: Decision,
}

/// How long a grant lasts: the period `P` for the windows (a
/// window) and the token bucket (a refill step), `E` for GCRA (`expire_ns`,
/// `None` or 0 for a tenth of the period, clamped to one emission interval
/// ..= the period). A window's or a refill step's grant belongs to the
/// `lifetime_ns` before it expires; a GCRA grant to the `E` either side of
/// its time (SPEC §8). Only there may a node spend them.
pub(crate) fn lifetime_ns(params: &Params, expire_ns: Option<u64>) -> u64 {
    match params.algorithm {
        Algorithm::Gcra => {
            let e = match expire_ns {
                None | Some(0) => params.period / 10,
                Some(e) => e,
            };
            e.clamp(params.interval, params.period)
        }
        _ => params.period,
    }
}

/// Grants up to `want` units at `t` on `words` (the key's state, zeros for
/// a missing key) under `rule`, and applies the grant to `words`: the
/// largest cost the algorithm admits now, decided as a check of that cost,
/// and when its units expire. `expire_ns` is a GCRA grant's lifetime `E`
/// (`None`: a tenth of the period).
///
/// # Panics
/// If the rule's algorithm is not leasable (gcra, token_bucket,
/// fixed_window, sliding_window), or `words` is not the rule's length.
pub fn grant(rule: &Rule, words: &mut [u64], t: u64, want: u64, expire_ns: Option<u64>) -> Grant {
    let decide = |cost: u64| {
        let mut w = words.to_vec();
        let d = rule.decide(&mut w, t, cost);
        (d, w)
    };
    // Admission is monotone in the cost for every leasable algorithm: the
    // largest admitted cost is found by bisection, in at most 33 decisions.
    let (mut admitted, mut refused) = (0u64, want.saturating_add(1));
    while refused - admitted > 1 {
        let mid = admitted + (refused - admitted) / 2;
        if decide(mid).0.allowed {
            admitted = mid;
        } else {
            refused = mid;
        }
    }
    if admitted == 0 {
        let (peek, _) = decide(1);
        return Grant {
            units: 0,
            expires_at_ns: t,
            retry_after_ns: peek.retry_after_ns,
            decision: decide(0).0,
        };
    }
    let (decision, after) = decide(admitted);
    words.copy_from_slice(&after);
    let params = rule
        .config()
        .params()
        .expect("a rule's configuration is valid");
    let period = params.period;
    let window_end = |window: u64| window.saturating_add(1).saturating_mul(period);
    let expires_at_ns = match params.algorithm {
        // [window, count] and [window, prev, cur]: the window that counted them.
        Algorithm::FixedWindow | Algorithm::SlidingWindow => window_end(after[0]),
        // [used, last]: the next refill.
        Algorithm::TokenBucket => after[1].saturating_add(period),
        Algorithm::Gcra => t.saturating_add(lifetime_ns(&params, expire_ns)),
        other => panic!("{other} is not leasable"),
    };
    Grant {
        units: admitted,
        expires_at_ns,
        retry_after_ns: 0,
        decision,
    }
}

/// Units a node admitted on its own at `at_ns`, to be added to the key's
/// state before its next grant (`CHARGE <at_ns> <units>`, SPEC §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    /// When they were admitted (UNIX ns).
    pub at_ns: u64,
    /// How many.
    pub units: u64,
}

/// The charges that carry `debt`, a state of `rule` that only a node's own
/// admissions fed ([`Rule::charge`]), into the key's state at `now`: the
/// same effect on every later decision as charging each admission at its
/// time (at most two charges; none for a fresh debt).
pub(crate) fn charges(rule: &Rule, debt: &[u64], now: u64) -> Vec<Charge> {
    let period = rule.config().period_ns;
    let at = |at_ns: u64, units: u64| (units > 0).then_some(Charge { at_ns, units });
    let found = match (rule.config().algorithm, debt) {
        (Algorithm::FixedWindow, &[window, count]) => [at(window * period, count), None],
        (Algorithm::SlidingWindow, &[window, prev, cur]) => [
            window.checked_sub(1).and_then(|w| at(w * period, prev)),
            at(window * period, cur),
        ],
        (Algorithm::TokenBucket, &[used, last]) => [at(last, used), None],
        // The emission intervals still ahead of `now`, charged as if
        // admitted so many intervals before `tat`: the same `tat` results.
        (Algorithm::Gcra, &[tat]) if tat > now => {
            let interval = rule.gcra_interval().unwrap_or(1).max(1);
            let units = (tat - now).div_ceil(interval);
            [at(tat.saturating_sub(units * interval), units), None]
        }
        _ => [None, None],
    };
    found.into_iter().flatten().collect()
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;
    use crate::config::Config;

    const T0: u64 = 1_700_000_000_000_000_000;
    const S: u64 = 1_000_000_000;

    fn rule(alg: Algorithm, limit: u64) -> Rule {
        Rule::new(&Config::new(alg, limit, S)).unwrap()
    }

    #[test]
    fn a_fixed_window_grants_what_remains_until_its_end() {
        let r = rule(Algorithm::FixedWindow, 10);
        let mut w = vec![0; r.words()];
        let t = T0 + S / 4;
        let got: Vec<u64> = (0..4)
            .map(|_| grant(&r, &mut w, t, 4, None).units)
            .collect();
        assert_eq!(got, [4, 4, 2, 0]);
        assert_eq!(grant(&r, &mut w, t, 4, None).expires_at_ns, t);
        let mut w2 = vec![0; r.words()];
        assert_eq!(grant(&r, &mut w2, t, 4, None).expires_at_ns, T0 + S);
        // Out of units: when the next window opens.
        assert_eq!(grant(&r, &mut w, t, 1, None).retry_after_ns, T0 + S - t);
        // The next window grants again.
        assert_eq!(grant(&r, &mut w, T0 + S, 4, None).units, 4);
    }

    #[test]
    fn gcra_grants_expire_after_a_tenth_of_the_period_by_default() {
        let r = rule(Algorithm::Gcra, 100);
        let mut w = vec![0; r.words()];
        let g = grant(&r, &mut w, T0, 30, None);
        assert_eq!((g.units, g.expires_at_ns), (30, T0 + S / 10));
        let g = grant(&r, &mut w.clone(), T0, 100, Some(1));
        assert_eq!(g.units, 70);
        // Clamped to one emission interval (10 ms) ..= the period.
        assert_eq!(g.expires_at_ns, T0 + S / 100);
        assert_eq!(grant(&r, &mut w, T0, 1, Some(10 * S)).expires_at_ns, T0 + S);
    }

    #[test]
    fn a_token_bucket_grant_expires_at_the_next_refill() {
        let r = rule(Algorithm::TokenBucket, 5);
        let mut w = vec![0; r.words()];
        let g = grant(&r, &mut w, T0 + 3, 2, None);
        assert_eq!((g.units, g.expires_at_ns), (2, T0 + 3 + S));
    }

    /// SPEC §8's fixed window bound: however many nodes ask, with whatever
    /// wants, and spend whenever within the grant's window, each window
    /// admits at most the limit.
    #[test]
    fn nodes_never_spend_more_than_the_limit_in_a_window() {
        let r = rule(Algorithm::FixedWindow, 50);
        let p = r.config().params().unwrap();
        let mut w = vec![0; r.words()];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut spent_per_window = std::collections::HashMap::<u64, u64>::new();
        let mut t = T0;
        for _ in 0..5_000 {
            t += next() % (S / 20);
            let g = grant(&r, &mut w, t, 1 + next() % 20, None);
            // Each unit spent at some time of its period.
            let start = g.expires_at_ns - lifetime_ns(&p, None);
            for _ in 0..g.units {
                let spend = start + next() % (g.expires_at_ns - start);
                *spent_per_window.entry(spend / S).or_default() += 1;
            }
        }
        assert!(spent_per_window.len() > 5);
        assert!(
            spent_per_window.values().all(|&n| n <= 50),
            "{spent_per_window:?}"
        );
    }

    /// Charging a debt's charges has the effect of charging each of its
    /// admissions at its own time.
    #[test]
    fn a_debts_charges_act_as_its_admissions() {
        for alg in [
            Algorithm::Gcra,
            Algorithm::TokenBucket,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
        ] {
            let r = rule(alg, 10);
            let times = [T0 + S / 3, T0 + S / 2, T0 + S + 7, T0 + S + S / 2];
            let now = T0 + S + S / 2 + 1;
            // A server state with admissions of its own.
            let mut server = vec![0; r.words()];
            r.decide(&mut server, T0 + S / 4, 2);
            let (mut each, mut debt) = (server.clone(), vec![0; r.words()]);
            for &t in &times {
                assert!(r.charge(&mut each, t, 1));
                assert!(r.charge(&mut debt, t, 1));
            }
            let mut carried = server.clone();
            for c in charges(&r, &debt, now) {
                r.charge(&mut carried, c.at_ns, c.units);
            }
            for t in [now, now + S / 3, now + S] {
                let a = r.decide(&mut each.clone(), t, 1);
                let b = r.decide(&mut carried.clone(), t, 1);
                assert!(
                    (b.allowed, b.remaining) <= (a.allowed, a.remaining),
                    "{alg} at +{}: each {a:?}, carried {b:?}",
                    t - now
                );
            }
            assert!(charges(&r, &vec![0; r.words()], now).is_empty(), "{alg}");
        }
    }
}

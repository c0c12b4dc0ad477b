//! `RATECELL.LEASE`'s grant rule (SPEC.md §8): how many units a node may
//! spend on its own, and until when. The one implementation of it; the
//! command applies the grant to the key's state as a check of that cost.
//!
//! Pure: a grant is computed on a copy of the key's words.

use ratecell::{Algorithm, Decision, state::Rule};

/// A grant: `units` to spend before `expires_at_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Units granted; 0 when the algorithm admits none now.
    pub units: u64,
    /// When the units expire, in UNIX ns (for no units: `t`).
    pub expires_at_ns: u64,
    /// For no units, when a grant of one can next succeed (ns from `t`;
    /// `u64::MAX` for never); else 0.
    pub retry_after_ns: u64,
    /// The decision of the grant's own cost (a peek when `units` is 0).
    pub decision: Decision,
}

/// Whether `algorithm` can be leased, or the error that says why not.
pub fn leasable(algorithm: Algorithm) -> Result<(), String> {
    match algorithm {
        Algorithm::Gcra
        | Algorithm::TokenBucket
        | Algorithm::FixedWindow
        | Algorithm::SlidingWindow => Ok(()),
        Algorithm::LeakyBucket => Err(
            "ERR leaky_bucket cannot be leased: its admissions carry a queue place only the server can assign (SPEC.md §8)".into(),
        ),
        other => Err(format!(
            "ERR {other} cannot be leased: its state places each unit in time, which spending a grant later would move (SPEC.md §8)"
        )),
    }
}

/// The grant for a request of up to `want` units at `t` on `words` (the
/// key's state, or zeros for a missing key) under `rule`: the largest cost
/// the algorithm admits now, as a check of that cost would decide it, and
/// when its units expire. `expire_ns` is a GCRA grant's lifetime (`None`:
/// a tenth of the period), clamped to one emission interval ..= the period.
///
/// # Panics
/// If the rule's algorithm is not leasable ([`leasable`]), or `words` is
/// not the rule's length.
pub fn grant(rule: &Rule, words: &[u64], t: u64, want: u64, expire_ns: Option<u64>) -> Grant {
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
    let c = rule.config();
    let period = c.period_ns;
    let window_end = |window: u64| window.saturating_add(1).saturating_mul(period);
    let expires_at_ns = match c.algorithm {
        // [window, count] and [window, prev, cur]: the window that counted them.
        Algorithm::FixedWindow | Algorithm::SlidingWindow => window_end(after[0]),
        // [used, last]: the next refill.
        Algorithm::TokenBucket => after[1].saturating_add(period),
        Algorithm::Gcra => {
            let interval = period.div_ceil(c.limit);
            let lifetime = expire_ns.unwrap_or(period / 10).clamp(interval, period);
            t.saturating_add(lifetime)
        }
        other => panic!("{other} is not leasable"),
    };
    Grant {
        units: admitted,
        expires_at_ns,
        retry_after_ns: 0,
        decision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratecell::Config;

    const T0: u64 = 1_700_000_000_000_000_000;
    const S: u64 = 1_000_000_000;

    fn rule(alg: Algorithm, limit: u64) -> Rule {
        Rule::new(&Config::new(alg, limit, S)).unwrap()
    }

    /// Grants `want` at `t` and applies it, as the command does.
    fn take(rule: &Rule, words: &mut [u64], t: u64, want: u64) -> Grant {
        let g = grant(rule, words, t, want, None);
        if g.units > 0 {
            assert!(rule.decide(words, t, g.units).allowed);
        }
        g
    }

    #[test]
    fn a_fixed_window_grants_what_remains_until_its_end() {
        let r = rule(Algorithm::FixedWindow, 10);
        let mut w = vec![0; r.words()];
        let t = T0 + S / 4;
        let got: Vec<u64> = (0..4).map(|_| take(&r, &mut w, t, 4).units).collect();
        assert_eq!(got, [4, 4, 2, 0]);
        assert_eq!(grant(&r, &w, t, 4, None).expires_at_ns, t);
        let mut w2 = vec![0; r.words()];
        assert_eq!(take(&r, &mut w2, t, 4).expires_at_ns, T0 + S);
        // Out of units: when the next window opens.
        assert_eq!(grant(&r, &w, t, 1, None).retry_after_ns, T0 + S - t);
        // The next window grants again.
        assert_eq!(take(&r, &mut w, T0 + S, 4).units, 4);
    }

    #[test]
    fn gcra_grants_expire_after_a_tenth_of_the_period_by_default() {
        let r = rule(Algorithm::Gcra, 100);
        let mut w = vec![0; r.words()];
        let g = take(&r, &mut w, T0, 30);
        assert_eq!((g.units, g.expires_at_ns), (30, T0 + S / 10));
        let g = grant(&r, &w, T0, 100, Some(1));
        assert_eq!(g.units, 70);
        // Clamped to one emission interval (10 ms) ..= the period.
        assert_eq!(g.expires_at_ns, T0 + S / 100);
        assert_eq!(grant(&r, &w, T0, 1, Some(10 * S)).expires_at_ns, T0 + S);
    }

    #[test]
    fn a_token_bucket_grant_expires_at_the_next_refill() {
        let r = rule(Algorithm::TokenBucket, 5);
        let mut w = vec![0; r.words()];
        let g = take(&r, &mut w, T0 + 3, 2);
        assert_eq!((g.units, g.expires_at_ns), (2, T0 + 3 + S));
    }

    #[test]
    fn only_four_algorithms_lease() {
        for alg in Algorithm::ALL {
            let ok = matches!(
                alg,
                Algorithm::Gcra
                    | Algorithm::TokenBucket
                    | Algorithm::FixedWindow
                    | Algorithm::SlidingWindow
            );
            let r = leasable(alg);
            assert_eq!(r.is_ok(), ok, "{alg}");
            if let Err(e) = r {
                assert!(e.starts_with("ERR ") && e.contains(alg.name()), "{e}");
            }
        }
    }

    /// SPEC §8's fixed window bound: however many nodes ask, with whatever
    /// wants, and spend whenever before expiry, each window admits at most
    /// the limit.
    #[test]
    fn nodes_never_spend_more_than_the_limit_in_a_window() {
        let r = rule(Algorithm::FixedWindow, 50);
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
            let g = take(&r, &mut w, t, 1 + next() % 20);
            // Each unit spent at some time before it expires.
            for _ in 0..g.units {
                let spend = t + next() % (g.expires_at_ns - t).max(1);
                assert!(spend < g.expires_at_ns);
                *spent_per_window.entry(spend / S).or_default() += 1;
            }
        }
        assert!(spent_per_window.len() > 5);
        assert!(
            spent_per_window.values().all(|&n| n <= 50),
            "{spent_per_window:?}"
        );
    }
}

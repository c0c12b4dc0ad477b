//! A quota per tier: one keyed limiter whose keys are held to different
//! limits (free, paid, internal), the tier named by each check.
//!
//! A tiered limiter is the ordinary keyed table over one composite
//! algorithm, [`Tiers`]: the tiers' limits, given at construction, all
//! reading one state layout. A check names a tier, and the table decides
//! the key's stored state with that tier's parameters (`check_as` on the
//! tables). Nothing records which tier a key belongs to; the caller says
//! so on every check, as redis-cell passes its parameters on every call.
//!
//! # A key whose tier changes
//! Its state is kept and read by the new tier's parameters at its next
//! check: exactly what a live reconfiguration does to every key
//! (`crate::policy::reconfigure`, the carry-over rules in docs/ALGORITHMS.md,
//! "Live reconfiguration"), here for one key. So what the key has spent
//! counts against its new quota: a GCRA key keeps its backlog, a token
//! bucket key the tokens it took (a key that took 80 of a paid burst of
//! 100 has nothing left at a free burst of 10, and 20 again if it goes back
//! to paid before it writes a free-tier state), a window key its counts.
//! Nothing is rewritten until the key is admitted with a cost above 0,
//! which stores the state as its tier left it.
//!
//! Hence the tiers of one limiter may differ only where a live
//! reconfiguration may: the same algorithm per limit, the same period for
//! the window algorithms, the same sub-windows, and the same limit for the
//! sliding log; the same number of limits, capacity and overflow policy.
//! The one rule live reconfiguration has and tiers do not is the bit width:
//! all tiers are known at construction, so each count is packed in the
//! width of the largest tier's limit or burst, and tiers may be any size
//! apart (10 and 10,000 per second).
//!
//! A table drops a state only when it is equivalent to fresh under every
//! tier, so a key evicted and re-created cannot get a fresher state than
//! any tier would have given it.
//!
//! This module owns the validation of a list of tiers, [`Tiers`] and
//! [`TierError`]; it touches no atomic.

use crate::algorithm::all_of::AllOf;
use crate::algorithm::{BlockAlgorithm, StateError, WordAlgorithm, Words};
use crate::check::decision::Decision;
use crate::config::{Config, ConfigError, Error, Field};
use crate::table::word::MIN_FINGERPRINT_BITS;
use std::fmt;

/// The most tiers one keyed limiter serves.
pub const MAX_TIERS: usize = 16;

/// A check named a tier the limiter does not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierError {
    /// The tier asked for.
    pub tier: usize,
    /// How many tiers the limiter has (1 for a limiter built without tiers).
    pub tiers: usize,
}

impl fmt::Display for TierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid tier: {} is outside 0..={} (this limiter has {} tier{})",
            self.tier,
            self.tiers - 1,
            self.tiers,
            if self.tiers == 1 { "" } else { "s" }
        )
    }
}

impl std::error::Error for TierError {}

/// The tiers' composites, all of one layout; as an algorithm of the table
/// it decides as tier 0 (a check that names no tier), and judges freshness
/// under every tier.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tiers {
    // Only `tiers[..len]` are tiers; the rest repeat the first (an array,
    // so the algorithm stays `Copy` like every other).
    tiers: [AllOf; MAX_TIERS],
    len: usize,
}

impl Tiers {
    /// Tier `tier`'s composite.
    #[inline]
    pub(crate) fn get(&self, tier: usize) -> Result<&AllOf, TierError> {
        self.tiers[..self.len].get(tier).ok_or(TierError {
            tier,
            tiers: self.len,
        })
    }

    fn all(&self) -> &[AllOf] {
        &self.tiers[..self.len]
    }

    /// Whether the states fit one word (then the word table holds them).
    pub(crate) fn is_word(&self) -> bool {
        self.tiers[0].is_word()
    }

    /// Limits per tier.
    pub(crate) fn limits(&self) -> usize {
        self.tiers[0].len()
    }
}

fn invalid(field: Field, message: String) -> Error {
    ConfigError { field, message }.into()
}

/// Checks a list of tiers (each a list of limits) and builds their
/// composites over one layout.
///
/// Errors name the field: `Tiers` for no tiers or more than
/// [`MAX_TIERS`]; `Limits` for a tier of no limits, too many, or not as
/// many as tier 0; any field of any limit as a constructor would; and,
/// for a tier that differs from tier 0 where a key's state could not be
/// carried over (see the module doc), the field that differs.
pub(crate) fn tiers(tiers: &[&[Config]]) -> Result<Tiers, Error> {
    if !(1..=MAX_TIERS).contains(&tiers.len()) {
        return Err(invalid(
            Field::Tiers,
            format!(
                "{} tiers: a tiered limiter serves 1 to {MAX_TIERS}",
                tiers.len()
            ),
        ));
    }
    let first = tiers[0];
    let in_tier = |j: usize, e: Error| match e {
        Error::Config(c) => invalid(c.field, format!("tier {j}, {}", c.message)),
        other => other,
    };
    let mut rules = Vec::with_capacity(tiers.len());
    for (j, tier) in tiers.iter().enumerate() {
        let r = crate::policy::multi::rules(tier).map_err(|e| in_tier(j, e))?;
        if tier.len() != first.len() {
            return Err(invalid(
                Field::Limits,
                format!(
                    "tier {j} has {} limits, tier 0 has {}: every tier has the same limits, with its own values",
                    tier.len(),
                    first.len()
                ),
            ));
        }
        if first[0].capacity == 0 {
            return Err(invalid(
                Field::Capacity,
                "0: tiers are for a keyed limiter, which needs room for at least 1 key".into(),
            ));
        }
        if j > 0 {
            // A key moving between tiers is a live reconfiguration of one
            // key: the same rule decides what may differ.
            crate::policy::reconfigure::check(first, tier).map_err(|e| carry_over(j, e))?;
        }
        rules.push(r);
    }
    // Each count in the width of the largest tier's.
    for i in 0..first.len() {
        if let Some(bits) = rules.iter().filter_map(|r| r[i].count_bits()).max() {
            for r in &mut rules {
                r[i] = r[i].with_count_bits(bits);
            }
        }
    }
    let max_bits = 128 - MIN_FINGERPRINT_BITS;
    let built: Vec<AllOf> = rules.iter().map(|r| AllOf::new(r, max_bits)).collect();
    for (j, b) in built.iter().enumerate().skip(1) {
        crate::policy::reconfigure::same_layout(&built[0], b, first, tiers[j])
            .map_err(|e| carry_over(j, e))?;
    }
    let mut all = [built[0]; MAX_TIERS];
    all[..built.len()].copy_from_slice(&built);
    Ok(Tiers {
        tiers: all,
        len: built.len(),
    })
}

/// A reconfiguration's refusal, as the refusal of tier `j`.
fn carry_over(j: usize, e: Error) -> Error {
    match e {
        Error::Reconfigure(r) => invalid(
            r.field,
            format!(
                "tier {j}, limit {}: differs from tier 0 where a key's state cannot be carried over ({}); tiers may differ only as a live reconfiguration may",
                r.limit, r.message
            ),
        ),
        other => other,
    }
}

impl WordAlgorithm for Tiers {
    type State = u128;

    fn algorithm(&self) -> crate::config::Algorithm {
        WordAlgorithm::algorithm(&self.tiers[0])
    }

    #[inline]
    fn decide(&self, state: u128, t: u64, n: u64) -> (Decision, Option<u128>) {
        WordAlgorithm::decide(&self.tiers[0], state, t, n)
    }

    #[inline]
    fn decide_each(
        &self,
        state: u128,
        t: u64,
        n: u64,
        each: &mut [Decision],
    ) -> (Decision, Option<u128>) {
        WordAlgorithm::decide_each(&self.tiers[0], state, t, n, each)
    }

    /// Fresh under every tier: the next check may name any.
    fn is_fresh_at(&self, state: u128, t: u64) -> bool {
        self.all()
            .iter()
            .all(|a| WordAlgorithm::is_fresh_at(a, state, t))
    }

    /// Until fresh under every tier.
    fn fresh_after_ns(&self, state: u128, t: u64) -> u64 {
        self.all()
            .iter()
            .map(|a| WordAlgorithm::fresh_after_ns(a, state, t))
            .max()
            .unwrap_or(0)
    }

    #[inline]
    fn pack(&self, state: u128) -> u128 {
        WordAlgorithm::pack(&self.tiers[0], state)
    }

    #[inline]
    fn unpack(&self, word: u128) -> u128 {
        WordAlgorithm::unpack(&self.tiers[0], word)
    }

    fn state_bits(&self) -> u32 {
        WordAlgorithm::state_bits(&self.tiers[0])
    }

    /// A state some tier could have stored (else the first tier's reason).
    fn validate(&self, state: u128) -> Result<(), StateError> {
        let first = WordAlgorithm::validate(&self.tiers[0], state);
        if first.is_ok()
            || self
                .all()
                .iter()
                .any(|a| WordAlgorithm::validate(a, state).is_ok())
        {
            return Ok(());
        }
        first
    }
}

impl BlockAlgorithm for Tiers {
    fn words(&self) -> usize {
        BlockAlgorithm::words(&self.tiers[0])
    }

    #[inline]
    fn decide<W: Words + ?Sized>(&self, words: &mut W, t: u64, n: u64) -> Decision {
        BlockAlgorithm::decide(&self.tiers[0], words, t, n)
    }

    #[inline]
    fn decide_each<W: Words + ?Sized>(
        &self,
        words: &mut W,
        t: u64,
        n: u64,
        each: &mut [Decision],
    ) -> Decision {
        BlockAlgorithm::decide_each(&self.tiers[0], words, t, n, each)
    }

    fn is_fresh_at<W: Words + ?Sized>(&self, words: &W, t: u64) -> bool {
        self.all()
            .iter()
            .all(|a| BlockAlgorithm::is_fresh_at(a, words, t))
    }

    fn fresh_after_ns<W: Words + ?Sized>(&self, words: &mut W, t: u64) -> u64 {
        let mut most = 0;
        for a in self.all() {
            most = most.max(BlockAlgorithm::fresh_after_ns(a, words, t));
        }
        most
    }

    fn clear<W: Words + ?Sized>(&self, words: &mut W) {
        BlockAlgorithm::clear(&self.tiers[0], words);
    }

    fn saved_words<W: Words + ?Sized>(&self, words: &W, each: &mut dyn FnMut(usize)) {
        BlockAlgorithm::saved_words(&self.tiers[0], words, each);
    }

    fn validate<W: Words + ?Sized>(&self, words: &W) -> Result<(), StateError> {
        let first = BlockAlgorithm::validate(&self.tiers[0], words);
        if first.is_ok()
            || self
                .all()
                .iter()
                .any(|a| BlockAlgorithm::validate(a, words).is_ok())
        {
            return Ok(());
        }
        first
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;
    use crate::config::Algorithm;

    const SEC: u64 = 1_000_000_000;

    fn field(r: Result<Tiers, Error>) -> Field {
        match r {
            Err(Error::Config(e)) => e.field,
            Err(e) => panic!("not a config error: {e}"),
            Ok(_) => panic!("accepted"),
        }
    }

    fn keyed(alg: Algorithm, limit: u64, period: u64) -> Config {
        Config::new(alg, limit, period).capacity(100)
    }

    #[test]
    fn bad_tiers_are_refused_naming_the_field() {
        let a = keyed(Algorithm::Gcra, 10, SEC);
        assert_eq!(field(tiers(&[])), Field::Tiers);
        let one = [a];
        let many = vec![&one[..]; MAX_TIERS + 1];
        assert_eq!(field(tiers(&many)), Field::Tiers);
        assert!(tiers(&many[..MAX_TIERS]).is_ok());
        assert_eq!(field(tiers(&[&[a], &[]])), Field::Limits);
        assert_eq!(field(tiers(&[&[a], &[a, a]])), Field::Limits);
        assert_eq!(field(tiers(&[&[a], &[a.capacity(7)]])), Field::Capacity);
        assert_eq!(field(tiers(&[&[a.capacity(0)]])), Field::Capacity);
        let open = a.overflow(crate::config::Overflow::Allow);
        assert_eq!(field(tiers(&[&[a], &[open]])), Field::Overflow);
        let tb = keyed(Algorithm::TokenBucket, 10, SEC);
        assert_eq!(field(tiers(&[&[a], &[tb]])), Field::Algorithm);
        let fw = keyed(Algorithm::FixedWindow, 10, SEC);
        let fw2 = keyed(Algorithm::FixedWindow, 10, 2 * SEC);
        assert_eq!(field(tiers(&[&[fw], &[fw2]])), Field::PeriodNs);
        let log = keyed(Algorithm::SlidingLog, 10, SEC);
        let log2 = keyed(Algorithm::SlidingLog, 20, SEC);
        assert_eq!(field(tiers(&[&[log], &[log2]])), Field::Limit);
        let bad = keyed(Algorithm::Gcra, 0, SEC);
        let e = tiers(&[&[a], &[bad]]).err().unwrap();
        assert!(e.to_string().contains("tier 1"), "{e}");
    }

    #[test]
    fn tiers_far_apart_share_one_layout() {
        for alg in [
            Algorithm::TokenBucket,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
        ] {
            let free = keyed(alg, 10, SEC);
            let paid = keyed(alg, 100_000, SEC);
            let t = tiers(&[&[free], &[paid]]).unwrap();
            assert_eq!(t.get(0).unwrap().layout_differs(t.get(1).unwrap()), None);
            assert_eq!(t.get(2).err(), Some(TierError { tier: 2, tiers: 2 }));
        }
    }

    #[test]
    fn a_state_is_fresh_only_when_fresh_under_every_tier() {
        let t0 = 1_000 * SEC;
        let small = keyed(Algorithm::TokenBucket, 1, SEC).burst(2);
        let big = keyed(Algorithm::TokenBucket, 1, SEC).burst(50);
        let t = tiers(&[&[small], &[big]]).unwrap();
        // Take 10 of the big tier's 50.
        let (d, state) = WordAlgorithm::decide(t.get(1).unwrap(), 0, t0, 10);
        assert!(d.allowed);
        let state = state.unwrap();
        // Two seconds on, full again under the small tier, not the big.
        let later = t0 + 2 * SEC;
        assert!(WordAlgorithm::is_fresh_at(t.get(0).unwrap(), state, later));
        assert!(!WordAlgorithm::is_fresh_at(&t, state, later));
        assert_eq!(WordAlgorithm::fresh_after_ns(&t, state, later), 8 * SEC);
    }
}

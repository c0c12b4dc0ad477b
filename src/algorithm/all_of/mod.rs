//! Several limits checked as one (all-or-nothing): a composite algorithm
//! whose state is the concatenation of its limits' states, so the cell or
//! the table updates all of a key's limits at once (one CAS when they fit
//! one word, one latch otherwise) and nothing is ever spent then refunded.
//!
//! Each limit is decided by its own algorithm's `decide`, unchanged; this
//! module only places the states side by side and combines the decisions:
//! - `allowed`: every limit admits; only then is anything stored;
//! - `remaining`: the least over the limits, each on its state after the
//!   decision (unchanged when the request is not admitted), and `limit`
//!   that limit's `limit` (the first on ties);
//! - `retry_after_ns`: 0 when admitted, else the largest of the limits' own
//!   (`u64::MAX`, never, if any says never);
//! - `reset_after_ns`: the largest; `wait_ns`: the largest when admitted.
//!
//! A limit that alone would admit a request the others deny reports its
//! state as it stays: `remaining` and `reset_after_ns` are those of its
//! unchanged state, obtained from its own rule as the decision of a cost
//! no state admits (`limit + 1`), so no rule is written twice here.
//!
//! Two layouts, chosen at construction:
//! - word: every limit is a single-word algorithm and their states fit the
//!   bits the cell or table allows (128 direct, 96 keyed, which leaves the
//!   table its 32 fingerprint bits); each state sits at a bit offset;
//! - block: any mix; a single-word state takes two 64-bit words (its packed
//!   128-bit form), a multi-word state its block. Block limits are decided
//!   first on a view that drops writes; only when all admit are they decided
//!   again on the real words (the same inputs give the same decision), so
//!   a denial writes nothing.
//!
//! Two single-word limits, in either layout, take one dispatch on their
//! pair of algorithms into a copy of the check made for that pair
//! (`decide_pair`); three or more, or a multi-word limit, take the general
//! path. Both decide alike: the model tests compare them with the
//! conjunction of the limits.

use super::{
    BlockAlgorithm, StateError, Visit, WordAlgorithm, Words, bucketed_window::BucketedWindow,
    fixed_window::FixedWindow, gcra::Gcra, mask, packed_validate, sliding_log::SlidingLog,
    sliding_window::SlidingWindow, token_bucket::TokenBucket,
};
use crate::check::decision::Decision;
use crate::config::{Algorithm, Params};
use pair::One;
#[cfg(feature = "pair-checks")]
use pair::{Pair, decide_pair};

/// The most limits one limiter checks together.
pub const MAX_LIMITS: usize = 8;
/// One limit's rule.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Rule {
    Gcra(Gcra),
    TokenBucket(TokenBucket),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    BucketedWindow(BucketedWindow),
    SlidingLog(SlidingLog),
}

/// Runs `$word` with `$a` bound to a single-word rule, or `$block` with
/// `$a` bound to a multi-word one.
macro_rules! with_rule {
    ($rule:expr, $a:ident => word: $word:expr, block: $block:expr) => {
        match $rule {
            Rule::Gcra($a) => $word,
            Rule::TokenBucket($a) => $word,
            Rule::FixedWindow($a) => $word,
            Rule::SlidingWindow($a) => $word,
            Rule::BucketedWindow($a) => $block,
            Rule::SlidingLog($a) => $block,
        }
    };
}

/// Runs `$pair!(A, B)` for the form of two single-word rules of kinds
/// `A` and `B` ([`AllOf`]'s `form`, [`Rule::word_kind`]), else `$other`.
/// Without the feature `pair-checks`, always `$other`: no pair has a check
/// of its own.
#[cfg(feature = "pair-checks")]
macro_rules! by_pair_form {
    ($form:expr, $pair:ident, $other:expr) => {
        match $form {
            5 => $pair!(Gcra, Gcra),
            6 => $pair!(Gcra, TokenBucket),
            7 => $pair!(Gcra, FixedWindow),
            8 => $pair!(Gcra, SlidingWindow),
            9 => $pair!(TokenBucket, Gcra),
            10 => $pair!(TokenBucket, TokenBucket),
            11 => $pair!(TokenBucket, FixedWindow),
            12 => $pair!(TokenBucket, SlidingWindow),
            13 => $pair!(FixedWindow, Gcra),
            14 => $pair!(FixedWindow, TokenBucket),
            15 => $pair!(FixedWindow, FixedWindow),
            16 => $pair!(FixedWindow, SlidingWindow),
            17 => $pair!(SlidingWindow, Gcra),
            18 => $pair!(SlidingWindow, TokenBucket),
            19 => $pair!(SlidingWindow, FixedWindow),
            20 => $pair!(SlidingWindow, SlidingWindow),
            _ => $other,
        }
    };
}
#[cfg(not(feature = "pair-checks"))]
macro_rules! by_pair_form {
    ($form:expr, $pair:ident, $other:expr) => {{
        let _ = $form;
        $other
    }};
}
impl Rule {
    pub(crate) fn new(p: &Params) -> Rule {
        match p.algorithm {
            Algorithm::Gcra => Rule::Gcra(Gcra::new(p, false)),
            Algorithm::LeakyBucket => Rule::Gcra(Gcra::new(p, true)),
            Algorithm::TokenBucket => Rule::TokenBucket(TokenBucket::new(p)),
            Algorithm::FixedWindow => Rule::FixedWindow(FixedWindow::new(p)),
            Algorithm::SlidingWindow => Rule::SlidingWindow(SlidingWindow::new(p)),
            Algorithm::BucketedWindow => Rule::BucketedWindow(BucketedWindow::new(p)),
            Algorithm::SlidingLog => Rule::SlidingLog(SlidingLog::new(p)),
        }
    }

    /// The algorithm this rule decides by.
    pub(crate) fn algorithm(&self) -> Algorithm {
        match self {
            Rule::Gcra(a) => a.algorithm(),
            Rule::TokenBucket(_) => Algorithm::TokenBucket,
            Rule::FixedWindow(_) => Algorithm::FixedWindow,
            Rule::SlidingWindow(_) => Algorithm::SlidingWindow,
            Rule::BucketedWindow(_) => Algorithm::BucketedWindow,
            Rule::SlidingLog(_) => Algorithm::SlidingLog,
        }
    }

    /// The bits a single-word state packs each count in, for the rules
    /// whose width follows their limit or burst; `None` for the others.
    pub(crate) fn count_bits(&self) -> Option<u32> {
        match self {
            Rule::TokenBucket(a) => Some(a.count_bits()),
            Rule::FixedWindow(a) => Some(a.count_bits()),
            Rule::SlidingWindow(a) => Some(a.count_bits()),
            _ => None,
        }
    }

    /// The rule packing its counts in `bits` (at least its own; see
    /// [`Rule::count_bits`]); a rule without such counts is unchanged.
    pub(crate) fn with_count_bits(self, bits: u32) -> Rule {
        match self {
            Rule::TokenBucket(a) => Rule::TokenBucket(a.with_count_bits(bits)),
            Rule::FixedWindow(a) => Rule::FixedWindow(a.with_count_bits(bits)),
            Rule::SlidingWindow(a) => Rule::SlidingWindow(a.with_count_bits(bits)),
            other => other,
        }
    }

    /// A single-word rule's kind, 0 to 3 ([`AllOf`]'s `form`); `None` for
    /// a multi-word one.
    fn word_kind(&self) -> Option<u8> {
        match self {
            Rule::Gcra(_) => Some(0),
            Rule::TokenBucket(_) => Some(1),
            Rule::FixedWindow(_) => Some(2),
            Rule::SlidingWindow(_) => Some(3),
            Rule::BucketedWindow(_) | Rule::SlidingLog(_) => None,
        }
    }

    /// Bits of a single-word state; `None` for a multi-word one.
    fn state_bits(&self) -> Option<u32> {
        with_rule!(self, a => word: Some(a.state_bits()), block: { let _ = a; None })
    }

    /// 64-bit words the state takes in the block layout.
    pub(crate) fn words(&self) -> usize {
        with_rule!(self, a => word: { let _ = a; 2 }, block: a.words())
    }

    /// A single-word rule on its packed state.
    #[allow(
        clippy::inline_always,
        reason = "the multi-limit check folds each limit's decision as it comes; a call per limit would undo that"
    )]
    #[inline(always)]
    fn decide_word(&self, packed: u128, t: u64, n: u64) -> (Decision, Option<u128>) {
        with_rule!(self, a => word: {
            let (d, next) = a.decide(a.unpack(packed), t, n);
            (d, next.map(|s| a.pack(s)))
        }, block: unreachable!("a multi-word rule {a:?} in a word layout"))
    }

    /// Refuses a packed state a single-word rule could not have stored
    /// (see [`packed_validate`]).
    fn word_validate(&self, packed: u128) -> Result<(), StateError> {
        with_rule!(self, a => word: packed_validate(a, packed),
            block: unreachable!("a multi-word rule {a:?} has no packed state"))
    }

    #[inline]
    fn word_is_fresh(&self, packed: u128, t: u64) -> bool {
        with_rule!(self, a => word: a.is_fresh_at(a.unpack(packed), t),
            block: unreachable!("a multi-word rule {a:?} in a word layout"))
    }
}
/// One limit and where its state sits: a bit offset (word layout) or a
/// word offset (block layout).
#[derive(Clone, Copy, Debug)]
struct Part {
    rule: Rule,
    at: u32,
    bits: u32,
}
/// The composite of 1 to [`MAX_LIMITS`] limits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AllOf {
    // Only `parts[..len]` are limits; the rest repeat the first (an array,
    // not a Vec, so the algorithm stays `Copy` like every other).
    parts: [Part; MAX_LIMITS],
    len: usize,
    /// Total state bits in the word layout, or total words in the block one.
    size: u32,
    /// `mask(size)` in the word layout, computed once: a check unpacks with
    /// it.
    size_mask: u128,
    word: bool,
    /// Which concrete form a check takes, fixed here so that a check
    /// dispatches once, on this byte ([`AllOf::concrete`]): 0 none (three
    /// or more limits, or the block layout), `1 + a` one single-word limit
    /// of kind `a`, `5 + 4 × a + b` two of kinds `a` and `b`
    /// ([`Rule::word_kind`]).
    form: u8,
    /// The form of two single-word limits in the block layout (two 64-bit
    /// words each, from word 0 and word 2), else 0.
    block_pair: u8,
}
impl AllOf {
    /// The word layout when every limit has a single-word state and they
    /// fit `max_bits` together, else the block layout. `rules` holds 1 to
    /// [`MAX_LIMITS`] rules (checked by the caller).
    pub(crate) fn new(rules: &[Rule], max_bits: u32) -> AllOf {
        assert!((1..=MAX_LIMITS).contains(&rules.len()));
        let bits: Option<u32> = rules.iter().map(Rule::state_bits).sum();
        let word = bits.is_some_and(|b| b <= max_bits);
        let first = Part {
            rule: rules[0],
            at: 0,
            bits: 0,
        };
        let mut parts = [first; MAX_LIMITS];
        let mut at = 0u32;
        for (part, rule) in parts.iter_mut().zip(rules) {
            let bits = rule.state_bits().unwrap_or(0);
            *part = Part {
                rule: *rule,
                at,
                bits,
            };
            let size = if word { bits as usize } else { rule.words() };
            at = u32::try_from(at as usize + size)
                .expect("multi::rules refuses states past u32::MAX words");
        }
        let kinds: Vec<Option<u8>> = rules.iter().map(Rule::word_kind).collect();
        let form = match kinds[..] {
            [Some(a)] => 1 + a,
            [Some(a), Some(b)] => 5 + 4 * a + b,
            _ => 0,
        };
        let (form, block_pair) = match (word, form) {
            (true, _) => (form, 0),
            (false, 5..) => (0, form),
            (false, _) => (0, 0),
        };
        AllOf {
            parts,
            len: rules.len(),
            size: at,
            size_mask: mask(at),
            word,
            form,
            block_pair,
        }
    }

    /// Whether the states fit one word (then `WordAlgorithm` applies, else
    /// `BlockAlgorithm`).
    pub(crate) fn is_word(&self) -> bool {
        self.word
    }

    /// How many limits.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn parts(&self) -> &[Part] {
        &self.parts[..self.len]
    }

    /// The first limit whose state would sit or be sized differently in
    /// `other` (a live reconfiguration must keep every state in place):
    /// its index and its size in both, in bits for a single-word state,
    /// else in words.
    pub(crate) fn layout_differs(&self, other: &AllOf) -> Option<(usize, usize, usize)> {
        for (i, (a, b)) in self.parts().iter().zip(other.parts()).enumerate() {
            let (wa, wb) = (a.rule.words(), b.rule.words());
            if a.bits != b.bits || a.at != b.at || self.word != other.word {
                return Some((i, a.bits as usize, b.bits as usize));
            }
            if wa != wb {
                return Some((i, wa, wb));
            }
        }
        None
    }

    /// Three or more limits in the word layout. The admitted case folds the
    /// limits' decisions as they come (no array of decisions); a denial
    /// goes to [`AllOf::denied_word`], which decides again with the
    /// adjustments a denial needs.
    #[inline(never)]
    fn decide_many(
        &self,
        state: u128,
        t: u64,
        n: u64,
        out: &mut [Decision],
    ) -> (Decision, Option<u128>) {
        let mut combined = Decision {
            allowed: true,
            remaining: u64::MAX,
            ..Decision::default()
        };
        let mut next = 0u128;
        for (i, p) in self.parts().iter().enumerate() {
            let own = (state >> p.at) & mask(p.bits);
            let (d, stored) = p.rule.decide_word(own, t, n);
            if !d.allowed {
                return (self.denied_word(state, t, n, out), None);
            }
            if let Some(o) = out.get_mut(i) {
                *o = d;
            }
            if d.remaining < combined.remaining {
                combined.remaining = d.remaining;
                combined.limit = d.limit;
            }
            combined.reset_after_ns = combined.reset_after_ns.max(d.reset_after_ns);
            combined.wait_ns = combined.wait_ns.max(d.wait_ns);
            next |= stored.unwrap_or(own) << p.at;
        }
        (combined, (n > 0).then_some(next))
    }

    /// A denied request in the word layout: every limit's decision, those
    /// that admitted on their unchanged states, combined. Stores nothing.
    #[cold]
    fn denied_word(&self, state: u128, t: u64, n: u64, out: &mut [Decision]) -> Decision {
        let mut each = [Decision::default(); MAX_LIMITS];
        for (i, p) in self.parts().iter().enumerate() {
            let own = (state >> p.at) & mask(p.bits);
            let (d, _) = p.rule.decide_word(own, t, n);
            each[i] = if d.allowed {
                let never = p.rule.decide_word(own, t, d.limit.saturating_add(1));
                AllOf::unspent(d, never.0)
            } else {
                d
            };
        }
        let each = &each[..self.len];
        report(each, out);
        combine(each).0
    }

    /// The decision of a limit that admitted a request the others denied:
    /// its unchanged state's `remaining` and `reset_after_ns`, read from its
    /// own rule's decision for a cost no state admits.
    fn unspent(own: Decision, never: Decision) -> Decision {
        Decision {
            allowed: true,
            limit: own.limit,
            remaining: never.remaining,
            retry_after_ns: 0,
            reset_after_ns: never.reset_after_ns,
            wait_ns: 0,
        }
    }
}
impl AllOf {
    /// Runs `visit` with the composite's concrete form when it has one (one
    /// or two limits in the word layout), else `other`. One dispatch on the
    /// rules, here, instead of one per rule per decision. (Not a `Result`
    /// of `visit`'s output: merged from every arm through an enum, the
    /// decision went through the stack, a store-forwarding stall per check.)
    #[allow(
        clippy::inline_always,
        reason = "each arm is the body of a check, compiled for its rules"
    )]
    #[inline(always)]
    fn concrete<V: Visit<u128>>(&self, visit: V, other: impl FnOnce(V) -> V::Out) -> V::Out {
        // The rules' kinds are the form's (`AllOf::new`), so the `else`
        // arms are never taken: a compare each, where a match on each rule
        // would be a jump table each, beside the bounds and layout checks
        // this byte also replaces.
        const FORM: &str = "a rule of another kind than its form";
        let p = &self.parts[0];
        macro_rules! one {
            ($a:ident) => {{
                let Rule::$a(a) = &p.rule else {
                    unreachable!("{FORM}")
                };
                visit.visit(&One {
                    a: *a,
                    bits: p.bits,
                })
            }};
        }
        #[cfg_attr(not(feature = "pair-checks"), allow(unused_macros))]
        macro_rules! pair {
            ($a:ident, $b:ident) => {{
                let q = &self.parts[1];
                let (Rule::$a(a), Rule::$b(b)) = (&p.rule, &q.rule) else {
                    unreachable!("{FORM}")
                };
                visit.visit(&Pair {
                    a,
                    b,
                    at: q.at,
                    size: self.size,
                })
            }};
        }
        match self.form {
            1 => one!(Gcra),
            2 => one!(TokenBucket),
            3 => one!(FixedWindow),
            4 => one!(SlidingWindow),
            form => by_pair_form!(form, pair, other(visit)),
        }
    }
}
/// [`AllOf`]'s decision as a [`Visit`] (its one- and two-limit forms).
struct Decide<'a> {
    state: u128,
    t: u64,
    n: u64,
    out: &'a mut [Decision],
}
impl Visit<u128> for Decide<'_> {
    type Out = (Decision, Option<u128>);
    #[allow(clippy::inline_always, reason = "as AllOf::concrete")]
    #[inline(always)]
    fn visit<D: WordAlgorithm<State = u128>>(self, alg: &D) -> Self::Out {
        alg.decide_each(self.state, self.t, self.n, self.out)
    }
}
/// The combined decision of the limits' own decisions (already adjusted to
/// their states after the decision), and which limit denied: the one whose
/// wait is the combined `retry_after_ns` (the lowest index on ties); `None`
/// when all admit.
#[inline]
pub(crate) fn combine(each: &[Decision]) -> (Decision, Option<usize>) {
    let allowed = each.iter().all(|d| d.allowed);
    let mut least = 0;
    let mut denied_by = None::<usize>;
    let mut combined = Decision {
        allowed,
        ..Decision::default()
    };
    for (i, d) in each.iter().enumerate() {
        if d.remaining < each[least].remaining {
            least = i;
        }
        combined.reset_after_ns = combined.reset_after_ns.max(d.reset_after_ns);
        if allowed {
            combined.wait_ns = combined.wait_ns.max(d.wait_ns);
        } else if !d.allowed && denied_by.is_none_or(|j| d.retry_after_ns > each[j].retry_after_ns)
        {
            denied_by = Some(i);
        }
    }
    combined.limit = each[least].limit;
    combined.remaining = each[least].remaining;
    if let Some(j) = denied_by {
        combined.retry_after_ns = each[j].retry_after_ns;
    }
    (combined, denied_by)
}

/// Two single-word limits on their packed states, both algorithms known at
/// compile time: [`AllOf`]'s checks dispatch once on the pair of rules and
/// land here, so each limit's `decide` is inlined and the combined decision
/// is built in registers. Why not the loop over parts: it dispatches on
/// each rule in turn and shifts and masks a 128-bit word by runtime
/// amounts per limit, which costs a two-limit check as much as a second
/// decision (docs/PERFORMANCE.md, "Several limits").
///
/// Returns the combined decision and, when both admit a cost above 0, the
/// two packed states to store. Writes the limits' own decisions to `out`
/// as [`WordAlgorithm::decide_each`] does.
#[allow(
    clippy::inline_always,
    reason = "one copy per pair of algorithms, each the body of a check; a call would keep the decisions in memory"
)]
/// Copies the limits' decisions to `out` (as many as fit).
#[inline]
fn report(each: &[Decision], out: &mut [Decision]) {
    let n = each.len().min(out.len());
    out[..n].copy_from_slice(&each[..n]);
}
impl WordAlgorithm for AllOf {
    /// The limits' packed states side by side.
    type State = u128;

    fn algorithm(&self) -> Algorithm {
        self.parts()[0].rule.algorithm()
    }

    #[inline]
    fn decide(&self, state: u128, t: u64, n: u64) -> (Decision, Option<u128>) {
        WordAlgorithm::decide_each(self, state, t, n, &mut [])
    }

    /// Two limits, the common case, go to [`decide_pair`] after one
    /// dispatch on the pair of rules; more go to [`AllOf::decide_many`].
    #[allow(
        clippy::inline_always,
        reason = "inlined into the cell's or table's CAS loop, the pair's decision is built where the check returns it"
    )]
    #[inline(always)]
    fn decide_each(
        &self,
        state: u128,
        t: u64,
        n: u64,
        out: &mut [Decision],
    ) -> (Decision, Option<u128>) {
        self.concrete(Decide { state, t, n, out }, |d| {
            self.decide_many(d.state, d.t, d.n, d.out)
        })
    }

    /// One or two limits: [`One`] or [`Pair`], after one dispatch on the
    /// rules; three or more: the composite itself.
    #[allow(
        clippy::inline_always,
        reason = "each arm is the body of a check, compiled for its rules"
    )]
    #[inline(always)]
    fn with_concrete<V: Visit<u128>>(&self, visit: V) -> V::Out {
        self.concrete(visit, |v| v.visit(self))
    }

    fn is_fresh_at(&self, state: u128, t: u64) -> bool {
        self.parts()
            .iter()
            .all(|p| p.rule.word_is_fresh((state >> p.at) & mask(p.bits), t))
    }

    #[inline]
    fn pack(&self, state: u128) -> u128 {
        state
    }

    #[inline]
    fn unpack(&self, word: u128) -> u128 {
        word & self.size_mask
    }

    fn state_bits(&self) -> u32 {
        self.size
    }

    /// Every limit's own state is one its algorithm could have stored
    /// (the composite's bits above `size` are checked by the caller, as
    /// for any word algorithm).
    fn validate(&self, state: u128) -> Result<(), StateError> {
        self.parts()
            .iter()
            .try_for_each(|p| p.rule.word_validate((state >> p.at) & mask(p.bits)))
    }
}

// After the macros above, which the files below use.
mod block;
mod pair;
#[cfg(all(test, not(ratecell_loom)))]
mod tests;

//! The seven algorithms of [SPEC §4](crate::spec#4-the-algorithms) as pure state transitions on plain
//! integers.
//!
//! Nothing here touches an atomic, a clock or a thread: each algorithm maps
//! `(state, t, cost)` to a [`Decision`] and, when the request is admitted
//! with a cost above 0, the state to store. The cell and the table own every
//! atomic and run these functions inside their CAS loops or latches; so every
//! rule is tested without threads, and every concurrent protocol is
//! model-checked once, independently of the rules.
//!
//! Two shapes of state:
//! - [`WordAlgorithm`]: the state packs into at most 128 bits (GCRA, leaky
//!   bucket, token bucket, fixed window, sliding window), so one CAS updates
//!   it. Each says in its module how it is packed and what that limits.
//! - [`BlockAlgorithm`]: the state is an array of words (bucketed window: N
//!   counters; sliding log: up to L entries), updated under a per-state latch
//!   held by the cell or the table.
//!
//! In every state the all-zero value is the fresh state, so a zeroed table is
//! a table of fresh keys.

pub(crate) mod all_of;
pub(crate) mod bucketed_window;
pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;
pub(crate) mod token_bucket;

use crate::check::decision::Decision;
use crate::config::Algorithm;
use std::fmt;

/// A stored state that a loader refuses ([`crate::state::Rule::validate`],
/// a snapshot restore): no sequence of checks could have produced it
/// ([SPEC §4](crate::spec#what-a-loader-accepts), "What a loader accepts").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateError {
    /// The algorithm the state was read as.
    pub algorithm: Algorithm,
    /// The first word at fault, as an index into the layout of
    /// [`crate::state::Rule`] (for a state packed in a cell or a table
    /// slot, the index of the same field); `None` when no single word is:
    /// a wrong length, a total over several words, a packing.
    pub word: Option<usize>,
    /// What is wrong: the field, the value found, and the bound it breaks.
    pub message: String,
}

impl StateError {
    pub(crate) fn new(algorithm: Algorithm, word: Option<usize>, message: String) -> StateError {
        StateError {
            algorithm,
            word,
            message,
        }
    }
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.algorithm, self.message)
    }
}

impl std::error::Error for StateError {}

/// Refuses `value`, the field `what` at `word`, when it is above `max`.
pub(crate) fn at_most(
    algorithm: Algorithm,
    word: usize,
    what: &str,
    value: u64,
    max: u64,
    bound: &str,
) -> Result<(), StateError> {
    if value > max {
        return Err(StateError::new(
            algorithm,
            Some(word),
            format!("word {word} ({what}) {value} is above {max}, {bound}"),
        ));
    }
    Ok(())
}

/// An algorithm whose state fits one atomic word of at most 128 bits.
// Not `'static`: `all_of`'s two-limit form borrows its rules.
pub(crate) trait WordAlgorithm: Copy + Send + Sync {
    /// The unpacked state, plain integers; `Default` is the fresh state.
    type State: Copy + Default + PartialEq + std::fmt::Debug;

    /// Decides a request of cost `n` at time `t`. Returns the new state only
    /// when it must be stored (admitted, `n > 0`).
    fn decide(&self, state: Self::State, t: u64, n: u64) -> (Decision, Option<Self::State>);

    /// [`Self::decide`], also writing each limit's own decision to `each`
    /// (a composite of several limits, `all_of`; one algorithm writes
    /// nothing).
    #[inline]
    fn decide_each(
        &self,
        state: Self::State,
        t: u64,
        n: u64,
        each: &mut [Decision],
    ) -> (Decision, Option<Self::State>) {
        let _ = each;
        self.decide(state, t, n)
    }

    /// Whether dropping `state` at time `t` would change no later decision
    /// ([SPEC §4](crate::spec#4-the-algorithms) "equivalent to fresh").
    fn is_fresh_at(&self, state: Self::State, t: u64) -> bool;

    /// How long from `t` until `state` is equivalent to fresh (a full
    /// table tells a new key when a place may free up): the `reset_after_ns`
    /// of a peek, unless the algorithm says otherwise.
    #[inline]
    fn fresh_after_ns(&self, state: Self::State, t: u64) -> u64 {
        self.decide(state, t, 0).0.reset_after_ns
    }

    /// Packs the state into the low [`Self::state_bits`] bits of a word.
    fn pack(&self, state: Self::State) -> u128;

    /// The inverse of [`Self::pack`]; bits above `state_bits` are ignored.
    fn unpack(&self, word: u128) -> Self::State;

    /// How many low bits of the word the packed state uses.
    fn state_bits(&self) -> u32;

    /// [`Self::state_bits`] when every configuration packs its state in
    /// the same bits (GCRA: 64), so a composite placing another state
    /// above this one shifts by a constant (`all_of`'s `Pair`).
    #[cfg_attr(not(feature = "pair-checks"), allow(dead_code))]
    const FIXED_BITS: Option<u32> = None;

    /// Runs `visit` with the form of this algorithm that decides fastest:
    /// itself, unless it is a composite whose rules are only known at run
    /// time (`all_of`), which dispatches once on them and passes a form
    /// with each rule's type known. The cell and the table put their whole
    /// check (CAS loop included) in `visit`, so a composite's check is
    /// compiled once per pair of rules, with each rule's decision inlined
    /// and every decision kept in registers as a single rule's is.
    #[allow(
        clippy::inline_always,
        reason = "a transparent call: the check it wraps must stay where it was inlined"
    )]
    #[inline(always)]
    fn with_concrete<V: Visit<Self::State>>(&self, visit: V) -> V::Out {
        visit.visit(self)
    }

    /// The algorithm a [`StateError`] names (a composite: its first
    /// limit's).
    fn algorithm(&self) -> Algorithm;

    /// Refuses a state this algorithm could not have stored (every loader
    /// checks with it, so a damaged or hostile file cannot hand `decide`
    /// a value out of its range); by default every state is one it could.
    fn validate(&self, state: Self::State) -> Result<(), StateError> {
        let _ = state;
        Ok(())
    }
}

/// What [`WordAlgorithm::with_concrete`] runs: a check generic over the
/// algorithm it decides with (a closure cannot be generic).
pub(crate) trait Visit<S> {
    type Out;
    fn visit<D: WordAlgorithm<State = S>>(self, alg: &D) -> Self::Out;
}

/// Word storage that a [`BlockAlgorithm`] reads and writes while it holds
/// the state exclusively: a plain slice in tests, atomics under a latch in
/// the cell and the table.
pub(crate) trait Words {
    fn get(&self, i: usize) -> u64;
    fn set(&mut self, i: usize, value: u64);
}

impl Words for [u64] {
    #[inline]
    fn get(&self, i: usize) -> u64 {
        self[i]
    }
    #[inline]
    fn set(&mut self, i: usize, value: u64) {
        self[i] = value;
    }
}

/// An algorithm whose state is a fixed number of 64-bit words.
pub(crate) trait BlockAlgorithm: Copy + Send + Sync + 'static {
    /// Words per state.
    fn words(&self) -> usize;

    /// Decides a request; writes `words` only when admitted with `n > 0`,
    /// and computes the decision without reading back what it wrote (the
    /// keyed table decides unknown keys on a read-only fresh view whose
    /// writes are dropped).
    fn decide<W: Words + ?Sized>(&self, words: &mut W, t: u64, n: u64) -> Decision;

    /// [`Self::decide`], also writing each limit's own decision to `each`
    /// (see [`WordAlgorithm::decide_each`]).
    #[inline]
    fn decide_each<W: Words + ?Sized>(
        &self,
        words: &mut W,
        t: u64,
        n: u64,
        each: &mut [Decision],
    ) -> Decision {
        let _ = each;
        self.decide(words, t, n)
    }

    /// [SPEC §4](crate::spec#4-the-algorithms) "equivalent to fresh" at time `t`.
    fn is_fresh_at<W: Words + ?Sized>(&self, words: &W, t: u64) -> bool;

    /// [`WordAlgorithm::fresh_after_ns`] for a block (read only: `decide`
    /// writes nothing for a peek).
    #[inline]
    fn fresh_after_ns<W: Words + ?Sized>(&self, words: &mut W, t: u64) -> u64 {
        self.decide(words, t, 0).reset_after_ns
    }

    /// Makes `words` the fresh state again (a table reusing a place, or
    /// `KeyedLimiter::reset`). Only the words that say what is live need clearing.
    fn clear<W: Words + ?Sized>(&self, words: &mut W);

    /// Lists the indices of the words a snapshot saves, in order. An index
    /// may depend only on words listed before it (a restore writes each
    /// word as it reads it, then asks for the next index), and the listing
    /// stays in bounds whatever those words hold. By default every word.
    fn saved_words<W: Words + ?Sized>(&self, words: &W, each: &mut dyn FnMut(usize)) {
        let _ = words;
        (0..self.words()).for_each(each);
    }

    /// Refuses words this algorithm could not have stored (see
    /// [`WordAlgorithm::validate`]); only the saved words are read.
    fn validate<W: Words + ?Sized>(&self, words: &W) -> Result<(), StateError>;
}

/// Refuses a packed state a single-word rule could not have stored: bits
/// beyond its state, a packing that does not re-pack to itself, or a state
/// the algorithm refuses.
pub(crate) fn packed_validate<A: WordAlgorithm>(a: &A, packed: u128) -> Result<(), StateError> {
    let state = a.unpack(packed);
    if packed & !mask(a.state_bits()) != 0 || a.pack(state) != packed {
        return Err(StateError::new(
            a.algorithm(),
            None,
            format!(
                "the packed state {packed:#x} has bits outside its {}-bit layout",
                a.state_bits()
            ),
        ));
    }
    a.validate(state)
}

/// How many bits an unsigned value up to `max` needs.
#[inline]
pub(crate) const fn bits_for(max: u64) -> u32 {
    64 - max.leading_zeros()
}

/// A mask of the low `bits` bits.
#[inline]
pub(crate) const fn mask(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// `q = max(n, 1)`: a peek is judged as a cost-1 request.
#[inline]
pub(crate) fn effective_cost(n: u64) -> u64 {
    n.max(1)
}

/// Division by a divisor fixed when a limiter is configured, as a multiply
/// by its precomputed reciprocal and shifts: exact for every `u64`
/// dividend (the method of Granlund and Montgomery, as libdivide words
/// it). A `div` on the check's path would not overlap the time-stamp
/// counter's read, and costs more than the read itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Divisor {
    magic: u64,
    shift: u32,
    kind: DivKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DivKind {
    /// A power of two: a shift.
    Shift,
    /// `mulhi(n, magic) >> shift`.
    Mul,
    /// The reciprocal needs 65 bits: `magic` holds its low 64, and the
    /// 65th is added back without overflow.
    MulAdd,
}

impl Divisor {
    /// The reciprocal of `d`, which must not be 0.
    pub(crate) fn new(d: u64) -> Divisor {
        assert!(d != 0, "division by zero");
        let shift = 63 - d.leading_zeros();
        if d.is_power_of_two() {
            return Divisor {
                magic: 0,
                shift,
                kind: DivKind::Shift,
            };
        }
        // d lies strictly between 2^shift and 2^(shift+1), so the quotient
        // fits 64 bits.
        let num = 1u128 << (64 + shift);
        let m = (num / u128::from(d)) as u64;
        let rem = (num % u128::from(d)) as u64;
        if d - rem < 1 << shift {
            Divisor {
                magic: m + 1,
                shift,
                kind: DivKind::Mul,
            }
        } else {
            // floor(2^(65+shift) / d), less 2^64 (its 65th bit).
            let twice_rem = rem.wrapping_add(rem);
            let mut m2 = m.wrapping_add(m);
            if twice_rem >= d || twice_rem < rem {
                m2 = m2.wrapping_add(1);
            }
            Divisor {
                magic: m2.wrapping_add(1),
                shift,
                kind: DivKind::MulAdd,
            }
        }
    }

    /// `n / d`, exactly. Always inlined: a two-limit keyed check, large,
    /// left it out of line (a call per GCRA decision, about 12 instructions
    /// and the registers saved around it).
    #[allow(
        clippy::inline_always,
        reason = "see above: a multiply and shifts, cheaper than the call"
    )]
    #[inline(always)]
    pub(crate) fn divide(&self, n: u64) -> u64 {
        match self.kind {
            DivKind::Shift => n >> self.shift,
            DivKind::Mul => ((u128::from(n) * u128::from(self.magic)) >> 64) as u64 >> self.shift,
            DivKind::MulAdd => {
                let q = ((u128::from(n) * u128::from(self.magic)) >> 64) as u64;
                (((n - q) >> 1) + q) >> self.shift
            }
        }
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::Divisor;
    use proptest::prelude::*;

    /// Every divisor kind at its edges: dividends near 0, near multiples
    /// of the divisor and near `u64::MAX`.
    #[test]
    fn divisor_is_exact_at_the_edges() {
        let mut divisors: Vec<u64> = (1..=300).collect();
        for b in 1..64 {
            let p = 1u64 << b;
            divisors.extend([p - 1, p, p + 1, p | (p >> 1), p + (p >> 2) + 1]);
        }
        divisors.extend([
            u64::MAX,
            u64::MAX - 1,
            1_000_000_000,
            60_000_000_000,
            7,
            641,
            6_700_417,
            274_177,
        ]);
        for &d in &divisors {
            let div = Divisor::new(d);
            let mut dividends = vec![0, 1, 2, u64::MAX, u64::MAX - 1, u64::MAX / 2, d - 1, d];
            for k in [1u64, 2, 3, 1000, u64::MAX / d] {
                let m = d.saturating_mul(k);
                dividends.extend([m.saturating_sub(1), m, m.saturating_add(1)]);
            }
            for n in dividends {
                assert_eq!(div.divide(n), n / d, "{n} / {d}");
            }
        }
    }

    proptest! {
        #[test]
        fn divisor_is_exact(d in 1u64.., n: u64, small in 1u64..100_000) {
            prop_assert_eq!(Divisor::new(d).divide(n), n / d);
            prop_assert_eq!(Divisor::new(small).divide(n), n / small);
            prop_assert_eq!(Divisor::new(d).divide(n % d.saturating_mul(3).max(1)), (n % d.saturating_mul(3).max(1)) / d);
        }
    }
}

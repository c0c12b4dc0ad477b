//! The block layout: any mix of limits, a single-word state in two words,
//! a multi-word state in its block, decided first on a view that drops
//! writes.

use super::*;

/// One limit's words inside the block: reads through; writes through only
/// when `write` (the tentative pass drops them).
pub(super) struct View<'a, W: Words + ?Sized> {
    pub(super) words: &'a mut W,
    pub(super) at: usize,
    pub(super) write: bool,
}
impl<W: Words + ?Sized> Words for View<'_, W> {
    #[inline]
    fn get(&self, i: usize) -> u64 {
        self.words.get(self.at + i)
    }
    #[inline]
    fn set(&mut self, i: usize, value: u64) {
        if self.write {
            self.words.set(self.at + i, value);
        }
    }
}
/// A single-word state's two words in the block layout.
#[inline]
pub(super) fn read_pair<W: Words + ?Sized>(w: &W, at: usize) -> u128 {
    u128::from(w.get(at)) | (u128::from(w.get(at + 1)) << 64)
}
#[inline]
pub(super) fn write_pair<W: Words + ?Sized>(w: &mut W, at: usize, value: u128) {
    w.set(at, value as u64);
    w.set(at + 1, (value >> 64) as u64);
}
impl AllOf {
    /// One limit's decision in the block layout; writes only when `write`.
    pub(super) fn decide_in<W: Words + ?Sized>(
        p: &Part,
        w: &mut W,
        t: u64,
        n: u64,
        write: bool,
    ) -> (Decision, Option<u128>) {
        let at = p.at as usize;
        with_rule!(&p.rule, a => word: {
            let _ = (a, write);
            p.rule.decide_word(read_pair(w, at), t, n)
        }, block: {
            let d = a.decide(&mut View { words: w, at, write }, t, n);
            (d, None)
        })
    }
}
impl BlockAlgorithm for AllOf {
    fn words(&self) -> usize {
        self.size as usize
    }

    fn decide<W: Words + ?Sized>(&self, w: &mut W, t: u64, n: u64) -> Decision {
        BlockAlgorithm::decide_each(self, w, t, n, &mut [])
    }

    /// Two single-word limits, the common case, decide in a copy of
    /// [`decide_pair`] made for their rules, after one dispatch on
    /// `block_pair`, inlined into the caller's latched section; any other
    /// list goes to [`AllOf::decide_block`].
    #[allow(
        clippy::inline_always,
        reason = "the pair's decision is built where the latched check returns it"
    )]
    #[inline(always)]
    fn decide_each<W: Words + ?Sized>(
        &self,
        w: &mut W,
        t: u64,
        n: u64,
        out: &mut [Decision],
    ) -> Decision {
        #[cfg_attr(not(feature = "pair-checks"), allow(unused_macros))]
        macro_rules! pair {
            ($a:ident, $b:ident) => {{
                let (Rule::$a(a), Rule::$b(b)) = (&self.parts[0].rule, &self.parts[1].rule) else {
                    unreachable!("a rule of another kind than its form")
                };
                debug_assert_eq!((self.parts[0].at, self.parts[1].at), (0, 2));
                let states = (read_pair(w, 0), read_pair(w, 2));
                let (d, next) = decide_pair(a, b, states, t, n, out);
                if let Some((na, nb)) = next {
                    write_pair(w, 0, na);
                    write_pair(w, 2, nb);
                }
                d
            }};
        }
        by_pair_form!(self.block_pair, pair, self.decide_block(w, t, n, out))
    }

    fn is_fresh_at<W: Words + ?Sized>(&self, w: &W, t: u64) -> bool {
        self.parts().iter().all(|p| {
            let at = p.at as usize;
            with_rule!(&p.rule, a => word: a.is_fresh_at(a.unpack(read_pair(w, at)), t),
                block: a.is_fresh_at(&Shifted { words: w, at }, t))
        })
    }

    /// Each limit's saved words in turn: a single-word limit's two words,
    /// a multi-word limit's own listing, shifted to where its words sit.
    fn saved_words<W: Words + ?Sized>(&self, w: &W, each: &mut dyn FnMut(usize)) {
        for p in self.parts() {
            let at = p.at as usize;
            with_rule!(&p.rule, a => word: {
                let _ = a;
                each(at);
                each(at + 1);
            }, block: a.saved_words(&Shifted { words: w, at }, &mut |i| each(at + i)))
        }
    }

    fn validate<W: Words + ?Sized>(&self, w: &W) -> Result<(), StateError> {
        self.parts().iter().try_for_each(|p| {
            let at = p.at as usize;
            with_rule!(&p.rule, a => word: { let _ = a; p.rule.word_validate(read_pair(w, at)) },
                block: a.validate(&Shifted { words: w, at }))
        })
    }

    fn clear<W: Words + ?Sized>(&self, w: &mut W) {
        for p in self.parts() {
            let at = p.at as usize;
            with_rule!(&p.rule, a => word: { let _ = a; write_pair(w, at, 0) },
                block: a.clear(&mut View { words: w, at, write: true }));
        }
    }
}
impl AllOf {
    /// [`BlockAlgorithm::decide_each`] for any list but two single-word
    /// limits: each limit decided on a view that drops writes, then again
    /// on the real words only when all admit.
    #[inline(never)]
    pub(super) fn decide_block<W: Words + ?Sized>(
        &self,
        w: &mut W,
        t: u64,
        n: u64,
        out: &mut [Decision],
    ) -> Decision {
        if self.len == 1 {
            // One limit: decided once, on the real words (a rule writes
            // only what it admits), as in the word layout.
            let p = &self.parts[0];
            let (d, stored) = AllOf::decide_in(p, w, t, n, true);
            if let (true, Some(next)) = (d.allowed && n > 0, stored) {
                write_pair(w, p.at as usize, next);
            }
            report(&[d], out);
            return d;
        }
        let mut each = [Decision::default(); MAX_LIMITS];
        let mut stored = [None; MAX_LIMITS];
        for (i, p) in self.parts().iter().enumerate() {
            (each[i], stored[i]) = AllOf::decide_in(p, w, t, n, false);
        }
        let all = each[..self.len].iter().all(|d| d.allowed);
        if all && n > 0 {
            for (i, p) in self.parts().iter().enumerate() {
                if let Some(next) = stored[i] {
                    write_pair(w, p.at as usize, next);
                } else if p.rule.state_bits().is_none() {
                    let again = AllOf::decide_in(p, w, t, n, true).0;
                    debug_assert_eq!(again, each[i], "a block rule decided twice alike");
                }
            }
        } else if !all {
            for (i, p) in self.parts().iter().enumerate() {
                if each[i].allowed {
                    let never = each[i].limit.saturating_add(1);
                    let never = AllOf::decide_in(p, w, t, never, false).0;
                    each[i] = AllOf::unspent(each[i], never);
                }
            }
        }
        let each = &each[..self.len];
        report(each, out);
        combine(each).0
    }
}
/// A read-only view of one limit's words (for `is_fresh_at`, which has
/// only a shared borrow).
pub(super) struct Shifted<'a, W: Words + ?Sized> {
    pub(super) words: &'a W,
    pub(super) at: usize,
}
impl<W: Words + ?Sized> Words for Shifted<'_, W> {
    fn get(&self, i: usize) -> u64 {
        self.words.get(self.at + i)
    }
    fn set(&mut self, _: usize, _: u64) {
        unreachable!("is_fresh_at, validate and saved_words only read")
    }
}

//! A key's grant in hand: the units left and the time (the node's clock,
//! the skew already taken off) until which they may be spent, in one
//! 128-bit atomic word, so a spend is one load and one CAS and can never
//! pair one grant's units with another's expiry.
//!
//! The word also carries its entry's generation: the lease store
//! (`store`) reuses an idle entry for another key, and a check finds its
//! entry without a lock, so a check that looked up the entry before it
//! was reused may still hold the word it loaded then. Every reuse changes
//! the generation first (`retire`, then `reopen`), so that check's CAS,
//! which compares the whole word, fails: no unit is ever spent from the
//! grant of a key the check did not ask for. The generation is even while
//! the entry holds a key and odd while it holds none.
//!
//! Layout: `until` in the high 64 bits, the generation in the next 32,
//! the units in the low 32: a limit is at most 2^32 − 1
//! (`config::MAX_LIMIT`), and a grant at most the
//! limit, so 32 bits hold any grant (two merged beyond them lose the
//! excess: fewer units never admit more).
//!
//! Spends race each other and a grant's arrival; every other write (a
//! grant applied, the next grant promoted, the entry retired or reopened)
//! is made under the key's lock (`leases`), so a CAS loop here only ever
//! competes with spends.

use crate::sync::{Ordering, SlotU128, spin_loop};

/// The most units a cell holds (32 bits of the word), the largest limit.
pub(crate) const MAX_UNITS: u64 = crate::config::MAX_LIMIT;

/// What a cell holds: `units` spendable before `until`, on requests dated
/// in the grant's period: the `span` before `until` (one value for every
/// grant of a limit, [`Resolved::span`](super::config::Resolved), so the
/// word need not hold it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Held {
    pub units: u64,
    pub until: u64,
}

impl Held {
    /// Whether `q` units may be spent on a request dated `now`.
    #[inline]
    pub(crate) fn covers(self, q: u64, now: u64, span: u64) -> bool {
        self.units >= q && self.dates(now, span)
    }

    /// Whether a request dated `now` falls in the grant's period, whose
    /// units are the only ones it may spend: `[until − span, until)`, one
    /// unsigned comparison of the date's distance before `until` (a date
    /// at or after `until` wraps to a distance of 2^63 or more, above any
    /// span a limit has: at most its period, 366 days, twice that for
    /// GCRA's `E` either side).
    #[inline]
    pub(crate) fn dates(self, now: u64, span: u64) -> bool {
        self.until.wrapping_sub(now).wrapping_sub(1) < span
    }

    /// When the grant's period starts.
    pub(crate) fn from(self, span: u64) -> u64 {
        self.until.saturating_sub(span)
    }

    /// Whether it holds nothing spendable at `now`.
    pub(crate) fn is_spent(self, now: u64) -> bool {
        self.units == 0 || now >= self.until
    }
}

/// One reading of the word: a grant and the generation it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Word(u128);

impl Word {
    #[inline]
    fn new(generation: u32, held: Held) -> Word {
        debug_assert!(held.units <= MAX_UNITS);
        Word(
            (u128::from(held.until) << 64)
                | (u128::from(generation) << 32)
                | u128::from(held.units),
        )
    }

    #[inline]
    pub(crate) fn held(self) -> Held {
        Held {
            units: self.0 as u32 as u64,
            until: (self.0 >> 64) as u64,
        }
    }

    #[inline]
    pub(crate) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// Whether the entry holds a key in this generation.
    #[inline]
    pub(crate) fn is_live(self) -> bool {
        self.generation() % 2 == 0
    }

    /// The same word with `q` fewer units (`q` at most the units).
    #[inline]
    fn less(self, q: u64) -> Word {
        Word(self.0 - u128::from(q))
    }
}

/// What a spend found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spend {
    /// Spent: the units left.
    Left(u64),
    /// Too few units, or expired: what the cell held.
    Short(Held),
    /// The entry was retired or reused since the word was loaded: nothing
    /// was spent, and the caller looks its key up again.
    Moved,
}

/// What [`GrantCell::retire`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retired {
    /// The cell holds units at that time: left as it is.
    Busy,
    /// Retired: holds nothing, in an odd generation, until reopened.
    Done,
    /// Retired, and in its last generation: it may never be reopened (a
    /// new generation would wrap to one a stale check may still hold).
    Worn,
}

/// The grant word. Empty (`until` 0) until a grant arrives.
#[derive(Debug)]
pub(crate) struct GrantCell(SlotU128);

impl GrantCell {
    /// A cell of generation 0 (live) holding nothing.
    pub(crate) fn new() -> GrantCell {
        GrantCell(SlotU128::new(0))
    }

    /// The word now. `Acquire`: a check that loads a grant sees what was
    /// written before it (the entry's key among them, `store`).
    #[inline]
    pub(crate) fn open(&self) -> Word {
        Word(self.0.load(Ordering::Acquire))
    }

    pub(crate) fn load(&self) -> Held {
        self.open().held()
    }

    /// Spends `q ≥ 1` units on a request dated `now` from the generation of
    /// `from`, a word this cell held: the units left after, what the cell
    /// held when it could not (too few, expired, or `now` before the
    /// grant's period: the `span` before its `until`), or
    /// [`Spend::Moved`] when the generation changed.
    #[inline]
    pub(crate) fn spend(&self, from: Word, q: u64, now: u64, span: u64) -> Spend {
        let mut word = from;
        loop {
            let held = word.held();
            if !held.covers(q, now, span) {
                return Spend::Short(held);
            }
            let left = word.less(q);
            match self
                .0
                .compare_exchange_weak(word.0, left.0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Spend::Left(held.units - q),
                Err(found) => {
                    crate::sync::saw(crate::sync::Race::CasLost);
                    let found = Word(found);
                    if found.generation() != from.generation() {
                        crate::sync::saw(crate::sync::Race::Moved);
                        return Spend::Moved;
                    }
                    word = found;
                    spin_loop();
                }
            }
        }
    }

    /// Replaces what the cell holds with `f(held)` (its units capped at
    /// [`MAX_UNITS`]), unless `f` says `None` (leave it); returns what it
    /// held when the change was made (or refused) and the new value. Keeps
    /// the generation. Called under the key's lock only, so it competes
    /// with spends alone, and `f` sees every unit they left.
    pub(crate) fn update(&self, f: impl Fn(Held) -> Option<Held>) -> (Held, Option<Held>) {
        let mut word = self.open();
        loop {
            let held = word.held();
            let Some(new) = f(held) else {
                return (held, None);
            };
            let new = Held {
                units: new.units.min(MAX_UNITS),
                ..new
            };
            match self.0.compare_exchange_weak(
                word.0,
                Word::new(word.generation(), new).0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return (held, Some(new)),
                Err(found) => {
                    word = Word(found);
                    spin_loop();
                }
            }
        }
    }

    /// Under the key's lock: empties the cell into the next (odd)
    /// generation if it holds nothing spendable by `idle`'s judgement, so
    /// that no check that loaded it before spends from it again.
    pub(crate) fn retire(&self, idle: impl Fn(Held) -> bool) -> Retired {
        let mut word = self.open();
        loop {
            debug_assert!(word.is_live());
            if !idle(word.held()) {
                return Retired::Busy;
            }
            let next = word.generation().wrapping_add(1);
            match self.0.compare_exchange_weak(
                word.0,
                Word::new(next, Held::default()).0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // The next even generation would wrap: this one is its last.
                Ok(_) if next == u32::MAX => return Retired::Worn,
                Ok(_) => return Retired::Done,
                Err(found) => {
                    word = Word(found);
                    spin_loop();
                }
            }
        }
    }

    /// Under the key's lock: the retired cell starts the next (even)
    /// generation, for the key just written beside it. `Release` (the
    /// CAS): a check that loads this generation sees that key.
    pub(crate) fn reopen(&self) {
        let mut word = self.open();
        loop {
            debug_assert!(!word.is_live() && word.generation() != u32::MAX);
            match self.0.compare_exchange_weak(
                word.0,
                Word::new(word.generation().wrapping_add(1), Held::default()).0,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                // Only a spend could race, and a retired cell has nothing
                // to spend: a spurious failure.
                Err(found) => {
                    word = Word(found);
                    spin_loop();
                }
            }
        }
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;

    /// A period longer than any test's times: from the start of time.
    const ALWAYS: u64 = 1 << 62;

    fn spend(c: &GrantCell, q: u64, now: u64) -> Spend {
        c.spend(c.open(), q, now, ALWAYS)
    }

    #[test]
    fn spends_only_on_requests_dated_in_the_grants_period() {
        let c = GrantCell::new();
        c.update(|_| {
            Some(Held {
                units: 3,
                until: 100,
            })
        });
        let held = c.load();
        assert_eq!(c.spend(c.open(), 1, 59, 40), Spend::Short(held));
        assert_eq!(c.spend(c.open(), 1, 60, 40), Spend::Left(2));
        assert_eq!(c.spend(c.open(), 1, 99, 40), Spend::Left(1));
        assert_eq!(held.from(40), 60);
        // A period longer than the time before it: from the start of time.
        assert_eq!(c.spend(c.open(), 1, 0, 400), Spend::Left(0));
    }

    #[test]
    fn spends_only_before_expiry_and_only_what_is_held() {
        let c = GrantCell::new();
        assert_eq!(spend(&c, 1, 0), Spend::Short(Held::default()));
        c.update(|_| {
            Some(Held {
                units: 3,
                until: 100,
            })
        });
        assert_eq!(spend(&c, 2, 99), Spend::Left(1));
        assert_eq!(
            spend(&c, 2, 99),
            Spend::Short(Held {
                units: 1,
                until: 100
            })
        );
        assert_eq!(
            spend(&c, 1, 100),
            Spend::Short(Held {
                units: 1,
                until: 100
            })
        );
        assert_eq!(spend(&c, 1, 50), Spend::Left(0));
        let (old, new) = c.update(|h| {
            (h.units == 0).then_some(Held {
                units: 9,
                until: 200,
            })
        });
        assert_eq!((old.units, new.unwrap().units), (0, 9));
        assert_eq!(c.update(|_| None).1, None);
    }

    #[test]
    fn units_are_capped_and_never_borrow_from_the_generation() {
        let c = GrantCell::new();
        let (_, new) = c.update(|_| {
            Some(Held {
                units: u64::MAX,
                until: u64::MAX,
            })
        });
        assert_eq!(new.unwrap().units, MAX_UNITS);
        assert_eq!(
            c.spend(c.open(), MAX_UNITS, u64::MAX - 1, 1),
            Spend::Left(0)
        );
        assert_eq!(c.open().generation(), 0);
        assert_eq!(c.load().until, u64::MAX);
    }

    #[test]
    fn a_word_loaded_before_a_retirement_spends_nothing() {
        let c = GrantCell::new();
        c.update(|_| {
            Some(Held {
                units: 5,
                until: 100,
            })
        });
        let stale = c.open();
        assert_eq!(c.retire(|h| h.is_spent(200)), Retired::Done);
        c.reopen();
        // The new key gets a grant equal to the old one.
        c.update(|_| {
            Some(Held {
                units: 5,
                until: 100,
            })
        });
        assert_eq!(c.spend(stale, 1, 50, ALWAYS), Spend::Moved);
        assert_eq!(c.load().units, 5);
        assert_eq!(c.open().generation(), 2);
        // Units in hand at that time: not retired.
        assert_eq!(c.retire(|h| h.is_spent(50)), Retired::Busy);
    }

    #[test]
    fn the_last_generation_is_worn() {
        let c = GrantCell(SlotU128::new(Word::new(u32::MAX - 1, Held::default()).0));
        assert_eq!(c.retire(|_| true), Retired::Worn);
        assert!(!c.open().is_live());
    }
}

/// The grant word under loom: spends on two threads race a grant's
/// arrival (the merge of a grant of the same expiry, as `Leases::complete`
/// makes it), and no unit is spent twice or lost.
/// `RUSTFLAGS="--cfg ratecell_loom" cargo test -p ratecell --release --lib lease::`.
#[cfg(all(test, ratecell_loom))]
mod loom_model {
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn spends_and_a_merged_grant_count_every_unit_once() {
        loom::model(|| {
            let cell = Arc::new(GrantCell::new());
            cell.update(|_| {
                Some(Held {
                    units: 1,
                    until: 10,
                })
            });
            let spenders: Vec<_> = (0..2)
                .map(|_| {
                    let c = cell.clone();
                    loom::thread::spawn(move || {
                        u64::from(matches!(c.spend(c.open(), 1, 5, 10), Spend::Left(_)))
                    })
                })
                .collect();
            // A grant of 1 more for the same window arrives meanwhile.
            cell.update(|h| {
                Some(Held {
                    units: h.units + 1,
                    ..h
                })
            });
            let spent: u64 = spenders.into_iter().map(|t| t.join().unwrap()).sum();
            let left = cell.load().units;
            assert_eq!(spent + left, 2, "every unit spent once or still held");
            assert!(spent >= 1, "the first unit was there from the start");
        });
    }
}

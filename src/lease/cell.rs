//! A key's grant in hand: the units left and the time (the node's clock,
//! the skew already taken off) until which they may be spent, in one
//! 128-bit atomic word, so a spend is one load and one CAS and can never
//! pair one grant's units with another's expiry.
//!
//! Spends race each other and a grant's arrival; every other write (a
//! grant applied, the next grant promoted) is made under the key's lock
//! (`leases`), so a CAS loop here only ever competes with spends.

use crate::sync::{Ordering, SlotU128, spin_loop};

/// What a cell holds: `units` spendable before `until`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Held {
    pub units: u64,
    pub until: u64,
}

impl Held {
    /// Whether `q` units may be spent at `now`.
    #[inline]
    pub(crate) fn covers(self, q: u64, now: u64) -> bool {
        now < self.until && self.units >= q
    }

    /// Whether it holds nothing spendable at `now`.
    pub(crate) fn is_spent(self, now: u64) -> bool {
        self.units == 0 || now >= self.until
    }

    #[inline]
    fn pack(self) -> u128 {
        (u128::from(self.until) << 64) | u128::from(self.units)
    }

    #[inline]
    fn unpack(word: u128) -> Held {
        Held {
            units: word as u64,
            until: (word >> 64) as u64,
        }
    }
}

/// The grant word. Empty (`until` 0) until a grant arrives.
#[derive(Debug)]
pub(crate) struct GrantCell(SlotU128);

impl GrantCell {
    pub(crate) fn new() -> GrantCell {
        GrantCell(SlotU128::new(0))
    }

    pub(crate) fn load(&self) -> Held {
        Held::unpack(self.0.load(Ordering::Acquire))
    }

    /// Spends `q ≥ 1` units at `now`: the units left after, or what the
    /// cell held when it could not (too few, or expired).
    #[inline]
    pub(crate) fn spend(&self, q: u64, now: u64) -> Result<u64, Held> {
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let held = Held::unpack(word);
            if !held.covers(q, now) {
                return Err(held);
            }
            let left = Held {
                units: held.units - q,
                ..held
            };
            match self.0.compare_exchange_weak(
                word,
                left.pack(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(left.units),
                Err(found) => {
                    word = found;
                    spin_loop();
                }
            }
        }
    }

    /// Replaces what the cell holds with `f(held)`, unless `f` says `None`
    /// (leave it); returns what it held when the change was made (or
    /// refused) and the new value. Called under the key's lock only, so it
    /// competes with spends alone, and `f` sees every unit they left.
    pub(crate) fn update(&self, f: impl Fn(Held) -> Option<Held>) -> (Held, Option<Held>) {
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            let held = Held::unpack(word);
            let Some(new) = f(held) else {
                return (held, None);
            };
            match self.0.compare_exchange_weak(
                word,
                new.pack(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return (held, Some(new)),
                Err(found) => {
                    word = found;
                    spin_loop();
                }
            }
        }
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;

    #[test]
    fn spends_only_before_expiry_and_only_what_is_held() {
        let c = GrantCell::new();
        assert_eq!(c.spend(1, 0), Err(Held::default()));
        c.update(|_| {
            Some(Held {
                units: 3,
                until: 100,
            })
        });
        assert_eq!(c.spend(2, 99), Ok(1));
        assert_eq!(
            c.spend(2, 99),
            Err(Held {
                units: 1,
                until: 100
            })
        );
        assert_eq!(
            c.spend(1, 100),
            Err(Held {
                units: 1,
                until: 100
            })
        );
        assert_eq!(c.spend(1, 50), Ok(0));
        let (old, new) = c.update(|h| {
            (h.units == 0).then_some(Held {
                units: 9,
                until: 200,
            })
        });
        assert_eq!((old.units, new.unwrap().units), (0, 9));
        assert_eq!(c.update(|_| None).1, None);
    }
}

/// The grant word under loom: spends on two threads race a grant's
/// arrival (the merge of a grant of the same expiry, as `Leases::complete`
/// makes it), and no unit is spent twice or lost.
/// `RUSTFLAGS="--cfg ratecell_loom" cargo test --release --lib lease::cell`.
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
                    loom::thread::spawn(move || u64::from(c.spend(1, 5).is_ok()))
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

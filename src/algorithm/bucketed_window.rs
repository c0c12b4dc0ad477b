//! Bucketed sliding window ([SPEC §4](crate::spec#4-the-algorithms)): the period split into N sub-windows of
//! `S = P / N`, one counter each; the limit applies to the sum of the last N.
//!
//! Layout, `1 + ceil(N / 2)` words: word 0 is the newest sub-window index
//! stored (`s_max`); then the counters, two 32-bit counters per word, the
//! counter of sub-window `j` at ring position `j mod N`. Position `j mod N`
//! belongs to sub-window `j` only while `s_max − N < j ≤ s_max`; older
//! contents are never read, so moving `s_max` forward clears only the
//! positions it passes over.

use super::{BlockAlgorithm, StateError, Words, at_most, effective_cost};
use crate::check::decision::{Decision, saturate};
use crate::config::{Algorithm, MAX_LIMIT, Params};

#[derive(Clone, Copy, Debug)]
pub(crate) struct BucketedWindow {
    limit: u64,
    sub_period: u64,
    n: u64,
}

impl BucketedWindow {
    pub(crate) fn new(p: &Params) -> BucketedWindow {
        let n = u64::from(p.sub_windows);
        BucketedWindow {
            limit: p.limit,
            sub_period: p.period / n,
            n,
        }
    }

    fn counter<W: Words + ?Sized>(&self, w: &W, j: u64) -> u64 {
        let pos = (j % self.n) as usize;
        (w.get(1 + pos / 2) >> (32 * (pos % 2))) & 0xffff_ffff
    }

    fn set_counter<W: Words + ?Sized>(&self, w: &mut W, j: u64, value: u64) {
        let pos = (j % self.n) as usize;
        let shift = 32 * (pos % 2);
        let word = w.get(1 + pos / 2);
        w.set(
            1 + pos / 2,
            (word & !(0xffff_ffff << shift)) | (value << shift),
        );
    }

    /// The sub-windows counted at `t`: `(s_e, first live j, newest stored j)`.
    /// `first ≥ s_e − (N − 1)` whatever word 0 holds, so every walk from
    /// `first` to `newest ≤ s_e` visits at most N sub-windows (`s_e + 1`
    /// would wrap for a stored `s_max` of `u64::MAX`, and the walk with it).
    fn live<W: Words + ?Sized>(&self, w: &W, t: u64) -> (u64, u64, u64) {
        let s_max = w.get(0);
        let s_e = (t / self.sub_period).max(s_max);
        (s_e, s_e.saturating_sub(self.n - 1), s_max)
    }

    fn sum<W: Words + ?Sized>(&self, w: &W, first: u64, newest: u64) -> u64 {
        (first..=newest).map(|j| self.counter(w, j)).sum()
    }

    /// When sub-window `j` leaves the window, relative to `t`.
    fn leaves(&self, j: u64, t: u64) -> u64 {
        saturate((u128::from(j) + u128::from(self.n)) * u128::from(self.sub_period) - u128::from(t))
    }
}

impl BlockAlgorithm for BucketedWindow {
    fn words(&self) -> usize {
        1 + self.n.div_ceil(2) as usize
    }

    fn decide<W: Words + ?Sized>(&self, w: &mut W, t: u64, n: u64) -> Decision {
        let q = effective_cost(n);
        let (s_e, first, mut newest) = self.live(w, t);
        let mut sum = self.sum(w, first, newest);
        let allowed = u128::from(sum) + u128::from(q) <= u128::from(self.limit);
        if allowed && n > 0 {
            if s_e > newest {
                // Clear the positions s_max passes over (all of them at most).
                let from = (newest + 1).max(s_e.saturating_sub(self.n - 1));
                for j in from..=s_e {
                    self.set_counter(w, j, 0);
                }
                w.set(0, s_e);
                newest = s_e;
            }
            let c = self.counter(w, s_e);
            self.set_counter(w, s_e, c + n);
            sum += n;
        }
        let retry_after_ns = if allowed {
            0
        } else if q > self.limit {
            u64::MAX
        } else {
            let need = sum + q - self.limit;
            let mut freed = 0;
            let mut at = u64::MAX;
            for j in first..=newest {
                freed += self.counter(w, j);
                if freed >= need {
                    at = self.leaves(j, t);
                    break;
                }
            }
            at
        };
        // After an admission of n > 0 the newest non-empty sub-window is s_e:
        // the decision never reads back what it just wrote.
        let reset_after_ns = if allowed && n > 0 {
            self.leaves(s_e, t)
        } else {
            (first..=newest)
                .rev()
                .find(|&j| self.counter(w, j) > 0)
                .map_or(0, |j| self.leaves(j, t))
        };
        Decision {
            allowed,
            limit: self.limit,
            // Saturating: see the fixed window (a lowered limit).
            remaining: self.limit.saturating_sub(sum),
            retry_after_ns,
            reset_after_ns,
            wait_ns: 0,
        }
    }

    fn is_fresh_at<W: Words + ?Sized>(&self, w: &W, t: u64) -> bool {
        let (_, first, newest) = self.live(w, t);
        (first..=newest).all(|j| self.counter(w, j) == 0)
    }

    fn clear<W: Words + ?Sized>(&self, w: &mut W) {
        for i in 0..self.words() {
            w.set(i, 0);
        }
    }

    /// `s_max` is a sub-window some time has (`s_max ≤ u64::MAX / S`);
    /// an odd N leaves the last word's high half 0; every counter holds
    /// one of the last N sub-windows as of `s_max` (moving `s_max` clears
    /// the positions it passes), so their sum is at most the largest limit
    /// any configuration has (a lowered limit keeps a larger sum, which
    /// then denies).
    fn validate<W: Words + ?Sized>(&self, w: &W) -> Result<(), StateError> {
        let alg = Algorithm::BucketedWindow;
        at_most(
            alg,
            0,
            "newest sub-window",
            w.get(0),
            u64::MAX / self.sub_period,
            "the last sub-window any time has",
        )?;
        if self.n % 2 == 1 && w.get(self.words() - 1) >> 32 != 0 {
            let last = self.words() - 1;
            return Err(StateError::new(
                alg,
                Some(last),
                format!(
                    "word {last} ({} counters hold its low half) has a high half of {}, not 0",
                    self.n,
                    w.get(last) >> 32
                ),
            ));
        }
        let sum: u64 = (0..self.n).map(|j| self.counter(w, j)).sum();
        if sum > MAX_LIMIT {
            return Err(StateError::new(
                alg,
                None,
                format!("its counters sum to {sum}, above the largest limit {MAX_LIMIT}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Algorithm, Config};

    const MINUTE: u64 = 60_000_000_000;
    const HOUR: u64 = 60 * MINUTE;

    /// Seed "Rate Limiter2": 500 per hour with one counter per minute. Spread
    /// over the first minutes, the 501st request is denied until the first
    /// minute's counter leaves, an hour after that minute began.
    #[test]
    fn seed_five_hundred_per_hour_with_minute_counters() {
        let p = Config::new(Algorithm::BucketedWindow, 500, HOUR)
            .sub_windows(60)
            .params()
            .unwrap();
        let bw = BucketedWindow::new(&p);
        let mut w = vec![0u64; bw.words()];
        let t0 = 100 * HOUR;
        for minute in 0..5 {
            for _ in 0..100 {
                assert!(bw.decide(&mut w[..], t0 + minute * MINUTE, 1).allowed);
            }
        }
        let at = t0 + 30 * MINUTE;
        let d = bw.decide(&mut w[..], at, 1);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after_ns, t0 + HOUR - at);
        assert_eq!(d.reset_after_ns, t0 + 4 * MINUTE + HOUR - at);
        let d = bw.decide(&mut w[..], t0 + HOUR, 100);
        assert!(d.allowed, "the first minute's 100 have left");
    }

    #[test]
    fn one_sub_window_is_the_fixed_window() {
        let p = Config::new(Algorithm::BucketedWindow, 2, MINUTE)
            .sub_windows(1)
            .params()
            .unwrap();
        let bw = BucketedWindow::new(&p);
        let mut w = vec![0u64; bw.words()];
        let s = 1_000_000_000;
        let admitted: Vec<bool> = [24, 36, 49, 72]
            .iter()
            .map(|&at| bw.decide(&mut w[..], at * s, 1).allowed)
            .collect();
        assert_eq!(admitted, [true, true, false, true]);
    }
}

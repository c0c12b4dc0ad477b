//! Sliding log ([SPEC §4](crate::spec#4-the-algorithms)): the exact algorithm. The state keeps every admitted
//! request's `(timestamp, cost)` for one period; the window is
//! `(t_e − P, t_e]`.
//!
//! Layout, `3 + 2·L` words: `head`, `len`, `base` (the running total before
//! the oldest stored entry), then a ring of `L` entries of two words each:
//! the entry's timestamp and the running total of admitted units through it.
//! Timestamps never decrease along the ring (an entry is appended at
//! `t_e ≥` the newest), so the first live entry and the entry whose leaving
//! frees enough room are both found by binary search, and sums are
//! differences of running totals: every decision is O(log L). The ring never
//! overflows: live entries cost at least 1 each and sum to at most L, and
//! expired ones are dropped before an append. Running totals wrap modulo
//! 2^64; only differences under L are ever taken.
//!
//! Per-key cost: `8·(3 + 2·L)` bytes, e.g. 184 bytes for L = 10. A direct
//! limiter reserves the ring for `L` entries at construction, but the kernel
//! backs it only as it fills; a ring that cannot even be reserved (L = 2^32 − 1
//! asks for 64 GiB) is refused with `Error::OutOfMemory`. A keyed table makes
//! its whole budget resident at construction.

use super::{BlockAlgorithm, StateError, Words, at_most, effective_cost};
use crate::check::decision::{Decision, saturate};
use crate::config::{Algorithm, Params};

const HEAD: usize = 0;
const LEN: usize = 1;
const BASE: usize = 2;
const ENTRIES: usize = 3;

#[derive(Clone, Copy, Debug)]
pub(crate) struct SlidingLog {
    limit: u64,
    period: u64,
}

/// A read-only view of the ring, indexed from the oldest stored entry.
struct Ring<'a, W: Words + ?Sized> {
    w: &'a W,
    head: u64,
    len: u64,
    cap: u64,
}

impl<W: Words + ?Sized> Ring<'_, W> {
    fn slot(&self, i: u64) -> usize {
        ENTRIES + 2 * ((self.head + i) % self.cap) as usize
    }
    fn ts(&self, i: u64) -> u64 {
        self.w.get(self.slot(i))
    }
    fn total(&self, i: u64) -> u64 {
        self.w.get(self.slot(i) + 1)
    }
    /// The running total before entry `i`.
    fn before(&self, i: u64) -> u64 {
        if i == 0 {
            self.w.get(BASE)
        } else {
            self.total(i - 1)
        }
    }
    /// The first index in `0..len` for which `pred` holds (`pred` is
    /// monotone: false, then true), or `len`.
    fn partition(&self, pred: impl Fn(u64) -> bool) -> u64 {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}

impl SlidingLog {
    pub(crate) fn new(p: &Params) -> SlidingLog {
        SlidingLog {
            limit: p.limit,
            period: p.period,
        }
    }

    /// The ring, its `head` and `len` read within range whatever the
    /// words hold (a state from a shared region is not validated): every
    /// index stays inside the block and `head + i` cannot overflow. On a
    /// valid state both `min`s change nothing.
    fn ring<'a, W: Words + ?Sized>(&self, w: &'a W) -> Ring<'a, W> {
        Ring {
            w,
            head: w.get(HEAD).min(self.limit - 1),
            len: w.get(LEN).min(self.limit),
            cap: self.limit,
        }
    }

    /// Whether the stored `head` and `len` are in range (the ring then
    /// reads them as they are).
    fn ring_in_range<W: Words + ?Sized>(&self, w: &W) -> bool {
        w.get(HEAD) < self.limit && w.get(LEN) <= self.limit
    }

    /// `t_e`, and the index of the first entry still inside `(t_e − P, t_e]`.
    fn first_live<W: Words + ?Sized>(&self, r: &Ring<'_, W>, t: u64) -> (u64, u64) {
        let newest = if r.len > 0 { r.ts(r.len - 1) } else { 0 };
        let t_e = t.max(newest);
        let first =
            r.partition(|i| u128::from(r.ts(i)) + u128::from(self.period) > u128::from(t_e));
        (t_e, first)
    }

    /// When an entry at `ts` leaves the window, relative to `t` (0 if it
    /// has: only an invalid ring, out of order, asks for such an entry).
    fn leaves(&self, ts: u64, t: u64) -> u64 {
        saturate((u128::from(ts) + u128::from(self.period)).saturating_sub(u128::from(t)))
    }
}

impl BlockAlgorithm for SlidingLog {
    fn words(&self) -> usize {
        ENTRIES + 2 * self.limit as usize
    }

    fn decide<W: Words + ?Sized>(&self, w: &mut W, t: u64, n: u64) -> Decision {
        let q = effective_cost(n);
        let r = self.ring(w);
        let (t_e, first) = self.first_live(&r, t);
        let (r_len, newest) = (r.len, if r.len > 0 { r.ts(r.len - 1) } else { 0 });
        // At most L on a valid ring; the `min` keeps an invalid one's
        // difference of running totals from wrapping what follows.
        let mut sum = if first < r.len {
            r.total(r.len - 1).wrapping_sub(r.before(first))
        } else {
            0
        }
        .min(self.limit);
        let allowed = u128::from(sum) + u128::from(q) <= u128::from(self.limit);
        if !allowed {
            let retry_after_ns = if q > self.limit {
                u64::MAX
            } else {
                let need = sum + q - self.limit;
                let base = r.before(first);
                let i = r.partition(|i| i >= first && r.total(i).wrapping_sub(base) >= need);
                self.leaves(r.ts(i), t)
            };
            let reset_after_ns = if first < r.len {
                self.leaves(r.ts(r.len - 1), t)
            } else {
                0
            };
            return Decision {
                allowed,
                limit: self.limit,
                remaining: self.limit - sum,
                retry_after_ns,
                reset_after_ns,
                wait_ns: 0,
            };
        }
        if n > 0 {
            // Drop the expired entries, then append (or merge into an entry
            // at the same instant).
            let (head, cap) = (r.head, r.cap);
            let base = r.before(first);
            let len = r.len - first;
            let head = (head + first) % cap;
            w.set(HEAD, head);
            w.set(BASE, base);
            let r = Ring {
                w: &*w,
                head,
                len,
                cap,
            };
            let (last_total, last_ts) = if len > 0 {
                (r.total(len - 1), Some(r.ts(len - 1)))
            } else {
                (base, None)
            };
            let total = last_total.wrapping_add(n);
            if last_ts == Some(t_e) {
                let slot = r.slot(len - 1);
                w.set(slot + 1, total);
                w.set(LEN, len);
            } else {
                let slot = r.slot(len);
                w.set(slot, t_e);
                w.set(slot + 1, total);
                w.set(LEN, len + 1);
            }
            sum += n;
        }
        Decision {
            allowed,
            limit: self.limit,
            remaining: self.limit - sum,
            retry_after_ns: 0,
            // The newest entry is the one just appended at t_e, or (a peek)
            // the newest live one; never read back what was just written.
            reset_after_ns: match (n > 0, first < r_len) {
                (true, _) => self.leaves(t_e, t),
                (false, true) => self.leaves(newest, t),
                (false, false) => 0,
            },
            wait_ns: 0,
        }
    }

    fn is_fresh_at<W: Words + ?Sized>(&self, w: &W, t: u64) -> bool {
        let r = self.ring(w);
        self.first_live(&r, t).1 == r.len
    }

    fn clear<W: Words + ?Sized>(&self, w: &mut W) {
        w.set(HEAD, 0);
        w.set(LEN, 0);
        w.set(BASE, 0);
    }

    /// The three header words, then only the `len` stored entries (a ring
    /// sized for `L` entries is mostly unused); nothing past the header
    /// when it is out of range.
    fn saved_words<W: Words + ?Sized>(&self, w: &W, each: &mut dyn FnMut(usize)) {
        (HEAD..ENTRIES).for_each(&mut *each);
        let r = self.ring(w);
        if self.ring_in_range(w) {
            for i in 0..r.len {
                each(r.slot(i));
                each(r.slot(i) + 1);
            }
        }
    }

    /// `head < L` and `len ≤ L`; timestamps never decrease along the
    /// ring, each entry adds 1 to L units to the running total, and the
    /// entries sum to at most L (an append drops the expired entries
    /// first). `base` is a running total, which wraps: any value.
    fn validate<W: Words + ?Sized>(&self, w: &W) -> Result<(), StateError> {
        let alg = Algorithm::SlidingLog;
        let last = self.limit - 1;
        at_most(
            alg,
            HEAD,
            "head",
            w.get(HEAD),
            last,
            "the ring's last entry",
        )?;
        at_most(
            alg,
            LEN,
            "len",
            w.get(LEN),
            self.limit,
            "the ring's L entries",
        )?;
        let r = self.ring(w);
        let (mut last_ts, mut sum) = (0, 0u64);
        for i in 0..r.len {
            let (ts, added) = (r.ts(i), r.total(i).wrapping_sub(r.before(i)));
            let at = r.slot(i);
            if ts < last_ts {
                return Err(StateError::new(
                    alg,
                    Some(at),
                    format!(
                        "word {at} (entry {i}'s timestamp) {ts} is before the entry it follows ({last_ts})"
                    ),
                ));
            }
            if added == 0 || added > self.limit {
                return Err(StateError::new(
                    alg,
                    Some(at + 1),
                    format!(
                        "word {} (entry {i}'s running total) adds {added} units, outside 1..={}",
                        at + 1,
                        self.limit
                    ),
                ));
            }
            sum += added;
            if sum > self.limit {
                return Err(StateError::new(
                    alg,
                    None,
                    format!("its entries sum to more than the limit {}", self.limit),
                ));
            }
            last_ts = ts;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Algorithm, Config};

    const SECOND: u64 = 1_000_000_000;
    const MINUTE: u64 = 60 * SECOND;

    /// Seed "Algorithms for rate limiting": two per minute; requests at 01:00
    /// and 01:20 pass, 01:45 is rejected (and, unlike the seed's log, not
    /// recorded), 02:25 passes because 01:00 has left the window.
    #[test]
    fn seed_two_per_minute() {
        let p = Config::new(Algorithm::SlidingLog, 2, MINUTE)
            .params()
            .unwrap();
        let log = SlidingLog::new(&p);
        let mut w = vec![0u64; log.words()];
        let at = |m: u64, s: u64| 1000 * MINUTE + m * MINUTE + s * SECOND;
        assert!(log.decide(&mut w[..], at(1, 0), 1).allowed);
        assert!(log.decide(&mut w[..], at(1, 20), 1).allowed);
        let d = log.decide(&mut w[..], at(1, 45), 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ns, 15 * SECOND, "01:00 leaves at 02:00");
        assert_eq!(d.reset_after_ns, 35 * SECOND, "01:20 leaves at 02:20");
        let d = log.decide(&mut w[..], at(2, 25), 1);
        assert!(d.allowed);
        assert_eq!(d.remaining, 1, "only 02:25 is in (01:25, 02:25]");
    }

    #[test]
    fn the_ring_wraps_without_losing_entries() {
        let p = Config::new(Algorithm::SlidingLog, 3, 10 * SECOND)
            .params()
            .unwrap();
        let log = SlidingLog::new(&p);
        let mut w = vec![0u64; log.words()];
        for i in 0..100u64 {
            // One request every 4 s: at most 3 in any 10 s, all admitted.
            let d = log.decide(&mut w[..], i * 4 * SECOND, 1);
            assert!(d.allowed, "request {i}");
        }
        // (387, 397] holds 388, 392 and 396; at 398, 388 has left.
        assert!(!log.decide(&mut w[..], 397 * SECOND, 1).allowed);
        assert!(log.decide(&mut w[..], 398 * SECOND, 1).allowed);
    }
}

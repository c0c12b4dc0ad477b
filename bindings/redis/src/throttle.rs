//! `CL.THROTTLE`'s rule (SPEC.md §7): redis-cell's GCRA, with its
//! roundings, so that a client switching from redis-cell gets the same
//! answers.
//!
//! It is not ratecell's GCRA (§4), and deliberately so: the emission
//! interval is the period divided by the count in floating point and then
//! truncated (ratecell rounds up, so that rounding never admits more), a
//! peek (`quantity 0`) on an exhausted key is not limited, `remaining` is
//! counted in whole microseconds, and seconds are rounded up only for a
//! remainder of a millisecond or more. The state is the same: a theoretical
//! arrival time in UNIX nanoseconds, so `RATECELL.CHECK <key> gcra` can
//! read a key `CL.THROTTLE` wrote.

/// A validated `CL.THROTTLE` limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    /// `max_burst + 1`: what a fresh key admits at once.
    limit: u64,
    /// The emission interval in nanoseconds (at least 1).
    interval: u64,
    /// `interval × limit`: how far ahead of now the arrival time may run.
    tolerance: u64,
}

/// The bound on the tolerance: an arrival time stays within 64 bits for
/// any time before the year 2262 (ratecell's own GCRA bound, SPEC.md §2).
const MAX_TOLERANCE_NS: u128 = 1 << 62;

/// A `CL.THROTTLE` answer, before it is turned into seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Whether the request was refused.
    pub limited: bool,
    /// `max_burst + 1`.
    pub limit: u64,
    /// Requests of quantity 1 that would be admitted now.
    pub remaining: i64,
    /// When a retry can be admitted, in ns; `None` when admitted, or when
    /// the quantity exceeds what the key can ever admit at once.
    pub retry_after_ns: Option<i128>,
    /// How long until the key is as if new, in ns.
    pub reset_after_ns: i128,
}

impl Throttle {
    /// The limit of `CL.THROTTLE <key> <max_burst> <count> <period_s>`, or
    /// the error naming the argument.
    pub fn new(max_burst: u64, count: u64, period_s: u64) -> Result<Throttle, String> {
        let max = ratecell::MAX_LIMIT;
        if max_burst >= max {
            return Err(format!(
                "ERR max_burst must be in 0..={}, got {max_burst}",
                max - 1
            ));
        }
        if count == 0 || count > max {
            return Err(format!("ERR count must be in 1..={max}, got {count}"));
        }
        let period_ns = period_s
            .checked_mul(1_000_000_000)
            .filter(|p| (1_000_000_000..=ratecell::MAX_PERIOD_NS).contains(p))
            .ok_or_else(|| {
                format!("ERR period must be in 1..=31622400 (seconds), got {period_s}")
            })?;
        // redis-cell divides in floating point and truncates; both values
        // are exact as f64 (below 2^53), only the quotient rounds.
        let interval = (period_ns as f64 / count as f64) as u64;
        if interval == 0 {
            return Err(format!(
                "ERR count must be at most the period in nanoseconds ({period_ns}), got {count}"
            ));
        }
        let limit = max_burst + 1;
        let tolerance = u128::from(interval) * u128::from(limit);
        if tolerance >= MAX_TOLERANCE_NS {
            return Err(format!(
                "ERR max_burst is invalid: (max_burst + 1) x period / count must be below 2^62 ns, got {tolerance} ns"
            ));
        }
        Ok(Throttle {
            limit,
            interval,
            tolerance: tolerance as u64,
        })
    }

    /// Decides `quantity` at `now` (UNIX ns) on the stored arrival time
    /// (`None` for a missing key); returns the answer and the arrival time
    /// to store when the request is admitted.
    pub fn decide(&self, tat: Option<u64>, now: u64, quantity: u64) -> (Answer, Option<u64>) {
        let now_i = i128::from(now);
        let tat_i = i128::from(tat.unwrap_or(now));
        let increment = i128::from(self.interval) * i128::from(quantity);
        let tolerance = i128::from(self.tolerance);
        let new_tat = tat_i.max(now_i) + increment;
        // How far `now` is past the first time the request fits.
        let slack = now_i - (new_tat - tolerance);
        let (limited, ttl, retry, stored) = if slack < 0 {
            let retry = (increment <= tolerance).then_some(-slack);
            (true, tat_i - now_i, retry, None)
        } else {
            // An arrival time beyond 64 bits is refused by the tolerance
            // bound for any time before 2262; saturate past it.
            let stored = u64::try_from(new_tat).unwrap_or(u64::MAX);
            (false, new_tat - now_i, None, Some(stored))
        };
        let next = tolerance - ttl;
        let interval = i128::from(self.interval);
        let remaining = if next > -interval {
            // Whole microseconds of each, divided in floating point and
            // truncated (a zero divisor saturates, as `as` does).
            ((next / 1_000) as f64 / (interval / 1_000) as f64) as i64
        } else {
            0
        };
        let answer = Answer {
            limited,
            limit: self.limit,
            remaining,
            retry_after_ns: retry,
            reset_after_ns: ttl,
        };
        (answer, stored)
    }
}

/// Nanoseconds as `CL.THROTTLE`'s seconds: whole seconds (toward zero),
/// plus one for a positive remainder of at least a millisecond.
pub fn seconds(ns: i128) -> i64 {
    let whole = ns / 1_000_000_000;
    let millis = (ns % 1_000_000_000) / 1_000_000;
    i64::try_from(whole + i128::from(millis > 0)).unwrap_or(i64::MAX)
}

impl Answer {
    /// The five integers of the reply: `[limited, limit, remaining,
    /// retry_after_s (-1 when admitted or never), reset_after_s]`.
    pub fn reply(&self) -> [i64; 5] {
        [
            i64::from(self.limited),
            i64::try_from(self.limit).unwrap_or(i64::MAX),
            self.remaining,
            self.retry_after_ns.map_or(-1, seconds),
            seconds(self.reset_after_ns),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000_000_000;

    #[test]
    fn a_burst_then_a_wait() {
        // max_burst 4, one per 10 s: five at once, then limited.
        let t = Throttle::new(4, 1, 10).unwrap();
        let mut tat = None;
        for i in 0..5 {
            let (a, stored) = t.decide(tat, NOW, 1);
            assert_eq!(a.reply(), [0, 5, 4 - i, -1, 10 * (i + 1)], "{i}");
            tat = stored;
        }
        let (a, stored) = t.decide(tat, NOW, 1);
        assert_eq!(a.reply(), [1, 5, 0, 10, 50]);
        assert_eq!(stored, None);
    }

    #[test]
    fn a_peek_on_an_exhausted_key_is_not_limited() {
        let t = Throttle::new(1, 1, 60).unwrap();
        let (_, tat) = t.decide(None, NOW, 2);
        let (a, stored) = t.decide(tat, NOW, 0);
        assert_eq!(a.reply(), [0, 2, 0, -1, 120]);
        assert_eq!(stored, tat);
        assert!(t.decide(tat, NOW, 1).0.limited);
    }

    #[test]
    fn the_interval_is_truncated_and_seconds_round_up_from_a_millisecond() {
        // 86400 s / 81 = 1066.67 s, truncated to whole ns: 18 of them are
        // 19199.999999988 s, which rounds to 19200.
        let t = Throttle::new(20, 81, 86_400).unwrap();
        assert_eq!(t.decide(None, NOW, 18).0.reply()[4], 19_200);
        assert_eq!(seconds(1_000_999_999), 1);
        assert_eq!(seconds(1_001_000_000), 2);
        assert_eq!(seconds(-1_500_000_000), -1);
    }

    #[test]
    fn a_quantity_beyond_the_burst_never_fits() {
        let t = Throttle::new(2, 10, 1).unwrap();
        let (a, stored) = t.decide(None, NOW, 4);
        assert_eq!(a.reply(), [1, 3, 3, -1, 0]);
        assert_eq!(stored, None);
    }

    #[test]
    fn errors_name_the_argument() {
        assert!(
            Throttle::new(u64::from(u32::MAX), 1, 1)
                .unwrap_err()
                .contains("max_burst")
        );
        assert!(Throttle::new(0, 0, 1).unwrap_err().contains("count"));
        assert!(Throttle::new(0, 1, 0).unwrap_err().contains("period"));
        assert!(
            Throttle::new(0, 4_000_000_000, 1)
                .unwrap_err()
                .contains("count")
        );
        assert!(
            Throttle::new(4_000_000_000, 1, 31_622_400)
                .unwrap_err()
                .contains("max_burst")
        );
    }
}

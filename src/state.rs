//! One decision on a state the caller stores: the algorithms of [SPEC §4](crate::spec#4-the-algorithms)
//! for code that keeps states outside this crate's cells and tables (the
//! Redis module keeps one per Redis key).
//!
//! A [`Rule`] is a validated [`Config`] and nothing else: it holds no state,
//! no clock and no atomic. The caller owns a plain `[u64]` of
//! [`Rule::words`] words (all zero is the fresh state), serialises it however
//! it likes, and hands it to [`Rule::decide`] under whatever exclusion it
//! provides (Redis runs one command at a time). The decisions are those of
//! [`Limiter::check`](crate::Limiter::check) at the same times for the same
//! configuration and trace: both call the same functions in `algorithm/`.
//!
//! Layouts, in words: GCRA and leaky bucket `[tat]`; token bucket
//! `[used, last]`; fixed window `[window, count]`; sliding window
//! `[window, prev, cur]`; bucketed window and sliding log as their block
//! layouts (`1 + ceil(N / 2)` and `3 + 2·L` words). The word algorithms store
//! their fields unpacked, so their layout does not depend on `limit` or
//! `burst` and a state stays meaningful when those change; the sliding log's
//! ring has `limit` entries, so its layout does.
//!
//! ```
//! use ratecell::{Algorithm, Config, state::Rule};
//!
//! let rule = Rule::new(&Config::new(Algorithm::Gcra, 2, 1_000_000_000)).unwrap();
//! let mut state = vec![0u64; rule.words()]; // fresh
//! let t = 1_700_000_000_000_000_000;
//! assert!(rule.decide(&mut state, t, 1).allowed);
//! assert!(rule.decide(&mut state, t, 1).allowed);
//! let denied = rule.decide(&mut state, t, 1);
//! assert!(!denied.allowed);
//! assert_eq!(denied.retry_after_ns, 500_000_000);
//! assert!(rule.is_fresh_at(&state, t + denied.reset_after_ns));
//! ```
//!
//! A state read from outside the process (a Redis RDB file, a `RESTORE`
//! payload, a replicated write) goes through [`Rule::validate`] before its
//! first decision: it refuses what no sequence of decisions could have
//! stored ([SPEC §4](crate::spec#what-a-loader-accepts), "What a loader
//! accepts"), with a [`StateError`] that names the word.
//!
//! ```
//! use ratecell::{Algorithm, Config, state::Rule};
//!
//! let rule = Rule::new(&Config::new(Algorithm::BucketedWindow, 10, 1_000_000_000)).unwrap();
//! let mut state = vec![0u64; rule.words()];
//! state[0] = u64::MAX; // the newest sub-window: no time has it
//! let e = rule.validate(&state).unwrap_err();
//! assert_eq!(e.word, Some(0));
//! assert!(e.to_string().starts_with("bucketed_window: word 0 (newest sub-window)"));
//! ```

pub use crate::algorithm::StateError;
use crate::algorithm::{
    BlockAlgorithm, WordAlgorithm, bucketed_window::BucketedWindow, fixed_window, gcra::Gcra,
    sliding_log::SlidingLog, sliding_window, token_bucket,
};
use crate::check::decision::Decision;
use crate::config::{Algorithm, Config, ConfigError};

/// A validated configuration that decides requests on caller-held states.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    kind: Kind,
    config: Config,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Gcra(Gcra),
    TokenBucket(token_bucket::TokenBucket),
    FixedWindow(fixed_window::FixedWindow),
    SlidingWindow(sliding_window::SlidingWindow),
    BucketedWindow(BucketedWindow),
    SlidingLog(SlidingLog),
}

impl Rule {
    /// Checks `config` as a limiter would ([SPEC §2](crate::spec#2-configuration); `capacity` and
    /// `overflow` are not used) and returns the rule, or the error naming
    /// the field.
    pub fn new(config: &Config) -> Result<Rule, ConfigError> {
        let p = config.params()?;
        let kind = match p.algorithm {
            Algorithm::Gcra => Kind::Gcra(Gcra::new(&p, false)),
            Algorithm::LeakyBucket => Kind::Gcra(Gcra::new(&p, true)),
            Algorithm::TokenBucket => Kind::TokenBucket(token_bucket::TokenBucket::new(&p)),
            Algorithm::FixedWindow => Kind::FixedWindow(fixed_window::FixedWindow::new(&p)),
            Algorithm::SlidingWindow => Kind::SlidingWindow(sliding_window::SlidingWindow::new(&p)),
            Algorithm::BucketedWindow => Kind::BucketedWindow(BucketedWindow::new(&p)),
            Algorithm::SlidingLog => Kind::SlidingLog(SlidingLog::new(&p)),
        };
        Ok(Rule {
            kind,
            config: *config,
        })
    }

    /// The configuration this rule was made from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// How many `u64` words a state holds (see the module docs for the
    /// layouts). A sliding log needs `3 + 2·limit`.
    pub fn words(&self) -> usize {
        match &self.kind {
            Kind::Gcra(_) => 1,
            Kind::TokenBucket(_) | Kind::FixedWindow(_) => 2,
            Kind::SlidingWindow(_) => 3,
            Kind::BucketedWindow(a) => a.words(),
            Kind::SlidingLog(a) => a.words(),
        }
    }

    /// Decides a request of cost `cost` at `t` (UNIX ns) on `state`, and
    /// updates `state` when the request is admitted with a cost above 0
    /// ([SPEC §3](crate::spec#3-requests-and-decisions): a denied request or a peek changes nothing).
    ///
    /// # Panics
    /// If `state.len() != self.words()`.
    #[inline]
    pub fn decide(&self, state: &mut [u64], t: u64, cost: u64) -> Decision {
        assert_eq!(state.len(), self.words(), "state has the wrong length");
        match &self.kind {
            Kind::Gcra(a) => word(a, state, t, cost),
            Kind::TokenBucket(a) => word(a, state, t, cost),
            Kind::FixedWindow(a) => word(a, state, t, cost),
            Kind::SlidingWindow(a) => word(a, state, t, cost),
            Kind::BucketedWindow(a) => a.decide(state, t, cost),
            Kind::SlidingLog(a) => a.decide(state, t, cost),
        }
    }

    /// Adds `units` admitted at `t` that no decision of this rule made,
    /// as admissions nothing refuses: what a leased node admitted on its
    /// own while Redis was away, charged to the key when Redis returns
    /// ([SPEC §8](crate::spec#8-leases-one-limit-for-a-fleet-decided-locally)).
    /// Per algorithm: GCRA's `tat` moves on by `units` emission intervals
    /// from `max(tat, t)`; a window counts them in `t`'s window (nothing
    /// once that window no longer counts); a token bucket takes them from
    /// its tokens at `t`, down to empty. Counts saturate at the largest
    /// limit, so the state stays one [`Rule::validate`] accepts.
    ///
    /// Returns `false`, changing nothing, for the algorithms that are not
    /// leased (leaky bucket, bucketed window, sliding log).
    ///
    /// # Panics
    /// If `state.len() != self.words()`.
    pub fn charge(&self, state: &mut [u64], t: u64, units: u64) -> bool {
        assert_eq!(state.len(), self.words(), "state has the wrong length");
        match &self.kind {
            Kind::Gcra(a) if self.config.algorithm == Algorithm::Gcra => {
                a.put(a.charge(a.get(state), t, units), state);
            }
            Kind::TokenBucket(a) => a.put(a.charge(a.get(state), t, units), state),
            Kind::FixedWindow(a) => a.put(a.charge(a.get(state), t, units), state),
            Kind::SlidingWindow(a) => a.put(a.charge(a.get(state), t, units), state),
            _ => return false,
        }
        true
    }

    /// GCRA's emission interval `T` (`None` for the other algorithms).
    pub(crate) fn gcra_interval(&self) -> Option<u64> {
        match &self.kind {
            Kind::Gcra(a) if self.config.algorithm == Algorithm::Gcra => Some(a.interval()),
            _ => None,
        }
    }

    /// Refuses a state that no sequence of [`Rule::decide`] calls could
    /// have stored, under this rule or under another with the same
    /// algorithm, period and sub-windows (a limit or burst may change
    /// between calls, so counts above this rule's are accepted: they
    /// deny). The rules, per algorithm, are SPEC §4's "What a loader
    /// accepts"; a state of the wrong length is refused too. Call it on
    /// every state read from outside the process, before its first
    /// decision. It reads each word once: O(`words`), no allocation
    /// unless it refuses.
    pub fn validate(&self, state: &[u64]) -> Result<(), StateError> {
        if state.len() != self.words() {
            return Err(StateError {
                algorithm: self.config.algorithm,
                word: None,
                message: format!(
                    "the state has {} words, this rule's layout {}",
                    state.len(),
                    self.words()
                ),
            });
        }
        match &self.kind {
            Kind::Gcra(a) => a.validate(a.get(state)),
            Kind::TokenBucket(a) => a.validate(a.get(state)),
            Kind::FixedWindow(a) => a.validate(a.get(state)),
            Kind::SlidingWindow(a) => a.validate(a.get(state)),
            Kind::BucketedWindow(a) => a.validate(state),
            Kind::SlidingLog(a) => a.validate(state),
        }
    }

    /// Whether `state` is equivalent to fresh at `t` ([SPEC §4](crate::spec#4-the-algorithms)): dropping
    /// it would change no decision at `t` or later.
    ///
    /// # Panics
    /// If `state.len() != self.words()`.
    pub fn is_fresh_at(&self, state: &[u64], t: u64) -> bool {
        assert_eq!(state.len(), self.words(), "state has the wrong length");
        match &self.kind {
            Kind::Gcra(a) => a.is_fresh_at(a.get(state), t),
            Kind::TokenBucket(a) => a.is_fresh_at(a.get(state), t),
            Kind::FixedWindow(a) => a.is_fresh_at(a.get(state), t),
            Kind::SlidingWindow(a) => a.is_fresh_at(a.get(state), t),
            Kind::BucketedWindow(a) => a.is_fresh_at(state, t),
            Kind::SlidingLog(a) => a.is_fresh_at(state, t),
        }
    }
}

/// A word algorithm's state as plain words, its fields unpacked.
trait Plain: WordAlgorithm {
    fn get(&self, words: &[u64]) -> Self::State;
    fn put(&self, state: Self::State, words: &mut [u64]);
}

impl Plain for Gcra {
    fn get(&self, w: &[u64]) -> u64 {
        w[0]
    }
    fn put(&self, tat: u64, w: &mut [u64]) {
        w[0] = tat;
    }
}

impl Plain for token_bucket::TokenBucket {
    fn get(&self, w: &[u64]) -> token_bucket::State {
        token_bucket::State {
            used: w[0],
            last: w[1],
        }
    }
    fn put(&self, s: token_bucket::State, w: &mut [u64]) {
        w[0] = s.used;
        w[1] = s.last;
    }
}

impl Plain for fixed_window::FixedWindow {
    fn get(&self, w: &[u64]) -> fixed_window::State {
        fixed_window::State {
            window: w[0],
            count: w[1],
        }
    }
    fn put(&self, s: fixed_window::State, w: &mut [u64]) {
        w[0] = s.window;
        w[1] = s.count;
    }
}

impl Plain for sliding_window::SlidingWindow {
    fn get(&self, w: &[u64]) -> sliding_window::State {
        sliding_window::State {
            window: w[0],
            prev: w[1],
            cur: w[2],
        }
    }
    fn put(&self, s: sliding_window::State, w: &mut [u64]) {
        w[0] = s.window;
        w[1] = s.prev;
        w[2] = s.cur;
    }
}

fn word<A: Plain>(a: &A, state: &mut [u64], t: u64, cost: u64) -> Decision {
    let (decision, stored) = a.decide(a.get(state), t, cost);
    if let Some(s) = stored {
        a.put(s, state);
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, Limiter, Request};

    /// A small deterministic generator: the trace is the same on every run.
    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn rule_decides_as_the_limiter_on_every_algorithm() {
        for alg in Algorithm::ALL {
            let config = Config::new(alg, 5, 1_000_000);
            let rule = Rule::new(&config).unwrap();
            let t0 = 1_700_000_000_000_000_000;
            let (clock, _hand) = Clock::manual(t0);
            let limiter = Limiter::made(&[config], clock).unwrap();
            let mut state = vec![0; rule.words()];
            let (mut x, mut t) = (0x9e37_79b9_7f4a_7c15u64 ^ alg as u64, t0);
            for _ in 0..2_000 {
                let r = next(&mut x);
                // Mostly forward, sometimes back in time; costs 0..=7 (> limit too).
                t = if r % 10 == 0 {
                    t - (r >> 8) % 500_000
                } else {
                    t + (r >> 8) % 300_000
                };
                let cost = (r >> 40) % 8;
                let want = limiter.check(Request::new(cost).at(t));
                assert_eq!(rule.decide(&mut state, t, cost), want, "{alg} at {t}");
            }
        }
    }

    #[test]
    fn fresh_after_reset_after() {
        for alg in Algorithm::ALL {
            let rule = Rule::new(&Config::new(alg, 3, 1_000_000)).unwrap();
            let mut state = vec![0; rule.words()];
            let t = 1_700_000_000_000_000_000;
            let d = rule.decide(&mut state, t, 2);
            assert!(!rule.is_fresh_at(&state, t), "{alg}");
            assert!(rule.is_fresh_at(&state, t + d.reset_after_ns), "{alg}");
        }
    }

    #[test]
    fn a_lowered_limit_decides_the_kept_state_without_wrapping() {
        let t = 1_700_000_000_000_000_000;
        for alg in Algorithm::ALL {
            if alg == Algorithm::SlidingLog {
                continue; // its layout depends on the limit
            }
            let wide = Rule::new(&Config::new(alg, 5, 1_000_000_000)).unwrap();
            let narrow = Rule::new(&Config::new(alg, 2, 1_000_000_000)).unwrap();
            let mut state = vec![0; wide.words()];
            assert!(wide.decide(&mut state, t, 4).allowed, "{alg}");
            let d = narrow.decide(&mut state, t, 1);
            assert!(!d.allowed && d.remaining == 0, "{alg}: {d:?}");
        }
    }

    /// Issue 33 §2: a bucketed window whose newest sub-window is
    /// `u64::MAX` walked about 2^64 sub-windows on its next check (a debug
    /// build panicked on `s_e + 1` first). `validate` refuses it, naming the
    /// word; `decide` on it returns anyway, within N sub-windows.
    #[test]
    fn a_newest_sub_window_no_time_has_is_refused_and_decides_in_bounded_time() {
        let rule = Rule::new(&Config::new(Algorithm::BucketedWindow, 10, 1_000_000_000)).unwrap();
        let mut state = vec![0; rule.words()];
        state[0] = u64::MAX;
        let e = rule.validate(&state).unwrap_err();
        assert_eq!(e.word, Some(0));
        assert_eq!(
            e.to_string(),
            "bucketed_window: word 0 (newest sub-window) 18446744073709551615 is above \
             184467440737, the last sub-window any time has"
        );
        let t = 1_700_000_000_000_000_000;
        let (done, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let peek = rule.decide(&mut state, t, 0);
            let take = rule.decide(&mut state, t, 1);
            let _ = done.send((peek, take));
        });
        let (peek, take) = answer
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("a check on the stored state returns");
        assert!(peek.allowed && take.allowed, "its counters are all 0");
    }

    /// A sliding log's `head` and `len` out of the ring, and running totals
    /// that add more than the limit: refused by name, and decided (read
    /// within range, counted as at most the limit) without a panic.
    #[test]
    fn a_sliding_log_ring_out_of_range_is_refused_and_decides_without_panic() {
        let rule = Rule::new(&Config::new(Algorithm::SlidingLog, 3, 1_000_000_000)).unwrap();
        let t = 1_700_000_000_000_000_000;
        for (word, value, says) in [
            (0, u64::MAX, "word 0 (head) 18446744073709551615 is above 2"),
            (1, u64::MAX, "word 1 (len) 18446744073709551615 is above 3"),
        ] {
            let mut state = vec![0; rule.words()];
            state[word] = value;
            let e = rule.validate(&state).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
            for cost in [0, 1, 3, 4] {
                rule.decide(&mut state, t, cost);
            }
        }
        // One entry at t adding 2^63 units (the ring is [head, len, base,
        // ts, total, ...]).
        let mut state = vec![0; rule.words()];
        state[1] = 1;
        state[3] = t;
        state[4] = 1 << 63;
        let e = rule.validate(&state).unwrap_err();
        assert_eq!(e.word, Some(4), "{e}");
        let d = rule.decide(&mut state, t, 1);
        assert!(!d.allowed && d.remaining == 0, "{d:?}");
    }

    #[test]
    fn validate_accepts_what_decide_stores_and_counts_a_lowered_limit_left() {
        let t = 1_700_000_000_000_000_000;
        for alg in Algorithm::ALL {
            let rule = Rule::new(&Config::new(alg, 5, 1_000_000)).unwrap();
            let mut state = vec![0; rule.words()];
            assert_eq!(rule.validate(&state), Ok(()), "{alg}: fresh");
            for i in 0..50 {
                rule.decide(&mut state, t + i * 37_000, i % 3);
                assert_eq!(rule.validate(&state), Ok(()), "{alg}: {state:?}");
            }
            assert!(rule.validate(&state[1..]).is_err(), "{alg}: too short");
            if alg != Algorithm::SlidingLog {
                let narrow = Rule::new(&Config::new(alg, 1, 1_000_000)).unwrap();
                assert_eq!(narrow.validate(&state), Ok(()), "{alg}: limit lowered");
            }
        }
    }

    #[test]
    fn rule_refuses_what_a_limiter_refuses() {
        let e = Rule::new(&Config::new(Algorithm::Gcra, 0, 1_000_000)).unwrap_err();
        assert_eq!(e.field, crate::Field::Limit);
    }
}

//! A sequential reference model of SPEC.md §2 and §4, written from the spec
//! text (and the semantics the brief settles beyond it), not from `src/`.
//!
//! It owns nothing the library uses: it exists so property tests can
//! compare `Limiter::check` (at explicit times) with rules that are easy to read. Everything
//! is `u128` so no formula can overflow, states are the obvious data
//! structures (an `Option` of plain numbers, a map of sub-window counters, a
//! `Vec` of log entries), and durations are narrowed to `u64` only at the
//! very end, saturating as the brief requires.

// Each test crate that includes this module uses a different part of it.
#![allow(dead_code)]

use ratecell::{Algorithm, Config, Decision, Field};
use std::collections::BTreeMap;

pub mod trace;

/// The largest `limit` and `burst` (SPEC §2 with the brief's ranges).
pub const MAX_LIMIT: u64 = (1 << 32) - 1;
/// 1 µs.
pub const MIN_PERIOD: u64 = 1_000;
/// 366 days.
pub const MAX_PERIOD: u64 = 366 * 86_400 * 1_000_000_000;
/// GCRA and leaky bucket refuse `B·T` at or above this.
pub const MAX_TOLERANCE: u128 = 1 << 62;

/// Every field of `cfg` that SPEC §2 (and brief item 10) refuses, for a
/// direct `Limiter` when `direct`, else for a keyed one. Empty means valid.
///
/// When several fields are wrong the library may name any of them, so the
/// caller checks membership, not order.
pub fn config_faults(cfg: &Config, direct: bool) -> Vec<Field> {
    let mut faults = Vec::new();
    let has_burst = matches!(
        cfg.algorithm,
        Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
    );
    let limit_ok = (1..=MAX_LIMIT).contains(&cfg.limit);
    let period_ok = (MIN_PERIOD..=MAX_PERIOD).contains(&cfg.period_ns);
    if !limit_ok {
        faults.push(Field::Limit);
    }
    if !period_ok {
        faults.push(Field::PeriodNs);
    }
    let burst_ok = if has_burst {
        cfg.burst <= MAX_LIMIT
    } else {
        cfg.burst == 0 || cfg.burst == cfg.limit
    };
    if !burst_ok {
        faults.push(Field::Burst);
    }
    // The cross-field rules are listed even when another field is also out
    // of range: which fault gets named first is the library's choice.
    let spaced = matches!(cfg.algorithm, Algorithm::Gcra | Algorithm::LeakyBucket);
    if spaced && limit_ok && cfg.period_ns > 0 {
        if cfg.limit > cfg.period_ns {
            faults.push(Field::Limit);
        } else if burst_ok {
            let b = if cfg.burst == 0 { cfg.limit } else { cfg.burst };
            let interval = u128::from(cfg.period_ns).div_ceil(u128::from(cfg.limit));
            if u128::from(b) * interval >= MAX_TOLERANCE {
                faults.push(Field::Burst);
            }
        }
    }
    if cfg.algorithm == Algorithm::BucketedWindow {
        let n = cfg.sub_windows;
        if !(1..=64).contains(&n) || cfg.period_ns % u64::from(n) != 0 {
            faults.push(Field::SubWindows);
        }
    }
    if direct != (cfg.capacity == 0) || cfg.capacity > 1 << 40 {
        faults.push(Field::Capacity);
    }
    faults
}

/// The state of one key, per algorithm. `None` / empty is fresh.
#[derive(Clone, Debug)]
enum State {
    /// Theoretical arrival time; fresh is 0.
    Gcra { tat: u128 },
    /// `(tokens, last)`.
    Token(Option<(u128, u128)>),
    /// `(window, count)`.
    Fixed(Option<(u128, u128)>),
    /// `(window, prev, cur)`.
    Sliding(Option<(u128, u128, u128)>),
    /// Sub-window index -> admitted units in it.
    Bucketed(BTreeMap<u128, u128>),
    /// Admitted `(timestamp, cost)` in arrival order (timestamps never
    /// decrease, brief item 8).
    Log(Vec<(u128, u128)>),
}

/// One key's limiter, decided the slow and obvious way.
#[derive(Clone, Debug)]
pub struct Model {
    algorithm: Algorithm,
    /// L
    limit: u128,
    /// P
    period: u128,
    /// B (0 already resolved to L)
    burst: u128,
    /// N (bucketed window)
    sub_windows: u128,
    state: State,
}

/// Narrows an exact duration to a decision field, saturating (brief item 1).
/// `retry_after` of the two algorithms that count units in live groups
/// (sub-windows, log entries), listed oldest first as `(time, units)`: 0 when
/// admitted, never when `q > L`, else the wait until enough of the oldest
/// groups have left (`leaves_at(time)`) for `q` units to fit.
fn retry_as_units_leave(
    allowed: bool,
    live: &[(u128, u128)],
    sum: u128,
    q: u128,
    l: u128,
    t: u128,
    leaves_at: impl Fn(u128) -> u128,
) -> u64 {
    if allowed {
        return 0;
    }
    if q > l {
        return u64::MAX;
    }
    let mut left = sum;
    for &(at, units) in live {
        left -= units;
        if left + q <= l {
            let at = leaves_at(at);
            assert!(at > t, "model: a denied request must wait");
            return sat(at - t);
        }
    }
    panic!("model: q ≤ L fits once every group has left");
}

fn sat(ns: u128) -> u64 {
    u64::try_from(ns).unwrap_or(u64::MAX)
}

impl Model {
    /// A fresh model. Panics on a configuration the library would refuse.
    pub fn new(cfg: &Config) -> Model {
        assert!(
            config_faults(cfg, cfg.capacity == 0).is_empty(),
            "model built from an invalid config {cfg:?}"
        );
        let state = match cfg.algorithm {
            Algorithm::Gcra | Algorithm::LeakyBucket => State::Gcra { tat: 0 },
            Algorithm::TokenBucket => State::Token(None),
            Algorithm::FixedWindow => State::Fixed(None),
            Algorithm::SlidingWindow => State::Sliding(None),
            Algorithm::BucketedWindow => State::Bucketed(BTreeMap::new()),
            Algorithm::SlidingLog => State::Log(Vec::new()),
        };
        Model {
            algorithm: cfg.algorithm,
            limit: cfg.limit.into(),
            period: cfg.period_ns.into(),
            burst: if cfg.burst == 0 { cfg.limit } else { cfg.burst }.into(),
            sub_windows: cfg.sub_windows.into(),
            state,
        }
    }

    /// A live reconfiguration (issue 15, part 3) with its carry-over rule,
    /// written from docs/ALGORITHMS.md, not from the library: the new
    /// parameters take over and the state keeps what was spent (GCRA: the
    /// theoretical arrival time; token bucket: the tokens taken since full,
    /// capped at the new burst, and the refill clock; windows and log:
    /// their counts and entries). Panics on a change the library refuses.
    pub fn reconfigure(&mut self, cfg: &Config) {
        assert_eq!(cfg.algorithm, self.algorithm, "model: algorithm change");
        let burst: u128 = if cfg.burst == 0 { cfg.limit } else { cfg.burst }.into();
        if let State::Token(Some((tokens, last))) = self.state {
            let spent = self.burst - tokens;
            self.state = State::Token(Some((burst - spent.min(burst), last)));
        }
        self.limit = cfg.limit.into();
        self.period = cfg.period_ns.into();
        self.burst = burst;
        self.sub_windows = cfg.sub_windows.into();
    }

    /// The request `(cost n, time t)`: its decision, and the new state when
    /// it is admitted with `n > 0` (brief item 2).
    pub fn check(&mut self, t: u64, n: u64) -> Decision {
        let (t, n) = (u128::from(t), u128::from(n));
        match self.algorithm {
            Algorithm::Gcra => self.gcra(t, n, false),
            Algorithm::LeakyBucket => self.gcra(t, n, true),
            Algorithm::TokenBucket => self.token_bucket(t, n),
            Algorithm::FixedWindow => self.fixed_window(t, n),
            Algorithm::SlidingWindow => self.sliding_window(t, n),
            Algorithm::BucketedWindow => self.bucketed_window(t, n),
            Algorithm::SlidingLog => self.sliding_log(t, n),
        }
    }

    fn gcra(&mut self, t: u128, n: u128, leaky: bool) -> Decision {
        let State::Gcra { tat } = &mut self.state else {
            unreachable!()
        };
        let q = n.max(1);
        let b = self.burst;
        let interval = self.period.div_ceil(self.limit);
        let tolerance = b * interval;
        let base = (*tat).max(t);
        let new = base + q * interval;
        // Brief item 5: a tat past u64::MAX cannot be stored; never admit it.
        let allowed = new - t <= tolerance && new <= u128::from(u64::MAX);
        if allowed && n > 0 {
            *tat = new;
        }
        let ahead = (*tat).max(t) - t;
        let retry = if allowed {
            0
        } else if q > b || new > u128::from(u64::MAX) {
            u64::MAX
        } else {
            sat(new - tolerance - t)
        };
        Decision {
            allowed,
            limit: sat(b),
            // Brief item 3: time gone back can leave `ahead` past the tolerance.
            // SPEC §4: and only the tats that fit in a u64 count.
            remaining: sat((tolerance.saturating_sub(ahead) / interval)
                .min((u128::from(u64::MAX) - (*tat).max(t)) / interval)),
            retry_after_ns: retry,
            reset_after_ns: sat(ahead),
            wait_ns: if leaky && allowed { sat(base - t) } else { 0 },
        }
    }

    fn token_bucket(&mut self, t: u128, n: u128) -> Decision {
        let State::Token(stored) = &mut self.state else {
            unreachable!()
        };
        let (l, p, b) = (self.limit, self.period, self.burst);
        let q = n.max(1);
        let (mut tokens, mut last) = stored.unwrap_or((b, t));
        let te = t.max(last);
        let k = (te - last) / p;
        tokens = (tokens + k * l).min(b);
        last += k * p;
        if tokens == b {
            last = te;
        }
        let allowed = q <= tokens;
        if allowed {
            tokens -= n;
            if n > 0 {
                *stored = Some((tokens, last));
            }
        }
        // `last + m·P − t` with m refills still owed.
        let after_refills = |owed: u128| last + owed.div_ceil(l) * p - t;
        let retry = if allowed {
            0
        } else if q > b {
            u64::MAX
        } else {
            sat(after_refills(q - tokens))
        };
        let reset = if tokens == b {
            0
        } else {
            sat(after_refills(b - tokens))
        };
        Decision {
            allowed,
            limit: sat(b),
            remaining: sat(tokens),
            retry_after_ns: retry,
            reset_after_ns: reset,
            wait_ns: 0,
        }
    }

    fn fixed_window(&mut self, t: u128, n: u128) -> Decision {
        let State::Fixed(stored) = &mut self.state else {
            unreachable!()
        };
        let (l, p) = (self.limit, self.period);
        let q = n.max(1);
        let w = t / p;
        // A window in the past is over; one in the future (time went back)
        // is kept, with its count (SPEC, brief item 6).
        let (we, mut count) = match *stored {
            Some((ws, c)) if ws >= w => (ws, c),
            _ => (w, 0),
        };
        let allowed = count + q <= l;
        if allowed && n > 0 {
            count += n;
            *stored = Some((we, count));
        }
        let to_end = (we + 1) * p - t;
        Decision {
            allowed,
            limit: sat(l),
            remaining: sat(l.saturating_sub(count)),
            retry_after_ns: if allowed {
                0
            } else if q > l {
                u64::MAX
            } else {
                sat(to_end)
            },
            reset_after_ns: if count == 0 { 0 } else { sat(to_end) },
            wait_ns: 0,
        }
    }

    fn sliding_window(&mut self, t: u128, n: u128) -> Decision {
        let State::Sliding(stored) = &mut self.state else {
            unreachable!()
        };
        let (l, p) = (self.limit, self.period);
        let q = n.max(1);
        let w = t / p;
        let (we, prev, mut cur) = match *stored {
            None => (w, 0, 0),
            Some((ws, prev, cur)) if ws == w => (w, prev, cur),
            Some((ws, _, cur)) if ws + 1 == w => (w, cur, 0),
            Some((ws, _, _)) if ws < w => (w, 0, 0),
            Some((ws, prev, cur)) => (ws, prev, cur),
        };
        let te = t.max(we * p);
        let e = te - we * p;
        // The least offset in [from, P) of a window with these counts at
        // which q more units fit: prev·(P − e) + (cur + q)·P ≤ L·P.
        let first_fit = |prev: u128, cur: u128, from: u128| -> Option<u128> {
            if cur + q > l {
                return None;
            }
            let room = (l - cur - q) * p;
            // prev·(P − e) ≤ room  ⟺  P − e ≤ floor(room / prev); with no
            // previous count every offset fits.
            let least = room
                .checked_div(prev)
                .map_or(0, |fits| p.saturating_sub(fits));
            let e = least.max(from);
            (e < p).then_some(e)
        };
        let allowed = first_fit(prev, cur, e) == Some(e);
        if allowed && n > 0 {
            cur += n;
            *stored = Some((we, prev, cur));
        }
        let retry = if allowed {
            0
        } else if q > l {
            u64::MAX
        } else {
            // This window, else the next one (prev = cur, cur = 0), else the
            // one after (both 0), where q ≤ L always fits at once.
            let at = first_fit(prev, cur, e)
                .map(|e| we * p + e)
                .or_else(|| first_fit(cur, 0, 0).map(|e| (we + 1) * p + e))
                .unwrap_or((we + 2) * p);
            assert!(at > t, "model: a denied request must wait");
            sat(at - t)
        };
        let used = prev * (p - e) + cur * p;
        let reset = if cur > 0 {
            (we + 2) * p - t
        } else if prev > 0 {
            (we + 1) * p - t
        } else {
            0
        };
        Decision {
            allowed,
            limit: sat(l),
            remaining: sat((l * p).saturating_sub(used) / p),
            retry_after_ns: retry,
            reset_after_ns: sat(reset),
            wait_ns: 0,
        }
    }

    fn bucketed_window(&mut self, t: u128, n: u128) -> Decision {
        let State::Bucketed(counters) = &mut self.state else {
            unreachable!()
        };
        let (l, big_n) = (self.limit, self.sub_windows);
        let s_len = self.period / big_n;
        let q = n.max(1);
        let newest = counters.keys().next_back().copied().unwrap_or(0);
        let se = (t / s_len).max(newest);
        // Sub-window j counts while j > se − N (the last N, se included).
        let live: Vec<(u128, u128)> = counters
            .iter()
            .filter(|&(&j, _)| j + big_n > se)
            .map(|(&j, &c)| (j, c))
            .collect();
        let mut sum: u128 = live.iter().map(|&(_, c)| c).sum();
        let allowed = sum + q <= l;
        if allowed && n > 0 {
            *counters.entry(se).or_insert(0) += n;
            sum += n;
        }
        // Oldest first: sub-window j leaves at (j + N)·S.
        let retry = retry_as_units_leave(allowed, &live, sum, q, l, t, |j| (j + big_n) * s_len);
        let reset = if sum == 0 {
            0
        } else {
            // After an admission `se` itself holds units; else the newest live one.
            let newest_live = counters
                .iter()
                .filter(|&(&j, &c)| j + big_n > se && c > 0)
                .map(|(&j, _)| j)
                .max()
                .expect("a positive sum has a non-empty sub-window");
            sat((newest_live + big_n) * s_len - t)
        };
        Decision {
            allowed,
            limit: sat(l),
            remaining: sat(l.saturating_sub(sum)),
            retry_after_ns: retry,
            reset_after_ns: reset,
            wait_ns: 0,
        }
    }

    fn sliding_log(&mut self, t: u128, n: u128) -> Decision {
        let State::Log(log) = &mut self.state else {
            unreachable!()
        };
        let (l, p) = (self.limit, self.period);
        let q = n.max(1);
        let te = log.iter().map(|&(ts, _)| ts).max().unwrap_or(0).max(t);
        // Window (te − P, te]: an entry at ts counts while ts + P > te.
        let live: Vec<(u128, u128)> = log.iter().copied().filter(|&(ts, _)| ts + p > te).collect();
        let mut sum: u128 = live.iter().map(|&(_, c)| c).sum();
        let allowed = sum + q <= l;
        if allowed && n > 0 {
            log.push((te, n));
            sum += n;
        }
        // Oldest first: an entry at ts leaves at ts + P.
        let retry = retry_as_units_leave(allowed, &live, sum, q, l, t, |ts| ts + p);
        let reset = if sum == 0 {
            0
        } else {
            let newest = log.iter().map(|&(ts, _)| ts).max().expect("sum > 0");
            sat(newest + p - t)
        };
        Decision {
            allowed,
            limit: sat(l),
            remaining: sat(l.saturating_sub(sum)),
            retry_after_ns: retry,
            reset_after_ns: reset,
            wait_ns: 0,
        }
    }
}

/// Several limits checked as one (issue 15), the slow and obvious way: each
/// limit's model decides the request on a copy; only if every one admits
/// are the copies kept.
#[derive(Clone, Debug)]
pub struct AllOfModel {
    limits: Vec<Model>,
}

/// What the conjunction decided: the combined decision, the index of the
/// limit that denied, and every limit's own decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllOfDecision {
    pub decision: Decision,
    pub denied_by: Option<usize>,
    pub each: Vec<Decision>,
}

impl AllOfModel {
    pub fn new(configs: &[Config]) -> AllOfModel {
        AllOfModel {
            limits: configs.iter().map(Model::new).collect(),
        }
    }

    /// Every limit's [`Model::reconfigure`].
    pub fn reconfigure(&mut self, configs: &[Config]) {
        assert_eq!(configs.len(), self.limits.len());
        for (m, c) in self.limits.iter_mut().zip(configs) {
            m.reconfigure(c);
        }
    }

    pub fn check(&mut self, t: u64, n: u64) -> AllOfDecision {
        let mut tried = self.limits.clone();
        let mut each: Vec<Decision> = tried.iter_mut().map(|m| m.check(t, n)).collect();
        let allowed = each.iter().all(|d| d.allowed);
        if allowed {
            self.limits = tried;
        } else {
            // Nothing is stored: a limit that alone would admit reports its
            // unchanged state, which is what a request it denies reports
            // (a cost above any limit is always denied).
            for (d, m) in each.iter_mut().zip(&self.limits) {
                if d.allowed {
                    let unchanged = m.clone().check(t, u64::MAX);
                    *d = Decision {
                        allowed: true,
                        retry_after_ns: 0,
                        wait_ns: 0,
                        remaining: unchanged.remaining,
                        reset_after_ns: unchanged.reset_after_ns,
                        limit: d.limit,
                    };
                }
            }
        }
        // The least remaining, the first on ties.
        let least = (0..each.len())
            .min_by_key(|&i| (each[i].remaining, i))
            .unwrap();
        // The denier: the longest wait, the first on ties.
        let denied_by = (!allowed).then(|| {
            (0..each.len())
                .filter(|&i| !each[i].allowed)
                .max_by_key(|&i| (each[i].retry_after_ns, std::cmp::Reverse(i)))
                .unwrap()
        });
        let decision = Decision {
            allowed,
            limit: each[least].limit,
            remaining: each[least].remaining,
            retry_after_ns: denied_by.map_or(0, |i| each[i].retry_after_ns),
            reset_after_ns: each.iter().map(|d| d.reset_after_ns).max().unwrap(),
            wait_ns: if allowed {
                each.iter().map(|d| d.wait_ns).max().unwrap()
            } else {
                0
            },
        };
        AllOfDecision {
            decision,
            denied_by,
            each,
        }
    }
}

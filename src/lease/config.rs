//! What a leased limit is configured with (SPEC §8), its defaults, and the
//! checks that refuse a bad value by name.

use super::grant::lifetime_ns;
use crate::config::{Algorithm, Config, Params};
use crate::keyed::KeyedLimiter;
use std::fmt;

/// One millisecond, in ns: the least refill horizon, and the default skew.
const MS: u64 = 1_000_000;

/// Keys a node tracks when the configuration's `capacity` is 0.
const DEFAULT_CAPACITY: u64 = 65_536;

/// What decides a request that finds no units while Redis does not answer
/// (SPEC §8, "When Redis is slow or unreachable"). Either way the decision
/// is counted in [`LeaseStats::lease_fallbacks`](crate::lease::LeaseStats).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Denied; `retry_after` is the time until the next grant attempt.
    Deny,
    /// Decided by a limiter of the node's own, of the same algorithm with
    /// the limit (and burst) divided by `expected_nodes`, at least 1.
    Local {
        /// How many nodes share the limit (1 or more).
        expected_nodes: u32,
    },
}

impl FailurePolicy {
    /// The `local` policy's limiter for `limit`: the same algorithm, the
    /// limit and burst divided by the expected nodes (at least 1),
    /// tracking `limit.capacity` keys (0: 65,536) under its overflow
    /// policy; `None` for `Deny`.
    pub fn limiter(&self, limit: &Config) -> Result<Option<KeyedLimiter>, LeaseError> {
        let FailurePolicy::Local { expected_nodes } = *self else {
            return Ok(None);
        };
        if expected_nodes == 0 {
            return Err(LeaseError::new(
                "expected_nodes",
                "0 is outside 1..=4294967295".into(),
            ));
        }
        let p = limit
            .params()
            .map_err(|e| LeaseError::new(e.field.name(), e.message))?;
        let share = |x: u64| (x / u64::from(expected_nodes)).max(1);
        let capacity = match limit.capacity {
            0 => DEFAULT_CAPACITY,
            c => c,
        };
        let mut c = Config::new(p.algorithm, share(p.limit), p.period)
            .capacity(capacity)
            .overflow(limit.overflow)
            .sub_windows(p.sub_windows);
        if p.algorithm.has_burst() {
            c = c.burst(share(p.burst));
        }
        KeyedLimiter::builder()
            .limit(c)
            .build()
            .map(Some)
            .map_err(|e| LeaseError::new("failure", format!("the local limiter: {e}")))
    }
}

/// A leased limit: the limit kept in Redis (its algorithm, limit, period,
/// burst) and how this node holds grants of it.
///
/// Every duration is in ns; 0 for `max_grant`, `horizon_ns` and
/// `expire_ns` stands for SPEC §8's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The limit, as the module decides it. Its `capacity` is how many
    /// keys this node tracks at once (0: 65,536); its `overflow` is unused.
    pub limit: Config,
    /// `W`, the largest grant asked for (0: a tenth of the limit, at least 1).
    pub max_grant: u64,
    /// `H`, the refill horizon: a grant covers the checks of the last `H`
    /// (0: a tenth of the period, at least 1 ms).
    pub horizon_ns: u64,
    /// `E`, a GCRA grant's lifetime, sent as `EXPIRE` (0: the module's
    /// default, a tenth of the period). One emission interval ..= the period.
    pub expire_ns: u64,
    /// The most this node's clock may differ from the server's (1 ms by
    /// default; 0 when both read one clock, as with explicit times): a
    /// grant's units are spent only on requests dated in their period and
    /// `skew_ns` or more before it ends (SPEC §8).
    pub skew_ns: u64,
    /// The server decides each grant at the time of the check that asked
    /// (`AT`), on the node's timeline, rather than on its own clock: for
    /// tests and replays with explicit times (states written so never
    /// expire in Redis). Off by default.
    pub send_at: bool,
    /// What decides when no grant can be had.
    pub failure: FailurePolicy,
}

impl LeaseConfig {
    /// A leased `limit` with SPEC §8's defaults and the `deny` policy.
    pub fn new(limit: Config) -> LeaseConfig {
        LeaseConfig {
            limit,
            max_grant: 0,
            horizon_ns: 0,
            expire_ns: 0,
            skew_ns: MS,
            send_at: false,
            failure: FailurePolicy::Deny,
        }
    }

    /// Sets `W`, the largest grant.
    #[must_use]
    pub fn max_grant(mut self, units: u64) -> LeaseConfig {
        self.max_grant = units;
        self
    }

    /// Sets `H`, the refill horizon.
    #[must_use]
    pub fn horizon_ns(mut self, ns: u64) -> LeaseConfig {
        self.horizon_ns = ns;
        self
    }

    /// Sets `E`, a GCRA grant's lifetime.
    #[must_use]
    pub fn expire_ns(mut self, ns: u64) -> LeaseConfig {
        self.expire_ns = ns;
        self
    }

    /// Sets the clock-skew margin.
    #[must_use]
    pub fn skew_ns(mut self, ns: u64) -> LeaseConfig {
        self.skew_ns = ns;
        self
    }

    /// Sets whether grants are decided at the checks' own times
    /// ([`LeaseConfig::send_at`]).
    #[must_use]
    pub fn send_at(mut self, on: bool) -> LeaseConfig {
        self.send_at = on;
        self
    }

    /// Sets the failure policy.
    #[must_use]
    pub fn failure(mut self, policy: FailurePolicy) -> LeaseConfig {
        self.failure = policy;
        self
    }

    /// Checks every field and resolves the defaults.
    pub(crate) fn resolve(&self) -> Result<Resolved, LeaseError> {
        let params = self
            .limit
            .params()
            .map_err(|e| LeaseError::new(e.field.name(), e.message))?;
        let alg = params.algorithm;
        if !leasable(alg) {
            return Err(LeaseError::new(
                "algorithm",
                format!(
                    "{alg} cannot be leased: only gcra, token_bucket, fixed_window and sliding_window can (SPEC §8)"
                ),
            ));
        }
        let (l, p) = (params.limit, params.period);
        let max_grant = match self.max_grant {
            0 => (l / 10).max(1),
            w if w > l => {
                return Err(LeaseError::new(
                    "max_grant",
                    format!("{w} is above the limit ({l}): a grant never exceeds it"),
                ));
            }
            w => w,
        };
        let horizon = match self.horizon_ns {
            0 => (p / 10).max(MS),
            h if h > p => {
                return Err(LeaseError::new(
                    "horizon_ns",
                    format!("{h} ns is longer than the period ({p} ns)"),
                ));
            }
            h => h,
        };
        let expire = match (alg, self.expire_ns) {
            (_, 0) => 0,
            (Algorithm::Gcra, e) if !(params.interval..=p).contains(&e) => {
                return Err(LeaseError::new(
                    "expire_ns",
                    format!(
                        "{e} ns is outside one emission interval ({} ns) ..= the period ({p} ns)",
                        params.interval
                    ),
                ));
            }
            (Algorithm::Gcra, e) => e,
            (other, e) => {
                return Err(LeaseError::new(
                    "expire_ns",
                    format!(
                        "{e} ns given, but only a GCRA grant has a lifetime of its own ({other}'s units expire with their window)"
                    ),
                ));
            }
        };
        let lifetime = lifetime_ns(&params, Some(expire));
        // A GCRA grant made at `t` pays for requests dated from `t − E`:
        // its units stand for room in the key's tolerance, which a request
        // dated a little before the grant had too (a node's clock behind
        // the server's, a fetch's own check); SPEC §8 bounds it.
        let spendable = if alg == Algorithm::Gcra {
            2 * lifetime
        } else {
            lifetime
        };
        if self.skew_ns >= lifetime {
            return Err(LeaseError::new(
                "skew_ns",
                format!(
                    "{} ns is not less than a grant's lifetime ({lifetime} ns, {}): no request could spend a grant",
                    self.skew_ns,
                    if alg == Algorithm::Gcra {
                        "E"
                    } else {
                        "the period"
                    },
                ),
            ));
        }
        if let FailurePolicy::Local { expected_nodes: 0 } = self.failure {
            return Err(LeaseError::new(
                "expected_nodes",
                "0 is outside 1..=4294967295".into(),
            ));
        }
        let capacity = match self.limit.capacity {
            0 => DEFAULT_CAPACITY,
            c => c,
        };
        Ok(Resolved {
            params,
            max_grant,
            horizon,
            expire,
            skew: self.skew_ns,
            span: spendable - self.skew_ns,
            send_at: self.send_at,
            capacity,
        })
    }
}

/// Whether the module leases `algorithm` (SPEC §8's table).
pub(crate) fn leasable(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::Gcra
            | Algorithm::TokenBucket
            | Algorithm::FixedWindow
            | Algorithm::SlidingWindow
    )
}

/// A checked configuration with its defaults filled in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Resolved {
    pub params: Params,
    pub max_grant: u64,
    pub horizon: u64,
    /// 0: the module's default.
    pub expire: u64,
    pub skew: u64,
    /// How long a grant's period is, less the skew: a window or refill
    /// step, or `2·E` for GCRA (`[t − E, t + E)`). A grant held until
    /// `until` (its expiry less the skew) is spent on requests dated in
    /// `[until − span, until)`.
    pub span: u64,
    pub send_at: bool,
    pub capacity: u64,
}

impl Resolved {
    /// A decision's `limit` (SPEC §3): the burst for GCRA and the token
    /// bucket, the limit for the windows.
    pub fn reported_limit(&self) -> u64 {
        if self.params.algorithm.has_burst() {
            self.params.burst
        } else {
            self.params.limit
        }
    }
}

/// A lease configuration refused: the field at fault and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseError {
    /// The field's name (`limit`, `max_grant`, `expected_nodes`, ...).
    pub field: &'static str,
    /// The value and what is accepted.
    pub message: String,
}

impl LeaseError {
    pub(crate) fn new(field: &'static str, message: String) -> LeaseError {
        LeaseError { field, message }
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.field, self.message)
    }
}

impl std::error::Error for LeaseError {}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn field(c: LeaseConfig) -> &'static str {
        c.resolve().unwrap_err().field
    }

    #[test]
    fn defaults_follow_spec() {
        let r = LeaseConfig::new(Config::new(Algorithm::FixedWindow, 1000, S))
            .resolve()
            .unwrap();
        assert_eq!(
            (r.max_grant, r.horizon, r.expire, r.skew),
            (100, S / 10, 0, MS)
        );
        let tiny = LeaseConfig::new(Config::new(Algorithm::Gcra, 5, 5 * MS));
        let r = tiny.skew_ns(0).resolve().unwrap();
        assert_eq!((r.max_grant, r.horizon), (1, MS));
        // E is then one emission interval, 1 ms: the default skew of 1 ms
        // would leave no time to spend a grant in.
        assert_eq!(tiny.resolve().unwrap_err().field, "skew_ns");
        let r = LeaseConfig::new(Config::new(Algorithm::Gcra, 100, S))
            .resolve()
            .unwrap();
        assert_eq!(r.span, 2 * S / 10 - MS, "t − E ..= t + E less the skew");
        let r = LeaseConfig::new(Config::new(Algorithm::FixedWindow, 100, S))
            .resolve()
            .unwrap();
        assert_eq!(r.span, S - MS, "the window less the skew at its end");
    }

    #[test]
    fn bad_values_name_their_field() {
        let c = |alg| LeaseConfig::new(Config::new(alg, 100, S));
        assert_eq!(field(c(Algorithm::SlidingLog)), "algorithm");
        assert_eq!(field(c(Algorithm::LeakyBucket)), "algorithm");
        assert_eq!(
            field(LeaseConfig::new(Config::new(Algorithm::Gcra, 0, S))),
            "limit"
        );
        assert_eq!(field(c(Algorithm::Gcra).max_grant(101)), "max_grant");
        assert_eq!(field(c(Algorithm::Gcra).horizon_ns(2 * S)), "horizon_ns");
        assert_eq!(field(c(Algorithm::Gcra).expire_ns(1)), "expire_ns");
        assert_eq!(
            field(c(Algorithm::FixedWindow).expire_ns(S / 2)),
            "expire_ns"
        );
        assert_eq!(field(c(Algorithm::Gcra).skew_ns(S)), "skew_ns");
        let local0 = FailurePolicy::Local { expected_nodes: 0 };
        assert_eq!(field(c(Algorithm::Gcra).failure(local0)), "expected_nodes");
        let e = c(Algorithm::Gcra).max_grant(101).resolve().unwrap_err();
        assert!(e.to_string().starts_with("invalid max_grant: 101"), "{e}");
    }
}

//! The lease protocol's pure parts (SPEC §8): the `RATECELL.LEASE`
//! command's arguments, its reply, how big a grant to ask for, and the
//! backoff after a failed one. No state, no time read: every binding that
//! leases can use these and give the same answers.

use super::config::Resolved;
use super::grant::Charge;
use crate::config::Algorithm;
use std::fmt;

/// The first wait after a failed grant (SPEC §8: doubling from 10 ms).
const BACKOFF_FIRST_NS: u64 = 10_000_000;
/// The longest wait between grant attempts (one second).
const BACKOFF_MAX_NS: u64 = 1_000_000_000;
/// The longest wait between a leased node's probes (SPEC §8: the probe
/// interval, 100 ms).
pub const PROBE_INTERVAL_NS: u64 = 100_000_000;

/// `RATECELL.LEASE`'s reply: `[units, expires_at_ns, retry_after_ns,
/// limit, remaining]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantReply {
    /// Units granted (`g`), 0 when the algorithm admits none now.
    pub units: u64,
    /// When the units expire, UNIX ns on the server's clock (or the `AT`
    /// timeline).
    pub expires_at_ns: u64,
    /// For `units == 0`: when a grant of one can next succeed (ns from
    /// the grant's time; `u64::MAX` for never); else 0.
    pub retry_after_ns: u64,
    /// The decision's `limit` (SPEC §3).
    pub limit: u64,
    /// What remains in the key's state after the grant.
    pub remaining: u64,
}

/// The tests' grants (the unit tests' and the loom models'): `units`
/// until `expires_at_ns` of a limit of 100, nothing left in the key.
#[cfg(test)]
impl GrantReply {
    pub(crate) fn of(units: u64, expires_at_ns: u64) -> GrantReply {
        GrantReply {
            units,
            expires_at_ns,
            retry_after_ns: 0,
            limit: 100,
            remaining: 0,
        }
    }
}

/// A reply that is not `RATECELL.LEASE`'s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyError(pub String);

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a RATECELL.LEASE reply: {}", self.0)
    }
}

impl std::error::Error for ReplyError {}

impl GrantReply {
    /// Reads the reply's five integers (`-1` for a retry that can never
    /// succeed).
    pub fn from_ints(v: &[i64]) -> Result<GrantReply, ReplyError> {
        let [units, expires, retry, limit, remaining] = v else {
            return Err(ReplyError(format!("{} integers, not 5: {v:?}", v.len())));
        };
        let plain = |name: &str, x: i64| {
            u64::try_from(x).map_err(|_| ReplyError(format!("{name} is negative: {x}")))
        };
        let retry_after_ns = match *retry {
            -1 => u64::MAX,
            x => plain("retry_after_ns", x)?,
        };
        Ok(GrantReply {
            units: plain("units", *units)?,
            expires_at_ns: plain("expires_at_ns", *expires)?,
            retry_after_ns,
            limit: plain("limit", *limit)?,
            remaining: plain("remaining", *remaining)?,
        })
    }
}

/// When a grant is decided: on the server's clock, at a check's date on
/// it (`DATED`), or at a time of the node's own timeline (`AT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum When {
    Server,
    Dated(u64),
    At(u64),
}

/// The arguments of the `RATECELL.LEASE` command (the command's name
/// first) asking for `want` units of `key`'s limit, decided `when`, after
/// the `charges`.
pub(crate) fn lease_args(
    r: &Resolved,
    key: Vec<u8>,
    want: u64,
    when: When,
    charges: &[Charge],
) -> Vec<Vec<u8>> {
    let p = &r.params;
    let mut args = vec![
        b"RATECELL.LEASE".to_vec(),
        key,
        p.algorithm.name().as_bytes().to_vec(),
        p.limit.to_string().into_bytes(),
        format!("{}ns", p.period).into_bytes(),
    ];
    let mut pair = |name: &str, value: String| {
        args.push(name.as_bytes().to_vec());
        args.push(value.into_bytes());
    };
    if p.algorithm.has_burst() {
        pair("BURST", p.burst.to_string());
    }
    pair("WANT", want.to_string());
    if p.algorithm == Algorithm::Gcra && r.expire != 0 {
        pair("EXPIRE", format!("{}ns", r.expire));
    }
    match when {
        When::Server => {}
        When::Dated(t) => pair("DATED", t.to_string()),
        When::At(t) => pair("AT", t.to_string()),
    }
    for c in charges {
        args.push(b"CHARGE".to_vec());
        args.push(c.at_ns.to_string().into_bytes());
        args.push(c.units.to_string().into_bytes());
    }
    args
}

/// The `RATECELL.LEASE` arguments for `config`, `key` (its bytes, as a
/// Redis key), `want` units and an optional `AT`; the command's name is the
/// first. For a binding that carries the command itself; [`GrantRequest`]
/// (crate::lease::GrantRequest) builds its own.
pub fn lease_command(
    config: &super::LeaseConfig,
    key: &[u8],
    want: u64,
    at: Option<u64>,
) -> Result<Vec<Vec<u8>>, super::LeaseError> {
    if want == 0 {
        return Err(super::LeaseError::new("want", "0 is outside 1..".into()));
    }
    let when = at.map_or(When::Server, When::At);
    Ok(lease_args(
        &config.resolve()?,
        key.to_vec(),
        want,
        when,
        &[],
    ))
}

/// SPEC §8's grant size: `clamp(ceil(r·H), 1, W)`, where `checks_in_horizon`
/// is `r·H`, the checks seen on the key over the last `H` (fractional
/// from the sliding estimate, so given here already rounded up).
pub fn grant_size(checks_in_horizon: u64, max_grant: u64) -> u64 {
    checks_in_horizon.clamp(1, max_grant.max(1))
}

/// How long to wait after the `failures`-th failed grant in a row
/// (1-based): 10 ms, doubling, at most one second.
pub fn backoff_ns(failures: u32) -> u64 {
    let doublings = failures.saturating_sub(1).min(16);
    (BACKOFF_FIRST_NS << doublings).min(BACKOFF_MAX_NS)
}

/// How long a leased node waits after its `failures`-th failed grant in a
/// row (1-based) before it probes Redis again: 10 ms, doubling, at most
/// [`PROBE_INTERVAL_NS`].
pub fn probe_delay_ns(failures: u32) -> u64 {
    backoff_ns(failures).min(PROBE_INTERVAL_NS)
}

/// The checks seen on a key over the last `H`, as a sliding window counter
/// over windows of length `H` (the previous window's count weighted by how
/// much of it is still within `H`). Kept under the key's lock: it is fed
/// when a grant is asked for or applied, with the units spent since.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Demand {
    start: u64,
    prev: u64,
    cur: u64,
}

impl Demand {
    fn roll(&mut self, now: u64, h: u64) {
        if self.start == 0 {
            self.start = now;
        }
        // A time before the window's start (the caller's clock went back)
        // is counted in the current window.
        let elapsed = now.saturating_sub(self.start);
        if elapsed >= h {
            let windows = elapsed / h;
            self.prev = if windows == 1 { self.cur } else { 0 };
            self.cur = 0;
            self.start += windows * h;
        }
    }

    /// Counts `n` checks at `now`.
    pub(crate) fn add(&mut self, now: u64, n: u64, h: u64) {
        self.roll(now, h);
        self.cur = self.cur.saturating_add(n);
    }

    /// The checks over the `H` before `now`, rounded up.
    pub(crate) fn estimate(&mut self, now: u64, h: u64) -> u64 {
        self.roll(now, h);
        let into = now.saturating_sub(self.start).min(h);
        let prev = u128::from(self.prev) * u128::from(h - into);
        let prev = prev.div_ceil(u128::from(h.max(1)));
        self.cur
            .saturating_add(u64::try_from(prev).unwrap_or(u64::MAX))
    }
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;
    use crate::{Config, lease::LeaseConfig};

    #[test]
    fn backoff_doubles_from_10ms_to_a_second() {
        let ms = |f| backoff_ns(f) / 1_000_000;
        let got: Vec<u64> = (1..=9).map(ms).collect();
        assert_eq!(got, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(ms(u32::MAX), 1000);
        assert_eq!(ms(0), 10);
        let probe: Vec<u64> = (1..=6).map(|f| probe_delay_ns(f) / 1_000_000).collect();
        assert_eq!(probe, [10, 20, 40, 80, 100, 100]);
    }

    #[test]
    fn grants_are_sized_by_the_checks_of_the_last_horizon() {
        assert_eq!(grant_size(0, 100), 1);
        assert_eq!(grant_size(37, 100), 37);
        assert_eq!(grant_size(1000, 100), 100);
        let h = 100;
        let mut d = Demand::default();
        d.add(1_000, 40, h);
        assert_eq!(d.estimate(1_050, h), 40);
        // Half of the previous window still within H.
        d.add(1_150, 10, h);
        assert_eq!(d.estimate(1_150, h), 10 + 20);
        assert_eq!(d.estimate(1_200, h), 10);
        assert_eq!(d.estimate(1_400, h), 0);
        // Time going back counts in the current window.
        d.add(10, 5, h);
        assert_eq!(d.estimate(1_400, h), 5);
    }

    #[test]
    fn replies_are_read_and_bad_ones_named() {
        let r = GrantReply::from_ints(&[5, 1_000, 0, 10, 3]).unwrap();
        assert_eq!((r.units, r.expires_at_ns, r.remaining), (5, 1_000, 3));
        let r = GrantReply::from_ints(&[0, 9, -1, 10, 0]).unwrap();
        assert_eq!(r.retry_after_ns, u64::MAX);
        assert!(
            GrantReply::from_ints(&[1, 2, 3])
                .unwrap_err()
                .0
                .contains("3 integers")
        );
        let e = GrantReply::from_ints(&[-2, 0, 0, 1, 1]).unwrap_err();
        assert!(e.0.contains("units"), "{e}");
    }

    #[test]
    fn the_command_carries_every_argument_the_module_reads() {
        let s = 1_000_000_000;
        let c = LeaseConfig::new(Config::new(crate::Algorithm::Gcra, 100, s).burst(20))
            .expire_ns(s / 5);
        let args = lease_command(&c, b"k", 7, Some(42)).unwrap();
        let text: Vec<&str> = args
            .iter()
            .map(|a| std::str::from_utf8(a).unwrap())
            .collect();
        assert_eq!(
            text,
            [
                "RATECELL.LEASE",
                "k",
                "gcra",
                "100",
                "1000000000ns",
                "BURST",
                "20",
                "WANT",
                "7",
                "EXPIRE",
                "200000000ns",
                "AT",
                "42"
            ]
        );
        let c = LeaseConfig::new(Config::new(crate::Algorithm::FixedWindow, 100, s));
        let args = lease_command(&c, b"k", 3, None).unwrap();
        assert_eq!(args.len(), 7);
        assert_eq!(lease_command(&c, b"k", 0, None).unwrap_err().field, "want");
    }
}

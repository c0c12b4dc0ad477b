//! The response fields of draft-ietf-httpapi-ratelimit-headers-11 and the
//! quota-exceeded problem document, as pure functions of per-limit
//! decisions. Owns RFC 9651 serialization (strings, integers, lists); knows
//! nothing about requests, services or limiters.

use std::fmt::{self, Write};
use std::sync::Arc;

use ratecell::Decision;

/// The draft's problem type for a request refused by one or more quotas
/// (section 5.1).
pub const QUOTA_EXCEEDED_TYPE: &str =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The largest Integer RFC 9651 can serialize (15 decimal digits); larger
/// values are sent as this (the fields are hints, and a capped value is
/// still a valid one).
pub const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

const NS_PER_S: u64 = 1_000_000_000;

/// A policy name: the String item of both fields. RFC 9651 Strings hold
/// printable ASCII only, so anything else is refused here, once, at
/// construction instead of producing a malformed field per response.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PolicyName(Arc<str>);

/// A policy name that cannot be an RFC 9651 String.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidPolicyName {
    /// The name as given.
    pub name: String,
}

impl fmt::Display for InvalidPolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid policy name {:?}: it must be non-empty printable ASCII (0x20..=0x7E), an RFC 9651 String",
            self.name
        )
    }
}

impl std::error::Error for InvalidPolicyName {}

impl PolicyName {
    /// Checks `name` and keeps it.
    pub fn new(name: &str) -> Result<PolicyName, InvalidPolicyName> {
        if name.is_empty() || !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(InvalidPolicyName {
                name: name.to_owned(),
            });
        }
        Ok(PolicyName(name.into()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for PolicyName {
    /// The name as given (not quoted as the fields quote it).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Default for PolicyName {
    /// `default`, the name the draft's examples use for a lone policy.
    fn default() -> PolicyName {
        PolicyName("default".into())
    }
}

/// One limit's part of a request's outcome: which policy, what it allows,
/// and what it decided for this request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitDecision {
    /// The policy's name in both fields and in `violated-policies`.
    pub name: PolicyName,
    /// The quota `q`: units admitted per period.
    pub limit: u64,
    /// The period in nanoseconds (`w`, rounded up to whole seconds).
    pub period_ns: u64,
    /// This limit's decision for the request.
    pub decision: Decision,
}

/// Whole seconds, rounded up, capped at [`SF_INTEGER_MAX`].
pub fn ceil_seconds(ns: u64) -> u64 {
    ns.div_ceil(NS_PER_S).min(SF_INTEGER_MAX)
}

fn sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// The `q` and `w` of a limit of `limit` units per `period_ns`: `w` is the
/// period in whole seconds, rounded up (at least 1: the draft's window is a
/// non-zero integer), and when the period is not a whole number of seconds
/// `q` is scaled to that window, rounded down, so that `q/w` is never more
/// than the real rate (10 per 0.5 s is `q=20;w=1`, 10 per 1.5 s is
/// `q=13;w=2`). Without scaling, a 0.5 s period would advertise half its
/// real rate.
pub fn quota_window(limit: u64, period_ns: u64) -> (u64, u64) {
    let w = ceil_seconds(period_ns).max(1);
    if period_ns == 0 || period_ns % NS_PER_S == 0 {
        return (limit.min(SF_INTEGER_MAX), w);
    }
    // limit × w s / period, exactly; saturates only past any Integer we send.
    let q = (u128::from(limit) * u128::from(NS_PER_S))
        .checked_mul(u128::from(w))
        .map_or(u128::MAX, |n| n / u128::from(period_ns));
    (u64::try_from(q).unwrap_or(u64::MAX).min(SF_INTEGER_MAX), w)
}

/// `RateLimit-Policy`: one `"<name>";q=<limit>;w=<period>` item per limit,
/// as [`quota_window`] gives them.
pub fn policy_field(items: &[LimitDecision]) -> String {
    let mut out = String::with_capacity(32 * items.len());
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        sf_string(&mut out, item.name.as_str());
        let (q, w) = quota_window(item.limit, item.period_ns);
        let _ = write!(out, ";q={q};w={w}");
    }
    out
}

/// The `t` of one limit's decision, in whole seconds rounded up: the time
/// until more quota is available (draft-11 §4.3).
///
/// - Refused by this limit: its `retry_after` (at least 1), when this same
///   request could pass; the same value as `Retry-After` when this limit's
///   wait is the longest. A table with no room for a new key (overflow
///   `deny`) refuses with the table's wait, so `t` carries that wait, never
///   0. When no wait helps (the cost exceeds the limit), `reset_after`.
/// - Admitted: `reset_after`, when the quota is whole again; more is
///   available by then at the latest (exactly then for a fixed window;
///   continuous algorithms return units sooner, which a decision does not
///   carry). 0 when the quota is whole.
pub fn reset_seconds(d: &Decision) -> u64 {
    if !d.allowed && d.retry_after_ns != u64::MAX {
        ceil_seconds(d.retry_after_ns).max(1)
    } else {
        ceil_seconds(d.reset_after_ns)
    }
}

/// `RateLimit`: one `"<name>";r=<remaining>;t=<seconds>` item per limit,
/// `t` as [`reset_seconds`] gives it.
pub fn ratelimit_field(items: &[LimitDecision]) -> String {
    let mut out = String::with_capacity(32 * items.len());
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        sf_string(&mut out, item.name.as_str());
        let d = &item.decision;
        let _ = write!(
            out,
            ";r={};t={}",
            d.remaining.min(SF_INTEGER_MAX),
            reset_seconds(d)
        );
    }
    out
}

/// The legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset` values
/// (GitHub's, httprate's, slowapi's), which describe one limit: of a
/// refused request the refusing limit whose wait is the longest (the one
/// `Retry-After` gives), else the limit with the fewest units left (the
/// first of equals). Limit is its `q` (as `RateLimit-Policy` says it),
/// Remaining its `r`, and Reset the UNIX time in whole seconds when its
/// `t` ends, counted from `now_s` (the server's UNIX seconds). `None` for
/// no items.
pub fn legacy_values(items: &[LimitDecision], now_s: u64) -> Option<(u64, u64, u64)> {
    let refused = !admitted(items);
    let item = if refused {
        items
            .iter()
            .filter(|i| !i.decision.allowed)
            .max_by_key(|i| reset_seconds(&i.decision))?
    } else {
        // min_by_key keeps the first of equals.
        items.iter().min_by_key(|i| i.decision.remaining)?
    };
    let (q, _) = quota_window(item.limit, item.period_ns);
    Some((
        q,
        item.decision.remaining.min(SF_INTEGER_MAX),
        now_s.saturating_add(reset_seconds(&item.decision)),
    ))
}

/// Whether every limit admitted the request.
pub fn admitted(items: &[LimitDecision]) -> bool {
    items.iter().all(|i| i.decision.allowed)
}

/// `Retry-After` for a refused request: the longest `retry_after` of the
/// limits that refused it, in whole seconds rounded up (at least 1). `None`
/// when the request was admitted, or when some limit can never admit it
/// (its cost exceeds that limit): no wait helps, so no Retry-After is sent.
pub fn retry_after_seconds(items: &[LimitDecision]) -> Option<u64> {
    let mut longest = None::<u64>;
    for item in items.iter().filter(|i| !i.decision.allowed) {
        let ns = item.decision.retry_after_ns;
        if ns == u64::MAX {
            return None;
        }
        longest = Some(longest.unwrap_or(0).max(ns));
    }
    longest.map(|ns| ceil_seconds(ns).max(1))
}

/// The `application/problem+json` body of a refusal: the draft's
/// quota-exceeded type, a title, and `violated-policies` naming each limit
/// that refused the request.
pub fn problem_body(items: &[LimitDecision]) -> String {
    let mut out = String::with_capacity(160);
    out.push_str("{\"type\":\"");
    out.push_str(QUOTA_EXCEEDED_TYPE);
    out.push_str("\",\"title\":\"Quota exceeded\",\"status\":429,\"violated-policies\":[");
    for (i, item) in items.iter().filter(|i| !i.decision.allowed).enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(&mut out, item.name.as_str());
    }
    out.push_str("]}");
    out
}

fn json_string(out: &mut String, s: &str) {
    // Names are printable ASCII (PolicyName), so only '"' and '\' need escapes.
    sf_string(out, s);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, limit: u64, period_ns: u64, d: Decision) -> LimitDecision {
        LimitDecision {
            name: PolicyName::new(name).unwrap(),
            limit,
            period_ns,
            decision: d,
        }
    }

    fn decision(allowed: bool, remaining: u64, retry: u64, reset: u64) -> Decision {
        Decision {
            allowed,
            limit: 0,
            remaining,
            retry_after_ns: retry,
            reset_after_ns: reset,
            wait_ns: 0,
        }
    }

    #[test]
    fn one_default_limit() {
        let items = [item(
            "default",
            100,
            60 * NS_PER_S,
            decision(true, 99, 0, 600_000_001),
        )];
        assert_eq!(policy_field(&items), "\"default\";q=100;w=60");
        assert_eq!(ratelimit_field(&items), "\"default\";r=99;t=1");
        assert_eq!(retry_after_seconds(&items), None);
        assert!(admitted(&items));
    }

    #[test]
    fn two_named_limits_one_refusing() {
        let items = [
            item(
                "burst",
                10,
                1_500_000_000,
                decision(false, 0, 2_000_000_001, 14_000_000_000),
            ),
            item(
                "daily",
                1000,
                86_400 * NS_PER_S,
                decision(true, 950, 0, 3_600 * NS_PER_S),
            ),
        ];
        assert_eq!(
            policy_field(&items),
            "\"burst\";q=13;w=2, \"daily\";q=1000;w=86400"
        );
        assert_eq!(
            ratelimit_field(&items),
            "\"burst\";r=0;t=3, \"daily\";r=950;t=3600"
        );
        assert_eq!(retry_after_seconds(&items), Some(3));
        assert!(!admitted(&items));
        assert_eq!(
            problem_body(&items),
            "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
             \"title\":\"Quota exceeded\",\"status\":429,\"violated-policies\":[\"burst\"]}"
        );
    }

    #[test]
    fn two_limits_both_refusing_take_the_longest_wait() {
        let items = [
            item("a", 1, NS_PER_S, decision(false, 0, 500, 500)),
            item(
                "b",
                1,
                NS_PER_S,
                decision(false, 0, 4 * NS_PER_S, 4 * NS_PER_S),
            ),
        ];
        assert_eq!(retry_after_seconds(&items), Some(4));
        assert!(problem_body(&items).ends_with("\"violated-policies\":[\"a\",\"b\"]}"));
    }

    #[test]
    fn sub_second_values_round_up_and_never_has_no_retry_after() {
        let items = [item("x", 5, 1_000, decision(false, 0, u64::MAX, 1))];
        assert_eq!(policy_field(&items), "\"x\";q=5000000;w=1");
        assert_eq!(ratelimit_field(&items), "\"x\";r=0;t=1");
        assert_eq!(retry_after_seconds(&items), None);
    }

    #[test]
    fn sub_second_periods_scale_q_to_the_one_second_window() {
        let half = [item("x", 10, NS_PER_S / 2, decision(true, 9, 0, 1))];
        assert_eq!(policy_field(&half), "\"x\";q=20;w=1");
        assert_eq!(quota_window(10, 1_500_000_000), (13, 2));
        assert_eq!(quota_window(10, 60 * NS_PER_S), (10, 60));
        assert_eq!(quota_window(3, 333_333_333), (9, 1), "rounded down");
    }

    #[test]
    fn a_refusal_has_t_equal_to_its_retry_after() {
        // A sliding window refusing: whole again in 60 s, next pass in 2.1 s.
        let items = [item(
            "w",
            10,
            60 * NS_PER_S,
            decision(false, 0, 2_100_000_000, 60 * NS_PER_S),
        )];
        assert_eq!(ratelimit_field(&items), "\"w\";r=0;t=3");
        assert_eq!(retry_after_seconds(&items), Some(3));
    }

    #[test]
    fn a_full_table_refusal_carries_its_wait_not_t0() {
        // What the keyed table answers a new key it has no room for.
        let items = [item(
            "k",
            10,
            NS_PER_S,
            decision(false, 0, 4_000_000_000, 0),
        )];
        assert_eq!(ratelimit_field(&items), "\"k\";r=0;t=4");
        assert_eq!(retry_after_seconds(&items), Some(4));
    }

    #[test]
    fn strings_escape_and_names_are_checked() {
        let items = [item("a\"b\\c", 1, NS_PER_S, decision(true, 0, 0, 0))];
        assert_eq!(policy_field(&items), "\"a\\\"b\\\\c\";q=1;w=1");
        assert!(PolicyName::new("").is_err());
        assert!(PolicyName::new("caf\u{e9}").is_err());
        assert!(PolicyName::new("tab\there").is_err());
        let err = PolicyName::new("\n").unwrap_err().to_string();
        assert!(err.contains("policy name"), "{err}");
    }

    #[test]
    fn integers_are_capped_at_fifteen_digits() {
        let items = [item(
            "big",
            u64::MAX,
            u64::MAX,
            decision(true, u64::MAX, 0, u64::MAX),
        )];
        assert_eq!(
            policy_field(&items),
            "\"big\";q=999999999999999;w=18446744074"
        );
        assert_eq!(
            ratelimit_field(&items),
            "\"big\";r=999999999999999;t=18446744074"
        );
    }
}

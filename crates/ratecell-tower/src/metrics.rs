//! Outcome counters on the `metrics` crate (feature `metrics`): what
//! [`RateLimitLayer::metrics`](crate::RateLimitLayer::metrics) records.
//! Knows the decisions, nothing about requests.

use crate::fields::LimitDecision;

/// The counter's name.
pub(crate) const REQUESTS_TOTAL: &str = "ratecell_http_requests_total";

/// Counts one request: `admitted` under every policy, or `refused` /
/// `dry_run_refused` under each policy that refused it.
pub(crate) fn record(items: &[LimitDecision], admitted: bool, dry_run: bool) {
    let outcome = match (admitted, dry_run) {
        (true, _) => "admitted",
        (false, false) => "refused",
        (false, true) => "dry_run_refused",
    };
    for item in items.iter().filter(|i| admitted || !i.decision.allowed) {
        metrics::counter!(
            REQUESTS_TOTAL,
            "policy" => item.name.as_str().to_owned(),
            "outcome" => outcome,
        )
        .increment(1);
    }
}

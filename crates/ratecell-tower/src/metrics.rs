//! Outcome counters on the `metrics` crate (feature `metrics`): what
//! [`RateLimitLayer::metrics`](crate::RateLimitLayer::metrics) records.
//! Knows the decisions and whether a store failed, nothing about requests.

use crate::fields::LimitDecision;

/// The decisions' counter.
pub(crate) const REQUESTS_TOTAL: &str = "ratecell_http_requests_total";
/// The store failures' counter: a failure decides nothing per policy, so it
/// has no `policy` label, and a counter of its own keeps sums by policy of
/// [`REQUESTS_TOTAL`] the requests actually decided.
pub(crate) const STORE_ERRORS_TOTAL: &str = "ratecell_http_store_errors_total";

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

/// Counts one store failure: `unavailable` when it was answered 503,
/// `failed_open` when the request passed.
pub(crate) fn record_store_error(failed_open: bool) {
    let outcome = if failed_open {
        "failed_open"
    } else {
        "unavailable"
    };
    metrics::counter!(STORE_ERRORS_TOTAL, "outcome" => outcome).increment(1);
}

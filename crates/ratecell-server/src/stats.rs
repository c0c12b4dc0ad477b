//! envoyproxy/ratelimit's statistics, under the names its Prometheus
//! mapping gives them (`ratelimit_service_rate_limit_total_hits{domain,
//! key1, key2}` and the rest), counted as it counts them: every hit is
//! total, and each is within the limit, over it, near it (past
//! `NEAR_LIMIT_RATIO` of it) or let through in shadow mode.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use metrics::Counter;

/// One statistics key's counters.
pub struct KeyStats {
    pub total_hits: Counter,
    pub over_limit: Counter,
    pub near_limit: Counter,
    pub within_limit: Counter,
    pub shadow_mode: Counter,
}

/// The counters of every key seen, made on first use.
#[derive(Default)]
pub struct Stats {
    keys: RwLock<HashMap<String, Arc<KeyStats>>>,
}

/// Dots inside an IPv4 address are not level separators (the incumbent
/// replaces them, and `:` and `|`, with `_`).
fn sanitize(key: &str) -> String {
    let mut out: String = key.replace([':', '|'], "_");
    let bytes = out.as_bytes();
    let mut dots = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        // An a.b.c.d run of 1–3 digits each.
        let start = i;
        let mut groups = 0;
        let mut j = i;
        let mut local = Vec::new();
        loop {
            let digits = bytes[j..].iter().take_while(|b| b.is_ascii_digit()).count();
            if !(1..=3).contains(&digits) {
                break;
            }
            j += digits;
            groups += 1;
            if groups == 4 || j >= bytes.len() || bytes[j] != b'.' {
                break;
            }
            local.push(j);
            j += 1;
        }
        if groups == 4 {
            dots.extend(local);
            i = j;
        } else {
            i = start + 1;
        }
    }
    // SAFETY-free byte surgery: '.' and '_' are both ASCII.
    let mut b = std::mem::take(&mut out).into_bytes();
    for d in dots {
        b[d] = b'_';
    }
    String::from_utf8(b).expect("ASCII replaced by ASCII")
}

impl Stats {
    /// The counters of `key` (`domain.key_value…`).
    pub fn key(&self, key: &str) -> Arc<KeyStats> {
        if let Some(s) = self.keys.read().unwrap_or_else(|e| e.into_inner()).get(key) {
            return s.clone();
        }
        let clean = sanitize(key);
        let mut parts = clean.splitn(4, '.');
        let domain = parts.next().unwrap_or_default().to_owned();
        let key1 = parts.next().unwrap_or_default().to_owned();
        let key2 = parts.next().map(str::to_owned);
        let counter = |name: &'static str| match &key2 {
            Some(k2) => {
                metrics::counter!(name, "domain" => domain.clone(), "key1" => key1.clone(), "key2" => k2.clone())
            }
            None => metrics::counter!(name, "domain" => domain.clone(), "key1" => key1.clone()),
        };
        let made = Arc::new(KeyStats {
            total_hits: counter("ratelimit_service_rate_limit_total_hits"),
            over_limit: counter("ratelimit_service_rate_limit_over_limit"),
            near_limit: counter("ratelimit_service_rate_limit_near_limit"),
            within_limit: counter("ratelimit_service_rate_limit_within_limit"),
            shadow_mode: counter("ratelimit_service_rate_limit_shadow_mode"),
        });
        self.keys
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.to_owned())
            .or_insert(made)
            .clone()
    }
}

/// What one descriptor's decision adds to its counters, as the
/// incumbent's arithmetic gives it from the count before and after:
/// `(over, near, within, shadow)`.
pub fn tally(
    limit: u64,
    used_before: u64,
    hits: u64,
    admitted: bool,
    shadow: bool,
    near_ratio: f64,
) -> [u64; 4] {
    let after = used_before.saturating_add(hits);
    let near_threshold = (limit as f64 * near_ratio).floor() as u64;
    let (mut over, mut near, mut within, mut shadowed) = (0, 0, 0, 0);
    if admitted {
        within = hits;
        if after > near_threshold {
            near = if used_before >= near_threshold {
                hits
            } else {
                after - near_threshold
            };
        }
    } else {
        let over_part = if used_before >= limit {
            hits
        } else {
            after.saturating_sub(limit)
        };
        over = over_part;
        if used_before < limit {
            near = limit - near_threshold.max(used_before);
        }
        if shadow {
            shadowed = over_part;
        }
    }
    [over, near, within, shadowed]
}

/// Service-wide counters.
pub fn config_load(ok: bool) {
    if ok {
        metrics::counter!("ratelimit_service_config_load_success").increment(1);
    } else {
        metrics::counter!("ratelimit_service_config_load_error").increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_dots_are_not_levels() {
        assert_eq!(
            sanitize("edge.remote_address_10.0.0.1.path"),
            "edge.remote_address_10_0_0_1.path"
        );
        assert_eq!(
            sanitize("d.k_1.2.3"),
            "d.k_1.2.3",
            "three groups are not an address"
        );
        assert_eq!(sanitize("d.a:b|c"), "d.a_b_c");
    }

    #[test]
    fn counts_split_as_the_incumbents() {
        // limit 10, near at 8: from 7, 2 hits admitted → 1 near.
        assert_eq!(tally(10, 7, 2, true, false, 0.8), [0, 1, 2, 0]);
        // from 9, 3 hits denied → 2 over (after 12), near 10 − 9 = 1.
        assert_eq!(tally(10, 9, 3, false, false, 0.8), [2, 1, 0, 0]);
        // already at the limit: every hit over.
        assert_eq!(tally(10, 10, 1, false, true, 0.8), [1, 0, 0, 1]);
    }
}

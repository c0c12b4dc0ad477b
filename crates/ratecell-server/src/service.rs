//! `ShouldRateLimit`: a request's descriptors matched to rules, decided by
//! the backend, counted and answered as envoyproxy/ratelimit answers
//! (per-descriptor status, overall code, `replaces`, `unlimited`, shadow
//! modes, response headers). The gRPC, `/json` and forward-auth endpoints
//! all call [`Service::should_rate_limit`].

use std::sync::{Arc, RwLock};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit, rate_limit::Unit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use ratecell::Decision;
use ratecell_tower::fields::{self, LimitDecision, PolicyName};

use crate::backend::{Backend, BackendError, Check};
use crate::config::{Config, Limit, Rule, unit_limit};
use crate::settings::ResponseHeaders;
use crate::stats::{Stats, tally};

/// Why a request got no answer.
#[derive(Debug)]
pub enum ServiceError {
    /// The request is malformed (empty domain, no descriptors).
    Invalid(String),
    /// The backend could not decide.
    Backend(BackendError),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Invalid(m) => f.write_str(m),
            ServiceError::Backend(e) => write!(f, "{e}"),
        }
    }
}

/// The options the service answers under.
pub struct Options {
    pub near_limit_ratio: f64,
    pub shadow_mode: bool,
    pub headers: ResponseHeaders,
    pub cache_key_prefix: String,
}

/// The service: the configuration in force, the backend and the counters.
pub struct Service {
    config: RwLock<Arc<Config>>,
    pub backend: Backend,
    stats: Stats,
    options: Options,
}

/// A descriptor's rule, and what it is checked and counted as.
struct Selected {
    rule: Arc<Rule>,
    stats_key: String,
    key: Vec<u8>,
    hits: u64,
}

impl Service {
    pub fn new(config: Config, backend: Backend, options: Options) -> Service {
        Service {
            config: RwLock::new(Arc::new(config)),
            backend,
            stats: Stats::default(),
            options,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `config` in force (the backend first, so no request sees a
    /// rule without its table), unless the backend refuses it.
    pub fn set_config(&self, config: Config) -> Result<(), String> {
        self.backend.reconfigure(&config)?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        Ok(())
    }

    /// The limit's key: envoyproxy/ratelimit's cache key without the
    /// window's time (the state knows its window):
    /// `prefix domain_ key_value_ …`, a shared wildcard's pattern in
    /// place of the value.
    fn key(&self, domain: &str, d: &RateLimitDescriptor, shared: &[Option<String>]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.options.cache_key_prefix.len() + domain.len() + 32);
        k.extend_from_slice(self.options.cache_key_prefix.as_bytes());
        k.extend_from_slice(domain.as_bytes());
        k.push(b'_');
        for (i, e) in d.entries.iter().enumerate() {
            k.extend_from_slice(e.key.as_bytes());
            k.push(b'_');
            let v = shared.get(i).and_then(Option::as_deref).unwrap_or(&e.value);
            k.extend_from_slice(v.as_bytes());
            k.push(b'_');
        }
        k
    }

    fn select(
        &self,
        config: &Config,
        req: &RateLimitRequest,
    ) -> (Vec<Option<Selected>>, Vec<bool>) {
        let n = req.descriptors.len();
        let mut selected = Vec::with_capacity(n);
        let mut unlimited = vec![false; n];
        for (i, d) in req.descriptors.iter().enumerate() {
            let hits = match &d.hits_addend {
                Some(h) => h.value,
                None => u64::from(req.hits_addend.max(1)),
            };
            let found = if let Some(o) = &d.limit {
                // A per-request limit (Envoy's `limit` override).
                let path = override_path(&req.domain, d);
                let unit = Unit::try_from(o.unit).unwrap_or(Unit::Unknown);
                unit_limit(o.requests_per_unit, unit).map(|limit| {
                    let rule = Arc::new(Rule {
                        path: format!("{path}#{}/{}", o.requests_per_unit, unit.as_str_name()),
                        limit: Some(limit),
                        name: String::new(),
                        replaces: Vec::new(),
                        shadow_mode: false,
                        detailed_metric: false,
                    });
                    (rule, path, Vec::new())
                })
            } else {
                config
                    .lookup(
                        &req.domain,
                        d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())),
                    )
                    .map(|m| (m.rule, m.stats_key, m.shared_values))
            };
            match found {
                Some((rule, stats_key, shared)) => {
                    if rule.limit.is_none() {
                        unlimited[i] = true;
                    }
                    let key = self.key(&req.domain, d, &shared);
                    selected.push(Some(Selected {
                        rule,
                        stats_key,
                        key,
                        hits,
                    }));
                }
                None => selected.push(None),
            }
        }
        // `replaces`: a matched rule's name listed by another matched rule
        // is not applied.
        let replaced: Vec<String> = selected
            .iter()
            .flatten()
            .flat_map(|s| s.rule.replaces.iter().cloned())
            .collect();
        for s in &mut selected {
            if s.as_ref()
                .is_some_and(|s| !s.rule.name.is_empty() && replaced.contains(&s.rule.name))
            {
                *s = None;
            }
        }
        (selected, unlimited)
    }

    /// Decides `req`, with the response headers the settings ask for.
    pub async fn should_rate_limit(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, ServiceError> {
        self.answer(req, &self.options.headers).await
    }

    /// Decides `req`, with `headers`' response headers (forward auth
    /// always answers with the draft's fields).
    pub async fn answer(
        &self,
        req: &RateLimitRequest,
        headers: &ResponseHeaders,
    ) -> Result<RateLimitResponse, ServiceError> {
        if req.domain.is_empty() {
            return Err(ServiceError::Invalid(
                "rate limit domain must not be empty".into(),
            ));
        }
        if req.descriptors.is_empty() {
            return Err(ServiceError::Invalid(
                "rate limit descriptor list must not be empty".into(),
            ));
        }
        let config = self.config();
        let (selected, unlimited) = self.select(&config, req);

        // Checks for the limited descriptors (`requests_per_unit: 0`
        // denies without asking). Descriptors on one counter (one rule,
        // one key) are one check of the sum of their costs (SPEC §9), so
        // every backend decides them alike. A check of cost 0 is a peek:
        // it cannot deny, so it binds nothing.
        let mut checks: Vec<Check<'_>> = Vec::new();
        let mut check_of = vec![None; selected.len()];
        for (i, s) in selected.iter().enumerate() {
            let Some(s) = s else { continue };
            let Some(Limit {
                config: Some(limit),
                ..
            }) = &s.rule.limit
            else {
                continue;
            };
            let same = checks
                .iter()
                .position(|c| c.table == s.rule.path && c.key == s.key.as_slice());
            check_of[i] = Some(match same {
                Some(c) => {
                    checks[c].cost = checks[c].cost.saturating_add(s.hits);
                    checks[c].binding = !s.rule.shadow_mode && checks[c].cost > 0;
                    c
                }
                None => {
                    checks.push(Check {
                        table: &s.rule.path,
                        limit,
                        key: &s.key,
                        cost: s.hits,
                        binding: !s.rule.shadow_mode && s.hits > 0,
                    });
                    checks.len() - 1
                }
            });
        }
        let decisions = if checks.is_empty() {
            Vec::new()
        } else {
            self.backend.decide(&checks).await.map_err(|e| {
                metrics::counter!("ratelimit_service_call_should_rate_limit_redis_error")
                    .increment(1);
                ServiceError::Backend(e)
            })?
        };

        let mut statuses = Vec::with_capacity(selected.len());
        let mut over = false;
        let mut shown: Option<(usize, u64)> = None;
        let mut drafts = Vec::new();
        for (i, s) in selected.iter().enumerate() {
            let status = match (s, unlimited[i]) {
                (_, true) => DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..Default::default()
                },
                (None, false) => DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                },
                (Some(s), false) => {
                    let limit = s.rule.limit.as_ref().expect("a limited rule");
                    let d = match check_of[i] {
                        Some(c) => decisions[c],
                        None => zero_limit(limit),
                    };
                    self.count(s, limit, &d);
                    // A peek (cost 0) is never over the limit, as the
                    // incumbent's count plus 0 never passes it.
                    let asked = check_of[i].map_or(s.hits, |c| checks[c].cost);
                    let denied = !d.allowed && asked > 0;
                    let shadowed = denied && s.rule.shadow_mode;
                    if denied && !shadowed {
                        over = true;
                    }
                    let remaining = if denied {
                        0
                    } else {
                        d.remaining.min(u64::from(u32::MAX))
                    };
                    if shown.is_none_or(|(_, r)| (denied && !shadowed) || remaining < r) {
                        shown = Some((i, remaining));
                    }
                    if *headers == ResponseHeaders::Draft {
                        drafts.push(LimitDecision {
                            name: policy_name(&s.rule),
                            limit: u64::from(limit.requests_per_unit),
                            period_ns: limit.period_ns,
                            decision: Decision {
                                allowed: !denied || shadowed,
                                ..d
                            },
                        });
                    }
                    DescriptorStatus {
                        code: if denied && !shadowed {
                            Code::OverLimit
                        } else {
                            Code::Ok
                        } as i32,
                        current_limit: Some(CurrentLimit {
                            name: s.rule.name.clone(),
                            requests_per_unit: limit.requests_per_unit,
                            unit: limit.unit as i32,
                        }),
                        limit_remaining: remaining as u32,
                        duration_until_reset: Some(until_reset(limit, &d)),
                        ..Default::default()
                    }
                }
            };
            statuses.push(status);
        }

        let mut response = RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            ..Default::default()
        };
        match headers {
            ResponseHeaders::None => {}
            ResponseHeaders::Legacy {
                limit,
                remaining,
                reset,
            } => {
                if let Some((i, _)) = shown {
                    let st = &response.statuses[i];
                    let cl = st.current_limit.as_ref().expect("a limited status");
                    let reset_s = st.duration_until_reset.as_ref().map_or(0, |d| d.seconds);
                    response.response_headers_to_add = vec![
                        header(limit, cl.requests_per_unit.to_string()),
                        header(remaining, st.limit_remaining.to_string()),
                        header(reset, reset_s.to_string()),
                    ];
                }
            }
            ResponseHeaders::Draft => {
                if !drafts.is_empty() {
                    response.response_headers_to_add = vec![
                        header("RateLimit-Policy", fields::policy_field(&drafts)),
                        header("RateLimit", fields::ratelimit_field(&drafts)),
                    ];
                    if over && let Some(s) = fields::retry_after_seconds(&drafts) {
                        response
                            .response_headers_to_add
                            .push(header("Retry-After", s.to_string()));
                    }
                }
            }
        }
        if over && self.options.shadow_mode {
            response.overall_code = Code::Ok as i32;
            metrics::counter!("ratelimit_service_global_shadow_mode").increment(1);
        }
        Ok(response)
    }

    fn count(&self, s: &Selected, limit: &Limit, d: &Decision) {
        let stats = self.stats.key(&s.stats_key);
        stats.total_hits.increment(s.hits);
        let cap = u64::from(limit.requests_per_unit);
        // Used before this request: what the decision leaves, less what it
        // took (nothing when denied).
        let left = d.remaining.min(cap);
        let used_before = (cap - left).saturating_sub(if d.allowed { s.hits } else { 0 });
        let [over, near, within, shadow] = tally(
            cap,
            used_before,
            s.hits,
            d.allowed,
            s.rule.shadow_mode,
            self.options.near_limit_ratio,
        );
        stats.over_limit.increment(over);
        stats.near_limit.increment(near);
        stats.within_limit.increment(within);
        stats.shadow_mode.increment(shadow);
    }
}

/// The answer of a `requests_per_unit: 0` limit: every request over.
fn zero_limit(limit: &Limit) -> Decision {
    Decision {
        allowed: false,
        limit: 0,
        remaining: 0,
        retry_after_ns: u64::MAX,
        reset_after_ns: limit.period_ns,
        wait_ns: 0,
    }
}

/// `duration_until_reset`: for a fixed window the rest of the window in
/// whole seconds, as the incumbent reports it (`unit − now mod unit`, now
/// in whole UNIX seconds: windows start at multiples of the period, SPEC
/// §1); otherwise the time until the key is fresh, to the nanosecond.
fn until_reset(limit: &Limit, d: &Decision) -> PbDuration {
    let fixed = limit
        .config
        .is_none_or(|c| c.algorithm == ratecell::Algorithm::FixedWindow);
    if fixed && limit.period_ns.is_multiple_of(1_000_000_000) {
        let period_s = limit.period_ns / 1_000_000_000;
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        return PbDuration {
            seconds: i64::try_from(period_s - now_s % period_s).unwrap_or(i64::MAX),
            nanos: 0,
        };
    }
    PbDuration {
        seconds: i64::try_from(d.reset_after_ns / 1_000_000_000).unwrap_or(i64::MAX),
        nanos: (d.reset_after_ns % 1_000_000_000) as i32,
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..Default::default()
    }
}

/// The draft's policy name: the rule's `name`, else its path, with any
/// byte an RFC 9651 String cannot hold replaced.
fn policy_name(rule: &Rule) -> PolicyName {
    let raw = if rule.name.is_empty() {
        &rule.path
    } else {
        &rule.name
    };
    let clean: String = raw
        .chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '_' })
        .collect();
    PolicyName::new(&clean).unwrap_or_default()
}

/// The incumbent's key of a per-request limit: `domain.k_v.k2`.
fn override_path(domain: &str, d: &RateLimitDescriptor) -> String {
    let mut k = String::from(domain);
    for e in &d.entries {
        k.push('.');
        k.push_str(&e.key);
        if !e.value.is_empty() {
            k.push('_');
            k.push_str(&e.value);
        }
    }
    k
}

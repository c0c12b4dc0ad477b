//! What a [`RateLimitLayer`](crate::RateLimitLayer) was built with, and
//! what it makes of a request: its key ([`Key`], [`KeyPart`], the client
//! address), cost, tier and exemption; the limits' verdict (asked once: a
//! [`RateLimits`] on the request's own call, an [`AsyncRateLimits`] as a
//! future); a refusal, or the fields an admitted request's response gets;
//! and a failing store's policy ([`StoreFailurePolicy`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{Response, StatusCode};

use crate::client_ip::ClientIp;
use crate::fields::{self, LimitDecision};
use crate::limits::{AsyncRateLimits, LimitsFuture, RateLimits, StoreError};
use crate::response::{Fields, Outcome, field_values, legacy_values, problem, queue_wait};

pub(crate) type PartsFn<T> = Arc<dyn Fn(&Parts) -> T + Send + Sync>;
pub(crate) type RefusalFn = Arc<dyn Fn(&Parts, &[LimitDecision]) -> Response<Bytes> + Send + Sync>;
pub(crate) type ViolationFn = Arc<dyn Fn(&Parts, &[LimitDecision]) + Send + Sync>;
pub(crate) type ObserveFn = Arc<dyn Fn(&[LimitDecision], bool, bool) + Send + Sync>;
pub(crate) type StoreErrorFn = Arc<dyn Fn(&Parts, &StoreError) + Send + Sync>;

/// Where a request's key comes from.
#[derive(Clone)]
pub enum Key {
    /// The client's IP address (the port is ignored: a client opens many
    /// connections). Read from axum's `ConnectInfo<SocketAddr>` (serve with
    /// `into_make_service_with_connect_info`) or, for hyper and other
    /// servers, a `SocketAddr` the server put in the request's extensions.
    /// Behind proxies, see [`RateLimitLayer::trusted_proxies`]; IPv6
    /// clients are grouped by /64 ([`RateLimitLayer::ip_prefixes`]).
    ClientAddr,
    /// A header's value, for example an API key. An empty value counts as
    /// no key.
    Header(HeaderName),
    /// A function of the request; `None` or an empty key counts as no key.
    Fn(PartsFn<Option<Vec<u8>>>),
    /// Several parts in one key (the client's address and the route, say):
    /// each part in order, length-prefixed so no two lists of parts give
    /// the same key. A header part missing or empty makes the request
    /// keyless ([`MissingKey`] decides); a missing address is a 500, as
    /// for [`Key::ClientAddr`].
    Parts(Vec<KeyPart>),
}

/// One part of a [`Key::Parts`] key.
#[derive(Clone)]
#[non_exhaustive]
pub enum KeyPart {
    /// The client's address, as [`Key::ClientAddr`] finds and groups it
    /// (trusted proxies, prefixes).
    ClientAddr,
    /// The request's path (without its query).
    Path,
    /// The request's method.
    Method,
    /// A header's value.
    Header(HeaderName),
}

/// What happens to a request whose header or key function gave no key.
/// (A request with no client address under [`Key::ClientAddr`] is a
/// misconfiguration instead: it gets 500, whatever this policy says.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissingKey {
    /// The request is refused with 400 and a problem document. The
    /// default: a client that leaves its key out learns it at once, rather
    /// than sharing one quota with every other such client.
    #[default]
    Reject,
    /// All keyless requests share one key, so together they get one quota:
    /// leaving the key out never buys more.
    Shared,
    /// The request is not limited and gets no RateLimit fields.
    Skip,
}

/// What a store's failure answers: when an [`AsyncRateLimits`] could not
/// decide (the store is unreachable, answered an error, or did not answer
/// within its timeout). (Named apart from the Redis client's own
/// `redis_client::FailurePolicy`, what a leased or cached-deny limiter
/// decides without Redis, so one `use` line can name both.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreFailurePolicy {
    /// 503 Service Unavailable with a problem document (fail closed). The
    /// default: a limit that cannot be checked is not silently lifted, and
    /// a client sees that the failure is the server's.
    #[default]
    ServiceUnavailable,
    /// The request passes, without RateLimit fields (fail open): for
    /// limits that protect less than the service's availability does.
    FailOpen,
}

/// Where a layer's decisions come from.
#[derive(Clone)]
pub(crate) enum Source {
    /// Decided on the request's call (in-process limiters).
    Sync(Arc<dyn RateLimits>),
    /// Awaited in the response future (a store), which can fail.
    Async(Arc<dyn AsyncRateLimits>),
}

#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) limits: Source,
    // The limits' RateLimit-Policy when it never changes, formatted once.
    pub(crate) policy: Option<HeaderValue>,
    pub(crate) key: Key,
    pub(crate) client_ip: ClientIp,
    pub(crate) missing: MissingKey,
    pub(crate) cost: Option<PartsFn<u64>>,
    pub(crate) tier: Option<PartsFn<usize>>,
    // `.enabled(false)`: every request passes, unlimited and unfielded.
    pub(crate) disabled: bool,
    // `.legacy_headers(true)`: X-RateLimit-* beside the draft's fields.
    pub(crate) legacy: bool,
    pub(crate) dry_run: bool,
    pub(crate) on_refusal: Option<RefusalFn>,
    pub(crate) on_dry_run_refusal: Option<ViolationFn>,
    pub(crate) observe: Option<ObserveFn>,
    pub(crate) failure: StoreFailurePolicy,
    pub(crate) on_store_error: Option<StoreErrorFn>,
    // `.metrics()`: store failures are counted too.
    #[cfg(feature = "metrics")]
    pub(crate) count_store_errors: bool,
    pub(crate) exempt_paths: Vec<String>,
    pub(crate) exempt: Option<PartsFn<bool>>,
    // None: every method is limited.
    pub(crate) methods: Option<Vec<http::Method>>,
}

pub(crate) enum Verdict {
    Pass,
    Limited(Vec<LimitDecision>),
    // A store's decision, to be awaited.
    Ask(LimitsFuture),
    BadRequest,
    // Keyed by client address, but the server gave none: a misconfiguration.
    NoClientAddr,
}

fn client_ip(parts: &Parts) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(info.0.ip());
    }
    parts.extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

impl Settings {
    /// The key of a header or function (the client address is `decide`'s).
    fn given_key(&self, parts: &Parts) -> Option<Vec<u8>> {
        let key = match &self.key {
            Key::ClientAddr | Key::Parts(_) => None,
            Key::Header(name) => parts.headers.get(name).map(|v| v.as_bytes().to_vec()),
            Key::Fn(f) => f(parts),
        };
        key.filter(|k| !k.is_empty())
    }

    /// The key of [`Key::Parts`]: `Err(true)` when the client has no
    /// address, `Err(false)` when a header part is missing.
    fn parts_key(&self, key_parts: &[KeyPart], parts: &Parts) -> Result<Vec<u8>, bool> {
        let mut key = Vec::with_capacity(64);
        for part in key_parts {
            let bytes: Vec<u8> = match part {
                KeyPart::ClientAddr => match client_ip(parts) {
                    Some(peer) => self
                        .client_ip
                        .key(self.client_ip.client(peer, &parts.headers)),
                    None => return Err(true),
                },
                KeyPart::Path => parts.uri.path().as_bytes().to_vec(),
                KeyPart::Method => parts.method.as_str().as_bytes().to_vec(),
                KeyPart::Header(name) => match parts.headers.get(name) {
                    Some(v) if !v.is_empty() => v.as_bytes().to_vec(),
                    _ => return Err(false),
                },
            };
            // A length prefix: ("ab", "c") and ("a", "bc") differ.
            key.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            key.extend_from_slice(&bytes);
        }
        Ok(key)
    }

    pub(crate) fn decide(&self, parts: &Parts) -> Verdict {
        if self.disabled
            || self
                .methods
                .as_ref()
                .is_some_and(|m| !m.contains(&parts.method))
            || self.exempt_paths.iter().any(|p| p == parts.uri.path())
            || self.exempt.as_ref().is_some_and(|f| f(parts))
        {
            return Verdict::Pass;
        }
        let key = if let Key::ClientAddr = self.key {
            match client_ip(parts) {
                Some(peer) => self
                    .client_ip
                    .key(self.client_ip.client(peer, &parts.headers)),
                None => return Verdict::NoClientAddr,
            }
        } else if let Key::Parts(key_parts) = &self.key {
            match (self.parts_key(key_parts, parts), self.missing) {
                (Ok(key), _) => key,
                (Err(true), _) => return Verdict::NoClientAddr,
                (Err(false), MissingKey::Shared) => Vec::new(),
                (Err(false), MissingKey::Skip) => return Verdict::Pass,
                (Err(false), MissingKey::Reject) => return Verdict::BadRequest,
            }
        } else {
            match (self.given_key(parts), self.missing) {
                (Some(key), _) => key,
                // The empty key: no real key is empty (empty ones count as missing).
                (None, MissingKey::Shared) => Vec::new(),
                (None, MissingKey::Skip) => return Verdict::Pass,
                (None, MissingKey::Reject) => return Verdict::BadRequest,
            }
        };
        let cost = self.cost.as_ref().map_or(1, |f| f(parts));
        match &self.limits {
            Source::Sync(limits) => Verdict::Limited(match &self.tier {
                None => limits.check(&key, cost),
                Some(tier) => limits.check_tier(&key, cost, tier(parts)),
            }),
            Source::Async(limits) => Verdict::Ask(limits.check(key, cost)),
        }
    }

    /// What a request the limits decided gets; runs the decision hooks.
    pub(crate) fn outcome(&self, parts: &Parts, items: &[LimitDecision]) -> Outcome {
        let admitted = fields::admitted(items);
        if let Some(observe) = &self.observe {
            observe(items, admitted, self.dry_run);
        }
        if !admitted {
            if !self.dry_run {
                return Outcome::Answer(refusal(self, parts, items));
            }
            if let Some(seen) = &self.on_dry_run_refusal {
                seen(parts, items);
            }
        }
        Outcome::Forward {
            fields: Fields {
                draft: field_values(self.policy.as_ref(), items),
                legacy: self.legacy.then(|| Box::new(legacy_values(items))),
            },
            wait: if self.dry_run { 0 } else { queue_wait(items) },
        }
    }

    /// Reports a store's failure (hook, counter).
    pub(crate) fn store_failed(&self, parts: &Parts, error: &StoreError) {
        if let Some(hook) = &self.on_store_error {
            hook(parts, error);
        }
        #[cfg(feature = "metrics")]
        if self.count_store_errors {
            crate::metrics::record_store_error(self.failure == StoreFailurePolicy::FailOpen);
        }
    }
}

fn refusal(settings: &Settings, parts: &Parts, items: &[LimitDecision]) -> Response<Bytes> {
    let policy = settings.policy.as_ref();
    let Some(hook) = &settings.on_refusal else {
        let mut res = problem(StatusCode::TOO_MANY_REQUESTS, fields::problem_body(items));
        let headers = res.headers_mut();
        headers.extend(field_values(policy, items));
        if settings.legacy {
            headers.extend(legacy_values(items));
        }
        if let Some(secs) = fields::retry_after_seconds(items) {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        return res;
    };
    let mut res = hook(parts, items);
    let headers = res.headers_mut();
    for (name, value) in field_values(policy, items) {
        headers.entry(name).or_insert(value);
    }
    if settings.legacy {
        for (name, value) in legacy_values(items) {
            headers.entry(name).or_insert(value);
        }
    }
    if let Some(secs) = fields::retry_after_seconds(items) {
        headers
            .entry(RETRY_AFTER)
            .or_insert_with(|| HeaderValue::from(secs));
    }
    res
}

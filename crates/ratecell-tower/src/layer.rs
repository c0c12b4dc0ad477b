//! The tower [`Layer`] and [`Service`]: takes a request's key, cost and
//! exemption, asks the limits once (a [`RateLimits`] on the request's own
//! call, an [`AsyncRateLimits`] in its response future), and either
//! forwards the request (adding the RateLimit fields to the response) or
//! answers 429 itself, or 503 when a store fails.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use crate::client_ip::{Cidr, ClientIp, ForwardedHeader, TrustedProxies};
use crate::fields::{self, LimitDecision};
use crate::limits::{AsyncRateLimits, LimitsFuture, RateLimits, StoreError};

/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-11 §3).
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11 §4).
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

type PartsFn<T> = Arc<dyn Fn(&Parts) -> T + Send + Sync>;
type RefusalFn = Arc<dyn Fn(&Parts, &[LimitDecision]) -> Response<Bytes> + Send + Sync>;
type ViolationFn = Arc<dyn Fn(&Parts, &[LimitDecision]) + Send + Sync>;
type ObserveFn = Arc<dyn Fn(&[LimitDecision], bool, bool) + Send + Sync>;
type StoreErrorFn = Arc<dyn Fn(&Parts, &StoreError) + Send + Sync>;

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
enum Source {
    /// Decided on the request's call (in-process limiters).
    Sync(Arc<dyn RateLimits>),
    /// Awaited in the response future (a store), which can fail.
    Async(Arc<dyn AsyncRateLimits>),
}

#[derive(Clone)]
struct Settings {
    limits: Source,
    // The limits' RateLimit-Policy when it never changes, formatted once.
    policy: Option<HeaderValue>,
    key: Key,
    client_ip: ClientIp,
    missing: MissingKey,
    cost: Option<PartsFn<u64>>,
    tier: Option<PartsFn<usize>>,
    // `.enabled(false)`: every request passes, unlimited and unfielded.
    disabled: bool,
    // `.legacy_headers(true)`: X-RateLimit-* beside the draft's fields.
    legacy: bool,
    dry_run: bool,
    on_refusal: Option<RefusalFn>,
    on_dry_run_refusal: Option<ViolationFn>,
    observe: Option<ObserveFn>,
    failure: StoreFailurePolicy,
    on_store_error: Option<StoreErrorFn>,
    // `.metrics()`: store failures are counted too.
    #[cfg(feature = "metrics")]
    count_store_errors: bool,
    exempt_paths: Vec<String>,
    exempt: Option<PartsFn<bool>>,
    // None: every method is limited.
    methods: Option<Vec<http::Method>>,
}

/// Rate-limits every request through a [`RateLimits`] and sends the IETF
/// RateLimit fields.
///
/// ```
/// use ratecell::{Algorithm, Config, KeyedLimiter, Overflow};
/// use ratecell_tower::{Named, RateLimitLayer};
///
/// // Evict: a flood of made-up keys cannot lock new clients out (see the
/// // crate's documentation).
/// let config = Config::new(Algorithm::SlidingWindow, 100, 60_000_000_000)
///     .capacity(100_000)
///     .overflow(Overflow::Evict);
/// let layer = RateLimitLayer::new(Named::keyed(KeyedLimiter::new(config).unwrap()));
/// let app: axum::Router = axum::Router::new().layer(layer);
/// # drop(app);
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    settings: Arc<Settings>,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("missing", &self.settings.missing)
            .field("dry_run", &self.settings.dry_run)
            .field("failure", &self.settings.failure)
            .field("exempt_paths", &self.settings.exempt_paths)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// A layer keyed by client address, cost 1, enforcing.
    pub fn new(limits: impl RateLimits) -> RateLimitLayer {
        let policy = limits.policy_field();
        RateLimitLayer::with_source(Source::Sync(Arc::new(limits)), policy)
    }

    /// A layer whose limits are kept in a store it awaits (with the `redis`
    /// feature, `RedisLimits`): each request waits
    /// for the store's decision without holding a thread. When the store
    /// fails, the [`StoreFailurePolicy`] answers (default: 503). Every other
    /// option is as for [`RateLimitLayer::new`].
    pub fn new_async(limits: impl AsyncRateLimits) -> RateLimitLayer {
        let policy = limits.policy_field();
        RateLimitLayer::with_source(Source::Async(Arc::new(limits)), policy)
    }

    fn with_source(limits: Source, policy: Option<String>) -> RateLimitLayer {
        RateLimitLayer {
            settings: Arc::new(Settings {
                policy: policy.map(header_value),
                limits,
                key: Key::ClientAddr,
                client_ip: ClientIp::default(),
                missing: MissingKey::Reject,
                cost: None,
                tier: None,
                disabled: false,
                legacy: false,
                dry_run: false,
                on_refusal: None,
                on_dry_run_refusal: None,
                observe: None,
                failure: StoreFailurePolicy::ServiceUnavailable,
                on_store_error: None,
                #[cfg(feature = "metrics")]
                count_store_errors: false,
                exempt_paths: Vec::new(),
                exempt: None,
                methods: None,
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Settings)) -> RateLimitLayer {
        // Copies only if the layer was cloned before this option was set.
        f(Arc::make_mut(&mut self.settings));
        self
    }

    /// Where the key comes from (default: [`Key::ClientAddr`]).
    pub fn key(self, key: Key) -> RateLimitLayer {
        self.edit(|s| s.key = key)
    }

    /// The key is this header's value.
    pub fn key_header(self, name: HeaderName) -> RateLimitLayer {
        self.key(Key::Header(name))
    }

    /// The key is `f(request)`.
    pub fn key_fn(
        self,
        f: impl Fn(&Parts) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> RateLimitLayer {
        self.key(Key::Fn(Arc::new(f)))
    }

    /// Peers in these ranges are proxies: the client is the right-most
    /// address of the forwarding header ([`ForwardedHeader`], default
    /// `X-Forwarded-For`) outside them. Only a request whose peer is in a
    /// range has its header read; name exactly your proxies' addresses,
    /// since any client can send the header. Default: none (the peer is
    /// the client).
    pub fn trusted_proxies(self, ranges: impl IntoIterator<Item = Cidr>) -> RateLimitLayer {
        let ranges = ranges.into_iter().collect();
        self.edit(|s| s.client_ip.trusted = TrustedProxies::Cidrs(ranges))
    }

    /// `hops` proxies stand in front of the server, each appending the
    /// address it saw to the forwarding header: the client is the
    /// header's `hops`-th address from the right (a request with fewer is
    /// keyed by its peer). For when the proxies' addresses are not known
    /// (a cloud load balancer); every request must come through them.
    pub fn trusted_hops(self, hops: usize) -> RateLimitLayer {
        self.edit(|s| s.client_ip.trusted = TrustedProxies::Hops(hops))
    }

    /// The header trusted proxies write (default `X-Forwarded-For`).
    pub fn forwarded_header(self, header: ForwardedHeader) -> RateLimitLayer {
        self.edit(|s| s.client_ip.header = header)
    }

    /// Client addresses are keyed by these prefixes (default 32 and 64):
    /// an IPv6 host is usually given a whole /64, so keying by full address
    /// would give it 2^64 quotas.
    ///
    /// # Panics
    ///
    /// When `v4` is above 32 or `v6` above 128.
    pub fn ip_prefixes(self, v4: u8, v6: u8) -> RateLimitLayer {
        assert!(
            v4 <= 32 && v6 <= 128,
            "ip_prefixes: the IPv4 prefix is at most 32 and the IPv6 one at most 128, not /{v4} and /{v6}"
        );
        self.edit(|s| {
            s.client_ip.v4_prefix = v4;
            s.client_ip.v6_prefix = v6;
        })
    }

    /// What to do with requests whose header or key function gave no key
    /// (default: [`MissingKey::Reject`]).
    pub fn missing_key(self, policy: MissingKey) -> RateLimitLayer {
        self.edit(|s| s.missing = policy)
    }

    /// Each request costs `f(request)` units (default 1; 0 is a peek).
    pub fn cost(self, f: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> RateLimitLayer {
        self.edit(|s| s.cost = Some(Arc::new(f)))
    }

    /// Each request is decided in tier `f(request)` (a plan from a header,
    /// a claim, the route) of limits with tiers ([`Tiered`](crate::Tiered));
    /// a tier they do not have is the default tier, 0. Limits without
    /// tiers decide every request in that one. No effect on a layer of a
    /// store ([`RateLimitLayer::new_async`]), whose limits have no tiers.
    pub fn tier(self, f: impl Fn(&Parts) -> usize + Send + Sync + 'static) -> RateLimitLayer {
        self.edit(|s| s.tier = Some(Arc::new(f)))
    }

    /// `false` turns limiting off (tests, staging; from a setting read at
    /// start-up): every request passes to the service as if the layer
    /// were not there, with no fields and no check. Default: on.
    pub fn enabled(self, enabled: bool) -> RateLimitLayer {
        self.edit(|s| s.disabled = !enabled)
    }

    /// Also sends the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining`
    /// and `X-RateLimit-Reset` (UNIX seconds) that clients written for
    /// GitHub's, httprate's or slowapi's headers read, beside the draft's
    /// fields, for one limit ([`fields::legacy_values`] says which).
    /// Default: off.
    pub fn legacy_headers(self, on: bool) -> RateLimitLayer {
        self.edit(|s| s.legacy = on)
    }

    /// Dry run: requests are counted and get the fields, but none is refused.
    pub fn dry_run(self, dry_run: bool) -> RateLimitLayer {
        self.edit(|s| s.dry_run = dry_run)
    }

    /// Refusals are answered by `f(request, decisions)` instead of the
    /// problem document (tower-governor's `error_handler`, httprate's
    /// `WithLimitHandler`): an HTML page, another status, a JSON shape of
    /// your own. The layer adds `RateLimit-Policy`, `RateLimit` and
    /// `Retry-After` to its response unless `f` set them. Runs on the
    /// request's task: keep it short.
    pub fn on_refusal(
        self,
        f: impl Fn(&Parts, &[LimitDecision]) -> Response<Bytes> + Send + Sync + 'static,
    ) -> RateLimitLayer {
        self.edit(|s| s.on_refusal = Some(Arc::new(f)))
    }

    /// In a dry run, `f(request, decisions)` sees every request the limits
    /// refused (and the layer let through): log or count the violations
    /// before enforcing.
    pub fn on_dry_run_refusal(
        self,
        f: impl Fn(&Parts, &[LimitDecision]) + Send + Sync + 'static,
    ) -> RateLimitLayer {
        self.edit(|s| s.on_dry_run_refusal = Some(Arc::new(f)))
    }

    /// `f(decisions, admitted, dry_run)` sees every limited request's
    /// decisions: the place for metrics. With the `metrics` feature,
    /// [`RateLimitLayer::metrics`] is one such `f`.
    pub fn on_decision(
        self,
        f: impl Fn(&[LimitDecision], bool, bool) + Send + Sync + 'static,
    ) -> RateLimitLayer {
        self.edit(|s| s.observe = Some(Arc::new(f)))
    }

    /// What a request gets when the store of a [`RateLimitLayer::new_async`]
    /// layer fails (default: [`StoreFailurePolicy::ServiceUnavailable`]). No
    /// effect on a layer of in-process limits, which cannot fail.
    pub fn failure_policy(self, policy: StoreFailurePolicy) -> RateLimitLayer {
        self.edit(|s| s.failure = policy)
    }

    /// `f(request, error)` sees every store failure, before the failure
    /// policy answers: the place to log it (a fail-open layer otherwise
    /// passes requests without a trace). Runs on the request's task.
    pub fn on_store_error(
        self,
        f: impl Fn(&Parts, &StoreError) + Send + Sync + 'static,
    ) -> RateLimitLayer {
        self.edit(|s| s.on_store_error = Some(Arc::new(f)))
    }

    /// Counts outcomes on the `metrics` crate's recorder (whatever exporter
    /// the application installed): `ratecell_http_requests_total` labelled
    /// `policy` and `outcome`, `admitted` (once per policy of an admitted
    /// request), `refused` or `dry_run_refused` (under each policy that
    /// refused it); and store failures, which decide nothing per policy, on
    /// `ratecell_http_store_errors_total` labelled `outcome`
    /// (`unavailable`: answered 503; `failed_open`: passed). Off unless
    /// called. Replaces an [`on_decision`](RateLimitLayer::on_decision)
    /// hook; an [`on_store_error`](RateLimitLayer::on_store_error) hook
    /// still runs.
    #[cfg(feature = "metrics")]
    pub fn metrics(self) -> RateLimitLayer {
        self.on_decision(crate::metrics::record)
            .edit(|s| s.count_store_errors = true)
    }

    /// Requests to exactly these paths skip the limiter (health checks).
    pub fn exempt_paths<I, P>(self, paths: I) -> RateLimitLayer
    where
        I: IntoIterator<Item = P>,
        P: Into<String>,
    {
        let paths: Vec<String> = paths.into_iter().map(Into::into).collect();
        self.edit(|s| s.exempt_paths.extend(paths))
    }

    /// Only requests with these methods are limited (say `POST` on a login
    /// route); the others pass untouched, without fields. Default: all.
    pub fn methods(self, methods: impl IntoIterator<Item = http::Method>) -> RateLimitLayer {
        let methods = methods.into_iter().collect();
        self.edit(|s| s.methods = Some(methods))
    }

    /// Requests for which `f` is true skip the limiter.
    pub fn exempt(self, f: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> RateLimitLayer {
        self.edit(|s| s.exempt = Some(Arc::new(f)))
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            settings: self.settings.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around another.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit").finish_non_exhaustive()
    }
}

enum Verdict {
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

    fn decide(&self, parts: &Parts) -> Verdict {
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
    fn outcome(&self, parts: &Parts, items: &[LimitDecision]) -> Outcome {
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
    fn store_failed(&self, parts: &Parts, error: &StoreError) {
        if let Some(hook) = &self.on_store_error {
            hook(parts, error);
        }
        #[cfg(feature = "metrics")]
        if self.count_store_errors {
            crate::metrics::record_store_error(self.failure == StoreFailurePolicy::FailOpen);
        }
    }
}

/// What the layer does with a request its limits decided.
enum Outcome {
    /// Answered here: the refusal.
    Answer(Response<Bytes>),
    /// Forwarded with these fields, after a leaky bucket's queue wait (ns;
    /// 0 for none).
    Forward { fields: Fields, wait: u64 },
}

/// The fields an admitted request's response gets: the draft's two, and
/// the legacy three when the layer sends them (boxed: most layers do not,
/// and the response future carries this).
struct Fields {
    draft: [(HeaderName, HeaderValue); 2],
    legacy: Option<Box<[(HeaderName, HeaderValue); 3]>>,
}

impl Fields {
    fn add_to(self, headers: &mut http::HeaderMap) {
        headers.extend(self.draft);
        if let Some(legacy) = self.legacy {
            headers.extend(*legacy);
        }
    }
}

/// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`.
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// See [`X_RATELIMIT_LIMIT`].
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// See [`X_RATELIMIT_LIMIT`].
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The legacy headers of `items` ([`fields::legacy_values`]), Reset from
/// the system clock.
fn legacy_values(items: &[LimitDecision]) -> [(HeaderName, HeaderValue); 3] {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (limit, remaining, reset) = fields::legacy_values(items, now_s).unwrap_or((0, 0, now_s));
    [
        (X_RATELIMIT_LIMIT, HeaderValue::from(limit)),
        (X_RATELIMIT_REMAINING, HeaderValue::from(remaining)),
        (X_RATELIMIT_RESET, HeaderValue::from(reset)),
    ]
}

/// A field value. Names are printable ASCII and the rest digits, so the
/// values are always valid header values.
fn header_value(s: String) -> HeaderValue {
    HeaderValue::try_from(s).expect("RFC 9651 output is a valid header value")
}

/// The two RateLimit fields for `items`; `policy` when the limits gave it.
fn field_values(
    policy: Option<&HeaderValue>,
    items: &[LimitDecision],
) -> [(HeaderName, HeaderValue); 2] {
    let policy = policy
        .cloned()
        .unwrap_or_else(|| header_value(fields::policy_field(items)));
    [
        (RATELIMIT_POLICY, policy),
        (RATELIMIT, header_value(fields::ratelimit_field(items))),
    ]
}

fn problem<B: From<Bytes>>(status: StatusCode, body: String) -> Response<B> {
    let mut res = Response::new(B::from(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
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

fn missing_key<B: From<Bytes>>() -> Response<B> {
    problem(
        StatusCode::BAD_REQUEST,
        "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,\
         \"detail\":\"the request carries no rate-limit key\"}"
            .to_owned(),
    )
}

fn unavailable<B: From<Bytes>>() -> Response<B> {
    // The Go and Python middlewares' body, word for word.
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\
         \"detail\":\"the rate limiter failed\"}"
            .to_owned(),
    )
}

fn no_client_addr<B: From<Bytes>>() -> Response<B> {
    // Like tower-governor's UnableToExtractKey: the developer sees it at the
    // first request, instead of every client sharing one quota.
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "{\"type\":\"about:blank\",\"title\":\"Internal Server Error\",\"status\":500,\
         \"detail\":\"rate limiting by client address, but the request has none: serve axum \
         with into_make_service_with_connect_info::<SocketAddr>(), put the peer's SocketAddr in \
         the request's extensions (hyper), or key by header or function\"}"
            .to_owned(),
    )
}

/// The longest queue wait a leaky bucket gave an admitted request.
fn queue_wait(items: &[LimitDecision]) -> u64 {
    items.iter().map(|i| i.decision.wait_ns).max().unwrap_or(0)
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Calls `ready` with `req` once `wait_ns` has passed (a leaky bucket's
/// queue place: no thread is held meanwhile), and adds `fields` to its
/// response.
async fn forward_after<S, ReqB, ResB>(
    mut ready: S,
    req: Request<ReqB>,
    fields: Fields,
    wait_ns: u64,
) -> Result<Response<ResB>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    if wait_ns > 0 {
        futures_timer::Delay::new(Duration::from_nanos(wait_ns)).await;
    }
    let mut res = ready.call(req).await?;
    fields.add_to(res.headers_mut());
    Ok(res)
}

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`].
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        // Forwarded: the inner service's future, and the fields to add
        // (none for an exempt request).
        Inner { #[pin] future: F, fields: Option<Fields> },
        // Forwarded after a leaky bucket's queue wait, or decided by a
        // store first.
        Later { future: BoxFuture<Result<Response<B>, E>> },
        // Answered here (429, 400 or 500).
        Ready { response: Option<Response<B>> },
    }
}

fn wrap<F, B, E>(state: State<F, B, E>) -> ResponseFuture<F, B, E> {
    ResponseFuture { state }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { future, fields } => {
                let mut res = std::task::ready!(future.poll(cx))?;
                if let Some(fields) = fields.take() {
                    fields.add_to(res.headers_mut());
                }
                Poll::Ready(Ok(res))
            }
            StateProj::Later { future } => future.as_mut().poll(cx),
            StateProj::Ready { response } => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
        }
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    ReqB: Send + 'static,
    ResB: From<Bytes> + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let (parts, body) = req.into_parts();
        let verdict = self.settings.decide(&parts);
        match verdict {
            Verdict::Pass => wrap(State::Inner {
                future: self.inner.call(Request::from_parts(parts, body)),
                fields: None,
            }),
            Verdict::BadRequest => wrap(State::Ready {
                response: Some(missing_key()),
            }),
            Verdict::NoClientAddr => wrap(State::Ready {
                response: Some(no_client_addr()),
            }),
            Verdict::Limited(items) => match self.settings.outcome(&parts, &items) {
                Outcome::Answer(res) => wrap(State::Ready {
                    response: Some(res.map(ResB::from)),
                }),
                Outcome::Forward { fields, wait: 0 } => wrap(State::Inner {
                    future: self.inner.call(Request::from_parts(parts, body)),
                    fields: Some(fields),
                }),
                Outcome::Forward { fields, wait } => {
                    let req = Request::from_parts(parts, body);
                    wrap(State::Later {
                        future: Box::pin(forward_after(self.take_ready(), req, fields, wait)),
                    })
                }
            },
            Verdict::Ask(check) => {
                let ready = self.take_ready();
                let settings = self.settings.clone();
                wrap(State::Later {
                    future: Box::pin(async move {
                        let outcome = match check.await {
                            Ok(items) if !items.is_empty() => settings.outcome(&parts, &items),
                            failed => {
                                let error = failed.err().unwrap_or_else(|| {
                                    StoreError::BadReply("no decisions".to_owned())
                                });
                                settings.store_failed(&parts, &error);
                                let req = Request::from_parts(parts, body);
                                return match settings.failure {
                                    StoreFailurePolicy::ServiceUnavailable => Ok(unavailable()),
                                    StoreFailurePolicy::FailOpen => {
                                        let mut ready = ready;
                                        ready.call(req).await
                                    }
                                };
                            }
                        };
                        let req = Request::from_parts(parts, body);
                        match outcome {
                            Outcome::Answer(res) => Ok(res.map(ResB::from)),
                            Outcome::Forward { fields, wait } => {
                                forward_after(ready, req, fields, wait).await
                            }
                        }
                    }),
                })
            }
        }
    }
}

impl<S: Clone> RateLimit<S> {
    /// The inner service, made ready by `poll_ready` for this call, to be
    /// called later from the response future; a clone stays here for the
    /// next `poll_ready`.
    fn take_ready(&mut self) -> S {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }
}

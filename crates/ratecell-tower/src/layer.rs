//! The tower [`Layer`], [`RateLimitLayer`]: the settings a layer is built
//! with, one builder method each, and the [`RateLimit`] service it wraps
//! around another. What a request is then asked (its key, cost and
//! exemption) is `settings.rs`'s; the service and its response future are
//! `service.rs`'s; the responses and fields, `response.rs`'s.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http::header::HeaderName;
use http::request::Parts;
use tower_layer::Layer;

use crate::client_ip::{Cidr, ClientIp, ForwardedHeader, TrustedProxies};
use crate::fields::LimitDecision;
use crate::limits::{AsyncRateLimits, RateLimits, StoreError};
use crate::response::header_value;
use crate::service::RateLimit;
use crate::settings::{Key, MissingKey, Settings, Source, StoreFailurePolicy};

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
/// let limiter = KeyedLimiter::builder().limit(config).build().unwrap();
/// let layer = RateLimitLayer::new(Named::keyed(limiter));
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

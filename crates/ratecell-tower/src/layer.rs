//! The tower [`Layer`] and [`Service`]: takes a request's key, cost and
//! exemption, asks the [`RateLimits`] once, and either forwards the request
//! (adding the RateLimit fields to the response) or answers 429 itself.

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

use crate::fields::{self, LimitDecision};
use crate::limits::RateLimits;

/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-11 §3).
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11 §4).
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

type PartsFn<T> = Arc<dyn Fn(&Parts) -> T + Send + Sync>;

/// Where a request's key comes from.
#[derive(Clone)]
pub enum Key {
    /// The client's IP address (the port is ignored: a client opens many
    /// connections). Read from axum's `ConnectInfo<SocketAddr>` (serve with
    /// `into_make_service_with_connect_info`) or, for hyper and other
    /// servers, a `SocketAddr` the server put in the request's extensions.
    ClientAddr,
    /// A header's value, for example an API key. An empty value counts as
    /// no key.
    Header(HeaderName),
    /// A function of the request; `None` or an empty key counts as no key.
    Fn(PartsFn<Option<Vec<u8>>>),
}

/// What happens to a request that has no key (no client address, no such
/// header, or the key function said `None`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissingKey {
    /// All keyless requests share one key, so together they get one quota:
    /// leaving the key out never buys more. The default.
    #[default]
    Shared,
    /// The request is not limited and gets no RateLimit fields.
    Skip,
    /// The request is refused with 400 and a problem document (use with
    /// [`Key::Header`] when every client must send its API key).
    Reject,
}

#[derive(Clone)]
struct Settings {
    limits: Arc<dyn RateLimits>,
    // The limits' RateLimit-Policy when it never changes, formatted once.
    policy: Option<HeaderValue>,
    key: Key,
    missing: MissingKey,
    cost: Option<PartsFn<u64>>,
    dry_run: bool,
    exempt_paths: Vec<String>,
    exempt: Option<PartsFn<bool>>,
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
            .field("exempt_paths", &self.settings.exempt_paths)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// A layer keyed by client address, cost 1, enforcing.
    pub fn new(limits: impl RateLimits) -> RateLimitLayer {
        RateLimitLayer {
            settings: Arc::new(Settings {
                policy: limits.policy_field().map(header_value),
                limits: Arc::new(limits),
                key: Key::ClientAddr,
                missing: MissingKey::Shared,
                cost: None,
                dry_run: false,
                exempt_paths: Vec::new(),
                exempt: None,
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

    /// What to do with requests that have no key (default:
    /// [`MissingKey::Shared`]).
    pub fn missing_key(self, policy: MissingKey) -> RateLimitLayer {
        self.edit(|s| s.missing = policy)
    }

    /// Each request costs `f(request)` units (default 1; 0 is a peek).
    pub fn cost(self, f: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> RateLimitLayer {
        self.edit(|s| s.cost = Some(Arc::new(f)))
    }

    /// Dry run: requests are counted and get the fields, but none is refused.
    pub fn dry_run(self, dry_run: bool) -> RateLimitLayer {
        self.edit(|s| s.dry_run = dry_run)
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
    BadRequest,
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
    fn key(&self, parts: &Parts) -> Option<Vec<u8>> {
        let key = match &self.key {
            Key::ClientAddr => client_ip(parts).map(|ip| match ip {
                IpAddr::V4(v4) => v4.octets().to_vec(),
                IpAddr::V6(v6) => v6.octets().to_vec(),
            }),
            Key::Header(name) => parts.headers.get(name).map(|v| v.as_bytes().to_vec()),
            Key::Fn(f) => f(parts),
        };
        key.filter(|k| !k.is_empty())
    }

    fn decide(&self, parts: &Parts) -> Verdict {
        if self.exempt_paths.iter().any(|p| p == parts.uri.path())
            || self.exempt.as_ref().is_some_and(|f| f(parts))
        {
            return Verdict::Pass;
        }
        let key = match (self.key(parts), self.missing) {
            (Some(key), _) => key,
            // The empty key: no real key is empty (empty ones count as missing).
            (None, MissingKey::Shared) => Vec::new(),
            (None, MissingKey::Skip) => return Verdict::Pass,
            (None, MissingKey::Reject) => return Verdict::BadRequest,
        };
        let cost = self.cost.as_ref().map_or(1, |f| f(parts));
        Verdict::Limited(self.limits.check(&key, cost))
    }
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

fn refusal<B: From<Bytes>>(policy: Option<&HeaderValue>, items: &[LimitDecision]) -> Response<B> {
    let mut res = problem(StatusCode::TOO_MANY_REQUESTS, fields::problem_body(items));
    let headers = res.headers_mut();
    headers.extend(field_values(policy, items));
    if let Some(secs) = fields::retry_after_seconds(items) {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
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

/// The longest queue wait a leaky bucket gave an admitted request.
fn queue_wait(items: &[LimitDecision]) -> u64 {
    items.iter().map(|i| i.decision.wait_ns).max().unwrap_or(0)
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

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
        Inner { #[pin] future: F, fields: Option<[(HeaderName, HeaderValue); 2]> },
        // Forwarded after a leaky bucket's queue wait.
        Queued { future: BoxFuture<Result<Response<B>, E>> },
        // Answered here (429 or 400).
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
                    res.headers_mut().extend(fields);
                }
                Poll::Ready(Ok(res))
            }
            StateProj::Queued { future } => future.as_mut().poll(cx),
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
        let req = Request::from_parts(parts, body);
        match verdict {
            Verdict::Pass => wrap(State::Inner {
                future: self.inner.call(req),
                fields: None,
            }),
            Verdict::BadRequest => wrap(State::Ready {
                response: Some(missing_key()),
            }),
            Verdict::Limited(items) => {
                if !fields::admitted(&items) && !self.settings.dry_run {
                    return wrap(State::Ready {
                        response: Some(refusal(self.settings.policy.as_ref(), &items)),
                    });
                }
                let fields = field_values(self.settings.policy.as_ref(), &items);
                let wait = queue_wait(&items);
                if wait == 0 || self.settings.dry_run {
                    return wrap(State::Inner {
                        future: self.inner.call(req),
                        fields: Some(fields),
                    });
                }
                // A leaky bucket admitted the request with a place in its
                // queue: it runs when its turn comes, without holding a thread.
                // The inner service was made ready for this call, so the ready
                // one goes into the future and a clone stays here.
                let clone = self.inner.clone();
                let mut ready = std::mem::replace(&mut self.inner, clone);
                wrap(State::Queued {
                    future: Box::pin(async move {
                        futures_timer::Delay::new(Duration::from_nanos(wait)).await;
                        let mut res = ready.call(req).await?;
                        res.headers_mut().extend(fields);
                        Ok(res)
                    }),
                })
            }
        }
    }
}

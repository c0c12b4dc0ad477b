//! The responses the layer makes and the fields it adds: the RateLimit
//! fields of draft-ietf-httpapi-ratelimit-headers-11 and the legacy
//! `X-RateLimit-*` headers as header values (their text is
//! `crate::fields`'s), and the problem documents of 400, 500 and 503.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::{Response, StatusCode};

use crate::fields::{self, LimitDecision};

/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-11 §3).
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11 §4).
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// What the layer does with a request its limits decided.
pub(crate) enum Outcome {
    /// Answered here: the refusal.
    Answer(Response<Bytes>),
    /// Forwarded with these fields, after a leaky bucket's queue wait (ns;
    /// 0 for none).
    Forward { fields: Fields, wait: u64 },
}

/// The fields an admitted request's response gets: the draft's two, and
/// the legacy three when the layer sends them (boxed: most layers do not,
/// and the response future carries this).
pub(crate) struct Fields {
    pub(crate) draft: [(HeaderName, HeaderValue); 2],
    pub(crate) legacy: Option<Box<[(HeaderName, HeaderValue); 3]>>,
}

impl Fields {
    pub(crate) fn add_to(self, headers: &mut http::HeaderMap) {
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
pub(crate) fn legacy_values(items: &[LimitDecision]) -> [(HeaderName, HeaderValue); 3] {
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
pub(crate) fn header_value(s: String) -> HeaderValue {
    HeaderValue::try_from(s).expect("RFC 9651 output is a valid header value")
}

/// The two RateLimit fields for `items`; `policy` when the limits gave it.
pub(crate) fn field_values(
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

pub(crate) fn problem<B: From<Bytes>>(status: StatusCode, body: String) -> Response<B> {
    let mut res = Response::new(B::from(Bytes::from(body)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
}

pub(crate) fn missing_key<B: From<Bytes>>() -> Response<B> {
    problem(
        StatusCode::BAD_REQUEST,
        "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,\
         \"detail\":\"the request carries no rate-limit key\"}"
            .to_owned(),
    )
}

pub(crate) fn unavailable<B: From<Bytes>>() -> Response<B> {
    // The Go and Python middlewares' body, word for word.
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\
         \"detail\":\"the rate limiter failed\"}"
            .to_owned(),
    )
}

pub(crate) fn no_client_addr<B: From<Bytes>>() -> Response<B> {
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
pub(crate) fn queue_wait(items: &[LimitDecision]) -> u64 {
    items.iter().map(|i| i.decision.wait_ns).max().unwrap_or(0)
}

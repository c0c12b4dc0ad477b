//! The HTTP endpoints: envoyproxy/ratelimit's `/json` and `/healthcheck`
//! on the HTTP port, `/forward-auth/<domain>` for proxies that ask over
//! HTTP (nginx `auth_request`, Traefik `ForwardAuth`, Caddy
//! `forward_auth`, Envoy's HTTP `ext_authz`), and on the debug port
//! `/metrics` (Prometheus) and `/rlconfig` (the rules in force).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use metrics_exporter_prometheus::PrometheusHandle;
use ratecell_tower::{ForwardedHeader, client_address};

use crate::config::AuthSource;
use crate::json;
use crate::service::{Service, ServiceError};
use crate::settings::ResponseHeaders;

/// Whether the server answers as healthy (false once shutting down).
#[derive(Default)]
pub struct Health(AtomicBool);

impl Health {
    pub fn set(&self, ok: bool) {
        self.0.store(ok, Ordering::Release);
    }

    pub fn ok(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Clone)]
struct App {
    service: Arc<Service>,
    health: Arc<Health>,
}

/// The HTTP port's routes.
pub fn router(service: Arc<Service>, health: Arc<Health>) -> Router {
    Router::new()
        .route("/json", post(json_endpoint))
        .route("/healthcheck", get(healthcheck))
        .route("/forward-auth/{domain}", any(forward_auth))
        .with_state(App { service, health })
}

/// The debug port's routes.
pub fn debug_router(service: Arc<Service>, metrics: PrometheusHandle) -> Router {
    let m = metrics.clone();
    Router::new()
        .route("/metrics", get(move || async move { metrics_response(&m) }))
        .route(
            "/rlconfig",
            get(move || async move {
                let c = service.config();
                let mut rules: Vec<String> = c
                    .rules()
                    .iter()
                    .map(|r| match &r.limit {
                        Some(l) => format!(
                            "{}: {} per {} ns ({}){}",
                            r.path,
                            l.requests_per_unit,
                            l.period_ns,
                            l.config.map_or("fixed_window", |c| c.algorithm.name()),
                            if r.shadow_mode { ", shadow_mode" } else { "" }
                        ),
                        None => format!("{}: unlimited", r.path),
                    })
                    .collect();
                rules.sort();
                rules.join("\n") + "\n"
            }),
        )
}

/// `/metrics` alone, for `PROMETHEUS_ADDR`.
pub fn metrics_router(path: &str, metrics: PrometheusHandle) -> Router {
    Router::new().route(path, get(move || async move { metrics_response(&metrics) }))
}

fn metrics_response(m: &PrometheusHandle) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        m.render(),
    )
        .into_response()
}

async fn healthcheck(State(app): State<App>) -> Response {
    if app.health.ok() {
        (StatusCode::OK, "OK").into_response()
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, "shutting down").into_response()
    }
}

async fn json_endpoint(State(app): State<App>, body: Bytes) -> Response {
    let req = match json::parse_request(&body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("Bad Request: {e}\n")).into_response(),
    };
    match app.service.should_rate_limit(&req).await {
        Ok(resp) => {
            let status = if resp.overall_code == Code::OverLimit as i32 {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (status, axum::Json(json::response(&resp))).into_response()
        }
        Err(e @ ServiceError::Invalid(_)) => {
            (StatusCode::BAD_REQUEST, format!("Bad Request: {e}\n")).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// The header's value as text, when it is one.
fn text<'h>(headers: &'h HeaderMap, names: &[&str]) -> Option<&'h str> {
    names.iter().find_map(|n| headers.get(*n)?.to_str().ok())
}

async fn forward_auth(
    State(app): State<App>,
    Path(domain): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let config = app.service.config();
    let Some(auth) = config.domain(&domain).and_then(|d| d.forward_auth.as_ref()) else {
        return (
            StatusCode::NOT_FOUND,
            format!("domain {domain:?} has no forward_auth section in its configuration\n"),
        )
            .into_response();
    };
    let mut req = RateLimitRequest {
        domain: domain.clone(),
        ..Default::default()
    };
    'descriptors: for entries in &auth.descriptors {
        let mut d = RateLimitDescriptor::default();
        for (key, source) in entries {
            let value = match source {
                AuthSource::Literal(v) => v.clone(),
                AuthSource::ClientAddress => client_address(
                    peer.ip(),
                    &headers,
                    &auth.trusted,
                    ForwardedHeader::XForwardedFor,
                )
                .to_string(),
                AuthSource::Method => text(&headers, &["x-forwarded-method", "x-original-method"])
                    .unwrap_or(method.as_str())
                    .to_owned(),
                AuthSource::Path => {
                    let full = text(&headers, &["x-forwarded-uri", "x-original-uri"])
                        .unwrap_or(uri.path());
                    full.split('?').next().unwrap_or_default().to_owned()
                }
                // A descriptor whose header is absent is not sent, as
                // Envoy's request_headers action leaves it out.
                AuthSource::Header(h) => match headers.get(h).and_then(|v| v.to_str().ok()) {
                    Some(v) => v.to_owned(),
                    None => continue 'descriptors,
                },
            };
            d.entries.push(Entry {
                key: key.clone(),
                value,
            });
        }
        req.descriptors.push(d);
    }
    if req.descriptors.is_empty() {
        return StatusCode::OK.into_response();
    }
    let resp = match app.service.answer(&req, &ResponseHeaders::Draft).await {
        Ok(r) => r,
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    };
    let over = resp.overall_code == Code::OverLimit as i32;
    let mut out = if over {
        (auth.deny_status, "rate limited\n").into_response()
    } else {
        StatusCode::OK.into_response()
    };
    for h in &resp.response_headers_to_add {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(h.key.as_bytes()),
            HeaderValue::from_str(&h.value),
        ) {
            out.headers_mut().append(name, value);
        }
    }
    if over && !out.headers().contains_key(header::RETRY_AFTER) {
        // The longest reset among the denying descriptors.
        let secs = resp
            .statuses
            .iter()
            .filter(|s| s.code == Code::OverLimit as i32)
            .filter_map(|s| s.duration_until_reset.as_ref())
            .map(|d| d.seconds.max(0) + i64::from(d.nanos > 0))
            .max()
            .unwrap_or(1)
            .max(1);
        out.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    out
}

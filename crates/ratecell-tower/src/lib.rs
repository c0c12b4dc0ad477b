//! HTTP rate limiting for tower services (axum, hyper, tonic) on ratecell,
//! with the response fields of draft-ietf-httpapi-ratelimit-headers-11.
//!
//! ```
//! use ratecell::{Algorithm, Config, KeyedLimiter};
//! use ratecell_tower::{Named, RateLimitLayer};
//!
//! let limiter = KeyedLimiter::new(Config::new(Algorithm::Gcra, 10, 1_000_000_000).capacity(10_000)).unwrap();
//! let app: axum::Router = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(Named::keyed(limiter)));
//! # drop(app);
//! ```
//!
//! - [`RateLimitLayer`]: the layer; key, cost, dry run and exemptions are
//!   set on it.
//! - [`RateLimits`]: what the layer asks of a limiter, one decision per
//!   limit for one request. [`Named`] adapts a single ratecell limiter (or a
//!   function such as a Redis call) and names it; [`Multi`] adapts a
//!   multi-limit limiter (`new_multi`), one name and one field item per
//!   limit.
//! - [`fields`]: the field values and the problem document, as pure
//!   functions of those decisions.
//! - [`acquire`]: a future that resolves when a request is admitted.
//! - [`Cidr`], [`TrustedProxies`], [`ForwardedHeader`]: the client address
//!   behind proxies (the layer's `trusted_proxies`, `trusted_hops`).
//!
//! Choices the draft leaves open are listed in this crate's README.

#![warn(missing_docs)]

mod acquire;
mod client_ip;
pub mod fields;
mod layer;
mod limits;
#[cfg(feature = "metrics")]
mod metrics;

pub use acquire::acquire;
pub use client_ip::{Cidr, ForwardedHeader, InvalidCidr, TrustedProxies};
pub use fields::{InvalidPolicyName, LimitDecision, PolicyName, QUOTA_EXCEEDED_TYPE};
pub use layer::{
    Key, MissingKey, RATELIMIT, RATELIMIT_POLICY, RateLimit, RateLimitLayer, ResponseFuture,
};
pub use limits::{CheckFn, InvalidLimitNames, Multi, Named, RateLimits};

//! HTTP rate limiting for tower services (axum, hyper, tonic) on ratecell,
//! with the response fields of draft-ietf-httpapi-ratelimit-headers-11.
//!
//! ```
//! use ratecell::{Algorithm, Config, KeyedLimiter, Overflow};
//! use ratecell_tower::{Named, RateLimitLayer};
//!
//! let config = Config::new(Algorithm::Gcra, 10, 1_000_000_000)
//!     .capacity(10_000)
//!     .overflow(Overflow::Evict);
//! let limiter = KeyedLimiter::builder().limit(config).build().unwrap();
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
//!   function) and names it; [`Multi`] adapts a multi-limit limiter
//!   (several `Builder::limit`s), one name and one field item per limit.
//! - [`AsyncRateLimits`]: the same asked of a store the layer awaits
//!   ([`RateLimitLayer::new_async`]), which can fail: then the layer's
//!   [`StoreFailurePolicy`] answers (503 unless it fails open). With the `redis`
//!   feature, `RedisLimits` keeps limits in Redis through ratecell's module,
//!   shared by every server that uses it, with a timeout (250 ms by
//!   default). With `redis-modes`, `RedisLimiterLimits` decides one such
//!   limit through ratecell-redis-client's `RedisLimiter` in any of its
//!   modes (`strict`, `cached_deny`, `leased`: SPEC §8), which cost Redis
//!   nothing for a denied key or a key whose units are in hand.
//! - [`fields`]: the field values and the problem document, as pure
//!   functions of those decisions.
//! - [`acquire`]: a future that resolves when a request is admitted.
//! - [`Cidr`], [`TrustedProxies`], [`ForwardedHeader`]: the client address
//!   behind proxies (the layer's `trusted_proxies`, `trusted_hops`).
//!
//! Choices the draft leaves open are listed in this crate's README.
//!
//! Build the keyed limiters behind a layer with [`Overflow::Evict`](ratecell::Overflow::Evict),
//! as above: a layer's keys come from clients, who can make up new ones
//! at will, and a table full of a flood's states then refuses every new
//! client under the library's default `Deny` (and stops limiting them
//! under `Allow`). `Evict` gives each new key the place of the state
//! nearest to fresh instead (ratecell's docs/SPEC.md §5 bounds what that
//! costs; docs/PERFORMANCE.md, "A flood of new keys", measures it).

#![warn(missing_docs)]

mod acquire;
mod client_ip;
pub mod fields;
mod layer;
mod limits;
#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "redis-modes")]
mod redis_modes;
#[cfg(feature = "redis")]
mod redis_store;
mod response;
mod service;
mod settings;

pub use acquire::acquire;
pub use client_ip::{Cidr, ForwardedHeader, InvalidCidr, TrustedProxies, client_address};
pub use fields::{InvalidPolicyName, LimitDecision, PolicyName, QUOTA_EXCEEDED_TYPE};
pub use layer::RateLimitLayer;
pub use response::{
    RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
pub use service::{RateLimit, ResponseFuture};
pub use settings::{Key, KeyPart, MissingKey, StoreFailurePolicy};

// docs/HTTP.md's and the README's Rust snippets are doctests, compiled
// (and run where they do not serve) with the crate, so they cannot drift
// from its API. The README's need the Redis features.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/HTTP.md")]
struct HttpDocs;

#[cfg(all(doctest, feature = "redis-modes"))]
#[doc = include_str!("../README.md")]
struct ReadmeDocs;

/// The old name of [`StoreFailurePolicy`], which clashed with the Redis
/// client's `FailurePolicy` when both were imported (E0252).
#[deprecated(note = "renamed StoreFailurePolicy (the Redis client's FailurePolicy has this name)")]
pub type FailurePolicy = StoreFailurePolicy;
pub use limits::{
    AsyncRateLimits, CheckFn, InvalidLimitNames, LimitsFuture, Multi, MultiLimiter, Named,
    RateLimits, StoreError, Tiered,
};
/// The ratecell-redis-client crate this one is built with (feature
/// `redis-modes`): build the [`RedisLimiterLimits`]' limiter through it.
#[cfg(feature = "redis-modes")]
pub use ratecell_redis_client as redis_client;
/// The `redis` crate this one is built with (feature `redis`): connect
/// through it, so that the connection is the type [`RedisLimits`] takes.
#[cfg(feature = "redis")]
pub use redis;
#[cfg(feature = "redis-modes")]
pub use redis_modes::RedisLimiterLimits;
#[cfg(feature = "redis")]
pub use redis_store::{DEFAULT_TIMEOUT, InvalidRedisLimits, RedisLimits};

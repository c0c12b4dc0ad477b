//! A limit kept in Redis and decided by ratecell-redis-client's
//! [`RedisLimiter`] in any of SPEC §8's modes (feature `redis-modes`):
//! `strict`, `cached_deny` or `leased`. Owns only the bridge from the
//! limiter's synchronous check to the layer's future: what the node
//! decides alone is answered at once, and what waits on Redis runs on
//! tokio's blocking pool. The modes, the timeout and the failure policy
//! are the limiter's; nothing here sends a command of its own.

use std::sync::Arc;

use ratecell::Decision;
use ratecell_redis_client::RedisLimiter;

use crate::fields::LimitDecision;
use crate::limits::{self, AsyncRateLimits, LimitsFuture, Policy, StoreError};
use crate::redis_store::InvalidRedisLimits;

/// One named limit kept in Redis, decided by a [`RedisLimiter`] in its
/// mode, for [`RateLimitLayer::new_async`](crate::RateLimitLayer::new_async):
///
/// ```no_run
/// # fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use ratecell::{Algorithm, Config};
/// use ratecell_tower::redis_client::{FailurePolicy, Mode, RedisLimiter};
/// use ratecell_tower::{RateLimitLayer, RedisLimiterLimits};
///
/// let config = Config::new(Algorithm::Gcra, 100, 1_000_000_000);
/// let limiter = RedisLimiter::builder("redis://127.0.0.1:6379/", config)
///     .mode(Mode::Leased)
///     .timeout(Duration::from_millis(50))
///     .failure(FailurePolicy::Deny)
///     .prefix(b"rl:")
///     .build()?;
/// let limits = RedisLimiterLimits::new("api", limiter)?;
/// let app: axum::Router = axum::Router::new().layer(RateLimitLayer::new_async(limits));
/// # drop(app);
/// # Ok(())
/// # }
/// ```
///
/// The limiter's mode decides what a request costs Redis: `Strict`, one
/// `RATECELL.CHECK` (as [`RedisLimits`](crate::RedisLimits) with one
/// limit, on the same key, `prefix + key`); `CachedDeny`, none for a key
/// whose denial is still remembered; `Leased`, none while the node holds
/// units for the key (gcra, token_bucket, fixed_window and sliding_window
/// only). Those answers are made on the calling task, without a wait; a
/// check that must ask Redis runs on tokio's blocking pool (inline, when
/// the layer is polled outside a tokio runtime), bounded by the limiter's
/// timeout (50 ms by default).
///
/// A Redis that does not answer in time is the limiter's failure policy's
/// to decide (SPEC §8: `Deny`, a refusal whose `Retry-After` is the next
/// attempt, or `Local`, this node's share of the limit), not the layer's:
/// the request gets the fields and, when refused, the 429 of any refusal.
/// The layer's [`StoreFailurePolicy`](crate::StoreFailurePolicy) answers only what
/// the limiter cannot decide (a check that panicked).
///
/// One limit per store: the modes decide a key's limit on its own, so
/// several limits could not be all-or-nothing as `RATECELL.CHECKALL`
/// makes them; [`RedisLimits`](crate::RedisLimits) keeps several.
#[derive(Clone)]
pub struct RedisLimiterLimits {
    limiter: Arc<RedisLimiter>,
    policies: Arc<[Policy]>,
}

impl std::fmt::Debug for RedisLimiterLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiterLimits")
            .field("policies", &self.policies)
            .field("mode", &self.limiter.mode())
            .finish_non_exhaustive()
    }
}

impl RedisLimiterLimits {
    /// The limit of `limiter`, named `name` in the fields (`""` for
    /// `default`; printable ASCII, as every policy name).
    pub fn new(
        name: &str,
        limiter: RedisLimiter,
    ) -> Result<RedisLimiterLimits, InvalidRedisLimits> {
        let policies = limits::policies(&[limiter.config()], None, |_| {
            Some(name).filter(|n| !n.is_empty()).map(str::to_owned)
        })
        .map_err(|e| InvalidRedisLimits { message: e.message })?;
        Ok(RedisLimiterLimits {
            limiter: Arc::new(limiter),
            policies: policies.into(),
        })
    }

    /// The limiter (its mode, its counters: `stats()`).
    pub fn limiter(&self) -> &RedisLimiter {
        &self.limiter
    }
}

fn items(policies: &[Policy], decision: Decision) -> Vec<LimitDecision> {
    let (name, limit, period_ns) = &policies[0];
    vec![LimitDecision {
        name: name.clone(),
        limit: *limit,
        period_ns: *period_ns,
        decision,
    }]
}

impl AsyncRateLimits for RedisLimiterLimits {
    fn check(&self, key: Vec<u8>, cost: u64) -> LimitsFuture {
        let policies = self.policies.clone();
        let remote = match self.limiter.try_local(&key[..], cost) {
            Ok(d) => return Box::pin(std::future::ready(Ok(items(&policies, d)))),
            Err(remote) => remote,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let d = remote.finish();
            return Box::pin(std::future::ready(Ok(items(&policies, d))));
        };
        let task = runtime.spawn_blocking(move || remote.finish());
        Box::pin(async move {
            let d = task.await.map_err(|e| StoreError::Failed(Box::new(e)))?;
            Ok(items(&policies, d))
        })
    }

    fn policy_field(&self) -> Option<String> {
        Some(limits::fixed_policy_field(&self.policies))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratecell::{Algorithm, Config};
    use ratecell_redis_client::Mode;

    fn limiter(mode: Mode) -> RedisLimiter {
        // A port nothing listens on: connections are lazy, and these tests
        // decide nothing that needs one.
        RedisLimiter::builder(
            "redis://127.0.0.1:1/",
            Config::new(Algorithm::FixedWindow, 7, 2_000_000_000),
        )
        .mode(mode)
        .build()
        .unwrap()
    }

    #[test]
    fn the_policy_is_the_limiters_under_its_name() {
        let l = RedisLimiterLimits::new("api", limiter(Mode::Leased)).unwrap();
        assert_eq!(l.policy_field().unwrap(), "\"api\";q=7;w=2");
        let l = RedisLimiterLimits::new("", limiter(Mode::CachedDeny)).unwrap();
        assert_eq!(l.policy_field().unwrap(), "\"default\";q=7;w=2");
        let err = RedisLimiterLimits::new("caf\u{e9}", limiter(Mode::Strict))
            .unwrap_err()
            .to_string();
        assert!(err.contains("policy name"), "{err}");
    }

    #[test]
    fn a_peek_at_a_leased_key_asks_redis_nothing() {
        // A peek never fetches a grant: with no units in hand it is
        // denied here, with no command (the server above does not exist).
        let l = RedisLimiterLimits::new("api", limiter(Mode::Leased)).unwrap();
        let got = futures_executor::block_on(l.check(b"k".to_vec(), 0)).unwrap();
        assert_eq!(got.len(), 1);
        assert!(!got[0].decision.allowed);
        assert_eq!(l.limiter().stats().commands, 0);
    }
}

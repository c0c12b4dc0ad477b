//! What the middleware asks of a limiter: one call that decides a request
//! against every limit at once and answers with one [`LimitDecision`] per
//! limit. Owns that trait and the adapters that give a single ratecell
//! limiter (or anything with its `check` shape, such as a Redis client) a
//! name.

use std::sync::Arc;

use ratecell::{Decision, KeyedLimiter, Limiter};

use crate::fields::{InvalidPolicyName, LimitDecision, PolicyName};

/// A set of limits decided together for one request.
///
/// `check` must decide every limit as one step and report each limit's
/// decision: a multi-limit limiter that admits all-or-nothing implements it
/// directly. The request is admitted when every item says `allowed`.
/// Implementations must not check several independent limiters one after
/// another: a refusal by the second would leave the first charged.
pub trait RateLimits: Send + Sync + 'static {
    /// Decides a request of `cost` units for `key` (the key may be ignored
    /// by a global limit). Never returns an empty list.
    fn check(&self, key: &[u8], cost: u64) -> Vec<LimitDecision>;
}

impl<T: RateLimits + ?Sized> RateLimits for Arc<T> {
    fn check(&self, key: &[u8], cost: u64) -> Vec<LimitDecision> {
        (**self).check(key, cost)
    }
}

/// A single limit with a policy name (`default` unless given).
///
/// Wraps a [`KeyedLimiter`] (per-key limits), a [`Limiter`] (one global
/// limit, the key ignored) or, through [`Named::from_fn`], anything that
/// answers a `(key, cost)` with a [`Decision`] (a Redis-backed limiter, a
/// limiter on an explicit clock in tests).
pub struct Named<L> {
    name: PolicyName,
    limit: u64,
    period_ns: u64,
    limiter: L,
}

impl<L> std::fmt::Debug for Named<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Named")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("period_ns", &self.period_ns)
            .finish_non_exhaustive()
    }
}

impl Named<KeyedLimiter> {
    /// A per-key limit named `default`.
    pub fn keyed(limiter: KeyedLimiter) -> Named<KeyedLimiter> {
        let (limit, period_ns) = (limiter.config().limit, limiter.config().period_ns);
        Named {
            name: PolicyName::default(),
            limit,
            period_ns,
            limiter,
        }
    }
}

impl Named<Limiter> {
    /// One global limit (every key shares it) named `default`.
    pub fn global(limiter: Limiter) -> Named<Limiter> {
        let (limit, period_ns) = (limiter.config().limit, limiter.config().period_ns);
        Named {
            name: PolicyName::default(),
            limit,
            period_ns,
            limiter,
        }
    }
}

/// A `(key, cost) -> Decision` function standing in for a limiter.
pub struct CheckFn<F>(pub F);

impl<F> Named<CheckFn<F>>
where
    F: Fn(&[u8], u64) -> Decision + Send + Sync + 'static,
{
    /// A limit of `limit` units per `period_ns`, named `default`, decided
    /// by `check` (for example a Redis client's `RATECELL.CHECK`).
    pub fn from_fn(limit: u64, period_ns: u64, check: F) -> Named<CheckFn<F>> {
        Named {
            name: PolicyName::default(),
            limit,
            period_ns,
            limiter: CheckFn(check),
        }
    }
}

impl<L> Named<L> {
    /// Gives the limit another policy name (printable ASCII).
    pub fn name(mut self, name: &str) -> Result<Named<L>, InvalidPolicyName> {
        self.name = PolicyName::new(name)?;
        Ok(self)
    }

    /// The wrapped limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    fn item(&self, decision: Decision) -> Vec<LimitDecision> {
        vec![LimitDecision {
            name: self.name.clone(),
            limit: self.limit,
            period_ns: self.period_ns,
            decision,
        }]
    }
}

impl RateLimits for Named<KeyedLimiter> {
    fn check(&self, key: &[u8], cost: u64) -> Vec<LimitDecision> {
        self.item(self.limiter.check_bytes(key, cost))
    }
}

impl RateLimits for Named<Limiter> {
    fn check(&self, _key: &[u8], cost: u64) -> Vec<LimitDecision> {
        self.item(self.limiter.check(cost))
    }
}

impl<F> RateLimits for Named<CheckFn<F>>
where
    F: Fn(&[u8], u64) -> Decision + Send + Sync + 'static,
{
    fn check(&self, key: &[u8], cost: u64) -> Vec<LimitDecision> {
        self.item((self.limiter.0)(key, cost))
    }
}

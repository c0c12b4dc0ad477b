//! What the middleware asks of a limiter: one call that decides a request
//! against every limit at once and answers with one [`LimitDecision`] per
//! limit, synchronously ([`RateLimits`], in-process limiters) or as a
//! future that may fail ([`AsyncRateLimits`], a store such as Redis). Owns
//! those traits, the store's error, and the adapters that give a single
//! ratecell limiter (or anything with its `check` shape) a name, and a
//! multi-limit limiter one name per limit.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ratecell::{Decision, KeyedLimiter, Limiter, MultiDecision, Request};

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

    /// Decides as [`check`](RateLimits::check) under tier `tier`, which the
    /// layer's [`tier`](crate::RateLimitLayer::tier) function chose for the
    /// request. A tier the limits do not have is the default tier (0), so
    /// no client can choose a quota it was not given; limits without tiers
    /// (the default) have only that one and decide as `check`.
    fn check_tier(&self, key: &[u8], cost: u64, tier: usize) -> Vec<LimitDecision> {
        let _ = tier;
        self.check(key, cost)
    }

    /// The `RateLimit-Policy` value when it is the same for every request
    /// (the limits' names, quotas and periods are fixed), so the layer
    /// formats it once; `None` (the default) formats it per request from
    /// the decisions.
    fn policy_field(&self) -> Option<String> {
        None
    }
}

impl<T: RateLimits + ?Sized> RateLimits for Arc<T> {
    fn check(&self, key: &[u8], cost: u64) -> Vec<LimitDecision> {
        (**self).check(key, cost)
    }

    fn check_tier(&self, key: &[u8], cost: u64, tier: usize) -> Vec<LimitDecision> {
        (**self).check_tier(key, cost, tier)
    }

    fn policy_field(&self) -> Option<String> {
        (**self).policy_field()
    }
}

/// What [`AsyncRateLimits::check`] returns: the decisions, or why the store
/// could not give them.
pub type LimitsFuture =
    Pin<Box<dyn Future<Output = Result<Vec<LimitDecision>, StoreError>> + Send + 'static>>;

/// A set of limits decided together for one request by a store the layer
/// waits for: a server (Redis) shared by several processes, reached over the
/// network, which can be slow or gone.
///
/// The contract is that of [`RateLimits`]: one step for every limit, one item per
/// limit, never an empty list. In addition, the future must settle within
/// a bound of its own (a timeout: `RedisLimits` has
/// one, 250 ms by default), since the request waits for it; a store that
/// cannot decide in time returns [`StoreError::Timeout`] and the layer
/// answers with its [`StoreFailurePolicy`](crate::StoreFailurePolicy).
pub trait AsyncRateLimits: Send + Sync + 'static {
    /// Decides a request of `cost` units for `key` (see
    /// [`RateLimits::check`]). The future owns what it needs: the layer
    /// polls it after the call returns.
    fn check(&self, key: Vec<u8>, cost: u64) -> LimitsFuture;

    /// As [`RateLimits::policy_field`].
    fn policy_field(&self) -> Option<String> {
        None
    }
}

impl<T: AsyncRateLimits + ?Sized> AsyncRateLimits for Arc<T> {
    fn check(&self, key: Vec<u8>, cost: u64) -> LimitsFuture {
        (**self).check(key, cost)
    }

    fn policy_field(&self) -> Option<String> {
        (**self).policy_field()
    }
}

/// Why a store gave no decisions. The layer answers such a request with
/// its [`StoreFailurePolicy`](crate::StoreFailurePolicy); causes may be added, so
/// match with a wildcard arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer within this timeout.
    Timeout(Duration),
    /// The store could not be reached, or answered with an error.
    Failed(Box<dyn std::error::Error + Send + Sync>),
    /// The store answered something other than decisions (another
    /// version of its protocol, another server on its address).
    BadReply(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Timeout(d) => write!(f, "the rate-limit store did not answer within {d:?}"),
            StoreError::Failed(e) => write!(f, "the rate-limit store failed: {e}"),
            StoreError::BadReply(r) => write!(f, "unexpected reply from the rate-limit store: {r}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Failed(e) => Some(&**e),
            _ => None,
        }
    }
}

/// The policy field of fixed policies.
pub(crate) fn fixed_policy_field(policies: &[Policy]) -> String {
    let items: Vec<LimitDecision> = policies
        .iter()
        .map(|(name, limit, period_ns)| LimitDecision {
            name: name.clone(),
            limit: *limit,
            period_ns: *period_ns,
            decision: Decision::default(),
        })
        .collect();
    crate::fields::policy_field(&items)
}

/// A single limit with a policy name (`default` unless given).
///
/// Wraps a [`KeyedLimiter`] (per-key limits), a [`Limiter`] (one global
/// limit, the key ignored) or, through [`Named::from_fn`], anything that
/// answers a `(key, cost)` with a [`Decision`] (a Redis-backed limiter, a
/// limiter on an explicit clock in tests). A limiter of several limits
/// goes in [`Multi`] instead, which sends one item per limit.
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

    fn policy(&self) -> Option<String> {
        Some(fixed_policy_field(&[(
            self.name.clone(),
            self.limit,
            self.period_ns,
        )]))
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
        self.item(self.limiter.check(key, cost))
    }

    fn policy_field(&self) -> Option<String> {
        self.policy()
    }
}

impl RateLimits for Named<Limiter> {
    fn check(&self, _key: &[u8], cost: u64) -> Vec<LimitDecision> {
        self.item(self.limiter.check(cost))
    }

    fn policy_field(&self) -> Option<String> {
        self.policy()
    }
}

impl<F> RateLimits for Named<CheckFn<F>>
where
    F: Fn(&[u8], u64) -> Decision + Send + Sync + 'static,
{
    fn check(&self, key: &[u8], cost: u64) -> Vec<LimitDecision> {
        self.item((self.limiter.0)(key, cost))
    }

    fn policy_field(&self) -> Option<String> {
        self.policy()
    }
}

/// A multi-limit limiter (several `Builder::limit`s, keyed or global)
/// with one policy name per limit: each request is decided by one
/// `check_each`, all limits at once and all-or-nothing, and each limit
/// reports its own decision in its own item.
///
/// Names come from the limiter's builder (`Builder::names`), or are given to
/// [`Multi::new`]; a lone unnamed limit is `default`. A limit that would admit a request another limit refuses
/// is reported as admitting (it spent nothing), so `violated-policies`
/// lists exactly the limits that refused. When no limit refused but the
/// keyed table had no room for a new key (overflow policy `deny`), every
/// limit is reported as refusing, with the table's wait.
pub struct Multi<L> {
    items: Box<[Policy]>,
    limiter: L,
}

/// A limit's name, quota and period (ns).
pub(crate) type Policy = (PolicyName, u64, u64);

impl<L> std::fmt::Debug for Multi<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Multi")
            .field("items", &self.items)
            .finish_non_exhaustive()
    }
}

/// Names that cannot label a multi-limit limiter's limits: one is not an
/// RFC 9651 String, two are equal, one of several limits has none, or
/// their count is not the limits'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidLimitNames {
    /// What is wrong, naming the limit.
    pub message: String,
}

impl std::fmt::Display for InvalidLimitNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid limit names: {}", self.message)
    }
}

impl std::error::Error for InvalidLimitNames {}

fn bad(message: String) -> InvalidLimitNames {
    InvalidLimitNames { message }
}

/// The policies of `configs`, named by `names` (the limiter's own names
/// where `names` is `None`).
pub(crate) fn policies(
    configs: &[ratecell::Config],
    names: Option<&[&str]>,
    own: impl Fn(usize) -> Option<String>,
) -> Result<Box<[Policy]>, InvalidLimitNames> {
    if let Some(names) = names {
        if names.len() != configs.len() {
            return Err(bad(format!(
                "{} names for {} limits: give one per limit, in order",
                names.len(),
                configs.len()
            )));
        }
    }
    let mut out: Vec<Policy> = Vec::with_capacity(configs.len());
    for (i, c) in configs.iter().enumerate() {
        let name = match names.map(|n| n[i].to_owned()).or_else(|| own(i)) {
            Some(n) => PolicyName::new(&n).map_err(|e| bad(format!("limit {i}: {e}")))?,
            None if configs.len() == 1 => PolicyName::default(),
            None => {
                return Err(bad(format!(
                    "limit {i} has no name: name every limit of several"
                )));
            }
        };
        if out.iter().any(|(n, _, _)| *n == name) {
            return Err(bad(format!(
                "limit {i}: {:?} is already another limit's name: names must differ",
                name.as_str()
            )));
        }
        out.push((name, c.limit, c.period_ns));
    }
    Ok(out.into_boxed_slice())
}

/// A keyed limiter with a quota per tier (free, paid, internal...: the
/// builder's `tier`s, one limit each), each tier under its own policy
/// name, each request's tier chosen by the layer's
/// [`tier`](crate::RateLimitLayer::tier) function. The fields name the
/// request's tier and give its quota; a tier the limiter does not have is
/// the default tier (0). A key whose tier changes keeps what it spent.
///
/// ```
/// use ratecell::{Algorithm, Config, KeyedLimiter, Overflow};
/// use ratecell_tower::{RateLimitLayer, Tiered};
///
/// let hour = 3_600_000_000_000;
/// let free = Config::new(Algorithm::FixedWindow, 100, hour)
///     .capacity(100_000)
///     .overflow(Overflow::Evict);
/// let pro = Config::new(Algorithm::FixedWindow, 10_000, hour)
///     .capacity(100_000)
///     .overflow(Overflow::Evict);
/// let limiter = KeyedLimiter::builder().tier(&[free]).tier(&[pro]).build().unwrap();
/// let layer = RateLimitLayer::new(Tiered::keyed(limiter, &["free", "pro"]).unwrap())
///     // The plan from a header; anything else is tier 0, "free".
///     .tier(|parts| usize::from(parts.headers.get("x-plan").is_some_and(|v| v == "pro")));
/// # drop(layer);
/// ```
pub struct Tiered {
    tiers: Box<[Policy]>,
    limiter: KeyedLimiter,
}

impl std::fmt::Debug for Tiered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tiered")
            .field("tiers", &self.tiers)
            .finish_non_exhaustive()
    }
}

impl Tiered {
    /// `limiter`'s tiers under `names`, one per tier, in order. Errors
    /// when the count differs from the tiers', a name is not an RFC 9651
    /// String, two are equal, or a tier has more than one limit (give a
    /// tier of several limits its own layer per limit instead).
    pub fn keyed(limiter: KeyedLimiter, names: &[&str]) -> Result<Tiered, InvalidLimitNames> {
        let mut configs = Vec::with_capacity(limiter.tiers());
        for i in 0..limiter.tiers() {
            match limiter.tier_limits(i) {
                Some([one]) => configs.push(*one),
                Some(more) => {
                    return Err(bad(format!(
                        "tier {i} has {} limits: Tiered takes one limit per tier",
                        more.len()
                    )));
                }
                None => unreachable!("tier {i} is below tiers()"),
            }
        }
        if names.len() != configs.len() {
            return Err(bad(format!(
                "{} names for {} tiers: give one per tier, in order",
                names.len(),
                configs.len()
            )));
        }
        if let Some(i) = names.iter().position(|n| n.is_empty()) {
            return Err(bad(format!("tier {i} has no name: name every tier")));
        }
        let tiers = policies(&configs, Some(names), |_| None)?;
        Ok(Tiered { tiers, limiter })
    }

    /// The wrapped limiter.
    pub fn limiter(&self) -> &KeyedLimiter {
        &self.limiter
    }
}

impl RateLimits for Tiered {
    fn check(&self, key: &[u8], cost: u64) -> Vec<LimitDecision> {
        self.check_tier(key, cost, 0)
    }

    fn check_tier(&self, key: &[u8], cost: u64, tier: usize) -> Vec<LimitDecision> {
        let tier = if tier < self.tiers.len() { tier } else { 0 };
        let decision = match self.limiter.tier(tier) {
            Ok(t) => self.limiter.check(key, Request::new(cost).tier(t)),
            // Below tiers(), which keyed() counted the names by.
            Err(_) => unreachable!("tier {tier} is one of the limiter's"),
        };
        let (name, limit, period_ns) = &self.tiers[tier];
        vec![LimitDecision {
            name: name.clone(),
            limit: *limit,
            period_ns: *period_ns,
            decision,
        }]
    }
}

/// What a [`Multi`] reads of its limiter: its limits and their names. A
/// [`KeyedLimiter`] or a [`Limiter`] (global limits: every key shares
/// them); sealed.
pub trait MultiLimiter: sealed::Sealed {
    /// The limits, in order.
    fn limits(&self) -> &[ratecell::Config];
    /// The name `Builder::names` gave limit `index`, if any.
    fn limit_name(&self, index: usize) -> Option<&str>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for ratecell::KeyedLimiter {}
    impl Sealed for ratecell::Limiter {}
}

impl MultiLimiter for KeyedLimiter {
    fn limits(&self) -> &[ratecell::Config] {
        KeyedLimiter::limits(self)
    }
    fn limit_name(&self, index: usize) -> Option<&str> {
        KeyedLimiter::limit_name(self, index)
    }
}

impl MultiLimiter for Limiter {
    fn limits(&self) -> &[ratecell::Config] {
        Limiter::limits(self)
    }
    fn limit_name(&self, index: usize) -> Option<&str> {
        Limiter::limit_name(self, index)
    }
}

impl<L: MultiLimiter> Multi<L> {
    /// The limiter's limits under `names`, in order, or, when `names` is
    /// `None`, under the names the limiter was given (`Builder::names`).
    /// Errors when a name is not an RFC 9651 String, when two limits share
    /// a name, when `names` is not one per limit, or when one of several
    /// limits has none.
    pub fn new(limiter: L, names: Option<&[&str]>) -> Result<Multi<L>, InvalidLimitNames> {
        let items = policies(limiter.limits(), names, |i| {
            limiter.limit_name(i).map(str::to_owned)
        })?;
        Ok(Multi { items, limiter })
    }
}

impl<L> Multi<L> {
    /// The wrapped limiter.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }

    fn items(&self, m: &MultiDecision) -> Vec<LimitDecision> {
        // Refused with no limit refusing: the table had no room for the key.
        let no_room = !m.decision.allowed && m.denied_by.is_none();
        self.items
            .iter()
            .zip(m.limits())
            .map(|((name, limit, period_ns), d)| {
                let mut decision = *d;
                if no_room {
                    decision.allowed = false;
                    decision.retry_after_ns = m.decision.retry_after_ns;
                }
                LimitDecision {
                    name: name.clone(),
                    limit: *limit,
                    period_ns: *period_ns,
                    decision,
                }
            })
            .collect()
    }
}

impl RateLimits for Multi<KeyedLimiter> {
    fn check(&self, key: &[u8], cost: u64) -> Vec<LimitDecision> {
        self.items(&self.limiter.check_each(key, cost))
    }

    fn policy_field(&self) -> Option<String> {
        Some(fixed_policy_field(&self.items))
    }
}

impl RateLimits for Multi<Limiter> {
    fn check(&self, _key: &[u8], cost: u64) -> Vec<LimitDecision> {
        self.items(&self.limiter.check_each(cost))
    }

    fn policy_field(&self) -> Option<String> {
        Some(fixed_policy_field(&self.items))
    }
}

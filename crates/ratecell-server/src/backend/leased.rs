//! Limits in Redis, decided here: each rule is a leased
//! [`RedisLimiter`], which takes units in batches (`RATECELL.LEASE`) and
//! spends them locally, so several replicas share each limit with the
//! bounds of SPEC §8 at a Redis command per batch instead of per request.
//!
//! Units in hand are spent where they are; the binding checks of a request
//! are decided in order and the first denial stops the rest, so the checks
//! before it are counted (a leased key's units cannot be handed back).
//! That is the one place this backend differs from the module doc's
//! all-or-nothing rule (docs/SERVER.md says so).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ratecell::{Config as LimitConfig, Decision};
use ratecell_redis_client::{Mode, RedisLimiter};

use super::{BackendError, Check, Tables, split};
use crate::settings::RedisSettings;

/// The longest wait of a request denied at a window's edge before it is
/// asked again (see [`Leased::one`]): twice SPEC §8's default skew.
const EDGE_WAIT: Duration = Duration::from_millis(2);

/// The leased backend.
pub struct Leased {
    settings: RedisSettings,
    limiters: Tables<RedisLimiter>,
}

impl Leased {
    /// A check's key already starts with `CACHE_KEY_PREFIX` (the
    /// service's key, as the strict backend sends it), so the limiters
    /// add no prefix of their own.
    pub fn new(settings: &RedisSettings) -> Leased {
        Leased {
            settings: settings.clone(),
            limiters: RwLock::new(HashMap::new()),
        }
    }

    fn make(&self, limit: &LimitConfig) -> Result<Arc<RedisLimiter>, BackendError> {
        let mut builder = RedisLimiter::builder(&self.settings.url, *limit);
        if let Some(nodes) = &self.settings.cluster {
            let more: Vec<&str> = nodes[1..].iter().map(String::as_str).collect();
            builder = builder.cluster(&more);
        }
        if let Some(share) = self.settings.lease_share {
            // Whole units and at least a millisecond, as SPEC §8's own
            // defaults round their tenth.
            let part = |x: u64| u64::try_from(u128::from(x) * u128::from(share) / 100).unwrap_or(x);
            let period = Duration::from_nanos(limit.period_ns);
            builder = builder.max_grant(part(limit.limit).max(1)).horizon(
                Duration::from_nanos(part(limit.period_ns))
                    .clamp(Duration::from_millis(1).min(period), period),
            );
        }
        builder
            .mode(Mode::Leased)
            .timeout(self.settings.timeout)
            .failure(self.settings.lease_failure)
            .build()
            .map(Arc::new)
            .map_err(|e| BackendError(format!("Redis: {e}")))
    }

    fn limiter(&self, check: &Check<'_>) -> Result<Arc<RedisLimiter>, BackendError> {
        if let Some(l) = self
            .limiters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(check.table)
        {
            return Ok(l.clone());
        }
        let made = self.make(check.limit)?;
        let mut all = self.limiters.write().unwrap_or_else(|e| e.into_inner());
        Ok(all.entry(check.table.to_owned()).or_insert(made).clone())
    }

    async fn ask(limiter: &Arc<RedisLimiter>, check: &Check<'_>) -> Result<Decision, BackendError> {
        match limiter.try_local(check.key, check.cost) {
            Ok(d) => Ok(d),
            Err(remote) => tokio::task::spawn_blocking(move || remote.finish())
                .await
                .map_err(|e| BackendError(format!("a Redis check did not finish: {e}"))),
        }
    }

    /// One check. A denial whose retry is at most [`EDGE_WAIT`] away is a
    /// request that met a window's edge (its date fell just before the
    /// period of the units in hand, or in a grant's last skew, SPEC §8):
    /// it waits that long and is asked once more, dated then, rather than
    /// denied while its limit has room.
    async fn one(&self, check: &Check<'_>) -> Result<Decision, BackendError> {
        let limiter = self.limiter(check)?;
        let d = Self::ask(&limiter, check).await?;
        if d.allowed || d.retry_after_ns > EDGE_WAIT.as_nanos() as u64 || check.cost == 0 {
            return Ok(d);
        }
        tokio::time::sleep(Duration::from_nanos(d.retry_after_ns)).await;
        Self::ask(&limiter, check).await
    }

    /// Decides a request's checks (see the module doc).
    pub async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, BackendError> {
        let (binding, shadow) = split(checks);
        let mut out = vec![Decision::default(); checks.len()];
        for &i in &shadow {
            out[i] = self.one(&checks[i]).await?;
        }
        let mut denied = false;
        for &i in &binding {
            if denied {
                // Not decided: reported as a peek, which spends nothing,
                // and never as a denial, which it did not make.
                let peek = self
                    .one(&Check {
                        cost: 0,
                        ..checks[i]
                    })
                    .await?;
                out[i] = Decision {
                    allowed: true,
                    ..peek
                };
                continue;
            }
            out[i] = self.one(&checks[i]).await?;
            denied = !out[i].allowed;
        }
        Ok(out)
    }

    /// A limiter per rule; a rule whose limit changed gets a new one (a
    /// leased key's grants belong to the limit they were made under). A
    /// limit that cannot be leased (SPEC §8: gcra, token_bucket,
    /// fixed_window and sliding_window can) refuses the whole
    /// configuration, naming the rule; nothing changes then.
    pub fn reconfigure(&self, rules: &[(String, LimitConfig)]) -> Result<(), String> {
        let mut all = self.limiters.write().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::with_capacity(rules.len());
        for (path, limit) in rules {
            let limiter = match all.get(path).filter(|l| l.config() == *limit) {
                Some(l) => l.clone(),
                None => self.make(limit).map_err(|e| format!("{path}: {e}"))?,
            };
            next.insert(path.clone(), limiter);
        }
        *all = next;
        Ok(())
    }
}

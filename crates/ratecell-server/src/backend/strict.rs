//! Limits in Redis, decided there: the binding checks of a request are one
//! `RATECELL.CHECKALL` (the module decides them as one, all-or-nothing),
//! each shadow check a `RATECELL.CHECK`, all in one pipeline: one round
//! trip per request, whatever its descriptors.

use std::time::Duration;

use ratecell::{Config as LimitConfig, Decision};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, Pipeline, Value};

use super::{BackendError, Check, allowed, denied, split};
use crate::settings::{RedisSettings, StrictFailure};

/// The strict backend.
pub struct Strict {
    conn: ConnectionManager,
    failure: StrictFailure,
}

impl Strict {
    /// Connects (waiting at most the timeout for the first connection).
    pub async fn connect(s: &RedisSettings) -> Result<Strict, String> {
        let client = redis::Client::open(s.url.as_str()).map_err(|e| format!("REDIS_URL: {e}"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(s.timeout)
            .set_response_timeout(s.timeout)
            .set_number_of_retries(1)
            .set_max_delay(500);
        let conn = tokio::time::timeout(
            s.timeout.max(Duration::from_secs(1)),
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| format!("Redis at {} did not answer in time", redact(&s.url)))?
        .map_err(|e| format!("Redis at {}: {e}", redact(&s.url)))?;
        Ok(Strict {
            conn,
            failure: s.strict_failure,
        })
    }

    /// Decides a request's checks in one round trip.
    pub async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, BackendError> {
        let (binding, shadow) = split(checks);
        let mut pipe = Pipeline::new();
        if !binding.is_empty() {
            let mut cmd = redis::cmd("RATECELL.CHECKALL");
            for &i in &binding {
                cmd.arg("LIMIT").arg(checks[i].key);
                limit_args(&mut cmd, checks[i].limit, checks[i].cost);
            }
            pipe.add_command(cmd);
        }
        for &i in &shadow {
            let mut cmd = redis::cmd("RATECELL.CHECK");
            cmd.arg(checks[i].key);
            limit_args(&mut cmd, checks[i].limit, checks[i].cost);
            pipe.add_command(cmd);
        }
        let mut conn = self.conn.clone();
        let replies: Vec<Value> = match pipe.query_async(&mut conn).await {
            Ok(r) => r,
            Err(e) => return self.failed(checks, e),
        };
        let mut out = vec![Decision::default(); checks.len()];
        let mut replies = replies.into_iter();
        if !binding.is_empty() {
            let reply = replies.next();
            let Some(Value::Array(items)) = reply else {
                return Err(BackendError(format!(
                    "RATECELL.CHECKALL answered {reply:?}"
                )));
            };
            if items.len() != binding.len() + 1 {
                return Err(BackendError(format!(
                    "RATECELL.CHECKALL answered {} items for {} limits",
                    items.len(),
                    binding.len()
                )));
            }
            for (&i, item) in binding.iter().zip(&items[1..]) {
                out[i] = decision(item)?;
            }
        }
        for &i in &shadow {
            out[i] = decision(&replies.next().unwrap_or(Value::Nil))?;
        }
        Ok(out)
    }

    fn failed(
        &self,
        checks: &[Check<'_>],
        e: redis::RedisError,
    ) -> Result<Vec<Decision>, BackendError> {
        tracing::warn!("Redis: {e}");
        match self.failure {
            StrictFailure::Error => Err(BackendError(format!("Redis: {e}"))),
            StrictFailure::Allow => Ok(checks.iter().map(|c| allowed(c.limit)).collect()),
            StrictFailure::Deny => Ok(checks.iter().map(|c| denied(c.limit)).collect()),
        }
    }
}

/// `<algorithm> <limit> <period>ns [BURST b] [SUBWINDOWS n] COST c`.
fn limit_args(cmd: &mut Cmd, l: &LimitConfig, cost: u64) {
    cmd.arg(l.algorithm.name())
        .arg(l.limit)
        .arg(format!("{}ns", l.period_ns));
    if l.algorithm.has_burst() && l.burst != 0 {
        cmd.arg("BURST").arg(l.burst);
    }
    if l.algorithm == ratecell::Algorithm::BucketedWindow {
        cmd.arg("SUBWINDOWS").arg(l.sub_windows);
    }
    cmd.arg("COST").arg(cost);
}

/// `[allowed, limit, remaining, retry_after_ns (−1: never), reset_after_ns, wait_ns]`.
fn decision(v: &Value) -> Result<Decision, BackendError> {
    let bad = || BackendError(format!("a decision was expected from Redis, not {v:?}"));
    let Value::Array(items) = v else {
        return Err(bad());
    };
    let n: Vec<i64> = items
        .iter()
        .map(|x| match x {
            Value::Int(i) => Ok(*i),
            _ => Err(bad()),
        })
        .collect::<Result<_, _>>()?;
    let [allowed, limit, remaining, retry, reset, wait] = n[..] else {
        return Err(bad());
    };
    let u = |x: i64| u64::try_from(x).unwrap_or(u64::MAX);
    Ok(Decision {
        allowed: allowed == 1,
        limit: u(limit),
        remaining: u(remaining),
        retry_after_ns: u(retry),
        reset_after_ns: u(reset),
        wait_ns: u(wait),
    })
}

/// The URL without its password, for messages.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

//! Limits in Redis, decided there: the binding checks of a request are one
//! `RATECELL.CHECKALL` (the module decides them as one, all-or-nothing),
//! each shadow check a `RATECELL.CHECK`, all in one pipeline: one round
//! trip per request, whatever its descriptors.
//!
//! In a Redis Cluster a `RATECELL.CHECKALL` must name keys of one hash
//! slot, so the binding checks are grouped by slot: one `CHECKALL` per
//! slot, each on its slot's master, all sent at once with the shadow
//! checks (one round trip). Each group is all-or-nothing and the request
//! is admitted only if every group admits; a group that admitted while
//! another denied stays counted, since the module cannot take units back
//! (docs/SERVER.md and SPEC §9 say so). Keys with one hash tag share a
//! slot, so a `{tag}` in `CACHE_KEY_PREFIX` makes every request one group.

use std::time::Duration;

use ratecell::{Config as LimitConfig, Decision};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, Value};

use super::{BackendError, Check, allowed, denied, split};
use crate::settings::{RedisSettings, StrictFailure};

/// The strict backend.
pub struct Strict {
    conn: Conn,
    failure: StrictFailure,
}

/// One server, or a cluster's masters.
enum Conn {
    One(ConnectionManager),
    Cluster(Cluster),
}

/// A Redis Cluster connection, and the timeout of a request's commands.
struct Cluster {
    conn: ClusterConnection,
    timeout: Duration,
}

impl Cluster {
    /// Connects to `nodes` (reading the slot map and connecting to each
    /// master, within the timeout or a second, whichever is longer).
    async fn connect(s: &RedisSettings, nodes: &[String]) -> Result<Cluster, String> {
        let ms = u64::try_from(s.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(2);
        // One retry: one MOVED or ASK followed, or one reconnect; the
        // whole request is bounded by the timeout anyway (`decide`).
        let client = ClusterClient::builder(nodes.iter().map(String::as_str))
            .connection_timeout(s.timeout)
            .response_timeout(s.timeout)
            .retries(1)
            .min_retry_wait(1)
            .max_retry_wait(ms)
            .build()
            .map_err(|e| format!("REDIS_URL: {e}"))?;
        let names = nodes
            .iter()
            .map(|n| redact(n))
            .collect::<Vec<_>>()
            .join(",");
        let conn = tokio::time::timeout(
            s.timeout.max(Duration::from_secs(1)),
            client.get_async_connection(),
        )
        .await
        .map_err(|_| format!("Redis Cluster at {names} did not answer in time"))?
        .map_err(|e| format!("Redis Cluster at {names}: {e}"))?;
        Ok(Cluster {
            conn,
            timeout: s.timeout,
        })
    }

    /// Decides a request's checks: a `CHECKALL` per hash slot of the
    /// binding checks and a `CHECK` per shadow check, sent together, the
    /// whole within the timeout (see the module doc).
    async fn decide(
        &self,
        checks: &[Check<'_>],
        failure: StrictFailure,
    ) -> Result<Vec<Decision>, BackendError> {
        let (binding, shadow) = split(checks);
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for &i in &binding {
            let slot = slot(checks[i].key);
            match groups.iter_mut().find(|g| g.0 == slot) {
                Some(g) => g.1.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        let mut sent = Vec::with_capacity(groups.len() + shadow.len());
        for (slot, group) in &groups {
            let mut cmd = redis::cmd("RATECELL.CHECKALL");
            for &i in group {
                cmd.arg("LIMIT").arg(checks[i].key);
                limit_args(&mut cmd, checks[i].limit, checks[i].cost);
            }
            sent.push(self.send(cmd, *slot));
        }
        for &i in &shadow {
            let mut cmd = redis::cmd("RATECELL.CHECK");
            cmd.arg(checks[i].key);
            limit_args(&mut cmd, checks[i].limit, checks[i].cost);
            sent.push(self.send(cmd, slot(checks[i].key)));
        }
        let replies = tokio::time::timeout(self.timeout, async {
            let mut replies = Vec::with_capacity(sent.len());
            for task in sent {
                match task.await {
                    Ok(r) => replies.push(r?),
                    Err(e) => return Err(redis::RedisError::from(std::io::Error::other(e))),
                }
            }
            Ok(replies)
        })
        .await;
        let replies = match replies {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return failed(failure, checks, e),
            Err(_) => {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in time");
                return failed(failure, checks, e.into());
            }
        };
        let mut out = vec![Decision::default(); checks.len()];
        let mut replies = replies.into_iter();
        for (_, group) in &groups {
            read_checkall(replies.next(), group, &mut out)?;
        }
        for &i in &shadow {
            out[i] = decision(&replies.next().unwrap_or(Value::Nil))?;
        }
        Ok(out)
    }

    /// `cmd` on the master of `slot`, running while the others are sent.
    fn send(&self, cmd: Cmd, slot: u16) -> tokio::task::JoinHandle<redis::RedisResult<Value>> {
        let mut conn = self.conn.clone();
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
            slot,
            SlotAddr::Master,
        )));
        tokio::spawn(async move { conn.route_command(&cmd, route).await })
    }
}

/// A key's Redis Cluster hash slot: CRC16 (XMODEM) of the key, or of its
/// hash tag (the bytes between the first `{` and the next `}`, when there
/// are any), modulo 16384.
fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

impl Strict {
    /// Connects (waiting at most the timeout for the first connection).
    pub async fn connect(s: &RedisSettings) -> Result<Strict, String> {
        if let Some(nodes) = &s.cluster {
            return Ok(Strict {
                conn: Conn::Cluster(Cluster::connect(s, nodes).await?),
                failure: s.strict_failure,
            });
        }
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
            conn: Conn::One(conn),
            failure: s.strict_failure,
        })
    }

    /// Decides a request's checks in one round trip.
    pub async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, BackendError> {
        let conn = match &self.conn {
            Conn::One(c) => c,
            Conn::Cluster(c) => return c.decide(checks, self.failure).await,
        };
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
        let mut conn = conn.clone();
        let replies: Vec<Value> = match pipe.query_async(&mut conn).await {
            Ok(r) => r,
            Err(e) => return failed(self.failure, checks, e),
        };
        let mut out = vec![Decision::default(); checks.len()];
        let mut replies = replies.into_iter();
        if !binding.is_empty() {
            read_checkall(replies.next(), &binding, &mut out)?;
        }
        for &i in &shadow {
            out[i] = decision(&replies.next().unwrap_or(Value::Nil))?;
        }
        Ok(out)
    }
}

/// `RATECELL.CHECKALL`'s reply (`[allowed, decision...]`) for the checks
/// `binding`, in their order, into `out`.
fn read_checkall(
    reply: Option<Value>,
    binding: &[usize],
    out: &mut [Decision],
) -> Result<(), BackendError> {
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
    Ok(())
}

/// What the failure policy answers when Redis did not.
fn failed(
    failure: StrictFailure,
    checks: &[Check<'_>],
    e: redis::RedisError,
) -> Result<Vec<Decision>, BackendError> {
    tracing::warn!("Redis: {e}");
    match failure {
        StrictFailure::Error => Err(BackendError(format!("Redis: {e}"))),
        StrictFailure::Allow => Ok(checks.iter().map(|c| allowed(c.limit)).collect()),
        StrictFailure::Deny => Ok(checks.iter().map(|c| denied(c.limit)).collect()),
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

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn slots_are_redis_clusters() {
        // The Redis Cluster specification's CRC16 check value, and its
        // hash-tag examples.
        assert_eq!(slot(b"123456789"), 0x31c3);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
        assert_eq!(slot(b"{rl}edge_remote_address_1"), slot(b"{rl}api_user_2"));
    }
}

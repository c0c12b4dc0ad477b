//! Limits kept in Redis by ratecell's module (bindings/redis, SPEC §7), as
//! the layer awaits them (feature `redis`): one `RATECELL.CHECK`, or one
//! all-or-nothing `RATECELL.CHECKALL`, per request, bounded by a timeout.
//! Owns the commands it sends and the reading of their replies; what a
//! failure answers is the layer's.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ratecell::{Config, Decision};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Value};

use crate::fields::LimitDecision;
use crate::limits::{self, AsyncRateLimits, LimitsFuture, Policy, StoreError};

/// How long [`RedisLimits`] waits for the server by default: well under a
/// second, so that a stalled Redis (paused, swapping, failing over) costs
/// each request at most this, instead of holding every request behind it.
/// The same as the Go and Python stores'.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

/// Named limits kept in Redis, shared by every server that uses the same
/// Redis (or cluster), for [`RateLimitLayer::new_async`](crate::RateLimitLayer::new_async):
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use ratecell::{Algorithm, Config};
/// use ratecell_tower::{RateLimitLayer, RedisLimits};
///
/// use ratecell_tower::redis::aio::ConnectionManagerConfig;
///
/// // Retry a lost server every second or two, not after a minute.
/// let config = ConnectionManagerConfig::new()
///     .set_max_delay(1_000)
///     .set_connection_timeout(std::time::Duration::from_secs(1));
/// let client = ratecell_tower::redis::Client::open("redis://127.0.0.1:6379/")?;
/// let conn = client.get_connection_manager_with_config(config).await?;
/// let limits = RedisLimits::new(conn, &[
///     ("burst", Config::new(Algorithm::Gcra, 10, 1_000_000_000)),
///     ("daily", Config::new(Algorithm::SlidingWindow, 10_000, 86_400_000_000_000)),
/// ])?;
/// let app: axum::Router = axum::Router::new().layer(RateLimitLayer::new_async(limits));
/// # drop(app);
/// # Ok(())
/// # }
/// ```
///
/// One limit is one `RATECELL.CHECK` on the key `prefix + key`. Several
/// are one `RATECELL.CHECKALL`, admitted and stored only if every limit
/// admits, on the keys `prefix + "{" + key + "}:" + name`, whose hash tag
/// puts one client's limits in one cluster slot: the commands the Go and
/// Python stores send, so servers in the three languages share limits.
/// Each check gives up after the timeout ([`DEFAULT_TIMEOUT`]).
///
/// `C` is any async connection: the [`ConnectionManager`] (the default;
/// it reconnects after the server restarts, but by default retries a lost
/// server after a second and then only after a minute: set
/// `ConnectionManagerConfig::set_max_delay`, as above), a multiplexed
/// connection, a cluster connection. Each check works on a clone of it.
#[derive(Clone)]
pub struct RedisLimits<C = ConnectionManager> {
    conn: C,
    policies: Arc<[Policy]>,
    // Per limit: the configuration's arguments after the key
    // (`<algorithm> <limit> <period>ns [BURST b] [SUBWINDOWS n]`).
    args: Arc<[Vec<String>]>,
    prefix: Vec<u8>,
    timeout: Duration,
}

impl<C> std::fmt::Debug for RedisLimits<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimits")
            .field("policies", &self.policies)
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Limits [`RedisLimits`] cannot keep: a name or a configuration field
/// refused, or a zero timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidRedisLimits {
    /// What is wrong, naming the limit and the field.
    pub message: String,
}

impl std::fmt::Display for InvalidRedisLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid Redis limits: {}", self.message)
    }
}

impl std::error::Error for InvalidRedisLimits {}

fn invalid(message: String) -> InvalidRedisLimits {
    InvalidRedisLimits { message }
}

/// The arguments of `RATECELL.CHECK` after the key that say what `config`
/// limits (SPEC §7): burst only when set, sub-windows only where they
/// count. Capacity and overflow do not apply: Redis keeps one state per key.
fn config_args(config: &Config) -> Vec<String> {
    let mut args = vec![
        config.algorithm.name().to_owned(),
        config.limit.to_string(),
        format!("{}ns", config.period_ns),
    ];
    if config.burst != 0 {
        args.extend(["BURST".to_owned(), config.burst.to_string()]);
    }
    if config.algorithm == ratecell::Algorithm::BucketedWindow {
        args.extend(["SUBWINDOWS".to_owned(), config.sub_windows.to_string()]);
    }
    args
}

impl<C> RedisLimits<C> {
    /// Limits `(name, configuration)`, in the order the fields list them,
    /// kept through `conn`. Every limit of several needs a name (printable
    /// ASCII, all different); a lone limit named `""` is `default`. Each
    /// configuration is checked here as a ratecell limiter would check it
    /// (its capacity and overflow are not used), so a bad field is an error
    /// at start-up naming the limit and the field, not a failure per
    /// request.
    pub fn new(conn: C, limits: &[(&str, Config)]) -> Result<RedisLimits<C>, InvalidRedisLimits> {
        if limits.is_empty() {
            return Err(invalid(
                "no limits: give at least one (name, Config)".to_owned(),
            ));
        }
        let mut args = Vec::with_capacity(limits.len());
        for (i, (name, config)) in limits.iter().enumerate() {
            if let Err(e) = ratecell::state::Rule::new(config) {
                return Err(invalid(format!("limit {i} ({name:?}): {e}")));
            }
            args.push(config_args(config));
        }
        let configs: Vec<Config> = limits.iter().map(|(_, c)| *c).collect();
        let policies = limits::policies(&configs, None, |i| {
            Some(limits[i].0)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
        })
        .map_err(|e| invalid(e.message))?;
        Ok(RedisLimits {
            conn,
            policies: policies.into(),
            args: args.into(),
            prefix: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Prepends `prefix` to every key (a namespace: `"ratelimit:"`).
    pub fn prefix(mut self, prefix: impl Into<Vec<u8>>) -> RedisLimits<C> {
        self.prefix = prefix.into();
        self
    }

    /// Gives up on a check after `timeout` (default [`DEFAULT_TIMEOUT`]):
    /// the check fails with [`StoreError::Timeout`] and the layer answers
    /// with its failure policy. The bound covers the whole check, waiting
    /// for a reconnection included. Zero is refused: every check would
    /// fail.
    pub fn timeout(mut self, timeout: Duration) -> Result<RedisLimits<C>, InvalidRedisLimits> {
        if timeout.is_zero() {
            return Err(invalid(
                "timeout: 0 would fail every check; give a positive duration".to_owned(),
            ));
        }
        self.timeout = timeout;
        Ok(self)
    }

    /// The connection checks are sent on.
    pub fn connection(&self) -> &C {
        &self.conn
    }

    /// The command that decides a request for `key`.
    fn command(&self, key: &[u8], cost: u64) -> Cmd {
        if let [args] = &*self.args {
            let mut cmd = redis::cmd("RATECELL.CHECK");
            cmd.arg([&self.prefix[..], key].concat())
                .arg(args)
                .arg("COST")
                .arg(cost);
            return cmd;
        }
        let mut cmd = redis::cmd("RATECELL.CHECKALL");
        for ((name, _, _), args) in self.policies.iter().zip(&*self.args) {
            let limit_key = [&self.prefix[..], b"{", key, b"}:", name.as_str().as_bytes()].concat();
            cmd.arg("LIMIT")
                .arg(limit_key)
                .arg(args)
                .arg("COST")
                .arg(cost);
        }
        cmd
    }
}

fn bad_reply(what: &str, reply: &Value) -> StoreError {
    StoreError::BadReply(format!("{what}: {reply:?}"))
}

/// A decision from its six integers (SPEC §7: allowed, limit, remaining,
/// retry_after_ns, reset_after_ns, wait_ns; retry -1 for never).
fn decision(reply: &Value) -> Result<Decision, StoreError> {
    let want = "six integers";
    let Value::Array(items) = reply else {
        return Err(bad_reply(want, reply));
    };
    let mut n = [0i64; 6];
    if items.len() != n.len() {
        return Err(bad_reply(want, reply));
    }
    for (slot, item) in n.iter_mut().zip(items) {
        match item {
            Value::Int(v) => *slot = *v,
            _ => return Err(bad_reply(want, reply)),
        }
    }
    let [allowed, limit, remaining, retry, reset, wait] = n;
    let unsigned = |v: i64| u64::try_from(v).map_err(|_| bad_reply("negative integers", reply));
    Ok(Decision {
        allowed: allowed == 1,
        limit: unsigned(limit)?,
        remaining: unsigned(remaining)?,
        retry_after_ns: if retry == -1 {
            u64::MAX
        } else {
            unsigned(retry)?
        },
        reset_after_ns: unsigned(reset)?,
        wait_ns: unsigned(wait)?,
    })
}

/// One item per policy from a `RATECELL.CHECK` reply (one policy) or a
/// `RATECELL.CHECKALL` reply (`[admitted, decision, ...]`, one decision per
/// policy: those that would have admitted a refused request report a peek
/// at their unchanged state).
fn items(policies: &[Policy], reply: &Value) -> Result<Vec<LimitDecision>, StoreError> {
    let item = |(name, limit, period_ns): &Policy, decision| LimitDecision {
        name: name.clone(),
        limit: *limit,
        period_ns: *period_ns,
        decision,
    };
    if let [policy] = policies {
        return Ok(vec![item(policy, decision(reply)?)]);
    }
    let want = format!("an admission and {} decisions", policies.len());
    match reply {
        Value::Array(all) if all.len() == policies.len() + 1 && matches!(all[0], Value::Int(_)) => {
            policies
                .iter()
                .zip(&all[1..])
                .map(|(p, d)| Ok(item(p, decision(d)?)))
                .collect()
        }
        _ => Err(bad_reply(&want, reply)),
    }
}

impl<C> AsyncRateLimits for RedisLimits<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn check(&self, key: Vec<u8>, cost: u64) -> LimitsFuture {
        let cmd = self.command(&key, cost);
        let mut conn = self.conn.clone();
        let policies = self.policies.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let reply = Deadline::new(conn.req_packed_command(&cmd), timeout)
                .await
                .ok_or(StoreError::Timeout(timeout))?
                .map_err(|e| StoreError::Failed(Box::new(e)))?;
            items(&policies, &reply)
        })
    }

    fn policy_field(&self) -> Option<String> {
        Some(limits::fixed_policy_field(&self.policies))
    }
}

pin_project_lite::pin_project! {
    /// `future`, or `None` once `timeout` has passed. On futures-timer, as
    /// the rest of the crate, so a runtime without tokio's timer enabled
    /// still bounds the wait.
    struct Deadline<F> {
        #[pin]
        future: F,
        #[pin]
        delay: futures_timer::Delay,
    }
}

impl<F> Deadline<F> {
    fn new(future: F, timeout: Duration) -> Deadline<F> {
        Deadline {
            future,
            delay: futures_timer::Delay::new(timeout),
        }
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.future.poll(cx) {
            return Poll::Ready(Some(out));
        }
        this.delay.poll(cx).map(|()| None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratecell::Algorithm;

    fn six(v: [i64; 6]) -> Value {
        Value::Array(v.iter().map(|&n| Value::Int(n)).collect())
    }

    fn limits(named: &[(&str, Config)]) -> RedisLimits<()> {
        RedisLimits::new((), named).unwrap()
    }

    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                redis::Arg::Cursor => "<cursor>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn one_limit_is_one_check_on_the_prefixed_key() {
        let l =
            limits(&[("", Config::new(Algorithm::Gcra, 10, 1_000_000_000).burst(3))]).prefix("rl:");
        assert_eq!(
            args(&l.command(b"1.2.3.4", 2)),
            [
                "RATECELL.CHECK",
                "rl:1.2.3.4",
                "gcra",
                "10",
                "1000000000ns",
                "BURST",
                "3",
                "COST",
                "2"
            ]
        );
        assert_eq!(
            limits::fixed_policy_field(&l.policies),
            "\"default\";q=10;w=1"
        );
    }

    #[test]
    fn several_limits_are_one_checkall_with_hash_tagged_keys() {
        let l = limits(&[
            ("burst", Config::new(Algorithm::Gcra, 10, 1_000_000_000)),
            (
                "hour",
                Config::new(Algorithm::BucketedWindow, 100, 3_600_000_000_000).sub_windows(6),
            ),
        ]);
        assert_eq!(
            args(&l.command(b"k", 1)),
            [
                "RATECELL.CHECKALL",
                "LIMIT",
                "{k}:burst",
                "gcra",
                "10",
                "1000000000ns",
                "COST",
                "1",
                "LIMIT",
                "{k}:hour",
                "bucketed_window",
                "100",
                "3600000000000ns",
                "SUBWINDOWS",
                "6",
                "COST",
                "1",
            ]
        );
    }

    #[test]
    fn replies_become_items_in_policy_order() {
        let l = limits(&[
            ("a", Config::new(Algorithm::FixedWindow, 3, 1_000_000_000)),
            ("b", Config::new(Algorithm::FixedWindow, 5, 2_000_000_000)),
        ]);
        let reply = Value::Array(vec![
            Value::Int(0),
            six([0, 3, 0, -1, 700, 0]),
            six([1, 5, 4, 0, 2_000_000_000, 0]),
        ]);
        let got = items(&l.policies, &reply).unwrap();
        assert_eq!(got[0].name.as_str(), "a");
        assert_eq!((got[0].limit, got[0].period_ns), (3, 1_000_000_000));
        assert!(!got[0].decision.allowed);
        assert_eq!(got[0].decision.retry_after_ns, u64::MAX);
        assert_eq!(got[1].name.as_str(), "b");
        assert_eq!(got[1].decision.remaining, 4);
        assert!(got[1].decision.allowed);
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        let one = limits(&[("", Config::new(Algorithm::Gcra, 1, 1_000_000_000))]);
        let two = limits(&[
            ("a", Config::new(Algorithm::Gcra, 1, 1_000_000_000)),
            ("b", Config::new(Algorithm::Gcra, 1, 1_000_000_000)),
        ]);
        for (l, reply) in [
            (&one, Value::Nil),
            (&one, Value::Array(vec![Value::Int(1)])),
            (&one, six([1, 1, -5, 0, 0, 0])),
            (&one, Value::Array(vec![Value::Okay; 6])),
            (&two, six([1, 1, 1, 0, 0, 0])),
            (
                &two,
                Value::Array(vec![Value::Int(1), six([1, 1, 0, 0, 0, 0])]),
            ),
            (
                &two,
                Value::Array(vec![Value::Nil, six([1; 6]), six([1; 6])]),
            ),
        ] {
            let err = items(&l.policies, &reply).unwrap_err();
            assert!(matches!(err, StoreError::BadReply(_)), "{reply:?}: {err}");
        }
    }

    #[test]
    fn bad_configurations_and_names_name_the_field() {
        let err = RedisLimits::new((), &[("x", Config::new(Algorithm::Gcra, 0, 1_000_000_000))])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("limit 0 (\"x\")") && err.contains("invalid limit"),
            "{err}"
        );
        let err = RedisLimits::new(
            (),
            &[
                ("a", Config::new(Algorithm::Gcra, 1, 1_000_000_000)),
                ("b", Config::new(Algorithm::FixedWindow, 1, 10)),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("limit 1 (\"b\")") && err.contains("period_ns"),
            "{err}"
        );
        let ok = Config::new(Algorithm::Gcra, 1, 1_000_000_000);
        let err = RedisLimits::new((), &[("a", ok), ("", ok)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("limit 1 has no name"), "{err}");
        let err = RedisLimits::new((), &[("a", ok), ("a", ok)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("already another limit's name"), "{err}");
        let err = RedisLimits::new((), &[("caf\u{e9}", ok)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("policy name"), "{err}");
        assert!(RedisLimits::new((), &[]).is_err());
        let err = limits(&[("", ok)])
            .timeout(Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(err.contains("timeout"), "{err}");
    }

    #[test]
    fn the_deadline_ends_a_future_that_never_settles() {
        let start = std::time::Instant::now();
        let out = futures_executor::block_on(Deadline::new(
            std::future::pending::<()>(),
            Duration::from_millis(30),
        ));
        assert_eq!(out, None);
        assert!(start.elapsed() >= Duration::from_millis(30));
        let out = futures_executor::block_on(Deadline::new(
            std::future::ready(7),
            Duration::from_secs(3600),
        ));
        assert_eq!(out, Some(7));
    }
}

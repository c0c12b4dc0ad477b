//! Connections to Redis, one server or a cluster, each command bounded
//! by the limiter's timeout.

use redis::cluster::{ClusterClient, ClusterConnection, Connect};
use redis::{
    Client, Connection, ConnectionLike, ErrorKind, IntoConnectionInfo, RedisError, RedisResult,
    Value,
};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where the limits are kept.
pub(crate) enum Servers {
    /// One server (or a proxy in front of several).
    One(Client),
    /// A Redis Cluster: every command names one key and goes to the master
    /// of its slot, found and followed (`MOVED`, `ASK`) by redis-rs.
    Cluster(ClusterClient),
}

impl Servers {
    /// A cluster reached through `nodes` (any of its nodes; the others
    /// are found with `CLUSTER SLOTS`), with `timeout` for each connect.
    ///
    /// One retry: it follows one `MOVED` or `ASK` (a slot that moved since
    /// the connection read the slot map, or one being migrated), or
    /// reconnects once to a node whose connection broke. A timeout is
    /// never retried ([`Node`]), and a busy cluster (`TRYAGAIN`,
    /// `CLUSTERDOWN`) waits at most the timeout before its one retry.
    pub(crate) fn cluster(nodes: &[String], timeout: Duration) -> RedisResult<Servers> {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(2);
        ClusterClient::builder(nodes.iter().map(String::as_str))
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(1)
            .min_retry_wait(1)
            .max_retry_wait(ms)
            .build()
            .map(Servers::Cluster)
    }

    fn connect(&self, timeout: Duration) -> RedisResult<Conn> {
        match self {
            Servers::One(c) => c.get_connection_with_timeout(timeout).map(Conn::One),
            Servers::Cluster(c) => c
                .get_generic_connection()
                .map(|c| Conn::Cluster(Box::new(c))),
        }
    }
}

/// A connection to one server, or to each master of a cluster (boxed: it
/// is several times a connection's size, and pools hold either).
enum Conn {
    One(Connection),
    Cluster(Box<ClusterConnection<Node>>),
}

impl Conn {
    fn set_timeouts(&mut self, left: Duration) -> RedisResult<()> {
        match self {
            Conn::One(c) => {
                c.set_read_timeout(Some(left))?;
                c.set_write_timeout(Some(left))
            }
            Conn::Cluster(c) => {
                c.set_read_timeout(Some(left))?;
                c.set_write_timeout(Some(left))
            }
        }
    }

    fn query(&mut self, cmd: &redis::Cmd) -> RedisResult<Value> {
        match self {
            Conn::One(c) => cmd.query(c),
            Conn::Cluster(c) => cmd.query(c.as_mut()),
        }
    }
}

/// Idle connections, taken by one command at a time. A connection that saw
/// an I/O error or a timeout is dropped (its reply may still arrive, and
/// would answer the next command); a fresh one is opened when none is idle.
pub(crate) struct Pool {
    servers: Servers,
    idle: Mutex<Vec<Conn>>,
    timeout: Duration,
}

impl Pool {
    pub(crate) fn new(servers: Servers, timeout: Duration) -> Pool {
        Pool {
            servers,
            idle: Mutex::new(Vec::new()),
            timeout,
        }
    }

    /// Runs `cmd`, its connect, send and reply together within the
    /// timeout. (A cluster's connection is made of several steps, each
    /// bounded by the timeout: a node, its slot map, each master.)
    pub(crate) fn run(&self, cmd: &redis::Cmd) -> RedisResult<Value> {
        let deadline = Instant::now() + self.timeout;
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut conn = match idle {
            Some(c) => c,
            None => self.servers.connect(self.timeout)?,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        conn.set_timeouts(left)?;
        let reply = conn.query(cmd);
        let reusable = match &reply {
            Ok(_) => true,
            // An error reply (ERR, WRONGTYPE) leaves the stream in step.
            Err(e) => {
                !(e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_dropped()
                    || e.kind() == ErrorKind::ClientError)
            }
        };
        if reusable {
            self.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
        }
        reply
    }
}

fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the connection took the whole timeout",
    ))
}

/// A cluster node's connection whose timeout ends the command. redis-rs's
/// cluster connection sends a command again at once after an I/O timeout;
/// but the first may have reached the server and counted, and the second
/// would wait another whole timeout. Reported as a client error instead,
/// which it does not retry (the pool then drops the connection).
pub(crate) struct Node(Connection);

fn final_timeout(e: RedisError) -> RedisError {
    if e.is_timeout() {
        RedisError::from((
            ErrorKind::ClientError,
            "no reply within the timeout",
            e.to_string(),
        ))
    } else {
        e
    }
}

impl ConnectionLike for Node {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.0.req_packed_command(cmd).map_err(final_timeout)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.0
            .req_packed_commands(cmd, offset, count)
            .map_err(final_timeout)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.0.check_connection()
    }

    fn is_open(&self) -> bool {
        self.0.is_open()
    }
}

impl Connect for Node {
    fn connect<T: IntoConnectionInfo>(info: T, timeout: Option<Duration>) -> RedisResult<Node> {
        <Connection as Connect>::connect(info, timeout).map(Node)
    }

    fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        self.0.send_packed_command(cmd).map_err(final_timeout)
    }

    fn set_write_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        self.0.set_write_timeout(dur)
    }

    fn set_read_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        self.0.set_read_timeout(dur)
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        self.0.recv_response().map_err(final_timeout)
    }
}

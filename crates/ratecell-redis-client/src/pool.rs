//! Connections to Redis, each command bounded by the limiter's timeout.

use redis::{Client, Connection, RedisError, RedisResult, Value};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Idle connections, taken by one command at a time. A connection that saw
/// an I/O error or a timeout is dropped (its reply may still arrive, and
/// would answer the next command); a fresh one is opened when none is idle.
pub(crate) struct Pool {
    client: Client,
    idle: Mutex<Vec<Connection>>,
    timeout: Duration,
}

impl Pool {
    pub(crate) fn new(client: Client, timeout: Duration) -> Pool {
        Pool {
            client,
            idle: Mutex::new(Vec::new()),
            timeout,
        }
    }

    /// Runs `cmd`, its connect, send and reply together within the
    /// timeout.
    pub(crate) fn run(&self, cmd: &redis::Cmd) -> RedisResult<Value> {
        let deadline = Instant::now() + self.timeout;
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut conn = match idle {
            Some(c) => c,
            None => self.client.get_connection_with_timeout(self.timeout)?,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        conn.set_read_timeout(Some(left))?;
        conn.set_write_timeout(Some(left))?;
        let reply = cmd.query::<Value>(&mut conn);
        let reusable = match &reply {
            Ok(_) => true,
            // An error reply (ERR, WRONGTYPE) leaves the stream in step.
            Err(e) => !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped()),
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

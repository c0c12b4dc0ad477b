//! Waiting for admission: the blocking `acquire` shared by the direct and
//! keyed limiters, and why it gives up ([`AcquireError`]).

use crate::check::decision::Decision;
use crate::clock::Clock;
use std::fmt;
use std::time::{Duration, Instant};

/// Why [`Limiter::acquire`](crate::Limiter::acquire) gave up. Each carries the last decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireError {
    /// The request would not be admitted (or, for the leaky bucket, would
    /// not leave the queue) before the time-out.
    TimedOut(Decision),
    /// The cost exceeds the limit: no wait would ever admit it.
    Unsatisfiable(Decision),
}

impl AcquireError {
    /// The last decision made before giving up.
    pub fn decision(&self) -> Decision {
        match *self {
            AcquireError::TimedOut(d) | AcquireError::Unsatisfiable(d) => d,
        }
    }
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::TimedOut(d) => write!(
                f,
                "timed out: the request would be admitted in {} ns",
                d.retry_after_ns
            ),
            AcquireError::Unsatisfiable(d) => {
                write!(
                    f,
                    "the cost exceeds the limit ({}): never admitted",
                    d.limit
                )
            }
        }
    }
}

impl std::error::Error for AcquireError {}

/// The blocking acquire shared by the direct and keyed limiters.
///
/// `decide(t, max_wait)` makes one real check at `t`, refusing a queue place
/// whose wait exceeds `max_wait`; it returns the decision and whether it was
/// taken. The deadline is kept in real (monotonic) time, so a limiter on a
/// manual clock cannot make the call hang.
pub(crate) fn acquire(
    clock: &Clock,
    timeout: Duration,
    decide: impl Fn(u64, u64) -> (Decision, bool),
) -> Result<Decision, AcquireError> {
    let started = Instant::now();
    loop {
        let budget = timeout.saturating_sub(started.elapsed());
        let budget_ns = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
        let (mut decision, taken) = decide(clock.now_ns(), budget_ns);
        if decision.allowed && taken {
            if decision.wait_ns > 0 {
                std::thread::sleep(Duration::from_nanos(decision.wait_ns));
            }
            return Ok(decision);
        }
        if decision.allowed {
            // A leaky bucket place we could not wait for: retry when the
            // queue has drained enough for the wait to fit.
            decision.allowed = false;
            decision.retry_after_ns = decision.wait_ns - budget_ns;
            decision.wait_ns = 0;
        }
        if decision.retry_after_ns == u64::MAX {
            return Err(AcquireError::Unsatisfiable(decision));
        }
        if u128::from(decision.retry_after_ns) > budget.as_nanos() {
            return Err(AcquireError::TimedOut(decision));
        }
        std::thread::sleep(Duration::from_nanos(decision.retry_after_ns));
    }
}

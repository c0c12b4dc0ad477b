//! Waiting for admission as a future: checks, and while refused sleeps on a
//! runtime-agnostic timer until the refusing limits say the same request
//! would pass. No thread is blocked, and any executor can poll it.

use std::time::{Duration, Instant};

use crate::fields::{self, LimitDecision};
use crate::limits::RateLimits;

/// Resolves when a request of `cost` units for `key` is admitted by every
/// limit (and, for a leaky bucket, when its turn in the queue has come), or
/// fails with the last decisions once admission cannot come within
/// `timeout` (including when the cost exceeds a limit: it never can).
///
/// Sleeps with `futures-timer`, which runs its own timer thread, so it works
/// under tokio, async-std, smol or `futures::executor` alike.
pub async fn acquire<L>(
    limits: &L,
    key: &[u8],
    cost: u64,
    timeout: Duration,
) -> Result<Vec<LimitDecision>, Vec<LimitDecision>>
where
    L: RateLimits + ?Sized,
{
    let start = Instant::now();
    loop {
        let items = limits.check(key, cost);
        if fields::admitted(&items) {
            let wait = items.iter().map(|i| i.decision.wait_ns).max().unwrap_or(0);
            if wait > 0 {
                futures_timer::Delay::new(Duration::from_nanos(wait)).await;
            }
            return Ok(items);
        }
        let retry = items
            .iter()
            .filter(|i| !i.decision.allowed)
            .map(|i| i.decision.retry_after_ns)
            .max()
            .unwrap_or(0);
        if retry == u64::MAX {
            return Err(items);
        }
        let retry = Duration::from_nanos(retry);
        if start.elapsed().saturating_add(retry) > timeout {
            return Err(items);
        }
        futures_timer::Delay::new(retry).await;
    }
}

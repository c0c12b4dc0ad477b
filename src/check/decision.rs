//! The answer to one request ([SPEC §3](crate::spec#3-requests-and-decisions)).

use std::time::Duration;

/// What the limiter decided for one request, and what the caller may do next.
///
/// All durations are nanoseconds relative to the request's time `t`, and
/// saturate at `u64::MAX` (which `retry_after_ns` also uses for "never").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the request was admitted (for a peek: whether a cost-1
    /// request would be).
    pub allowed: bool,
    /// The burst for GCRA, leaky bucket and token bucket; the limit for the
    /// window and log algorithms.
    pub limit: u64,
    /// Cost-1 requests that would be admitted at `t`, after this decision.
    pub remaining: u64,
    /// 0 when admitted; otherwise the least wait after which this same
    /// request would be admitted if nothing else arrives; `u64::MAX` when it
    /// never can (its cost exceeds the limit).
    pub retry_after_ns: u64,
    /// Time until the state is fresh again (`remaining == limit`); 0 if it is.
    pub reset_after_ns: u64,
    /// Leaky bucket only: how long an admitted request waits for its turn in
    /// the queue before it may act. 0 for every other algorithm.
    pub wait_ns: u64,
}

impl Decision {
    /// Denied, and never admitted: the decision of a request no limit of
    /// the limiter can judge (a [`crate::Tier`] the limiter does not have).
    pub const NEVER: Decision = Decision {
        allowed: false,
        limit: 0,
        remaining: 0,
        retry_after_ns: u64::MAX,
        reset_after_ns: 0,
        wait_ns: 0,
    };

    /// `retry_after_ns` as a [`Duration`] (`None` when the request can never
    /// be admitted).
    pub fn retry_after(&self) -> Option<Duration> {
        (self.retry_after_ns != u64::MAX).then(|| Duration::from_nanos(self.retry_after_ns))
    }

    /// `reset_after_ns` as a [`Duration`].
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_ns)
    }

    /// `wait_ns` as a [`Duration`].
    pub fn wait(&self) -> Duration {
        Duration::from_nanos(self.wait_ns)
    }
}

/// Narrows an exact 128-bit duration to the `u64` the decision carries.
#[inline]
pub(crate) fn saturate(ns: u128) -> u64 {
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// A decision as six words, for one an out-of-line call returns
/// (`Engine::decision` in `limiter.rs` says why the call is out of line;
/// the keyed check's slow paths, `WordTable::check_beyond_home` and
/// `KeyedLimiter::composite_decision`, return theirs so too).
/// Every byte is written and read as part of a `u64`: a `Decision` comes
/// back through memory, its `bool` stored as one byte beside seven of
/// padding, and the caller's 16-byte copy over the callee's narrower
/// stores failed store-to-load forwarding.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Words(pub(crate) [u64; 6]);

impl Words {
    #[inline(always)]
    pub(crate) fn of(d: Decision) -> Words {
        Words([
            u64::from(d.allowed),
            d.limit,
            d.remaining,
            d.retry_after_ns,
            d.reset_after_ns,
            d.wait_ns,
        ])
    }

    /// The decision, built field by field so the compiler keeps it in
    /// registers.
    #[inline(always)]
    pub(crate) fn decision(self) -> Decision {
        let [
            allowed,
            limit,
            remaining,
            retry_after_ns,
            reset_after_ns,
            wait_ns,
        ] = self.0;
        Decision {
            allowed: allowed != 0,
            limit,
            remaining,
            retry_after_ns,
            reset_after_ns,
            wait_ns,
        }
    }
}

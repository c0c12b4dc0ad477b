//! The process-wide allocator of counter stripes: each thread that checks
//! holds one stripe index, the same in every limiter, for as long as it
//! lives, so its counter bumps are plain stores to a line no other thread
//! writes.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Stripes of per-check counters with one writer each: more than the cores
/// of most machines that run one process, few enough to sum quickly.
pub(crate) const STRIPES: usize = 16;

/// The stripe every thread without one of its own bumps, atomically.
pub(crate) const SHARED: usize = STRIPES;

/// Which stripes threads hold now, one bit each, across every limiter (a
/// thread's stripe has the same index in all of them).
static HELD: AtomicU32 = AtomicU32::new(0);

/// A thread's stripe, given back when the thread exits.
struct Stripe(usize);

impl Stripe {
    /// The lowest free stripe, or the shared one when all are held.
    fn take() -> Stripe {
        let mut held = HELD.load(Relaxed);
        loop {
            let free = (!held).trailing_zeros() as usize;
            if free >= STRIPES {
                return Stripe(SHARED);
            }
            // Acquire: the counts the stripe's last holder stored.
            match HELD.compare_exchange_weak(held, held | 1 << free, Acquire, Relaxed) {
                Ok(_) => return Stripe(free),
                Err(now) => held = now,
            }
        }
    }
}

impl Drop for Stripe {
    fn drop(&mut self) {
        if self.0 != SHARED {
            // Release: hands this thread's last counts to the next holder.
            HELD.fetch_and(!(1 << self.0), Release);
        }
    }
}

/// This thread's stripe: taken on first use, the shared one while the
/// thread is exiting.
#[inline]
pub(crate) fn stripe() -> usize {
    thread_local! {
        static STRIPE: Stripe = Stripe::take();
    }
    STRIPE.try_with(|s| s.0).unwrap_or(SHARED)
}

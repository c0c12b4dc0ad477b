//! The process-wide allocator of statistics stripes (`crate::stats`):
//! each thread that checks holds one stripe index, the same in every
//! limiter, for as long as it lives, so its counter bumps are plain stores
//! to a line no other thread writes.
//!
//! A stripe changes hands only through the word of held stripes: its
//! holder's exit clears the stripe's bit with a release, and the next
//! holder sets it with an acquire, so the counts the old holder stored are
//! the ones the new one loads and adds to.
//!
//! Here, in `sync`, because the word and the thread-local that holds a
//! thread's stripe are the one switch of this protocol to loom: under
//! loom, the models of it (`tests/loom_stats.rs`) ask for it with
//! `loom_hooks::model_stripes`, and the same code then runs on a loom
//! word, a loom thread-local and loom counters ([`super::StripeU64`]).
//! Every other model keeps the processor's, as a build without loom does:
//! the stripes order nothing they check, and would multiply their
//! executions a hundredfold. `crate::stats` and the fork barrier
//! (`crate::cell::fork`) read [`stripe`], [`STRIPES`] and [`SHARED`].

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{self, Acquire, Relaxed, Release};

/// Stripes of per-check counters with one writer each: more than the cores
/// of most machines that run one process, few enough to sum quickly.
#[cfg(not(ratecell_loom))]
pub(crate) const STRIPES: usize = 16;

/// One stripe under loom: in a model of three threads, the second finds it
/// held or takes it over from a thread that exited, and two can share the
/// shared one.
#[cfg(ratecell_loom)]
pub(crate) const STRIPES: usize = 1;

const _: () = assert!(STRIPES <= 32, "one bit per stripe in a u32");

/// The stripe every thread without one of its own bumps, atomically.
pub(crate) const SHARED: usize = STRIPES;

/// Which stripes threads hold now, one bit each, across every limiter (a
/// thread's stripe has the same index in all of them).
static HELD: AtomicU32 = AtomicU32::new(0);

/// The word of held stripes, as a stripe sees it: [`HELD`], or under loom
/// each execution's own.
trait Held {
    fn load(&self, order: Ordering) -> u32;
    fn compare_exchange_weak(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32>;
    fn fetch_and(&self, bits: u32, order: Ordering) -> u32;
}

impl Held for &'static AtomicU32 {
    fn load(&self, order: Ordering) -> u32 {
        AtomicU32::load(self, order)
    }
    fn compare_exchange_weak(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32> {
        AtomicU32::compare_exchange_weak(self, current, new, success, failure)
    }
    fn fetch_and(&self, bits: u32, order: Ordering) -> u32 {
        AtomicU32::fetch_and(self, bits, order)
    }
}

/// A thread's stripe, given back when the thread exits.
struct Stripe<W: Held> {
    index: usize,
    held: W,
}

impl<W: Held> Stripe<W> {
    /// The lowest free stripe, or the shared one when all are held.
    fn take(held: W) -> Self {
        let mut now = held.load(Relaxed);
        let index = loop {
            let free = (!now).trailing_zeros() as usize;
            if free >= STRIPES {
                break SHARED;
            }
            // Acquire: the counts the stripe's last holder stored.
            match held.compare_exchange_weak(now, now | 1 << free, Acquire, Relaxed) {
                Ok(_) => break free,
                Err(found) => now = found,
            }
        };
        Stripe { index, held }
    }
}

impl<W: Held> Drop for Stripe<W> {
    fn drop(&mut self) {
        if self.index != SHARED {
            // Release: hands this thread's last counts to the next holder.
            self.held.fetch_and(!(1 << self.index), Release);
        }
    }
}

/// This thread's stripe: taken on first use, the shared one while the
/// thread is exiting.
#[inline]
pub(crate) fn stripe() -> usize {
    #[cfg(ratecell_loom)]
    if modelled() {
        return loom_model::stripe();
    }
    std::thread_local! {
        static STRIPE: Stripe<&'static AtomicU32> = Stripe::take(&HELD);
    }
    STRIPE.try_with(|s| s.index).unwrap_or(SHARED)
}

#[cfg(ratecell_loom)]
use super::stripes_modelled as modelled;

#[cfg(ratecell_loom)]
pub(crate) use loom_model::stripes_held;

/// The stripes on loom's word and thread-local.
#[cfg(ratecell_loom)]
mod loom_model {
    use super::{Held, SHARED, Stripe};
    use loom::sync::atomic::AtomicU32;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    // loom makes its statics anew for each execution, and drops them when
    // the model's main closure returns, before the threads' thread-locals
    // (ours among them): each stripe keeps a handle to the word it gives
    // its bit back to.
    loom::lazy_static! {
        static ref HELD: Arc<AtomicU32> = Arc::new(AtomicU32::new(0));
    }

    impl Held for Arc<AtomicU32> {
        fn load(&self, order: Ordering) -> u32 {
            AtomicU32::load(self, order)
        }
        fn compare_exchange_weak(
            &self,
            current: u32,
            new: u32,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u32, u32> {
            AtomicU32::compare_exchange_weak(self, current, new, success, failure)
        }
        fn fetch_and(&self, bits: u32, order: Ordering) -> u32 {
            AtomicU32::fetch_and(self, bits, order)
        }
    }

    pub(super) fn stripe() -> usize {
        loom::thread_local! {
            static STRIPE: Stripe<Arc<AtomicU32>> = Stripe::take(HELD.clone());
        }
        STRIPE.try_with(|s| s.index).unwrap_or(SHARED)
    }

    /// The word of held stripes now (the models check that every stripe
    /// is given back).
    pub(crate) fn stripes_held() -> u32 {
        HELD.load(Ordering::Relaxed)
    }
}

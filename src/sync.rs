//! The one place atomics come from.
//!
//! Under `cfg(loom)` every atomic the cells and tables use is loom's, so the
//! model checker sees each load, CAS and store; otherwise they are the
//! processor's. Nothing outside this module names `core::sync::atomic`,
//! `portable_atomic` or `loom` directly.
//!
//! loom has no 128-bit atomic. Under loom, [`AtomicU128`] is a word behind a
//! `loom::sync::Mutex`: every load and compare-exchange is one indivisible
//! step that loom schedules around, which is exactly the guarantee
//! `lock cmpxchg16b` gives. Only the memory-ordering argument is not modelled
//! for that type (the mutex is stronger than any ordering we ask for), which
//! is why no protocol in this crate publishes other data through a 128-bit
//! word: two-word states are self-contained.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use portable_atomic::AtomicU128;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

/// Backs off inside a CAS retry loop or while a latch is held elsewhere.
///
/// Under loom this yields, so the checker can run the thread we are waiting
/// for; otherwise it is the processor's pause hint.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Gives the processor away while a latch holder is descheduled.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// A 128-bit atomic for loom: one mutex-protected word (see the module doc).
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

#[cfg(loom)]
impl AtomicU128 {
    pub(crate) fn new(value: u128) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    pub(crate) fn load(&self, _order: Ordering) -> u128 {
        *self.0.lock().unwrap()
    }

    pub(crate) fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        _success: Ordering,
        _failure: Ordering,
    ) -> Result<u128, u128> {
        let mut word = self.0.lock().unwrap();
        if *word == current {
            *word = new;
            Ok(current)
        } else {
            Err(*word)
        }
    }
}

/// Statistics counters: always the processor's atomics, even under loom.
/// They count events and order nothing, so the model checker need not
/// explore them (it would only multiply the interleavings).
pub(crate) use std::sync::atomic::AtomicU64 as CounterU64;

/// The pointer a live reconfiguration swaps (`crate::live`).
#[cfg(not(loom))]
pub(crate) use core::sync::atomic::AtomicPtr;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicPtr;

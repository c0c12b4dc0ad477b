//! The fork barrier: a child made by `fork()` never inherits a per-key
//! latch (`cell::latch`, the block algorithms' headers) that another thread
//! of its parent held.
//!
//! A per-key latch is held across several writes of a block (bucketed
//! window, sliding log), and its header has no room to say who holds it. A
//! child inherits memory but only the thread that forked: a latch held by
//! any other thread at that instant would stay held in the child forever,
//! and the block behind it might be half written. So instead of recovering
//! such a latch in the child, fork waits until none is held:
//!
//! - every taker of a per-key latch first counts itself *in flight* on its
//!   thread's stripe (`stats::stripe`, one cache line per thread), then
//!   reads [`FORKING`]; if a fork is under way it uncounts itself and waits
//!   for the fork to end before trying again;
//! - a `pthread_atfork` prepare handler (run in the forking thread, before
//!   the fork) raises [`FORKING`], then waits until every stripe reads 0;
//!   the parent handler lowers it; the child handler zeroes every stripe
//!   (their threads do not exist there) and lowers it.
//!
//! The count and the flag form a Dekker pair, both sides `SeqCst`: either
//! the taker reads the flag raised (and stays out), or the forker reads the
//! taker's count (and waits for its release). A thread that forks is never
//! itself inside a latch (nothing under a latch calls out), so the prepare
//! handler never waits for itself; `fork()` from a signal handler that
//! interrupted a latch holder is out of scope (it is not async-signal-safe
//! with any atfork handler). Nothing under a per-key latch waits for
//! anything but the CPU, so the wait ends.
//!
//! Cost: one `SeqCst` RMW on the thread's own line and one load of a line
//! only forks write, per latch taken; the release is a plain store (the
//! stripe has one writer) or, on the shared stripe, a `fetch_sub`. The word
//! algorithms never take a per-key latch and pay nothing. A shard's insert
//! latch is not counted: it records its holder and is taken over in the
//! child (`cell::latch_recording`), and it is held while a per-key latch is
//! awaited, so counting it could make the two wait for each other.
//!
//! The counters are the processor's atomics even under loom (like the
//! statistics): the models never fork, and `enter`/`leave` do nothing there.
//!
//! The alternative, a holder word per block and a takeover in the child
//! that marks the block spent, costs a word per key and a write per check,
//! and still needs a rule for "latched but the holder not yet written";
//! waiting out the latches before a fork needs neither.

#![cfg_attr(ratecell_loom, allow(dead_code))]

use crate::stats::{SHARED_STRIPE, STRIPES, stripe};
use crossbeam_utils::CachePadded;
use std::sync::Once;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// Per-key latches held (or being taken) by the threads of each stripe;
/// the last one is the shared stripe of threads beyond [`STRIPES`].
static IN_FLIGHT: [CachePadded<AtomicU64>; STRIPES + 1] =
    [const { CachePadded::new(AtomicU64::new(0)) }; STRIPES + 1];

/// Forks under way in this process (several threads may fork at once).
static FORKING: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));

/// Installs the fork handlers, once per process; called by every
/// constructor of a block of latched words, so no per-key latch is taken
/// before they are in place.
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(unix)]
        // SAFETY: the handlers touch only atomics (the child's only stores,
        // which are async-signal-safe) and the prepare one spins and yields.
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
        }
    });
}

/// A per-key latch's place in the barrier: the stripe it was counted on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InFlight(usize);

/// Counts a per-key latch about to be taken; waits while a fork is under
/// way. The caller must [`leave`] once the latch is released (or not taken).
#[inline]
pub(crate) fn enter() -> InFlight {
    if cfg!(ratecell_loom) {
        // The models never fork; the latch protocol they check is unchanged.
        return InFlight(0);
    }
    let s = stripe();
    let slot = &IN_FLIGHT[s];
    loop {
        // SeqCst on both: the Dekker pair with `prepare` (module doc).
        slot.fetch_add(1, SeqCst);
        if FORKING.load(SeqCst) == 0 {
            return InFlight(s);
        }
        slot.fetch_sub(1, Release);
        wait_for_fork();
    }
}

/// Uncounts a latch counted by [`enter`], after its release (Release: the
/// block's writes and the header's release come before the count the
/// forker reads).
#[inline]
pub(crate) fn leave(entry: InFlight) {
    if cfg!(ratecell_loom) {
        return;
    }
    let slot = &IN_FLIGHT[entry.0];
    if entry.0 == SHARED_STRIPE {
        slot.fetch_sub(1, Release);
    } else {
        // One writer (this thread, the stripe's holder): a plain store.
        slot.store(slot.load(Relaxed) - 1, Release);
    }
}

#[cold]
fn wait_for_fork() {
    while FORKING.load(Acquire) != 0 {
        std::thread::yield_now();
    }
}

#[cfg(unix)]
extern "C" fn prepare() {
    FORKING.fetch_add(1, SeqCst);
    for slot in &IN_FLIGHT {
        let mut spins = 0u32;
        while slot.load(SeqCst) != 0 {
            spins = spins.saturating_add(1);
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(unix)]
extern "C" fn parent() {
    FORKING.fetch_sub(1, Release);
}

#[cfg(unix)]
extern "C" fn child() {
    // Only the forking thread exists here, and it held no latch: counts
    // left on the stripes are other threads' backing out of a latch they
    // never took, and the other forks under way are the parent's.
    for slot in &IN_FLIGHT {
        slot.store(0, Relaxed);
    }
    FORKING.store(0, Release);
}

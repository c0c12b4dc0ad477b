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
//!   thread's stripe (`sync::stripes`, one cache line per thread), then
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
//! A direct limiter's block (`cell::BlockCell`, one per limiter, not per
//! key) is not counted: its header is registered here when the block is
//! made, and the prepare handler takes every registered latch itself (so
//! none is held by another thread across the fork, and every block is
//! whole), releasing them in both parent and child. Counting would put a
//! store and a load on every latched check for an event (a fork) that
//! almost never happens.
//!
//! The alternative, a holder word per block and a takeover in the child
//! that marks the block spent, costs a word per key and a write per check,
//! and still needs a rule for "latched but the holder not yet written";
//! waiting out the latches before a fork needs neither.

use crate::stats::{SHARED_STRIPE, STRIPES, stripe};
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::sync::Once;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU64};

/// The latch bit of a header word; the other bits belong to the owner (a
/// keyed table keeps its fingerprint there). The barrier owns it: its
/// prepare handler takes the latches the cells take.
pub(crate) const LATCHED: u64 = 1 << 63;

/// Per-key latches held (or being taken) by the threads of each stripe;
/// the last one is the shared stripe of threads beyond [`STRIPES`].
static IN_FLIGHT: [CachePadded<AtomicU64>; STRIPES + 1] =
    [const { CachePadded::new(AtomicU64::new(0)) }; STRIPES + 1];

/// Forks under way in this process (several threads may fork at once).
static FORKING: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));

/// The direct blocks' latch headers (addresses of `AtomicU64`s that stay
/// put until unregistered), behind a spin lock the prepare handler holds
/// until the fork is over: no block is registered or dropped meanwhile.
struct Direct {
    locked: AtomicBool,
    headers: UnsafeCell<Vec<usize>>,
}

// SAFETY: `headers` is only touched by the holder of `locked` (taken with
// Acquire, released with Release), so one thread at a time.
unsafe impl Sync for Direct {}

static DIRECT: Direct = Direct {
    locked: AtomicBool::new(false),
    headers: UnsafeCell::new(Vec::new()),
};

fn lock_direct() {
    while DIRECT
        .locked
        .compare_exchange_weak(false, true, Acquire, Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
}

fn unlock_direct() {
    DIRECT.locked.store(false, Release);
}

/// Runs `f` on the registered headers under the lock.
fn with_direct<R>(f: impl FnOnce(&mut Vec<usize>) -> R) -> R {
    lock_direct();
    // SAFETY: the lock is held (see `Direct`).
    let r = f(unsafe { &mut *DIRECT.headers.get() });
    unlock_direct();
    r
}

/// Registers a direct block's latch header, which must stay at its address
/// until [`unregister_direct`]; its latch is then never counted, the
/// prepare handler takes it instead. Holds the lock across a possible
/// allocation: no latch is held here, and a waiting forker only yields.
///
/// The header is the cell's `crate::sync::AtomicU64`, which is the
/// processor's [`AtomicU64`] but under loom, whose models never fork and
/// register nothing.
pub(crate) fn register_direct(header: &crate::sync::AtomicU64) {
    install();
    let at = std::ptr::from_ref(header) as usize;
    with_direct(|h| h.push(at));
}

/// Unregisters a header registered by [`register_direct`] (before it is
/// freed).
pub(crate) fn unregister_direct(header: &crate::sync::AtomicU64) {
    let at = std::ptr::from_ref(header) as usize;
    with_direct(|h| {
        if let Some(i) = h.iter().position(|&a| a == at) {
            h.swap_remove(i);
        }
        if h.is_empty() {
            // Frees the list with the last block: a process whose limiters
            // are all gone holds nothing of theirs (ffi_fuzz counts every
            // allocation still live at its end).
            *h = Vec::new();
        }
    });
}

/// Takes every registered direct latch (the lock held), waiting for its
/// holder: nothing under a direct block's latch waits for anything but
/// the CPU.
#[cfg(unix)]
fn latch_all_direct() {
    lock_direct();
    // SAFETY: the lock was just taken, and is held until
    // `release_all_direct`.
    unsafe {
        for_each_direct(|header| {
            spin_until(|| {
                header
                    .compare_exchange_weak(0, LATCHED, Acquire, Relaxed)
                    .is_ok()
            });
        });
    }
}

/// Runs `f` on every registered header.
///
/// # Safety
/// The caller holds the lock (`lock_direct`): `headers` is then this
/// thread's alone, and every address in it is a live header, since
/// unregistering (before a header is freed) needs that lock too.
#[cfg(unix)]
unsafe fn for_each_direct(mut f: impl FnMut(&AtomicU64)) {
    // SAFETY: the caller's contract.
    let headers = unsafe { &*DIRECT.headers.get() };
    for &at in headers {
        // SAFETY: the caller's contract: a registered, live header.
        f(unsafe { &*(at as *const AtomicU64) });
    }
}

/// Waits until `done`: spinning a little (a latch is held for a check,
/// well under a microsecond), then giving the core away (its holder may
/// be descheduled).
#[cfg(unix)]
fn spin_until(mut done: impl FnMut() -> bool) {
    let mut spins = 0u32;
    while !done() {
        spins = spins.saturating_add(1);
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Releases what [`latch_all_direct`] took, then the lock.
#[cfg(unix)]
fn release_all_direct() {
    // SAFETY: the lock is held since `latch_all_direct`.
    unsafe { for_each_direct(|header| header.store(0, Release)) };
    unlock_direct();
}

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
    if crate::sync::UNDER_LOOM {
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
    if crate::sync::UNDER_LOOM {
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
    latch_all_direct();
    FORKING.fetch_add(1, SeqCst);
    for slot in &IN_FLIGHT {
        spin_until(|| slot.load(SeqCst) == 0);
    }
}

#[cfg(unix)]
extern "C" fn parent() {
    FORKING.fetch_sub(1, Release);
    release_all_direct();
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
    release_all_direct();
}

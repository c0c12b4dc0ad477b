//! Where the atomics and locks that the loom models check come from: the
//! words of the cells and tables, the latches, the pointer a live
//! reconfiguration swaps, the lease store's locks, the statistics' stripes
//! (`stripes`) and the counters beside them.
//!
//! Under `cfg(ratecell_loom)` each of these is loom's, so the model checker
//! sees each load, CAS and store; otherwise they are the processor's (and
//! std's locks). This module is the one switch to loom: nothing outside it
//! names `portable_atomic` or loom, and library code outside it tests no
//! `cfg(ratecell_loom)`. Code that must act otherwise under loom (a shared
//! region refused, a fixed hash key, memory allocated item by item) reads
//! [`UNDER_LOOM`], a constant, so both builds compile the same code and
//! the branch not taken folds away; a racing branch calls [`saw`], which
//! is empty without loom. The exceptions are the test hooks
//! (`crate::loom_hooks`), and the `snapshot` module with what reaches it
//! (the snapshot terminals of `crate::Builder`, `AnyLimiter`'s save),
//! compiled out under loom in `lib.rs`, `builder.rs` and `any.rs`: no
//! model saves or restores.
//!
//! What no model checks names `std::sync::atomic` where it is, and stays
//! the processor's under loom: process-wide words such as the clocks'
//! stored times, the fork barrier's counts, a latch holder's records,
//! snapshot and shared-region bookkeeping. The statistics' stripes are
//! between the two: their word and counters come from here, switched by
//! `model_stripes`, and only the stripes' own models
//! (`tests/loom_stats.rs`) check them (`stripes` says why).
//!
//! loom has no 128-bit atomic. Under loom, [`AtomicU128`] is a loom
//! `AtomicU64` holding the index of its value in a table of every value the
//! word has held or been compared with (a value's index never changes, so
//! two values are equal exactly when their indices are). Each load and
//! compare-exchange of the 128-bit word is then one load or CAS of a loom
//! atomic, with the ordering the code asked for: loom explores the stale
//! values a `Relaxed` load may return and creates no happens-before edge
//! the orderings do not, as for the 64-bit words. (A mutex in its place
//! would make every access an acquire and a release, and hide a missing
//! ordering.) The value table is plain memory, not modelled: it only maps
//! indices to values, and an index is published by the loom atomic.

pub(crate) mod stripes;

/// Whether this build runs under loom's model checker. Code outside this
/// module branches on it instead of testing `cfg(ratecell_loom)`.
pub(crate) const UNDER_LOOM: bool = cfg!(ratecell_loom);

#[cfg(not(ratecell_loom))]
pub(crate) use core::sync::atomic::{AtomicU64, Ordering};

/// The 128-bit word of a direct limiter's single-limit state (token
/// bucket, fixed and sliding window): portable-atomic's, whose load and CAS
/// are calls. Not [`SlotU128`]: inline, the two operations' feature test
/// and fallback call make the cell's check too big for the inliner, whose
/// decision then comes back through memory.
#[cfg(not(ratecell_loom))]
pub(crate) use portable_atomic::AtomicU128;

/// The 128-bit word of a keyed table's slot, and of a direct limiter's
/// two limits in one word: on x86-64 ratecell's own, its load and CAS
/// inline (`x86_64` says how), of the same layout and operations as
/// [`AtomicU128`]. Both checks are out of line anyway (the table's; the
/// two limits' one copy per pair of rules, too large for the inliner), so
/// the size costs nothing there, and the two calls, their spills and the
/// CAS's result through memory go; elsewhere, and under Miri (which runs
/// no inline assembly), portable-atomic's.
#[cfg(all(target_arch = "x86_64", not(ratecell_loom), not(miri)))]
pub(crate) use x86_64::AtomicU128 as SlotU128;

#[cfg(all(target_arch = "x86_64", not(ratecell_loom), not(miri)))]
mod x86_64;

#[cfg(not(any(all(target_arch = "x86_64", not(miri)), ratecell_loom)))]
pub(crate) use portable_atomic::AtomicU128 as SlotU128;

/// Under loom, the model type for both.
#[cfg(ratecell_loom)]
pub(crate) use AtomicU128 as SlotU128;

/// What the cells do with a 128-bit word, for each distinct 128-bit type
/// here ([`AtomicU128`], and [`SlotU128`] where it is a type of its own),
/// so that `crate::cell` implements its word once for every one of them
/// without knowing which exist in this build.
pub(crate) trait Word128: Sized + Send + Sync {
    fn new(value: u128) -> Self;
    fn load(&self, order: Ordering) -> u128;
    fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128>;
}

/// Implements [`Word128`] by the type's own methods of the same names.
macro_rules! word128 {
    ($word:ty) => {
        impl Word128 for $word {
            #[inline]
            fn new(value: u128) -> Self {
                <$word>::new(value)
            }
            #[inline]
            fn load(&self, order: Ordering) -> u128 {
                <$word>::load(self, order)
            }
            #[inline]
            fn compare_exchange_weak(
                &self,
                current: u128,
                new: u128,
                success: Ordering,
                failure: Ordering,
            ) -> Result<u128, u128> {
                <$word>::compare_exchange_weak(self, current, new, success, failure)
            }
        }
    };
}

word128!(AtomicU128);
#[cfg(all(target_arch = "x86_64", not(ratecell_loom), not(miri)))]
word128!(SlotU128);

/// `pub` under loom so that `loom_hooks` can name it to the models.
#[cfg(ratecell_loom)]
pub use loom::sync::atomic::{AtomicU64, Ordering};

/// Backs off inside a CAS retry loop or while a latch is held elsewhere.
///
/// Under loom this yields, so the checker can run the thread we are waiting
/// for; otherwise it is the processor's pause hint.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(ratecell_loom)]
    loom::thread::yield_now();
    #[cfg(not(ratecell_loom))]
    core::hint::spin_loop();
}

/// Called by a latch waiter on each turn it finds the latch held, with
/// how many turns it has waited. Nothing outside loom. Under loom, a waiter
/// that has found the latch held [`LOOM_WAIT_TURNS`] times ends the
/// exploration of this execution (the rest of it runs one schedule):
/// otherwise two waiters can hand the processor to each other forever while
/// the holder waits to be scheduled (a yield is not a preemption, so no
/// bound stops it), and no three-thread model on a latch would end. The
/// schedules in which waiters wait fewer turns are all still explored.
#[inline]
pub(crate) fn waited(turns: u32) {
    #[cfg(ratecell_loom)]
    if turns >= LOOM_WAIT_TURNS {
        loom::skip_branch();
    }
    let _ = turns;
}

/// See [`waited`].
#[cfg(ratecell_loom)]
const LOOM_WAIT_TURNS: u32 = 3;

/// Gives the processor away while a latch holder is descheduled.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(ratecell_loom)]
    loom::thread::yield_now();
    #[cfg(not(ratecell_loom))]
    std::thread::yield_now();
}

/// A 128-bit atomic for loom: a loom atomic index into the values the word
/// has taken (see the module doc).
#[cfg(ratecell_loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128 {
    index: AtomicU64,
    values: std::sync::Mutex<Vec<u128>>,
}

#[cfg(ratecell_loom)]
impl AtomicU128 {
    pub(crate) fn new(value: u128) -> Self {
        Self {
            index: AtomicU64::new(0),
            values: std::sync::Mutex::new(vec![value]),
        }
    }

    /// The index of `value`, added to the table if it is new.
    fn intern(&self, value: u128) -> u64 {
        let mut values = self.values.lock().unwrap();
        let i = match values.iter().position(|&v| v == value) {
            Some(i) => i,
            None => {
                values.push(value);
                values.len() - 1
            }
        };
        i as u64
    }

    fn value(&self, index: u64) -> u128 {
        self.values.lock().unwrap()[index as usize]
    }

    /// No: a model's word is a lock-guarded table (`shared` asks, and
    /// refuses a region under loom first).
    pub(crate) fn is_lock_free() -> bool {
        false
    }

    pub(crate) fn load(&self, order: Ordering) -> u128 {
        self.value(self.index.load(order))
    }

    pub(crate) fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128> {
        let (from, to) = (self.intern(current), self.intern(new));
        match self.index.compare_exchange_weak(from, to, success, failure) {
            Ok(_) => Ok(current),
            Err(found) => Err(self.value(found)),
        }
    }
}

/// Counters of table events (`stats::TableCounters`): always the
/// processor's atomics, even under loom.
/// They count events and order nothing, so the model checker need not
/// explore them (it would only multiply the interleavings).
pub(crate) use std::sync::atomic::AtomicU64 as CounterU64;

/// The per-check counters on the statistics stripes (`stripes`): the
/// processor's atomics. A stripe's counters are bumped with a plain load
/// and store by one thread at a time, and pass from one holder to the next
/// only through the word of held stripes.
#[cfg(not(ratecell_loom))]
pub(crate) use core::sync::atomic::AtomicU64 as StripeU64;

/// Under loom, loom's atomic in the models of the stripes and the
/// processor's in every other (`stripes` says why).
#[cfg(ratecell_loom)]
#[derive(Debug, Default)]
pub(crate) struct StripeU64 {
    modelled: loom::sync::atomic::AtomicU64,
    plain: std::sync::atomic::AtomicU64,
}

#[cfg(ratecell_loom)]
impl StripeU64 {
    pub(crate) fn load(&self, order: Ordering) -> u64 {
        if stripes_modelled() {
            self.modelled.load(order)
        } else {
            self.plain.load(order)
        }
    }

    pub(crate) fn store(&self, value: u64, order: Ordering) {
        if stripes_modelled() {
            self.modelled.store(value, order);
        } else {
            self.plain.store(value, order);
        }
    }

    pub(crate) fn fetch_add(&self, value: u64, order: Ordering) -> u64 {
        if stripes_modelled() {
            self.modelled.fetch_add(value, order)
        } else {
            self.plain.fetch_add(value, order)
        }
    }
}

/// The pointer a live reconfiguration swaps (`crate::policy::live`), and the
/// places of the lease store (`lease::store`).
#[cfg(not(ratecell_loom))]
pub(crate) use core::sync::atomic::AtomicPtr;

#[cfg(ratecell_loom)]
pub(crate) use loom::sync::atomic::AtomicPtr;

/// Runs `f` on the pointer an exclusively borrowed [`AtomicPtr`] holds
/// (std's `get_mut`, loom's `with_mut`: the one shape for both).
#[inline]
pub(crate) fn ptr_mut<T, R>(ptr: &mut AtomicPtr<T>, f: impl FnOnce(&mut *mut T) -> R) -> R {
    #[cfg(ratecell_loom)]
    return ptr.with_mut(f);
    #[cfg(not(ratecell_loom))]
    f(ptr.get_mut())
}

/// The locks beside lock-free paths (the lease store's insertions, a
/// lease's bookkeeping): loom's under loom, so that a model in which one
/// thread waits for a lock another holds is explored, not deadlocked (loom
/// runs a model's threads on one OS thread).
#[cfg(not(ratecell_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(ratecell_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

/// Whether this process's loom models check the statistics stripes
/// (`stripes` says why only those models do): [`StripeU64`] is then
/// loom's atomic, and the stripes' thread-local is a loom one.
#[cfg(ratecell_loom)]
static STRIPES_MODELLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, this process's loom models run the stripes on loom's
/// atomics.
#[cfg(ratecell_loom)]
pub(crate) fn model_stripes() {
    STRIPES_MODELLED.store(true, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(ratecell_loom)]
#[inline]
pub(crate) fn stripes_modelled() -> bool {
    STRIPES_MODELLED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A racing branch of the cells and tables, tallied under loom so that a
/// model that never reaches the race it is about fails instead of passing
/// vacuously (the models read the tally through `loom_hooks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Race {
    /// A CAS of a state word failed: another thread changed it since it
    /// was loaded (`cell::cas_loop_from`, the word table's fast path).
    CasLost,
    /// A key's slot or header changed owner (evicted or reset) between the
    /// lookup that found it and the update.
    Moved,
    /// An inserter found, under the shard latch, that another thread had
    /// placed the key (or evicted at a later time) since it looked.
    PlacedMeanwhile,
    /// An insert's CAS of a free or evictable place failed, or it found the
    /// place latched by a check.
    PlaceContended,
    /// A state's latch was held by another thread and had to be waited for.
    LatchBusy,
}

#[cfg(ratecell_loom)]
const RACES: usize = 5;

#[cfg(ratecell_loom)]
std::thread_local! {
    // loom runs a model's threads as coroutines on the test's own OS
    // thread, so one counter per test thread sees all of a model's.
    static SEEN: [std::cell::Cell<u64>; RACES] = Default::default();
}

/// Counts one taking of `race`'s branch (under loom; otherwise nothing).
#[inline(always)]
pub fn saw(race: Race) {
    #[cfg(ratecell_loom)]
    SEEN.with(|seen| seen[race as usize].set(seen[race as usize].get() + 1));
    let _ = race;
}

/// How often `race`'s branch was taken on this thread since [`clear`].
#[cfg(ratecell_loom)]
pub fn seen(race: Race) -> u64 {
    SEEN.with(|seen| seen[race as usize].get())
}

/// Zeroes this thread's counts.
#[cfg(ratecell_loom)]
pub fn clear() {
    SEEN.with(|seen| seen.iter().for_each(|c| c.set(0)));
}

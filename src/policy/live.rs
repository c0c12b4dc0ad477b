//! Parameters that a live reconfiguration replaces while checks run: the
//! one place a limiter's algorithm parameters and configurations are
//! swapped.
//!
//! Why a pointer swap with reclamation deferred to drop: a check must see
//! the old parameters or the new ones, never a mix, and must not slow
//! down or wait for a reconfiguration. Here a check does one `Acquire`
//! load of a pointer to an immutable block and reads through it: no
//! atomic write, no retry, no thread-local. A reconfiguration publishes a
//! fully built block with one `Release` swap. The replaced block is kept
//! (not freed) until the limiter is dropped, because a check may still be
//! reading it and finding out when none is would cost every check an
//! atomic write (a reader count, an epoch pin, `arc-swap`'s debt slots).
//! The cost is memory: each reconfiguration keeps its predecessor, a few
//! hundred bytes at most, until the limiter goes; reconfiguration is an
//! operator's action, not a per-request one. A seqlock over the block was
//! the other candidate: it needs no memory but copies the block on every
//! check and, in Rust, must store it as atomic words.
//!
//! [`Live`] is a copyable handle to a [`Swap`] so a table or cell can hold
//! its algorithm by value as before; it implements the algorithm traits by
//! reading the current block, so every call is decided on one block. The
//! state layout never changes under a live handle (the reconfiguration
//! refuses a change of layout), so a state packed under the old block
//! unpacks the same under the new.

use crate::algorithm::{BlockAlgorithm, StateError, WordAlgorithm, Words};
use crate::check::decision::Decision;
use crate::sync::{AtomicPtr, Ordering};
use std::ptr::NonNull;
use std::sync::Mutex;

/// A value replaced as a whole, read without waiting.
pub(crate) struct Swap<T> {
    current: AtomicPtr<T>,
    // Replaced values, freed on drop (see the module doc); the lock also
    // serialises replacements.
    retired: Mutex<Vec<Box<T>>>,
}

impl<T> Swap<T> {
    pub(crate) fn new(value: T) -> Swap<T> {
        Swap {
            current: AtomicPtr::new(Box::into_raw(Box::new(value))),
            retired: Mutex::new(Vec::new()),
        }
    }

    /// The current value.
    #[inline]
    pub(crate) fn load(&self) -> &T {
        // SAFETY: `current` always points at a live `Box<T>`: it is only
        // replaced by another, and a replaced one is kept in `retired`
        // until `self` is dropped, which `&self` outlives. `Acquire` pairs
        // with the `Release` swap, so the block is read fully built.
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// Publishes `value`; checks that loaded the previous one finish on it.
    pub(crate) fn replace(&self, value: T) {
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        let old = self
            .current
            .swap(Box::into_raw(Box::new(value)), Ordering::AcqRel);
        // SAFETY: `old` came from `Box::into_raw` and is no longer current;
        // it is kept, not freed, until drop (readers may hold it).
        retired.push(unsafe { Box::from_raw(old) });
    }
}

impl<T> Drop for Swap<T> {
    fn drop(&mut self) {
        let current = crate::sync::ptr_mut(&mut self.current, |p| *p);
        // SAFETY: `&mut self`: no reader is left; the pointer is the
        // current live box, freed once.
        drop(unsafe { Box::from_raw(current) });
    }
}

/// A copyable handle to an algorithm's [`Swap`], owned by an [`Owner`]
/// that the limiter keeps as long as any handle is used.
pub(crate) struct Live<A: 'static> {
    swap: NonNull<Swap<A>>,
}

impl<A> Clone for Live<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Live<A> {}

// SAFETY: a handle only reads `A` through `Swap`, which is `Sync` when `A`
// is `Send + Sync` (the algorithms are plain integers).
unsafe impl<A: Send + Sync> Send for Live<A> {}
// SAFETY: as above.
unsafe impl<A: Send + Sync> Sync for Live<A> {}

impl<A: std::fmt::Debug + Send + Sync + 'static> std::fmt::Debug for Live<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// Frees a [`Swap`] that [`Live`] handles point to; kept by the limiter
/// after the cell or table holding the handles, so it is dropped last.
pub(crate) struct Owner {
    ptr: *mut (),
    free: unsafe fn(*mut ()),
}

// SAFETY: the owner only frees the `Swap` on drop; the `Swap` itself is
// `Send + Sync` for the algorithms it holds.
unsafe impl Send for Owner {}
// SAFETY: `&Owner` exposes nothing.
unsafe impl Sync for Owner {}

impl Drop for Owner {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `free` were made together in `Live::new`, and
        // an owner is dropped once.
        unsafe { (self.free)(self.ptr) }
    }
}

impl<A: Send + Sync + 'static> Live<A> {
    /// A handle and the owner that must outlive every use of it.
    pub(crate) fn new(alg: A) -> (Live<A>, Owner) {
        unsafe fn free<A>(ptr: *mut ()) {
            // SAFETY: made by `Box::into_raw` below with this `A`.
            drop(unsafe { Box::from_raw(ptr.cast::<Swap<A>>()) });
        }
        let raw = Box::into_raw(Box::new(Swap::new(alg)));
        // SAFETY: `Box::into_raw` never returns null.
        let swap = unsafe { NonNull::new_unchecked(raw) };
        let owner = Owner {
            ptr: raw.cast(),
            free: free::<A>,
        };
        (Live { swap }, owner)
    }

    /// The swap behind the handle.
    #[inline]
    pub(crate) fn swap(&self) -> &Swap<A> {
        // SAFETY: the limiter keeps the `Owner` until after every holder of
        // this handle (its cell or table) is dropped.
        unsafe { self.swap.as_ref() }
    }

    /// The current parameters.
    #[inline]
    pub(crate) fn get(&self) -> &A {
        self.swap().load()
    }
}

impl<A: WordAlgorithm> WordAlgorithm for Live<A> {
    type State = A::State;

    fn algorithm(&self) -> crate::config::Algorithm {
        self.get().algorithm()
    }

    #[inline]
    fn decide(&self, state: A::State, t: u64, n: u64) -> (Decision, Option<A::State>) {
        self.get().decide(state, t, n)
    }

    #[inline]
    fn decide_each(
        &self,
        state: A::State,
        t: u64,
        n: u64,
        each: &mut [Decision],
    ) -> (Decision, Option<A::State>) {
        self.get().decide_each(state, t, n, each)
    }

    /// The current block's concrete form: one load of the block decides
    /// the whole check, as for every other call.
    #[allow(
        clippy::inline_always,
        reason = "a transparent call, as WordAlgorithm::with_concrete"
    )]
    #[inline(always)]
    fn with_concrete<V: crate::algorithm::Visit<A::State>>(&self, visit: V) -> V::Out {
        self.get().with_concrete(visit)
    }

    #[inline]
    fn is_fresh_at(&self, state: A::State, t: u64) -> bool {
        self.get().is_fresh_at(state, t)
    }

    #[inline]
    fn fresh_after_ns(&self, state: A::State, t: u64) -> u64 {
        self.get().fresh_after_ns(state, t)
    }

    #[inline]
    fn pack(&self, state: A::State) -> u128 {
        self.get().pack(state)
    }

    #[inline]
    fn unpack(&self, word: u128) -> A::State {
        self.get().unpack(word)
    }

    fn state_bits(&self) -> u32 {
        self.get().state_bits()
    }

    fn validate(&self, state: A::State) -> Result<(), StateError> {
        self.get().validate(state)
    }
}

impl<A: BlockAlgorithm> BlockAlgorithm for Live<A> {
    fn words(&self) -> usize {
        self.get().words()
    }

    #[allow(
        clippy::inline_always,
        reason = "a transparent call: as a call of its own it returned the decision through memory once more"
    )]
    #[inline(always)]
    fn decide<W: Words + ?Sized>(&self, words: &mut W, t: u64, n: u64) -> Decision {
        self.get().decide(words, t, n)
    }

    #[allow(clippy::inline_always, reason = "as decide")]
    #[inline(always)]
    fn decide_each<W: Words + ?Sized>(
        &self,
        words: &mut W,
        t: u64,
        n: u64,
        each: &mut [Decision],
    ) -> Decision {
        self.get().decide_each(words, t, n, each)
    }

    fn is_fresh_at<W: Words + ?Sized>(&self, words: &W, t: u64) -> bool {
        self.get().is_fresh_at(words, t)
    }

    fn fresh_after_ns<W: Words + ?Sized>(&self, words: &mut W, t: u64) -> u64 {
        self.get().fresh_after_ns(words, t)
    }

    fn clear<W: Words + ?Sized>(&self, words: &mut W) {
        self.get().clear(words)
    }

    fn saved_words<W: Words + ?Sized>(&self, words: &W, each: &mut dyn FnMut(usize)) {
        self.get().saved_words(words, each)
    }

    fn validate<W: Words + ?Sized>(&self, words: &W) -> Result<(), StateError> {
        self.get().validate(words)
    }
}

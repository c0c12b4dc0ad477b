//! The one place atomics come from.
//!
//! Under `cfg(ratecell_loom)` every atomic the cells and tables use is loom's, so the
//! model checker sees each load, CAS and store; otherwise they are the
//! processor's. Nothing outside this module names `core::sync::atomic`,
//! `portable_atomic` or `loom` directly.
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

#[cfg(not(ratecell_loom))]
pub(crate) use core::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(ratecell_loom))]
pub(crate) use portable_atomic::AtomicU128;

#[cfg(ratecell_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

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

/// Whether an allocation is made resident now or as it is first used.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Residency {
    /// Write every page once at construction: a keyed table's memory is then
    /// all resident from the start, and a flood of new keys cannot grow the
    /// process.
    Now,
    /// Leave untouched pages to the kernel: a direct sliding log's ring,
    /// sized for the worst case of `limit` entries, costs memory only as
    /// it fills.
    OnUse,
}

/// Alignment of every array [`zeroed_words`] hands out: one cache line, so
/// a table's 64-byte buckets each sit on exactly one line (the global
/// allocator's `Layout::array` would give 8 or 16, leaving a bucket astride
/// two lines, of which only the first is prefetched).
#[cfg_attr(ratecell_loom, allow(dead_code))] // loom allocates its own way
pub(crate) const LINE: usize = 64;

/// A zeroed array of atomic words that starts on a cache line, and is freed
/// with the layout it was allocated with (a `Box<[T]>` would free it with
/// `T`'s own alignment, which is undefined behaviour).
pub(crate) struct AlignedWords<T> {
    #[cfg(not(ratecell_loom))]
    ptr: std::ptr::NonNull<T>,
    #[cfg(not(ratecell_loom))]
    len: usize,
    #[cfg(ratecell_loom)]
    items: Box<[T]>,
}

// SAFETY: `AlignedWords` owns its array as a `Box<[T]>` would, and the atomics in
// it are Send and Sync.
unsafe impl<T: Send> Send for AlignedWords<T> {}
// SAFETY: as above: shared access is access to `&[T]`.
unsafe impl<T: Sync> Sync for AlignedWords<T> {}

impl<T> std::ops::Deref for AlignedWords<T> {
    type Target = [T];

    #[cfg(not(ratecell_loom))]
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: ptr holds len initialised values (zeroed_slice) for as
        // long as self lives; a dangling aligned pointer when len is 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    #[cfg(ratecell_loom)]
    fn deref(&self) -> &[T] {
        &self.items
    }
}

impl<T> std::fmt::Debug for AlignedWords<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedWords({} x {} bytes)", self.len(), size_of::<T>())
    }
}

#[cfg(not(ratecell_loom))]
impl<T> AlignedWords<T> {
    /// The layout of `len` values of T at cache-line alignment; the same
    /// for allocating and freeing.
    fn layout(len: usize) -> Option<std::alloc::Layout> {
        std::alloc::Layout::array::<T>(len)
            .ok()?
            .align_to(LINE)
            .ok()
    }
}

#[cfg(not(ratecell_loom))]
impl<T> Drop for AlignedWords<T> {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        // The atomic integers callers use need no drop of their own.
        let layout = Self::layout(self.len).expect("the layout was valid when allocated");
        // SAFETY: allocated in zeroed_slice with this very layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr() as *mut u8, layout) };
    }
}

/// Allocates `len` zeroed atomic words, or reports how many bytes failed.
///
/// Outside loom this is one `alloc_zeroed` (calloc: the kernel hands back
/// zero pages, so a large table costs no time to clear), aligned to [`LINE`].
pub(crate) fn zeroed_words(
    len: usize,
    residency: Residency,
) -> Result<AlignedWords<AtomicU64>, usize> {
    zeroed_slice(len, residency, || AtomicU64::new(0))
}

/// Like [`zeroed_words`], for 128-bit words.
pub(crate) fn zeroed_wide_words(
    len: usize,
    residency: Residency,
) -> Result<AlignedWords<AtomicU128>, usize> {
    zeroed_slice(len, residency, || AtomicU128::new(0))
}

#[cfg(not(ratecell_loom))]
fn zeroed_slice<T>(
    len: usize,
    residency: Residency,
    _zero: impl Fn() -> T,
) -> Result<AlignedWords<T>, usize> {
    use std::alloc::alloc_zeroed;
    let bytes = len.saturating_mul(size_of::<T>());
    if len == 0 {
        return Ok(AlignedWords {
            ptr: std::ptr::NonNull::dangling(),
            len: 0,
        });
    }
    let layout = AlignedWords::<T>::layout(len).ok_or(bytes)?;
    if residency == Residency::Now && !crate::memory::fits(bytes) {
        return Err(bytes);
    }
    // SAFETY: the layout has a non-zero size (len > 0 and T is not a ZST:
    // callers only use atomic integers).
    let ptr = unsafe { alloc_zeroed(layout) } as *mut T;
    let Some(ptr) = std::ptr::NonNull::new(ptr) else {
        return Err(bytes);
    };
    if residency == Residency::Now {
        advise_huge_pages(ptr.as_ptr() as *mut u8, bytes);
    }
    // Fault the pages in now, not on first use, with a call that fails
    // rather than wake the OOM killer (src/memory.rs).
    // SAFETY: the range is the allocation, all zeros (alloc_zeroed).
    if residency == Residency::Now
        && !unsafe { crate::memory::populate(ptr.as_ptr() as *mut u8, bytes) }
    {
        // SAFETY: allocated above with this layout, not yet handed out.
        unsafe { std::alloc::dealloc(ptr.as_ptr() as *mut u8, layout) };
        return Err(bytes);
    }
    // The allocation holds `len` values of T laid out as an array; all-zero
    // bits are a valid value for the atomic integers callers use; `AlignedWords`
    // frees it with the same layout.
    Ok(AlignedWords { ptr, len })
}

/// Asks the kernel to back the 2 MiB-aligned interior of a large, resident
/// allocation with huge pages (transparent huge pages in `madvise` mode, the common
/// default, give them only to ranges that ask). A keyed check lands on a
/// random bucket, so with 4 KiB pages a table of a million keys misses the
/// TLB on nearly every check; with 2 MiB pages its 23 MiB take 12 TLB
/// entries. Only whole huge pages inside the allocation are advised, so the
/// resident size is unchanged (and memory that fills on use, `OnUse`, is
/// never advised: it would grow in 2 MiB steps). Advice only: failure
/// changes nothing.
#[cfg(not(ratecell_loom))]
fn advise_huge_pages(base: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = (base as usize).next_multiple_of(HUGE);
        let end = (base as usize + bytes) & !(HUGE - 1);
        if end > start {
            // SAFETY: [start, end) lies inside the allocation, page-aligned;
            // MADV_HUGEPAGE changes how pages are backed, never contents.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (base, bytes);
}

#[cfg(ratecell_loom)]
fn zeroed_slice<T>(
    len: usize,
    _residency: Residency,
    zero: impl Fn() -> T,
) -> Result<AlignedWords<T>, usize> {
    Ok(AlignedWords {
        items: (0..len).map(|_| zero()).collect(),
    })
}

/// Statistics counters: always the processor's atomics, even under loom.
/// They count events and order nothing, so the model checker need not
/// explore them (it would only multiply the interleavings).
pub(crate) use std::sync::atomic::AtomicU64 as CounterU64;

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;

    #[test]
    fn arrays_start_on_a_cache_line_whatever_their_length_and_residency() {
        for len in [1, 3, 4, 7, 8, 100, 4096, 100_003] {
            for residency in [Residency::Now, Residency::OnUse] {
                let words = zeroed_words(len, residency).unwrap();
                assert_eq!(words.len(), len);
                assert_eq!(words.as_ptr() as usize % LINE, 0, "{len} words");
                assert!(words.iter().all(|w| w.load(Ordering::Relaxed) == 0));
                let wide = zeroed_wide_words(len, residency).unwrap();
                assert_eq!(wide.len(), len);
                assert_eq!(wide.as_ptr() as usize % LINE, 0, "{len} wide words");
                assert!(wide.iter().all(|w| w.load(Ordering::Relaxed) == 0));
            }
        }
        assert!(zeroed_words(0, Residency::Now).unwrap().is_empty());
    }
}

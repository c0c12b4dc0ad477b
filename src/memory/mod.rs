//! Memory for tables and cells: zeroed arrays of atomic words that start on
//! a cache line and are made resident up front with a call that can fail
//! ([`resident`]), and the prefetch hint that loads a line ahead of use.

pub(crate) mod resident;

use crate::sync::{AtomicU64, SlotU128, UNDER_LOOM};

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
pub(crate) const LINE: usize = 64;

/// A zeroed array of atomic words that starts on a cache line, and is freed
/// with the layout it was allocated with (a `Box<[T]>` would free it with
/// `T`'s own alignment, which is undefined behaviour).
pub(crate) struct AlignedWords<T> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
    /// Where the array came from, so that drop gives it back there.
    from: Source,
}

/// Where an [`AlignedWords`] array came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The global allocator, at [`LINE`] alignment.
    Allocator,
    /// Mapped by `mapped_now` (unmapped on drop).
    Mapped,
    /// A `Box<[T]>` of values made one by one: under loom, whose atomics
    /// are not plain memory that all-zero bytes make valid.
    Items,
}

// SAFETY: `AlignedWords` owns its array as a `Box<[T]>` would, and the atomics in
// it are Send and Sync.
unsafe impl<T: Send> Send for AlignedWords<T> {}
// SAFETY: as above: shared access is access to `&[T]`.
unsafe impl<T: Sync> Sync for AlignedWords<T> {}

impl<T> std::ops::Deref for AlignedWords<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: ptr holds len initialised values (zeroed_slice) for as
        // long as self lives; a dangling aligned pointer when len is 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> std::fmt::Debug for AlignedWords<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedWords({} x {} bytes)", self.len(), size_of::<T>())
    }
}

impl<T> AlignedWords<T> {
    /// The layout of `len` values of T at cache-line alignment; the same
    /// for allocating and freeing.
    fn layout(len: usize) -> Option<std::alloc::Layout> {
        std::alloc::Layout::array::<T>(len)
            .ok()?
            .align_to(LINE)
            .ok()
    }

    /// The array of `items`, given back as a `Box<[T]>` on drop.
    fn of_items(items: Box<[T]>) -> Self {
        let len = items.len();
        let ptr = std::ptr::NonNull::new(Box::into_raw(items).cast::<T>())
            .expect("a box's pointer is not null");
        AlignedWords {
            ptr,
            len,
            from: Source::Items,
        }
    }
}

impl<T> Drop for AlignedWords<T> {
    fn drop(&mut self) {
        if self.from == Source::Items {
            let items = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
            // SAFETY: made by `of_items` from a `Box<[T]>` of `len` items,
            // given back once.
            drop(unsafe { Box::from_raw(items) });
            return;
        }
        if self.len == 0 {
            return;
        }
        // The atomic integers callers use need no drop of their own.
        let layout = Self::layout(self.len).expect("the layout was valid when allocated");
        if self.from == Source::Mapped {
            // SAFETY: mapped in `mapped_now` with exactly this size, unmapped
            // once.
            #[cfg(target_os = "linux")]
            unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), layout.size())
            };
            return;
        }
        // SAFETY: allocated in zeroed_slice with this very layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast::<u8>(), layout) };
    }
}

/// Allocates `len` zeroed atomic words, or reports how many bytes failed.
///
/// Outside loom this is one `alloc_zeroed` (calloc: the kernel hands back
/// zero pages, so a large table costs no time to clear), aligned to [`LINE`];
/// on Linux an array of 2 MiB or more made resident now is a mapping of its
/// own (`mapped_now`).
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
) -> Result<AlignedWords<SlotU128>, usize> {
    zeroed_slice(len, residency, || SlotU128::new(0))
}

/// Like [`zeroed_words`], for an array of a struct of atomics (the lease
/// store's places).
///
/// # Safety
/// All-zero bytes are a valid `T`, and `T` needs no drop (the array is
/// freed without dropping its items); `zero` makes that value (loom
/// builds the array from it).
pub(crate) unsafe fn zeroed_array<T>(
    len: usize,
    residency: Residency,
    zero: impl Fn() -> T,
) -> Result<AlignedWords<T>, usize> {
    zeroed_slice(len, residency, zero)
}

fn zeroed_slice<T>(
    len: usize,
    residency: Residency,
    zero: impl Fn() -> T,
) -> Result<AlignedWords<T>, usize> {
    use std::alloc::{alloc, alloc_zeroed};
    if UNDER_LOOM {
        return Ok(AlignedWords::of_items((0..len).map(|_| zero()).collect()));
    }
    let bytes = len.saturating_mul(size_of::<T>());
    if len == 0 {
        return Ok(AlignedWords {
            ptr: std::ptr::NonNull::dangling(),
            len: 0,
            from: Source::Allocator,
        });
    }
    let layout = AlignedWords::<T>::layout(len).ok_or(bytes)?;
    if residency == Residency::Now && !resident::fits(bytes) {
        return Err(bytes);
    }
    let now = residency == Residency::Now;
    #[cfg(target_os = "linux")]
    if now && bytes >= MAP_FROM {
        return mapped_now(len, bytes);
    }
    // A table made resident now is zeroed only after the huge-page advice
    // and the population: `alloc_zeroed` at cache-line alignment writes
    // the zeros itself (the allocator cannot use calloc's fresh-page
    // shortcut above 16-byte alignment), which faults every page in at
    // 4 KiB before the advice could apply.
    // SAFETY: the layout has a non-zero size (len > 0 and T is not a ZST:
    // callers only use atomic integers, and structs of them).
    let ptr = unsafe {
        if now {
            alloc(layout)
        } else {
            alloc_zeroed(layout)
        }
    }
    .cast::<T>();
    let Some(ptr) = std::ptr::NonNull::new(ptr) else {
        return Err(bytes);
    };
    if now {
        advise_huge_pages(ptr.as_ptr().cast::<u8>(), bytes);
        // Fault the pages in now, not on first use, with a call that fails
        // rather than wake the OOM killer ([`resident`]).
        // SAFETY: the range is the allocation; its bytes are zeroed next.
        if !unsafe { resident::populate(ptr.as_ptr().cast::<u8>(), bytes) } {
            // SAFETY: allocated above with this layout, not yet handed out.
            unsafe { std::alloc::dealloc(ptr.as_ptr().cast::<u8>(), layout) };
            return Err(bytes);
        }
        // SAFETY: `bytes` bytes from ptr are the allocation, now resident.
        unsafe { std::ptr::write_bytes(ptr.as_ptr().cast::<u8>(), 0, bytes) };
    }
    // The allocation holds `len` values of T laid out as an array; all-zero
    // bits are a valid value for the atomic integers callers use (and the
    // structs of them `zeroed_array`'s callers vouch for); `AlignedWords`
    // frees it with the same layout.
    Ok(AlignedWords {
        ptr,
        len,
        from: Source::Allocator,
    })
}

/// From this size up, an array made resident now is mapped directly
/// ([`mapped_now`]) rather than taken from the allocator.
#[cfg(target_os = "linux")]
const MAP_FROM: usize = 2 << 20;

/// `len` values (`bytes` bytes) of fresh anonymous memory, its whole 2 MiB
/// pages advised huge, every page faulted in now.
///
/// Mapped directly, not through the allocator: once a process has freed a
/// block this large (a table dropped before), glibc raises its mmap
/// threshold and serves the next one from its heap, whose pages are
/// already faulted in at 4 KiB and stay so whatever the advice. A table
/// built after another was dropped then had no huge pages at all (`cargo
/// bench --bench ratecell -- shared_1M` with the floor built first: 0 MiB
/// where a fresh process gets 20 MiB, and each check 1.1-1.2x slower).
/// A fresh mapping is page-aligned (so on a cache line) and reads zero.
#[cfg(target_os = "linux")]
fn mapped_now<T>(len: usize, bytes: usize) -> Result<AlignedWords<T>, usize> {
    let size = AlignedWords::<T>::layout(len).ok_or(bytes)?.size();
    // SAFETY: a fresh private anonymous mapping chosen by the kernel.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(bytes);
    }
    advise_huge_pages(ptr.cast(), size);
    // SAFETY: the range is the mapping; populating leaves its zeros.
    if !unsafe { resident::populate(ptr.cast(), size) } {
        // SAFETY: the mapping made above, not handed out.
        unsafe { libc::munmap(ptr, size) };
        return Err(bytes);
    }
    Ok(AlignedWords {
        ptr: std::ptr::NonNull::new(ptr.cast()).ok_or(bytes)?,
        len,
        from: Source::Mapped,
    })
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

/// Fetches the cache line at `ptr` ahead of use. A prefetch never faults,
/// whatever the address.
#[inline]
pub(crate) fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it reads nothing architecturally and
    // cannot fault, for any address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

#[cfg(all(test, not(ratecell_loom)))]
mod tests {
    use super::*;
    use crate::sync::Ordering;

    #[test]
    fn memory_handed_out_again_reads_zero() {
        // Arrays made resident now are zeroed after the allocator hands
        // them out: memory freed dirty and reused must not show through.
        for len in [7, 100, 4096] {
            for _ in 0..3 {
                let words = zeroed_words(len, Residency::Now).unwrap();
                assert!(
                    words.iter().all(|w| w.load(Ordering::Relaxed) == 0),
                    "{len} words"
                );
                words
                    .iter()
                    .for_each(|w| w.store(u64::MAX, Ordering::Relaxed));
                let wide = zeroed_wide_words(len, Residency::Now).unwrap();
                assert!(
                    wide.iter().all(|w| w.load(Ordering::Relaxed) == 0),
                    "{len} wide"
                );
                wide.iter()
                    .for_each(|w| w.store(u128::MAX, Ordering::Relaxed));
            }
        }
    }

    #[test]
    fn large_arrays_made_resident_now_are_mappings_of_their_own_that_read_zero() {
        // A block this large freed first raises glibc's mmap threshold, so
        // an allocator-made array would now come from the heap.
        drop(vec![1u8; 8 << 20]);
        let len = (3 << 20) / 16 + 5;
        for _ in 0..2 {
            let wide = zeroed_wide_words(len, Residency::Now).unwrap();
            assert_eq!(wide.from == Source::Mapped, cfg!(target_os = "linux"));
            assert_eq!(wide.len(), len);
            assert_eq!(wide.as_ptr() as usize % LINE, 0);
            assert!(wide.iter().all(|w| w.load(Ordering::Relaxed) == 0));
            wide.iter()
                .for_each(|w| w.store(u128::MAX, Ordering::Relaxed));
        }
        assert!(zeroed_wide_words(len, Residency::OnUse).unwrap().from != Source::Mapped);
        assert!(zeroed_wide_words(1000, Residency::Now).unwrap().from != Source::Mapped);
    }

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

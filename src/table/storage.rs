//! Where a table's words live: on the heap (an in-process limiter) or in a
//! mapping shared between processes (`crate::shared`). A table sees only a
//! slice; this type owns what backs it.
//!
//! Both kinds are one pointer and one length, so indexing a mapped table
//! costs what indexing a boxed one does: no branch on the kind per access.

use std::ptr::NonNull;
use std::sync::Arc;

/// A fixed-length array of `T` that the table indexes like a slice.
pub(crate) struct Storage<T> {
    ptr: NonNull<T>,
    len: usize,
    owner: Owner,
}

enum Owner {
    /// Came from a `Box<[T]>`: freed with it on drop.
    Heap,
    /// Came from `AlignedWords`, which this keeps and drops.
    Aligned(#[allow(dead_code)] Box<dyn Send + Sync>),
    /// Lies inside a mapping that this keeps alive.
    Mapped(#[allow(dead_code)] Arc<dyn Send + Sync>),
}

// SAFETY: a Storage is a `Box<[T]>` or a view of memory its Arc keeps
// alive; either way it is shared between threads exactly as `[T]` is.
unsafe impl<T: Sync> Sync for Storage<T> {}
// SAFETY: as above; moving the handle moves no `T`.
unsafe impl<T: Send + Sync> Send for Storage<T> {}

impl<T> From<Box<[T]>> for Storage<T> {
    fn from(boxed: Box<[T]>) -> Storage<T> {
        let len = boxed.len();
        let raw = Box::into_raw(boxed);
        Storage {
            // SAFETY: Box::into_raw never returns null.
            ptr: unsafe { NonNull::new_unchecked(raw.cast::<T>()) },
            len,
            owner: Owner::Heap,
        }
    }
}

impl<T: Send + Sync + 'static> From<crate::memory::AlignedWords<T>> for Storage<T> {
    /// Cache-line-aligned words on the heap, kept (and freed with the
    /// layout they were allocated with) by the storage.
    fn from(words: crate::memory::AlignedWords<T>) -> Storage<T> {
        let (ptr, len) = (words.as_ptr().cast_mut(), words.len());
        Storage {
            ptr: NonNull::new(ptr).expect("a slice's pointer is never null"),
            len,
            owner: Owner::Aligned(Box::new(words)),
        }
    }
}

impl<T> Storage<T> {
    /// A view of `len` values at `ptr` inside a mapping kept alive by `keep`.
    ///
    /// # Safety
    /// `ptr` is aligned for `T`, and `len` values of `T` starting there lie
    /// inside memory that stays mapped, readable and writable while `keep`
    /// lives; every bit pattern found there is a valid `T` (callers use
    /// atomic integers, initialised to zero); nothing else holds a `&mut`
    /// to that memory.
    pub(crate) unsafe fn mapped(ptr: *mut T, len: usize, keep: Arc<dyn Send + Sync>) -> Storage<T> {
        Storage {
            ptr: NonNull::new(ptr).expect("a mapping is never at address 0"),
            len,
            owner: Owner::Mapped(keep),
        }
    }
}

impl<T> std::ops::Deref for Storage<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: ptr/len describe a live allocation or mapping (see the
        // constructors), valid for as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for Storage<T> {
    fn drop(&mut self) {
        if let Owner::Heap = self.owner {
            // SAFETY: made from this exact Box in `from`, not freed before.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                ))
            });
        }
    }
}

impl<T> std::fmt::Debug for Storage<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.owner {
            Owner::Heap => "heap",
            Owner::Aligned(_) => "heap, cache-line aligned",
            Owner::Mapped(_) => "mapped",
        };
        write!(f, "Storage({kind}, {} values)", self.len)
    }
}

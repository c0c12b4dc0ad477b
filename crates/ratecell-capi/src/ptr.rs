//! The pointer plumbing of the C ABI: every conversion of a C argument into
//! Rust (handles, input and output buffers, out-parameters, paths) and of a
//! handle into a pointer for C and back, each checking NULL and lengths
//! first, and the macros that turn a refused argument into the function's
//! `return` of its status. Declared in `lib.rs` after the panic boundary,
//! whose `try_status!` the macros use.

use crate::types::ratecell_status;
use std::ffi::c_char;

// The pointer macros below dereference a C argument, so each stands for an
// `unsafe` block whose SAFETY is the exported function's own contract: use
// one only for an argument whose `# Safety` section makes the promise the
// macro names. Each evaluates its arguments before its `unsafe` block, so no
// caller expression is ever checked as unsafe code by accident.

/// The object behind a handle argument, or `return RATECELL_NULL_ARGUMENT`.
/// Promise: the pointer is NULL or a live handle of its type.
macro_rules! try_ref {
    ($ptr:expr) => {{
        let ptr = $ptr;
        // SAFETY: NULL or a live handle, as the function's contract says.
        match unsafe { ptr.as_ref() } {
            Some(value) => value,
            None => return $crate::ratecell_status::RATECELL_NULL_ARGUMENT,
        }
    }};
}

/// A read-only buffer argument of `len` elements (NULL only when empty), or
/// `return` the status [`input`] gives. Promise: `len` readable elements.
macro_rules! try_slice {
    ($ptr:expr, $len:expr) => {{
        let (ptr, len) = ($ptr, $len);
        // SAFETY: `len` readable elements, as the function's contract says.
        try_status!(unsafe { $crate::ptr::input(ptr, len) })
    }};
}

/// A copy of the value an input pointer points to, or `return
/// RATECELL_NULL_ARGUMENT`. Promise: NULL or a readable value, valid for
/// any bit pattern (the C structs are integers only).
macro_rules! try_read {
    ($ptr:expr) => {{
        let ptr = $ptr;
        if ptr.is_null() {
            return $crate::ratecell_status::RATECELL_NULL_ARGUMENT;
        }
        // SAFETY: non-NULL and readable, as the function's contract says.
        unsafe { ptr.read() }
    }};
}

/// Writes `value` to the out-parameter and returns `RATECELL_OK`; with the
/// pointer NULL, returns `RATECELL_NULL_ARGUMENT` without evaluating
/// `value`, so a check whose answer has nowhere to go takes nothing from
/// the limit. Promise: NULL or writable.
macro_rules! answer {
    ($out:expr, $value:expr) => {{
        let out = try_status!($crate::ptr::out_ptr($out));
        let value = $value;
        // SAFETY: non-NULL, and writable as the function's contract says.
        unsafe { out.write(value) };
        $crate::ratecell_status::RATECELL_OK
    }};
}

/// `answer!` for a decision: the decision written field by field
/// (`ratecell_decision::write_fields`, which says why).
macro_rules! answer_decision {
    ($out:expr, $decision:expr) => {{
        let out = try_status!($crate::ptr::out_ptr($out));
        let d: ::ratecell_lib::Decision = $decision;
        // SAFETY: non-NULL, and writable as the function's contract says.
        unsafe { $crate::ratecell_decision::write_fields(out, &d) };
        $crate::ratecell_status::RATECELL_OK
    }};
}

/// The largest element count a buffer of `T` can have: Rust slices (and C
/// objects) never exceed `isize::MAX` bytes.
pub(crate) const fn max_len<T>() -> usize {
    isize::MAX as usize / size_of::<T>()
}

/// A read-only buffer of `len` elements from C. An empty buffer may be NULL.
///
/// # Safety
/// A non-NULL `ptr` must point to `len` initialized elements that stay
/// valid and unmodified for `'a`.
pub(crate) unsafe fn input<'a, T>(ptr: *const T, len: usize) -> Result<&'a [T], ratecell_status> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(ratecell_status::RATECELL_NULL_ARGUMENT);
    }
    if len > max_len::<T>() {
        return Err(ratecell_status::RATECELL_INVALID_LENGTH);
    }
    // SAFETY: non-NULL and within the largest possible object; the caller
    // promises the elements are there.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A writable buffer of `len` elements from C, which may hold anything
/// (uninitialised memory, or bytes that are no valid `T`): it is only ever
/// written, element by element, never read or borrowed as a `&mut [T]`.
pub(crate) struct Output<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> Output<T> {
    /// Writes `value` at index `i` (without reading or dropping what was
    /// there).
    ///
    /// # Panics
    /// If `i` is out of bounds.
    #[inline]
    pub(crate) fn write(&mut self, i: usize, value: T) {
        assert!(
            i < self.len,
            "output index {i} out of bounds ({})",
            self.len
        );
        // SAFETY: i < len, and `output`'s caller promised `len` writable
        // elements; `ptr::write` neither reads nor drops the old bytes.
        unsafe { self.ptr.add(i).write(value) };
    }
}

/// A writable buffer of `len` elements from C. An empty buffer may be NULL.
///
/// # Safety
/// A non-NULL `ptr` must point to `len` writable, aligned elements that
/// nothing else reads or writes while the [`Output`] is in use.
pub(crate) unsafe fn output<T>(ptr: *mut T, len: usize) -> Result<Output<T>, ratecell_status> {
    if len == 0 {
        return Ok(Output {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        });
    }
    if ptr.is_null() {
        return Err(ratecell_status::RATECELL_NULL_ARGUMENT);
    }
    if len > max_len::<T>() {
        return Err(ratecell_status::RATECELL_INVALID_LENGTH);
    }
    Ok(Output { ptr, len })
}

/// A non-NULL out-pointer, or `RATECELL_NULL_ARGUMENT`.
pub(crate) fn out_ptr<T>(ptr: *mut T) -> Result<*mut T, ratecell_status> {
    if ptr.is_null() {
        Err(ratecell_status::RATECELL_NULL_ARGUMENT)
    } else {
        Ok(ptr)
    }
}

/// A path from C: NUL-terminated bytes (any encoding on Unix).
///
/// # Safety
/// `path` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn path_arg(path: *const c_char) -> Result<std::path::PathBuf, ratecell_status> {
    if path.is_null() {
        return Err(ratecell_status::RATECELL_NULL_ARGUMENT);
    }
    // SAFETY: non-NULL and NUL-terminated, as the caller promises.
    let bytes = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    #[cfg(unix)]
    let path = {
        use std::os::unix::ffi::OsStrExt;
        std::path::PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
    };
    #[cfg(not(unix))]
    let path = std::path::PathBuf::from(String::from_utf8_lossy(bytes).into_owned());
    Ok(path)
}

/// Moves `value` to the heap for C, reporting an allocation failure as a
/// status instead of aborting the C program.
pub(crate) fn into_raw<T>(value: T) -> Result<*mut T, ratecell_status> {
    let layout = std::alloc::Layout::new::<T>();
    // SAFETY: callers only box the handle types, which are not zero-sized.
    let ptr = unsafe { std::alloc::alloc(layout) }.cast::<T>();
    if ptr.is_null() {
        // Box::new would abort the C program; a status lets it recover.
        return Err(ratecell_status::RATECELL_OUT_OF_MEMORY);
    }
    // SAFETY: freshly allocated for exactly one T; freed with Box::from_raw
    // (same allocator and layout).
    unsafe { ptr.write(value) };
    Ok(ptr)
}

/// Drops a handle `into_raw` made; NULL is a no-op (every `*_free`).
///
/// # Safety
/// `ptr` is NULL or came from `into_raw::<T>` and is not used afterwards.
pub(crate) unsafe fn free_raw<T>(ptr: *mut T) {
    if !ptr.is_null() {
        // SAFETY: allocated by `into_raw` (the global allocator, `T`'s
        // layout) and, as the caller promises, not yet freed.
        drop(unsafe { Box::from_raw(ptr) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_refuse_null_and_impossible_lengths() {
        let empty: *const u64 = std::ptr::null();
        // SAFETY: a NULL pointer is never dereferenced by `input`.
        unsafe {
            assert_eq!(input(empty, 0).unwrap().len(), 0);
            assert_eq!(
                input(empty, 1).unwrap_err(),
                ratecell_status::RATECELL_NULL_ARGUMENT
            );
            let one = [5u64];
            assert_eq!(
                input(one.as_ptr(), usize::MAX).unwrap_err(),
                ratecell_status::RATECELL_INVALID_LENGTH
            );
            assert_eq!(input(one.as_ptr(), 1).unwrap(), &[5]);
        }
    }
}

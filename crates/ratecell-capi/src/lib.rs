//! The C ABI of ratecell (docs/SPEC.md §6), and nothing else: this crate
//! builds `libratecell.so` and `libratecell.a`, and `include/ratecell.h`
//! (at the repository's root) is generated from it by cbindgen
//! (`tests/header.rs`, `cbindgen.toml`). It is a crate of its own, as
//! rustls-ffi beside rustls, so that a Rust program depending on ratecell
//! compiles no C library.
//!
//! Rules every function here keeps (rustls-ffi and hyper's C API are the
//! models):
//!
//! - Its body runs inside `ffi_panic_boundary!`: a panic becomes
//!   `RATECELL_PANIC` (or the documented default of a function that returns
//!   no status) and never unwinds into C.
//! - Every pointer is checked; NULL gives `RATECELL_NULL_ARGUMENT`, never a
//!   crash. Lengths above what any buffer can be give
//!   `RATECELL_INVALID_LENGTH`.
//! - Out-parameters are written only on success (`ratecell_acquire` also
//!   writes its last decision when it gives up).
//! - Values of C enum types are read as integers and checked (see
//!   `types`).
//!
//! The crate uses only the public Rust API of ratecell (`ratecell_lib`
//! here, since this crate's own library is named `ratecell`).

#![warn(missing_docs, unsafe_op_in_unsafe_fn)]
#![allow(
    clippy::enum_glob_use,
    reason = "the C ABI's functions name statuses as the header does (RATECELL_OK, ...)"
)]
#![allow(non_camel_case_types)]
#![allow(
    clippy::doc_markdown,
    reason = "these docs are copied into the C header, where field and algorithm names read as plain C"
)]

/// Runs a function body, turning a panic into the return type's
/// [`PanicDefault`] instead of unwinding across the C boundary. A `return`
/// in the body returns from the exported function, as written.
macro_rules! ffi_panic_boundary {
    ($($body:tt)*) => {{
        // AssertUnwindSafe: a limiter's shared state is atomics and
        // immutable configuration, updated by single CAS or latch steps, so
        // a panic part-way leaves nothing half-written for the next call.
        match ::std::panic::catch_unwind(::std::panic::AssertUnwindSafe(|| { $($body)* })) {
            Ok(value) => value,
            Err(_) => $crate::PanicDefault::on_panic(),
        }
    }};
}

/// `?` for bodies that return a `ratecell_status`.
macro_rules! try_status {
    ($e:expr) => {
        match $e {
            Ok(value) => value,
            Err(status) => return status,
        }
    };
}

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
        try_status!(unsafe { $crate::input(ptr, len) })
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
        let out = try_status!($crate::out_ptr($out));
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
        let out = try_status!($crate::out_ptr($out));
        let d: ::ratecell_lib::Decision = $decision;
        // SAFETY: non-NULL, and writable as the function's contract says.
        unsafe { $crate::ratecell_decision::write_fields(out, &d) };
        $crate::ratecell_status::RATECELL_OK
    }};
}

mod build;
mod info;
mod leases;
mod limiter;
mod multi;
mod request;
mod snapshot;
mod tiers;
pub mod types;

pub use build::*;
pub use info::*;
pub use leases::*;
pub use limiter::*;
pub use multi::*;
pub use request::*;
pub use snapshot::*;
pub use tiers::*;
pub use types::*;

use std::ffi::c_char;

/// What an exported function returns when its body panicked.
pub trait PanicDefault {
    /// The value returned instead of unwinding.
    fn on_panic() -> Self;
}

impl PanicDefault for ratecell_status {
    fn on_panic() -> Self {
        ratecell_status::RATECELL_PANIC
    }
}

impl PanicDefault for () {
    fn on_panic() -> Self {}
}

/// `ratecell_allow`: a negated status.
impl PanicDefault for i32 {
    fn on_panic() -> Self {
        -(ratecell_status::RATECELL_PANIC as i32)
    }
}

impl PanicDefault for u64 {
    fn on_panic() -> Self {
        0
    }
}

/// `ratecell_limiter_tiers`: 0, as for NULL.
impl PanicDefault for u32 {
    fn on_panic() -> Self {
        0
    }
}

impl PanicDefault for *const c_char {
    fn on_panic() -> Self {
        std::ptr::null()
    }
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
unsafe fn path_arg(path: *const c_char) -> Result<std::path::PathBuf, ratecell_status> {
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
fn into_raw<T>(value: T) -> Result<*mut T, ratecell_status> {
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
unsafe fn free_raw<T>(ptr: *mut T) {
    if !ptr.is_null() {
        // SAFETY: allocated by `into_raw` (the global allocator, `T`'s
        // layout) and, as the caller promises, not yet freed.
        drop(unsafe { Box::from_raw(ptr) });
    }
}

// The Rust tests that call the C functions, kept under tests/ but compiled
// as unit tests: the library has no rlib for integration tests to link
// (Cargo.toml says why).
#[cfg(test)]
#[path = "../tests/adversarial.rs"]
mod adversarial;
#[cfg(test)]
#[path = "../tests/ffi_fuzz.rs"]
mod ffi_fuzz;
#[cfg(test)]
#[path = "../tests/leases.rs"]
mod leases_ffi;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_the_package_version() {
        // SAFETY: ratecell_version returns a static NUL-terminated string.
        let version = unsafe { std::ffi::CStr::from_ptr(ratecell_version()) };
        assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }

    fn panics_inside(v: u8) -> ratecell_status {
        ffi_panic_boundary! {
            if v < 10 {
                panic!("deliberate panic to test the boundary");
            }
            ratecell_status::RATECELL_OK
        }
    }

    fn returns_early(v: u8) -> u64 {
        ffi_panic_boundary! {
            if v == 0 {
                return 7;
            }
            u64::from(v)
        }
    }

    #[test]
    fn a_panic_becomes_the_panic_status() {
        assert_eq!(panics_inside(1), ratecell_status::RATECELL_PANIC);
        assert_eq!(panics_inside(10), ratecell_status::RATECELL_OK);
    }

    #[test]
    fn return_inside_the_boundary_returns_from_the_function() {
        assert_eq!(returns_early(0), 7);
        assert_eq!(returns_early(3), 3);
    }

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

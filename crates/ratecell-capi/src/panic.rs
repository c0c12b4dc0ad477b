//! The panic boundary every exported function runs inside
//! (`ffi_panic_boundary!`, as rustls-ffi's and hyper's C API), the value a
//! function returns when its body panicked ([`PanicDefault`]), and `?` for
//! bodies that return a status (`try_status!`). Declared first in `lib.rs`,
//! so every module's functions can use the macros.

use crate::types::ratecell_status;
use std::ffi::c_char;

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
            Err(_) => $crate::panic::PanicDefault::on_panic(),
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

#[cfg(test)]
mod tests {
    use crate::types::ratecell_status;

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
}

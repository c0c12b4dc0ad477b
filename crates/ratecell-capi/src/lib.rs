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
//!
//! This file holds the crate's rules and its re-exports; the panic
//! boundary is `panic.rs`, the pointer conversions `ptr.rs` (as rustls-ffi
//! keeps `lib.rs`, `panic.rs` and `ptr.rs` apart), and each group of C
//! functions a module of its own.

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

// The macros first: `macro_rules!` are in scope only in what follows
// their module.
#[macro_use]
mod panic;
#[macro_use]
mod ptr;

mod build;
mod denials;
mod grant;
mod info;
mod leases;
mod limiter;
mod multi;
mod request;
mod snapshot;
mod tiers;
pub mod types;

pub use build::*;
pub use denials::*;
pub use grant::*;
pub use info::*;
pub use leases::*;
pub use limiter::*;
pub use multi::*;
pub use request::*;
pub use snapshot::*;
pub use tiers::*;
pub use types::*;

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
#[path = "../tests/states.rs"]
mod states;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_the_package_version() {
        // SAFETY: ratecell_version returns a static NUL-terminated string.
        let version = unsafe { std::ffi::CStr::from_ptr(ratecell_version()) };
        assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}

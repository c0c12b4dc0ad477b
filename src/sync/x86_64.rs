//! The 128-bit atomic word on x86-64, its load and compare-exchange inline
//! (`sync::SlotU128`, a keyed table's slot and a direct limiter's two
//! limits in one word).
//!
//! portable-atomic's `AtomicU128` (still the type on every other target,
//! of the direct single-limit cells, and the fallback here) picks its instructions when
//! first called and then calls them through a function pointer: every load
//! and CAS of a slot was an indirect call, and its CAS returned its result
//! through memory. Here the pick is one load of a static byte and a branch
//! that goes the same way every time, and the instructions sit in the
//! caller (always inlined: in a keyed check's copies, large already, the
//! inliner left most CASes out of line otherwise).
//!
//! - Compare-exchange: `lock cmpxchg16b`. A locked instruction is
//!   sequentially consistent, so it serves every ordering; it never fails
//!   spuriously, so the weak form is the strong one. It takes the new
//!   value's low half in rbx, which may not be an asm operand (LLVM may keep
//!   a base pointer there): that half is swapped into rbx around the
//!   instruction and rbx restored before the asm ends, and the address is
//!   in a named register (one the allocator picks may be rbx itself).
//! - Load, on a processor with AVX: one `vmovdqa` (an aligned VEX 16-byte
//!   load). Intel (SDM vol. 3A §9.1.1) and AMD (APM vol. 2 §7.3.2) guarantee
//!   that such a load is atomic on every processor that enumerates AVX; as
//!   any x86 load it is an acquire, and it is sequentially consistent here
//!   because every write of this type is a locked instruction. Without AVX
//!   (processors from before 2011), a `lock cmpxchg16b` that replaces 0
//!   with 0, out of line: it writes back what it read, so it changes no
//!   value, but it needs the line writable (every word of this type is).
//! - Store: a CAS loop. Nothing hot stores (restored snapshots and tests).
//!
//! Without cmpxchg16b (the first x86-64 processors, 2003–2006) every
//! operation is portable-atomic's on the same memory (the two types have
//! one layout), so the words are never touched by both kinds of
//! instruction; `is_lock_free` then says no, and shared regions are refused.
//!
//! The features are detected once per process (`detected`) and the answer
//! kept in [`FEATURES`]; a build for a processor that has them
//! (`-C target-feature=+cmpxchg16b,+avx`) tests nothing at run time. No
//! function here enables a target feature: a function that does cannot be
//! inlined into one that does not, and the assembler takes these
//! instructions whatever the features of the function around them.

use core::arch::asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU8, Ordering};

/// A 128-bit atomic integer, 16-byte aligned, of the layout of
/// portable-atomic's (and of a `u128` aligned to 16): shared regions and
/// the keyed table's storage map these words as raw memory, and the
/// fallback reinterprets them as portable-atomic's.
#[repr(C, align(16))]
pub(crate) struct AtomicU128 {
    value: UnsafeCell<u128>,
}

const _: () = assert!(size_of::<AtomicU128>() == 16 && align_of::<AtomicU128>() == 16);
const _: () = assert!(
    size_of::<portable_atomic::AtomicU128>() == 16
        && align_of::<portable_atomic::AtomicU128>() == 16
);

// SAFETY: the value is only read and written by atomic instructions (or by
// portable-atomic's atomic operations when cmpxchg16b is missing), so
// sharing it between threads is what it is for, as for core's atomics.
unsafe impl Sync for AtomicU128 {}

// As core's atomics: a panic cannot leave the word half-written.
impl core::panic::RefUnwindSafe for AtomicU128 {}

/// [`FEATURES`] bits: the processor has cmpxchg16b.
const CX16: u8 = 1;
/// The processor has AVX and cmpxchg16b (the AVX load needs both: the
/// load is atomic only against writes that are themselves atomic).
const AVX: u8 = 2;
/// Detection has run (so a value of 0 means "not yet").
const KNOWN: u8 = 4;

/// The features detected, or 0 before the first detection. Relaxed is
/// enough: every thread computes the same answer, and one that still sees
/// 0 detects again.
static FEATURES: AtomicU8 = AtomicU8::new(0);

/// Whether the processor has cmpxchg16b, as far as known: false also before
/// the detection, which the callers' slow paths run.
#[inline(always)]
fn has_cx16() -> bool {
    cfg!(target_feature = "cmpxchg16b") || FEATURES.load(Ordering::Relaxed) & CX16 != 0
}

/// Whether 16-byte loads may be `vmovdqa`, as far as known.
#[inline(always)]
fn has_avx() -> bool {
    cfg!(all(target_feature = "cmpxchg16b", target_feature = "avx"))
        || FEATURES.load(Ordering::Relaxed) & AVX != 0
}

/// The features, detected on the first call.
#[cold]
#[inline(never)]
fn detected() -> u8 {
    let known = FEATURES.load(Ordering::Relaxed);
    if known != 0 {
        return known;
    }
    let mut features = KNOWN;
    if std::is_x86_feature_detected!("cmpxchg16b") {
        features |= CX16;
        // std's detection also checks that the OS saves the AVX state.
        if std::is_x86_feature_detected!("avx") {
            features |= AVX;
        }
    }
    FEATURES.store(features, Ordering::Relaxed);
    features
}

/// `lock cmpxchg16b` at `dst`: the value found there, and whether it was
/// `old` (and so replaced by `new`).
///
/// # Safety
/// `dst` is valid for reads and writes, 16-byte aligned, accessed only
/// atomically, and the processor has cmpxchg16b.
#[inline(always)]
unsafe fn cmpxchg16b(dst: *mut u128, old: u128, new: u128) -> (u128, bool) {
    let (found_lo, found_hi): (u64, u64);
    let differed: u8;
    // SAFETY: the caller's contract covers the memory operand and the
    // instruction. If [dst] equals rdx:rax, rcx:rbx is stored there and ZF
    // set; otherwise [dst] is loaded into rdx:rax and ZF cleared. rbx may
    // not be an operand (LLVM may keep its base pointer there), so the new
    // low half is exchanged into it and rbx restored (mov keeps the flags)
    // before setne reads ZF. The address is in a named register: a `reg`
    // operand may be given rbx itself, which the exchange overwrites (if
    // `new_lo` gets rbx, the exchange and the restore do nothing, and rbx
    // is then the operand's, declared clobbered). No stack is used; the
    // flags are clobbered (no preserves_flags); memory is not declared
    // readonly, so the compiler orders other accesses around it as it would
    // around a call (the instruction is a full barrier on the processor).
    unsafe {
        asm!(
            "xchg {new_lo}, rbx",
            "lock cmpxchg16b xmmword ptr [rdi]",
            "mov rbx, {new_lo}",
            "setne {differed}",
            new_lo = inout(reg) new as u64 => _,
            in("rdi") dst,
            in("rcx") (new >> 64) as u64,
            inout("rax") old as u64 => found_lo,
            inout("rdx") (old >> 64) as u64 => found_hi,
            differed = lateout(reg_byte) differed,
            options(nostack),
        );
    }
    (
        u128::from(found_hi) << 64 | u128::from(found_lo),
        differed == 0,
    )
}

/// An atomic 16-byte load by `vmovdqa`.
///
/// # Safety
/// `src` is valid for reads, 16-byte aligned, written only atomically, and
/// the processor has AVX (which makes the load atomic) and cmpxchg16b.
#[inline(always)]
unsafe fn load_vmovdqa(src: *const u128) -> u128 {
    let (lo, hi): (u64, u64);
    // SAFETY: the caller's contract: an aligned 16-byte VEX load, atomic on
    // a processor with AVX, then its two halves moved to general registers
    // (the value's users take them there). Flags and stack untouched; not
    // readonly, so that an acquire or sequentially consistent load keeps
    // later accesses after it in the compiled code.
    unsafe {
        asm!(
            "vmovdqa {v}, xmmword ptr [{src}]",
            "vmovq {lo}, {v}",
            "vpextrq {hi}, {v}, 1",
            src = in(reg) src,
            v = out(xmm_reg) _,
            lo = out(reg) lo,
            hi = out(reg) hi,
            options(nostack, preserves_flags),
        );
    }
    u128::from(hi) << 64 | u128::from(lo)
}

/// An atomic 16-byte load by `lock cmpxchg16b` (a processor without AVX).
///
/// # Safety
/// As [`cmpxchg16b`]: `src` valid for reads and writes (the instruction
/// writes back the value it found), aligned, accessed only atomically.
#[inline(never)]
unsafe fn load_cmpxchg16b(src: *mut u128) -> u128 {
    // SAFETY: the caller's contract. Comparing with 0 and storing 0 leaves
    // the value as it was whichever way the comparison goes, and returns it.
    unsafe { cmpxchg16b(src, 0, 0).0 }
}

impl AtomicU128 {
    pub(crate) const fn new(value: u128) -> Self {
        AtomicU128 {
            value: UnsafeCell::new(value),
        }
    }

    /// Whether the operations are lock-free (the processor has cmpxchg16b).
    pub(crate) fn is_lock_free() -> bool {
        has_cx16() || detected() & CX16 != 0
    }

    /// This word as portable-atomic's, for a processor without cmpxchg16b.
    fn portable(&self) -> &portable_atomic::AtomicU128 {
        // SAFETY: the pointer is valid, 16-byte aligned and lives as long as
        // `self`; the two types have one layout (asserted above). Every
        // access to the word goes through portable-atomic when cmpxchg16b
        // is missing (the detection's answer never changes), so its lock
        // never races with an instruction of ours.
        unsafe { portable_atomic::AtomicU128::from_ptr(self.value.get()) }
    }

    /// Loads the value. Every ordering is served sequentially consistent.
    #[allow(clippy::inline_always, reason = "the point of this type (module doc)")]
    #[inline(always)]
    pub(crate) fn load(&self, _order: Ordering) -> u128 {
        if has_avx() {
            // SAFETY: the word is aligned and valid as long as `self`, only
            // written atomically, and the processor has AVX and cmpxchg16b.
            unsafe { load_vmovdqa(self.value.get()) }
        } else {
            self.load_slow()
        }
    }

    /// `load` before the detection or without AVX. Its call is small (no
    /// ordering passed: each path here is sequentially consistent), so the
    /// part inlined into every caller stays small.
    #[cold]
    #[inline(never)]
    fn load_slow(&self) -> u128 {
        let features = detected();
        if features & AVX != 0 {
            // SAFETY: as in `load`.
            unsafe { load_vmovdqa(self.value.get()) }
        } else if features & CX16 != 0 {
            // SAFETY: the word is aligned, valid for reads and writes as
            // long as `self` (it is in an UnsafeCell), accessed only
            // atomically, and the processor has cmpxchg16b.
            unsafe { load_cmpxchg16b(self.value.get()) }
        } else {
            self.portable().load(Ordering::SeqCst)
        }
    }

    /// Stores `value`, by a CAS loop (only tests store: restoring a
    /// snapshot goes through the cell's CAS loop). Every ordering is served
    /// sequentially consistent.
    #[cfg(test)]
    pub(crate) fn store(&self, value: u128, order: Ordering) {
        if detected() & CX16 == 0 {
            return self.portable().store(value, order);
        }
        let mut current = self.load(Ordering::Relaxed);
        while let Err(found) = self.compare_exchange(current, value, order, Ordering::Relaxed) {
            current = found;
        }
    }

    /// Replaces the value with `new` if it is `current`; returns the value
    /// found, as `Ok` if it was replaced. Every ordering is served
    /// sequentially consistent.
    #[allow(clippy::inline_always, reason = "the point of this type (module doc)")]
    #[inline(always)]
    pub(crate) fn compare_exchange(
        &self,
        current: u128,
        new: u128,
        _success: Ordering,
        _failure: Ordering,
    ) -> Result<u128, u128> {
        let (found, replaced) = if has_cx16() {
            // SAFETY: the word is aligned, valid for reads and writes as
            // long as `self`, only accessed atomically, and the processor
            // has cmpxchg16b.
            unsafe { cmpxchg16b(self.value.get(), current, new) }
        } else {
            let found = self.compare_exchange_slow(current, new);
            (found, found == current)
        };
        if replaced { Ok(found) } else { Err(found) }
    }

    /// `compare_exchange` before the detection or without cmpxchg16b: the
    /// value found (the CAS succeeded if it is `current`), returned in
    /// registers, as `load_slow` small to call.
    #[cold]
    #[inline(never)]
    fn compare_exchange_slow(&self, current: u128, new: u128) -> u128 {
        if detected() & CX16 != 0 {
            // SAFETY: as in `compare_exchange`, the processor having
            // cmpxchg16b.
            unsafe { cmpxchg16b(self.value.get(), current, new).0 }
        } else {
            let seq_cst = Ordering::SeqCst;
            match self
                .portable()
                .compare_exchange(current, new, seq_cst, seq_cst)
            {
                Ok(found) | Err(found) => found,
            }
        }
    }

    /// [`AtomicU128::compare_exchange`]: cmpxchg16b never fails spuriously.
    #[allow(clippy::inline_always, reason = "the point of this type (module doc)")]
    #[inline(always)]
    pub(crate) fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128> {
        self.compare_exchange(current, new, success, failure)
    }
}

impl core::fmt::Debug for AtomicU128 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(&self.load(Ordering::Relaxed), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const A: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
    const B: u128 = 0xffff_0000_ffff_0000_0000_ffff_0000_ffff;

    #[test]
    fn the_processor_here_is_served_inline() {
        // The machines this is built and measured on have both; a CI
        // machine without them would take the slow paths, which the other
        // tests still check.
        assert!(AtomicU128::is_lock_free());
        assert_ne!(detected() & KNOWN, 0);
        if std::is_x86_feature_detected!("avx") {
            assert!(has_avx());
        }
    }

    #[test]
    fn compare_exchange_returns_the_value_found() {
        let word = AtomicU128::new(A);
        let relaxed = Ordering::Relaxed;
        assert_eq!(word.compare_exchange(B, 7, relaxed, relaxed), Err(A));
        assert_eq!(word.load(relaxed), A, "a failed CAS changes nothing");
        assert_eq!(word.compare_exchange(A, B, relaxed, relaxed), Ok(A));
        assert_eq!(word.load(relaxed), B);
        // Halves compared separately: equal low half, different high half.
        assert_eq!(
            word.compare_exchange_weak(B ^ (1 << 64), 0, relaxed, relaxed),
            Err(B)
        );
        assert_eq!(
            word.compare_exchange_weak(B ^ 1, 0, relaxed, relaxed),
            Err(B)
        );
        assert_eq!(
            word.compare_exchange_weak(B, u128::MAX, relaxed, relaxed),
            Ok(B)
        );
        assert_eq!(word.load(Ordering::SeqCst), u128::MAX);
    }

    #[test]
    fn load_after_store_and_every_load_path() {
        let word = AtomicU128::new(0);
        for value in [A, B, u128::MAX, 0, 1 << 127, 1] {
            word.store(value, Ordering::Release);
            assert_eq!(word.load(Ordering::Acquire), value);
            // The paths a processor without AVX, or without cmpxchg16b,
            // takes, on the same word.
            // SAFETY: the word is aligned and valid; the processor has
            // cmpxchg16b (is_lock_free).
            assert_eq!(unsafe { load_cmpxchg16b(word.value.get()) }, value);
            assert_eq!(word.portable().load(Ordering::Relaxed), value);
            assert_eq!(format!("{word:?}"), value.to_string());
        }
    }

    #[test]
    fn rbx_survives() {
        // The CAS borrows rbx; a value live in a callee-saved register
        // across many CASes (in a loop the compiler may keep it in rbx)
        // must come out intact.
        let word = AtomicU128::new(0);
        let mut kept = [0u64; 6];
        for i in 0..1000u64 {
            let seen = word.load(Ordering::Relaxed);
            assert_eq!(
                word.compare_exchange(
                    seen,
                    seen + (u128::from(i) << 64) + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed
                ),
                Ok(seen)
            );
            for (j, k) in kept.iter_mut().enumerate() {
                *k = k.wrapping_mul(31).wrapping_add(i ^ j as u64);
            }
        }
        let mut expected = [0u64; 6];
        for i in 0..1000u64 {
            for (j, k) in expected.iter_mut().enumerate() {
                *k = k.wrapping_mul(31).wrapping_add(i ^ j as u64);
            }
        }
        assert_eq!(kept, expected);
        assert_eq!(word.load(Ordering::Relaxed), (999 * 1000 / 2) << 64 | 1000);
    }

    #[test]
    fn concurrent_increments_of_both_halves_are_exact() {
        // Each thread adds 1 to the low half and 2^64 + 3 (so a carry
        // across halves too) in CAS loops; a torn load or a lost update
        // shows as a wrong total. Low half starts near its top so it wraps.
        const ROUNDS: u128 = 200_000;
        let start = u128::from(u64::MAX - 1000);
        for threads in [2u128, 3, 4] {
            let word = Arc::new(AtomicU128::new(start));
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let word = Arc::clone(&word);
                    std::thread::spawn(move || {
                        let step = if t % 2 == 0 { 1 } else { (1 << 64) + 3 };
                        for _ in 0..ROUNDS {
                            let mut current = word.load(Ordering::Relaxed);
                            while let Err(found) = word.compare_exchange_weak(
                                current,
                                current.wrapping_add(step),
                                Ordering::Relaxed,
                                Ordering::Relaxed,
                            ) {
                                current = found;
                            }
                        }
                    })
                })
                .collect();
            handles.into_iter().for_each(|h| h.join().unwrap());
            let evens = threads.div_ceil(2);
            let odds = threads / 2;
            let expected = start + ROUNDS * (evens + odds * ((1 << 64) + 3));
            assert_eq!(word.load(Ordering::Relaxed), expected, "{threads} threads");
        }
    }
}

//! Regression tests for the defects of issue 20 (adversarial testing) that
//! live in the C ABI (the library's are in the repository's
//! `tests/adversarial.rs`): a status text, and batch output buffers that
//! hold garbage. A unit-test module of the C library (src/lib.rs).

const HOUR: u64 = 3_600_000_000_000;
const T0: u64 = 1_700_000_000_000_000_000;

/// The status text of a keyed sliding window refused because its state
/// would leave the key's fingerprint fewer than 32 bits says so (it spoke
/// only of the limit's range and of GCRA).
#[test]
fn the_status_text_names_the_fingerprint_bits() {
    use crate::*;
    use std::ffi::CStr;
    let mut cfg = std::mem::MaybeUninit::<ratecell_config>::uninit();
    // SAFETY: `cfg` is writable and initialised by ratecell_config_init
    // before it is read; `limiter` is a place for the handle; the status
    // text is a static C string.
    let limiter = unsafe {
        ratecell_config_init(
            cfg.as_mut_ptr(),
            ratecell_algorithm::RATECELL_ALGORITHM_SLIDING_WINDOW as u32,
            1 << 31,
            1_000_000,
        );
        let mut cfg = cfg.assume_init();
        cfg.capacity = 100;
        let mut limiter = std::ptr::null_mut();
        let status = ratecell_limiter_new(&cfg, &mut limiter);
        assert_eq!(status, ratecell_status::RATECELL_INVALID_LIMIT);
        let text = CStr::from_ptr(ratecell_status_str(status as u32))
            .to_str()
            .unwrap();
        assert!(text.contains("fingerprint"), "{text}");
        limiter
    };
    assert!(limiter.is_null());
}

/// A request whose `size` this library does not know is refused with
/// `RATECELL_INVALID_LENGTH`, whose text names the size field (it spoke
/// only of "a length larger than any buffer can be", which sent a caller
/// compiled against another header looking at the key's length).
#[test]
fn an_unknown_request_size_is_named_as_such() {
    use crate::*;
    use std::ffi::CStr;
    let mut cfg = std::mem::MaybeUninit::<ratecell_config>::uninit();
    let mut request = std::mem::MaybeUninit::<ratecell_request>::uninit();
    // SAFETY: `cfg` and `request` are writable and initialised by their
    // _init functions before they are read; `limiter` is a place for the
    // handle, freed once; `out` is a writable decision; the status text is
    // a static C string.
    unsafe {
        ratecell_config_init(
            cfg.as_mut_ptr(),
            ratecell_algorithm::RATECELL_ALGORITHM_GCRA as u32,
            10,
            HOUR,
        );
        let mut limiter = std::ptr::null_mut();
        let status = ratecell_limiter_new(cfg.as_ptr(), &mut limiter);
        assert_eq!(status, ratecell_status::RATECELL_OK);
        ratecell_request_init(request.as_mut_ptr());
        let mut request = request.assume_init();
        request.at_ns = T0;
        let mut out = std::mem::zeroed::<ratecell_decision>();
        for size in [0, request.size - 8, request.size + 8] {
            request.size = size;
            let status = ratecell_check(limiter, &request, &mut out);
            assert_eq!(status, ratecell_status::RATECELL_INVALID_LENGTH, "{size}");
        }
        let text = CStr::from_ptr(ratecell_status_str(
            ratecell_status::RATECELL_INVALID_LENGTH as u32,
        ))
        .to_str()
        .unwrap();
        assert!(text.contains("size field"), "{text}");
        ratecell_limiter_free(limiter);
    }
}

/// `ratecell_check_batch` writes decisions into caller memory that may
/// hold anything (here, bytes that are no valid `bool`), without reading
/// it or borrowing it as decisions.
#[test]
fn a_batch_writes_into_garbage_buffers() {
    use crate::*;
    use std::mem::MaybeUninit;
    let mut cfg = MaybeUninit::<ratecell_config>::uninit();
    // SAFETY: `cfg` is initialised by ratecell_config_init before it is
    // read; every buffer below is as long as the count passed with it.
    unsafe {
        ratecell_config_init(
            cfg.as_mut_ptr(),
            ratecell_algorithm::RATECELL_ALGORITHM_GCRA as u32,
            2,
            HOUR,
        );
        let mut cfg = cfg.assume_init();
        cfg.capacity = 16;
        let mut limiter = std::ptr::null_mut();
        assert_eq!(
            ratecell_limiter_new(&cfg, &mut limiter),
            ratecell_status::RATECELL_OK
        );
        let keys = [1u64, 1, 1, 2];
        let mut allowed = [0xABu8; 4];
        let mut decisions = [MaybeUninit::<ratecell_decision>::uninit(); 4];
        for d in &mut decisions {
            d.as_mut_ptr()
                .cast::<u8>()
                .write_bytes(0xAB, size_of::<ratecell_decision>());
        }
        let mut batch = MaybeUninit::<ratecell_batch>::uninit();
        ratecell_batch_init(batch.as_mut_ptr());
        let mut batch = batch.assume_init();
        batch.keys = keys.as_ptr();
        batch.n = 4;
        batch.at_ns = T0;
        let status = ratecell_check_batch(
            limiter,
            &batch,
            allowed.as_mut_ptr(),
            decisions.as_mut_ptr().cast(),
        );
        assert_eq!(status, ratecell_status::RATECELL_OK);
        assert_eq!(allowed, [1, 1, 0, 1]);
        let allowed_d: Vec<bool> = decisions.iter().map(|d| d.assume_init().allowed).collect();
        assert_eq!(allowed_d, [true, true, false, true]);
        ratecell_limiter_free(limiter);
    }
}

//! `ratecell_options.states` through `ratecell_limiter_build`: where a
//! limiter's states come from (fresh, a snapshot file, a persisted file, a
//! shared region), each kept across handles as it promises, and each bad
//! option refused with the status that names it. A unit-test module of the
//! C library (src/lib.rs).

use crate::*;
use std::ffi::CString;
use std::ptr::{null, null_mut};

const HOUR: u64 = 3_600_000_000_000;

/// A keyed GCRA config of 2 an hour, 100 keys.
fn config() -> ratecell_config {
    let mut cfg = std::mem::MaybeUninit::<ratecell_config>::uninit();
    // SAFETY: `cfg` is writable; ratecell_config_init sets every field.
    let mut cfg = unsafe {
        ratecell_config_init(
            cfg.as_mut_ptr(),
            ratecell_algorithm::RATECELL_ALGORITHM_GCRA as u32,
            2,
            HOUR,
        );
        cfg.assume_init()
    };
    cfg.capacity = 100;
    cfg
}

/// Options of `configs` (one limit) with `states` from `path`.
fn options(
    configs: &[ratecell_config],
    states: ratecell_states,
    path: Option<&CString>,
) -> ratecell_options {
    let mut o = std::mem::MaybeUninit::<ratecell_options>::uninit();
    // SAFETY: `o` is writable; ratecell_options_init sets every field.
    let mut o = unsafe {
        ratecell_options_init(o.as_mut_ptr());
        o.assume_init()
    };
    o.configs = if configs.is_empty() {
        null()
    } else {
        configs.as_ptr()
    };
    o.n_limits = configs.len();
    o.states = states as u32;
    o.path = path.map_or(null(), |p| p.as_ptr());
    o
}

/// The status of `ratecell_limiter_build(o)`, and its handle on success.
fn build(o: &ratecell_options) -> (ratecell_status, *mut ratecell_limiter) {
    let mut out = null_mut();
    // SAFETY: `o` is live and its pointers are the caller's live configs
    // and paths; `out` is writable.
    let s = unsafe { ratecell_limiter_build(o, &mut out) };
    (s, out)
}

/// Whether one unit for `key` is admitted now (the limiter's clock: what
/// a save judges live by).
fn admits(l: *const ratecell_limiter, key: u64) -> bool {
    let mut r = std::mem::MaybeUninit::<ratecell_request>::uninit();
    let mut d = std::mem::MaybeUninit::<ratecell_decision>::uninit();
    // SAFETY: `r` is set up by ratecell_request_init before it is changed;
    // `l` is live; `d` is written on success, which is asserted.
    unsafe {
        ratecell_request_init(r.as_mut_ptr());
        let mut r = r.assume_init();
        (r.key_id, r.cost) = (key, 1);
        assert_eq!(
            ratecell_check(l, &r, d.as_mut_ptr()),
            ratecell_status::RATECELL_OK
        );
        d.assume_init().allowed
    }
}

fn temp(name: &str) -> (std::path::PathBuf, CString) {
    let path = std::env::temp_dir().join(format!("ratecell-states-{}-{name}", std::process::id()));
    let c = CString::new(path.to_str().unwrap()).unwrap();
    (path, c)
}

/// `ratecell_allow` finds the limiter of every kind of handle: direct and
/// keyed, fresh and persisted (which holds its limiter one pointer away).
#[test]
fn allow_answers_on_every_kind_of_handle() {
    use ratecell_states::*;
    use ratecell_status::*;
    for capacity in [0, 100] {
        for persisted in [false, true] {
            let mut cfg = config();
            cfg.capacity = capacity;
            let configs = [cfg];
            let (path, c_path) = temp(&format!("allow-{capacity}.snap"));
            let _ = std::fs::remove_file(&path);
            let mut o = options(&configs, RATECELL_STATES_FRESH, None);
            if persisted {
                o = options(&configs, RATECELL_STATES_PERSISTED, Some(&c_path));
                o.save_every_ns = HOUR;
            }
            let (s, l) = build(&o);
            assert_eq!(s, RATECELL_OK);
            // SAFETY: `l` is live until freed, and used no more after.
            let answers = unsafe {
                let answers: Vec<_> = (0..3).map(|_| ratecell_allow(l, 7)).collect();
                ratecell_limiter_free(l);
                answers
            };
            let case = format!("capacity {capacity}, persisted {persisted}");
            assert_eq!(
                answers,
                [RATECELL_OK, RATECELL_OK, RATECELL_DENIED],
                "{case}"
            );
            let _ = std::fs::remove_file(&path);
        }
    }
}

#[test]
fn a_snapshot_and_a_persisted_file_keep_the_states() {
    use ratecell_states::*;
    use ratecell_status::*;
    let configs = [config()];
    let (path, c_path) = temp("persisted.snap");
    let _ = std::fs::remove_file(&path);
    // Persisted, the file missing: fresh, then saved when freed.
    let mut o = options(&configs, RATECELL_STATES_PERSISTED, Some(&c_path));
    o.save_every_ns = HOUR;
    let (s, l) = build(&o);
    assert_eq!(s, RATECELL_OK);
    assert!(admits(l, 7) && admits(l, 7) && !admits(l, 7));
    // SAFETY: `l` is live and used no more.
    unsafe { ratecell_limiter_free(l) };
    assert!(path.exists(), "the free saved it");
    // Persisted again: restored from the file it left.
    let (s, l) = build(&o);
    assert_eq!(s, RATECELL_OK);
    assert!(!admits(l, 7), "7 stays spent");
    assert!(admits(l, 8), "8 is fresh");
    // SAFETY: `l` is live and used no more.
    unsafe { ratecell_limiter_free(l) };
    // Stopped before the free: the last save's status, then no more saves
    // (a file removed after the stop is not written again by the free).
    let (s, l) = build(&o);
    assert_eq!(s, RATECELL_OK);
    // SAFETY: `l` is live.
    assert_eq!(unsafe { ratecell_snapshot_stop(l) }, RATECELL_OK);
    // SAFETY: `l` is live.
    assert_eq!(unsafe { ratecell_snapshot_stop(l) }, RATECELL_OK, "twice");
    let saved = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(admits(l, 9), "it goes on checking");
    // SAFETY: `l` is live and used no more.
    unsafe { ratecell_limiter_free(l) };
    assert!(!path.exists(), "the free saved nothing more");
    std::fs::write(&path, saved).unwrap();
    // A limiter that is not persisted: nothing to stop.
    let (s, fresh) = build(&options(&configs, RATECELL_STATES_FRESH, None));
    assert_eq!(s, RATECELL_OK);
    // SAFETY: `fresh` is live, then used no more; NULL is refused.
    unsafe {
        assert_eq!(ratecell_snapshot_stop(fresh), RATECELL_OK);
        assert_eq!(ratecell_snapshot_stop(null()), RATECELL_NULL_ARGUMENT);
        ratecell_limiter_free(fresh);
    }
    // A snapshot: the same states, with the file's limits or the given.
    for given in [&configs[..], &[]] {
        let (s, l) = build(&options(given, RATECELL_STATES_SNAPSHOT, Some(&c_path)));
        assert_eq!(s, RATECELL_OK);
        assert!(!admits(l, 7), "7 spent");
        assert!(admits(l, 8) && !admits(l, 8), "8 had one left");
        // SAFETY: `l` is live and used no more.
        unsafe { ratecell_limiter_free(l) };
    }
    std::fs::remove_file(&path).unwrap();
    let (s, l) = build(&options(&configs, RATECELL_STATES_SNAPSHOT, Some(&c_path)));
    assert_eq!((s, l), (RATECELL_SNAPSHOT_NOT_FOUND, null_mut()));
}

#[cfg(target_os = "linux")]
#[test]
fn a_shared_region_is_shared_across_handles_and_filled_from_its_seed() {
    use ratecell_states::*;
    use ratecell_status::*;
    let configs = [config()];
    let region = format!("ratecell-states-{}", std::process::id());
    let c_region = CString::new(region.as_str()).unwrap();
    let region_path = std::path::Path::new("/dev/shm").join(&region);
    let (seed, c_seed) = temp("seed.snap");
    let _ = std::fs::remove_file(&region_path);
    let mut o = options(&configs, RATECELL_STATES_SHARED, None);
    o.shared_path = c_region.as_ptr();
    let ((s1, a), (s2, b)) = (build(&o), build(&o));
    assert_eq!((s1, s2), (RATECELL_OK, RATECELL_OK));
    assert!(admits(a, 3) && admits(b, 3));
    assert!(!admits(a, 3) && !admits(b, 3), "one state for both handles");
    // SAFETY: `a` is live; the path is NUL-terminated.
    let saved = unsafe { ratecell_snapshot_save(a, c_seed.as_ptr()) };
    assert_eq!(saved, RATECELL_OK);
    // SAFETY: `a` and `b` are live and used no more.
    unsafe {
        ratecell_limiter_free(a);
        ratecell_limiter_free(b);
    }
    // The region gone, a new one is filled from the seed.
    std::fs::remove_file(&region_path).unwrap();
    o.path = c_seed.as_ptr();
    let (s, c) = build(&o);
    assert_eq!(s, RATECELL_OK);
    assert!(!admits(c, 3), "3 spent, from the seed");
    assert!(admits(c, 4));
    // SAFETY: `c` is live and used no more.
    unsafe { ratecell_limiter_free(c) };
    let _ = std::fs::remove_file(&region_path);
    let _ = std::fs::remove_file(&seed);
}

#[test]
fn each_bad_option_is_refused_by_the_status_naming_it() {
    use ratecell_states::*;
    use ratecell_status::*;
    let configs = [config()];
    let (_, c_path) = temp("never.snap");
    let region = CString::new("ratecell-states-never-made").unwrap();
    let refused = |o: ratecell_options, want: ratecell_status| {
        let (s, l) = build(&o);
        assert_eq!((s, l), (want, null_mut()), "{o:?}");
    };
    // States out of range.
    let mut o = options(&configs, RATECELL_STATES_FRESH, None);
    o.states = 4;
    refused(o, RATECELL_INVALID_STATES);
    // A field the states do not read: a path or a period for fresh
    // states, a region for any but shared, a period for a snapshot or a
    // region.
    refused(
        options(&configs, RATECELL_STATES_FRESH, Some(&c_path)),
        RATECELL_INVALID_STATES,
    );
    let mut o = options(&configs, RATECELL_STATES_FRESH, None);
    o.save_every_ns = HOUR;
    refused(o, RATECELL_INVALID_STATES);
    for states in [
        RATECELL_STATES_FRESH,
        RATECELL_STATES_SNAPSHOT,
        RATECELL_STATES_PERSISTED,
    ] {
        let mut o = options(&configs, states, Some(&c_path));
        if states == RATECELL_STATES_FRESH {
            o.path = null();
        }
        o.shared_path = region.as_ptr();
        refused(o, RATECELL_INVALID_STATES);
    }
    let mut o = options(&configs, RATECELL_STATES_SNAPSHOT, Some(&c_path));
    o.save_every_ns = HOUR;
    refused(o, RATECELL_INVALID_STATES);
    let mut o = options(&configs, RATECELL_STATES_SHARED, None);
    o.shared_path = region.as_ptr();
    o.save_every_ns = HOUR;
    refused(o, RATECELL_INVALID_STATES);
    // The path the states need, missing.
    refused(
        options(&configs, RATECELL_STATES_SNAPSHOT, None),
        RATECELL_NULL_ARGUMENT,
    );
    refused(
        options(&configs, RATECELL_STATES_PERSISTED, None),
        RATECELL_NULL_ARGUMENT,
    );
    refused(
        options(&configs, RATECELL_STATES_SHARED, None),
        RATECELL_NULL_ARGUMENT,
    );
    // No limit (a count out of range): only a snapshot's states may give
    // them.
    refused(
        options(&[], RATECELL_STATES_FRESH, None),
        RATECELL_INVALID_LENGTH,
    );
    // A shared region of a direct limiter (capacity 0).
    let mut direct = configs;
    direct[0].capacity = 0;
    let mut o = options(&direct, RATECELL_STATES_SHARED, None);
    o.shared_path = region.as_ptr();
    refused(o, RATECELL_SHARED_UNSUPPORTED);
    assert!(!std::path::Path::new("/dev/shm/ratecell-states-never-made").exists());
}

//! The lease protocol through the C ABI (`src/leases.rs`): nodes that
//! carry grants to a stand-in for the module's fixed window, the argv they
//! would send, failures and the policies, the denial cache, and every bad
//! argument refused by status. A unit-test module of the C library
//! (src/lib.rs says why).

use crate::*;
use std::mem::MaybeUninit;
use std::ptr::{null, null_mut};

use ratecell_status::*;

const S: u64 = 1_000_000_000;
const T0: u64 = 1_700_000_000 * S;

fn config(algorithm: ratecell_algorithm, limit: u64, period_ns: u64) -> ratecell_config {
    let mut cfg = MaybeUninit::<ratecell_config>::uninit();
    // SAFETY: a writable local, initialised by the call before it is read.
    unsafe {
        ratecell_config_init(cfg.as_mut_ptr(), algorithm as u32, limit, period_ns);
        cfg.assume_init()
    }
}

fn options() -> ratecell_lease_options {
    let mut o = MaybeUninit::<ratecell_lease_options>::uninit();
    // SAFETY: a writable local, initialised by the call before it is read.
    unsafe {
        ratecell_lease_options_init(o.as_mut_ptr());
        o.assume_init()
    }
}

fn request(key: u64, cost: u64, at_ns: u64) -> ratecell_request {
    let mut r = MaybeUninit::<ratecell_request>::uninit();
    // SAFETY: a writable local, initialised by the call before it is read.
    let mut r = unsafe {
        ratecell_request_init(r.as_mut_ptr());
        r.assume_init()
    };
    r.key_id = key;
    r.cost = cost;
    r.at_ns = at_ns;
    r
}

/// Owned leases, freed on drop.
struct L(*mut ratecell_leases);

impl L {
    fn new(cfg: &ratecell_config, o: &ratecell_lease_options) -> Result<L, ratecell_status> {
        let mut l = null_mut();
        // SAFETY: valid pointers to locals.
        match unsafe { ratecell_leases_new(cfg, o, &mut l) } {
            RATECELL_OK => Ok(L(l)),
            s => {
                assert!(l.is_null(), "nothing written on failure");
                Err(s)
            }
        }
    }

    /// A check: its step, decision and grant (owned).
    fn check(&self, r: &ratecell_request) -> (u32, ratecell_decision, Grant) {
        let mut d = ratecell_decision::default();
        let mut g = null_mut();
        let mut step = u32::MAX;
        // SAFETY: a live handle and pointers to locals.
        let s = unsafe { ratecell_leases_check(self.0, r, &mut step, &mut d, &mut g) };
        assert_eq!(s, RATECELL_OK);
        (step, d, Grant(g))
    }

    fn complete(&self, g: &Grant, reply: Option<&[i64]>, now: u64) -> ratecell_completion {
        let mut c = ratecell_completion::default();
        let (p, n) = reply.map_or((null(), 0), |r| (r.as_ptr(), r.len()));
        // SAFETY: live handles; `p` has `n` integers.
        let s = unsafe { ratecell_leases_complete(self.0, g.0, p, n, now, &mut c) };
        assert_eq!(s, RATECELL_OK);
        c
    }

    fn stats(&self) -> ratecell_lease_stats {
        let mut s = ratecell_lease_stats::default();
        // SAFETY: a live handle and a local.
        let status = unsafe { ratecell_leases_stats(self.0, &mut s) };
        assert_eq!(status, RATECELL_OK);
        s
    }
}

impl Drop for L {
    fn drop(&mut self) {
        // SAFETY: made by ratecell_leases_new, freed once; its grants are
        // dropped before it in every test.
        unsafe { ratecell_leases_free(self.0) };
    }
}

/// An owned grant (or NULL), freed on drop.
struct Grant(*mut ratecell_grant);

impl Grant {
    fn info(&self) -> ratecell_grant_info {
        let mut i = MaybeUninit::<ratecell_grant_info>::uninit();
        // SAFETY: a live grant and a writable local, written on OK.
        unsafe {
            assert_eq!(ratecell_grant_info(self.0, i.as_mut_ptr()), RATECELL_OK);
            i.assume_init()
        }
    }

    fn args(&self) -> Vec<String> {
        let mut ptrs = [null(); RATECELL_LEASE_MAX_ARGS];
        let mut lens = [0usize; RATECELL_LEASE_MAX_ARGS];
        let mut n = 0;
        // SAFETY: a live grant; arrays of the capacity given; the argument
        // bytes live as long as the grant, which outlives this read.
        unsafe {
            let s = ratecell_grant_command(
                self.0,
                ptrs.as_mut_ptr(),
                lens.as_mut_ptr(),
                ptrs.len(),
                &mut n,
            );
            assert_eq!(s, RATECELL_OK);
            (0..n)
                .map(|i| {
                    let b = std::slice::from_raw_parts(ptrs[i], lens[i]);
                    String::from_utf8(b.to_vec()).unwrap()
                })
                .collect()
        }
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        // SAFETY: NULL or a grant owned here, freed once.
        unsafe { ratecell_grant_free(self.0) };
    }
}

/// The module's fixed window, as `RATECELL.LEASE` decides it (SPEC §8):
/// the largest `g <= want` that fits in the window's count.
struct Module {
    limit: u64,
    period: u64,
    window: u64,
    count: u64,
}

impl Module {
    fn lease(&mut self, want: u64, at: u64) -> [i64; 5] {
        let w = at / self.period;
        if w != self.window {
            self.window = w;
            self.count = 0;
        }
        let g = want.min(self.limit - self.count);
        self.count += g;
        let end = (w + 1) * self.period;
        let retry = if g == 0 { end - at } else { 0 };
        [g, end, retry, self.limit, self.limit - self.count].map(|x| x as i64)
    }
}

#[test]
fn nodes_spend_grants_locally_and_never_exceed_the_window() {
    let limit = 50;
    let cfg = config(
        ratecell_algorithm::RATECELL_ALGORITHM_FIXED_WINDOW,
        limit,
        S,
    );
    let mut o = options();
    o.send_at = 1;
    o.skew_ns = 0;
    o.max_grant = 8;
    let prefix = b"p:";
    o.prefix = prefix.as_ptr();
    o.prefix_len = prefix.len();
    let nodes: Vec<L> = (0..3).map(|_| L::new(&cfg, &o).unwrap()).collect();
    let mut module = Module {
        limit,
        period: S,
        window: 0,
        count: 0,
    };
    let mut admitted = std::collections::HashMap::<u64, u64>::new();
    let mut steps = [0u64; 4];
    let mut checked_args = false;
    // Three windows of checks, round-robin over the nodes, 1 ms apart;
    // refills answered at once, as a fast background thread would.
    for i in 0..3000u64 {
        let t = T0 + i * S / 1000;
        let node = &nodes[(i % 3) as usize];
        let (step, d, g) = node.check(&request(7, 1, t));
        steps[step as usize] += 1;
        let allowed = match step {
            RATECELL_STEP_DECIDED => d.allowed,
            RATECELL_STEP_REFILL => {
                let info = g.info();
                assert!(!info.is_fetch);
                node.complete(&g, Some(&module.lease(info.want, info.at_ns)), t);
                d.allowed
            }
            RATECELL_STEP_FETCH => {
                let info = g.info();
                assert!(info.is_fetch && info.want >= 1 && info.want <= 8);
                // SAFETY: the key's bytes, owned by the live grant.
                let key = unsafe { std::slice::from_raw_parts(info.key, info.key_len) };
                assert_eq!(key, 7u64.to_le_bytes());
                if !checked_args {
                    let args = g.args();
                    assert_eq!(args[0], "RATECELL.LEASE");
                    assert_eq!(
                        args[1].as_bytes(),
                        [b"p:".as_slice(), &7u64.to_le_bytes()].concat()
                    );
                    assert_eq!(&args[2..5], ["fixed_window", "50", "1000000000ns"]);
                    assert_eq!(&args[args.len() - 2..], ["AT".to_string(), t.to_string()]);
                    checked_args = true;
                }
                let c = node.complete(&g, Some(&module.lease(info.want, info.at_ns)), t);
                assert!(c.has_decision && !c.has_retry);
                c.decision.allowed
            }
            other => panic!("step {other}"),
        };
        if allowed {
            *admitted.entry(t / S).or_default() += 1;
        }
    }
    assert!(checked_args);
    assert!(steps[RATECELL_STEP_DECIDED as usize] > 1000, "{steps:?}");
    assert!(steps[RATECELL_STEP_REFILL as usize] > 0, "{steps:?}");
    for (w, n) in &admitted {
        assert!(*n <= limit, "window {w}: {n} admitted, limit {limit}");
    }
    // The limit is used, not just respected: each window admits most of it.
    assert!(
        admitted.values().all(|&n| n >= limit - 3 * 8),
        "{admitted:?}"
    );
    let fetches: u64 = nodes.iter().map(|n| n.stats().fetches).sum();
    assert_eq!(fetches, steps[RATECELL_STEP_FETCH as usize]);
}

#[test]
fn no_reply_is_the_policys_and_a_retry_follows() {
    let cfg = config(ratecell_algorithm::RATECELL_ALGORITHM_GCRA, 100, S);
    let l = L::new(&cfg, &options()).unwrap();
    let (step, _, g) = l.check(&request(1, 1, T0));
    assert_eq!(step, RATECELL_STEP_FETCH);
    let c = l.complete(&g, None, T0);
    assert!(c.has_decision && !c.decision.allowed, "deny policy");
    assert!(c.has_retry && c.retry_at_ns > T0);
    assert_eq!(c.decision.retry_after_ns, c.retry_at_ns - T0);
    let mut retry = null_mut();
    // SAFETY: live handles and a local.
    let status = unsafe { ratecell_leases_retry(l.0, g.0, c.retry_at_ns, &mut retry) };
    assert_eq!(status, RATECELL_OK);
    let retry = Grant(retry);
    assert!(!retry.info().is_fetch);
    assert_eq!(retry.info().at_ns, c.retry_at_ns);
    // Meanwhile the key is the policy's without a grant request.
    let (step, d, g2) = l.check(&request(1, 1, T0 + 1));
    assert_eq!(step, RATECELL_STEP_DECIDED);
    assert!(!d.allowed && g2.0.is_null());
    assert_eq!(l.stats().lease_fallbacks, 2);

    let mut o = options();
    o.failure = RATECELL_FAILURE_LOCAL;
    o.expected_nodes = 4;
    let local = L::new(&cfg, &o).unwrap();
    let (step, _, g) = local.check(&request(1, 1, T0));
    assert_eq!(step, RATECELL_STEP_FETCH);
    let c = local.complete(&g, None, T0);
    assert!(c.decision.allowed, "the local share admits");
}

#[test]
fn bad_replies_are_refused_and_change_nothing() {
    let cfg = config(ratecell_algorithm::RATECELL_ALGORITHM_FIXED_WINDOW, 10, S);
    let l = L::new(&cfg, &options()).unwrap();
    let other = L::new(&cfg, &options()).unwrap();
    let (step, _, g) = l.check(&request(1, 1, T0));
    assert_eq!(step, RATECELL_STEP_FETCH);
    let mut c = ratecell_completion::default();
    let bad: [&[i64]; 4] = [
        &[1, 2, 3],
        &[1, 2, 3, 4, 5, 6],
        &[-5, T0 as i64, 0, 10, 5],
        &[],
    ];
    for reply in bad {
        let p = if reply.is_empty() {
            [0i64].as_ptr()
        } else {
            reply.as_ptr()
        };
        // SAFETY: live handles; `p` has `reply.len()` integers.
        let s = unsafe { ratecell_leases_complete(l.0, g.0, p, reply.len(), T0, &mut c) };
        assert_eq!(s, RATECELL_INVALID_REPLY, "{reply:?}");
    }
    // SAFETY: live handles; the NULL reply has a non-zero length.
    unsafe {
        assert_eq!(
            ratecell_leases_complete(l.0, g.0, null(), 5, T0, &mut c),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_leases_complete(other.0, g.0, null(), 0, T0, &mut c),
            RATECELL_INVALID_GRANT
        );
        assert_eq!(
            ratecell_leases_complete(l.0, null(), null(), 0, T0, &mut c),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_leases_complete(l.0, g.0, null(), 0, T0, null_mut()),
            RATECELL_NULL_ARGUMENT
        );
        let mut r = null_mut();
        assert_eq!(
            ratecell_leases_retry(other.0, g.0, T0, &mut r),
            RATECELL_INVALID_GRANT
        );
        assert!(r.is_null());
    }
    assert_eq!(l.stats().replies, 0, "no bad reply was taken");
    // A good reply still completes the grant afterwards.
    let c = l.complete(&g, Some(&[3, (T0 + S / 10) as i64, 0, 10, 7]), T0);
    assert!(c.decision.allowed);
}

#[test]
fn bad_arguments_are_statuses_never_crashes() {
    let cfg = config(ratecell_algorithm::RATECELL_ALGORITHM_GCRA, 100, S);
    let l = L::new(&cfg, &options()).unwrap();
    let mut d = ratecell_decision::default();
    let mut g = null_mut();
    let r = request(1, 1, T0);
    let mut step = u32::MAX;
    // SAFETY: every pointer is NULL or to a local; the bad ones are refused
    // before they are read.
    unsafe {
        assert_eq!(
            ratecell_leases_check(null(), &r, &mut step, &mut d, &mut g),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_leases_check(l.0, null(), &mut step, &mut d, &mut g),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_leases_check(l.0, &r, &mut step, null_mut(), &mut g),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_leases_check(l.0, &r, &mut step, &mut d, null_mut()),
            RATECELL_NULL_ARGUMENT
        );
        let mut bad = r;
        bad.size -= 8;
        assert_eq!(
            ratecell_leases_check(l.0, &bad, &mut step, &mut d, &mut g),
            RATECELL_INVALID_LENGTH
        );
        let mut bad = r;
        bad.key_len = 4;
        assert_eq!(
            ratecell_leases_check(l.0, &bad, &mut step, &mut d, &mut g),
            RATECELL_NULL_ARGUMENT
        );
        let mut bad = r;
        bad.tier = 1;
        assert_eq!(
            ratecell_leases_check(l.0, &bad, &mut step, &mut d, &mut g),
            RATECELL_INVALID_TIER
        );
        let mut bad = r;
        bad.key_bytes = b"k".as_ptr();
        bad.key_len = usize::MAX;
        assert_eq!(
            ratecell_leases_check(l.0, &bad, &mut step, &mut d, &mut g),
            RATECELL_INVALID_LENGTH
        );
        assert_eq!(
            ratecell_leases_check(l.0, &r, null_mut(), &mut d, &mut g),
            RATECELL_NULL_ARGUMENT
        );
        assert!(g.is_null(), "nothing written by a refused check");
        assert_eq!(step, u32::MAX, "no step written by a refused check");
        assert_eq!(l.stats().fetches, 0, "nothing asked by a refused check");

        // The grant's accessors.
        let (_, _, grant) = l.check(&r);
        let mut n = 0;
        let mut ptrs = [null(); 2];
        let mut lens = [0usize; 2];
        assert_eq!(
            ratecell_grant_command(grant.0, ptrs.as_mut_ptr(), lens.as_mut_ptr(), 2, &mut n),
            RATECELL_INVALID_LENGTH
        );
        assert!(n > 2 && n <= RATECELL_LEASE_MAX_ARGS);
        assert_eq!(
            ratecell_grant_command(grant.0, null_mut(), null_mut(), 0, &mut n),
            RATECELL_INVALID_LENGTH
        );
        assert_eq!(
            ratecell_grant_command(grant.0, null_mut(), null_mut(), 16, &mut n),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_grant_command(null(), null_mut(), null_mut(), 0, &mut n),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_grant_command(grant.0, null_mut(), null_mut(), 0, null_mut()),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_grant_info(null(), null_mut()),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_grant_info(grant.0, null_mut()),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_leases_stats(null(), null_mut()),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(ratecell_leases_now_ns(null()), 0);
        assert!(ratecell_leases_now_ns(l.0) > T0 / 2);
        ratecell_grant_free(null_mut());
        ratecell_leases_free(null_mut());
    }
}

#[test]
fn each_bad_option_is_named_by_its_status() {
    let gcra = config(ratecell_algorithm::RATECELL_ALGORITHM_GCRA, 100, S);
    let fixed = config(ratecell_algorithm::RATECELL_ALGORITHM_FIXED_WINDOW, 100, S);
    let with = |f: &dyn Fn(&mut ratecell_lease_options)| {
        let mut o = options();
        f(&mut o);
        o
    };
    let cases: [(ratecell_config, ratecell_lease_options, ratecell_status); 10] = [
        (
            config(ratecell_algorithm::RATECELL_ALGORITHM_SLIDING_LOG, 100, S),
            options(),
            RATECELL_NOT_LEASABLE,
        ),
        (
            config(ratecell_algorithm::RATECELL_ALGORITHM_LEAKY_BUCKET, 100, S),
            options(),
            RATECELL_NOT_LEASABLE,
        ),
        (
            config(ratecell_algorithm::RATECELL_ALGORITHM_GCRA, 0, S),
            options(),
            RATECELL_INVALID_LIMIT,
        ),
        (
            gcra,
            with(&|o| o.max_grant = 101),
            RATECELL_INVALID_MAX_GRANT,
        ),
        (
            gcra,
            with(&|o| o.horizon_ns = 2 * S),
            RATECELL_INVALID_HORIZON,
        ),
        (gcra, with(&|o| o.expire_ns = 1), RATECELL_INVALID_EXPIRE),
        (
            fixed,
            with(&|o| o.expire_ns = S / 2),
            RATECELL_INVALID_EXPIRE,
        ),
        (gcra, with(&|o| o.skew_ns = S), RATECELL_INVALID_SKEW),
        (
            gcra,
            with(&|o| {
                o.failure = RATECELL_FAILURE_LOCAL;
                o.expected_nodes = 0
            }),
            RATECELL_INVALID_FAILURE,
        ),
        (gcra, with(&|o| o.failure = 7), RATECELL_INVALID_FAILURE),
    ];
    for (cfg, o, want) in cases {
        assert_eq!(L::new(&cfg, &o).err(), Some(want), "{o:?}");
        // SAFETY: a static string.
        let text = unsafe { std::ffi::CStr::from_ptr(ratecell_status_str(want as u32)) };
        assert!(text.to_str().unwrap().starts_with("invalid"), "{text:?}");
    }
    let mut out = null_mut();
    let mut o = options();
    // SAFETY: pointers to locals or NULL, refused before reading.
    unsafe {
        assert_eq!(
            ratecell_leases_new(null(), &o, &mut out),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_leases_new(&gcra, null(), &mut out),
            RATECELL_NULL_ARGUMENT
        );
        assert_eq!(
            ratecell_leases_new(&gcra, &o, null_mut()),
            RATECELL_NULL_ARGUMENT
        );
        o.prefix_len = 3;
        assert_eq!(
            ratecell_leases_new(&gcra, &o, &mut out),
            RATECELL_NULL_ARGUMENT
        );
        o.prefix_len = 0;
        o.size += 1;
        assert_eq!(
            ratecell_leases_new(&gcra, &o, &mut out),
            RATECELL_INVALID_LENGTH
        );
        let mut cfg = gcra;
        cfg.algorithm = 99;
        o.size -= 1;
        assert_eq!(
            ratecell_leases_new(&cfg, &o, &mut out),
            RATECELL_INVALID_ALGORITHM
        );
    }
    assert!(out.is_null());
}

#[test]
fn denials_are_remembered_until_their_retry() {
    let mut c = null_mut();
    // SAFETY: pointers to locals; the cache is freed once.
    unsafe {
        assert_eq!(ratecell_denials_new(0, 9, &mut c), RATECELL_INVALID_CLOCK);
        assert_eq!(ratecell_denials_new(0, 0, &mut c), RATECELL_OK);
        let denied = ratecell_decision {
            allowed: false,
            limit: 5,
            remaining: 0,
            retry_after_ns: 100,
            reset_after_ns: 300,
            wait_ns: 0,
        };
        // The request carries its time, as every request does.
        let key = |at_ns| {
            let mut r = request(0, 1, at_ns);
            r.key_bytes = b"user:1".as_ptr();
            r.key_len = 6;
            r
        };
        let mut d = ratecell_decision::default();
        let mut found = false;
        // The cache's answer at `at_ns`: the remembered denial, if any.
        let mut check = |at_ns| {
            let mut found = false;
            let s = ratecell_denials_check(c, &key(at_ns), &mut found, &mut d);
            assert_eq!(s, RATECELL_OK);
            found.then_some(d)
        };
        assert!(check(1_000).is_none());
        assert_eq!(
            ratecell_denials_remember(c, &key(1_000), &denied),
            RATECELL_OK
        );
        let d40 = check(1_040).expect("remembered");
        assert_eq!(
            (d40.allowed, d40.retry_after_ns, d40.reset_after_ns),
            (false, 60, 260)
        );
        assert!(check(1_100).is_none(), "over");
        let allowed = ratecell_decision {
            allowed: true,
            ..denied
        };
        assert_eq!(
            ratecell_denials_remember(c, &key(2_000), &allowed),
            RATECELL_OK
        );
        assert!(check(2_001).is_none(), "admissions are not kept");
        // A `bool` byte that is neither 0 nor 1 is read as true, not UB.
        let mut garbage = denied;
        std::ptr::addr_of_mut!(garbage.allowed)
            .cast::<u8>()
            .write(7);
        assert_eq!(
            ratecell_denials_remember(c, &key(3_000), &garbage),
            RATECELL_OK
        );
        assert!(check(3_001).is_none());
        // A request at RATECELL_NOW is at the cache's clock: a denial of a
        // minute remembered now is found now (remembered at the times
        // above, or at 0, it would have ended decades ago).
        let minute = ratecell_decision {
            retry_after_ns: 60 * S,
            reset_after_ns: 60 * S,
            ..denied
        };
        assert_eq!(
            ratecell_denials_remember(c, &key(RATECELL_NOW), &minute),
            RATECELL_OK
        );
        let now = check(RATECELL_NOW).expect("remembered at the cache's clock");
        assert!(!now.allowed && now.retry_after_ns > 0 && now.retry_after_ns <= 60 * S);
        for (s, what) in [
            (
                ratecell_denials_check(null(), &key(0), &mut found, &mut d),
                "denials",
            ),
            (
                ratecell_denials_check(c, null(), &mut found, &mut d),
                "request",
            ),
            (
                ratecell_denials_check(c, &key(0), null_mut(), &mut d),
                "found_out",
            ),
            (
                ratecell_denials_check(c, &key(0), &mut found, null_mut()),
                "out",
            ),
            (ratecell_denials_remember(c, &key(0), null()), "decision"),
        ] {
            assert_eq!(s, RATECELL_NULL_ARGUMENT, "a NULL {what}");
        }
        assert!(!found, "a refused check writes nothing");
        ratecell_denials_free(c);
        ratecell_denials_free(null_mut());
    }
}

//! The lease protocol with explicit times: what a check decides, what a
//! reply does, and the failure policy's bookkeeping.

use super::*;
use crate::{Algorithm, Config, Decision, Request};

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000 * S;

fn fixed(limit: u64) -> LeaseConfig {
    LeaseConfig::new(Config::new(Algorithm::FixedWindow, limit, S)).skew_ns(0)
}

fn empty(retry_after_ns: u64) -> GrantReply {
    GrantReply {
        units: 0,
        expires_at_ns: 0,
        retry_after_ns,
        limit: 100,
        remaining: 0,
    }
}

fn fetch(step: Step) -> GrantRequest {
    match step {
        Step::Fetch(r) => r,
        other => panic!("expected a fetch, got {other:?}"),
    }
}

/// A decision made here, with or without a refill to send.
fn decided(step: Step) -> Decision {
    match step {
        Step::Decided(d) | Step::Refill(d, _) => d,
        other => panic!("expected a local decision, got {other:?}"),
    }
}

/// Checks once at `t`, fetching a grant of `units` until `until` when asked.
fn check_granting(l: &Leases, key: u64, t: u64, units: u64, until: u64) -> Decision {
    match l.check(key, 1, t) {
        Step::Fetch(r) => l
            .complete(&r, Some(GrantReply::of(units, until)), t)
            .decision
            .unwrap(),
        Step::Refill(d, r) => {
            l.complete(&r, Some(GrantReply::of(units, until)), t);
            d
        }
        Step::Decided(d) => d,
        Step::Direct => panic!("untracked"),
    }
}

#[test]
fn a_first_check_fetches_one_unit_and_grants_grow_with_the_checks() {
    let l = Leases::new(fixed(1000)).unwrap();
    let mut wants = vec![];
    for i in 0..40 {
        let t = T0 + i * MS;
        match l.check(1, 1, t) {
            Step::Fetch(r) => {
                wants.push(r.want());
                assert!(r.is_fetch());
                let d = l.complete(&r, Some(GrantReply::of(r.want(), T0 + S)), t);
                assert!(d.decision.unwrap().allowed);
            }
            Step::Refill(d, r) => {
                assert!(d.allowed);
                wants.push(r.want());
                l.complete(&r, Some(GrantReply::of(r.want(), T0 + S)), t);
            }
            Step::Decided(d) => assert!(d.allowed),
            Step::Direct => panic!(),
        }
    }
    // 1, then growing with the checks seen, never above W = 100.
    assert_eq!(wants[..3], [1, 2, 3]);
    assert!(wants.iter().all(|&w| w <= 100), "{wants:?}");
    assert!(wants.len() < 12, "most checks spent locally: {wants:?}");
}

#[test]
fn a_quarter_left_asks_once_for_a_refill_in_the_background() {
    let l = Leases::new(fixed(1000)).unwrap();
    let r = fetch(l.check(1, 1, T0));
    // Asked for 1, granted 8 (the reply may differ from the want).
    assert_eq!(
        l.complete(&r, Some(GrantReply::of(8, T0 + S)), T0)
            .decision
            .unwrap()
            .remaining,
        7
    );
    let mut refills = vec![];
    for i in 1..=5 {
        match l.check(1, 1, T0 + i) {
            Step::Decided(d) => assert!(d.allowed),
            Step::Refill(d, r) => {
                assert!(d.allowed && !r.is_fetch());
                assert_eq!(d.remaining, 2, "8 / 4 = 2 left");
                refills.push(r);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(refills.len(), 1, "one refill per grant");
    // The refill, same window: one pool with the 2 left.
    l.complete(&refills[0], Some(GrantReply::of(5, T0 + S)), T0 + 6);
    for i in 0..7 {
        assert!(decided(l.check(1, 1, T0 + 7 + i)).allowed);
    }
    assert!(matches!(l.check(1, 1, T0 + 20), Step::Fetch(_)));
    // The pool of 7 asked for its own refill at a quarter (1 left).
    assert_eq!(l.stats().refills, 2);
}

#[test]
fn a_fifth_of_the_lifetime_left_asks_for_a_refill() {
    let l = Leases::new(fixed(1000)).unwrap();
    let r = fetch(l.check(1, 1, T0));
    l.complete(&r, Some(GrantReply::of(100, T0 + 100 * MS)), T0);
    assert!(matches!(l.check(1, 1, T0 + 79 * MS), Step::Decided(_)));
    assert!(matches!(l.check(1, 1, T0 + 80 * MS), Step::Refill(..)));
}

#[test]
fn units_are_spent_only_before_expiry_less_the_skew() {
    let cfg = fixed(1000).skew_ns(MS);
    let l = Leases::new(cfg).unwrap();
    let r = fetch(l.check(1, 1, T0));
    l.complete(&r, Some(GrantReply::of(50, T0 + 10 * MS)), T0);
    assert!(decided(l.check(1, 1, T0 + 9 * MS - 1)).allowed);
    // Usable until 9 ms: the next check finds none.
    let r = fetch(l.check(1, 1, T0 + 9 * MS));
    // A grant that expires within the skew is lost on arrival.
    let d = l.complete(
        &r,
        Some(GrantReply::of(5, T0 + 9 * MS + MS / 2)),
        T0 + 9 * MS,
    );
    assert!(!d.decision.unwrap().allowed);
}

#[test]
fn a_grant_of_another_expiry_waits_until_the_units_in_hand_are_gone() {
    let l =
        Leases::new(LeaseConfig::new(Config::new(Algorithm::Gcra, 1000, S)).skew_ns(0)).unwrap();
    let r = fetch(l.check(1, 1, T0));
    l.complete(&r, Some(GrantReply::of(4, T0 + 100 * MS)), T0);
    // Spends to 1 left (a quarter), then the refill arrives with a later
    // expiry: it is kept, not merged (its units may outlive these).
    let t = T0 + 50 * MS;
    let Step::Refill(_, refill) = l.check(1, 2, t) else {
        panic!()
    };
    // Granted at `t`: its units are those of [t, t + E).
    l.complete(&refill, Some(GrantReply::of(10, t + 100 * MS)), t + 1);
    assert_eq!(decided(l.check(1, 1, t + 2)).remaining, 0);
    // The one in hand spent: the kept grant takes over.
    assert_eq!(decided(l.check(1, 1, t + 3)).remaining, 9);
    // And expires at its own time.
    assert!(matches!(l.check(1, 1, t + 100 * MS), Step::Fetch(_)));
}

#[test]
fn an_empty_grant_is_remembered_until_its_retry_after() {
    let l = Leases::new(fixed(1000)).unwrap();
    let r = fetch(l.check(1, 1, T0));
    let d = l.complete(&r, Some(empty(300 * MS)), T0).decision.unwrap();
    assert_eq!((d.allowed, d.retry_after_ns), (false, 300 * MS));
    let d = decided(l.check(1, 1, T0 + 100 * MS));
    assert_eq!((d.allowed, d.retry_after_ns), (false, 200 * MS));
    let r = fetch(l.check(1, 1, T0 + 300 * MS));
    // The denied checks count as demand: the next grant is bigger.
    assert!(r.want() >= 2, "{}", r.want());
    assert_eq!(l.stats().remembered_denials, 1);
    assert_eq!(l.stats().lease_fallbacks, 0);
}

#[test]
fn one_failed_grant_sends_every_key_to_the_policy_and_one_probe_brings_them_back() {
    let l = Leases::new(fixed(1000)).unwrap();
    let t = T0;
    let r = fetch(l.check(1, 1, t));
    let c = l.complete(&r, None, t);
    let probe_at = c.retry_at_ns.expect("the first failure asks for the probe");
    assert_eq!(probe_at, t + 10 * MS);
    let d = c.decision.unwrap();
    assert_eq!((d.allowed, d.retry_after_ns), (false, 10 * MS));
    assert!(l.is_down());
    // Every other key, new or not, is decided at once: no fetch, no wait.
    for k in 2..100 {
        let d = decided(l.check(k, 1, t + k));
        assert!(!d.allowed);
        assert_eq!(
            d.retry_after_ns,
            probe_at - (t + k),
            "deny: until the probe"
        );
    }
    assert_eq!(l.stats().fetches, 1);
    assert_eq!(l.stats().lease_fallbacks, 99);
    // The probe's own failures ask for the next probe, doubling to the
    // probe interval; a fetch that was already on its way when Redis went
    // away asks for none (one probe at a time).
    let mut probe = l.retry(&r, probe_at);
    assert!(!probe.is_fetch());
    let late = fetch(Leases::new(fixed(1000)).unwrap().check(1, 1, t));
    drop(late);
    let mut delays = vec![];
    let mut now = probe_at;
    for _ in 0..6 {
        let c = l.complete(&probe, None, now);
        let next = c.retry_at_ns.expect("the probe asks for the next");
        delays.push((next - now) / MS);
        probe = l.retry(&probe, next);
        now = next;
    }
    assert_eq!(delays, [20, 40, 80, 100, 100, 100]);
    // Its first reply puts every key back on the global limit.
    assert!(
        l.complete(&probe, Some(GrantReply::of(10, T0 + S)), now)
            .decision
            .is_none()
    );
    assert!(!l.is_down());
    assert!(decided(l.check(1, 1, now + 1)).allowed);
    assert!(matches!(l.check(50, 1, now + 1), Step::Fetch(_)));
    // A new outage starts over at 10 ms.
    let r = fetch(l.check(51, 1, now + 2));
    assert_eq!(
        l.complete(&r, None, now + 2).retry_at_ns,
        Some(now + 2 + 10 * MS)
    );
}

#[test]
fn a_probe_dropped_unsent_lets_the_next_failure_ask_for_one() {
    let l = Leases::new(fixed(1000)).unwrap();
    // Three fetches on their way when Redis goes away.
    let [a, b, c] = [1, 2, 3].map(|k| fetch(l.check(k, 1, T0)));
    let at = l
        .complete(&a, None, T0)
        .retry_at_ns
        .expect("the first asks");
    assert_eq!(
        l.complete(&b, None, T0).retry_at_ns,
        None,
        "a probe is on its way"
    );
    // That probe is dropped unsent (its sender stopped, say).
    drop(l.retry(&a, at));
    assert!(l.complete(&c, None, T0).retry_at_ns.is_some());
}

#[test]
fn the_local_policy_admits_the_limit_shared_among_the_expected_nodes() {
    let cfg = fixed(100).failure(FailurePolicy::Local { expected_nodes: 4 });
    let l = Leases::new(cfg).unwrap();
    let r = fetch(l.check(1, 1, T0));
    assert!(l.complete(&r, None, T0).decision.unwrap().allowed);
    let admitted = (1..100)
        .filter(|i| decided(l.check(1, 1, T0 + i)).allowed)
        .count();
    assert_eq!(admitted + 1, 25, "100 / 4 in the window");
    assert_eq!(l.stats().lease_fallbacks, 100);
}

#[test]
fn a_cost_above_the_limit_is_never_admitted_and_never_asked_for() {
    let l = Leases::new(fixed(10)).unwrap();
    let d = decided(l.check(1, 11, T0));
    assert_eq!((d.allowed, d.retry_after_ns), (false, u64::MAX));
    assert_eq!(l.stats().fetches, 0);
}

#[test]
fn a_big_cost_asks_for_at_least_itself() {
    let l = Leases::new(fixed(100)).unwrap();
    let r = fetch(l.check(1, 30, T0));
    assert_eq!(r.want(), 30, "W is 10, but the check needs 30");
    // Granted fewer: denied, the units kept for smaller checks.
    assert!(
        !l.complete(&r, Some(GrantReply::of(20, T0 + S)), T0)
            .decision
            .unwrap()
            .allowed
    );
    assert_eq!(decided(l.check(1, 20, T0 + 1)).remaining, 0);
}

#[test]
fn peeks_never_ask_and_never_spend() {
    let l = Leases::new(fixed(100)).unwrap();
    assert!(!decided(l.check(1, 0, T0)).allowed);
    check_granting(&l, 1, T0, 3, T0 + S);
    let d = decided(l.check(1, 0, T0 + 1));
    assert_eq!((d.allowed, d.remaining), (true, 2));
    assert_eq!(decided(l.check(1, 0, T0 + 1)).remaining, 2);
}

#[test]
fn u64_keys_are_their_little_endian_bytes() {
    let l = Leases::new(fixed(100)).unwrap();
    let r = fetch(l.check(0x0102, 1, T0));
    assert_eq!(r.key(), 0x0102u64.to_le_bytes());
    l.complete(&r, Some(GrantReply::of(5, T0 + S)), T0);
    assert_eq!(
        decided(l.check(&0x0102u64.to_le_bytes(), 1, T0)).remaining,
        3
    );
    assert!(matches!(l.check(b"other", 1, T0), Step::Fetch(_)));
}

#[test]
fn a_full_node_drops_idle_keys_and_sends_the_rest_to_redis() {
    // 64 shards of one key each.
    let l = Leases::new(
        LeaseConfig::new(Config::new(Algorithm::FixedWindow, 100, S).capacity(64)).skew_ns(0),
    )
    .unwrap();
    let mut held = vec![];
    for k in 0..2000u64 {
        if let Step::Fetch(r) = l.check(k, 1, T0) {
            l.complete(&r, Some(GrantReply::of(5, T0 + S)), T0);
            held.push(k);
        }
    }
    assert!(held.len() <= 64);
    assert!(l.stats().direct > 0);
    // After the window every key is idle: new keys take their places.
    assert!(matches!(l.check(5000, 1, T0 + S), Step::Fetch(_)));
}

#[test]
fn the_command_names_the_key_with_its_prefix() {
    let l = Leases::new(fixed(100)).unwrap();
    let r = fetch(l.check(b"user:1", 1, T0));
    let args = l.command(&r, b"rl:");
    assert_eq!(args[1], b"rl:user:1");
    // A fetch is decided at its check's date, on the server's timeline.
    assert_eq!(
        args[args.len() - 2..],
        [b"DATED".to_vec(), T0.to_string().into_bytes()]
    );
    let l = Leases::new(fixed(100).send_at(true)).unwrap();
    let r = fetch(l.check(b"user:1", 1, T0));
    let args = l.command(&r, b"");
    assert_eq!(
        args[args.len() - 2..],
        [b"AT".to_vec(), T0.to_string().into_bytes()]
    );
}

#[test]
fn remembered_denials_count_down_and_end() {
    let c = DenialCache::new(0);
    let d = Decision {
        allowed: false,
        limit: 5,
        remaining: 0,
        retry_after_ns: 100,
        reset_after_ns: 400,
        wait_ns: 0,
    };
    c.remember(b"k", 1, &d, T0);
    assert_eq!(c.check(b"k", 1, T0 + 30).unwrap().retry_after_ns, 70);
    assert!(c.check(b"k", 1, T0 + 100).is_none());
    // Admissions and never-admissible costs are not remembered.
    c.remember(1, 1, &Decision { allowed: true, ..d }, T0);
    c.remember(
        2,
        1,
        &Decision {
            retry_after_ns: u64::MAX,
            ..d
        },
        T0,
    );
    assert!(c.check(1, 1, T0).is_none() && c.check(2, 1, T0).is_none());
    // A request's own time wins over the caller's reading, as in a
    // leased check: remembered at T0, checked at T0 + 30.
    c.remember(3, Request::new(1).at(T0), &d, T0 + 1_000);
    let d3 = c.check(3, Request::new(1).at(T0 + 30), T0 + 1_000);
    assert_eq!(d3.unwrap().retry_after_ns, 70);
}

#[test]
fn a_full_denial_cache_reuses_the_place_of_a_denial_that_ended() {
    // One key at most.
    let c = DenialCache::new(1);
    let denied = |retry_after_ns| Decision {
        allowed: false,
        limit: 5,
        remaining: 0,
        retry_after_ns,
        reset_after_ns: 400,
        wait_ns: 0,
    };
    let long = b"a long key, of more than one word";
    c.remember(long, 1, &denied(100), T0);
    // Full: another key is not remembered while the first runs.
    c.remember(2, 1, &denied(100), T0 + 50);
    assert!(c.check(2, 1, T0 + 50).is_none());
    assert_eq!(c.check(long, 1, T0 + 50).unwrap().retry_after_ns, 50);
    // Once it has ended, the other takes its place.
    c.remember(2, 1, &denied(100), T0 + 100);
    assert_eq!(c.check(2, 1, T0 + 150).unwrap().retry_after_ns, 50);
    assert!(c.check(long, 1, T0 + 150).is_none());
    assert_eq!(c.len(), 1);
}

#[test]
fn a_capacity_memory_cannot_hold_is_refused() {
    let e = Leases::new(LeaseConfig::new(
        Config::new(Algorithm::FixedWindow, 100, S).capacity(1 << 40),
    ))
    .err()
    .unwrap();
    assert_eq!(e.field, "capacity");
}

#[test]
fn a_requests_time_wins_over_the_callers_clock() {
    let l = Leases::new(fixed(100)).unwrap();
    // The request says T0; the clock reading passed beside it is ignored.
    let r = fetch(l.check(1, crate::Request::new(1).at(T0), 5 * T0));
    assert_eq!(r.at_ns(), T0);
    l.complete(&r, Some(GrantReply::of(5, T0 + S)), T0);
    // No time on the request: the reading is the time (past the grant).
    assert!(matches!(l.check(1, 1, T0 + S), Step::Fetch(_)));
    assert_eq!(
        decided(l.check(1, crate::Request::new(1).at(T0 + 1), T0 + S)).remaining,
        3
    );
}

#[test]
fn a_tier_a_lease_does_not_have_is_never_admitted() {
    let l = Leases::new(fixed(100)).unwrap();
    let d = decided(l.check(1, crate::Request::new(1).tier(crate::Tier::checked(1)), T0));
    assert_eq!(d, Decision::NEVER);
    assert_eq!(l.stats().fetches, 0);
}

#[test]
fn keys_churning_through_a_small_node_spend_only_their_own_grants() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    // 4 keys at most, 16 checked: entries are evicted and reused all the
    // time, while other threads spend from them.
    const KEYS: usize = 16;
    let l = Leases::new(
        LeaseConfig::new(Config::new(Algorithm::FixedWindow, 1_000, 50 * MS).capacity(4))
            .skew_ns(0),
    )
    .unwrap();
    // One clock for the threads, each reading it a little off: some check
    // in another's past.
    let tick = AtomicU64::new(0);
    let granted: [AtomicU64; KEYS] = Default::default();
    let admitted: [AtomicU64; KEYS] = Default::default();
    let key_of = |r: &GrantRequest| u64::from_le_bytes(r.key().try_into().unwrap()) as usize;
    std::thread::scope(|s| {
        for thread in 0..4u64 {
            let (l, granted, admitted, tick) = (&l, &granted, &admitted, &tick);
            s.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ thread;
                for _ in 0..20_000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = (x % KEYS as u64) as usize;
                    // Grants last until the end of the window (every key's
                    // the same: a stale spend would find a word like its
                    // own).
                    let now = T0 + (tick.fetch_add(1, Relaxed) / 4 + thread * 7) * MS / 10;
                    let until = (now / (50 * MS) + 1) * 50 * MS;
                    let grant = |r: &GrantRequest| {
                        granted[key_of(r)].fetch_add(3, Relaxed);
                        l.complete(r, Some(GrantReply::of(3, until)), now)
                    };
                    let allowed = match l.check(k as u64, 1, now) {
                        Step::Decided(d) => d.allowed,
                        Step::Refill(d, r) => {
                            grant(&r);
                            d.allowed
                        }
                        Step::Fetch(r) => grant(&r).decision.unwrap().allowed,
                        Step::Direct => false,
                    };
                    admitted[k].fetch_add(u64::from(allowed), Relaxed);
                }
            });
        }
    });
    let mut total = 0;
    for k in 0..KEYS {
        let (a, g) = (admitted[k].load(Relaxed), granted[k].load(Relaxed));
        assert!(a <= g, "key {k} admitted {a} of {g} granted");
        total += a;
    }
    assert!(total > 10_000, "the keys were mostly tracked: {total}");
    assert!(l.stats().keys <= 4);
}

/// A fetch for a check dated just before a window's edge, granted from the
/// next window (another node's grant moved the key there first): the
/// check is denied until the next window, not paid with its units (the
/// fleet's edge over-admission of issue 46, seen again through a fetch).
#[test]
fn a_fetch_granted_from_the_next_window_denies_its_check() {
    let p = 200 * MS;
    let l = Leases::new(LeaseConfig::new(Config::new(
        Algorithm::FixedWindow,
        200,
        p,
    )))
    .unwrap();
    let w = T0;
    let r = fetch(l.check(1, 1, w + 1));
    assert!(
        l.complete(&r, Some(GrantReply::of(20, w + p)), w + 2)
            .decision
            .unwrap()
            .allowed
    );
    for i in 0..19 {
        assert!(decided(l.check(1, 1, w + 10 + i)).allowed);
    }
    let at = w + p - 84 * MS / 1000;
    let r = fetch(l.check(1, 1, at));
    let d = l
        .complete(&r, Some(GrantReply::of(20, w + 2 * p)), w + p + 2 * MS)
        .decision
        .unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after_ns, w + p - at, "until the next window");
    // Its units are the next window's checks'.
    assert_eq!(decided(l.check(1, 1, w + p)).remaining, 19);
}

//! Issue 33 §4, as a test: a flood of 10× capacity new keys beside
//! legitimate clients at their limit, under each overflow policy
//! (`flood_scenario`, with smaller sizes than `examples/flood.rs` so that
//! it runs in a debug build in a few seconds).

mod flood_scenario;

use flood_scenario::Flood;
use ratecell::Overflow;

/// A twentieth of the issue's sizes: 50 legitimate clients, 5,000 flood
/// keys (10× capacity), a table of 500; each flood key sends 12 requests
/// (2 beyond its burst).
const SMALL: Flood = Flood {
    capacity: 500,
    legit: 50,
    flood: 5_000,
    per_flood_key: 12,
    ..Flood::ISSUE
};

#[test]
fn a_flood_of_new_keys_locks_no_legitimate_client_out_under_evict() {
    let [deny, allow, evict] = SMALL
        .run(&[Overflow::Deny, Overflow::Allow, Overflow::Evict])
        .try_into()
        .unwrap();

    // The problem: a full table that fails closed refuses new legitimate
    // clients, and never admits more than exact tracking.
    assert_eq!(deny.policy, Overflow::Deny);
    assert!(deny.stats.overflows > 0, "{deny:?}");
    assert!(deny.legit_refused > 0, "{deny:?}");
    assert_eq!(deny.flood_over_admitted, 0, "{deny:?}");

    // Failing open refuses nobody and lets untracked flood keys through.
    assert_eq!(allow.legit_refused, 0, "{allow:?}");
    assert!(allow.flood_over_admitted > 0, "{allow:?}");

    // Evict: every new key is tracked, so a legitimate client is never
    // refused (its state, if evicted, comes back fresh, and times only go
    // forward). An evicted key gains at most a burst over exact tracking
    // (SPEC §5), so the flood's excess is at most a burst per eviction of
    // a live state.
    assert_eq!(evict.legit_refused, 0, "{evict:?}");
    assert_eq!(evict.stats.overflows, 0, "{evict:?}");
    assert!(evict.stats.evicted_live > 0, "{evict:?}");
    assert!(
        evict.flood_over_admitted <= SMALL.limit * evict.stats.evicted_live,
        "{evict:?}"
    );
    assert!(
        evict.flood_over_admitted < allow.flood_over_admitted,
        "{evict:?} {allow:?}"
    );
}

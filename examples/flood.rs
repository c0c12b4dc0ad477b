//! Issue 33 §4, measured: a flood of new keys (10× the table's capacity)
//! beside 1,000 legitimate clients checking at exactly their limit, under
//! each overflow policy, every decision compared with exact tracking (see
//! `tests/flood_scenario` for the scenario and what each column counts).
//!
//! `cargo run --release --example flood` prints one table; the figures
//! are in docs/PERFORMANCE.md.

#[path = "../tests/flood_scenario/mod.rs"]
mod flood_scenario;

use flood_scenario::Flood;
use ratecell::Overflow;

fn main() {
    let f = Flood::ISSUE;
    println!(
        "capacity {}, GCRA {} per {} ms (burst {}), {} legitimate keys at their rate, \
         {} flood keys × {} requests {} µs apart, over {} ms",
        f.capacity,
        f.limit,
        f.period_ns / 1_000_000,
        f.limit,
        f.legit,
        f.flood,
        f.per_flood_key,
        f.flood_gap_ns / 1_000,
        f.span_ns / 1_000_000,
    );
    println!();
    println!(
        "| policy | legit requests | legit refused | flood requests | flood admitted (exact) | flood admitted | flood admitted beyond its limit | overflows | live states evicted | ns per check |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for o in f.run(&[Overflow::Deny, Overflow::Allow, Overflow::Evict]) {
        println!(
            "| {:?} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |",
            o.policy,
            o.legit_requests,
            o.legit_refused,
            o.flood_requests,
            o.flood_admitted_exact,
            o.flood_admitted,
            o.flood_over_admitted,
            o.stats.overflows,
            o.stats.evicted_live,
            o.ns_per_check,
        );
    }
}

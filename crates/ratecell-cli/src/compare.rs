//! `ratecell compare`: the seven algorithms measured side by side (state
//! per key, bursts, smoothness, distance from the exact sliding log), and
//! the seed "Algorithms for rate limiting"'s comparison table checked
//! against those measurements. Nothing in the measured columns is typed in:
//! every number comes from running the limiters.

use crate::args::{CliError, format_duration};
use crate::engine::{self, EPOCH_NS, SECOND};
use crate::load::SplitMix64;
use crate::table::Table;
use ratecell::{Algorithm, Config, Error, Request};
use std::io::Write;

/// `compare --help`'s paragraph.
pub const ABOUT: &str = "Measures every algorithm at 100 requests per second: bytes of state per \
key, the most requests a greedy client gets admitted in any interval of one period and of a tenth \
of it, how evenly admissions are spread under bursty traffic, and how far decisions differ from the \
exact sliding log on that same traffic. Then checks the comparison table of the seed \"Algorithms \
for rate limiting\" against the measurements.";

// `compare` takes no options.
#[derive(clap::Args, Clone, Debug)]
#[command(help_template = crate::HELP_TEMPLATE, args_override_self = true)]
pub struct CompareArgs {}

/// The measured configuration: fine enough that a tenth of a period holds
/// ten requests.
const LIMIT: u64 = 100;
const PERIOD: u64 = SECOND;
/// How often the greedy client asks.
const PROBE: u64 = PERIOD / 1000;
/// The bursty traffic: a Poisson process at 4× the limit for 0.4 s, then
/// at 0.2× for 0.9 s, repeating for 30 s. The cycle is not a multiple of
/// the period, so bursts meet every phase of the window grid.
const BURST_ON: u64 = 400_000_000;
const CYCLE: u64 = 1_300_000_000;
const TRAFFIC_LENGTH: u64 = 30 * SECOND;

fn config(algorithm: Algorithm, limit: u64) -> Config {
    Config::new(algorithm, limit, PERIOD)
}

/// Everything measured for one algorithm.
struct Measured {
    algorithm: Algorithm,
    bytes: f64,
    bytes_at_1000: f64,
    bytes_at_20_sub_windows: f64,
    at_once: u64,
    max_tenth: u64,
    max_period: u64,
    gap_cv: f64,
    longest_gap: u64,
    admitted: u64,
    differing: u64,
}

/// Keys in the table whose allocation is divided out: enough that the
/// per-table parts (shard latches, counters) are a small share.
const TABLE_KEYS: u64 = 1024;

/// Bytes of state one key costs in a keyed table, slack for free places
/// included.
fn state_bytes(config: Config) -> Result<f64, Error> {
    let table = engine::sim_keyed(config.capacity(TABLE_KEYS))?;
    Ok(table.stats().bytes_allocated as f64 / TABLE_KEYS as f64)
}

/// Admission times a greedy client gets, starting at several points of the
/// window grid (on a boundary, mid-window, and just before the next one)
/// from a fresh state: the worst case over these starts.
fn bursts(config: Config) -> Result<(u64, u64, u64), Error> {
    let mut worst = (0, 0, 0);
    for offset in [0, PERIOD / 2, PERIOD - PERIOD / 10, PERIOD - PROBE] {
        let t = engine::greedy(config, EPOCH_NS + offset, PROBE, 4 * PERIOD / PROBE)?;
        worst.0 = worst.0.max(engine::max_in_window(&t, 1));
        worst.1 = worst.1.max(engine::max_in_window(&t, PERIOD / 10));
        worst.2 = worst.2.max(engine::max_in_window(&t, PERIOD));
    }
    Ok(worst)
}

/// The bursty traffic's arrival times (thinned from a Poisson process at
/// the peak rate).
fn bursty_traffic() -> Vec<u64> {
    let peak = 4.0 * LIMIT as f64 / PERIOD as f64;
    let low = 0.2 * LIMIT as f64 / PERIOD as f64;
    let mut rng = SplitMix64::new(1);
    let mut out = Vec::new();
    let mut t = 0.0;
    loop {
        t += rng.exponential(peak);
        if t >= TRAFFIC_LENGTH as f64 {
            return out;
        }
        let on = (t as u64) % CYCLE < BURST_ON;
        if on || rng.unit() < low / peak {
            out.push(EPOCH_NS + t as u64);
        }
    }
}

/// Decisions on the traffic: admitted or not, and when each admitted one
/// may act.
fn decide_all(config: Config, traffic: &[u64]) -> Result<(Vec<bool>, Vec<u64>), Error> {
    let policy = engine::policy(config)?;
    let mut allowed = Vec::with_capacity(traffic.len());
    let mut acts = Vec::new();
    for &t in traffic {
        let d = policy.check(0, Request::new(1).at(t));
        allowed.push(d.allowed);
        if d.allowed {
            acts.push(t + d.wait_ns);
        }
    }
    acts.sort_unstable();
    Ok((allowed, acts))
}

fn measure(algorithm: Algorithm, traffic: &[u64], log: &[bool]) -> Result<Measured, Error> {
    let c = config(algorithm, LIMIT);
    let (at_once, max_tenth, max_period) = bursts(c)?;
    let (allowed, acts) = decide_all(c, traffic)?;
    Ok(Measured {
        algorithm,
        bytes: state_bytes(c)?,
        bytes_at_1000: state_bytes(config(algorithm, 10 * LIMIT))?,
        bytes_at_20_sub_windows: state_bytes(c.sub_windows(20))?,
        at_once,
        max_tenth,
        max_period,
        gap_cv: engine::gap_cv(&acts),
        longest_gap: engine::max_gap(&acts),
        admitted: acts.len() as u64,
        differing: allowed.iter().zip(log).filter(|(a, b)| a != b).count() as u64,
    })
}

pub fn run(_: &CompareArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let traffic = bursty_traffic();
    let fail = |e: Error| CliError::io(e.to_string());
    let (log, _) = decide_all(config(Algorithm::SlidingLog, LIMIT), &traffic).map_err(fail)?;
    let measured = Algorithm::ALL
        .iter()
        .map(|&a| measure(a, &traffic, &log))
        .collect::<Result<Vec<_>, _>>()
        .map_err(fail)?;
    let log_admitted = measured
        .iter()
        .find(|m| m.algorithm == Algorithm::SlidingLog)
        .map_or(0, |m| m.admitted);

    let p = format_duration(PERIOD);
    let tenth = format_duration(PERIOD / 10);
    writeln!(
        out,
        "ratecell compare: the seven algorithms measured at limit {LIMIT} per {p} (burst = limit;\n\
         bucketed_window: 10 sub-windows)\n"
    )?;
    writeln!(
        out,
        "Bursts: a greedy client asks every {} until denied, from a fresh state, starting on a window\n\
         boundary, mid-window and just before a boundary. The most admitted at one instant, in any\n\
         {tenth} and in any {p} (half-open intervals; the leaky bucket counts requests when they leave\n\
         its queue):",
        format_duration(PROBE)
    )?;
    let mut t = Table::new([
        "algorithm".to_string(),
        "bytes/key".to_string(),
        "at once".to_string(),
        format!("in {tenth}"),
        format!("in {p}"),
    ]);
    for m in &measured {
        t.row([
            m.algorithm.name().to_string(),
            format!("{:.1}", m.bytes),
            m.at_once.to_string(),
            m.max_tenth.to_string(),
            m.max_period.to_string(),
        ]);
    }
    write!(out, "{}", t.render())?;
    writeln!(
        out,
        "  bytes/key: Stats::bytes_allocated of a KeyedLimiter for {TABLE_KEYS} keys, divided by {TABLE_KEYS}\n  \
         (the table keeps about 1.45 places per key, and fingerprints instead of keys).\n"
    )?;

    writeln!(
        out,
        "Smoothness and accuracy: {} requests of bursty Poisson traffic (4x the limit for {}, then\n\
         0.2x for {}, repeating) through each algorithm and through the exact sliding log. Gap CV is\n\
         the spread of the gaps between admissions (standard deviation / mean; 0 = evenly spaced):",
        traffic.len(),
        format_duration(BURST_ON),
        format_duration(CYCLE - BURST_ON)
    )?;
    let mut t = Table::new([
        "algorithm",
        "admitted",
        "vs log",
        "decisions != log",
        "gap CV",
        "longest gap",
    ]);
    for m in &measured {
        t.row([
            m.algorithm.name().to_string(),
            m.admitted.to_string(),
            format!(
                "{:+.1}%",
                (m.admitted as f64 / log_admitted as f64 - 1.0) * 100.0
            ),
            format!("{:.1}%", m.differing as f64 * 100.0 / traffic.len() as f64),
            format!("{:.2}", m.gap_cv),
            format_duration((m.longest_gap + 500_000) / 1_000_000 * 1_000_000),
        ]);
    }
    write!(out, "{}", t.render())?;

    writeln!(
        out,
        "\nThe seed's table (\"Algorithms for rate limiting\"), claim by claim against the measurements:"
    )?;
    let smallest = measured
        .iter()
        .filter(|m| {
            matches!(
                m.algorithm,
                Algorithm::TokenBucket | Algorithm::LeakyBucket | Algorithm::FixedWindow
            )
        })
        .map(|m| m.bytes)
        .fold(f64::INFINITY, f64::min);
    for m in &measured {
        let seed = seed_claim(m.algorithm);
        let (space, space_class) = space_verdict(m);
        let (burst, burst_class) = burst_verdict(m);
        writeln!(out, "\n  {}", m.algorithm)?;
        match seed {
            None => {
                writeln!(out, "    space efficient?  measured: {space}")?;
                writeln!(out, "    allows bursts?    measured: {burst}")?;
                writeln!(out, "    (not in the seed's table)")?;
            }
            Some(seed) => {
                let space_agrees = match seed.space {
                    SeedSpace::Yes => space_class == SpaceClass::Fixed,
                    SeedSpace::No => space_class == SpaceClass::GrowsWithLimit,
                    SeedSpace::YesButMore => space_class == SpaceClass::Fixed && m.bytes > smallest,
                };
                let burst_agrees = seed.burst == burst_class;
                writeln!(out, "    space efficient?  seed:     {}", seed.space_text)?;
                writeln!(
                    out,
                    "                      measured: {space}  [{}]",
                    if space_agrees { "agrees" } else { "corrected" }
                )?;
                if !space_agrees && seed.space == SeedSpace::YesButMore {
                    writeln!(
                        out,
                        "                      (no more than the token bucket or fixed window: {smallest:.1} B)"
                    )?;
                }
                writeln!(out, "    allows bursts?    seed:     {}", seed.burst_text)?;
                writeln!(
                    out,
                    "                      measured: {burst}  [{}]",
                    if burst_agrees { "agrees" } else { "corrected" }
                )?;
            }
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SeedSpace {
    Yes,
    No,
    YesButMore,
}

/// Whether an algorithm admits more at once than its rate spreads out, and
/// whether it ever admits more than the limit within one period.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct BurstClass {
    at_once: bool,
    over_limit: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SpaceClass {
    Fixed,
    GrowsWithSubWindows,
    GrowsWithLimit,
}

/// One row of the seed's table, quoted, with what each cell claims.
struct SeedClaim {
    space: SeedSpace,
    space_text: &'static str,
    burst: BurstClass,
    burst_text: &'static str,
}

fn seed_claim(algorithm: Algorithm) -> Option<SeedClaim> {
    let (no, within, beyond) = (
        BurstClass {
            at_once: false,
            over_limit: false,
        },
        BurstClass {
            at_once: true,
            over_limit: false,
        },
        BurstClass {
            at_once: true,
            over_limit: true,
        },
    );
    let claim = |space, space_text, burst, burst_text| {
        Some(SeedClaim {
            space,
            space_text,
            burst,
            burst_text,
        })
    };
    match algorithm {
        Algorithm::TokenBucket => claim(
            SeedSpace::Yes,
            "Yes",
            within,
            "Yes, it allows a burst of traffic within defined limit.",
        ),
        Algorithm::LeakyBucket => claim(SeedSpace::Yes, "Yes", no, "No"),
        Algorithm::FixedWindow => claim(
            SeedSpace::Yes,
            "Yes",
            beyond,
            "Yes, it allows bursts at the edge of the time window and can exceed the defined limit.",
        ),
        Algorithm::SlidingLog => claim(
            SeedSpace::No,
            "No, maintaining the log requires extra storage.",
            no,
            "No",
        ),
        Algorithm::SlidingWindow => claim(
            SeedSpace::YesButMore,
            "Yes, but it requires relatively more space than other space efficient algorithms.",
            no,
            "Smooths out the burst",
        ),
        Algorithm::Gcra | Algorithm::BucketedWindow => None,
    }
}

fn space_verdict(m: &Measured) -> (String, SpaceClass) {
    if m.bytes_at_1000 > m.bytes {
        (
            format!(
                "no: {:.1} B per key at limit {LIMIT}, {:.1} B at limit {} (grows with the limit)",
                m.bytes,
                m.bytes_at_1000,
                10 * LIMIT
            ),
            SpaceClass::GrowsWithLimit,
        )
    } else if m.algorithm == Algorithm::BucketedWindow && m.bytes_at_20_sub_windows > m.bytes {
        (
            format!(
                "yes for any limit, but grows with sub-windows: {:.1} B per key at 10, {:.1} B at 20",
                m.bytes, m.bytes_at_20_sub_windows
            ),
            SpaceClass::GrowsWithSubWindows,
        )
    } else {
        (
            format!("yes: {:.1} B per key, whatever the limit", m.bytes),
            SpaceClass::Fixed,
        )
    }
}

fn burst_verdict(m: &Measured) -> (String, BurstClass) {
    let p = format_duration(PERIOD);
    let tenth = format_duration(PERIOD / 10);
    // More than a tenth of the limit (plus one for where the interval
    // falls) in a tenth of the period is a burst.
    let class = BurstClass {
        at_once: m.max_tenth > LIMIT / 10 + 1,
        over_limit: m.max_period > LIMIT,
    };
    let text = match (class.at_once, class.over_limit) {
        (false, false) => format!(
            "no: at most {} in any {tenth}, {} in any {p}",
            m.max_tenth, m.max_period
        ),
        (true, false) => format!(
            "yes, within the limit: {} at once, never more than {} in any {p}",
            m.at_once, m.max_period
        ),
        (true, true) => format!(
            "yes, beyond the limit: {} at once, up to {} in one {p} ({:.2}x the limit)",
            m.at_once,
            m.max_period,
            m.max_period as f64 / LIMIT as f64
        ),
        (false, true) => format!(
            "beyond the limit over a period: up to {} in one {p}, yet at most {} in any {tenth}",
            m.max_period, m.max_tenth
        ),
    };
    (text, class)
}

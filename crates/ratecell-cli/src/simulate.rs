//! `ratecell simulate`: one policy under an offered load of a chosen shape,
//! in simulated time; a summary, a table of offered and admitted rates over
//! time, and optionally an SVG or PNG plot of the same.

use crate::args::{self, CliError, OverflowArg, PolicyArgs, describe, format_duration};
use crate::engine::{self, EPOCH_NS};
use crate::load::{Load, Shape};
use crate::plot::{self, Plot};
use crate::progress::{Progress, Unit};
use crate::table::Table;
use ratecell::{Config, Overflow, Request};
use std::io::Write;
use std::path::PathBuf;

/// `simulate --help`'s paragraph.
pub const ABOUT: &str = "Offers a load of a chosen shape to one policy in simulated time (exact, \
and as fast as the arithmetic) and reports what it admits: totals, the most admitted in any period, \
and offered against admitted rates over time; optionally plots them.";

/// `simulate --help`'s closing examples.
pub const AFTER: &str = "examples:
  ratecell simulate --algorithm fixed_window --limit 100 --period 1m --load bursts --rate 5
  ratecell simulate --algorithm sliding-log --load ramp --duration 30s --plot ramp.png
  ratecell simulate --limit 10 --also algorithm=fixed_window,limit=1000,period=1d";

// The options of `simulate`.
#[derive(clap::Args, Clone, Debug)]
#[command(help_template = crate::HELP_TEMPLATE, args_override_self = true)]
pub struct SimulateArgs {
    #[command(flatten)]
    policy: PolicyArgs,
    /// The shape of the offered load
    #[arg(
        long,
        value_enum,
        value_name = "SHAPE",
        default_value = "poisson",
        ignore_case = true
    )]
    load: Shape,
    /// Average offered requests per second, all keys together [default: twice the limit's rate,
    /// times --keys]
    #[arg(long, value_name = "R", value_parser = args::rate_arg, allow_hyphen_values = true)]
    rate: Option<f64>,
    /// How long requests arrive [default: 10 periods]
    #[arg(long, value_name = "DURATION", value_parser = args::duration_arg)]
    duration: Option<u64>,
    /// bursts: the length of one on/off cycle [default: the period]
    #[arg(long, value_name = "DURATION", value_parser = args::duration_arg)]
    cycle: Option<u64>,
    /// Keys the requests take turns on, each limited on its own, 1..=1000000
    #[arg(long, value_name = "N", default_value = "1", value_parser = args::u64_in(1, 1_000_000))]
    keys: u64,
    /// With --keys above 1: keys the keyed table holds [default: --keys]
    #[arg(long, value_name = "N", value_parser = args::u64_arg)]
    capacity: Option<u64>,
    /// With --keys above 1: what a new key gets when the table is full [default: deny]
    #[arg(long, value_enum, value_name = "POLICY", ignore_case = true)]
    overflow: Option<OverflowArg>,
    /// Seeds the poisson load
    #[arg(long, value_name = "N", default_value = "1", value_parser = args::u64_arg)]
    seed: u64,
    /// Also plot offered and admitted requests per second over time; FILE ends in .svg or .png
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

/// More offered requests than this is refused rather than left to fill
/// memory.
const MAX_REQUESTS: f64 = 20_000_000.0;

/// The smallest 1-2-5 multiple of a power of ten ns that is at least `ns`.
fn nice_ns(ns: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            if step.saturating_mul(m) >= ns {
                return step.saturating_mul(m);
            }
        }
        step = step.saturating_mul(10);
    }
}

/// The smallest of `unit × 1, 2, 5, 10, 20, ...` that cuts `horizon` into
/// at most `rows` bins.
fn multiple_for(unit: u64, horizon: u64, rows: u64) -> u64 {
    let mut k = 1u64;
    loop {
        for m in [1, 2, 5] {
            let w = unit.saturating_mul(k * m);
            if horizon.div_ceil(w) <= rows {
                return w;
            }
        }
        k *= 10;
    }
}

/// Rows of the text table: about 20. Bursts are shown per whole cycle (the
/// average), or per on-time when there are too few cycles for that, so a
/// row never straddles a burst's edge.
fn table_bin(load: &Load, horizon: u64) -> u64 {
    if load.shape == Shape::Bursts {
        let cycle = load.cycle_ns;
        if horizon / cycle >= 5 {
            return multiple_for(cycle, horizon, 20);
        }
        return (cycle / 5).max(1);
    }
    nice_ns((horizon / 20).max(1))
}

/// Bins of the plot: fine enough to show a burst's shape (bursts: a
/// divisor of the on-time), coarse enough that a bin expects a few
/// arrivals, else a Poisson load is mostly noise and even spacing shows as
/// a saw-tooth.
fn plot_bin(load: &Load, horizon: u64) -> u64 {
    let few_arrivals = (3e9 / load.rate) as u64;
    if load.shape == Shape::Bursts {
        let on = (load.cycle_ns / 5).max(1);
        if horizon / on > 300 {
            return multiple_for(load.cycle_ns, horizon, 150);
        }
        // During a burst arrivals come at five times the rate.
        return [10, 5, 4, 2, 1]
            .into_iter()
            .filter(|d| on % d == 0)
            .map(|d| on / d)
            .find(|&w| w >= few_arrivals / 5 && horizon / w <= 300)
            .unwrap_or(on);
    }
    nice_ns((horizon / 150).max(few_arrivals).max(1))
}

/// Counts per bin of `width` ns over `[0, horizon)`.
fn bin(times: impl Iterator<Item = u64>, width: u64, horizon: u64) -> Vec<u64> {
    let mut counts = vec![0; horizon.div_ceil(width) as usize];
    for t in times {
        let i = ((t / width) as usize).min(counts.len() - 1);
        counts[i] += 1;
    }
    counts
}

pub fn run(a: &SimulateArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let fail = |message: String| CliError::option("simulate", message);
    let mut configs = a.policy.configs("simulate")?;
    let mut config = configs[0];
    let period = config.period_ns;
    let keys = a.keys;
    // The long-run rate the policy admits: its tightest limit's.
    let limit_per_s = configs
        .iter()
        .map(|c| c.limit as f64 * 1e9 / c.period_ns as f64)
        .fold(f64::INFINITY, f64::min)
        * keys as f64;
    let rate = a.rate.unwrap_or(2.0 * limit_per_s);
    let duration = a.duration.unwrap_or(period.saturating_mul(10));
    if duration == 0 {
        return Err(fail("--duration: must be more than 0".into()));
    }
    let cycle = a.cycle.unwrap_or(period);
    if cycle == 0 {
        return Err(fail("--cycle: must be more than 0".into()));
    }
    let load = Load {
        shape: a.load,
        rate,
        duration_ns: duration,
        cycle_ns: cycle,
        seed: a.seed,
    };
    if load.expected_requests() > MAX_REQUESTS {
        return Err(fail(format!(
            "--rate x --duration: {:.0} requests is more than the {MAX_REQUESTS:.0} a simulation offers; \
             lower --rate or --duration",
            load.expected_requests()
        )));
    }
    if keys == 1 {
        for (given, option) in [
            (a.capacity.is_some(), "--capacity"),
            (a.overflow.is_some(), "--overflow"),
        ] {
            if given {
                return Err(fail(format!("{option}: applies only with --keys above 1")));
            }
        }
    } else {
        for c in &mut configs {
            *c = c
                .capacity(a.capacity.unwrap_or(keys))
                .overflow(a.overflow.unwrap_or(OverflowArg::Deny).into());
        }
        config = configs[0];
    }
    // The plot's path is checked before the work, not after the report.
    let plot = match &a.plot {
        None => None,
        Some(path) => Some((
            path,
            plot::check_path(path).map_err(|e| fail(format!("--plot: {e}")))?,
        )),
    };
    let policy = engine::policy_multi(&configs).map_err(|e| args::config_error("simulate", e))?;

    let arrivals = load.arrivals();
    let mut admitted_by_key: Vec<Vec<u64>> = vec![Vec::new(); keys as usize];
    let mut admitted = Vec::new();
    let mut progress = Progress::new(
        "simulating",
        Some(arrivals.len() as u64),
        Unit::Items("requests"),
    );
    for (i, &offset) in arrivals.iter().enumerate() {
        progress.set(i as u64);
        let key = i as u64 % keys;
        let d = policy.check(key, Request::new(1).at(EPOCH_NS + offset));
        if d.allowed {
            // When the request may act: for the leaky bucket, after its
            // wait in the queue.
            let acts = offset + d.wait_ns;
            admitted.push(acts);
            admitted_by_key[key as usize].push(acts);
        }
    }
    progress.finish();
    admitted.sort_unstable();
    let horizon = duration.max(admitted.last().map_or(0, |t| t + 1));
    let (max_period, max_tenth) = admitted_by_key.iter_mut().fold((0, 0), |acc, times| {
        times.sort_unstable();
        (
            acc.0.max(engine::max_in_window(times, period)),
            acc.1
                .max(engine::max_in_window(times, (period / 10).max(1))),
        )
    });
    // Each further limit's own period (the times are sorted above).
    let max_also: Vec<u64> = configs[1..]
        .iter()
        .map(|c| {
            admitted_by_key
                .iter()
                .map(|times| engine::max_in_window(times, c.period_ns))
                .max()
                .unwrap_or(0)
        })
        .collect();

    report(
        out,
        &Report {
            config: &config,
            also: &configs[1..],
            max_also: &max_also,
            load: &load,
            keys,
            offered: &arrivals,
            admitted: &admitted,
            horizon,
            max_period,
            max_tenth,
        },
    )?;
    let stats = policy.stats();
    if stats.overflows > 0 {
        writeln!(
            out,
            "\n  {} found the table full (overflow {}); raise --capacity to track them all",
            args::count(stats.overflows, "new key"),
            if config.overflow == Overflow::Allow {
                "allow: admitted untracked"
            } else {
                "deny: denied"
            }
        )?;
    }
    if stats.evicted_live > 0 {
        writeln!(
            out,
            "\n  {} found the table full and took the place of the live state nearest to fresh (overflow evict); raise --capacity to keep them all",
            args::count(stats.evicted_live, "new key"),
        )?;
    }

    if let Some((path, format)) = plot {
        let bin_ns = plot_bin(&load, horizon);
        let offered = bin(arrivals.iter().copied(), bin_ns, horizon);
        let admitted_bins = bin(admitted.iter().copied(), bin_ns, horizon);
        plot::write(
            path,
            format,
            &Plot {
                title: format!("ratecell simulate: {}", args::describe_all(&configs)),
                subtitle: format!(
                    "{}; admitted {} of {} ({:.1}%)",
                    describe_load(&load, keys),
                    admitted.len(),
                    arrivals.len(),
                    percent(admitted.len(), arrivals.len())
                ),
                bin_ns,
                duration_ns: horizon,
                offered: &offered,
                admitted: &admitted_bins,
                limit_per_s,
                keys,
            },
        )
        .map_err(|e| CliError::io(format!("--plot: {e}")))?;
        writeln!(out, "\nplot written to {}", path.display())?;
    }
    Ok(())
}

struct Report<'a> {
    config: &'a Config,
    /// The limits after the first (`--also`), and the most each admitted
    /// in any of its periods.
    also: &'a [Config],
    max_also: &'a [u64],
    load: &'a Load,
    keys: u64,
    offered: &'a [u64],
    admitted: &'a [u64],
    horizon: u64,
    max_period: u64,
    max_tenth: u64,
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn describe_load(load: &Load, keys: u64) -> String {
    let mut s = format!(
        "load {}, {}/s on average for {}",
        load.shape.name(),
        trim_float(load.rate),
        format_duration(load.duration_ns)
    );
    if load.shape == Shape::Bursts {
        s.push_str(&format!(", cycle {}", format_duration(load.cycle_ns)));
    }
    if load.shape == Shape::Poisson {
        s.push_str(&format!(", seed {}", load.seed));
    }
    s.push_str(&format!(", {}", args::count(keys, "key")));
    if keys > 1 {
        s.push_str(" (round robin)");
    }
    s
}

/// A number with up to three decimals and no trailing zeros.
fn trim_float(x: f64) -> String {
    args::short_number(x, 3)
}

fn report(out: &mut dyn Write, r: &Report) -> Result<(), CliError> {
    let secs = r.load.duration_ns as f64 / 1e9;
    let (n_off, n_adm) = (r.offered.len(), r.admitted.len());
    writeln!(out, "ratecell simulate: {}", describe(r.config))?;
    for c in r.also {
        writeln!(out, "  and {}", describe(c))?;
    }
    writeln!(out, "{}\n", describe_load(r.load, r.keys))?;
    let mut t = Table::new(["", "requests", "per second", "share"]);
    t.row([
        "offered".to_string(),
        n_off.to_string(),
        format!("{:.2}", n_off as f64 / secs),
        String::new(),
    ]);
    t.row([
        "admitted".to_string(),
        n_adm.to_string(),
        format!("{:.2}", n_adm as f64 / secs),
        format!("{:.1}%", percent(n_adm, n_off)),
    ]);
    t.row([
        "denied".to_string(),
        (n_off - n_adm).to_string(),
        format!("{:.2}", (n_off - n_adm) as f64 / secs),
        format!("{:.1}%", percent(n_off - n_adm, n_off)),
    ]);
    write!(out, "{}", t.render())?;
    let p = r.config.period_ns;
    writeln!(
        out,
        "\n  most admitted{} in any {}: {} (limit {}); in any {}: {}",
        if r.keys > 1 { " for one key" } else { "" },
        format_duration(p),
        r.max_period,
        r.config.limit,
        format_duration((p / 10).max(1)),
        r.max_tenth
    )?;
    // One line for each further limit, in its own period.
    for (c, max) in r.also.iter().zip(r.max_also) {
        writeln!(
            out,
            "  most admitted{} in any {}: {max} (limit {}, {})",
            if r.keys > 1 { " for one key" } else { "" },
            format_duration(c.period_ns),
            c.limit,
            c.algorithm
        )?;
    }
    writeln!(out)?;

    let width = table_bin(r.load, r.horizon);
    let offered = bin(r.offered.iter().copied(), width, r.horizon);
    let admitted = bin(r.admitted.iter().copied(), width, r.horizon);
    let mut t = Table::new(["from", "offered/s", "admitted/s"]);
    for (i, (o, a)) in offered.iter().zip(&admitted).enumerate() {
        let start = i as u64 * width;
        let w = width.min(r.horizon - start) as f64 / 1e9;
        t.row([
            format_duration(start),
            format!("{:.1}", *o as f64 / w),
            format!("{:.1}", *a as f64 / w),
        ]);
    }
    write!(out, "{}", t.render())?;
    if r.horizon > r.load.duration_ns {
        writeln!(
            out,
            "  (admitted requests are counted when they may act: the leaky bucket's queue runs {} past the load)",
            format_duration(r.horizon - r.load.duration_ns)
        )?;
    }
    Ok(())
}

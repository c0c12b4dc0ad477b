//! `ratecell simulate`: one policy under an offered load of a chosen shape,
//! in simulated time; a summary, a table of offered and admitted rates over
//! time, and optionally an SVG plot of the same.

use crate::args::{self, CliError, Command, Opt, describe, format_duration};
use crate::engine::{self, EPOCH_NS, Policy};
use crate::load::{Load, Shape};
use crate::plot::{self, Plot};
use crate::table::Table;
use ratecell::{Config, Overflow};
use std::io::Write;
use std::sync::LazyLock;

pub static COMMAND: LazyLock<Command> = LazyLock::new(|| {
    let mut opts = args::policy_opts();
    opts.extend([
        Opt {
            name: "--load",
            value: Some("SHAPE"),
            help: "constant, bursts (5x the rate for the first fifth of each cycle), poisson, or ramp (0 to 2x the rate) [poisson]",
        },
        Opt {
            name: "--rate",
            value: Some("R"),
            help: "average offered requests per second, all keys together [twice the limit's rate, times --keys]",
        },
        Opt {
            name: "--duration",
            value: Some("DURATION"),
            help: "how long requests arrive [10 periods]",
        },
        Opt {
            name: "--cycle",
            value: Some("DURATION"),
            help: "bursts: the length of one on/off cycle [the period]",
        },
        Opt {
            name: "--keys",
            value: Some("N"),
            help: "keys the requests take turns on, each limited on its own, 1..=1000000 [1]",
        },
        Opt {
            name: "--capacity",
            value: Some("N"),
            help: "with --keys above 1: keys the keyed table holds [--keys]",
        },
        Opt {
            name: "--overflow",
            value: Some("POLICY"),
            help: "with --keys above 1: deny or allow a new key when the table is full [deny]",
        },
        Opt {
            name: "--seed",
            value: Some("N"),
            help: "seeds the poisson load [1]",
        },
        Opt {
            name: "--plot",
            value: Some("FILE.svg"),
            help: "also write an SVG plot of offered and admitted requests per second over time",
        },
    ]);
    Command {
        name: "simulate",
        usage: "simulate [options]",
        about: "Offers a load of a chosen shape to one policy in simulated time (exact, and as fast \
                as the arithmetic) and reports what it admits: totals, the most admitted in any \
                period, and offered against admitted rates over time.",
        opts,
        after: "examples:\n  ratecell simulate --algorithm fixed_window --limit 100 --period 1m --load bursts --rate 5\n  \
                ratecell simulate --algorithm sliding_log --load ramp --duration 30s --plot ramp.svg\n",
    }
});

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

pub fn run(argv: &[String], out: &mut dyn Write) -> Result<(), CliError> {
    let Some(parsed) = COMMAND.parse_or_help(argv, out)? else {
        return Ok(());
    };
    parsed.no_positionals()?;

    let mut config = args::policy_config(&parsed)?;
    let period = config.period_ns;
    let shape = Shape::from_name(parsed.choice("--load", &Shape::NAMES, "poisson")?)
        .expect("choice returns one of the names");
    let keys = parsed.u64_in("--keys", 1, 1, 1_000_000)?;
    let limit_per_s = config.limit as f64 * 1e9 / period as f64 * keys as f64;
    let rate = parsed.positive_f64("--rate", 2.0 * limit_per_s, 1e9)?;
    let duration = parsed.duration_or("--duration", period.saturating_mul(10))?;
    if duration == 0 {
        return Err(parsed.error("--duration: must be more than 0".into()));
    }
    let cycle = parsed.duration_or("--cycle", period)?;
    if cycle == 0 {
        return Err(parsed.error("--cycle: must be more than 0".into()));
    }
    let seed = parsed.u64_or("--seed", 1)?;
    let load = Load {
        shape,
        rate,
        duration_ns: duration,
        cycle_ns: cycle,
        seed,
    };
    if load.expected_requests() > MAX_REQUESTS {
        return Err(parsed.error(format!(
            "--rate x --duration: {:.0} requests is more than the {MAX_REQUESTS:.0} a simulation offers; \
             lower --rate or --duration",
            load.expected_requests()
        )));
    }
    for keyed_only in ["--capacity", "--overflow"] {
        if keys == 1 && parsed.get(keyed_only).is_some() {
            return Err(parsed.error(format!("{keyed_only}: applies only with --keys above 1")));
        }
    }
    if keys > 1 {
        let overflow = match parsed.choice("--overflow", &["deny", "allow"], "deny")? {
            "allow" => Overflow::Allow,
            _ => Overflow::Deny,
        };
        config = config
            .capacity(parsed.u64_or("--capacity", keys)?)
            .overflow(overflow);
    }
    let policy = Policy::new(config).map_err(|e| args::config_error(&parsed, e))?;

    let arrivals = load.arrivals();
    let mut admitted_by_key: Vec<Vec<u64>> = vec![Vec::new(); keys as usize];
    let mut admitted = Vec::new();
    for (i, &offset) in arrivals.iter().enumerate() {
        let key = i as u64 % keys;
        let d = policy.check_at(key, 1, EPOCH_NS + offset);
        if d.allowed {
            // When the request may act: for the leaky bucket, after its
            // wait in the queue.
            let acts = offset + d.wait_ns;
            admitted.push(acts);
            admitted_by_key[key as usize].push(acts);
        }
    }
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

    report(
        out,
        &Report {
            config: &config,
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
            "\n  {} new keys found the table full (overflow {}); raise --capacity to track them all",
            stats.overflows,
            if config.overflow == Overflow::Allow {
                "allow: admitted untracked"
            } else {
                "deny: denied"
            }
        )?;
    }

    if let Some(path) = parsed.get("--plot") {
        let bin_ns = plot_bin(&load, horizon);
        let offered = bin(arrivals.iter().copied(), bin_ns, horizon);
        let admitted_bins = bin(admitted.iter().copied(), bin_ns, horizon);
        let svg = plot::svg(&Plot {
            title: format!("ratecell simulate: {}", describe(&config)),
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
        });
        std::fs::write(path, svg)
            .map_err(|e| CliError::io(format!("--plot: cannot write {path:?}: {e}")))?;
        writeln!(out, "\nplot written to {path}")?;
    }
    Ok(())
}

struct Report<'a> {
    config: &'a Config,
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
    s.push_str(&format!(
        ", {keys} key{}",
        if keys == 1 { "" } else { "s (round robin)" }
    ));
    s
}

/// A number with up to three decimals and no trailing zeros.
fn trim_float(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn report(out: &mut dyn Write, r: &Report) -> Result<(), CliError> {
    let secs = r.load.duration_ns as f64 / 1e9;
    let (n_off, n_adm) = (r.offered.len(), r.admitted.len());
    writeln!(out, "ratecell simulate: {}", describe(r.config))?;
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
        "\n  most admitted{} in any {}: {} (limit {}); in any {}: {}\n",
        if r.keys > 1 { " for one key" } else { "" },
        format_duration(p),
        r.max_period,
        r.config.limit,
        format_duration((p / 10).max(1)),
        r.max_tenth
    )?;

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

//! `ratecell replay FILE`: a recorded trace (CSV `timestamp_ns,key,cost`, or
//! a web server's Common/Combined Log Format access log) through one keyed
//! policy, at the trace's own times; totals, per-key counts, the most
//! limited keys, and optionally every line's decision.
//!
//! Input is read a line at a time through [`LineLimit`], so no line (and
//! no file without newlines) can take more than [`trace::MAX_LINE_BYTES`] of
//! memory, and every error names its line.

use crate::args::{self, CliError, OverflowArg, PolicyArgs, count, describe, format_duration};
use crate::engine::{self, Policy};
use crate::progress::{Progress, Unit};
use crate::table::Table;
use ratecell::{
    Algorithm, AnyLimiter, Clock, Config, Decision, Field, KeyedLimiter, Overflow, SnapshotError,
    States,
};
use std::cell::Cell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

mod trace;

use trace::{BadField, CsvLine, Format, LineLimit, Request, parse_clf, parse_csv, read_error};

/// `replay --help`'s paragraph.
pub const ABOUT: &str = "Replays a recorded trace through one policy with a state per key, at the \
times the trace gives, and reports what was admitted and denied in total and per key.";

/// `replay --help`'s closing notes: the formats.
pub const AFTER: &str = "formats:
  csv  timestamp_ns,key[,cost[,tier]] per line: UNIX time in ns, any key text (used as bytes;
       quote it as \"user, one\" when it holds a comma), cost 1 when left out, tier 0 when left
       out (see --tier). An optional header line starts with \"timestamp\"; blank lines and lines
       starting with # are skipped.
  clf  Common or Combined Log Format, e.g.
       127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.0\" 200 2326
       key = the client address, time from the brackets (1 s resolution), cost 1.

A line that cannot be read, or one longer than 1 MiB, stops the replay with its line number
and field (exit 2).

snapshots (docs/SNAPSHOT.md): replay a trace in parts, the states carried over exactly:
  ratecell replay monday.csv --limit 5 --to-snapshot limits.snap
  ratecell replay tuesday.csv --limit 5 --from-snapshot limits.snap
The limits given with --from-snapshot must be the saved ones (an error names the option that
differs).

tiers (docs/ALGORITHMS.md, \"A quota per tier\"): each --tier adds a tier, numbered from 1 (tier
0 is the limit the options above give), and each csv line names its key's tier:
  ratecell replay api.csv --limit 10 --tier algorithm=gcra,limit=1000,period=1s
A key whose tier changes keeps what it spent, read by its new tier's limit.";

// The options of `replay`.
#[derive(clap::Args, Clone, Debug)]
#[command(help_template = crate::HELP_TEMPLATE, args_override_self = true)]
pub struct ReplayArgs {
    /// The trace to replay; - reads standard input
    #[arg(value_name = "FILE")]
    file: String,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Keys the keyed table holds, 1 or more [default: 65536, fewer if that would take over 64 MiB]
    #[arg(long, value_name = "N", value_parser = args::u64_arg)]
    capacity: Option<u64>,
    /// What a new key gets when the table is full
    #[arg(
        long,
        value_enum,
        value_name = "POLICY",
        default_value = "deny",
        ignore_case = true
    )]
    overflow: OverflowArg,
    /// The trace's format; auto guesses from the first line
    #[arg(
        long,
        value_enum,
        value_name = "FORMAT",
        default_value = "auto",
        ignore_case = true
    )]
    format: FormatArg,
    /// Print every line's decision
    #[arg(long)]
    decisions: bool,
    /// Skip lines that cannot be read (access logs have some), count them and name the first,
    /// instead of stopping at the first
    #[arg(long = "skip-bad-lines")]
    skip_bad_lines: bool,
    /// How many of the most limited keys to list, 1..=1000
    #[arg(long, value_name = "N", default_value = "10", value_parser = args::u64_in(1, 1000))]
    top: u64,
    /// List every key, however many (else only up to 20)
    #[arg(long = "all-keys")]
    all_keys: bool,
    /// Start from the states saved in this snapshot file (see --to-snapshot); the limits given
    /// must be the saved ones; --capacity defaults to the snapshot's
    #[arg(long = "from-snapshot", value_name = "PATH")]
    from_snapshot: Option<PathBuf>,
    /// At the end, save every key's state to this snapshot file (atomically), judged at the
    /// trace's latest time
    #[arg(long = "to-snapshot", value_name = "PATH")]
    to_snapshot: Option<PathBuf>,
    /// Another tier, numbered from 1 (tier 0 is the limit the options give), named by a csv
    /// line's fourth field; same algorithm as tier 0. Repeat for more, up to 15:
    /// algorithm=NAME,limit=N,period=DURATION[,burst=N][,sub-windows=N]
    #[arg(long = "tier", value_name = "LIMIT", value_parser = args::limit_spec_arg, action = clap::ArgAction::Append)]
    tiers: Vec<args::LimitSpec>,
}

/// `--format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum FormatArg {
    /// Guess from the first line that is not blank or a comment
    Auto,
    /// timestamp_ns,key[,cost]
    Csv,
    /// A Common or Combined Log Format access log
    Clf,
}

/// The table a replay makes when --capacity is not given: this many keys,
/// unless the state would take more than `DEFAULT_TABLE_BYTES` (a sliding
/// log's state grows with the limit, and tables are allocated up front).
const DEFAULT_CAPACITY: u64 = 65_536;
const DEFAULT_TABLE_BYTES: u64 = 64 << 20;

/// [`DEFAULT_CAPACITY`], or as many keys as fit `DEFAULT_TABLE_BYTES`,
/// measured on a small table of the same limits.
fn default_capacity(configs: &[Config]) -> u64 {
    const PROBE_KEYS: u64 = 64;
    let probe: Vec<Config> = configs.iter().map(|c| c.capacity(PROBE_KEYS)).collect();
    let per_key = crate::engine::keyed_policy_multi(&probe)
        .map(|t| t.stats().bytes_allocated.div_ceil(PROBE_KEYS))
        .unwrap_or(1)
        .max(1);
    (DEFAULT_TABLE_BYTES / per_key).clamp(1, DEFAULT_CAPACITY)
}

/// Per-key tables longer than this are listed only with --all-keys.
const KEY_LIST_MAX: usize = 20;
#[derive(Default, Clone, Copy)]
struct Counts {
    requests: u64,
    admitted: u64,
    denied: u64,
}

impl Counts {
    fn add(&mut self, allowed: bool) {
        self.requests += 1;
        if allowed {
            self.admitted += 1;
        } else {
            self.denied += 1;
        }
    }

    fn cells(&self) -> [String; 4] {
        [
            self.requests.to_string(),
            self.admitted.to_string(),
            self.denied.to_string(),
            format!(
                "{:.1}%",
                self.denied as f64 * 100.0 / self.requests.max(1) as f64
            ),
        ]
    }
}

/// A key as printed: as is, or quoted when it has spaces or odd characters.
fn show_key(key: &[u8]) -> String {
    let key = String::from_utf8_lossy(key);
    if key
        .chars()
        .all(|c| c.is_ascii_graphic() || (c.is_alphanumeric() && !c.is_ascii()))
    {
        key.into_owned()
    } else {
        format!("{key:?}")
    }
}

fn show_decision(d: &Decision, algorithm: Algorithm) -> String {
    if d.allowed {
        let mut s = format!("admitted, remaining {}", d.remaining);
        if algorithm == Algorithm::LeakyBucket {
            s.push_str(&format!(", wait {}", format_duration(d.wait_ns)));
        }
        s
    } else if d.retry_after_ns == u64::MAX {
        "denied, never admitted (cost above the limit)".to_string()
    } else {
        format!("denied, retry after {}", format_duration(d.retry_after_ns))
    }
}

/// Everything the replay adds up, line by line.
struct Replay<'a> {
    name: &'a str,
    policy: Policy,
    algorithm: Algorithm,
    /// Every limit (more than one with --also: decisions name the denying one).
    limits: &'a [Config],
    /// How many tiers (1 without --tier).
    tiers: usize,
    decisions: bool,
    per_key: HashMap<Vec<u8>, Counts>,
    total: Counts,
    span: Option<(u64, u64)>,
    /// Requests earlier than the latest time before them.
    backwards: u64,
    /// The first of them and the one furthest back: line, how far back.
    first_backwards: Option<(u64, u64)>,
    largest_backwards: Option<(u64, u64)>,
    /// Lines skipped as unreadable (--skip-bad-lines), and the first's
    /// number and reason.
    bad: u64,
    first_bad: Option<String>,
}

impl Replay<'_> {
    fn request(&mut self, line: u64, r: &Request, out: &mut dyn Write) -> Result<(), CliError> {
        let (d, denied_by) = if r.tier != 0 || self.tiers > 1 {
            let AnyLimiter::Keyed(keyed) = &self.policy else {
                unreachable!("a replay's policy is keyed")
            };
            let tier = keyed.tier(r.tier).map_err(|e| {
                let hint = if self.tiers == 1 {
                    " (add tiers with --tier)"
                } else {
                    ""
                };
                CliError::usage(format!("{}:{line}: field 'tier': {e}{hint}", self.name))
            })?;
            let each = keyed.check_each(r.key, ratecell::Request::new(r.cost).at(r.t).tier(tier));
            (
                each.decision,
                each.denied_by.filter(|_| self.limits.len() > 1),
            )
        } else if self.limits.len() > 1 {
            let each = self
                .policy
                .check_each(r.key, ratecell::Request::new(r.cost).at(r.t));
            (each.decision, each.denied_by)
        } else {
            (
                self.policy
                    .check(r.key, ratecell::Request::new(r.cost).at(r.t)),
                None,
            )
        };
        self.total.add(d.allowed);
        match self.per_key.get_mut(r.key) {
            Some(c) => c.add(d.allowed),
            None => {
                let mut c = Counts::default();
                c.add(d.allowed);
                self.per_key.insert(r.key.to_vec(), c);
            }
        }
        if let Some((_, latest)) = self.span {
            if r.t < latest {
                let back = latest - r.t;
                self.backwards += 1;
                self.first_backwards.get_or_insert((line, back));
                if self.largest_backwards.is_none_or(|(_, b)| back > b) {
                    self.largest_backwards = Some((line, back));
                }
            }
        }
        self.span = Some(match self.span {
            None => (r.t, r.t),
            Some((a, b)) => (a.min(r.t), b.max(r.t)),
        });
        if self.decisions {
            let by = match denied_by {
                Some(i) => format!(" (by limit {}: {})", i + 1, describe(&self.limits[i])),
                None => String::new(),
            };
            let tier = if self.tiers > 1 {
                format!(" tier {}", r.tier)
            } else {
                String::new()
            };
            writeln!(
                out,
                "{}:{line}: {} cost {}{tier} at {}: {}{by}",
                self.name,
                show_key(r.key),
                r.cost,
                r.t,
                show_decision(&d, self.algorithm)
            )?;
        }
        Ok(())
    }
}

/// The option that gives `field` of limit `limit` (0: the first limit's
/// options; then each --also in order, or each --tier when `tiered`, whose
/// tiers take one limit each).
fn option_of(limit: usize, field: Field, tiered: bool) -> String {
    let option = match field {
        Field::Algorithm => "--algorithm",
        Field::Limit => "--limit",
        Field::PeriodNs => "--period",
        Field::Burst => "--burst",
        Field::SubWindows => "--sub-windows",
        Field::Capacity => return "--capacity".to_string(),
        Field::Overflow => return "--overflow".to_string(),
        Field::Limits => return "--also".to_string(),
        // A field the command has no option for (Field is non-exhaustive).
        _ => return "the policy".to_string(),
    };
    match (limit, tiered) {
        (0, _) => option.to_string(),
        (_, false) => format!("--also #{limit} field '{}'", &option[2..]),
        (_, true) => format!("--tier #{limit} field '{}'", &option[2..]),
    }
}

/// A field's value as its option takes it.
fn show_value(field: Field, value: u64) -> String {
    match field {
        Field::Algorithm => u32::try_from(value)
            .ok()
            .and_then(Algorithm::from_u32)
            .map_or_else(|| value.to_string(), |a| a.name().to_string()),
        Field::PeriodNs => format_duration(value),
        _ => value.to_string(),
    }
}

/// A snapshot that cannot be read or does not fit, as the command's error:
/// a mismatch names the option that differs (`tiered`: the options give
/// tiers, so a limit's index is its tier's).
fn snapshot_error(option: &str, path: &Path, e: SnapshotError, tiered: bool) -> CliError {
    let at = format!("{option} {}", path.display());
    let refuse = |why: String| CliError::option("replay", format!("{at}: {why}"));
    match e {
        SnapshotError::Io(e) => CliError::io(format!("{at}: {e}")),
        SnapshotError::ConfigMismatch {
            field: Field::Limits,
            saved,
            ..
        } if tiered => refuse(format!(
            "the snapshot's tiers hold {} each, replay's tiers one (drop --also)",
            count(saved, "limit")
        )),
        SnapshotError::ConfigMismatch {
            field: Field::Limits,
            saved,
            wanted,
            ..
        } => refuse(format!(
            "the snapshot holds {}, the options give {wanted} (the first, then one per --also)",
            count(saved, "limit")
        )),
        // A snapshot of a limiter without tiers counts 0 tiers.
        SnapshotError::ConfigMismatch {
            field: Field::Tiers,
            saved,
            wanted,
            ..
        } => refuse(match (saved, wanted) {
            (0, _) => "the snapshot is of a limiter without tiers; drop --tier".to_string(),
            (_, 0) => format!(
                "the snapshot is of a limiter of {}; give them with --tier (tier 0 the options', then one per --tier)",
                count(saved, "tier")
            ),
            _ => format!(
                "the snapshot holds {}, the options give {wanted} (tier 0 the options', then one per --tier)",
                count(saved, "tier")
            ),
        }),
        SnapshotError::ConfigMismatch {
            limit,
            field,
            saved,
            wanted,
        } => CliError::option(
            "replay",
            format!(
                "{at}: saved with {} {}, the options give {}",
                option_of(limit, field, tiered),
                show_value(field, saved),
                show_value(field, wanted)
            ),
        ),
        SnapshotError::Limiter(e) => args::config_error("replay", e),
        other => CliError::usage(format!("{at}: {other}")),
    }
}

pub fn run(a: &ReplayArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let mut configs = a.policy.configs("replay")?;
    let tiered = !a.tiers.is_empty();
    let capacity = match (a.capacity, &a.from_snapshot) {
        (Some(capacity), _) => capacity,
        // The snapshot's own table, so the options need not repeat it: a
        // builder given no limit takes the snapshot's (its table is made,
        // then dropped, before the policy's own is restored).
        (None, Some(path)) => AnyLimiter::builder()
            .states(States::snapshot(path))
            .build()
            .map_err(|e| snapshot_error("--from-snapshot", path, e, tiered))?
            .config()
            .capacity
            .max(1),
        (None, None) => default_capacity(&configs),
    };
    for c in &mut configs {
        *c = c.overflow(a.overflow.into()).capacity(capacity);
    }
    let config = configs[0];
    let tiers = tier_configs(a, &configs)?;
    let (policy, restored) = match &a.from_snapshot {
        None if tiers.len() > 1 => (
            engine::keyed_policy_tiered(&tiers)
                .map_err(|e| CliError::option("replay", format!("--tier: {e}")))?,
            None,
        ),
        None => (
            engine::keyed_policy_multi(&configs).map_err(|e| args::config_error("replay", e))?,
            None,
        ),
        Some(path) => {
            let (clock, _) = Clock::manual(crate::engine::EPOCH_NS);
            let builder = if tiered {
                tiers.iter().fold(KeyedLimiter::builder(), |b, tier| {
                    b.tier(std::slice::from_ref(tier))
                })
            } else {
                KeyedLimiter::builder().limits(&configs)
            };
            let keyed = builder
                .clock(clock)
                .states(States::snapshot(path))
                .build()
                .map_err(|e| snapshot_error("--from-snapshot", path, e, tiered))?;
            let keys = keyed.stats().keys_tracked;
            (Policy::Keyed(keyed), Some((path.as_path(), keys)))
        }
    };

    let path = a.file.as_str();
    let (input, size): (Box<dyn Read>, Option<u64>) = if path == "-" {
        (Box::new(std::io::stdin().lock()), None)
    } else {
        let f = std::fs::File::open(path)
            .map_err(|e| CliError::io(format!("cannot open {path:?}: {e}")))?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(f), size)
    };
    let name = if path == "-" { "<stdin>" } else { path };
    let bytes = Rc::new(Cell::new(0u64));
    let mut reader = BufReader::with_capacity(
        1 << 16,
        LineLimit {
            inner: input,
            newlines: 0,
            in_line: 0,
            bytes: bytes.clone(),
        },
    );
    let mut progress = match size {
        Some(total) => Progress::new("replaying", Some(total), Unit::Bytes),
        None => Progress::new("replaying", None, Unit::Items("lines")),
    };
    let (mut format, guessed) = match a.format {
        FormatArg::Csv => (Some(Format::Csv), false),
        FormatArg::Clf => (Some(Format::Clf), false),
        FormatArg::Auto => (None, true),
    };
    let mut replay = Replay {
        name,
        policy,
        algorithm: config.algorithm,
        limits: &configs,
        tiers: tiers.len(),
        decisions: a.decisions,
        per_key: HashMap::new(),
        total: Counts::default(),
        span: None,
        backwards: 0,
        first_backwards: None,
        largest_backwards: None,
        bad: 0,
        first_bad: None,
    };
    let mut csv = CsvLine::new();
    let mut raw = Vec::new();
    let mut line = 0u64;
    let mut seen_data = false;
    loop {
        raw.clear();
        let n = reader
            .read_until(b'\n', &mut raw)
            .map_err(|e| read_error(name, &e))?;
        if n == 0 {
            break;
        }
        line += 1;
        progress.set(bytes.get());
        let text = raw.trim_ascii();
        if text.is_empty() || text.starts_with(b"#") {
            continue;
        }
        let fmt = *format.get_or_insert_with(|| Format::detect(text));
        let first = !seen_data;
        seen_data = true;
        let clf_text;
        let parsed = match fmt {
            Format::Csv => csv.split(text).and_then(|fields| parse_csv(&fields, first)),
            Format::Clf => {
                clf_text = String::from_utf8_lossy(text);
                parse_clf(&clf_text).map(Some)
            }
        };
        match parsed {
            Ok(Some(r)) => replay.request(line, &r, out)?,
            Ok(None) => {}
            Err(BadField { field, problem }) if a.skip_bad_lines => {
                replay.bad += 1;
                replay
                    .first_bad
                    .get_or_insert_with(|| format!("line {line}: field '{field}': {problem}"));
            }
            Err(BadField { field, problem }) => {
                out.flush()?;
                // A first line that cannot be read may be a wrong guess.
                let note = if first && guessed {
                    format!(
                        " (read as {}, guessed from the first line; the formats are csv: \
                         timestamp_ns,key[,cost], and clf: a Common or Combined Log Format \
                         access log; choose one with --format)",
                        fmt.name()
                    )
                } else {
                    String::new()
                };
                return Err(CliError::usage(format!(
                    "{name}:{line}: field '{field}': {problem}{note}"
                )));
            }
        }
    }
    progress.finish();
    let saved = match &a.to_snapshot {
        None => None,
        Some(path) => {
            // States are judged live at the trace's latest time (the
            // limiter's own clock is the simulation's, not the trace's).
            let at = replay
                .span
                .map_or(crate::engine::EPOCH_NS, |(_, latest)| latest);
            let Policy::Keyed(keyed) = &replay.policy else {
                unreachable!("a replay's policy is keyed")
            };
            keyed
                .save_at(path, at)
                .map_err(|e| snapshot_error("--to-snapshot", path, e, tiered))?;
            Some((path.as_path(), at))
        }
    };
    report(
        a,
        &configs,
        &replay,
        format.unwrap_or(Format::Csv),
        line,
        Snapshots { restored, saved },
        out,
    )
}

/// Every tier's config (tier 0 the options', then each `--tier`), or just
/// the options' when there is no `--tier`. The command's tiers take one
/// limit each, so `--tier` with `--also` is refused by name.
fn tier_configs(a: &ReplayArgs, configs: &[Config]) -> Result<Vec<Config>, CliError> {
    let mut tiers = vec![configs[0]];
    if a.tiers.is_empty() {
        return Ok(tiers);
    }
    let refuse = |why: String| Err(CliError::option("replay", format!("--tier: {why}")));
    if configs.len() > 1 {
        return refuse("replay takes tiers of one limit each; drop --also".into());
    }
    if a.tiers.len() >= ratecell::MAX_TIERS {
        return refuse(format!(
            "{} given; at most {} (tier 0 is the options' limit)",
            a.tiers.len(),
            ratecell::MAX_TIERS - 1
        ));
    }
    for (i, spec) in a.tiers.iter().enumerate() {
        let which = format!("--tier #{} (tier {})", i + 1, i + 1);
        let c = spec.config("replay", &which)?;
        tiers.push(
            c.overflow(configs[0].overflow)
                .capacity(configs[0].capacity),
        );
    }
    Ok(tiers)
}

/// What the replay restored from (path, keys) and saved to (path, time).
struct Snapshots<'a> {
    restored: Option<(&'a Path, u64)>,
    saved: Option<(&'a Path, u64)>,
}

fn report(
    a: &ReplayArgs,
    configs: &[Config],
    replay: &Replay,
    format: Format,
    lines: u64,
    snapshots: Snapshots,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let config = &configs[0];
    let name = replay.name;
    let total = replay.total;
    if a.decisions {
        writeln!(out)?;
    }
    writeln!(out, "ratecell replay {name}: {}", describe(config))?;
    for c in &configs[1..] {
        writeln!(out, "  and {}", describe(c))?;
    }
    if let AnyLimiter::Keyed(keyed) = &replay.policy {
        for tier in 1..replay.tiers {
            if let Some(&[c]) = keyed.tier_limits(tier) {
                writeln!(out, "  tier {tier}: {}", describe(&c))?;
            }
        }
    }
    if let Some((path, keys)) = snapshots.restored {
        writeln!(
            out,
            "  started from the snapshot {} ({} restored)",
            path.display(),
            count(keys, "key")
        )?;
    }
    writeln!(
        out,
        "  {} ({}): {} from {} over {}, {} skipped (blank, comment or header)",
        count(lines, "line"),
        format.name(),
        count(total.requests, "request"),
        count(replay.per_key.len() as u64, "key"),
        format_duration(replay.span.map_or(0, |(a, b)| b - a)),
        lines - total.requests - replay.bad
    )?;
    if let Some(first) = &replay.first_bad {
        writeln!(
            out,
            "  {} skipped as unreadable (the first, {first})",
            count(replay.bad, "bad line"),
        )?;
    }
    if let (Some((first, first_back)), Some((far, far_back))) =
        (replay.first_backwards, replay.largest_backwards)
    {
        let mut where_ = format!(
            "the first at line {first}, {} back",
            format_duration(first_back)
        );
        if far != first {
            where_.push_str(&format!(
                "; the furthest at line {far}, {} back",
                format_duration(far_back)
            ));
        }
        writeln!(
            out,
            "  {} went back in time ({where_}):\n  the trace is not in time order, so the span \
             above runs from its earliest time to its latest;\n  sort it by time to replay it \
             as recorded",
            count(replay.backwards, "request"),
        )?;
    }
    let stats = replay.policy.stats();
    writeln!(
        out,
        "  keyed table: capacity {}, overflow {}; {} tracked at the end, {}",
        config.capacity,
        match config.overflow {
            Overflow::Deny => "deny",
            Overflow::Allow => "allow",
            Overflow::Evict => "evict",
        },
        count(stats.keys_tracked, "key"),
        if config.overflow == Overflow::Evict {
            count(stats.evicted_live, "live eviction")
        } else {
            count(stats.overflows, "overflow")
        }
    )?;
    if let Some((path, at)) = snapshots.saved {
        writeln!(
            out,
            "  saved to the snapshot {} (states live at {at}, the trace's latest time)",
            path.display()
        )?;
    }
    writeln!(out)?;
    let header = ["key", "requests", "admitted", "denied", "denied %"];
    let mut t = Table::new(header);
    let [c1, c2, c3, c4] = total.cells();
    t.row(["all keys".to_string(), c1, c2, c3, c4]);
    write!(out, "{}", t.render())?;

    // Most limited first: the most denied, then the fewest requests, then
    // by key.
    let mut keys: Vec<(&Vec<u8>, &Counts)> = replay.per_key.iter().collect();
    keys.sort_by(|x, y| {
        y.1.denied
            .cmp(&x.1.denied)
            .then(x.1.requests.cmp(&y.1.requests))
            .then(x.0.cmp(y.0))
    });
    let limited = keys.iter().filter(|(_, c)| c.denied > 0).count();
    let rows = |keys: &[(&Vec<u8>, &Counts)]| {
        let mut t = Table::new(header);
        for (k, c) in keys {
            let [c1, c2, c3, c4] = c.cells();
            t.row([show_key(k), c1, c2, c3, c4]);
        }
        t.render()
    };
    if keys.len() <= KEY_LIST_MAX || a.all_keys {
        // One table: every key, the most limited first.
        writeln!(
            out,
            "\nper key, the most limited first ({} of {} limited):",
            limited,
            count(keys.len() as u64, "key")
        )?;
        write!(out, "{}", rows(&keys))?;
    } else {
        writeln!(
            out,
            "\nper key: {} (--all-keys lists them all)",
            count(keys.len() as u64, "key")
        )?;
        if limited == 0 {
            writeln!(out, "\nno key was limited.")?;
        } else {
            let top = (a.top as usize).min(limited);
            writeln!(
                out,
                "\nmost limited keys (by denied requests; top {top} of {limited}):"
            )?;
            write!(out, "{}", rows(&keys[..top]))?;
        }
    }
    if stats.overflows > 0 {
        writeln!(
            out,
            "\n{} a new key found the table full; raise --capacity to track every key.",
            if stats.overflows == 1 {
                "Once".to_string()
            } else {
                format!("{} times", stats.overflows)
            }
        )?;
    }
    Ok(())
}

//! `ratecell replay FILE`: a recorded trace (CSV `timestamp_ns,key,cost`, or
//! a web server's Common/Combined Log Format access log) through one keyed
//! policy, at the trace's own times; totals, per-key counts, the most
//! limited keys, and optionally every line's decision.

use crate::args::{self, CliError, Command, Opt, describe, format_duration, parse_u64};
use crate::engine::Policy;
use crate::table::Table;
use ratecell::{Algorithm, Decision, Overflow};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

pub static COMMAND: LazyLock<Command> = LazyLock::new(|| {
    let mut opts = args::policy_opts();
    opts.extend([
        Opt {
            name: "--capacity",
            value: Some("N"),
            help: "keys the keyed table holds, 1 or more [65536, fewer if that would take over 64 MiB]",
        },
        Opt {
            name: "--overflow",
            value: Some("POLICY"),
            help: "deny or allow a new key when the table is full [deny]",
        },
        Opt {
            name: "--format",
            value: Some("FORMAT"),
            help: "csv, clf (access log) or auto (from the first line) [auto]",
        },
        Opt {
            name: "--decisions",
            value: None,
            help: "print every line's decision",
        },
        Opt {
            name: "--top",
            value: Some("N"),
            help: "how many of the most limited keys to list, 1..=1000 [10]",
        },
        Opt {
            name: "--all-keys",
            value: None,
            help: "list every key, however many (else only up to 20)",
        },
    ]);
    Command {
        name: "replay",
        usage: "replay FILE [options]   (FILE - reads standard input)",
        about: "Replays a recorded trace through one policy with a state per key, at the times the \
                trace gives, and reports what was admitted and denied in total and per key.",
        opts,
        after: "formats:\n  \
                csv  timestamp_ns,key[,cost] per line: UNIX time in ns, any key text (used as bytes),\n       \
                cost 1 when left out. An optional header line starts with \"timestamp\";\n       \
                blank lines and lines starting with # are skipped.\n  \
                clf  Common or Combined Log Format, e.g.\n       \
                127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.0\" 200 2326\n       \
                key = the client address, time from the brackets (1 s resolution), cost 1.\n\n\
                A line that cannot be read stops the replay with its line number and field (exit 2).\n",
    }
});

/// The table a replay makes when --capacity is not given: this many keys,
/// unless the state would take more than `DEFAULT_TABLE_BYTES` (a sliding
/// log's state grows with the limit, and tables are allocated up front).
const DEFAULT_CAPACITY: u64 = 65_536;
const DEFAULT_TABLE_BYTES: u64 = 64 << 20;

/// [`DEFAULT_CAPACITY`], or as many keys as fit `DEFAULT_TABLE_BYTES`,
/// measured on a small table of the same configuration.
fn default_capacity(config: ratecell::Config) -> u64 {
    const PROBE_KEYS: u64 = 64;
    let per_key = crate::engine::sim_keyed(config.capacity(PROBE_KEYS))
        .map(|t| t.stats().bytes_allocated.div_ceil(PROBE_KEYS))
        .unwrap_or(1)
        .max(1);
    (DEFAULT_TABLE_BYTES / per_key).clamp(1, DEFAULT_CAPACITY)
}

/// Files at least this large get a progress bar (on a terminal).
const PROGRESS_FROM_BYTES: u64 = 4 << 20;
/// Per-key tables longer than this are listed only with --all-keys.
const KEY_LIST_MAX: usize = 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Format {
    Csv,
    Clf,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Clf => "clf",
        }
    }

    /// CLF lines have the time in brackets after the client and user
    /// fields; anything else is read as CSV.
    fn detect(line: &str) -> Format {
        match (line.find(" ["), line.find(']')) {
            (Some(open), Some(close)) if open < close => Format::Clf,
            _ => Format::Csv,
        }
    }
}

/// One request read from a line.
struct Request<'a> {
    t: u64,
    key: &'a str,
    cost: u64,
}

/// Why a line could not be read: the field and what was wrong with it.
struct BadField {
    field: &'static str,
    problem: String,
}

fn bad(field: &'static str, problem: String) -> BadField {
    BadField { field, problem }
}

/// `timestamp_ns,key[,cost]`. Returns `None` for a header line.
fn parse_csv(line: &str, first: bool) -> Result<Option<Request<'_>>, BadField> {
    const SHAPE: &str = "a line is timestamp_ns,key[,cost]";
    let mut fields = line.split(',').map(str::trim);
    let ts = fields.next().unwrap_or("");
    if first && ts.to_ascii_lowercase().starts_with("timestamp") {
        return Ok(None);
    }
    let t = parse_u64(ts)
        .ok_or_else(|| bad("timestamp_ns", format!("{ts:?} is not an unsigned integer")))?;
    let key = match fields.next() {
        None => return Err(bad("key", format!("missing ({SHAPE})"))),
        Some(k) => k
            .strip_prefix('"')
            .and_then(|k| k.strip_suffix('"'))
            .unwrap_or(k),
    };
    if key.is_empty() {
        return Err(bad("key", "is empty".to_string()));
    }
    let cost = match fields.next() {
        None => 1,
        Some(c) => {
            parse_u64(c).ok_or_else(|| bad("cost", format!("{c:?} is not an unsigned integer")))?
        }
    };
    if let Some(extra) = fields.next() {
        return Err(bad(
            "cost",
            format!("followed by {extra:?}: too many fields ({SHAPE})"),
        ));
    }
    Ok(Some(Request { t, key, cost }))
}

/// `host ident user [dd/Mon/yyyy:hh:mm:ss +hhmm] "request" status bytes ...`
fn parse_clf(line: &str) -> Result<Request<'_>, BadField> {
    let key = line.split_whitespace().next().unwrap_or("");
    if key.is_empty() {
        return Err(bad("client", "missing".to_string()));
    }
    let (Some(open), Some(close)) = (line.find('['), line.find(']')) else {
        return Err(bad(
            "time",
            "missing (expected [dd/Mon/yyyy:hh:mm:ss +hhmm])".to_string(),
        ));
    };
    if close < open {
        return Err(bad("time", "missing its opening [".to_string()));
    }
    let text = &line[open + 1..close];
    let t = parse_clf_time(text).ok_or_else(|| {
        bad(
            "time",
            format!("\"[{text}]\" is not a [dd/Mon/yyyy:hh:mm:ss +hhmm] time from 1970 on"),
        )
    })?;
    Ok(Request { t, key, cost: 1 })
}

/// `10/Oct/2000:13:55:36 -0700` as UNIX ns.
fn parse_clf_time(s: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (stamp, zone) = s.split_once(' ')?;
    let mut parts = stamp.splitn(3, '/');
    let day: i64 = parts.next()?.parse().ok()?;
    let month_name = parts.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? as i64 + 1;
    let mut rest = parts.next()?.split(':');
    let year: i64 = rest.next()?.parse().ok()?;
    let hms: Vec<i64> = rest.map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let [h, mi, sec] = hms[..] else { return None };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=month_days).contains(&day) || !(0..24).contains(&h) || !(0..60).contains(&mi) {
        return None;
    }
    if !(0..=60).contains(&sec) {
        return None;
    }
    let (sign, digits) = match zone.as_bytes().first()? {
        b'+' => (1, &zone[1..]),
        b'-' => (-1, &zone[1..]),
        _ => return None,
    };
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let offset =
        sign * (digits[..2].parse::<i64>().ok()? * 3600 + digits[2..].parse::<i64>().ok()? * 60);
    let secs = days_from_civil(year, month, day) * 86_400 + h * 3600 + mi * 60 + sec - offset;
    u64::try_from(secs).ok()?.checked_mul(1_000_000_000)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A progress bar on standard error, redrawn at most ten times a second.
struct Progress {
    total: u64,
    on: bool,
    last: Instant,
}

impl Progress {
    fn new(total: Option<u64>) -> Progress {
        let total = total.unwrap_or(0);
        Progress {
            total,
            on: total >= PROGRESS_FROM_BYTES && std::io::stderr().is_terminal(),
            last: Instant::now(),
        }
    }

    fn update(&mut self, done: u64, lines: u64) {
        if !self.on || lines % 1024 != 0 || self.last.elapsed() < Duration::from_millis(100) {
            return;
        }
        self.last = Instant::now();
        const WIDTH: u64 = 30;
        let filled = (done.min(self.total) * WIDTH / self.total) as usize;
        eprint!(
            "\rreplaying [{}{}] {:3}%  {lines} lines",
            "#".repeat(filled),
            "-".repeat(WIDTH as usize - filled),
            done.min(self.total) * 100 / self.total
        );
    }

    fn finish(&self) {
        if self.on {
            // Erase the bar: the report follows on stdout.
            eprint!("\r\x1b[2K");
        }
    }
}

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
fn show_key(key: &str) -> String {
    if key
        .chars()
        .all(|c| c.is_ascii_graphic() || (c.is_alphanumeric() && !c.is_ascii()))
    {
        key.to_string()
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

pub fn run(argv: &[String], out: &mut dyn Write) -> Result<(), CliError> {
    let Some(parsed) = COMMAND.parse_or_help(argv, out)? else {
        return Ok(());
    };
    let path = match parsed.positionals.as_slice() {
        [p] => p.clone(),
        [] => return Err(parsed.error("missing the trace FILE to replay".into())),
        [_, extra, ..] => return Err(parsed.error(format!("unexpected argument {extra:?}"))),
    };
    let overflow = match parsed.choice("--overflow", &["deny", "allow"], "deny")? {
        "allow" => Overflow::Allow,
        _ => Overflow::Deny,
    };
    let config = args::policy_config(&parsed)?.overflow(overflow);
    let capacity = match parsed.get("--capacity") {
        Some(_) => parsed.u64_or("--capacity", 0)?,
        None => default_capacity(config),
    };
    let config = config.capacity(capacity);
    let format = match parsed.choice("--format", &["auto", "csv", "clf"], "auto")? {
        "csv" => Some(Format::Csv),
        "clf" => Some(Format::Clf),
        _ => None,
    };
    let top = parsed.u64_in("--top", 10, 1, 1000)? as usize;
    let decisions = parsed.flag("--decisions");
    let policy = Policy::keyed(config).map_err(|e| args::config_error(&parsed, e))?;

    let (input, size): (Box<dyn Read>, Option<u64>) = if path == "-" {
        (Box::new(std::io::stdin().lock()), None)
    } else {
        let f = std::fs::File::open(&path)
            .map_err(|e| CliError::io(format!("cannot open {path:?}: {e}")))?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(f), size)
    };
    let name = if path == "-" {
        "<stdin>"
    } else {
        path.as_str()
    };
    let mut reader = BufReader::with_capacity(1 << 16, input);
    let mut progress = Progress::new(size);

    let mut format = format;
    let mut per_key: HashMap<String, Counts> = HashMap::new();
    let mut total = Counts::default();
    let (mut lines, mut skipped, mut read) = (0u64, 0u64, 0u64);
    let mut span: Option<(u64, u64)> = None;
    let mut seen_data = false;
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let n = reader
            .read_until(b'\n', &mut raw)
            .map_err(|e| CliError::io(format!("cannot read {name}: {e}")))?;
        if n == 0 {
            break;
        }
        lines += 1;
        read += n as u64;
        progress.update(read, lines);
        let text = String::from_utf8_lossy(&raw);
        let line = text.trim_end_matches(['\n', '\r']).trim();
        if line.is_empty() || line.starts_with('#') {
            skipped += 1;
            continue;
        }
        let fmt = *format.get_or_insert_with(|| Format::detect(line));
        let parsed_line = match fmt {
            Format::Csv => parse_csv(line, !seen_data),
            Format::Clf => parse_clf(line).map(Some),
        };
        seen_data = true;
        let request = match parsed_line {
            Ok(Some(r)) => r,
            Ok(None) => {
                skipped += 1;
                continue;
            }
            Err(BadField { field, problem }) => {
                progress.finish();
                out.flush()?;
                return Err(CliError::usage(format!(
                    "{name}:{lines}: field '{field}': {problem}"
                )));
            }
        };
        let d = policy.check_bytes_at(request.key.as_bytes(), request.cost, request.t);
        total.add(d.allowed);
        match per_key.get_mut(request.key) {
            Some(c) => c.add(d.allowed),
            None => {
                let mut c = Counts::default();
                c.add(d.allowed);
                per_key.insert(request.key.to_string(), c);
            }
        }
        span = Some(match span {
            None => (request.t, request.t),
            Some((a, b)) => (a.min(request.t), b.max(request.t)),
        });
        if decisions {
            writeln!(
                out,
                "{name}:{lines}: {} cost {} at {}: {}",
                show_key(request.key),
                request.cost,
                request.t,
                show_decision(&d, config.algorithm)
            )?;
        }
    }
    progress.finish();
    if decisions {
        writeln!(out)?;
    }

    writeln!(out, "ratecell replay {name}: {}", describe(&config))?;
    writeln!(
        out,
        "  {} lines ({}): {} requests from {} keys over {}, {} skipped (blank, comment or header)",
        lines,
        format.unwrap_or(Format::Csv).name(),
        total.requests,
        per_key.len(),
        format_duration(span.map_or(0, |(a, b)| b - a)),
        skipped
    )?;
    let stats = policy.stats();
    writeln!(
        out,
        "  keyed table: capacity {}, overflow {}; {} keys tracked at the end, {} overflows\n",
        config.capacity,
        if overflow == Overflow::Allow {
            "allow"
        } else {
            "deny"
        },
        stats.keys_tracked,
        stats.overflows
    )?;
    let header = ["key", "requests", "admitted", "denied", "denied %"];
    let mut t = Table::new(header);
    let [a, b, c, d] = total.cells();
    t.row(["all keys".to_string(), a, b, c, d]);
    write!(out, "{}", t.render())?;

    let mut keys: Vec<(&String, &Counts)> = per_key.iter().collect();
    keys.sort_by(|x, y| x.0.cmp(y.0));
    if keys.len() <= KEY_LIST_MAX || parsed.flag("--all-keys") {
        writeln!(out, "\nper key:")?;
        let mut t = Table::new(header);
        for (k, c) in &keys {
            let [a, b, c, d] = c.cells();
            t.row([show_key(k), a, b, c, d]);
        }
        write!(out, "{}", t.render())?;
    } else {
        writeln!(
            out,
            "\nper key: {} keys (--all-keys lists them all)",
            keys.len()
        )?;
    }

    keys.retain(|(_, c)| c.denied > 0);
    keys.sort_by(|x, y| {
        y.1.denied
            .cmp(&x.1.denied)
            .then(x.1.requests.cmp(&y.1.requests))
            .then(x.0.cmp(y.0))
    });
    if keys.is_empty() {
        writeln!(out, "\nno key was limited.")?;
    } else {
        writeln!(
            out,
            "\nmost limited keys (by denied requests; top {} of {}):",
            top.min(keys.len()),
            keys.len()
        )?;
        let mut t = Table::new(header);
        for (k, c) in keys.iter().take(top) {
            let [a, b, c, d] = c.cells();
            t.row([show_key(k), a, b, c, d]);
        }
        write!(out, "{}", t.render())?;
    }
    if stats.overflows > 0 {
        writeln!(
            out,
            "\n{} times a new key found the table full; raise --capacity to track every key.",
            stats.overflows
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clf_times_are_utc_nanoseconds() {
        // 2000-10-10 20:55:36 UTC.
        assert_eq!(
            parse_clf_time("10/Oct/2000:13:55:36 -0700"),
            Some(971_211_336_000_000_000)
        );
        assert_eq!(parse_clf_time("01/Jan/1970:00:00:00 +0000"), Some(0));
        assert_eq!(
            parse_clf_time("15/Nov/2023:01:00:00 +0100"),
            Some(1_700_006_400_000_000_000)
        );
        assert_eq!(
            parse_clf_time("29/Feb/2024:12:00:00 +0000"),
            Some(1_709_208_000_000_000_000)
        );
        assert_eq!(parse_clf_time("01/Jan/1970:00:00:00 +0100"), None);
        assert_eq!(parse_clf_time("10/Foo/2000:13:55:36 -0700"), None);
        assert_eq!(parse_clf_time("31/Nov/2023:00:00:00 +0000"), None);
        assert_eq!(parse_clf_time("29/Feb/2023:00:00:00 +0000"), None);
        assert_eq!(parse_clf_time("10/Oct/2000:13:55:36"), None);
    }

    #[test]
    fn csv_lines_name_the_bad_field() {
        assert!(matches!(parse_csv("timestamp_ns,key,cost", true), Ok(None)));
        let r = parse_csv("5, alice ,3", false).ok().flatten().unwrap();
        assert_eq!((r.t, r.key, r.cost), (5, "alice", 3));
        let r = parse_csv("5,\"bob\"", false).ok().flatten().unwrap();
        assert_eq!((r.key, r.cost), ("bob", 1));
        for (line, field) in [
            ("x,alice,1", "timestamp_ns"),
            ("5", "key"),
            ("5,,1", "key"),
            ("5,alice,abc", "cost"),
            ("5,alice,1,9", "cost"),
        ] {
            match parse_csv(line, false) {
                Err(e) => assert_eq!(e.field, field, "{line}"),
                Ok(_) => panic!("{line} was accepted"),
            }
        }
    }

    #[test]
    fn formats_are_told_apart() {
        assert_eq!(
            Format::detect(r#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1"#),
            Format::Clf
        );
        assert_eq!(Format::detect("1700000000000000000,alice,1"), Format::Csv);
    }
}

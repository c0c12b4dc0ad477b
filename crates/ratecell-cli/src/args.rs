//! Command-line options: the parser every command shares, the typed readers
//! that turn option text into numbers, durations and configurations, and the
//! error type whose message names the option and its valid range.
//!
//! Range checks on configuration fields are not repeated here: the values go
//! into a [`Config`] and the library's own [`ConfigError`] message is shown,
//! prefixed with the option that carried the field.

use ratecell::{Algorithm, Clock, Config, ConfigError, Error, Field, Limiter};
use std::fmt::Write as _;

/// A failure that ends the command, with the process exit code.
#[derive(Debug)]
pub struct CliError {
    /// 2 for bad usage or bad input, 1 for anything else (I/O), 0 when
    /// the output was closed early (nothing to report).
    pub code: u8,
    /// One line, without the `ratecell:` prefix.
    pub message: String,
    /// The command whose `--help` would explain the mistake.
    pub help_for: Option<&'static str>,
}

impl CliError {
    /// Bad options or bad input lines: exit code 2.
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            code: 2,
            message: message.into(),
            help_for: None,
        }
    }

    /// A failure of the environment (a file that cannot be read): exit code 1.
    pub fn io(message: impl Into<String>) -> CliError {
        CliError {
            code: 1,
            message: message.into(),
            help_for: None,
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> CliError {
        // A reader that went away (`ratecell replay big.log | head`) is
        // not a failure: code 0 ends the process quietly.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return CliError {
                code: 0,
                message: String::new(),
                help_for: None,
            };
        }
        CliError::io(format!("cannot write the output: {e}"))
    }
}

/// Help text is wrapped to this many columns.
const HELP_WIDTH: usize = 96;

/// Breaks `text` into lines of at most `width` columns at spaces; lines
/// after the first are indented by `hang` (the first is assumed to start
/// there already).
fn wrap(text: &str, width: usize, hang: usize) -> String {
    let mut out = String::new();
    let mut col = hang;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if col > hang && col + 1 + len > width {
            out.push('\n');
            out.push_str(&" ".repeat(hang));
            col = hang;
        } else if col > hang {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += len;
    }
    out
}

/// One option a command accepts.
pub struct Opt {
    /// With the dashes, e.g. `--limit`.
    pub name: &'static str,
    /// The value's placeholder in the help (`N`, `DURATION`), or `None` for
    /// a flag that takes no value.
    pub value: Option<&'static str>,
    /// One line for `--help`.
    pub help: &'static str,
}

/// A command's name, what it does, and what it accepts.
pub struct Command {
    /// The word after `ratecell`.
    pub name: &'static str,
    /// The synopsis line after `usage: ratecell`.
    pub usage: &'static str,
    /// A paragraph for the top of `--help`.
    pub about: &'static str,
    /// Every option, in help order.
    pub opts: Vec<Opt>,
    /// Text after the option list (examples, formats).
    pub after: &'static str,
}

impl Command {
    /// The `--help` text.
    pub fn help(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "usage: ratecell {}\n", self.usage);
        let _ = writeln!(s, "{}\n", wrap(self.about, HELP_WIDTH, 0));
        let _ = writeln!(s, "options:");
        let cols: Vec<String> = self
            .opts
            .iter()
            .map(|o| match o.value {
                Some(v) => format!("{} {v}", o.name),
                None => o.name.to_string(),
            })
            .collect();
        let width = cols.iter().map(|c| c.len()).max().unwrap_or(0).max(10);
        for (col, o) in cols.iter().zip(&self.opts) {
            let _ = writeln!(
                s,
                "  {col:<width$}  {}",
                wrap(o.help, HELP_WIDTH, width + 4)
            );
        }
        let _ = writeln!(s, "  {:<width$}  show this help", "-h, --help");
        if !self.after.is_empty() {
            let _ = write!(s, "\n{}", self.after);
            if !self.after.ends_with('\n') {
                s.push('\n');
            }
        }
        s
    }

    /// [`Command::parse`], answering `--help` on the command's behalf: writes
    /// the help to `out` and returns `None`, so the command has nothing to do.
    pub fn parse_or_help(
        &'static self,
        argv: &[String],
        out: &mut dyn std::io::Write,
    ) -> Result<Option<Parsed>, CliError> {
        let parsed = self.parse(argv)?;
        if parsed.help {
            write!(out, "{}", self.help())?;
            return Ok(None);
        }
        Ok(Some(parsed))
    }

    /// Splits `argv` (the words after the command name) into options and
    /// positional arguments. `--name value` and `--name=value` both work; a
    /// repeated option keeps its last value; `--` ends the options.
    pub fn parse(&'static self, argv: &[String]) -> Result<Parsed, CliError> {
        let mut parsed = Parsed {
            command: self,
            values: Vec::new(),
            positionals: Vec::new(),
            help: false,
        };
        let mut words = argv.iter();
        let mut only_positionals = false;
        while let Some(word) = words.next() {
            if only_positionals || !word.starts_with('-') || word == "-" {
                parsed.positionals.push(word.clone());
                continue;
            }
            if word == "--" {
                only_positionals = true;
                continue;
            }
            if word == "-h" || word == "--help" {
                parsed.help = true;
                continue;
            }
            let (name, inline) = match word.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (word.as_str(), None),
            };
            let Some(opt) = self.opts.iter().find(|o| o.name == name) else {
                return Err(self.error(format!("unknown option '{name}'")));
            };
            let value = match (opt.value, inline) {
                (None, None) => String::new(),
                (None, Some(_)) => {
                    return Err(self.error(format!("option {name} takes no value")));
                }
                (Some(_), Some(v)) => v,
                (Some(placeholder), None) => match words.next() {
                    Some(v) => v.clone(),
                    None => {
                        return Err(
                            self.error(format!("option {name} needs a value ({placeholder})"))
                        );
                    }
                },
            };
            parsed.values.retain(|(n, _)| *n != opt.name);
            parsed.values.push((opt.name, value));
        }
        Ok(parsed)
    }

    /// A usage error that points at this command's help.
    pub fn error(&'static self, message: String) -> CliError {
        CliError {
            code: 2,
            message,
            help_for: Some(self.name),
        }
    }
}

/// The options and arguments given to one command.
pub struct Parsed {
    command: &'static Command,
    values: Vec<(&'static str, String)>,
    /// Arguments that are not options, in order.
    pub positionals: Vec<String>,
    /// `-h` or `--help` was given.
    pub help: bool,
}

impl Parsed {
    /// The raw value of an option, if it was given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether a flag was given.
    pub fn flag(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// A usage error naming this command.
    pub fn error(&self, message: String) -> CliError {
        self.command.error(message)
    }

    /// An unsigned integer option.
    pub fn u64_or(&self, name: &str, default: u64) -> Result<u64, CliError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => parse_u64(v)
                .ok_or_else(|| self.error(format!("{name}: {v:?} is not an unsigned integer"))),
        }
    }

    /// An unsigned integer option that must lie in `lo..=hi`.
    pub fn u64_in(&self, name: &str, default: u64, lo: u64, hi: u64) -> Result<u64, CliError> {
        let v = self.u64_or(name, default)?;
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(self.error(format!("{name}: {v} is outside {lo}..={hi}")))
        }
    }

    /// A positive, finite decimal number (a rate).
    pub fn positive_f64(&self, name: &str, default: f64, max: f64) -> Result<f64, CliError> {
        let Some(v) = self.get(name) else {
            return Ok(default);
        };
        match v.parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 && x <= max => Ok(x),
            Ok(_) => Err(self.error(format!(
                "{name}: {v} is outside the valid range (more than 0, at most {max})"
            ))),
            Err(_) => Err(self.error(format!("{name}: {v:?} is not a number"))),
        }
    }

    /// A duration option (`1s`, `100ms`, `1m`, `250us`, a plain number is ns).
    pub fn duration_or(&self, name: &str, default_ns: u64) -> Result<u64, CliError> {
        match self.get(name) {
            None => Ok(default_ns),
            Some(v) => parse_duration(v).map_err(|why| self.error(format!("{name}: {v:?} {why}"))),
        }
    }

    /// One of a fixed set of words.
    pub fn choice<'a>(
        &self,
        name: &str,
        choices: &[&'a str],
        default: &'a str,
    ) -> Result<&'a str, CliError> {
        let Some(v) = self.get(name) else {
            return Ok(default);
        };
        choices.iter().copied().find(|c| *c == v).ok_or_else(|| {
            self.error(format!(
                "{name}: {v:?} is not one of {}",
                choices.join(", ")
            ))
        })
    }

    /// No positional arguments are allowed.
    pub fn no_positionals(&self) -> Result<(), CliError> {
        match self.positionals.first() {
            None => Ok(()),
            Some(p) => Err(self.error(format!("unexpected argument {p:?}"))),
        }
    }
}

/// The options that describe a policy, shared by `simulate` and `replay`.
pub fn policy_opts() -> Vec<Opt> {
    vec![
        Opt {
            name: "--algorithm",
            value: Some("NAME"),
            help: "gcra, leaky_bucket, token_bucket, fixed_window, sliding_window, bucketed_window or sliding_log [gcra]",
        },
        Opt {
            name: "--limit",
            value: Some("N"),
            help: "units admitted per period, 1..=4294967295 [10]",
        },
        Opt {
            name: "--period",
            value: Some("DURATION"),
            help: "the period: 1s, 100ms, 1m, 250us, or plain ns; 1µs..=366 days [1s]",
        },
        Opt {
            name: "--burst",
            value: Some("N"),
            help: "units admitted at once from a fresh state (gcra, leaky_bucket, token_bucket); 0 = limit [0]",
        },
        Opt {
            name: "--sub-windows",
            value: Some("N"),
            help: "bucketed_window only: sub-windows per period, 1..=64, dividing the period [10 if it divides]",
        },
    ]
}

/// The option that carries each configuration field, for error messages.
fn option_for(field: Field) -> &'static str {
    match field {
        Field::Algorithm => "--algorithm",
        Field::Limit => "--limit",
        Field::PeriodNs => "--period",
        Field::Burst => "--burst",
        Field::SubWindows => "--sub-windows",
        Field::Capacity => "--capacity",
        Field::Overflow => "--overflow",
    }
}

/// The library's refusal, shown against the option that carried the field.
pub fn config_error(parsed: &Parsed, e: Error) -> CliError {
    match e {
        Error::Config(ConfigError { field, message }) => {
            parsed.error(format!("{}: {message}", option_for(field)))
        }
        other => CliError::io(other.to_string()),
    }
}

/// Reads the policy options into a configuration the library accepts.
/// Validation is the library's: a direct limiter is built and dropped.
pub fn policy_config(parsed: &Parsed) -> Result<Config, CliError> {
    let algorithm = match parsed.get("--algorithm") {
        None => Algorithm::Gcra,
        Some(v) => Algorithm::from_name(v).ok_or_else(|| {
            let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
            parsed.error(format!(
                "--algorithm: {v:?} is not one of {}",
                names.join(", ")
            ))
        })?,
    };
    let limit = parsed.u64_or("--limit", 10)?;
    let period = parsed.duration_or("--period", 1_000_000_000)?;
    let mut config = Config::new(algorithm, limit, period).burst(parsed.u64_or("--burst", 0)?);
    if let Some(v) = parsed.get("--sub-windows") {
        if algorithm != Algorithm::BucketedWindow {
            return Err(parsed.error(format!(
                "--sub-windows: applies only to bucketed_window, not {algorithm}"
            )));
        }
        let n = parse_u64(v)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                parsed.error(format!("--sub-windows: {v:?} is not an integer in 1..=64"))
            })?;
        config = config.sub_windows(n);
    }
    let (clock, _) = Clock::manual(0);
    Limiter::with_clock(config, clock).map_err(|e| config_error(parsed, e))?;
    Ok(config)
}

/// A decimal unsigned integer; `_` separators are allowed (`1_000`).
pub fn parse_u64(s: &str) -> Option<u64> {
    let digits: String = s.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Parses `1s`, `1.5s`, `100ms`, `250us` (or `µs`), `10ns`, `1m`/`1min`,
/// `1h`, `1d`; a plain number is nanoseconds. Exact: no floating point.
pub fn parse_duration(s: &str) -> Result<u64, &'static str> {
    const BAD: &str = "is not a duration (examples: 1s, 1.5s, 100ms, 1m, 250us, 1500ns)";
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let scale: u128 = match unit.trim() {
        "" | "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return Err(BAD),
    };
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let whole = if whole.is_empty() && !frac.is_empty() {
        0
    } else {
        u128::from(parse_u64(whole).ok_or(BAD)?)
    };
    let mut ns = whole.checked_mul(scale).ok_or("is too long")?;
    if !frac.is_empty() {
        let f = parse_u64(frac).ok_or(BAD)?;
        let digits = u32::try_from(frac.chars().filter(|&c| c != '_').count()).map_err(|_| BAD)?;
        let denom = 10u128.checked_pow(digits).ok_or(BAD)?;
        let part = u128::from(f) * scale;
        if part % denom != 0 {
            return Err("is not a whole number of nanoseconds");
        }
        ns += part / denom;
    }
    u64::try_from(ns).map_err(|_| "is too long")
}

/// A duration in the largest unit that shows it exactly (or to 3 decimals).
pub fn format_duration(ns: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "µs"),
    ];
    if ns == 0 {
        return "0s".to_string();
    }
    for (scale, unit) in UNITS {
        if ns >= scale {
            if ns % scale == 0 {
                return format!("{}{unit}", ns / scale);
            }
            let x = ns as f64 / scale as f64;
            let s = format!("{x:.3}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            return format!("{s}{unit}");
        }
    }
    format!("{ns}ns")
}

/// The configuration in words, for titles and headers.
pub fn describe(config: &Config) -> String {
    let mut s = format!(
        "{}, limit {} per {}",
        config.algorithm,
        config.limit,
        format_duration(config.period_ns)
    );
    if config.algorithm.has_burst() {
        let burst = if config.burst == 0 {
            config.limit
        } else {
            config.burst
        };
        let _ = write!(s, ", burst {burst}");
    }
    if config.algorithm == Algorithm::BucketedWindow {
        let _ = write!(s, ", {} sub-windows", config.sub_windows);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_exactly() {
        assert_eq!(parse_duration("1s"), Ok(1_000_000_000));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration("100ms"), Ok(100_000_000));
        assert_eq!(parse_duration("1m"), Ok(60_000_000_000));
        assert_eq!(parse_duration("250us"), Ok(250_000));
        assert_eq!(parse_duration("250µs"), Ok(250_000));
        assert_eq!(parse_duration("1500"), Ok(1500));
        assert_eq!(parse_duration("1500ns"), Ok(1500));
        assert!(parse_duration("1.0000000001s").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("1 parsec").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999d").is_err());
    }

    #[test]
    fn help_wraps_at_spaces_with_a_hanging_indent() {
        assert_eq!(wrap("aa bb cc", 5, 0), "aa bb\ncc");
        assert_eq!(wrap("aa bb cc", 7, 2), "aa bb\n  cc");
        assert_eq!(wrap("unbreakable", 4, 0), "unbreakable");
    }

    #[test]
    fn durations_format_back() {
        for s in ["1s", "1.5s", "100ms", "1m", "250µs", "1500ns", "2h", "366d"] {
            let ns = parse_duration(s).unwrap();
            assert_eq!(parse_duration(&format_duration(ns)), Ok(ns), "{s}");
        }
        assert_eq!(format_duration(1_000_000_000), "1s");
        assert_eq!(format_duration(1_500_000), "1.5ms");
    }
}

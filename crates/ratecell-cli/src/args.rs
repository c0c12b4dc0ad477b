//! Command-line options: the value parsers every command shares (numbers,
//! durations, algorithm names), the policy options of `simulate` and
//! `replay`, the error type whose message names the option and its valid
//! range, and the translation of clap's errors into those messages.
//!
//! Range checks on configuration fields are not repeated here: the values go
//! into a [`Config`] and the library's own [`ConfigError`] message is shown,
//! prefixed with the option that carried the field.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use ratecell::{Algorithm, Clock, Config, ConfigError, Error, Field, Limiter, Overflow};
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
    pub help_for: Option<String>,
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

    /// A bad option of `command`: exit code 2, pointing at its help.
    pub fn option(command: &str, message: impl Into<String>) -> CliError {
        CliError {
            code: 2,
            message: message.into(),
            help_for: Some(command.to_string()),
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

/// The commands, in the order `--help` lists them.
pub const COMMANDS: [&str; 5] = ["demo", "compare", "simulate", "replay", "completions"];

/// clap's refusal as one line that names the option and what was wrong,
/// in the words the rest of the command uses. `command` is the subcommand
/// being parsed, if any (its `--help` is pointed at).
pub fn from_clap(e: &clap::Error, command: Option<&str>) -> CliError {
    let text = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    let strings = |kind| match e.get(kind) {
        Some(ContextValue::Strings(v)) => v.clone(),
        Some(ContextValue::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    // "--limit <N>" names the option "--limit" and its value "N".
    let arg = text(ContextKind::InvalidArg).unwrap_or_default();
    let (name, placeholder) = arg.split_once(' ').unwrap_or((arg.as_str(), ""));
    let placeholder = placeholder.trim_matches(['<', '>']);
    let value = text(ContextKind::InvalidValue).unwrap_or_default();
    let message = match e.kind() {
        ErrorKind::ValueValidation => {
            let why = std::error::Error::source(e)
                .map(ToString::to_string)
                .unwrap_or_else(|| format!("{value:?} is not valid"));
            format!("{name}: {why}")
        }
        ErrorKind::InvalidValue if value.is_empty() => {
            format!("option {name} needs a value ({placeholder})")
        }
        ErrorKind::InvalidValue => format!(
            "{name}: {value:?} is not one of {}",
            strings(ContextKind::ValidValue).join(", ")
        ),
        ErrorKind::UnknownArgument if arg.starts_with('-') => {
            let mut m = format!("unknown option '{arg}'");
            if let Some(similar) = text(ContextKind::SuggestedArg) {
                let _ = write!(m, " (did you mean '{similar}'?)");
            }
            m
        }
        ErrorKind::UnknownArgument => format!("unexpected argument {arg:?}"),
        ErrorKind::InvalidSubcommand => {
            let sub = text(ContextKind::InvalidSubcommand).unwrap_or_default();
            return CliError::usage(format!(
                "unknown command {sub:?}; the commands are {} (see `ratecell --help`)",
                COMMANDS.join(", ")
            ));
        }
        ErrorKind::MissingRequiredArgument => match name {
            "<FILE>" => "missing the trace FILE to replay".to_string(),
            "<SHELL>" => format!(
                "missing the SHELL to complete for (one of {})",
                shells().join(", ")
            ),
            _ => format!("missing {arg}"),
        },
        ErrorKind::ArgumentConflict => {
            let prior = text(ContextKind::PriorArg).unwrap_or_default();
            match text(ContextKind::InvalidSubcommand) {
                // The demo's options come after the command, not before it.
                Some(sub) => format!(
                    "{prior} is the demo's option; it cannot come before the command {sub:?}"
                ),
                None => format!("{name} cannot be used with {prior}"),
            }
        }
        ErrorKind::TooManyValues => format!("option {name} takes no value (got {value:?})"),
        // Anything else: clap's own first line, without its "error: ".
        _ => {
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or("bad arguments");
            first.trim_start_matches("error: ").to_string()
        }
    };
    CliError {
        code: 2,
        message,
        help_for: command.map(str::to_string),
    }
}

/// The shells `completions` writes for.
pub fn shells() -> Vec<String> {
    use clap::ValueEnum;
    clap_complete::Shell::value_variants()
        .iter()
        .filter_map(|s| s.to_possible_value())
        .map(|v| v.get_name().to_string())
        .collect()
}

/// A decimal unsigned integer; `_` separators are allowed (`1_000`).
pub fn parse_u64(s: &str) -> Option<u64> {
    let digits: String = s.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// clap's value parser for an unsigned integer.
pub fn u64_arg(s: &str) -> Result<u64, String> {
    parse_u64(s).ok_or_else(|| format!("{s:?} is not an unsigned integer"))
}

/// clap's value parser for an unsigned integer in `lo..=hi`.
pub fn u64_in(lo: u64, hi: u64) -> impl Fn(&str) -> Result<u64, String> + Clone {
    move |s| {
        let v = u64_arg(s)?;
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(format!("{v} is outside {lo}..={hi}"))
        }
    }
}

/// clap's value parser for a duration (see [`parse_duration`]).
pub fn duration_arg(s: &str) -> Result<u64, String> {
    parse_duration(s).map_err(|why| format!("{s:?} {why}"))
}

/// clap's value parser for a positive, finite rate of at most 10^9.
pub fn rate_arg(s: &str) -> Result<f64, String> {
    const MAX: f64 = 1e9;
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= MAX => Ok(x),
        Ok(_) => Err(format!(
            "{s} is outside the valid range (more than 0, at most {MAX})"
        )),
        Err(_) => Err(format!("{s:?} is not a number")),
    }
}

/// An algorithm's name as a person types it: any case, `-` or `_`
/// between the words (`Leaky-Bucket` is `leaky_bucket`).
pub fn parse_algorithm(s: &str) -> Result<Algorithm, String> {
    Algorithm::from_name(&s.to_ascii_lowercase().replace('-', "_")).ok_or_else(|| {
        let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
        format!("{s:?} is not one of {}", names.join(", "))
    })
}

/// clap's parser for `--algorithm`: [`parse_algorithm`], with the names
/// listed for help and shell completion.
#[derive(Clone, Copy)]
pub struct AlgorithmParser;

impl clap::builder::TypedValueParser for AlgorithmParser {
    type Value = Algorithm;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Algorithm, clap::Error> {
        // A plain function parser attaches the option and the value to the
        // error, which `from_clap` reads.
        let parse: fn(&str) -> Result<Algorithm, String> = parse_algorithm;
        parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            Algorithm::ALL
                .iter()
                .map(|a| clap::builder::PossibleValue::new(a.name())),
        ))
    }
}

/// The options that describe a policy, shared by `simulate` and `replay`.
#[derive(clap::Args, Clone, Debug)]
pub struct PolicyArgs {
    /// The algorithm (any case; - and _ alike)
    #[arg(long, value_name = "NAME", default_value = "gcra", value_parser = AlgorithmParser, hide_possible_values = false)]
    pub algorithm: Algorithm,
    /// Units admitted per period, 1..=4294967295
    #[arg(long, value_name = "N", default_value = "10", value_parser = u64_arg)]
    pub limit: u64,
    /// The period: 1s, 100ms, 1m, 250us, or plain ns; 1µs..=366 days
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration_arg)]
    pub period: u64,
    /// Units admitted at once from a fresh state (gcra, leaky_bucket, token_bucket); 0 = limit
    #[arg(long, value_name = "N", default_value = "0", value_parser = u64_arg)]
    pub burst: u64,
    /// bucketed_window only: sub-windows per period, 1..=64, dividing the period [default: 10 if it divides]
    #[arg(long = "sub-windows", value_name = "N", value_parser = sub_windows_arg)]
    pub sub_windows: Option<u32>,
    /// Another limit, checked together with the first (the options above): a request is
    /// admitted only if every limit admits it. Repeat for more, up to 7:
    /// algorithm=NAME,limit=N,period=DURATION[,burst=N][,sub-windows=N]
    #[arg(long, value_name = "LIMIT", value_parser = limit_spec_arg, action = clap::ArgAction::Append)]
    pub also: Vec<LimitSpec>,
}

/// One more limit (`--also`), in the words of the options that give the
/// first: `algorithm=fixed_window,limit=1000,period=1d`, plus `burst=N` and
/// `sub-windows=N` where they apply.
#[derive(Clone, Copy, Debug)]
pub struct LimitSpec {
    algorithm: Algorithm,
    limit: u64,
    period: u64,
    burst: u64,
    sub_windows: Option<u32>,
}

/// The fields of a `--also` limit, in the order its help lists them.
const SPEC_FIELDS: &str = "algorithm, limit, period, burst, sub-windows";

/// clap's parser for `--also`: every error names the field.
pub fn limit_spec_arg(s: &str) -> Result<LimitSpec, String> {
    let (mut algorithm, mut limit, mut period, mut burst, mut sub_windows) =
        (None, None, None, None, None);
    for part in s.split(',').map(str::trim) {
        let Some((name, value)) = part.split_once('=') else {
            return Err(format!(
                "{part:?} is not field=value (the fields are {SPEC_FIELDS}; e.g. \
                 algorithm=fixed_window,limit=1000,period=1d)"
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        let field = |why: String| format!("field '{name}': {why}");
        let seen = match name {
            "algorithm" => algorithm
                .replace(parse_algorithm(value).map_err(field)?)
                .is_some(),
            "limit" => limit.replace(u64_arg(value).map_err(field)?).is_some(),
            "period" => period
                .replace(duration_arg(value).map_err(field)?)
                .is_some(),
            "burst" => burst.replace(u64_arg(value).map_err(field)?).is_some(),
            "sub-windows" | "sub_windows" => sub_windows
                .replace(sub_windows_arg(value).map_err(field)?)
                .is_some(),
            _ => {
                return Err(format!("field {name:?} is not one of {SPEC_FIELDS}"));
            }
        };
        if seen {
            return Err(format!("field '{name}' is given twice"));
        }
    }
    let missing = |name: &str| format!("field '{name}' is missing (give {name}=...)");
    Ok(LimitSpec {
        algorithm: algorithm.ok_or_else(|| missing("algorithm"))?,
        limit: limit.ok_or_else(|| missing("limit"))?,
        period: period.ok_or_else(|| missing("period"))?,
        burst: burst.unwrap_or(0),
        sub_windows,
    })
}

fn sub_windows_arg(s: &str) -> Result<u32, String> {
    parse_u64(s)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("{s:?} is not an integer in 1..=64"))
}

/// `--overflow`: what a new key gets when the keyed table is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OverflowArg {
    /// Denied (the library's default)
    Deny,
    /// Admitted, untracked
    Allow,
    /// Admitted and tracked, in the place of the live state nearest to fresh
    Evict,
}

impl From<OverflowArg> for Overflow {
    fn from(o: OverflowArg) -> Overflow {
        match o {
            OverflowArg::Deny => Overflow::Deny,
            OverflowArg::Allow => Overflow::Allow,
            OverflowArg::Evict => Overflow::Evict,
        }
    }
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
        Field::Limits => "--also",
        // A field the command has no option for (Field is non-exhaustive).
        _ => "the policy",
    }
}

/// The `--also` field that carries each configuration field.
fn spec_field_for(field: Field) -> &'static str {
    match field {
        Field::Algorithm => "algorithm",
        Field::Limit => "limit",
        Field::PeriodNs => "period",
        Field::Burst => "burst",
        Field::SubWindows => "sub-windows",
        Field::Capacity => "capacity",
        Field::Overflow => "overflow",
        Field::Limits => "limits",
        _ => "the limit",
    }
}

/// The library's refusal, shown against the option that carried the field.
pub fn config_error(command: &str, e: Error) -> CliError {
    refusal(command, e, |field| option_for(field).to_owned())
}

/// The library's refusal, shown against the name `field_name` gives its
/// field.
fn refusal(command: &str, e: Error, field_name: impl Fn(Field) -> String) -> CliError {
    match e {
        Error::Config(ConfigError { field, message }) => {
            CliError::option(command, format!("{}: {message}", field_name(field)))
        }
        other => CliError::io(other.to_string()),
    }
}

/// A limit's configuration as the library accepts it: built from its
/// parts and validated by the library (a direct limiter is built and
/// dropped). `field_name` says where each field came from (an option, or a
/// field of an `--also`), so that every refusal names it.
fn validated_config(
    command: &str,
    (algorithm, limit, period, burst, sub_windows): (Algorithm, u64, u64, u64, Option<u32>),
    field_name: impl Fn(Field) -> String,
) -> Result<Config, CliError> {
    let mut config = Config::new(algorithm, limit, period).burst(burst);
    if let Some(n) = sub_windows {
        if algorithm != Algorithm::BucketedWindow {
            return Err(CliError::option(
                command,
                format!(
                    "{}: applies only to bucketed_window, not {algorithm}",
                    field_name(Field::SubWindows)
                ),
            ));
        }
        config = config.sub_windows(n);
    }
    let (clock, _) = Clock::manual(0);
    crate::engine::fresh(Limiter::builder().limit(config).clock(clock).build())
        .map_err(|e| refusal(command, e, &field_name))?;
    Ok(config)
}

impl PolicyArgs {
    /// The policy's first limit as a configuration the library accepts;
    /// errors name the option.
    pub fn config(&self, command: &str) -> Result<Config, CliError> {
        validated_config(
            command,
            (
                self.algorithm,
                self.limit,
                self.period,
                self.burst,
                self.sub_windows,
            ),
            |field| option_for(field).to_owned(),
        )
    }

    /// Every limit of the policy: the first (the options), then each
    /// `--also` in order, each validated by the library (errors name the
    /// `--also` by its place and its field).
    pub fn configs(&self, command: &str) -> Result<Vec<Config>, CliError> {
        let mut configs = vec![self.config(command)?];
        if self.also.len() >= ratecell::MAX_LIMITS {
            return Err(CliError::option(
                command,
                format!(
                    "--also: {} given; at most {} (a policy checks up to {} limits together)",
                    self.also.len(),
                    ratecell::MAX_LIMITS - 1,
                    ratecell::MAX_LIMITS
                ),
            ));
        }
        for (i, spec) in self.also.iter().enumerate() {
            let which = format!("--also #{} (limit {})", i + 1, i + 2);
            configs.push(spec.config(command, &which)?);
        }
        Ok(configs)
    }
}

impl LimitSpec {
    /// The limit as a configuration the library accepts; errors name
    /// `which` and the field.
    pub fn config(&self, command: &str, which: &str) -> Result<Config, CliError> {
        validated_config(
            command,
            (
                self.algorithm,
                self.limit,
                self.period,
                self.burst,
                self.sub_windows,
            ),
            |field| format!("{which}: field '{}'", spec_field_for(field)),
        )
    }
}

/// Parses a duration as SPEC §2 writes it (`1s`, `1.5s`, `100ms`,
/// `250us`, `1m`): the library's grammar, the one the Redis module and the
/// bindings read too.
pub fn parse_duration(s: &str) -> Result<u64, ratecell::DurationError> {
    ratecell::parse_duration(s)
}

/// A duration in the largest unit that shows it exactly with at most
/// three decimals and fewer than a thousand whole units (`1.5ms`, `65s`,
/// never a rounded `1.083m`), so a period prints as it parses back; a
/// duration no unit shows so (a trace's span) is rounded to three decimals
/// of the largest unit (`1157.481d`).
pub fn format_duration(ns: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
    ];
    if ns == 0 {
        return "0s".to_string();
    }
    let exact = UNITS.iter().find(|&&(scale, _)| {
        let whole = ns / scale;
        whole >= 1 && (whole < 1_000 || scale == UNITS[0].0) && ns % (scale / 1_000) == 0
    });
    if let Some(&(scale, unit)) = exact {
        let (whole, rest) = (ns / scale, (ns % scale) / (scale / 1_000));
        return if rest == 0 {
            format!("{whole}{unit}")
        } else {
            let decimals = format!("{rest:03}");
            format!("{whole}.{}{unit}", decimals.trim_end_matches('0'))
        };
    }
    match UNITS.iter().find(|&&(scale, _)| ns >= scale) {
        Some(&(scale, unit)) => {
            let s = format!("{:.3}", ns as f64 / scale as f64);
            format!("{}{unit}", s.trim_end_matches('0').trim_end_matches('.'))
        }
        None => format!("{ns}ns"),
    }
}

/// A number without trailing zeros: `decimals` places at 1 and above, and
/// three significant digits below 1, so a small rate never shows as 0.
pub fn short_number(x: f64, decimals: usize) -> String {
    let a = x.abs();
    let places = if a > 0.0 && a < 1.0 {
        (2 - a.log10().floor() as i64).clamp(0, 12) as usize
    } else {
        decimals
    };
    let s = format!("{x:.places$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `1 key`, `2 keys`: a count and its noun, singular for one.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Several limits in words: each as [`describe`] says it, joined by "and".
pub fn describe_all(configs: &[Config]) -> String {
    configs
        .iter()
        .map(describe)
        .collect::<Vec<_>>()
        .join("; and ")
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
    fn durations_format_back() {
        for s in [
            "1s", "1.5s", "100ms", "1m", "250us", "1500ns", "2h", "366d", "65s", "1.001s",
        ] {
            let ns = parse_duration(s).unwrap();
            assert_eq!(parse_duration(&format_duration(ns)), Ok(ns), "{s}");
        }
        assert_eq!(format_duration(1_000_000_000), "1s");
        assert_eq!(format_duration(1_500_000), "1.5ms");
        assert_eq!(format_duration(65_000_000_000), "65s");
        assert_eq!(format_duration(1_234_567), "1.235ms");
    }

    #[test]
    fn algorithm_names_ignore_case_and_separator() {
        for s in [
            "leaky_bucket",
            "Leaky-Bucket",
            "LEAKY_BUCKET",
            "leaky-bucket",
        ] {
            assert_eq!(parse_algorithm(s), Ok(Algorithm::LeakyBucket), "{s}");
        }
        assert_eq!(parse_algorithm("GCRA"), Ok(Algorithm::Gcra));
        let err = parse_algorithm("leakybucket").unwrap_err();
        assert!(err.contains("is not one of gcra, leaky_bucket"), "{err}");
    }

    #[test]
    fn short_numbers_keep_small_values() {
        assert_eq!(short_number(2.5, 3), "2.5");
        assert_eq!(short_number(20.0, 3), "20");
        assert_eq!(short_number(0.0001, 3), "0.0001");
        assert_eq!(short_number(0.000_123_4, 3), "0.000123");
        assert_eq!(short_number(0.0, 3), "0");
        assert_eq!(short_number(1234.5678, 2), "1234.57");
    }

    #[test]
    fn limit_specs_name_the_bad_field() {
        let spec = limit_spec_arg("algorithm=Fixed-Window, limit=1_000 ,period=1d").unwrap();
        assert_eq!(
            (spec.algorithm, spec.limit, spec.period, spec.burst),
            (Algorithm::FixedWindow, 1000, 86_400_000_000_000, 0)
        );
        let spec =
            limit_spec_arg("algorithm=bucketed_window,limit=5,period=1s,sub-windows=4").unwrap();
        assert_eq!(spec.sub_windows, Some(4));
        for (bad, says) in [
            (
                "algorithm=magic,limit=1,period=1s",
                "field 'algorithm': \"magic\"",
            ),
            (
                "algorithm=gcra,limit=x,period=1s",
                "field 'limit': \"x\" is not",
            ),
            (
                "algorithm=gcra,limit=1,period=soon",
                "field 'period': \"soon\"",
            ),
            ("algorithm=gcra,limit=1,period=1s,burst=-1", "field 'burst'"),
            ("algorithm=gcra,limit=1", "field 'period' is missing"),
            ("limit=1,period=1s", "field 'algorithm' is missing"),
            (
                "algorithm=gcra,limit=1,limit=2,period=1s",
                "field 'limit' is given twice",
            ),
            (
                "algorithm=gcra,limit=1,period=1s,rate=5",
                "field \"rate\" is not one of",
            ),
            ("gcra", "\"gcra\" is not field=value"),
        ] {
            let err = limit_spec_arg(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1, "key"), "1 key");
        assert_eq!(count(0, "key"), "0 keys");
        assert_eq!(count(2, "key"), "2 keys");
    }
}

//! The one way ratecell's text forms write a period or a duration
//! ([SPEC §2](crate::spec#2-configuration)): the command's options, the
//! Redis module's `period` argument, and any binding's string form parse
//! with [`parse_duration`].

use std::fmt;

/// Why a text is not a duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationError {
    /// Not `<number><unit>` (the message gives examples).
    NotADuration,
    /// A number with no unit.
    NoUnit,
    /// A fraction that is not a whole number of nanoseconds.
    NotWholeNanoseconds,
    /// More nanoseconds than 64 bits hold.
    TooLong,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DurationError::NotADuration => {
                "is not a duration: a number and a unit, ns, us (or µs), ms, s, m (or min), h or d (1s, 1.5s, 250ms)"
            }
            DurationError::NoUnit => {
                "has no unit: add ns, us (or µs), ms, s, m (or min), h or d (5s, not 5)"
            }
            DurationError::NotWholeNanoseconds => "is not a whole number of nanoseconds",
            DurationError::TooLong => "is longer than 2^64 - 1 nanoseconds",
        })
    }
}

impl std::error::Error for DurationError {}

/// Parses `<digits>[.<digits>]<unit>` into nanoseconds, exactly (no
/// floating point): units `ns`, `us` or `µs`, `ms`, `s`, `m` or `min`, `h`,
/// `d`, in lower case; no sign, no spaces. `1.5s` is 1 500 000 000; `1.5ns`
/// is refused. Whether the value is in range is the caller's question
/// (a period: [`MIN_PERIOD_NS`](crate::MIN_PERIOD_NS)..=[`MAX_PERIOD_NS`](crate::MAX_PERIOD_NS)).
///
/// ```
/// assert_eq!(ratecell::parse_duration("250ms"), Ok(250_000_000));
/// assert_eq!(ratecell::parse_duration("1.5m"), Ok(90_000_000_000));
/// assert!(ratecell::parse_duration("5").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<u64, DurationError> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u128 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        "" if !number.is_empty() => return Err(DurationError::NoUnit),
        _ => return Err(DurationError::NotADuration),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !(fraction.is_empty() || digits(fraction)) || number.ends_with('.') {
        return Err(DurationError::NotADuration);
    }
    let whole: u128 = whole.parse().map_err(|_| DurationError::TooLong)?;
    let mut ns = whole.checked_mul(scale).ok_or(DurationError::TooLong)?;
    if !fraction.is_empty() {
        // At most 19 digits matter: beyond them no unit leaves whole ns.
        let fraction = fraction.trim_end_matches('0');
        if fraction.len() > 19 {
            return Err(DurationError::NotWholeNanoseconds);
        }
        let denominator = 10u128.pow(fraction.len() as u32);
        let part = fraction.parse::<u128>().unwrap_or(0) * scale;
        if part % denominator != 0 {
            return Err(DurationError::NotWholeNanoseconds);
        }
        ns += part / denominator;
    }
    u64::try_from(ns).map_err(|_| DurationError::TooLong)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_exactly_in_every_unit() {
        let ok = [
            ("1ns", 1),
            ("1500ns", 1_500),
            ("250us", 250_000),
            ("250µs", 250_000),
            ("100ms", 100_000_000),
            ("1s", 1_000_000_000),
            ("1.5s", 1_500_000_000),
            ("0.25s", 250_000_000),
            ("1.50s", 1_500_000_000),
            ("1m", 60_000_000_000),
            ("2min", 120_000_000_000),
            ("1h", 3_600_000_000_000),
            ("366d", 366 * 86_400_000_000_000),
            ("0s", 0),
        ];
        for (text, ns) in ok {
            assert_eq!(parse_duration(text), Ok(ns), "{text}");
        }
        let bad = [
            ("5", DurationError::NoUnit),
            ("", DurationError::NotADuration),
            ("s", DurationError::NotADuration),
            ("1S", DurationError::NotADuration),
            ("1 s", DurationError::NotADuration),
            ("-1s", DurationError::NotADuration),
            ("1.s", DurationError::NotADuration),
            (".5s", DurationError::NotADuration),
            ("1.2.3s", DurationError::NotADuration),
            ("1_000s", DurationError::NotADuration),
            ("1.5ns", DurationError::NotWholeNanoseconds),
            ("1.0000000001s", DurationError::NotWholeNanoseconds),
            ("99999999999d", DurationError::TooLong),
            (
                "340282366920938463463374607431768211456s",
                DurationError::TooLong,
            ),
        ];
        for (text, e) in bad {
            assert_eq!(parse_duration(text), Err(e), "{text}");
        }
    }
}

//! The trace formats `replay` reads: CSV (`timestamp_ns,key[,cost[,tier]]`)
//! and web-server access logs (Common or Combined Log Format), a line at a
//! time with a bound on each line's length, each line parsed into a request
//! or an error naming its field.

use crate::args::{self, CliError};
use std::cell::Cell;
use std::io::Read;
use std::rc::Rc;

/// The longest line read: far above any trace or access-log line, and a
/// bound on the memory a file without newlines can take.
pub(super) const MAX_LINE_BYTES: usize = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Format {
    Csv,
    Clf,
}

impl Format {
    pub(super) fn name(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Clf => "clf",
        }
    }

    /// CLF lines have the time in brackets after the client and user
    /// fields; anything else is read as CSV.
    pub(super) fn detect(line: &[u8]) -> Format {
        let line = String::from_utf8_lossy(line);
        match (line.find(" ["), line.find(']')) {
            (Some(open), Some(close)) if open < close => Format::Clf,
            _ => Format::Csv,
        }
    }
}

/// The error [`LineLimit`] reads as: line `line` is too long.
#[derive(Debug)]
pub(super) struct LineTooLong {
    pub(super) line: u64,
}

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {} is longer than {MAX_LINE_BYTES} bytes",
            self.line
        )
    }
}

impl std::error::Error for LineTooLong {}

/// Counts bytes as they are read (for the progress bar), and fails the
/// read that would take a line past [`MAX_LINE_BYTES`]: the reader above
/// it grows its buffer to a whole line.
pub(super) struct LineLimit<R> {
    pub(super) inner: R,
    /// Newlines seen: the line a too-long line is reported as.
    pub(super) newlines: u64,
    /// Bytes since the last newline.
    pub(super) in_line: usize,
    /// Bytes read, shared with the progress bar.
    pub(super) bytes: Rc<Cell<u64>>,
}

impl<R: Read> Read for LineLimit<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &b in &buf[..n] {
            if b == b'\n' {
                self.newlines += 1;
                self.in_line = 0;
            } else {
                self.in_line += 1;
                if self.in_line > MAX_LINE_BYTES {
                    return Err(std::io::Error::other(LineTooLong {
                        line: self.newlines + 1,
                    }));
                }
            }
        }
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
}

/// Splits one line into CSV fields with the csv crate's parser (quotes,
/// doubled quotes inside them), trimmed of spaces around them. A line at
/// a time, so every error names its line exactly.
pub(super) struct CsvLine {
    pub(super) parser: csv_core::Reader,
    pub(super) line: Vec<u8>,
    pub(super) fields: Vec<u8>,
    pub(super) ends: Vec<usize>,
}

impl CsvLine {
    pub(super) fn new() -> CsvLine {
        CsvLine {
            parser: csv_core::Reader::new(),
            line: Vec::new(),
            fields: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// The fields of `text` (one line, without its newline).
    pub(super) fn split(&mut self, text: &[u8]) -> Result<Vec<&[u8]>, BadField> {
        self.line.clear();
        self.line.extend_from_slice(text);
        self.line.push(b'\n');
        // Fields are never longer than the line, nor more than its bytes.
        self.fields.resize(self.line.len(), 0);
        self.ends.resize(self.line.len() + 1, 0);
        self.parser.reset();
        let (result, _, _, n) =
            self.parser
                .read_record(&self.line, &mut self.fields, &mut self.ends);
        if !matches!(result, csv_core::ReadRecordResult::Record) {
            return Err(bad(
                "line",
                "has a quote that is not closed (a quoted key ends with a quote)".to_string(),
            ));
        }
        let mut start = 0;
        Ok(self.ends[..n]
            .iter()
            .map(|&end| {
                let field = self.fields[start..end].trim_ascii();
                start = end;
                field
            })
            .collect())
    }
}

/// The replay's failure for an error while reading `name`: a line too
/// long is bad input (exit 2), anything else the environment's (exit 1).
pub(super) fn read_error(name: &str, e: &std::io::Error) -> CliError {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<LineTooLong>())
    {
        Some(LineTooLong { line }) => CliError::usage(format!(
            "{name}:{line}: the line is longer than {} MiB; a trace has one request per line \
             (is this a trace?)",
            MAX_LINE_BYTES >> 20
        )),
        None => CliError::io(format!("cannot read {name}: {e}")),
    }
}

/// One request read from a line.
pub(super) struct Request<'a> {
    pub(super) t: u64,
    pub(super) key: &'a [u8],
    pub(super) cost: u64,
    pub(super) tier: usize,
}

/// Why a line could not be read: the field and what was wrong with it.
#[derive(Debug)]
pub(super) struct BadField {
    pub(super) field: &'static str,
    pub(super) problem: String,
}

pub(super) fn bad(field: &'static str, problem: String) -> BadField {
    BadField { field, problem }
}

pub(super) fn unsigned(field: &'static str, bytes: &[u8]) -> Result<u64, BadField> {
    let text = String::from_utf8_lossy(bytes);
    args::parse_u64(&text).ok_or_else(|| bad(field, format!("{text:?} is not an unsigned integer")))
}

/// One CSV line's fields (`timestamp_ns,key[,cost[,tier]]`, unquoted and
/// trimmed). Returns `None` for a header.
pub(super) fn parse_csv<'a>(
    record: &[&'a [u8]],
    first: bool,
) -> Result<Option<Request<'a>>, BadField> {
    const SHAPE: &str = "a line is timestamp_ns,key[,cost[,tier]]";
    let ts = record.first().copied().unwrap_or(b"");
    if first && ts.to_ascii_lowercase().starts_with(b"timestamp") {
        return Ok(None);
    }
    let t = unsigned("timestamp_ns", ts)?;
    let key = match record.get(1) {
        None => return Err(bad("key", format!("missing ({SHAPE})"))),
        Some(k) => *k,
    };
    if key.is_empty() {
        return Err(bad("key", "is empty".to_string()));
    }
    let cost = match record.get(2) {
        None => 1,
        Some(c) => unsigned("cost", c)?,
    };
    let tier = match record.get(3) {
        None => 0,
        Some(c) => usize::try_from(unsigned("tier", c)?).unwrap_or(usize::MAX),
    };
    if let Some(extra) = record.get(4) {
        return Err(bad(
            "tier",
            format!(
                "followed by {:?}: too many fields ({SHAPE}; quote a key that holds a comma)",
                String::from_utf8_lossy(extra)
            ),
        ));
    }
    Ok(Some(Request { t, key, cost, tier }))
}

/// `host ident user [dd/Mon/yyyy:hh:mm:ss +hhmm] "request" status bytes ...`
pub(super) fn parse_clf(line: &str) -> Result<Request<'_>, BadField> {
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
    let t = parse_clf_time(text).map_err(|why| bad("time", format!("\"[{text}]\" {why}")))?;
    Ok(Request {
        t,
        key: key.as_bytes(),
        cost: 1,
        tier: 0,
    })
}

/// `10/Oct/2000:13:55:36 -0700` as UNIX ns.
pub(super) fn parse_clf_time(s: &str) -> Result<u64, String> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    const SHAPE: &str = "is not a [dd/Mon/yyyy:hh:mm:ss +hhmm] time from 1970 on";
    let shape = || SHAPE.to_string();
    let (stamp, zone) = s.split_once(' ').ok_or_else(shape)?;
    let mut parts = stamp.splitn(3, '/');
    let day: i64 = parts
        .next()
        .and_then(|d| d.parse().ok())
        .ok_or_else(shape)?;
    let month_name = parts.next().ok_or_else(shape)?;
    let month = MONTHS
        .iter()
        .position(|m| *m == month_name)
        .ok_or_else(shape)? as i64
        + 1;
    let mut rest = parts.next().ok_or_else(shape)?.split(':');
    let year: i64 = rest.next().and_then(|y| y.parse().ok()).ok_or_else(shape)?;
    let hms: Vec<i64> = rest
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()
        .ok_or_else(shape)?;
    let [h, mi, sec] = hms[..] else {
        return Err(shape());
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=month_days).contains(&day)
        || !(0..24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0..=60).contains(&sec)
    {
        return Err(shape());
    }
    let offset = parse_zone(zone).ok_or_else(|| {
        format!(
            "has the time zone {zone:?}: expected +hhmm or -hhmm, at most 14 hours and 59 minutes"
        )
    })?;
    let secs = days_from_civil(year, month, day) * 86_400 + h * 3600 + mi * 60 + sec - offset;
    u64::try_from(secs)
        .ok()
        .and_then(|s| s.checked_mul(1_000_000_000))
        .ok_or_else(shape)
}

/// `+hhmm` or `-hhmm` as seconds east of UTC. Real offsets run from -1200
/// to +1400; anything past 14 hours, or 60 minutes and more, is refused.
pub(super) fn parse_zone(zone: &str) -> Option<i64> {
    let (sign, digits) = match zone.as_bytes().first()? {
        b'+' => (1, &zone[1..]),
        b'-' => (-1, &zone[1..]),
        _ => return None,
    };
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i64 = digits[..2].parse().ok()?;
    let minutes: i64 = digits[2..].parse().ok()?;
    if hours > 14 || minutes > 59 {
        return None;
    }
    Some(sign * (hours * 3600 + minutes * 60))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// algorithm).
pub(super) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clf_times_are_utc_nanoseconds() {
        // 2000-10-10 20:55:36 UTC.
        assert_eq!(
            parse_clf_time("10/Oct/2000:13:55:36 -0700"),
            Ok(971_211_336_000_000_000)
        );
        assert_eq!(parse_clf_time("01/Jan/1970:00:00:00 +0000"), Ok(0));
        assert_eq!(
            parse_clf_time("15/Nov/2023:01:00:00 +0100"),
            Ok(1_700_006_400_000_000_000)
        );
        assert_eq!(
            parse_clf_time("29/Feb/2024:12:00:00 +0000"),
            Ok(1_709_208_000_000_000_000)
        );
        assert_eq!(
            parse_clf_time("01/Jan/2024:12:00:00 +1400"),
            Ok(1_704_060_000_000_000_000)
        );
        for bad in [
            "01/Jan/1970:00:00:00 +0100",
            "10/Foo/2000:13:55:36 -0700",
            "31/Nov/2023:00:00:00 +0000",
            "29/Feb/2023:00:00:00 +0000",
            "10/Oct/2000:13:55:36",
            "10/Oct/2000:13:55:36 -9999",
            "10/Oct/2000:13:55:36 +0060",
            "10/Oct/2000:13:55:36 +1500",
            "10/Oct/2000:13:55:36 0700",
        ] {
            assert!(parse_clf_time(bad).is_err(), "{bad} was accepted");
        }
        let err = parse_clf_time("10/Oct/2000:13:55:36 -9999").unwrap_err();
        assert!(err.contains("time zone \"-9999\""), "{err}");
    }

    fn record<'a>(fields: &[&'a str]) -> Vec<&'a [u8]> {
        fields.iter().map(|f| f.as_bytes()).collect()
    }

    #[test]
    fn csv_lines_split_on_unquoted_commas() {
        let mut csv = CsvLine::new();
        let split = |csv: &mut CsvLine, line: &str| -> Vec<String> {
            csv.split(line.as_bytes())
                .unwrap()
                .iter()
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect()
        };
        assert_eq!(split(&mut csv, "5, alice ,3"), ["5", "alice", "3"]);
        assert_eq!(
            split(&mut csv, r#"5,"user, one",2"#),
            ["5", "user, one", "2"]
        );
        assert_eq!(split(&mut csv, r#"5,"say ""hi""""#), ["5", r#"say "hi""#]);
        assert_eq!(split(&mut csv, "5"), ["5"]);
        assert!(csv.split(br#"5,"open"#).is_err());
        assert_eq!(split(&mut csv, "6,after,1"), ["6", "after", "1"]);
    }

    #[test]
    fn csv_records_name_the_bad_field() {
        assert!(matches!(
            parse_csv(&record(&["timestamp_ns", "key", "cost"]), true),
            Ok(None)
        ));
        let r = record(&["5", "alice", "3"]);
        let r = parse_csv(&r, false).unwrap().unwrap();
        assert_eq!((r.t, r.key, r.cost), (5, &b"alice"[..], 3));
        let r = record(&["5", "user, one"]);
        let r = parse_csv(&r, false).unwrap().unwrap();
        assert_eq!((r.key, r.cost, r.tier), (&b"user, one"[..], 1, 0));
        let r = record(&["5", "alice", "1", "9"]);
        assert_eq!(parse_csv(&r, false).unwrap().unwrap().tier, 9);
        for (fields, field) in [
            (&["x", "alice", "1"][..], "timestamp_ns"),
            (&["5"][..], "key"),
            (&["5", "", "1"][..], "key"),
            (&["5", "alice", "abc"][..], "cost"),
            (&["5", "alice", "1", "x"][..], "tier"),
            (&["5", "alice", "1", "9", "9"][..], "tier"),
        ] {
            match parse_csv(&record(fields), false) {
                Err(e) => assert_eq!(e.field, field, "{fields:?}"),
                Ok(_) => panic!("{fields:?} was accepted"),
            }
        }
    }

    #[test]
    fn formats_are_told_apart() {
        assert_eq!(
            Format::detect(br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1"#),
            Format::Clf
        );
        assert_eq!(Format::detect(b"1700000000000000000,alice,1"), Format::Csv);
    }

    #[test]
    fn a_long_line_fails_the_read_that_makes_it_too_long() {
        let mut text = b"1,a\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_LINE_BYTES + 1));
        let mut r = LineLimit {
            inner: &text[..],
            newlines: 0,
            in_line: 0,
            bytes: Rc::default(),
        };
        let mut sink = Vec::new();
        let e = r.read_to_end(&mut sink).unwrap_err();
        let inner = e.get_ref().unwrap().downcast_ref::<LineTooLong>().unwrap();
        assert_eq!(inner.line, 2);
        assert!(
            sink.len() <= MAX_LINE_BYTES + 4 + 8192,
            "read {}",
            sink.len()
        );
    }
}

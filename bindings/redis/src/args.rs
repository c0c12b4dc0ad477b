//! Parsing of the commands' arguments into ratecell configurations, with
//! errors that name the argument and its valid range (SPEC.md §7).
//!
//! Nothing here touches Redis: the parser works on byte strings, so it is
//! tested without a server.

use ratecell::{
    Algorithm, Config, ConfigError, Field, MAX_PERIOD_NS, MAX_SUB_WINDOWS, MIN_PERIOD_NS,
    state::Rule,
};

/// The largest sliding-log limit the module accepts: its state keeps one
/// entry per admitted unit (16 bytes each), so 100 000 is 1.6 MB per key.
pub const MAX_SLIDING_LOG_LIMIT: u64 = 100_000;

/// One limit of a request: the key, the validated rule and the cost.
#[derive(Debug)]
pub struct Limit<'a> {
    /// The Redis key, as given.
    pub key: &'a [u8],
    /// The validated configuration.
    pub rule: Rule,
    /// `COST`, 1 by default; 0 is a peek.
    pub cost: u64,
}

/// A parsed `RATECELL.CHECK` or `RATECELL.CHECKALL`.
#[derive(Debug)]
pub struct Request<'a> {
    /// The limits, in the order given.
    pub limits: Vec<Limit<'a>>,
    /// `AT`: the request's time in UNIX ns, instead of the server's clock.
    pub at: Option<u64>,
}

/// The most bytes of an argument an error quotes.
const QUOTED: usize = 64;

/// An argument quoted in an error: printable ASCII as it is, every other
/// byte as `\xNN`, at most [`QUOTED`] bytes of it (then `...`). A reply
/// holds nothing a client sent that is not printable ASCII.
pub fn text(arg: &[u8]) -> String {
    let mut out = crate::reply::printable(&arg[..arg.len().min(QUOTED)]);
    if arg.len() > QUOTED {
        out.push_str("...");
    }
    out
}

/// Parses a decimal `u64` for the argument called `name`.
pub fn number(arg: &[u8], name: &str, range: &str) -> Result<u64, String> {
    std::str::from_utf8(arg)
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| {
            format!(
                "ERR {name} must be an integer in {range}, got '{}'",
                text(arg)
            )
        })
}

/// Parses a period in the library's grammar (SPEC.md §2: `250ms`, `1.5s`,
/// `1h`), from 1 µs to 366 days.
pub fn period(arg: &[u8]) -> Result<u64, String> {
    let bad = |why: String| format!("ERR period '{}' {why}", text(arg));
    let s = std::str::from_utf8(arg).map_err(|_| bad("is not a duration".into()))?;
    let ns = ratecell::parse_duration(s).map_err(|e| bad(e.to_string()))?;
    if !(MIN_PERIOD_NS..=MAX_PERIOD_NS).contains(&ns) {
        return Err(bad(format!("is outside 1us..=366d ({ns} ns)")));
    }
    Ok(ns)
}

/// Parses an algorithm name, case-insensitively (`-` may stand for `_`, as
/// the library accepts); compares in place, as it runs on every check.
pub fn algorithm(arg: &[u8]) -> Result<Algorithm, String> {
    let same = |name: &str| {
        name.len() == arg.len()
            && name
                .bytes()
                .zip(arg)
                .all(|(n, &a)| n == a.to_ascii_lowercase() || (n == b'_' && a == b'-'))
    };
    Algorithm::ALL
        .into_iter()
        .find(|a| same(a.name()))
        .ok_or_else(|| {
            format!(
                "ERR algorithm must be one of gcra, leaky_bucket, token_bucket, fixed_window, sliding_window, bucketed_window, sliding_log, got '{}'",
                text(arg)
            )
        })
}

/// Names a configuration error after the command's argument.
pub fn config_error(e: &ConfigError) -> String {
    let arg = match e.field {
        Field::Limit => "limit",
        Field::PeriodNs => "period",
        Field::Burst => "BURST",
        Field::SubWindows => "SUBWINDOWS",
        Field::Algorithm => "algorithm",
        // Fields the command has no argument for (Field is non-exhaustive).
        _ => "configuration",
    };
    format!("ERR {arg} is invalid: {}", e.message)
}

/// Builds a rule from the parsed pieces, with the module's own bound on the
/// sliding log's limit.
pub fn rule(config: Config) -> Result<Rule, String> {
    if config.algorithm == Algorithm::SlidingLog && config.limit > MAX_SLIDING_LOG_LIMIT {
        return Err(format!(
            "ERR limit must be in 1..={MAX_SLIDING_LOG_LIMIT} for sliding_log (its state keeps an entry per admitted unit), got {}",
            config.limit
        ));
    }
    Rule::new(&config).map_err(|e| config_error(&e))
}

/// Parses one limit, `<key> <algorithm> <limit> <period> [BURST <b>]
/// [SUBWINDOWS <n>] [COST <n>]`, from `args`; stops at the end or at a word
/// in `stop` (compared case-insensitively) where an option name would be.
/// `AT` is taken into `at` when `allow_at`.
fn limit<'a>(
    args: &mut std::iter::Peekable<std::slice::Iter<'_, &'a [u8]>>,
    stop: &[&str],
    at: &mut Option<u64>,
    allow_at: bool,
) -> Result<Limit<'a>, String> {
    let missing = |what: &str| format!("ERR missing argument: {what}");
    let key = *args.next().ok_or_else(|| missing("key"))?;
    let alg = algorithm(args.next().ok_or_else(|| missing("algorithm"))?)?;
    let limit = number(
        args.next().ok_or_else(|| missing("limit"))?,
        "limit",
        "1..=4294967295",
    )?;
    let period = period(args.next().ok_or_else(|| missing("period"))?)?;
    let mut config = Config::new(alg, limit, period);
    let mut cost = 1;
    let (mut seen_burst, mut seen_sub, mut seen_cost) = (false, false, false);
    while let Some(&&name) = args.peek() {
        // Compared in place: this runs on every check.
        if stop.iter().any(|s| name.eq_ignore_ascii_case(s.as_bytes())) {
            break;
        }
        args.next();
        let mut value = |opt: &str| {
            args.next()
                .copied()
                .ok_or_else(|| format!("ERR {opt} needs a value"))
        };
        let dup = |seen: &mut bool, opt: &str| {
            if std::mem::replace(seen, true) {
                Err(format!("ERR {opt} given twice"))
            } else {
                Ok(())
            }
        };
        let is = |opt: &str| name.eq_ignore_ascii_case(opt.as_bytes());
        match () {
            _ if is("BURST") => {
                dup(&mut seen_burst, "BURST")?;
                // 0 is "the limit", as in every other form (SPEC.md §2).
                let b = number(value("BURST")?, "BURST", "0..=4294967295")?;
                config = config.burst(b);
            }
            _ if is("SUBWINDOWS") => {
                dup(&mut seen_sub, "SUBWINDOWS")?;
                let range = format!("1..={MAX_SUB_WINDOWS}, dividing the period");
                let n = number(value("SUBWINDOWS")?, "SUBWINDOWS", &range)?;
                let n = u32::try_from(n)
                    .ok()
                    .filter(|n| (1..=MAX_SUB_WINDOWS).contains(n))
                    .ok_or_else(|| format!("ERR SUBWINDOWS must be in {range}, got {n}"))?;
                if alg != Algorithm::BucketedWindow {
                    return Err(format!(
                        "ERR SUBWINDOWS applies to bucketed_window only, not {alg}"
                    ));
                }
                config = config.sub_windows(n);
            }
            _ if is("COST") => {
                dup(&mut seen_cost, "COST")?;
                cost = number(value("COST")?, "COST", "0..=2^64-1")?;
            }
            _ if allow_at && is("AT") => {
                if at.is_some() {
                    return Err("ERR AT given twice".into());
                }
                *at = Some(number(value("AT")?, "AT", "0..=2^64-1 (UNIX ns)")?);
            }
            _ if is("AT") => {
                return Err("ERR AT must come first, before the first LIMIT".into());
            }
            _ => {
                let expected = if allow_at {
                    "BURST, SUBWINDOWS, COST or AT"
                } else {
                    "BURST, SUBWINDOWS, COST or LIMIT"
                };
                return Err(format!(
                    "ERR unknown option '{}' (expected {expected})",
                    text(name)
                ));
            }
        }
    }
    Ok(Limit {
        key,
        rule: rule(config)?,
        cost,
    })
}

/// `RATECELL.CHECK <key> <algorithm> <limit> <period> [BURST <b>]
/// [SUBWINDOWS <n>] [COST <n>] [AT <now_ns>]` (arguments after the command
/// name).
pub fn check<'a>(args: &[&'a [u8]]) -> Result<Request<'a>, String> {
    let (limit, at) = check_single(args)?;
    Ok(Request {
        limits: vec![limit],
        at,
    })
}

/// [`check`] without the request's vector: the limit and `AT`, for the
/// one-limit command's hot path.
pub fn check_single<'a>(args: &[&'a [u8]]) -> Result<(Limit<'a>, Option<u64>), String> {
    let mut at = None;
    let mut it = args.iter().peekable();
    let limit = limit(&mut it, &[], &mut at, true)?;
    Ok((limit, at))
}

/// A parsed `RATECELL.LEASE` (SPEC.md §8).
#[derive(Debug)]
pub struct Lease<'a> {
    /// The key and its rule (the cost is unused).
    pub limit: Limit<'a>,
    /// `WANT`: the most units asked for, at least 1.
    pub want: u64,
    /// `EXPIRE`: how long a GCRA grant's units last, in ns (`None`: the
    /// default, a tenth of the period); clamped to one emission interval
    /// ..= the period.
    pub expire_ns: Option<u64>,
    /// `AT`: the request's time in UNIX ns, instead of the server's clock.
    pub at: Option<u64>,
    /// `DATED`: the time of the check waiting on the grant (UNIX ns): the
    /// grant is decided then, the key's expiry still kept on the server's
    /// clock.
    pub dated: Option<u64>,
    /// `CHARGE <at_ns> <units>`, at most [`MAX_CHARGES`]: units the node
    /// admitted on its own, added to the key's state before the grant.
    pub charges: Vec<ratecell::lease::Charge>,
}

/// The most `CHARGE`s one `RATECELL.LEASE` carries (a node's debt is at
/// most two: a sliding window's two windows).
pub const MAX_CHARGES: usize = 2;

/// `RATECELL.LEASE <key> <algorithm> <limit> <period> [BURST <b>]
/// [SUBWINDOWS <n>] WANT <w> [EXPIRE <duration>] [AT <now_ns> | DATED
/// <ns>] [CHARGE <at_ns> <units>]...`.
pub fn lease<'a>(args: &[&'a [u8]]) -> Result<Lease<'a>, String> {
    // Options come in name/value pairs after the four positional words.
    if args
        .iter()
        .skip(4)
        .step_by(2)
        .any(|w| w.eq_ignore_ascii_case(b"COST"))
    {
        return Err("ERR COST is not an option of RATECELL.LEASE: WANT says how many units".into());
    }
    let mut at = None;
    let mut it = args.iter().peekable();
    let limit = limit(&mut it, &["WANT", "EXPIRE"], &mut at, true)?;
    let (mut want, mut expire_ns, mut charges, mut dated) = (None, None, Vec::new(), None);
    while let Some(&name) = it.next() {
        let value = *it
            .next()
            .ok_or_else(|| format!("ERR {} needs a value", text(name)))?;
        if name.eq_ignore_ascii_case(b"CHARGE") {
            if charges.len() == MAX_CHARGES {
                return Err(format!("ERR at most {MAX_CHARGES} CHARGEs"));
            }
            let units = it.next().ok_or("ERR CHARGE needs <at_ns> <units>")?;
            let range = "0..=4294967295";
            let units = number(units, "CHARGE's units", range)?;
            if units > ratecell::MAX_LIMIT {
                return Err(format!(
                    "ERR CHARGE's units must be in {range}, got {units}"
                ));
            }
            charges.push(ratecell::lease::Charge {
                at_ns: number(value, "CHARGE's at_ns", "0..=2^64-1 (UNIX ns)")?,
                units,
            });
        } else if name.eq_ignore_ascii_case(b"WANT") && want.is_none() {
            let w = number(value, "WANT", "1..=4294967295")?;
            if !(1..=ratecell::MAX_LIMIT).contains(&w) {
                return Err(format!("ERR WANT must be in 1..=4294967295, got {w}"));
            }
            want = Some(w);
        } else if name.eq_ignore_ascii_case(b"EXPIRE") && expire_ns.is_none() {
            let bad = |why: String| format!("ERR EXPIRE '{}' {why}", text(value));
            let s = std::str::from_utf8(value).map_err(|_| bad("is not a duration".into()))?;
            expire_ns = Some(ratecell::parse_duration(s).map_err(|e| bad(e.to_string()))?);
        } else if name.eq_ignore_ascii_case(b"AT") && at.is_none() {
            at = Some(number(value, "AT", "0..=2^64-1 (UNIX ns)")?);
        } else if name.eq_ignore_ascii_case(b"DATED") && dated.is_none() {
            dated = Some(number(value, "DATED", "0..=2^64-1 (UNIX ns)")?);
        } else {
            return Err(format!(
                "ERR unknown or repeated option '{}' (expected WANT, EXPIRE, AT, DATED or CHARGE)",
                text(name)
            ));
        }
    }
    let want = want.ok_or("ERR missing argument: WANT <units>")?;
    if at.is_some() && dated.is_some() {
        return Err(
            "ERR AT and DATED together: AT decides on the client's timeline, DATED on the server's"
                .into(),
        );
    }
    Ok(Lease {
        limit,
        want,
        expire_ns,
        at,
        dated,
        charges,
    })
}

/// `RATECELL.CHECKALL [AT <now_ns>] LIMIT <key> <algorithm> <limit>
/// <period> [BURST <b>] [SUBWINDOWS <n>] [COST <n>] [LIMIT ...]...`
pub fn check_all<'a>(args: &[&'a [u8]]) -> Result<Request<'a>, String> {
    let mut at = None;
    let mut it = args.iter().peekable();
    let mut limits = Vec::new();
    while let Some(word) = it.next() {
        match String::from_utf8_lossy(word).to_ascii_uppercase().as_str() {
            "AT" if limits.is_empty() && at.is_none() => {
                let v = it.next().ok_or("ERR AT needs a value")?;
                at = Some(number(v, "AT", "0..=2^64-1 (UNIX ns)")?);
            }
            "LIMIT" => limits.push(limit(&mut it, &["LIMIT"], &mut at, false)?),
            _ => {
                return Err(format!(
                    "ERR expected LIMIT <key> <algorithm> <limit> <period> [options] (AT only first), got '{}'",
                    text(word)
                ));
            }
        }
    }
    if limits.is_empty() {
        return Err("ERR missing argument: LIMIT <key> <algorithm> <limit> <period>".into());
    }
    Ok(Request { limits, at })
}

/// The positions (1-based, counting the command name as 0) of the keys of a
/// `RATECELL.CHECKALL`: the word after each `LIMIT` that starts a limit.
/// Parses as [`check_all`] does, but never fails: a malformed call gets the
/// keys found so far, and its own error when it runs.
pub fn check_all_key_positions(args: &[&[u8]]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let word = String::from_utf8_lossy(args[i]).to_ascii_uppercase();
        match word.as_str() {
            "AT" if out.is_empty() => i += 2,
            "LIMIT" if i + 1 < args.len() => {
                out.push(i + 2);
                // key, algorithm, limit, period, then name/value pairs.
                i += 5;
                while i < args.len() && !args[i].eq_ignore_ascii_case(b"LIMIT") {
                    i += 2;
                }
            }
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&[u8]> {
        s.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn periods_take_every_unit_and_nothing_else() {
        assert_eq!(period(b"250ms").unwrap(), 250_000_000);
        assert_eq!(period(b"1us").unwrap(), 1_000);
        assert_eq!(period(b"2d").unwrap(), 2 * 86_400_000_000_000);
        assert_eq!(period(b"1.5s").unwrap(), 1_500_000_000);
        assert_eq!(period(b"250\xc2\xb5s").unwrap(), 250_000);
        for bad in ["", "1", "ms", "-1s", "1S", "0s", "999ns", "367d", "1 s"] {
            assert!(
                period(bad.as_bytes()).unwrap_err().contains("period"),
                "{bad}"
            );
        }
    }

    #[test]
    fn check_parses_every_option() {
        let r = check(&words("k GCRA 10 1s BURST 3 COST 2 AT 5")).unwrap();
        assert_eq!(r.at, Some(5));
        assert_eq!(r.limits[0].cost, 2);
        assert_eq!(r.limits[0].rule.config().burst, 3);
        assert_eq!(algorithm(b"Sliding-Window"), Ok(Algorithm::SlidingWindow));
        assert!(algorithm(b"gcra2").is_err());
        let r = check(&words("k bucketed_window 10 1s SUBWINDOWS 4")).unwrap();
        assert_eq!(r.limits[0].rule.config().sub_windows, 4);
    }

    #[test]
    fn errors_name_the_argument() {
        let cases = [
            ("k gcra 0 1s", "limit"),
            ("k gcra x 1s", "limit"),
            ("k nope 1 1s", "algorithm"),
            ("k gcra 1 1x", "period"),
            ("k gcra 1 1s BURST x", "BURST"),
            ("k gcra 1 1s BURST", "BURST"),
            ("k bucketed_window 1 1s SUBWINDOWS 7", "SUBWINDOWS"),
            ("k bucketed_window 1 1s SUBWINDOWS 65", "SUBWINDOWS"),
            ("k gcra 1 1s SUBWINDOWS 2", "SUBWINDOWS"),
            ("k gcra 1 1s COST -1", "COST"),
            ("k gcra 1 1s AT now", "AT"),
            ("k gcra 1 1s FOO 1", "FOO"),
            ("k gcra 2000 1us", "limit"),
            ("k sliding_log 100001 1s", "limit"),
            ("k fixed_window 5 1s BURST 6", "BURST"),
            ("k gcra 1", "period"),
        ];
        for (args, name) in cases {
            let e = check(&words(args)).unwrap_err();
            assert!(e.starts_with("ERR ") && e.contains(name), "{args}: {e}");
        }
    }

    #[test]
    fn leases_parse_and_name_their_errors() {
        let l = lease(&words("k fixed_window 10 1s WANT 4 EXPIRE 100ms AT 7")).unwrap();
        assert_eq!((l.want, l.expire_ns, l.at), (4, Some(100_000_000), Some(7)));
        let l = lease(&words("k gcra 10 1s BURST 5 AT 3 WANT 2")).unwrap();
        assert_eq!((l.want, l.at, l.limit.rule.config().burst), (2, Some(3), 5));
        let l = lease(&words("k gcra 10 1s WANT 2 DATED 8")).unwrap();
        assert_eq!((l.dated, l.at), (Some(8), None));
        let l = lease(&words("k gcra 10 1s WANT 2 CHARGE 5 3 CHARGE 9 1")).unwrap();
        let charges: Vec<(u64, u64)> = l.charges.iter().map(|c| (c.at_ns, c.units)).collect();
        assert_eq!(charges, [(5, 3), (9, 1)]);
        for (args, name) in [
            ("k gcra 10 1s", "WANT"),
            ("k gcra 10 1s WANT 0", "WANT"),
            ("k gcra 10 1s WANT x", "WANT"),
            ("k gcra 10 1s WANT 1 WANT 2", "WANT"),
            ("k gcra 10 1s COST 2 WANT 1", "COST"),
            ("k gcra 10 1s WANT 1 EXPIRE 5", "EXPIRE"),
            ("k gcra 10 1s WANT 1 FOO 1", "FOO"),
            ("k gcra 10 1s WANT 1 CHARGE 5", "CHARGE"),
            ("k gcra 10 1s WANT 1 AT 5 DATED 5", "DATED"),
            ("k gcra 10 1s WANT 1 DATED x", "DATED"),
            ("k gcra 10 1s WANT 1 CHARGE 5 x", "CHARGE's units"),
            ("k gcra 10 1s WANT 1 CHARGE 5 4294967296", "CHARGE's units"),
            ("k gcra 10 1s WANT 1 CHARGE x 1", "CHARGE's at_ns"),
            (
                "k gcra 10 1s WANT 1 CHARGE 1 1 CHARGE 2 1 CHARGE 3 1",
                "CHARGE",
            ),
            ("k gcra 10 1s WANT", "WANT"),
        ] {
            let e = lease(&words(args)).unwrap_err();
            assert!(e.starts_with("ERR ") && e.contains(name), "{args}: {e}");
        }
    }

    #[test]
    fn check_all_finds_its_keys() {
        let a = words("AT 7 LIMIT a gcra 1 1s COST 2 LIMIT b sliding_log 3 1m");
        let r = check_all(&a).unwrap();
        assert_eq!(r.at, Some(7));
        assert_eq!(r.limits.len(), 2);
        assert_eq!(r.limits[1].key, b"b");
        assert_eq!(check_all_key_positions(&a), vec![4, 11]);
        assert!(check_all(&words("LIMIT a gcra 1 1s AT 3")).is_err());
        assert!(check_all(&words("AT 3")).is_err());
    }
}

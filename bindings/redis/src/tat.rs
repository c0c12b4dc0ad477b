//! redis-cell's stored form of a GCRA state, which `CL.THROTTLE` reads and
//! writes (SPEC.md §7): a Redis string holding the theoretical arrival time
//! (TAT) in UNIX nanoseconds as decimal digits, expiring when it is reached.
//!
//! Nothing here touches Redis: the parser and the formatter work on bytes,
//! so they are tested without a server.

/// The smallest TAT a string may hold: 10^17 ns, March 1973. No clock a
/// server has run on since reads fewer nanoseconds, so a smaller number is
/// a TAT in another unit (a Lua script's milliseconds or seconds), which
/// read as nanoseconds would fall in 1970 and reset the key silently.
pub const MIN_TAT_NS: u64 = 100_000_000_000_000_000;

/// Why a string is not a TAT this module continues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not 1 to 20 decimal digits of a `u64`.
    NotDigits,
    /// Digits below [`MIN_TAT_NS`].
    TooSmall,
}

/// The TAT a string holds, or why it is not one. Only plain decimal digits
/// are read (no sign, no spaces), as redis-cell writes them.
pub fn parse(bytes: &[u8]) -> Result<u64, Refusal> {
    if bytes.is_empty() || bytes.len() > 20 || !bytes.iter().all(u8::is_ascii_digit) {
        return Err(Refusal::NotDigits);
    }
    let mut tat: u64 = 0;
    for &b in bytes {
        tat = tat
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(Refusal::NotDigits)?;
    }
    if tat < MIN_TAT_NS {
        return Err(Refusal::TooSmall);
    }
    Ok(tat)
}

/// The decimal digits of `tat`, as redis-cell writes them, in a buffer
/// and its length.
pub fn digits(tat: u64) -> ([u8; 20], usize) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = tat;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let len = buf.len() - i;
    buf.copy_within(i.., 0);
    (buf, len)
}

/// The error for a string of digits too small to be a TAT in nanoseconds:
/// what the key holds and what to do. `key` and `held` are quoted as
/// printable ASCII. (A string that is not digits at all is no state of any
/// kind: the commands answer it `WRONGTYPE`, as for any other type.)
pub fn too_small(key: &[u8], held: &[u8]) -> String {
    format!(
        "ERR key '{}' holds '{}', a theoretical arrival time too small to be UNIX nanoseconds (below 10^17, March 1973): it is in another unit, as a Lua script's milliseconds or seconds; convert it to nanoseconds (bindings/redis/README.md, Migrating) or DEL the key",
        crate::args::text(key),
        crate::args::text(held)
    )
}

/// The error for a TAT string checked under another algorithm than gcra.
pub fn not_gcra(key: &[u8], algorithm: ratecell::Algorithm) -> String {
    format!(
        "ERR key '{}' holds a live gcra state (a theoretical arrival time string, as CL.THROTTLE and redis-cell write it); it cannot be checked as {algorithm} (DEL it, or wait until it expires)",
        crate::args::text(key)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanoseconds_parse_and_print_back() {
        for tat in [MIN_TAT_NS, 1_765_065_600_123_456_789, u64::MAX] {
            let (buf, len) = digits(tat);
            assert_eq!(&buf[..len], tat.to_string().as_bytes());
            assert_eq!(parse(&buf[..len]), Ok(tat));
        }
        assert_eq!(digits(0).1, 1);
        assert_eq!(&digits(7).0[..1], b"7");
    }

    #[test]
    fn other_strings_and_other_units_are_refused() {
        for s in [
            &b""[..],
            b"abc",
            b"-1765065600123456789",
            b"+1765065600123456789",
            b" 1765065600123456789",
            b"1765065600.123",
            b"18446744073709551616",
            b"000000000000000000001",
        ] {
            assert_eq!(parse(s), Err(Refusal::NotDigits), "{s:?}");
        }
        // Seconds, milliseconds and microseconds of 2025, and 0.
        for s in [
            &b"1765065600"[..],
            b"1765065600123",
            b"1765065600123456",
            b"0",
            b"99999999999999999",
        ] {
            assert_eq!(parse(s), Err(Refusal::TooSmall), "{s:?}");
        }
        let e = too_small(b"k\n", b"1765065600123");
        assert!(e.starts_with("ERR ") && e.contains("milliseconds"), "{e}");
        assert!(
            e.contains("'k\\x0a'") && e.contains("'1765065600123'"),
            "{e}"
        );
    }
}

//! Every command's way back to the client: integer replies written
//! directly, errors as printable ASCII, and the panic boundary.
//!
//! No reply text goes through redis-module's conversions, which turn each
//! `char` into a byte and panic on a NUL: an argument quoted in an error is
//! escaped by [`crate::args::text`], and [`error`] escapes whatever else
//! reaches it. A panic inside a command would unwind into Redis and abort
//! the server; [`boundary`] turns it into an error reply instead.

use ratecell::Decision;
use redis_module::{RedisError, raw};
use std::ffi::{CString, c_int, c_long};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A command's answer.
pub enum Reply {
    /// An integer.
    Int(i64),
    /// An array of answers.
    Array(Vec<Reply>),
    /// `+OK`.
    Ok,
}

/// Writes `reply` to the calling client.
pub fn send(ctx: *mut raw::RedisModuleCtx, reply: &Reply) {
    // SAFETY: replies to the client of the running command; arrays announce
    // their length first.
    unsafe {
        match reply {
            Reply::Int(v) => {
                raw::RedisModule_ReplyWithLongLong.expect("ReplyWithLongLong")(ctx, *v);
            }
            Reply::Array(items) => {
                raw::RedisModule_ReplyWithArray.expect("ReplyWithArray")(
                    ctx,
                    items.len() as c_long,
                );
                for item in items {
                    send(ctx, item);
                }
            }
            Reply::Ok => {
                raw::RedisModule_ReplyWithSimpleString.expect("ReplyWithSimpleString")(
                    ctx,
                    c"OK".as_ptr(),
                );
            }
        }
    }
}

/// Writes integers as one array (the one-key commands' hot path).
pub fn send_ints(ctx: *mut raw::RedisModuleCtx, values: &[i64]) {
    // SAFETY: as in `send`.
    unsafe {
        raw::RedisModule_ReplyWithArray.expect("ReplyWithArray")(ctx, values.len() as c_long);
        for &v in values {
            raw::RedisModule_ReplyWithLongLong.expect("ReplyWithLongLong")(ctx, v);
        }
    }
}

/// Writes an error reply. Its text is made printable ASCII whatever it
/// holds (`\xNN` for other bytes), so it is a valid RESP error line.
pub fn error(ctx: *mut raw::RedisModuleCtx, e: &RedisError) {
    let text = match e {
        RedisError::WrongArity => {
            // SAFETY: a reply to the calling client.
            unsafe { raw::RedisModule_WrongArity.expect("WrongArity")(ctx) };
            return;
        }
        RedisError::WrongType => {
            "WRONGTYPE Operation against a key holding the wrong kind of value".to_string()
        }
        RedisError::Str(s) => (*s).to_string(),
        RedisError::String(s) => s.clone(),
    };
    let line = CString::new(printable(text.as_bytes())).expect("printable ASCII holds no NUL");
    // SAFETY: a reply to the calling client; Redis copies the string.
    unsafe { raw::RedisModule_ReplyWithError.expect("ReplyWithError")(ctx, line.as_ptr()) };
}

/// `bytes` with every byte outside printable ASCII written as `\xNN`.
pub fn printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_graphic() || b == b' ' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Runs a command's body, and answers an error instead of unwinding into
/// Redis if it panics. What the body had written to keys before the panic
/// stays; the client learns that the command failed.
pub fn boundary(ctx: *mut raw::RedisModuleCtx, body: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(status) => status,
        Err(_) => {
            error(
                ctx,
                &RedisError::Str(
                    "ERR ratecell: internal error (a bug; the server's log has the panic), the command was abandoned",
                ),
            );
            raw::Status::Ok as c_int
        }
    }
}

/// A command's error reply with this text.
pub(crate) fn err(message: String) -> RedisError {
    RedisError::String(message)
}

/// The six integers of a decision (SPEC.md §7): `-1` for a retry that can
/// never succeed, other values clamped to `i64`.
pub(crate) fn six(d: &Decision) -> [i64; 6] {
    [
        i64::from(d.allowed),
        clamp(d.limit),
        clamp(d.remaining),
        or_never(d.retry_after_ns),
        clamp(d.reset_after_ns),
        clamp(d.wait_ns),
    ]
}

/// A reply's integer: `v`, clamped to `i64`.
pub(crate) fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A wait as a reply's integer: `-1` for never (`u64::MAX`), else clamped.
pub(crate) fn or_never(v: u64) -> i64 {
    if v == u64::MAX { -1 } else { clamp(v) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_everything_but_printable_ascii() {
        assert_eq!(printable(b"ERR a b"), "ERR a b");
        assert_eq!(
            printable("一\0é\r\n".as_bytes()),
            "\\xe4\\xb8\\x80\\x00\\xc3\\xa9\\x0d\\x0a"
        );
    }

    #[test]
    fn replies_clamp_to_i64_and_never_is_minus_one() {
        let d = Decision {
            allowed: false,
            limit: u64::MAX,
            remaining: 1,
            retry_after_ns: (1 << 63) + 1_000,
            reset_after_ns: u64::MAX - 1,
            wait_ns: 0,
        };
        assert_eq!(six(&d), [0, i64::MAX, 1, i64::MAX, i64::MAX, 0]);
        let never = Decision {
            retry_after_ns: u64::MAX,
            ..d
        };
        assert_eq!(six(&never)[3], -1);
    }
}

//! Writing a key and replicating what was written: a check's result reaches
//! replicas and the AOF as the state it stored (`RATECELL.RESTORE`) or a
//! `DEL`, never as the command to run again, whose answer depends on the
//! time.

use crate::key::{Form, Held, Key};
use crate::value::Value;
use ratecell::{Algorithm, state::Rule};
use redis_module::{RedisError, RedisString, raw};
use std::ffi::c_int;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The server's wall clock in UNIX nanoseconds (what a request without
/// `AT` is decided at).
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A Redis string holding any bytes (`Context::create_string` goes through
/// a C string and refuses a NUL, which keys may contain).
pub(crate) fn bytes(data: &[u8]) -> RedisString {
    // SAFETY: CreateString copies `len` bytes from the pointer; with a NULL
    // context the string is ours. RedisString::new retains it once more, so
    // one release here leaves the RedisString the only owner.
    unsafe {
        let inner = raw::RedisModule_CreateString.expect("CreateString")(
            std::ptr::null_mut(),
            data.as_ptr().cast(),
            data.len(),
        );
        let s = RedisString::new(None, inner);
        raw::RedisModule_FreeString.expect("FreeString")(std::ptr::null_mut(), inner);
        s
    }
}

pub(crate) fn replicate_del(ctx: *mut raw::RedisModuleCtx, name: *mut raw::RedisModuleString) {
    // SAFETY: "s" takes one RedisModuleString; Redis copies it.
    unsafe {
        raw::RedisModule_Replicate.expect("Replicate")(ctx, c"DEL".as_ptr(), c"s".as_ptr(), name);
    }
}

/// Gives the value a key now holds its expiry (none for an `AT` state;
/// else when it becomes equivalent to fresh: `reset_after` from `t`,
/// rounded up to Redis's milliseconds) and replicates it as
/// `RATECELL.RESTORE`.
pub(crate) fn publish(
    ctx: *mut raw::RedisModuleCtx,
    key: &mut Key,
    name: *mut raw::RedisModuleString,
    value: &Value,
    t: u64,
    reset_after: u64,
) -> Result<(), RedisError> {
    thread_local! {
        // Commands run on Redis's main thread: one buffer, reused.
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let ms = (!value.at()).then(|| expiry_ms(reset_after));
    key.expire(ms.map(Duration::from_millis))?;
    BUFFER.with_borrow_mut(|buf| {
        buf.clear();
        value.encode_into(buf);
        replicate_restore(ctx, name, buf, ms.map(|ms| pxat(t, ms)));
    });
    Ok(())
}

/// A key's time to live for a state that is as if new `reset_after` ns
/// from now: rounded up to Redis's milliseconds, at least one.
fn expiry_ms(reset_after: u64) -> u64 {
    reset_after.div_ceil(1_000_000).max(1)
}

/// The UNIX ms at which a key given `ms` to live at `t` expires (what a
/// replica receives, so its expiry is the master's).
fn pxat(t: u64, ms: u64) -> u64 {
    (t / 1_000_000).saturating_add(ms)
}

/// Replicates `RATECELL.RESTORE <name> <state> [PXAT <pxat>]`.
fn replicate_restore(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    state: &[u8],
    pxat: Option<u64>,
) {
    // SAFETY: the API table is filled once when the module loads.
    let replicate = unsafe { raw::RedisModule_Replicate }.expect("Replicate");
    // SAFETY: the format matches the arguments ("s": a RedisModuleString,
    // "b": a pointer and its length, "c": a C string, "l": a long long);
    // Redis copies them before returning.
    unsafe {
        match pxat {
            None => replicate(
                ctx,
                c"RATECELL.RESTORE".as_ptr(),
                c"sb".as_ptr(),
                name,
                state.as_ptr(),
                state.len(),
            ),
            Some(pxat) => replicate(
                ctx,
                c"RATECELL.RESTORE".as_ptr(),
                c"sbcl".as_ptr(),
                name,
                state.as_ptr(),
                state.len(),
                c"PXAT".as_ptr(),
                std::ffi::c_longlong::try_from(pxat).unwrap_or(std::ffi::c_longlong::MAX),
            ),
        };
    }
}

/// Writes a one-word state as the key's `form` holds it (a new key: the
/// word type), with the expiry [`publish`] gives a value (none for
/// `reset_after` `None`, a state written with `AT`), and replicates it:
/// a word as `RATECELL.RESTORE` of its encoding, a TAT string as a `SET`
/// ([`store_tat`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_word(
    ctx: *mut raw::RedisModuleCtx,
    key: &mut Key,
    name: *mut raw::RedisModuleString,
    form: Form,
    algorithm: Algorithm,
    word: u64,
    t: u64,
    reset_after: Option<u64>,
) -> Result<(), RedisError> {
    if form == Form::Tat {
        return store_tat(ctx, key, name, word, t, reset_after);
    }
    if word == 0 {
        // The fresh state (which no admission leaves): held as no key.
        key.delete();
        replicate_del(ctx, name);
        return Ok(());
    }
    key.set_word(algorithm, word)?;
    let ms = reset_after.map(expiry_ms);
    key.expire(ms.map(Duration::from_millis))?;
    replicate_restore(
        ctx,
        name,
        &crate::word::encode(algorithm, word),
        ms.map(|ms| pxat(t, ms)),
    );
    Ok(())
}

/// Writes a GCRA state in redis-cell's form (SPEC.md §7): the key becomes a
/// string of `tat`'s digits, whatever it held, expiring as [`publish`]
/// gives a value its expiry (none for `reset_after` `None`, a state
/// written with `AT`), and replicates as the `SET` it is (`SET <key>
/// <digits> PXAT <ms>`), so replicas and the AOF hold the same string.
pub(crate) fn store_tat(
    ctx: *mut raw::RedisModuleCtx,
    key: &mut Key,
    name: *mut raw::RedisModuleString,
    tat: u64,
    t: u64,
    reset_after: Option<u64>,
) -> Result<(), RedisError> {
    let (digits, len) = crate::tat::digits(tat);
    let digits = &digits[..len];
    key.set_string(digits)?;
    let ms = reset_after.map(expiry_ms);
    key.expire(ms.map(Duration::from_millis))?;
    // SAFETY: the API table is filled once when the module loads.
    let replicate = unsafe { raw::RedisModule_Replicate }.expect("Replicate");
    // SAFETY: the format matches the arguments ("s": a RedisModuleString,
    // "b": a pointer and its length, "c": a C string, "l": a long long);
    // Redis copies them before returning.
    unsafe {
        match ms {
            None => replicate(
                ctx,
                c"SET".as_ptr(),
                c"sb".as_ptr(),
                name,
                digits.as_ptr(),
                digits.len(),
            ),
            Some(ms) => {
                let pxat = pxat(t, ms);
                replicate(
                    ctx,
                    c"SET".as_ptr(),
                    c"sbcl".as_ptr(),
                    name,
                    digits.as_ptr(),
                    digits.len(),
                    c"PXAT".as_ptr(),
                    std::ffi::c_longlong::try_from(pxat).unwrap_or(std::ffi::c_longlong::MAX),
                )
            }
        };
    }
    Ok(())
}

/// Stores a new value in an empty key and publishes it.
pub(crate) fn store_new(
    ctx: *mut raw::RedisModuleCtx,
    key: &mut Key,
    name: *mut raw::RedisModuleString,
    rule: &Rule,
    value: Value,
    t: u64,
    reset_after: u64,
) -> Result<(), RedisError> {
    key.set(value)?;
    let Held::Value(stored) = key.held(rule, b"")? else {
        return Err(RedisError::Str("ERR the value just set is gone"));
    };
    publish(ctx, key, name, &stored, t, reset_after)
}

pub(crate) fn is_loading(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: the running command's context.
    let flags = unsafe { raw::RedisModule_GetContextFlags.expect("GetContextFlags")(ctx) };
    flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0
}

//! Benchmark floors, built only with the `floor` feature (never in a
//! release module): two commands that do part of what `RATECELL.CHECK`
//! must do inside Redis, so `scripts/redis-floor.sh` can show how much of a
//! check's cost is Redis's own work.
//!
//! - `RATECELL.FLOOR.NOOP <key> [args...]`: replies `0`; the cost of a
//!   module command with a check's arguments.
//! - `RATECELL.FLOOR.WRITE <key> [args...]`: what a check on a live key
//!   must do in Redis, with no parsing and no decision: open the key, add
//!   one to a one-word GCRA state in place (or create it), set its expiry,
//!   replicate the state as `RATECELL.RESTORE` and reply six integers.

use crate::{RATECELL_TYPE, RawCommand, publish, stored::Stored};
use ratecell::{Algorithm, Config};
use redis_module::{Context, RedisString, raw};
use std::ffi::c_int;

unsafe extern "C" fn noop(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: a reply to the calling client.
    unsafe { raw::RedisModule_ReplyWithLongLong.expect("ReplyWithLongLong")(ctx, 0) }
}

unsafe extern "C" fn write(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    if argc < 2 {
        // SAFETY: a reply to the calling client.
        return unsafe { raw::RedisModule_WrongArity.expect("WrongArity")(ctx) };
    }
    // SAFETY: Redis passes argc valid arguments; argv[1] is the key,
    // borrowed (ManuallyDrop: not released here).
    let name = unsafe { *argv.add(1) };
    let borrowed = std::mem::ManuallyDrop::new(RedisString::from_redis_module_string(
        std::ptr::null_mut(),
        name,
    ));
    let key = context.open_key_writable(&borrowed);
    let t = 1_000_000_000;
    let stored = match key.get_value::<Stored>(&RATECELL_TYPE) {
        Ok(Some(s)) => {
            s.words[0] += 1;
            s
        }
        Ok(None) => {
            let fresh = Stored {
                config: Config::new(Algorithm::Gcra, 100, 3_600_000_000_000),
                at: false,
                words: vec![1],
            };
            if key.set_value(&RATECELL_TYPE, fresh).is_err() {
                return raw::Status::Err as c_int;
            }
            match key.get_value::<Stored>(&RATECELL_TYPE) {
                Ok(Some(s)) => s,
                _ => return raw::Status::Err as c_int,
            }
        }
        Err(_) => return raw::Status::Err as c_int,
    };
    if publish(&context, &key, name, stored, t, false, 3_600_000_000_000).is_err() {
        return raw::Status::Err as c_int;
    }
    // SAFETY: a reply of six integers to the calling client.
    unsafe {
        raw::RedisModule_ReplyWithArray.expect("ReplyWithArray")(ctx, 6);
        for v in [1, 100, 99, 0, 36_000_000_000, 0] {
            raw::RedisModule_ReplyWithLongLong.expect("ReplyWithLongLong")(ctx, v);
        }
    }
    raw::Status::Ok as c_int
}

/// The floor commands, for [`crate::init`] to register.
pub const COMMANDS: [(&std::ffi::CStr, RawCommand); 2] = [
    (c"ratecell.floor.noop", noop),
    (c"ratecell.floor.write", write),
];

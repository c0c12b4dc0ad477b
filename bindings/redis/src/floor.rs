//! Benchmark floors, built only with the `floor` feature (never in a
//! release module): commands that do part of what `RATECELL.CHECK` must do
//! inside Redis, so `scripts/redis-floor.sh` can show how much of a check's
//! cost is Redis's own work, and `scripts/redis-memory.sh` how much of a
//! key's memory is.
//!
//! - `RATECELL.FLOOR.NOOP <key> [args...]`: replies `0`; the cost of a
//!   module command with a check's arguments.
//! - `RATECELL.FLOOR.WRITE <key> [args...]`: what a check on a live key
//!   must do in Redis, with no parsing and no decision: open the key, add
//!   one to a one-word GCRA state in place (or create it), set its expiry,
//!   replicate the state as `RATECELL.RESTORE` and reply six integers.
//! - `RATECELL.FLOOR.BARE <key> <ttl_ms>`: stores a value of the floor type
//!   [`FLOOR_TYPE`], which allocates nothing (the module value is not a
//!   pointer), with an expiry: what any module data type costs per key.

use crate::command::RawCommand;
use crate::key::{Held, Key};
use crate::store::publish;
use crate::value::{Shape, Value};
use ratecell::{Algorithm, Config};
use redis_module::raw;
use std::ffi::{c_int, c_void};

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
    if argc < 2 {
        // SAFETY: a reply to the calling client.
        return unsafe { raw::RedisModule_WrongArity.expect("WrongArity")(ctx) };
    }
    // SAFETY: Redis passes argc valid arguments; argv[1] is the key.
    let name = unsafe { *argv.add(1) };
    let rule = crate::args::rule(Config::new(Algorithm::Gcra, 100, 3_600_000_000_000))
        .expect("a valid limit");
    let mut key = Key::open(ctx, name);
    let t = 1_000_000_000;
    let written = match key.held(&rule, b"") {
        Ok(Held::Value(mut v)) => {
            v.words_mut()[0] += 1;
            publish(ctx, &mut key, name, &v, t, 3_600_000_000_000)
        }
        Ok(Held::Empty) => {
            let v = Value::new(Shape::of(&rule), false, &[1]);
            crate::store::store_new(ctx, &mut key, name, &rule, v, t, 3_600_000_000_000)
        }
        _ => return raw::Status::Err as c_int,
    };
    if written.is_err() {
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

/// The floor data type: its values are the address 8, never dereferenced.
pub static FLOOR_TYPE: redis_module::native_types::RedisType =
    redis_module::native_types::RedisType::new(
        "rcfloor00",
        1,
        crate::datatype::type_methods(
            Some(bare_load),
            Some(bare_save),
            None,
            Some(bare_free),
            None,
        ),
    );

const BARE: *mut c_void = 8 as *mut c_void;

unsafe extern "C" fn bare_free(_value: *mut c_void) {}

unsafe extern "C" fn bare_save(rdb: *mut raw::RedisModuleIO, _value: *mut c_void) {
    raw::save_unsigned(rdb, 0);
}

unsafe extern "C" fn bare_load(rdb: *mut raw::RedisModuleIO, _encver: c_int) -> *mut c_void {
    let _ = raw::load_unsigned(rdb);
    BARE
}

unsafe extern "C" fn bare(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    if argc != 3 {
        // SAFETY: a reply to the calling client.
        return unsafe { raw::RedisModule_WrongArity.expect("WrongArity")(ctx) };
    }
    // SAFETY: Redis passes argc valid arguments: the key, then the ttl.
    let (name, ttl) = unsafe { (*argv.add(1), *argv.add(2)) };
    let mut ms: std::ffi::c_longlong = 0;
    // SAFETY: as above; the key is opened, set and closed here.
    unsafe {
        if raw::RedisModule_StringToLongLong.expect("StringToLongLong")(ttl, &mut ms)
            != raw::Status::Ok as c_int
        {
            return raw::RedisModule_ReplyWithError.expect("ReplyWithError")(
                ctx,
                c"ERR ttl_ms".as_ptr(),
            );
        }
        let mode = (raw::KeyMode::READ | raw::KeyMode::WRITE).bits();
        let key = raw::RedisModule_OpenKey.expect("OpenKey")(ctx, name, mode);
        raw::RedisModule_ModuleTypeSetValue.expect("ModuleTypeSetValue")(
            key.cast(),
            *FLOOR_TYPE.raw_type.borrow(),
            BARE,
        );
        raw::RedisModule_SetExpire.expect("SetExpire")(key.cast(), ms);
        raw::RedisModule_CloseKey.expect("CloseKey")(key.cast());
        raw::RedisModule_ReplyWithLongLong.expect("ReplyWithLongLong")(ctx, 1)
    }
}

/// The floor commands, for [`crate::init`] to register.
pub const COMMANDS: [(&std::ffi::CStr, RawCommand, &std::ffi::CStr); 3] = [
    (c"ratecell.floor.noop", noop, c"write deny-oom fast"),
    (c"ratecell.floor.write", write, c"write deny-oom fast"),
    (c"ratecell.floor.bare", bare, c"write deny-oom fast"),
];

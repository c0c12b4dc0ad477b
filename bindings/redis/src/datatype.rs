//! The module's block data type, `ratecell1`: Redis's callbacks for a
//! value (free, memory usage, RDB save and load, AOF rewrite). They only
//! read values [`Value`] wrote, except `rdb_load`, which reads a file's
//! bytes and validates them ([`Value::from_integers`]). The one-word
//! states' types, whose value is the word, are [`crate::word`]'s.

use crate::reply;
use crate::value::{self, Value};
use redis_module::raw;
use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The data type: 9 characters, as Redis requires; the encoding version is
/// [`value::ENCODING`] (RDB files of encoding 1 still load).
pub static RATECELL_TYPE: redis_module::native_types::RedisType =
    redis_module::native_types::RedisType::new(
        "ratecell1",
        value::ENCODING as i32,
        type_methods(
            Some(rdb_load),
            Some(rdb_save),
            Some(aof_rewrite),
            Some(free),
            Some(mem_usage),
        ),
    );

/// A data type's callbacks: the five this module gives, none of the rest.
pub(crate) const fn type_methods(
    rdb_load: raw::RedisModuleTypeLoadFunc,
    rdb_save: raw::RedisModuleTypeSaveFunc,
    aof_rewrite: raw::RedisModuleTypeRewriteFunc,
    free: raw::RedisModuleTypeFreeFunc,
    mem_usage: raw::RedisModuleTypeMemUsageFunc,
) -> raw::RedisModuleTypeMethods {
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load,
        rdb_save,
        aof_rewrite,
        free,
        mem_usage,
        digest: None,
        aux_load: None,
        aux_save: None,
        aux_save2: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        copy2: None,
        free_effort2: None,
        mem_usage2: None,
        unlink2: None,
    }
}

/// Runs a data type callback's body; a panic (a bug: the callbacks only
/// read values this module wrote) gives `fallback` instead of unwinding
/// into Redis.
pub(crate) fn guarded<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: Redis hands back a pointer from Value::into_raw, once.
    guarded((), || drop(unsafe { Value::from_raw(value) }));
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    guarded(0, || {
        // SAFETY: a value of this type came from Value::into_raw; borrowed.
        let v = ManuallyDrop::new(unsafe { Value::from_raw(value.cast_mut()) });
        v.heap_bytes()
    })
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded((), || {
        // SAFETY: as in mem_usage.
        let v = ManuallyDrop::new(unsafe { Value::from_raw(value) });
        for i in v.integers() {
            raw::save_unsigned(rdb, i);
        }
    });
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    // A file's bytes decide what happens here: never unwind into Redis.
    // The RDB holds the encoding's own version word too (both encodings
    // save it first), so the type version only has to be one we read.
    let loaded = catch_unwind(AssertUnwindSafe(|| {
        if !matches!(encver as u64, value::ENCODING_V1 | value::ENCODING) {
            return Err(format!("unknown encoding version {encver}"));
        }
        Value::from_integers(|| raw::load_unsigned(rdb).ok())
    }));
    match loaded {
        Ok(Ok(v)) => v.into_raw(),
        Ok(Err(e)) => {
            log_io_error(rdb, &format!("ratecell: refused a stored state: {e}"));
            std::ptr::null_mut()
        }
        Err(_) => {
            log_io_error(rdb, "ratecell: internal error loading a state");
            std::ptr::null_mut()
        }
    }
}

/// Logs a loading error in Redis's log, as printable ASCII.
pub(crate) fn log_io_error(rdb: *mut raw::RedisModuleIO, message: &str) {
    let line = std::ffi::CString::new(reply::printable(message.as_bytes()))
        .expect("printable ASCII holds no NUL");
    // SAFETY: the IO handle of the running load; "%s" takes one C string.
    unsafe {
        raw::RedisModule_LogIOError.expect("LogIOError")(
            rdb,
            c"warning".as_ptr(),
            c"%s".as_ptr(),
            line.as_ptr(),
        );
    }
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let bytes = guarded(Vec::new(), || {
        // SAFETY: as in mem_usage.
        let v = ManuallyDrop::new(unsafe { Value::from_raw(value) });
        let mut bytes = Vec::new();
        v.encode_into(&mut bytes);
        bytes
    });
    emit_restore(aof, key, &bytes);
}

/// Writes `RATECELL.RESTORE <key> <bytes>` to the AOF being rewritten, for
/// every type's `aof_rewrite`; Redis emits the key's expiry after it.
pub(crate) fn emit_restore(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    bytes: &[u8],
) {
    // SAFETY: "sb" takes a RedisModuleString and a buffer with its length;
    // Redis copies both before returning; `aof` and `key` are the ones
    // Redis passed to the rewrite callback.
    unsafe {
        raw::RedisModule_EmitAOF.expect("EmitAOF")(
            aof,
            c"RATECELL.RESTORE".as_ptr(),
            c"sb".as_ptr(),
            key,
            bytes.as_ptr(),
            bytes.len(),
        );
    }
}

//! One open Redis key holding (or about to hold) a ratecell [`Value`], over
//! Redis's own key API: the module value is the value's block itself, with
//! no box around it (redis-module's `set_value` would add one allocation
//! per key).

use crate::RATECELL_TYPE;
use crate::value::{Shape, Value};
use ratecell::state::Rule;
use redis_module::{RedisError, raw};
use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;
use std::time::Duration;

/// A key opened for writing; closed on drop.
pub struct Key {
    raw: *mut raw::RedisModuleKey,
}

/// What a key holds, for a request under one rule.
pub enum Held {
    /// Nothing.
    Empty,
    /// A ratecell value of the rule's shape, borrowed from Redis (not
    /// freed on drop): valid until the key is set or deleted.
    Value(ManuallyDrop<Value>),
    /// A ratecell value of another shape.
    Other(Shape),
}

impl Key {
    /// Opens `name` for reading and writing.
    pub fn open(ctx: *mut raw::RedisModuleCtx, name: *mut raw::RedisModuleString) -> Key {
        let mode = (raw::KeyMode::READ | raw::KeyMode::WRITE).bits();
        // SAFETY: a context and key name Redis handed to the command.
        let raw = unsafe { raw::RedisModule_OpenKey.expect("OpenKey")(ctx, name, mode) };
        Key { raw: raw.cast() }
    }

    /// The module value the key holds, `None` for an empty key, or
    /// `WRONGTYPE` for a key of another type.
    pub fn raw_value(&self) -> Result<Option<*mut c_void>, RedisError> {
        // SAFETY: an open key.
        let kind = unsafe { raw::RedisModule_KeyType.expect("KeyType")(self.raw) };
        if kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(None);
        }
        // SAFETY: an open key; the type pointer is set once at load.
        let ours =
            unsafe { raw::RedisModule_ModuleTypeGetType.expect("ModuleTypeGetType")(self.raw) }
                == *RATECELL_TYPE.raw_type.borrow();
        if kind != raw::REDISMODULE_KEYTYPE_MODULE as c_int || !ours {
            return Err(RedisError::WrongType);
        }
        // SAFETY: an open key of this module's type.
        Ok(Some(unsafe {
            raw::RedisModule_ModuleTypeGetValue.expect("ModuleTypeGetValue")(self.raw)
        }))
    }

    /// What the key holds, for a request under `rule`.
    pub fn held(&mut self, rule: &Rule) -> Result<Held, RedisError> {
        Ok(match self.raw_value()? {
            None => Held::Empty,
            // SAFETY: a value of this module's type came from
            // Value::into_raw and stays Redis's (ManuallyDrop).
            Some(raw) => match unsafe { Value::from_raw_as(raw, rule) } {
                Ok(v) => Held::Value(ManuallyDrop::new(v)),
                Err(shape) => Held::Other(shape),
            },
        })
    }

    /// Replaces what the key holds with `value` (Redis frees the old one).
    pub fn set(&mut self, value: Value) -> Result<(), RedisError> {
        let raw_value = value.into_raw();
        // SAFETY: an open, writable key; Redis owns the value from here and
        // hands it back to `free` once.
        let status = unsafe {
            raw::RedisModule_ModuleTypeSetValue.expect("ModuleTypeSetValue")(
                self.raw,
                *RATECELL_TYPE.raw_type.borrow(),
                raw_value,
            )
        };
        if status == raw::Status::Ok as c_int {
            Ok(())
        } else {
            // SAFETY: Redis did not take the value: it is still ours.
            drop(unsafe { Value::from_raw(raw_value) });
            Err(RedisError::Str("ERR could not set the key's value"))
        }
    }

    /// Sets the key's time to live (at least 1 ms), or removes it.
    pub fn expire(&mut self, ttl: Option<Duration>) -> Result<(), RedisError> {
        let ms = ttl.map_or(raw::REDISMODULE_NO_EXPIRE.into(), |d| {
            i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
        });
        // SAFETY: an open, writable key.
        let status = unsafe { raw::RedisModule_SetExpire.expect("SetExpire")(self.raw, ms) };
        if status == raw::Status::Ok as c_int {
            Ok(())
        } else {
            Err(RedisError::Str("ERR could not set the key's expiry"))
        }
    }

    /// Deletes the key.
    pub fn delete(&mut self) {
        // SAFETY: an open, writable key.
        unsafe { raw::RedisModule_DeleteKey.expect("DeleteKey")(self.raw) };
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        // SAFETY: opened in Key::open, closed once.
        unsafe { raw::RedisModule_CloseKey.expect("CloseKey")(self.raw) };
    }
}

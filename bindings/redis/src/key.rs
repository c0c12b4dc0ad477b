//! One open Redis key holding (or about to hold) a ratecell state, in one
//! of three forms: a [`Value`] (the module value is the value's block
//! itself, with no box around it: redis-module's `set_value` would add one
//! allocation per key), a one-word state whose module value is the word
//! ([`crate::word`]), or a GCRA state in redis-cell's form (a TAT string,
//! [`crate::tat`]); over Redis's own key API.

use crate::RATECELL_TYPE;
use crate::reply::err;
use crate::tat;
use crate::value::{Shape, Value};
use crate::word;
use ratecell::{Algorithm, state::Rule};
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
    /// A one-word state of the rule's algorithm, kept as `form`. Whether
    /// it counts as written with `AT` is whether the key has no expiry
    /// ([`Key::expires`], asked only when needed: a lookup of its own).
    Word {
        /// The state's word (a TAT, UNIX ns).
        word: u64,
        /// How the key holds it.
        form: Form,
    },
}

/// How a key holds a one-word state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// The module value of the algorithm's word type ([`crate::word`]).
    Module,
    /// A string of the TAT's digits, redis-cell's form ([`crate::tat`]).
    Tat,
}

/// What an open key holds, before a rule reads it.
pub enum Raw {
    /// Nothing.
    Empty,
    /// A value of this module's block type (`ratecell1`).
    Module(*mut c_void),
    /// A value of a word type: its algorithm and word.
    Word(Algorithm, u64),
    /// A string of at most 20 bytes (a TAT's most), copied out, and how
    /// many there are; a longer string, none of them (and 0).
    String([u8; 20], usize),
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
    /// `WRONGTYPE` for a key of another type (a string too).
    pub fn raw_value(&self) -> Result<Option<*mut c_void>, RedisError> {
        match self.raw()? {
            Raw::Empty => Ok(None),
            Raw::Module(v) => Ok(Some(v)),
            Raw::Word(_, w) => Ok(Some(word::to_value(w))),
            Raw::String(..) => Err(RedisError::WrongType),
        }
    }

    /// What the key holds: nothing, a module value, a string, or
    /// `WRONGTYPE` for a key of another type.
    pub fn raw(&self) -> Result<Raw, RedisError> {
        // SAFETY: an open key.
        let kind = unsafe { raw::RedisModule_KeyType.expect("KeyType")(self.raw) };
        if kind == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return Ok(Raw::Empty);
        }
        if kind == raw::REDISMODULE_KEYTYPE_STRING as c_int {
            // Redis decodes an encoded string to give its bytes, even to be
            // read: a string longer than any TAT is left as it is.
            // SAFETY: an open string key.
            let n = unsafe { raw::RedisModule_ValueLength.expect("ValueLength")(self.raw) };
            if n == 0 || n > 20 {
                return Ok(Raw::String([0; 20], 0));
            }
            let mut len = 0;
            // SAFETY: an open string key; read-only access to its bytes,
            // copied before the key can change.
            let bytes = unsafe {
                let p = raw::RedisModule_StringDMA.expect("StringDMA")(
                    self.raw,
                    &mut len,
                    raw::REDISMODULE_READ as c_int,
                );
                if p.is_null() {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(p.cast::<u8>(), len.min(20))
                }
            };
            let mut copy = [0; 20];
            copy[..bytes.len()].copy_from_slice(bytes);
            return Ok(Raw::String(copy, bytes.len()));
        }
        if kind != raw::REDISMODULE_KEYTYPE_MODULE as c_int {
            return Err(RedisError::WrongType);
        }
        // SAFETY: an open key; the type pointers are set once at load.
        let ty =
            unsafe { raw::RedisModule_ModuleTypeGetType.expect("ModuleTypeGetType")(self.raw) };
        // SAFETY: an open key of a module's type.
        let value =
            unsafe { raw::RedisModule_ModuleTypeGetValue.expect("ModuleTypeGetValue")(self.raw) };
        if ty == *RATECELL_TYPE.raw_type.borrow() {
            Ok(Raw::Module(value))
        } else if let Some(algorithm) = word::algorithm_of(ty) {
            Ok(Raw::Word(algorithm, word::from_value(value)))
        } else {
            Err(RedisError::WrongType)
        }
    }

    /// What the key, called `name`, holds for a request under `rule`. A
    /// string of a TAT is a GCRA state in redis-cell's form: read for gcra,
    /// refused as a live gcra state for the other algorithms. Digits too
    /// small to be nanoseconds are refused by name for gcra; any other
    /// string is `WRONGTYPE`.
    pub fn held(&mut self, rule: &Rule, name: &[u8]) -> Result<Held, RedisError> {
        Ok(match self.raw()? {
            Raw::Empty => Held::Empty,
            // SAFETY: a value of this module's type came from
            // Value::into_raw and stays Redis's (ManuallyDrop).
            Raw::Module(raw) => match unsafe { Value::from_raw_as(raw, rule) } {
                Ok(v) => Held::Value(ManuallyDrop::new(v)),
                Err(shape) => Held::Other(shape),
            },
            Raw::Word(algorithm, word) if algorithm == rule.config().algorithm => Held::Word {
                word,
                form: Form::Module,
            },
            Raw::Word(algorithm, _) => Held::Other(Shape {
                algorithm,
                period_ns: rule.config().period_ns,
                extent: 0,
            }),
            Raw::String(copy, len) => match (tat::parse(&copy[..len]), rule.config().algorithm) {
                (Ok(tat), Algorithm::Gcra) => Held::Word {
                    word: tat,
                    form: Form::Tat,
                },
                (Ok(_), other) => return Err(err(tat::not_gcra(name, other))),
                (Err(tat::Refusal::TooSmall), Algorithm::Gcra) => {
                    return Err(err(tat::too_small(name, &copy[..len])));
                }
                (Err(_), _) => return Err(RedisError::WrongType),
            },
        })
    }

    /// Whether the key has an expiry.
    pub fn expires(&self) -> bool {
        // SAFETY: an open key.
        let ttl = unsafe { raw::RedisModule_GetExpire.expect("GetExpire")(self.raw) };
        ttl != raw::REDISMODULE_NO_EXPIRE as i64
    }

    /// Replaces what the key holds with `word` as `algorithm`'s word type:
    /// in place (the expiry kept) when it holds that type already. Word 0,
    /// the fresh state, is held as no key: a null module value is what the
    /// RDB loader takes for an error, so it is never stored.
    pub fn set_word(&mut self, algorithm: Algorithm, word: u64) -> Result<(), RedisError> {
        if word == 0 {
            self.delete();
            return Ok(());
        }
        let ty = *word::type_of(algorithm).raw_type.borrow();
        let value = word::to_value(word);
        // SAFETY: an open, writable key; a word value owns nothing, so the
        // old one needs no freeing and a refused one no reclaiming.
        let status = unsafe {
            if matches!(self.raw(), Ok(Raw::Word(a, _)) if a == algorithm) {
                raw::RedisModule_ModuleTypeReplaceValue.expect("ModuleTypeReplaceValue")(
                    self.raw,
                    ty,
                    value,
                    std::ptr::null_mut(),
                )
            } else {
                raw::RedisModule_ModuleTypeSetValue.expect("ModuleTypeSetValue")(
                    self.raw, ty, value,
                )
            }
        };
        if status == raw::Status::Ok as c_int {
            Ok(())
        } else {
            Err(RedisError::Str("ERR could not set the key's value"))
        }
    }

    /// Replaces what the key holds with a string of `bytes`. A string of
    /// the same length (a TAT's 19 digits until 2286) is overwritten in
    /// place, keeping its key and expiry entries, where replacing the value
    /// (`StringSet`) deletes and re-adds the key; a new one is made at its
    /// length.
    pub fn set_string(&mut self, bytes: &[u8]) -> Result<(), RedisError> {
        // SAFETY: an open key.
        let kind = unsafe { raw::RedisModule_KeyType.expect("KeyType")(self.raw) };
        let (empty, string) = (
            raw::REDISMODULE_KEYTYPE_EMPTY as c_int,
            raw::REDISMODULE_KEYTYPE_STRING as c_int,
        );
        if kind != empty && kind != string {
            self.delete();
        }
        let dma = |key: *mut raw::RedisModuleKey| {
            let mut len = 0;
            // SAFETY: an open, writable string key: write access to its
            // own buffer of `len` bytes, which Redis unshares first.
            let p = unsafe {
                raw::RedisModule_StringDMA.expect("StringDMA")(
                    key,
                    &mut len,
                    raw::REDISMODULE_WRITE as c_int,
                )
            };
            (p, len)
        };
        let (mut p, len) = if kind == string {
            dma(self.raw)
        } else {
            (std::ptr::null_mut(), 0)
        };
        if p.is_null() || len != bytes.len() {
            // SAFETY: an open, writable key, empty or a string: resized,
            // or created at this length.
            let status = unsafe {
                raw::RedisModule_StringTruncate.expect("StringTruncate")(self.raw, bytes.len())
            };
            let (q, len) = dma(self.raw);
            if status != raw::Status::Ok as c_int || q.is_null() || len != bytes.len() {
                return Err(RedisError::Str("ERR could not set the key's value"));
            }
            p = q;
        }
        // SAFETY: `p` is the key's buffer of exactly `bytes.len()` bytes,
        // valid until the key is next changed.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>(), bytes.len()) };
        Ok(())
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

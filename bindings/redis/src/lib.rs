//! ratecell inside Redis: a module (`redis-server --loadmodule
//! libratecell_redis.so`) whose commands make the decisions of SPEC.md §3–4
//! on states kept in Redis keys, so one limit holds across every process and
//! machine that shares the server or cluster (SPEC.md §7).
//!
//! This crate owns the commands, the custom data type and its persistence;
//! the decisions themselves are [`ratecell::state::Rule::decide`], the same
//! functions the in-process limiters run. Commands:
//!
//! - `RATECELL.CHECK <key> <algorithm> <limit> <period> [BURST b]
//!   [SUBWINDOWS n] [COST n] [AT now_ns]` → six integers.
//! - `RATECELL.CHECKALL [AT now_ns] LIMIT <key> <algorithm> <limit> <period>
//!   [options] [LIMIT ...]...` → `[admitted, [six]...]`, all or nothing.
//! - `CL.THROTTLE <key> <max_burst> <count> <period_s> [quantity]` →
//!   redis-cell's five integers.
//! - `RATECELL.LEASE <key> <algorithm> <limit> <period> [options] WANT <w>
//!   [EXPIRE d] [AT now_ns]` → `[units, expires_at_ns, retry_after_ns,
//!   limit, remaining]`: a grant a node spends locally (SPEC.md §8).
//! - `RATECELL.RESTORE <key> <state> [PXAT ms]`: writes a state; what
//!   replicas and the AOF receive instead of the commands above.
//!
//! Redis runs one command at a time, so a check reads, decides and writes
//! its key(s) with no other command in between.

//!
//! Every command and callback is a panic boundary ([`reply::boundary`]):
//! nothing a client sends or a stored byte holds can unwind into Redis.

#![warn(missing_docs, unsafe_op_in_unsafe_fn)]
// Unit tests cover the parsers; the commands run only inside a server.
#![cfg_attr(test, allow(dead_code))]

pub mod args;
#[cfg(feature = "floor")]
pub mod floor;
mod key;
pub mod lease;
mod reply;
pub mod throttle;
pub mod value;

use key::{Held, Key};
use ratecell::{Decision, state::Rule};
use redis_module::{Context, InfoContext, RedisError, RedisString, Status, raw};
use reply::Reply;
use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use value::{Shape, Value};

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

/// The INFO counters: requests checked, admitted and denied (a
/// `RATECELL.CHECKALL` counts once).
static CHECKS: AtomicU64 = AtomicU64::new(0);
static ADMITTED: AtomicU64 = AtomicU64::new(0);
static DENIED: AtomicU64 = AtomicU64::new(0);

fn tally(admitted: bool) {
    CHECKS.fetch_add(1, Relaxed);
    if admitted {
        ADMITTED.fetch_add(1, Relaxed);
    } else {
        DENIED.fetch_add(1, Relaxed);
    }
}

/// Runs a data type callback's body; a panic (a bug: the callbacks only
/// read values this module wrote) gives `fallback` instead of unwinding
/// into Redis.
fn guarded<T>(fallback: T, body: impl FnOnce() -> T) -> T {
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
fn log_io_error(rdb: *mut raw::RedisModuleIO, message: &str) {
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
    // SAFETY: "sb" takes a RedisModuleString and a buffer with its length;
    // Redis copies both before returning. The key's expiry is emitted by
    // Redis itself after this callback.
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

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A Redis string holding any bytes (`Context::create_string` goes through
/// a C string and refuses a NUL, which keys may contain).
fn bytes(data: &[u8]) -> RedisString {
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

fn err(message: String) -> RedisError {
    RedisError::String(message)
}

/// The six integers of a decision (SPEC.md §7): `-1` for a retry that can
/// never succeed, other values clamped to `i64`.
fn six(d: &Decision) -> [i64; 6] {
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
fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A wait as a reply's integer: `-1` for never (`u64::MAX`), else clamped.
fn or_never(v: u64) -> i64 {
    if v == u64::MAX { -1 } else { clamp(v) }
}

fn replicate_del(ctx: *mut raw::RedisModuleCtx, name: *mut raw::RedisModuleString) {
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
    let at = value.at();
    let ms = reset_after.div_ceil(1_000_000).max(1);
    key.expire((!at).then(|| Duration::from_millis(ms)))?;
    // SAFETY: the API table is filled once when the module loads.
    let replicate = unsafe { raw::RedisModule_Replicate }.expect("Replicate");
    BUFFER.with_borrow_mut(|buf| {
        buf.clear();
        value.encode_into(buf);
        // SAFETY: the format matches the arguments ("s": a RedisModuleString,
        // "b": a pointer and its length, "c": a C string, "l": a long long);
        // Redis copies them before returning.
        unsafe {
            if at {
                replicate(
                    ctx,
                    c"RATECELL.RESTORE".as_ptr(),
                    c"sb".as_ptr(),
                    name,
                    buf.as_ptr(),
                    buf.len(),
                );
            } else {
                let pxat = (t / 1_000_000).saturating_add(ms);
                replicate(
                    ctx,
                    c"RATECELL.RESTORE".as_ptr(),
                    c"sbcl".as_ptr(),
                    name,
                    buf.as_ptr(),
                    buf.len(),
                    c"PXAT".as_ptr(),
                    std::ffi::c_longlong::try_from(pxat).unwrap_or(std::ffi::c_longlong::MAX),
                );
            }
        }
    });
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
    let Held::Value(stored) = key.held(rule)? else {
        return Err(RedisError::Str("ERR the value just set is gone"));
    };
    publish(ctx, key, name, &stored, t, reset_after)
}

/// `RATECELL.CHECK`: one limit on one key, decided in place on the stored
/// value (no copy), written back only if it changed.
///
/// `t` is the request's time; `at` says whether a client gave it (`AT`):
/// then the state is kept without expiry.
fn check_one(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    name_bytes: &[u8],
    rule: &Rule,
    cost: u64,
    t: u64,
    at: bool,
) -> Result<Decision, RedisError> {
    let mut key = Key::open(ctx, name);
    let d = match key.held(rule)? {
        Held::Other(shape) => return Err(err(shape.admits(rule, name_bytes).unwrap_err())),
        Held::Value(mut v) => {
            let d = rule.decide(v.words_mut(), t, cost);
            if (d.allowed && cost > 0) || v.at() != at {
                v.set_at(at);
                if !at && rule.is_fresh_at(v.words(), t) {
                    key.delete();
                    replicate_del(ctx, name);
                } else {
                    publish(ctx, &mut key, name, &v, t, d.reset_after_ns)?;
                }
            }
            d
        }
        Held::Empty => {
            let mut words = vec![0; rule.words()];
            let d = rule.decide(&mut words, t, cost);
            if d.allowed && cost > 0 {
                let v = Value::new(Shape::of(rule), at, &words);
                store_new(ctx, &mut key, name, rule, v, t, d.reset_after_ns)?;
            }
            d
        }
    };
    tally(d.allowed);
    Ok(d)
}

/// One key's part of a `RATECELL.CHECKALL`: its open key, the words it held
/// (and their `AT` flag), and the words to write if the request is
/// admitted, under the last rule that decided them.
struct Work {
    key: Key,
    name: RedisString,
    rule: Rule,
    existed: Option<(Vec<u64>, bool)>,
    words: Vec<u64>,
}

/// Opens a limit's key and checks that it may be decided under the
/// limit's rule.
fn open(ctx: *mut raw::RedisModuleCtx, limit: &args::Limit<'_>) -> Result<Work, RedisError> {
    let name = bytes(limit.key);
    let mut key = Key::open(ctx, name.inner);
    let existed = match key.held(&limit.rule)? {
        Held::Empty => None,
        Held::Value(v) => Some((v.words().to_vec(), v.at())),
        Held::Other(shape) => {
            return Err(err(shape.admits(&limit.rule, limit.key).unwrap_err()));
        }
    };
    let words = existed
        .as_ref()
        .map_or_else(|| vec![0; limit.rule.words()], |(w, _)| w.clone());
    Ok(Work {
        key,
        name,
        rule: limit.rule,
        existed,
        words,
    })
}

/// Writes a decided state (or deletes a fresh one) and replicates the
/// result, never the command.
fn commit(ctx: *mut raw::RedisModuleCtx, w: Work, t: u64, at: bool) -> Result<(), RedisError> {
    let Work {
        mut key,
        name,
        rule,
        existed,
        words,
    } = w;
    if !at && rule.is_fresh_at(&words, t) {
        // Equivalent to fresh on the server's clock: hold nothing.
        if existed.is_some() {
            key.delete();
            replicate_del(ctx, name.inner);
        }
        return Ok(());
    }
    if existed.is_none() && words.iter().all(|&w| w == 0) {
        return Ok(()); // a denied request or a peek on a fresh key
    }
    // A state written with AT has no expiry; a request without AT ends that.
    let unchanged = existed
        .as_ref()
        .is_some_and(|(old, old_at)| *old == words && *old_at == at);
    if unchanged {
        return Ok(());
    }
    // A peek at the state to store gives its reset_after: when it becomes
    // equivalent to fresh.
    let reset_after = rule.decide(&mut words.clone(), t, 0).reset_after_ns;
    let value = Value::new(Shape::of(&rule), at, &words);
    store_new(ctx, &mut key, name.inner, &rule, value, t, reset_after)
}

/// Decides every limit of a request on its key, and stores the results only
/// if every limit admits.
fn run(
    ctx: *mut raw::RedisModuleCtx,
    req: args::Request<'_>,
) -> Result<(bool, Vec<Decision>), RedisError> {
    let t = req.at.unwrap_or_else(now_ns);
    let at = req.at.is_some();
    let mut works: Vec<Work> = Vec::with_capacity(req.limits.len());
    let mut decisions = Vec::with_capacity(req.limits.len());
    for limit in &req.limits {
        // A key named twice is decided on what the earlier limit left.
        let same = works.iter().position(|w| w.name.as_slice() == limit.key);
        let d = match same {
            Some(i) => {
                let w = &mut works[i];
                Shape::of(&w.rule)
                    .admits(&limit.rule, limit.key)
                    .map_err(err)?;
                w.rule = limit.rule;
                limit.rule.decide(&mut w.words, t, limit.cost)
            }
            None => {
                let mut w = open(ctx, limit)?;
                let d = limit.rule.decide(&mut w.words, t, limit.cost);
                works.push(w);
                d
            }
        };
        decisions.push(d);
    }
    let admitted = decisions.iter().all(|d| d.allowed);
    tally(admitted);
    if admitted {
        for w in works {
            commit(ctx, w, t, at)?;
        }
    } else {
        // Nothing is stored. A limit that would have admitted reports a
        // peek at its unchanged state, so `remaining` is what is left now.
        if req.limits.len() > 1 {
            for (l, d) in req.limits.iter().zip(decisions.iter_mut()) {
                if d.allowed {
                    let mut words = works
                        .iter()
                        .find(|w| w.name.as_slice() == l.key)
                        .and_then(|w| w.existed.as_ref())
                        .map_or_else(|| vec![0; l.rule.words()], |(w, _)| w.clone());
                    *d = l.rule.decide(&mut words, t, 0);
                }
            }
        }
        // A state written with AT, checked without: it now expires.
        if !at {
            for mut w in works {
                if let Some((old, true)) = w.existed.clone() {
                    w.words = old;
                    commit(ctx, w, t, false)?;
                }
            }
        }
    }
    Ok((admitted, decisions))
}

/// A Redis string's bytes, borrowed for as long as the command runs.
///
/// # Safety
/// `s` must be a valid string that outlives `'a` and is not modified.
unsafe fn slice<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    // SAFETY: the caller's promise; StringPtrLen returns the string's own
    // buffer and length.
    unsafe {
        let p = raw::RedisModule_StringPtrLen.expect("StringPtrLen")(s, &mut len);
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    }
}

/// The signature of a command as Redis calls it.
type RawCommand = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// A command's arguments: Redis's argv strings (the command name first)
/// and their bytes, borrowed for the command's duration.
struct Argv<'a> {
    /// The strings, as Redis passed them.
    pub strings: &'a [*mut raw::RedisModuleString],
    /// The bytes of every argument after the command name.
    pub words: &'a [&'a [u8]],
}

/// Runs a command body on Redis's own argv inside the panic boundary and
/// replies with what it returns. The words are borrowed slices, in a stack
/// array when they fit (every valid one-key call does), so the hot
/// commands allocate nothing for their arguments.
///
/// # Safety
/// `argv` holds `argc` valid strings for the duration of the call (Redis's
/// contract with a command function).
unsafe fn run_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    body: impl FnOnce(&Argv<'_>) -> Result<(), RedisError>,
) -> c_int {
    reply::boundary(ctx, || {
        const WORDS: usize = 16;
        // SAFETY: Redis's contract above.
        let strings =
            unsafe { std::slice::from_raw_parts(argv, usize::try_from(argc).unwrap_or(0)) };
        let rest = strings.get(1..).unwrap_or(&[]);
        let mut stack: [&[u8]; WORDS] = [&[]; WORDS];
        let heap: Vec<&[u8]>;
        let words: &[&[u8]] = if rest.len() <= WORDS {
            for (w, &s) in stack.iter_mut().zip(rest) {
                // SAFETY: argv's strings live until the command returns.
                *w = unsafe { slice(s) };
            }
            &stack[..rest.len()]
        } else {
            // SAFETY: as above.
            heap = rest.iter().map(|&s| unsafe { slice(s) }).collect();
            &heap
        };
        if let Err(e) = body(&Argv { strings, words }) {
            reply::error(ctx, &e);
        }
        raw::Status::Ok as c_int
    })
}

/// `RATECELL.CHECK <key> <algorithm> <limit> <period> [options]`.
unsafe extern "C" fn check_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let body = |a: &Argv<'_>| {
        if a.words.len() < 4 {
            return Err(RedisError::WrongArity);
        }
        let (rule, cost, at) = parse_cached(a.words)?;
        let t = at.unwrap_or_else(now_ns);
        let d = check_one(ctx, a.strings[1], a.words[0], &rule, cost, t, at.is_some())?;
        reply::send_ints(ctx, &six(&d));
        Ok(())
    };
    // SAFETY: Redis calls a command with argc valid arguments.
    unsafe { run_command(ctx, argv, argc, body) }
}

/// `CL.THROTTLE <key> <max_burst> <count> <period_s> [quantity]`:
/// redis-cell's command and answers ([`throttle`]).
unsafe extern "C" fn throttle_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let body = |a: &Argv<'_>| {
        let answer = throttle(ctx, a)?;
        reply::send_ints(ctx, &answer);
        Ok(())
    };
    // SAFETY: Redis calls a command with argc valid arguments.
    unsafe { run_command(ctx, argv, argc, body) }
}

/// `RATECELL.CHECKALL [AT now_ns] LIMIT ... [LIMIT ...]`.
unsafe extern "C" fn check_all_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let body = |a: &Argv<'_>| {
        // SAFETY: the running command's context.
        if unsafe { raw::RedisModule_IsKeysPositionRequest.expect("IsKeysPositionRequest")(ctx) }
            != 0
        {
            for pos in args::check_all_key_positions(a.words) {
                // SAFETY: as above; positions count the command name.
                unsafe {
                    raw::RedisModule_KeyAtPos.expect("KeyAtPos")(
                        ctx,
                        c_int::try_from(pos).unwrap_or(c_int::MAX),
                    );
                }
            }
            return Ok(());
        }
        if a.words.is_empty() {
            return Err(RedisError::WrongArity);
        }
        let req = args::check_all(a.words).map_err(err)?;
        let (admitted, decisions) = run(ctx, req)?;
        let mut out = vec![Reply::Int(i64::from(admitted))];
        out.extend(
            decisions
                .iter()
                .map(|d| Reply::Array(six(d).map(Reply::Int).into())),
        );
        reply::send(ctx, &Reply::Array(out));
        Ok(())
    };
    // SAFETY: Redis calls a command with argc valid arguments.
    unsafe { run_command(ctx, argv, argc, body) }
}

/// `RATECELL.RESTORE <key> <state> [PXAT <unix_ms>]`.
unsafe extern "C" fn restore_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let body = |a: &Argv<'_>| {
        restore(ctx, a)?;
        reply::send(ctx, &Reply::Ok);
        Ok(())
    };
    // SAFETY: Redis calls a command with argc valid arguments.
    unsafe { run_command(ctx, argv, argc, body) }
}

/// `RATECELL.LEASE <key> <algorithm> <limit> <period> [options] WANT <w>
/// [EXPIRE <duration>] [AT <now_ns>] [CHARGE <at_ns> <units>]...` (SPEC.md
/// §8): the charges added to the key's state, then a grant of up to `w`
/// units applied to it as a check of its cost; replies `[units,
/// expires_at_ns, retry_after_ns, limit, remaining]`.
unsafe extern "C" fn lease_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let body = |a: &Argv<'_>| {
        if a.words.len() < 6 {
            return Err(RedisError::WrongArity);
        }
        let req = args::lease(a.words).map_err(err)?;
        let rule = req.limit.rule;
        lease::leasable(rule.config().algorithm).map_err(err)?;
        let t = req.at.unwrap_or_else(now_ns);
        let mut work = open(ctx, &req.limit)?;
        // The node's own admissions first, so the grant is decided on books
        // that hold them (SPEC §8, the `local` policy).
        for c in &req.charges {
            rule.charge(&mut work.words, c.at_ns, c.units);
        }
        let g = ratecell::lease::grant(&rule, &mut work.words, t, req.want, req.expire_ns);
        // Stored, replicated and given its expiry as a check's state (at
        // `t`, which is the server's clock without AT).
        commit(ctx, work, t, req.at.is_some())?;
        if g.units > 0 {
            tally(true);
        }
        let d = six(&g.decision);
        reply::send_ints(
            ctx,
            &[
                clamp(g.units),
                clamp(g.expires_at_ns),
                or_never(g.retry_after_ns),
                d[1],
                d[2],
            ],
        );
        Ok(())
    };
    // SAFETY: Redis calls a command with argc valid arguments.
    unsafe { run_command(ctx, argv, argc, body) }
}

/// A `RATECELL.CHECK`'s words after the key, each as its length (`u64`,
/// little-endian) and its bytes, and what they parse to.
struct Parsed {
    words: Vec<u8>,
    rule: Rule,
    cost: u64,
    at: Option<u64>,
}

impl Parsed {
    fn same_words(&self, words: &[&[u8]]) -> bool {
        let mut rest = self.words.as_slice();
        for w in words {
            let Some((len, tail)) = rest.split_first_chunk::<8>() else {
                return false;
            };
            let len = u64::from_le_bytes(*len) as usize;
            if len != w.len() || tail.get(..len) != Some(*w) {
                return false;
            }
            rest = &tail[len..];
        }
        rest.is_empty()
    }
}

/// Parses a `RATECELL.CHECK`'s words (the key first), or reuses the last
/// parse when the words after the key are the same bytes: a client sends
/// the same limit on every call, and parsing it (algorithm name, numbers,
/// period units, the configuration's validation) costs more than the
/// comparison.
fn parse_cached(words: &[&[u8]]) -> Result<(Rule, u64, Option<u64>), RedisError> {
    thread_local! {
        // Commands run on Redis's main thread: one entry.
        static LAST: std::cell::RefCell<Option<Parsed>> = const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| {
        if let Some(p) = last.as_ref().filter(|p| p.same_words(&words[1..])) {
            return Ok((p.rule, p.cost, p.at));
        }
        let (limit, at) = args::check_single(words).map_err(err)?;
        let mut bytes = last.take().map(|p| p.words).unwrap_or_default();
        bytes.clear();
        for w in &words[1..] {
            bytes.extend_from_slice(&(w.len() as u64).to_le_bytes());
            bytes.extend_from_slice(w);
        }
        *last = Some(Parsed {
            words: bytes,
            rule: limit.rule,
            cost: limit.cost,
            at,
        });
        Ok((limit.rule, limit.cost, at))
    })
}

/// `CL.THROTTLE`: redis-cell's rule ([`throttle::Throttle`]) on a GCRA
/// state, so `RATECELL.CHECK <key> gcra <count> <period>s` reads the same
/// key.
fn throttle(ctx: *mut raw::RedisModuleCtx, a: &Argv<'_>) -> Result<[i64; 5], RedisError> {
    let words = a.words;
    if !(4..=5).contains(&words.len()) {
        return Err(RedisError::WrongArity);
    }
    let max_burst = args::number(words[1], "max_burst", "0..=4294967294").map_err(err)?;
    let count = args::number(words[2], "count", "1..=4294967295").map_err(err)?;
    let period_s = args::number(words[3], "period", "1..=31622400 (seconds)").map_err(err)?;
    let quantity = match words.get(4) {
        Some(q) => args::number(q, "quantity", "0..=2^64-1").map_err(err)?,
        None => 1,
    };
    let limit = throttle::Throttle::new(max_burst, count, period_s).map_err(err)?;
    // The key's shape: a GCRA state of this period (the limit only names
    // the shape; CL.THROTTLE's own rule decides).
    let shape_rule = args::rule(ratecell::Config::new(
        ratecell::Algorithm::Gcra,
        1,
        period_s * 1_000_000_000,
    ))
    .map_err(err)?;
    let name = a.strings[1];
    let t = now_ns();
    let mut key = Key::open(ctx, name);
    let (answer, stored) = match key.held(&shape_rule)? {
        Held::Other(shape) => {
            return Err(err(shape.admits(&shape_rule, words[0]).unwrap_err()));
        }
        Held::Value(mut v) => {
            let old = v.words()[0];
            let (answer, stored) = limit.decide(Some(old), t, quantity);
            // A peek stores what it read: nothing to write.
            let stored = stored.filter(|&tat| tat != old || v.at());
            if let Some(tat) = stored {
                v.words_mut()[0] = tat;
                v.set_at(false);
            }
            (answer, stored.map(|tat| (tat, Some(v))))
        }
        Held::Empty => {
            let (answer, stored) = limit.decide(None, t, quantity);
            (answer, stored.map(|tat| (tat, None)))
        }
    };
    if let Some((tat, existing)) = stored {
        if tat <= t {
            // Nothing ahead of now: as if new.
            if existing.is_some() {
                key.delete();
                replicate_del(ctx, name);
            }
        } else {
            let reset_after = tat - t;
            match existing {
                Some(v) => publish(ctx, &mut key, name, &v, t, reset_after)?,
                None => {
                    let v = Value::new(Shape::of(&shape_rule), false, &[tat]);
                    store_new(ctx, &mut key, name, &shape_rule, v, t, reset_after)?;
                }
            }
        }
    }
    tally(!answer.limited);
    Ok(answer.reply())
}

/// `RATECELL.RESTORE <key> <state> [PXAT <unix_ms>]`: sets a key to an
/// encoded state (the form replicas and the AOF receive), validated first.
fn restore(ctx: *mut raw::RedisModuleCtx, a: &Argv<'_>) -> Result<(), RedisError> {
    let words = a.words;
    if words.len() != 2 && words.len() != 4 {
        return Err(RedisError::WrongArity);
    }
    let value = Value::from_bytes(words[1]).map_err(|e| err(format!("ERR state: {e}")))?;
    let pxat = match words.get(2..4) {
        Some([px, ms]) if px.eq_ignore_ascii_case(b"PXAT") => {
            Some(args::number(ms, "PXAT", "0..=2^64-1 (UNIX ms)").map_err(err)?)
        }
        Some(_) => return Err(err("ERR expected PXAT <unix_ms>".into())),
        None => None,
    };
    let mut key = Key::open(ctx, a.strings[1]);
    key.raw_value()?;
    let now_ms = now_ns() / 1_000_000;
    match pxat {
        Some(ms) if ms <= now_ms && !is_loading(ctx) => key.delete(),
        _ => {
            key.set(value)?;
            key.expire(pxat.map(|ms| Duration::from_millis(ms.saturating_sub(now_ms))))?;
        }
    }
    // SAFETY: the running command's context.
    unsafe { raw::RedisModule_ReplicateVerbatim.expect("ReplicateVerbatim")(ctx) };
    Ok(())
}

fn is_loading(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: the running command's context.
    let flags = unsafe { raw::RedisModule_GetContextFlags.expect("GetContextFlags")(ctx) };
    flags & raw::REDISMODULE_CTX_FLAGS_LOADING as c_int != 0
}

fn info(ctx: &InfoContext, _for_crash_report: bool) {
    let _ = ctx
        .builder()
        .add_section("stats")
        .field("checks", CHECKS.load(Relaxed))
        .and_then(|s| s.field("admitted", ADMITTED.load(Relaxed)))
        .and_then(|s| s.field("denied", DENIED.load(Relaxed)))
        .and_then(|s| s.build_section())
        .and_then(|b| b.build_info());
}

/// Registers the commands, each on Redis's own API behind the panic
/// boundary ([`run_command`]).
fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // A short or damaged RDB value (a file, or a DUMP payload given to
    // RESTORE) makes Redis panic in the loader unless the module says it
    // handles IO errors: rdb_load then sees the error and refuses the value.
    // SAFETY: called from OnLoad with its context.
    unsafe {
        raw::RedisModule_SetModuleOptions.expect("SetModuleOptions")(
            ctx.get_raw(),
            raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int,
        );
    }
    let commands: [(&std::ffi::CStr, RawCommand, &std::ffi::CStr); 5] = [
        (c"ratecell.check", check_command, c"write deny-oom fast"),
        (c"cl.throttle", throttle_command, c"write deny-oom fast"),
        (
            c"ratecell.checkall",
            check_all_command,
            c"write deny-oom getkeys-api",
        ),
        (c"ratecell.restore", restore_command, c"write deny-oom"),
        (c"ratecell.lease", lease_command, c"write deny-oom fast"),
    ];
    #[cfg(feature = "floor")]
    if floor::FLOOR_TYPE.create_data_type(ctx.get_raw()).is_err() {
        return Status::Err;
    }
    #[cfg(feature = "floor")]
    let commands = commands.into_iter().chain(floor::COMMANDS);
    for (name, command, flags) in commands {
        // SAFETY: called from OnLoad with its context; the strings are
        // static; the key is argument 1.
        let status = unsafe {
            raw::RedisModule_CreateCommand.expect("CreateCommand")(
                ctx.get_raw(),
                name.as_ptr(),
                Some(command),
                flags.as_ptr(),
                1,
                1,
                1,
            )
        };
        if status == raw::Status::Err as c_int {
            return Status::Err;
        }
    }
    Status::Ok
}

/// The module's entry points (`RedisModule_OnLoad`), generated. Left out
/// of unit tests: it installs Redis's allocator, which exists only inside
/// a server.
#[cfg(not(test))]
#[allow(missing_docs)]
mod entry {
    use super::*;
    // Named by the macro's expansion.
    use redis_module::RedisResult;

    redis_module::redis_module! {
        name: "ratecell",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [RATECELL_TYPE],
        init: init,
        info: info,
        commands: [],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_parse_cache_matches_only_the_same_words() {
        let words: [&[u8]; 4] = [b"k", b"gcra", b"10", b"1s"];
        let (rule, cost, at) = parse_cached(&words).unwrap();
        assert_eq!((rule.config().limit, cost, at), (10, 1, None));
        // Another key, the same limit: the cached parse.
        let other: [&[u8]; 4] = [b"j", b"gcra", b"10", b"1s"];
        assert_eq!(parse_cached(&other).unwrap().0.config().limit, 10);
        // The same bytes split differently are other words.
        let p = Parsed {
            words: Vec::new(),
            rule,
            cost,
            at,
        };
        assert!(p.same_words(&[]));
        let mut p = p;
        p.words.extend(2u64.to_le_bytes());
        p.words.extend(b"ab");
        p.words.extend(1u64.to_le_bytes());
        p.words.extend(b"c");
        assert!(p.same_words(&[b"ab", b"c"]));
        assert!(!p.same_words(&[b"a", b"bc"]));
        assert!(!p.same_words(&[b"ab"]));
        assert!(!p.same_words(&[b"ab", b"c", b""]));
        // A changed limit, an added option, an error: parsed again.
        let (rule, cost, at) = parse_cached(&[b"k", b"gcra", b"20", b"1s", b"COST", b"3"]).unwrap();
        assert_eq!((rule.config().limit, cost, at), (20, 3, None));
        let e = parse_cached(&[b"k", b"gcra", b"0", b"1s"]).unwrap_err();
        assert!(matches!(e, RedisError::String(m) if m.contains("limit")));
        let (rule, _, at) = parse_cached(&[b"k", b"gcra", b"20", b"1s", b"AT", b"5"]).unwrap();
        assert_eq!((rule.config().limit, at), (20, Some(5)));
    }
}

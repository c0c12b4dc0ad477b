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
//! - `RATECELL.RESTORE <key> <state> [PXAT ms]`: writes a state; what
//!   replicas and the AOF receive instead of the commands above.
//!
//! Redis runs one command at a time, so a check reads, decides and writes
//! its key(s) with no other command in between.

#![warn(missing_docs, unsafe_op_in_unsafe_fn)]
// Unit tests cover the parsers; the commands run only inside a server.
#![cfg_attr(test, allow(dead_code))]

pub mod args;
#[cfg(feature = "floor")]
pub mod floor;
pub mod stored;

use args::Limit;
use ratecell::{Algorithm, Config, Decision};
use redis_module::{
    Context, InfoContext, RedisError, RedisResult, RedisString, RedisValue, Status,
    key::RedisKeyWritable, native_types::RedisType, raw,
};
use std::ffi::{CString, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use stored::Stored;

/// The data type: 9 characters, as Redis requires; the encoding version is
/// [`stored::ENCODING`].
pub static RATECELL_TYPE: RedisType = RedisType::new(
    "ratecell1",
    stored::ENCODING as i32,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        free: Some(free),
        mem_usage: Some(mem_usage),
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
    },
);

/// The INFO counters: requests checked, admitted and denied (a
/// `RATECELL.CHECKALL` counts once).
static CHECKS: AtomicU64 = AtomicU64::new(0);
static ADMITTED: AtomicU64 = AtomicU64::new(0);
static DENIED: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn free(value: *mut c_void) {
    // SAFETY: Redis hands back the pointer set_value boxed, once.
    drop(unsafe { Box::from_raw(value.cast::<Stored>()) });
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: a value of this type is always a boxed Stored.
    let s = unsafe { &*value.cast::<Stored>() };
    std::mem::size_of::<Stored>() + 8 * s.words.capacity()
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: a value of this type is always a boxed Stored.
    let s = unsafe { &*value.cast::<Stored>() };
    for v in s.integers() {
        raw::save_unsigned(rdb, v);
    }
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    if encver as u64 != stored::ENCODING {
        return std::ptr::null_mut();
    }
    match Stored::from_integers(|| raw::load_unsigned(rdb).ok()) {
        Ok(s) => Box::into_raw(Box::new(s)).cast(),
        Err(_) => std::ptr::null_mut(),
    }
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: a value of this type is always a boxed Stored.
    let bytes = unsafe { &*value.cast::<Stored>() }.to_bytes();
    let cmd = CString::new("RATECELL.RESTORE").expect("no NUL");
    let fmt = CString::new("sb").expect("no NUL");
    // SAFETY: "sb" takes a RedisModuleString and a buffer with its length;
    // Redis copies both before returning. The key's expiry is emitted by
    // Redis itself after this callback.
    unsafe {
        raw::RedisModule_EmitAOF.expect("EmitAOF")(
            aof,
            cmd.as_ptr(),
            fmt.as_ptr(),
            key,
            bytes.as_ptr(),
            bytes.len(),
        );
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A Redis string holding any bytes (`Context::create_string` goes through
/// a C string and refuses a NUL, which states and keys may contain).
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

fn reply(d: &Decision) -> RedisValue {
    let never = |v: u64| if v == u64::MAX { -1 } else { v as i64 };
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    RedisValue::Array(vec![
        RedisValue::Integer(i64::from(d.allowed)),
        RedisValue::Integer(clamp(d.limit)),
        RedisValue::Integer(clamp(d.remaining)),
        RedisValue::Integer(never(d.retry_after_ns)),
        RedisValue::Integer(clamp(d.reset_after_ns)),
        RedisValue::Integer(clamp(d.wait_ns)),
    ])
}

/// One key's part of a request: its open key, the value it held, and the
/// value to write if the request is admitted.
struct Work {
    key: RedisKeyWritable,
    name: RedisString,
    existed: Option<Stored>,
    next: Stored,
}

/// Opens a limit's key and checks that it may be decided under the limit's
/// rule.
fn open(ctx: &Context, limit: &Limit<'_>, at: bool) -> Result<Work, RedisError> {
    let name = bytes(limit.key);
    let key = ctx.open_key_writable(&name);
    let existed = key
        .get_value::<Stored>(&RATECELL_TYPE)
        .map_err(|_| RedisError::WrongType)?
        .cloned();
    if let Some(s) = &existed {
        s.check_compatible(&limit.rule, limit.key).map_err(err)?;
    }
    let words = match &existed {
        Some(s) => s.words.clone(),
        None => vec![0; limit.rule.words()],
    };
    Ok(Work {
        key,
        name,
        next: Stored {
            config: *limit.rule.config(),
            at,
            words,
        },
        existed,
    })
}

/// Writes a decided state (or deletes a fresh one) and replicates the
/// result, never the command.
fn commit(ctx: &Context, w: Work, t: u64) -> RedisResult<()> {
    let Work {
        key,
        name,
        existed,
        next,
    } = w;
    let rule = args::rule(next.config).map_err(err)?;
    let changed = existed.as_ref() != Some(&next);
    if !next.at && rule.is_fresh_at(&next.words, t) {
        // Equivalent to fresh on the server's clock: hold nothing.
        if existed.is_some() {
            key.delete()?;
            ctx.replicate("DEL", &[&name]);
        }
        return Ok(());
    }
    if existed.is_none() && next.words.iter().all(|&w| w == 0) {
        return Ok(()); // a denied request or a peek on a fresh key
    }
    // A state written with AT has no expiry; a request without AT ends that.
    let stale_expiry = !next.at && existed.as_ref().is_some_and(|s| s.at);
    if !changed && !stale_expiry {
        return Ok(());
    }
    let at = next.at;
    // A peek at the state to store gives its reset_after: when it becomes
    // equivalent to fresh.
    let reset_after = rule.decide(&mut next.words.clone(), t, 0).reset_after_ns;
    key.set_value(&RATECELL_TYPE, next)?;
    let stored = key
        .get_value::<Stored>(&RATECELL_TYPE)?
        .expect("the value just set");
    publish(ctx, &key, name.inner, stored, t, at, reset_after)
}

/// Gives a stored state its expiry (none for an `AT` state; else when it
/// becomes equivalent to fresh: `reset_after` from `t`, rounded up to
/// Redis's milliseconds) and replicates it as `RATECELL.RESTORE`.
fn publish(
    ctx: &Context,
    key: &RedisKeyWritable,
    name: *mut raw::RedisModuleString,
    stored: &Stored,
    t: u64,
    at: bool,
    reset_after: u64,
) -> RedisResult<()> {
    thread_local! {
        // Commands run on Redis's main thread: one buffer, reused.
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let cmd = c"RATECELL.RESTORE";
    // SAFETY: the API table is filled once when the module loads and only
    // read afterwards.
    let replicate = unsafe { raw::RedisModule_Replicate }.expect("Replicate");
    if at {
        key.remove_expire()?;
    } else {
        let ms = reset_after.div_ceil(1_000_000).max(1);
        key.set_expire(Duration::from_millis(ms))?;
    }
    BUFFER.with_borrow_mut(|buf| {
        buf.clear();
        stored.encode_into(buf);
        // SAFETY: the format matches the arguments ("s": a RedisModuleString,
        // "b": a pointer and its length, "c": a C string, "l": a long long);
        // Redis copies them before returning.
        unsafe {
            if at {
                replicate(
                    ctx.get_raw(),
                    cmd.as_ptr(),
                    c"sb".as_ptr(),
                    name,
                    buf.as_ptr(),
                    buf.len(),
                );
            } else {
                let ms = reset_after.div_ceil(1_000_000).max(1);
                let pxat = (t / 1_000_000 + ms) as std::ffi::c_longlong;
                replicate(
                    ctx.get_raw(),
                    cmd.as_ptr(),
                    c"sbcl".as_ptr(),
                    name,
                    buf.as_ptr(),
                    buf.len(),
                    c"PXAT".as_ptr(),
                    pxat,
                );
            }
        }
    });
    Ok(())
}

/// `RATECELL.CHECK` and `CL.THROTTLE`: one limit on one key, decided in
/// place on the stored value (no copy), written back only if it changed.
fn check_one(
    ctx: &Context,
    name: *mut raw::RedisModuleString,
    name_bytes: &[u8],
    rule: &ratecell::state::Rule,
    cost: u64,
    at: Option<u64>,
) -> Result<Decision, RedisError> {
    let t = at.unwrap_or_else(now_ns);
    // Borrowed from argv, not retained: ManuallyDrop keeps it unreleased.
    let borrowed = std::mem::ManuallyDrop::new(RedisString::from_redis_module_string(
        std::ptr::null_mut(),
        name,
    ));
    let key = ctx.open_key_writable(&borrowed);
    let stored = key
        .get_value::<Stored>(&RATECELL_TYPE)
        .map_err(|_| RedisError::WrongType)?;
    let config = *rule.config();
    let d = match stored {
        Some(s) => {
            s.check_compatible(rule, name_bytes).map_err(err)?;
            let d = rule.decide(&mut s.words, t, cost);
            let wrote = d.allowed && cost > 0;
            if wrote || s.config != config || s.at != at.is_some() {
                s.config = config;
                s.at = at.is_some();
                if !s.at && rule.is_fresh_at(&s.words, t) {
                    key.delete()?;
                    // SAFETY: "s" takes one RedisModuleString.
                    unsafe {
                        raw::RedisModule_Replicate.expect("Replicate")(
                            ctx.get_raw(),
                            c"DEL".as_ptr(),
                            c"s".as_ptr(),
                            name,
                        );
                    }
                } else {
                    publish(ctx, &key, name, s, t, s.at, d.reset_after_ns)?;
                }
            }
            d
        }
        None => {
            let mut words = vec![0; rule.words()];
            let d = rule.decide(&mut words, t, cost);
            if d.allowed && cost > 0 {
                key.set_value(
                    &RATECELL_TYPE,
                    Stored {
                        config,
                        at: at.is_some(),
                        words,
                    },
                )?;
                let s = key
                    .get_value::<Stored>(&RATECELL_TYPE)?
                    .expect("the value just set");
                publish(ctx, &key, name, s, t, at.is_some(), d.reset_after_ns)?;
            }
            d
        }
    };
    CHECKS.fetch_add(1, Relaxed);
    if d.allowed {
        ADMITTED.fetch_add(1, Relaxed);
    } else {
        DENIED.fetch_add(1, Relaxed);
    }
    Ok(d)
}

/// Decides every limit of a request on its key, and stores the results only
/// if every limit admits.
fn run(ctx: &Context, req: args::Request<'_>) -> Result<(bool, Vec<Decision>), RedisError> {
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
                let prev = Stored {
                    config: w.next.config,
                    at,
                    words: w.next.words.clone(),
                };
                prev.check_compatible(&limit.rule, limit.key).map_err(err)?;
                w.next.config = *limit.rule.config();
                limit.rule.decide(&mut w.next.words, t, limit.cost)
            }
            None => {
                let mut w = open(ctx, limit, at)?;
                let d = limit.rule.decide(&mut w.next.words, t, limit.cost);
                works.push(w);
                d
            }
        };
        decisions.push(d);
    }
    let admitted = decisions.iter().all(|d| d.allowed);
    CHECKS.fetch_add(1, Relaxed);
    if admitted {
        ADMITTED.fetch_add(1, Relaxed);
        for w in works {
            commit(ctx, w, t)?;
        }
    } else {
        DENIED.fetch_add(1, Relaxed);
        // Nothing is stored. A limit that would have admitted reports a
        // peek at its unchanged state, so `remaining` is what is left now.
        if req.limits.len() > 1 {
            for (l, d) in req.limits.iter().zip(decisions.iter_mut()) {
                if d.allowed {
                    let mut words = works
                        .iter()
                        .find(|w| w.name.as_slice() == l.key)
                        .and_then(|w| w.existed.as_ref())
                        .map_or_else(|| vec![0; l.rule.words()], |s| s.words.clone());
                    *d = l.rule.decide(&mut words, t, 0);
                }
            }
        }
        // A state written with AT, checked without: it now expires.
        if !at {
            for mut w in works {
                if let Some(old) = w.existed.clone().filter(|s| s.at) {
                    w.next.words = old.words;
                    commit(ctx, w, t)?;
                }
            }
        }
    }
    Ok((admitted, decisions))
}

fn strs(args: &[RedisString]) -> Vec<&[u8]> {
    args.iter().skip(1).map(RedisString::as_slice).collect()
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

/// The signature of a command registered without the crate's wrapper.
type RawCommand = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// A one-key command's body: the context, the key as Redis passed it, and
/// every argument after the command name (the key first); N integers back.
type OneKey<const N: usize> =
    fn(&Context, *mut raw::RedisModuleString, &[&[u8]]) -> Result<[i64; N], RedisError>;

/// Runs a one-key command on Redis's own argv and replies with integers.
///
/// `RATECELL.CHECK` and `CL.THROTTLE` skip redis-module's command wrapper,
/// which retains every argument into a new `Vec<RedisString>` and builds
/// the reply as a vector of values: three allocations and a retain/release
/// per argument on a command whose decision costs less than that. Here the
/// words are borrowed slices in a stack array and the reply is written
/// directly.
///
/// # Safety
/// `argv` holds `argc` valid strings for the duration of the call (Redis's
/// contract with a command function).
unsafe fn run_raw<const N: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    command: OneKey<N>,
) -> c_int {
    const WORDS: usize = 16;
    let context = Context::new(ctx);
    // SAFETY: Redis's contract above.
    let argv = unsafe { std::slice::from_raw_parts(argv, usize::try_from(argc).unwrap_or(0)) };
    let result = match argv.len() {
        0 | 1 => Err(RedisError::WrongArity),
        // Every valid call fits the stack array; a longer one is refused
        // by the parser, with the word it names.
        n if n <= WORDS + 1 => {
            let mut words: [&[u8]; WORDS] = [&[]; WORDS];
            for (w, &s) in words.iter_mut().zip(&argv[1..]) {
                // SAFETY: argv's strings live until the command returns.
                *w = unsafe { slice(s) };
            }
            command(&context, argv[1], &words[..n - 1])
        }
        _ => {
            // SAFETY: as above.
            let words: Vec<&[u8]> = argv[1..].iter().map(|&s| unsafe { slice(s) }).collect();
            command(&context, argv[1], &words)
        }
    };
    match result {
        Ok(values) => {
            // SAFETY: a reply of N integers to the calling client, N
            // announced first.
            unsafe {
                raw::RedisModule_ReplyWithArray.expect("ReplyWithArray")(
                    ctx,
                    N as std::ffi::c_long,
                );
                for v in values {
                    raw::RedisModule_ReplyWithLongLong.expect("ReplyWithLongLong")(ctx, v);
                }
            }
            raw::Status::Ok as c_int
        }
        Err(e) => context.reply(Err(e)) as c_int,
    }
}

/// The six integers of a decision (SPEC.md §7): `-1` for a retry that can
/// never succeed, other values clamped to `i64`.
fn six(d: &Decision) -> [i64; 6] {
    let never = |v: u64| if v == u64::MAX { -1 } else { v as i64 };
    let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    [
        i64::from(d.allowed),
        clamp(d.limit),
        clamp(d.remaining),
        never(d.retry_after_ns),
        clamp(d.reset_after_ns),
        clamp(d.wait_ns),
    ]
}

unsafe extern "C" fn check_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis calls a command with argc valid arguments.
    unsafe { run_raw(ctx, argv, argc, check) }
}

unsafe extern "C" fn throttle_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis calls a command with argc valid arguments.
    unsafe { run_raw(ctx, argv, argc, throttle) }
}

fn check(
    ctx: &Context,
    name: *mut raw::RedisModuleString,
    words: &[&[u8]],
) -> Result<[i64; 6], RedisError> {
    if words.len() < 4 {
        return Err(RedisError::WrongArity);
    }
    let (rule, cost, at) = parse_cached(words)?;
    let d = check_one(ctx, name, words[0], &rule, cost, at)?;
    Ok(six(&d))
}

/// A `RATECELL.CHECK`'s words after the key, each as its length (`u64`,
/// little-endian) and its bytes, and what they parse to.
struct Parsed {
    words: Vec<u8>,
    rule: ratecell::state::Rule,
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
/// the same limit on every call, and the parser (algorithm name, numbers,
/// period units, the configuration's validation) was a tenth of the
/// module's own instructions per check.
fn parse_cached(words: &[&[u8]]) -> Result<(ratecell::state::Rule, u64, Option<u64>), RedisError> {
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

fn check_all(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let words = strs(&args);
    if ctx.is_keys_position_request() {
        for pos in args::check_all_key_positions(&words) {
            ctx.key_at_pos(pos as i32);
        }
        return Ok(RedisValue::NoReply);
    }
    if words.is_empty() {
        return Err(RedisError::WrongArity);
    }
    let req = args::check_all(&words).map_err(err)?;
    let (admitted, decisions) = run(ctx, req)?;
    let mut out = vec![RedisValue::Integer(i64::from(admitted))];
    out.extend(decisions.iter().map(reply));
    Ok(RedisValue::Array(out))
}

/// redis-cell's `CL.THROTTLE`: GCRA with `burst = max_burst + 1`, `count`
/// per `period` seconds; the reply is `[limited, limit, remaining,
/// retry_after_s (-1 when admitted), reset_after_s]`, seconds rounded up.
fn throttle(
    ctx: &Context,
    name: *mut raw::RedisModuleString,
    words: &[&[u8]],
) -> Result<[i64; 5], RedisError> {
    if !(4..=5).contains(&words.len()) {
        return Err(RedisError::WrongArity);
    }
    let max = ratecell::MAX_LIMIT;
    let max_burst = args::number(words[1], "max_burst", "0..=4294967294").map_err(err)?;
    let count = args::number(words[2], "count", "1..=4294967295").map_err(err)?;
    let period_s = args::number(words[3], "period", "1..=31622400 (seconds)").map_err(err)?;
    let quantity = match words.get(4) {
        Some(q) => args::number(q, "quantity", "0..=2^64-1").map_err(err)?,
        None => 1,
    };
    if max_burst >= max {
        return Err(err(format!(
            "ERR max_burst must be in 0..={}, got {max_burst}",
            max - 1
        )));
    }
    if count == 0 {
        return Err(err(format!("ERR count must be in 1..={max}, got 0")));
    }
    let period_ns = period_s
        .checked_mul(1_000_000_000)
        .filter(|p| (1_000_000_000..=ratecell::MAX_PERIOD_NS).contains(p))
        .ok_or_else(|| {
            err(format!(
                "ERR period must be in 1..=31622400 (seconds), got {period_s}"
            ))
        })?;
    let config = Config::new(Algorithm::Gcra, count, period_ns).burst(max_burst + 1);
    let rule = args::rule(config).map_err(err)?;
    let d = check_one(ctx, name, words[0], &rule, quantity, None)?;
    let secs = |ns: u64| i64::try_from(ns.div_ceil(1_000_000_000)).unwrap_or(i64::MAX);
    Ok([
        i64::from(!d.allowed),
        d.limit as i64,
        d.remaining as i64,
        // -1 when admitted (redis-cell's answer), and when it never can be.
        if d.allowed || d.retry_after_ns == u64::MAX {
            -1
        } else {
            secs(d.retry_after_ns)
        },
        secs(d.reset_after_ns),
    ])
}

/// `RATECELL.RESTORE <key> <state> [PXAT <unix_ms>]`: sets a key to an
/// encoded state (the form replicas and the AOF receive).
fn restore(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    let words = strs(&args);
    if words.len() != 2 && words.len() != 4 {
        return Err(RedisError::WrongArity);
    }
    let value = Stored::from_bytes(words[1]).map_err(|e| err(format!("ERR state: {e}")))?;
    let pxat = match words.get(2..4) {
        Some([px, ms]) if px.eq_ignore_ascii_case(b"PXAT") => {
            Some(args::number(ms, "PXAT", "0..=2^64-1 (UNIX ms)").map_err(err)?)
        }
        Some(_) => return Err(err("ERR expected PXAT <unix_ms>".into())),
        None => None,
    };
    let key = ctx.open_key_writable(&args[1]);
    if key.get_value::<Stored>(&RATECELL_TYPE).is_err() {
        return Err(RedisError::WrongType);
    }
    let now_ms = now_ns() / 1_000_000;
    match pxat {
        Some(ms) if ms <= now_ms && !is_loading(ctx) => {
            key.delete()?;
        }
        _ => {
            key.set_value(&RATECELL_TYPE, value)?;
            match pxat {
                Some(ms) => {
                    key.set_expire(Duration::from_millis(ms.saturating_sub(now_ms).max(1)))?
                }
                None => key.remove_expire()?,
            };
        }
    }
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

fn is_loading(ctx: &Context) -> bool {
    ctx.get_flags()
        .contains(redis_module::ContextFlags::LOADING)
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

/// Registers the two one-key commands without the crate's wrapper (see
/// [`run_raw`]); the others go through `redis_module!`.
fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    let commands: [(&std::ffi::CStr, RawCommand); 2] = [
        (c"ratecell.check", check_command),
        (c"cl.throttle", throttle_command),
    ];
    #[cfg(feature = "floor")]
    let commands = commands.into_iter().chain(floor::COMMANDS);
    for (name, command) in commands {
        // SAFETY: called from OnLoad with its context; the strings are
        // static; the key is argument 1.
        let status = unsafe {
            raw::RedisModule_CreateCommand.expect("CreateCommand")(
                ctx.get_raw(),
                name.as_ptr(),
                Some(command),
                c"write deny-oom fast".as_ptr(),
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

    redis_module::redis_module! {
        name: "ratecell",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [RATECELL_TYPE],
        init: init,
        info: info,
        commands: [
            ["ratecell.checkall", check_all, "write deny-oom getkeys-api", 1, 1, 1, ""],
            ["ratecell.restore", restore, "write deny-oom", 1, 1, 1, ""],
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! The commands as Redis calls them: argv borrowed as bytes inside the
//! panic boundary, and each command's body (the decisions are in
//! [`crate::check`], [`crate::throttle`] and [`crate::lease`]).

use crate::args;
use crate::check::{check_one, commit, open, parse_cached, run};
use crate::key::{Form, Held, Key};
use crate::lease;
use crate::reply::{self, Reply, clamp, err, or_never, six};
use crate::store::{is_loading, now_ns, replicate_del, store_tat};
use crate::tally;
use crate::throttle;
use crate::value::Value;
use crate::word;
use redis_module::{RedisError, raw};
use std::ffi::c_int;
use std::time::Duration;

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
pub(crate) type RawCommand = unsafe extern "C" fn(
    *mut raw::RedisModuleCtx,
    *mut *mut raw::RedisModuleString,
    c_int,
) -> c_int;

/// A command's arguments: Redis's argv strings (the command name first)
/// and their bytes, borrowed for the command's duration.
pub(crate) struct Argv<'a> {
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
pub(crate) unsafe extern "C" fn check_command(
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
pub(crate) unsafe extern "C" fn throttle_command(
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
pub(crate) unsafe extern "C" fn check_all_command(
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
pub(crate) unsafe extern "C" fn restore_command(
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
/// [EXPIRE <duration>] [AT <now_ns> | DATED <ns>] [CHARGE <at_ns>
/// <units>]...` (SPEC.md §8): the charges added to the key's state, then a
/// grant of up to `w` units decided (at `AT`, `DATED` or the server's
/// clock) and applied to it as a check of its cost; replies `[units,
/// expires_at_ns, retry_after_ns, limit, remaining]`.
pub(crate) unsafe extern "C" fn lease_command(
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
        let t = req.at.or(req.dated).unwrap_or_else(now_ns);
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

/// `CL.THROTTLE`: redis-cell's rule ([`throttle::Throttle`]) on the
/// key's arrival time, kept as redis-cell keeps it (SPEC.md §7): a string
/// of its digits expiring when it is reached ([`crate::tat`]). It also
/// reads a gcra value of this module's types (`RATECELL.CHECK <key> gcra`'s,
/// or what earlier versions of this command stored), which it writes back
/// as a string.
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
    // The shape of a module value it may read: a GCRA state of this period
    // (the limit only names the shape; CL.THROTTLE's own rule decides).
    let shape_rule = args::rule(ratecell::Config::new(
        ratecell::Algorithm::Gcra,
        1,
        period_s * 1_000_000_000,
    ))
    .map_err(err)?;
    let name = a.strings[1];
    let t = now_ns();
    let mut key = Key::open(ctx, name);
    // The stored arrival time, and how the key holds it.
    let (old, form) = match key.held(&shape_rule, words[0])? {
        Held::Other(shape) => {
            return Err(err(shape.admits(&shape_rule, words[0]).unwrap_err()));
        }
        Held::Empty => (None, None),
        Held::Word { word, form } => (Some(word), Some(form)),
        Held::Value(v) => (Some(v.words()[0]), Some(Form::Module)),
    };
    let (answer, stored) = limit.decide(old, t, quantity);
    // A peek stores what it read: nothing to write, unless the key must be
    // written even so: a module value becomes a string, and a string with
    // no expiry gets one (as redis-cell gives it).
    let rewrite = |key: &Key| match form {
        Some(Form::Module) => true,
        Some(Form::Tat) => !key.expires(),
        None => false,
    };
    if let Some(tat) = stored.filter(|&tat| Some(tat) != old || rewrite(&key)) {
        if tat <= t {
            // Nothing ahead of now: as if new.
            if old.is_some() {
                key.delete();
                replicate_del(ctx, name);
            }
        } else {
            store_tat(ctx, &mut key, name, tat, t, Some(tat - t))?;
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
    enum State {
        Block(Value),
        Word(ratecell::Algorithm, u64),
    }
    // A one-word state (encoding 3) or a value's block (encodings 1, 2).
    let state = match word::decode(words[1]) {
        Some(w) => w.map(|(algorithm, w)| State::Word(algorithm, w)),
        None => Value::from_bytes(words[1]).map(State::Block),
    }
    .map_err(|e| err(format!("ERR state: {e}")))?;
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
            match state {
                State::Block(value) => key.set(value)?,
                State::Word(algorithm, word) => key.set_word(algorithm, word)?,
            }
            key.expire(pxat.map(|ms| Duration::from_millis(ms.saturating_sub(now_ms))))?;
        }
    }
    // SAFETY: the running command's context.
    unsafe { raw::RedisModule_ReplicateVerbatim.expect("ReplicateVerbatim")(ctx) };
    Ok(())
}

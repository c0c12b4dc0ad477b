//! ratecell inside Redis: a module (`redis-server --loadmodule
//! libratecell_redis.so`) whose commands make the decisions of SPEC.md §3–4
//! on states kept in Redis keys, so one limit holds across every process and
//! machine that shares the server or cluster (SPEC.md §7).
//!
//! This crate owns the commands, the custom data types and their
//! persistence (`ratecell1`, a block per state, [`value`]; `rcellgcra` and
//! `rcellleak`, a one-word state as the module value itself, [`word`]),
//! and the reading and writing of redis-cell's form of a GCRA state;
//! the decisions themselves are [`ratecell::state::Rule::decide`], the same
//! functions the in-process limiters run. Commands:
//!
//! - `RATECELL.CHECK <key> <algorithm> <limit> <period> [BURST b]
//!   [SUBWINDOWS n] [COST n] [AT now_ns]` → six integers.
//! - `RATECELL.CHECKALL [AT now_ns] LIMIT <key> <algorithm> <limit> <period>
//!   [options] [LIMIT ...]...` → `[admitted, [six]...]`, all or nothing.
//! - `CL.THROTTLE <key> <max_burst> <count> <period_s> [quantity]` →
//!   redis-cell's five integers, on the key as redis-cell keeps it: a string
//!   of the theoretical arrival time in nanoseconds ([`tat`]).
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
mod check;
mod command;
mod datatype;
#[cfg(feature = "floor")]
pub mod floor;
mod key;
pub mod lease;
mod reply;
mod store;
pub mod tat;
pub mod throttle;
pub mod value;
pub mod word;

use command::{
    RawCommand, check_all_command, check_command, lease_command, restore_command, throttle_command,
};
pub use datatype::RATECELL_TYPE;
use redis_module::{Context, InfoContext, RedisString, Status, raw};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The INFO counters: requests checked, admitted and denied (a
/// `RATECELL.CHECKALL` counts once).
static CHECKS: AtomicU64 = AtomicU64::new(0);
static ADMITTED: AtomicU64 = AtomicU64::new(0);
static DENIED: AtomicU64 = AtomicU64::new(0);

pub(crate) fn tally(admitted: bool) {
    CHECKS.fetch_add(1, Relaxed);
    if admitted {
        ADMITTED.fetch_add(1, Relaxed);
    } else {
        DENIED.fetch_add(1, Relaxed);
    }
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
    use crate::word::{GCRA_TYPE, LEAKY_TYPE};
    use redis_module::RedisResult;

    redis_module::redis_module! {
        name: "ratecell",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [RATECELL_TYPE, GCRA_TYPE, LEAKY_TYPE],
        init: init,
        info: info,
        commands: [],
    }
}

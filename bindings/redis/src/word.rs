//! The one-word states, `gcra` and `leaky_bucket`, at the floor of a module
//! data type: the module value Redis keeps is the state word itself (a
//! TAT), not a pointer to a block, so a key costs what any module value
//! costs and nothing more (bindings/redis/README.md, Memory).
//!
//! A word carries no head, so what the block's head held goes elsewhere:
//! the algorithm is the data type (one per algorithm, [`GCRA_TYPE`] and
//! [`LEAKY_TYPE`]); a state written with `AT` is one without an expiry, as
//! Redis keeps it; and the period is not kept at all, since these states
//! are one absolute time that any period continues (SPEC.md §7). Zero, the
//! fresh state, is never stored: a null value is what Redis's RDB loader
//! takes for an error.
//!
//! Outside the process a word is encoding [`ENCODING_WORD`], `[3,
//! algorithm, word]` as little-endian `u64`s, which `RATECELL.RESTORE`
//! receives from replicas and the AOF; the RDB saves the word alone, its
//! type naming the algorithm.

use crate::datatype::{emit_restore, guarded, log_io_error, type_methods};
use ratecell::{Algorithm, Config, state::Rule};
use redis_module::native_types::RedisType;
use redis_module::raw;
use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

// The value pointer holds the whole word.
const _: () = assert!(std::mem::size_of::<*mut c_void>() == 8);

/// The version of the encoding of a word outside the process.
pub const ENCODING_WORD: u64 = 3;

/// The data type of a `gcra` state: the value is its TAT.
pub static GCRA_TYPE: RedisType = RedisType::new(
    "rcellgcra",
    1,
    type_methods(
        Some(gcra_load),
        Some(save),
        Some(gcra_aof),
        Some(free),
        Some(mem_usage),
    ),
);

/// The data type of a `leaky_bucket` state: the value is its TAT.
pub static LEAKY_TYPE: RedisType = RedisType::new(
    "rcellleak",
    1,
    type_methods(
        Some(leaky_load),
        Some(save),
        Some(leaky_aof),
        Some(free),
        Some(mem_usage),
    ),
);

/// Whether `algorithm`'s states are one word, kept as the value itself.
pub fn is_word(algorithm: Algorithm) -> bool {
    matches!(algorithm, Algorithm::Gcra | Algorithm::LeakyBucket)
}

/// The data type of a word algorithm's states.
///
/// # Panics
/// If `algorithm` is not a word algorithm ([`is_word`]).
pub fn type_of(algorithm: Algorithm) -> &'static RedisType {
    match algorithm {
        Algorithm::Gcra => &GCRA_TYPE,
        Algorithm::LeakyBucket => &LEAKY_TYPE,
        other => panic!("{other} has no word type"),
    }
}

/// The word algorithm whose data type is `ty`, if any.
pub fn algorithm_of(ty: *mut raw::RedisModuleType) -> Option<Algorithm> {
    [Algorithm::Gcra, Algorithm::LeakyBucket]
        .into_iter()
        .find(|&a| *type_of(a).raw_type.borrow() == ty)
}

/// A word as a module value.
pub fn to_value(word: u64) -> *mut c_void {
    word as usize as *mut c_void
}

/// A module value of a word type as its word.
pub fn from_value(value: *const c_void) -> u64 {
    value as usize as u64
}

/// Encoding [`ENCODING_WORD`] of `word`, as bytes.
pub fn encode(algorithm: Algorithm, word: u64) -> [u8; 24] {
    let mut out = [0; 24];
    for (chunk, v) in out
        .chunks_exact_mut(8)
        .zip([ENCODING_WORD, algorithm as u64, word])
    {
        chunk.copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// A word state read from encoding [`ENCODING_WORD`]: `None` when the
/// bytes are of another encoding, else the state or why it is refused.
pub fn decode(bytes: &[u8]) -> Option<Result<(Algorithm, u64), String>> {
    if bytes.get(..8) != Some(&ENCODING_WORD.to_le_bytes()[..]) {
        return None;
    }
    Some((|| {
        if bytes.len() != 24 {
            return Err(format!("a word state is 24 bytes, not {}", bytes.len()));
        }
        let at =
            |i: usize| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        let (algorithm, word) = (at(1), at(2));
        let algorithm = u32::try_from(algorithm)
            .ok()
            .and_then(Algorithm::from_u32)
            .filter(|&a| is_word(a))
            .ok_or_else(|| format!("algorithm {algorithm} has no one-word state"))?;
        validated(algorithm, word).map(|w| (algorithm, w))
    })())
}

/// `word` if it may be stored as `algorithm`'s state (SPEC.md §4, "What a
/// loader accepts": any TAT; and not 0, the fresh state, never stored).
pub fn validated(algorithm: Algorithm, word: u64) -> Result<u64, String> {
    if word == 0 {
        return Err("word 0 is the fresh state, which is never stored".into());
    }
    let rule = Rule::new(&Config::new(algorithm, 1, 1_000_000_000))
        .expect("a one-per-second limit is valid");
    rule.validate(&[word]).map_err(|e| format!("state: {e}"))?;
    Ok(word)
}

unsafe extern "C" fn free(_value: *mut c_void) {
    // Nothing was allocated: the value is the word.
}

unsafe extern "C" fn mem_usage(_value: *const c_void) -> usize {
    0
}

unsafe extern "C" fn save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded((), || raw::save_unsigned(rdb, from_value(value)));
}

/// Reads a word of `algorithm` from an RDB: a file's bytes decide what
/// happens here, so nothing unwinds into Redis, and a word that fails
/// validation is refused (null), which makes Redis refuse the file.
fn load(rdb: *mut raw::RedisModuleIO, encver: c_int, algorithm: Algorithm) -> *mut c_void {
    let loaded = catch_unwind(AssertUnwindSafe(|| {
        if encver != 1 {
            return Err(format!("unknown encoding version {encver}"));
        }
        let word = raw::load_unsigned(rdb).map_err(|_| "state is truncated at its word")?;
        validated(algorithm, word)
    }));
    match loaded {
        Ok(Ok(word)) => to_value(word),
        Ok(Err(e)) => {
            log_io_error(
                rdb,
                &format!("ratecell: refused a stored {algorithm} state: {e}"),
            );
            std::ptr::null_mut()
        }
        Err(_) => {
            log_io_error(rdb, "ratecell: internal error loading a state");
            std::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn gcra_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    load(rdb, encver, Algorithm::Gcra)
}

unsafe extern "C" fn leaky_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    load(rdb, encver, Algorithm::LeakyBucket)
}

/// Rewrites a key of `algorithm` into the AOF as `RATECELL.RESTORE <key>
/// <encoding 3>`; Redis emits the key's expiry after it.
fn aof(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
    algorithm: Algorithm,
) {
    emit_restore(aof, key, &encode(algorithm, from_value(value)));
}

unsafe extern "C" fn gcra_aof(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    aof(io, key, value, Algorithm::Gcra);
}

unsafe extern "C" fn leaky_aof(
    io: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    aof(io, key, value, Algorithm::LeakyBucket);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_through_encoding_three_and_the_value() {
        for alg in [Algorithm::Gcra, Algorithm::LeakyBucket] {
            for word in [1, 1_765_065_600_123_456_789, u64::MAX] {
                assert_eq!(decode(&encode(alg, word)), Some(Ok((alg, word))));
                assert_eq!(from_value(to_value(word)), word);
            }
        }
        // Another encoding is not this one's to read.
        assert_eq!(decode(&2u64.to_le_bytes()), None);
        assert_eq!(decode(&[]), None);
    }

    #[test]
    fn fresh_words_other_algorithms_and_other_lengths_are_refused() {
        let refused = |bytes: &[u8]| decode(bytes).expect("encoding 3").unwrap_err();
        assert!(refused(&encode(Algorithm::Gcra, 0)).contains("fresh"));
        assert!(refused(&encode(Algorithm::TokenBucket, 5)).contains("one-word"));
        let mut long = encode(Algorithm::Gcra, 5).to_vec();
        long.push(0);
        assert!(refused(&long).contains("24 bytes"));
        assert!(refused(&long[..16]).contains("24 bytes"));
        let mut bad = encode(Algorithm::Gcra, 5);
        bad[8..16].copy_from_slice(&99u64.to_le_bytes());
        assert!(refused(&bad).contains("99"));
        assert!(is_word(Algorithm::LeakyBucket) && !is_word(Algorithm::FixedWindow));
    }
}

//! The value a ratecell key holds in Redis, laid out for memory, and its
//! serialised forms.
//!
//! A key's value is one allocation of `u64` words, `[head, (extent), state
//! words...]`, whose address is the module value Redis keeps:
//!
//! - `head` holds the key's [`Shape`] and the `AT` flag: bits 0–54 the period
//!   in nanoseconds (at most 366 days < 2^55), bits 55–57 the algorithm's
//!   number, bit 58 the flag; bits 59–63 are zero.
//! - `extent` is there only for the two block algorithms: the bucketed
//!   window's sub-window count, the sliding log's limit (its ring's length).
//! - then the state's plain words ([`ratecell::state`]).
//!
//! The limit and burst are not kept: every command carries them, a live
//! key's limit and burst may change from one call to the next (SPEC.md §7),
//! and no decision reads the old ones. A single-word GCRA state is so 16
//! bytes of the module's own (the README's "Memory" has the figures).
//!
//! Two encodings carry a value outside the process, both little-endian
//! `u64`s: [`ENCODING`] (2) is `[2, head, (extent), words...]`, what the RDB
//! saves one integer at a time and `RATECELL.RESTORE` receives as bytes;
//! encoding 1 (`[1, algorithm, limit, burst, period, sub_windows, at, n,
//! words...]`) is what earlier versions wrote, still read from old RDB and
//! AOF files. Every decoder validates the state before it is used
//! ([`ratecell::state::Rule::validate`], SPEC.md §7).

use ratecell::{Algorithm, Config, state::Rule};
use std::ptr::NonNull;

/// The version of the encoding this module writes.
pub const ENCODING: u64 = 2;
/// The version earlier modules wrote; still read.
pub const ENCODING_V1: u64 = 1;

const PERIOD_BITS: u32 = 55;
const PERIOD_MASK: u64 = (1 << PERIOD_BITS) - 1;
const ALGORITHM_SHIFT: u32 = PERIOD_BITS;
const AT_BIT: u64 = 1 << 58;
const RESERVED: u64 = !((1 << 59) - 1);

/// What fixes a state's layout and meaning, so it may not change on a live
/// key: the algorithm, the period, and the bucketed window's sub-window
/// count or the sliding log's limit (its `extent`; 0 for the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The period in nanoseconds.
    pub period_ns: u64,
    /// Sub-windows (bucketed window) or limit (sliding log); else 0.
    pub extent: u64,
}

impl Shape {
    /// The shape a rule's states have.
    pub fn of(rule: &Rule) -> Shape {
        let c = rule.config();
        let extent = match c.algorithm {
            Algorithm::BucketedWindow => u64::from(c.sub_windows),
            Algorithm::SlidingLog => c.limit,
            _ => 0,
        };
        Shape {
            algorithm: c.algorithm,
            period_ns: c.period_ns,
            extent,
        }
    }

    /// Whether a request under `rule` may use a state of this shape, or
    /// the error that refuses it, quoting `key`.
    pub fn admits(self, rule: &Rule, key: &[u8]) -> Result<(), String> {
        let new = Shape::of(rule);
        if self == new {
            return Ok(());
        }
        let key = crate::args::text(key);
        let old = self;
        Err(if old.algorithm != new.algorithm {
            format!(
                "ERR key '{key}' holds a live {} state; it cannot be checked as {} (DEL it, or wait until it expires)",
                old.algorithm, new.algorithm
            )
        } else if old.period_ns != new.period_ns {
            format!(
                "ERR key '{key}' holds a live state with period {}ns; it cannot be checked with period {}ns (DEL it, or wait until it expires)",
                old.period_ns, new.period_ns
            )
        } else if old.algorithm == Algorithm::BucketedWindow {
            format!(
                "ERR key '{key}' holds a live state with SUBWINDOWS {}; it cannot be checked with SUBWINDOWS {} (DEL it, or wait until it expires)",
                old.extent, new.extent
            )
        } else {
            format!(
                "ERR key '{key}' holds a live sliding_log state with limit {}; a sliding_log's limit cannot change on a live key (DEL it, or wait until it expires)",
                old.extent
            )
        })
    }

    /// Words before the state in a value's block: the head, and the
    /// extent for the two block algorithms.
    fn header_words(self) -> usize {
        if self.has_extent() { 2 } else { 1 }
    }

    fn has_extent(self) -> bool {
        matches!(
            self.algorithm,
            Algorithm::BucketedWindow | Algorithm::SlidingLog
        )
    }

    /// A rule whose states have this shape, and whose limit admits every
    /// state any limit could have left (the limit is not stored): what a
    /// stored state is validated against.
    pub fn rule(self) -> Result<Rule, String> {
        let mut config = Config::new(self.algorithm, 1, self.period_ns);
        match self.algorithm {
            Algorithm::BucketedWindow => {
                config.sub_windows =
                    u32::try_from(self.extent).map_err(|_| "bad sub-window count")?;
            }
            Algorithm::SlidingLog => config.limit = self.extent,
            _ => {}
        }
        crate::args::rule(config).map_err(|e| format!("state: {e}"))
    }

    fn head(self, at: bool) -> u64 {
        self.period_ns | (self.algorithm as u64) << ALGORITHM_SHIFT | if at { AT_BIT } else { 0 }
    }

    /// The shape and flag of a head word, or why it is not one.
    fn from_head(head: u64, extent: impl FnOnce() -> Option<u64>) -> Result<(Shape, bool), String> {
        if head & RESERVED != 0 {
            return Err("state head has reserved bits set".into());
        }
        let algorithm = u32::try_from((head >> ALGORITHM_SHIFT) & 0b111)
            .ok()
            .and_then(Algorithm::from_u32)
            .ok_or("state names no algorithm")?;
        let mut shape = Shape {
            algorithm,
            period_ns: head & PERIOD_MASK,
            extent: 0,
        };
        if shape.has_extent() {
            shape.extent = extent().ok_or("state is truncated at its extent")?;
        }
        Ok((shape, head & AT_BIT != 0))
    }
}

/// A ratecell key's value: one owned allocation, `[head, (extent), words]`.
#[derive(Debug)]
pub struct Value {
    block: NonNull<u64>,
    /// Words in the block (not stored: it follows from the shape, and
    /// this handle lives only while a command or callback runs).
    len: usize,
}

impl Value {
    /// A value holding `words` for states of `shape`.
    ///
    /// # Panics
    /// If `words` is not as long as the shape's states.
    pub fn new(shape: Shape, at: bool, words: &[u64]) -> Value {
        // Exactly the block's length, so turning it into a boxed slice
        // does not reallocate.
        let mut block = Vec::with_capacity(shape.header_words() + words.len());
        block.push(shape.head(at));
        if shape.has_extent() {
            block.push(shape.extent);
        }
        block.extend_from_slice(words);
        Value::from_block(block.into_boxed_slice())
    }

    fn from_block(block: Box<[u64]>) -> Value {
        let len = block.len();
        let block = NonNull::from(Box::leak(block)).cast::<u64>();
        Value { block, len }
    }

    fn block(&self) -> &[u64] {
        // SAFETY: `block` owns `len` initialised words (from_block).
        unsafe { std::slice::from_raw_parts(self.block.as_ptr(), self.len) }
    }

    fn block_mut(&mut self) -> &mut [u64] {
        // SAFETY: as in `block`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.block.as_ptr(), self.len) }
    }

    fn header_words(&self) -> usize {
        self.shape().header_words()
    }

    /// The shape of the state.
    pub fn shape(&self) -> Shape {
        let block = self.block();
        Shape::from_head(block[0], || block.get(1).copied())
            .expect("a value's head is written by Value::new")
            .0
    }

    /// Whether the state was written by a request with `AT` (kept without
    /// expiry).
    pub fn at(&self) -> bool {
        self.block()[0] & AT_BIT != 0
    }

    /// Sets the `AT` flag.
    pub fn set_at(&mut self, at: bool) {
        let head = &mut self.block_mut()[0];
        *head = (*head & !AT_BIT) | if at { AT_BIT } else { 0 };
    }

    /// The state's words.
    pub fn words(&self) -> &[u64] {
        &self.block()[self.header_words()..]
    }

    /// The state's words, to decide on in place.
    pub fn words_mut(&mut self) -> &mut [u64] {
        let from = self.header_words();
        &mut self.block_mut()[from..]
    }

    /// Bytes of the allocation (for `MEMORY USAGE`).
    pub fn heap_bytes(&self) -> usize {
        8 * self.len
    }

    /// Gives up ownership: the address Redis keeps as the module value.
    pub fn into_raw(self) -> *mut std::ffi::c_void {
        let p = self.block.as_ptr().cast();
        std::mem::forget(self);
        p
    }

    /// Takes back ownership of a module value (for Redis's callbacks,
    /// which have no rule at hand: the word count follows from the shape).
    ///
    /// # Safety
    /// `raw` came from [`Value::into_raw`] and is not used again except
    /// through the returned value (or, wrapped in `ManuallyDrop`, while
    /// Redis keeps it).
    pub unsafe fn from_raw(raw: *mut std::ffi::c_void) -> Value {
        // SAFETY: the caller's promise.
        let shape = unsafe { Value::shape_at(raw) };
        let words = shape
            .rule()
            .expect("a stored shape was valid when written")
            .words();
        // SAFETY: as above.
        unsafe { Value::with_len(raw, shape, words) }
    }

    /// [`Value::from_raw`] on a command's path: the value if its shape is
    /// `rule`'s (the word count is then the rule's), else its shape.
    ///
    /// # Safety
    /// As for [`Value::from_raw`].
    pub unsafe fn from_raw_as(raw: *mut std::ffi::c_void, rule: &Rule) -> Result<Value, Shape> {
        // SAFETY: the caller's promise.
        let shape = unsafe { Value::shape_at(raw) };
        if shape != Shape::of(rule) {
            return Err(shape);
        }
        // SAFETY: as above; the shape is the rule's.
        Ok(unsafe { Value::with_len(raw, shape, rule.words()) })
    }

    /// # Safety
    /// `raw` points at a block written by [`Value::new`].
    unsafe fn shape_at(raw: *mut std::ffi::c_void) -> Shape {
        let block = raw.cast::<u64>();
        // SAFETY: the caller's promise: a head, and after it an extent
        // when the head's algorithm has one (read only then).
        let (shape, _) = unsafe { Shape::from_head(*block, || Some(*block.add(1))) }
            .expect("a value's head is written by Value::new");
        shape
    }

    /// # Safety
    /// `raw` points at a block written by [`Value::new`] for `shape`, with
    /// `words` state words.
    unsafe fn with_len(raw: *mut std::ffi::c_void, shape: Shape, words: usize) -> Value {
        let block = NonNull::new(raw.cast::<u64>()).expect("a module value is never null");
        let len = shape.header_words() + words;
        Value { block, len }
    }

    /// The integers of [`ENCODING`], in order.
    pub fn integers(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(ENCODING).chain(self.block().iter().copied())
    }

    /// Appends the encoding as bytes (for `RATECELL.RESTORE`) to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(8 * (1 + self.len));
        for v in self.integers() {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// Rebuilds a value from its integers, in either encoding, refusing
    /// anything no sequence of checks could have stored: a bad head, a
    /// shape a command would refuse, a word count other than the shape's,
    /// or words [`Rule::validate`] refuses. Allocates only once the shape
    /// (and so the word count, bounded by the module's limits) is valid.
    pub fn from_integers(mut next: impl FnMut() -> Option<u64>) -> Result<Value, String> {
        let mut get = |what: &str| next().ok_or_else(|| format!("state is truncated at {what}"));
        let (shape, at) = match get("encoding")? {
            ENCODING => {
                let head = get("head")?;
                // The extent follows the head only for the algorithms that
                // have one; a missing one is the truncation from_head names.
                Shape::from_head(head, || get("extent").ok())?
            }
            ENCODING_V1 => return Value::from_v1(get),
            other => {
                return Err(format!(
                    "state encoding {other} is neither {ENCODING} nor {ENCODING_V1} (written by another version)"
                ));
            }
        };
        let rule = shape.rule()?;
        let words = (0..rule.words())
            .map(|_| get("words"))
            .collect::<Result<Vec<_>, _>>()?;
        validated(&rule, shape, at, &words)
    }

    /// Encoding 1, after its version word.
    fn from_v1(mut get: impl FnMut(&str) -> Result<u64, String>) -> Result<Value, String> {
        let algorithm = u32::try_from(get("algorithm")?)
            .ok()
            .and_then(Algorithm::from_u32)
            .ok_or("state names no algorithm")?;
        let (limit, burst, period) = (get("limit")?, get("burst")?, get("period")?);
        let sub_windows = u32::try_from(get("sub_windows")?).map_err(|_| "bad sub_windows")?;
        let at = match get("at")? {
            0 => false,
            1 => true,
            _ => return Err("bad at flag".into()),
        };
        let config = Config::new(algorithm, limit, period)
            .burst(burst)
            .sub_windows(sub_windows);
        let rule = crate::args::rule(config).map_err(|e| format!("state: {e}"))?;
        let n = get("word count")?;
        if n != rule.words() as u64 {
            return Err(format!(
                "state has {n} words where its configuration needs {}",
                rule.words()
            ));
        }
        let words = (0..n)
            .map(|_| get("words"))
            .collect::<Result<Vec<_>, _>>()?;
        // Validation does not depend on the limit or burst the state was
        // last decided under (SPEC.md §4), so the stored configuration's
        // rule serves.
        validated(&rule, Shape::of(&rule), at, &words)
    }

    /// The inverse of [`Value::encode_into`] (either encoding); the bytes
    /// must hold nothing more.
    pub fn from_bytes(bytes: &[u8]) -> Result<Value, String> {
        if bytes.len() % 8 != 0 {
            return Err("state length is not a multiple of 8 bytes".into());
        }
        let mut it = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
        let value = Value::from_integers(|| it.next())?;
        if it.next().is_some() {
            return Err("state has bytes after its words".into());
        }
        Ok(value)
    }
}

fn validated(rule: &Rule, shape: Shape, at: bool, words: &[u64]) -> Result<Value, String> {
    rule.validate(words).map_err(|e| format!("state: {e}"))?;
    Ok(Value::new(shape, at, words))
}

impl Drop for Value {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.block.as_ptr(), self.len);
        // SAFETY: the block was leaked from a Box<[u64]> of `len` words
        // (from_block) and is freed once, here.
        drop(unsafe { Box::from_raw(slice) });
    }
}

// SAFETY: a Value owns its block like a Box<[u64]>; Redis runs its
// callbacks on one thread at a time.
unsafe impl Send for Value {}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_of(config: Config) -> Shape {
        Shape::of(&Rule::new(&config).unwrap())
    }

    #[test]
    fn values_round_trip_through_both_encodings_and_raw() {
        let shapes = [
            shape_of(Config::new(Algorithm::Gcra, 7, 366 * 86_400_000_000_000)),
            shape_of(Config::new(Algorithm::BucketedWindow, 7, 1_000_000_000).sub_windows(4)),
            shape_of(Config::new(Algorithm::SlidingLog, 3, 1_000)),
        ];
        for shape in shapes {
            let n = shape.rule().unwrap().words();
            let v = Value::new(shape, true, &vec![0; n]);
            assert_eq!((v.shape(), v.at(), v.words().len()), (shape, true, n));
            let mut bytes = Vec::new();
            v.encode_into(&mut bytes);
            let back = Value::from_bytes(&bytes).unwrap();
            assert_eq!(
                (back.shape(), back.at(), back.words()),
                (shape, true, v.words())
            );
            // SAFETY: the pointer was just given up by into_raw.
            let again = unsafe { Value::from_raw(back.into_raw()) };
            assert_eq!(again.words(), v.words());
            bytes.extend([0; 8]);
            assert!(Value::from_bytes(&bytes).is_err());
            assert!(Value::from_bytes(&bytes[..16]).is_err());
        }
    }

    #[test]
    fn encoding_one_still_loads() {
        let v1 = [
            1u64,
            1,
            10,
            10,
            1_000_000_000,
            10,
            0,
            1,
            1_700_000_000_000_000_000,
        ];
        let bytes: Vec<u8> = v1.iter().flat_map(|v| v.to_le_bytes()).collect();
        let v = Value::from_bytes(&bytes).unwrap();
        assert_eq!(v.shape().algorithm, Algorithm::Gcra);
        assert_eq!(v.shape().period_ns, 1_000_000_000);
        assert_eq!(
            (v.at(), v.words()),
            (false, &[1_700_000_000_000_000_000][..])
        );
        let mut wrong = v1;
        wrong[7] = 2;
        let bytes: Vec<u8> = wrong.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(Value::from_bytes(&bytes).is_err());
    }

    #[test]
    fn heads_with_reserved_bits_or_no_algorithm_are_refused() {
        for head in [1u64 << 63, 0, 7 << ALGORITHM_SHIFT | 1_000_000_000] {
            let bytes: Vec<u8> = [ENCODING, head, 0, 0, 0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            assert!(Value::from_bytes(&bytes).is_err(), "{head:#x}");
        }
    }
}

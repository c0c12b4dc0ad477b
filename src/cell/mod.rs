//! The atomic cells that hold states, and the two ways a state is updated:
//!
//! - a single word (64 or 128 bits) updated by a CAS loop: the algorithm
//!   runs on the value loaded, and the decision returned is the one computed
//!   from the value the CAS replaced, so every admitted request corresponds
//!   to exactly one installed state (linearizable at the successful CAS; a
//!   denied request or a peek writes nothing and is linearized at its load);
//! - a block of words behind a per-state latch (bucketed window, sliding
//!   log): a latch bit in a header word, taken with a CAS and released with a
//!   store, held only while the algorithm runs on the block (O(N) or
//!   O(log L) integer work, no allocation, no system call). This is the one
//!   place ratecell waits for another thread: not lock-free, named as such.
//!
//! The keyed table uses the same loop and latch on its slots; this module is
//! the only code that compare-exchanges a state.

pub(crate) mod fork;

use crate::algorithm::{BlockAlgorithm, Visit, WordAlgorithm, Words};
use crate::check::decision::Decision;
use crate::memory::Residency;
use crate::sync::{AtomicU64, Ordering, Word128, spin_loop, waited, yield_now};
use crossbeam_utils::CachePadded;
use fork::LATCHED;

/// An atomic word of 64 or 128 bits, seen as a `u128`.
pub(crate) trait AtomicWord: Send + Sync {
    /// A word holding 0.
    fn zero() -> Self
    where
        Self: Sized;
    fn load_word(&self) -> u128;
    /// On failure returns the value found.
    fn cas_word(&self, current: u128, new: u128) -> Result<(), u128>;
}

// Ordering: a single-word state publishes nothing but itself, and every
// decision depends only on this word's modification order, which all
// threads agree on at any ordering; so Relaxed is enough (and on x86 a
// locked CAS is a full barrier regardless). The same holds for the 128-bit
// words. loom checks both: under loom a 128-bit word is a loom atomic too,
// with these orderings (`sync::AtomicU128`).
impl AtomicWord for AtomicU64 {
    fn zero() -> Self {
        AtomicU64::new(0)
    }
    #[inline]
    fn load_word(&self) -> u128 {
        u128::from(self.load(Ordering::Relaxed))
    }
    #[inline]
    fn cas_word(&self, current: u128, new: u128) -> Result<(), u128> {
        self.compare_exchange_weak(
            current as u64,
            new as u64,
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .map(drop)
        .map_err(u128::from)
    }
}

/// The 128-bit words (`sync::SlotU128` says why there are two types, where
/// there are): the same operations.
impl<W: Word128> AtomicWord for W {
    fn zero() -> Self {
        W::new(0)
    }
    #[inline]
    fn load_word(&self) -> u128 {
        Word128::load(self, Ordering::Relaxed)
    }
    #[inline]
    fn cas_word(&self, current: u128, new: u128) -> Result<(), u128> {
        Word128::compare_exchange_weak(self, current, new, Ordering::Relaxed, Ordering::Relaxed)
            .map(drop)
    }
}

/// Runs `step` on the word's value until the value it proposes is installed
/// by CAS, or it proposes none. Returns what `step` returned for the value
/// that was replaced (or that was read, when nothing was written).
#[allow(
    clippy::inline_always,
    reason = "the loop is the body of every check; a two-limit check's copy per pair of rules was left out of line, its decision returned through memory"
)]
#[inline(always)]
pub(crate) fn cas_loop<W: AtomicWord, R>(
    word: &W,
    step: impl FnMut(u128) -> (R, Option<u128>),
) -> R {
    cas_loop_from(word, word.load_word(), step)
}

/// [`cas_loop`] from a value of the word the caller has just loaded (the
/// keyed table's probe loads the slot to recognise the key, and the update
/// starts from what it saw instead of loading the slot again).
#[allow(clippy::inline_always, reason = "as cas_loop")]
#[inline(always)]
pub(crate) fn cas_loop_from<W: AtomicWord, R>(
    word: &W,
    mut current: u128,
    mut step: impl FnMut(u128) -> (R, Option<u128>),
) -> R {
    loop {
        let (result, next) = step(current);
        let Some(next) = next else { return result };
        match word.cas_word(current, next) {
            Ok(()) => return result,
            Err(found) => {
                crate::sync::saw(crate::sync::Race::CasLost);
                current = found;
                spin_loop();
            }
        }
    }
}

/// One state in one word, alone on its cache line: the padding keeps a
/// shared limiter's hot word from sharing a line with anything another core
/// writes (false sharing would make every check a coherence miss).
#[derive(Debug)]
pub(crate) struct WordCell<W> {
    word: CachePadded<W>,
}

impl<W: AtomicWord> WordCell<W> {
    pub(crate) fn new() -> Self {
        WordCell {
            word: CachePadded::new(W::zero()),
        }
    }

    /// Decides a request; `accept` may veto an admission (the blocking
    /// acquire uses it to refuse a queue place it could not wait for), in
    /// which case nothing is stored and the vetoed decision is returned.
    #[inline]
    pub(crate) fn decide<A: WordAlgorithm>(
        &self,
        alg: &A,
        t: u64,
        n: u64,
        accept: impl Fn(&Decision) -> bool,
    ) -> (Decision, bool) {
        self.decide_each(alg, t, n, accept, &mut [])
    }

    /// [`WordCell::decide`], writing each limit's own decision to `each`
    /// (several limits as one, `algorithm::all_of`).
    #[inline]
    pub(crate) fn decide_each<A: WordAlgorithm>(
        &self,
        alg: &A,
        t: u64,
        n: u64,
        accept: impl Fn(&Decision) -> bool,
        each: &mut [Decision],
    ) -> (Decision, bool) {
        alg.with_concrete(CellCheck {
            word: &*self.word,
            t,
            n,
            accept,
            each,
        })
    }

    /// Forgets the state.
    pub(crate) fn reset(&self) {
        cas_loop(&*self.word, |_| ((), Some(0)));
    }

    /// The packed state, in one atomic load (a snapshot).
    pub(crate) fn load(&self) -> u128 {
        self.word.load_word()
    }

    /// Replaces the packed state (a restored snapshot).
    pub(crate) fn store(&self, packed: u128) {
        cas_loop(&*self.word, |_| ((), Some(packed)));
    }
}

/// [`WordCell::decide_each`]'s CAS loop, run with the algorithm's
/// concrete form ([`WordAlgorithm::with_concrete`]).
struct CellCheck<'a, W, F> {
    word: &'a W,
    t: u64,
    n: u64,
    accept: F,
    each: &'a mut [Decision],
}

impl<S, W: AtomicWord, F: Fn(&Decision) -> bool> Visit<S> for CellCheck<'_, W, F> {
    type Out = (Decision, bool);
    #[allow(
        clippy::inline_always,
        reason = "a transparent call, as WordAlgorithm::with_concrete"
    )]
    #[inline(always)]
    fn visit<A: WordAlgorithm<State = S>>(self, alg: &A) -> (Decision, bool) {
        let CellCheck {
            word,
            t,
            n,
            accept,
            each,
        } = self;
        cas_loop(word, |word| {
            let (decision, next) = alg.decide_each(alg.unpack(word), t, n, each);
            if decision.allowed && !accept(&decision) {
                return ((decision, false), None);
            }
            ((decision, true), next.map(|s| alg.pack(s)))
        })
    }
}

/// Takes the latch of `header` if it holds exactly `expected` (unlatched).
/// Waits while another thread holds it; fails, returning what it found, if
/// the header changed to anything else.
///
/// A per-key latch: counted in the fork barrier (`crate::cell::fork`) from
/// before the CAS until after the release, so no child of a `fork()` ever
/// inherits it held (its header has no room to say who holds it).
#[inline]
pub(crate) fn latch(header: &AtomicU64, expected: u64) -> Result<LatchGuard<'_>, u64> {
    debug_assert_eq!(expected & LATCHED, 0);
    let in_flight = crate::cell::fork::enter();
    match take(header, expected) {
        Ok(()) => Ok(LatchGuard {
            header,
            release_to: expected,
            in_flight: Some(in_flight),
        }),
        Err(found) => {
            crate::cell::fork::leave(in_flight);
            Err(found)
        }
    }
}

/// Takes a direct block's latch (`BlockCell`), not counted in the fork
/// barrier: the block is registered there, and a fork takes the latch
/// itself (`crate::cell::fork`, `register_direct`).
#[inline]
fn latch_direct(header: &AtomicU64) -> LatchGuard<'_> {
    take(header, 0).expect("a direct block's header is only ever latched");
    LatchGuard {
        header,
        release_to: 0,
        in_flight: None,
    }
}

/// [`latch`]'s loop: takes the latch of `header` if it holds exactly
/// `expected`, waiting while another thread holds it; fails, returning what
/// it found, if the header changed to anything else.
#[inline]
fn take(header: &AtomicU64, expected: u64) -> Result<(), u64> {
    let mut spins = 0u32;
    loop {
        match header.compare_exchange_weak(
            expected,
            expected | LATCHED,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return Ok(()),
            Err(found) if found == expected | LATCHED || found == expected => {
                // Held by another thread (or a spurious failure): back off,
                // and give the core away if the holder seems descheduled.
                crate::sync::saw(crate::sync::Race::LatchBusy);
                spins += 1;
                waited(spins);
                if spins < 64 {
                    spin_loop();
                } else {
                    yield_now();
                }
            }
            Err(found) => return Err(found),
        }
    }
}

/// Releases a latch on drop, so a panic inside the algorithm cannot leave a
/// state latched forever.
pub(crate) struct LatchGuard<'a> {
    header: &'a AtomicU64,
    release_to: u64,
    /// Where a per-key latch is counted in the fork barrier (`None` for a
    /// holder-recording latch, which a child takes over instead).
    in_flight: Option<crate::cell::fork::InFlight>,
}

impl LatchGuard<'_> {
    /// Releases with a different header value (a table changing owner).
    pub(crate) fn release_as(mut self, value: u64) {
        self.release_to = value & !LATCHED;
    }
}

impl Drop for LatchGuard<'_> {
    fn drop(&mut self) {
        // Release: the block's words written under the latch are visible to
        // the next thread that takes it (Acquire).
        self.header.store(self.release_to, Ordering::Release);
        if let Some(in_flight) = self.in_flight {
            crate::cell::fork::leave(in_flight);
        }
    }
}

/// A block of words read and written under a latch. Relaxed accesses are
/// enough: the latch's Acquire/Release orders them.
pub(crate) struct LatchedWords<'a>(pub(crate) &'a [AtomicU64]);

impl Words for LatchedWords<'_> {
    #[inline]
    fn get(&self, i: usize) -> u64 {
        self.0[i].load(Ordering::Relaxed)
    }
    #[inline]
    fn set(&mut self, i: usize, value: u64) {
        self.0[i].store(value, Ordering::Relaxed);
    }
}

/// One multi-word state with its latch (the direct limiter's bucketed
/// window and sliding log).
#[derive(Debug)]
pub(crate) struct BlockCell {
    // Padded: the latch word is written by every check. Boxed: registered
    // by address in the fork barrier (`crate::cell::fork::register_direct`).
    header: Box<CachePadded<AtomicU64>>,
    words: crate::memory::AlignedWords<AtomicU64>,
}

impl BlockCell {
    /// Allocates the block; on failure returns the bytes that were asked for.
    pub(crate) fn new(words: usize) -> Result<BlockCell, usize> {
        crate::cell::fork::install();
        let cell = BlockCell {
            header: Box::new(CachePadded::new(AtomicU64::new(0))),
            words: crate::memory::zeroed_words(words, Residency::OnUse)?,
        };
        if !crate::sync::UNDER_LOOM {
            // loom's models never fork.
            crate::cell::fork::register_direct(&cell.header);
        }
        Ok(cell)
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        size_of_val(&*self.words) + size_of_val(&*self.header)
    }

    /// Decides a request under the latch.
    pub(crate) fn decide<A: BlockAlgorithm>(&self, alg: &A, t: u64, n: u64) -> Decision {
        self.decide_each(alg, t, n, &mut [])
    }

    /// [`BlockCell::decide`], writing each limit's own decision to `each`.
    pub(crate) fn decide_each<A: BlockAlgorithm>(
        &self,
        alg: &A,
        t: u64,
        n: u64,
        each: &mut [Decision],
    ) -> Decision {
        let _guard = latch_direct(&self.header);
        alg.decide_each(&mut LatchedWords(&self.words), t, n, each)
    }

    /// [`BlockCell::decide`] out of line, returning the decision as six
    /// words (`decision::Words`, which says why words): the direct
    /// limiter's block engines call this from their arm of
    /// `Engine::decision`, one call level with no match of its own, so
    /// the decision is written once, to the caller's slot, while the latch
    /// is still held.
    #[inline(never)]
    pub(crate) fn decide_words<A: BlockAlgorithm>(
        &self,
        alg: &A,
        t: u64,
        n: u64,
    ) -> crate::check::decision::Words {
        let _guard = latch_direct(&self.header);
        crate::check::decision::Words::of(alg.decide_each(
            &mut LatchedWords(&self.words),
            t,
            n,
            &mut [],
        ))
    }

    /// Runs `read` on the block under the latch (a snapshot: checks wait
    /// meanwhile, so what it reads is one state the limiter had).
    pub(crate) fn latched<R>(&self, read: impl FnOnce(&LatchedWords) -> R) -> R {
        let _guard = latch_direct(&self.header);
        read(&LatchedWords(&self.words))
    }

    /// Runs `write` on the block without the latch: only for a cell no
    /// other thread can see yet (a limiter being restored), so reading the
    /// restored words from the caller's reader holds no latch a fork would
    /// wait for.
    pub(crate) fn unshared<R>(&self, write: impl FnOnce(&LatchedWords) -> R) -> R {
        write(&LatchedWords(&self.words))
    }

    pub(crate) fn reset<A: BlockAlgorithm>(&self, alg: &A) {
        let _guard = latch_direct(&self.header);
        alg.clear(&mut LatchedWords(&self.words));
    }
}

impl Drop for BlockCell {
    fn drop(&mut self) {
        if !crate::sync::UNDER_LOOM {
            crate::cell::fork::unregister_direct(&self.header);
        }
    }
}

/// How many turns a waiter on a holder-recording latch spends between two
/// checks that the holder still exists: at most a comparison in a private
/// table, a system call or two in a shared region (`crate::shared::holder`),
/// so once the waiter has spun its 64 turns and is yielding (a system call
/// per turn, and on a loaded machine a whole time slice), one check per 64
/// yields costs little. Counting turns, not time: a yield on a busy machine
/// can take milliseconds, and a latch copied by fork must be recovered
/// after a few of them, not after a thousand. loom checks every turn, so
/// its models stay small.
const CHECK_HOLDER_EVERY: u32 = if crate::sync::UNDER_LOOM { 1 } else { 64 };

/// Takes a latch word that is 0 when free and `LATCHED | holder` when held,
/// recording `me` (non-zero, below `LATCHED`) as the holder.
///
/// Unlike [`latch`], a waiter does not wait forever for a holder that no
/// longer exists: every [`CHECK_HOLDER_EVERY`] turns it asks `alive` about
/// the holder it sees, and when the answer is no it takes the latch over
/// with one CAS from exactly the word it judged (so of several waiters that
/// judge one dead holder, one wins, and a holder that released meanwhile is
/// never overtaken). The second element of the result says whether the
/// latch was taken over; the caller must then make whatever the dead holder
/// was changing safe before using it (the word table needs nothing: every
/// change it makes under this latch is a single CAS, complete or not made).
///
/// A holder is judged dead only by `alive`: a live holder that is slow or
/// descheduled is always waited for.
#[inline]
#[allow(
    clippy::modulo_one,
    reason = "under loom CHECK_HOLDER_EVERY is 1: the modulo is then always 0, on purpose"
)]
pub(crate) fn latch_recording(
    word: &AtomicU64,
    me: u64,
    alive: impl Fn(u64) -> bool,
) -> (LatchGuard<'_>, bool) {
    debug_assert!(me != 0 && me & LATCHED == 0);
    let held = LATCHED | me;
    let mut turns = 0u32;
    loop {
        match word.compare_exchange_weak(0, held, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => {
                let guard = LatchGuard {
                    header: word,
                    release_to: 0,
                    in_flight: None,
                };
                return (guard, false);
            }
            Err(found) => {
                crate::sync::saw(crate::sync::Race::LatchBusy);
                turns = turns.wrapping_add(1);
                waited(turns);
                if found != 0 && turns % CHECK_HOLDER_EVERY == 0 && !alive(found & !LATCHED) {
                    // The holder is gone: take its latch from exactly the
                    // word judged (Acquire, as a normal take).
                    if word
                        .compare_exchange(found, held, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        let guard = LatchGuard {
                            header: word,
                            release_to: 0,
                            in_flight: None,
                        };
                        return (guard, true);
                    }
                }
                if turns < 64 {
                    spin_loop();
                } else {
                    yield_now();
                }
            }
        }
    }
}

//! Saving and restoring a direct limiter ([`Limiter`]) in the snapshot
//! format (`format.rs`).

use super::SnapshotError;
use super::format::*;
use crate::algorithm::{BlockAlgorithm, WordAlgorithm};
use crate::clock::Clock;
use crate::config::Config;
use crate::limiter::{Engine, Limiter};
use std::io::{Read, Write};

impl Limiter {
    /// Writes the configuration and the state to `out`, at the limiter's
    /// current time (see [`Limiter::snapshot_at`]).
    pub fn snapshot(&self, out: impl Write) -> Result<(), SnapshotError> {
        self.snapshot_at(out, self.now_ns())
    }

    /// Writes the configuration (every limit's, for a limiter of several)
    /// and the state to `out`, recording `now_ns` as the time of the
    /// snapshot. Checks on other threads go on: the state saved is one the
    /// limiter had during the call (one atomic load, or a copy under the
    /// latch of a multi-word state).
    pub fn snapshot_at(&self, out: impl Write, now_ns: u64) -> Result<(), SnapshotError> {
        let mut out = Out::new(out);
        let mut buf = Vec::new();
        let header = |state_words: u64| Header::of(self.limits(), now_ns, state_words);
        // A single-word state: one atomic load, from cells of three word types.
        let save_word = |mut out: Out<_>, packed: u128| {
            header(WORD_STATE_WORDS).write(&mut out)?;
            out.word(packed).and_then(|()| out.finish(1))
        };
        let state_words = match self.engine() {
            Engine::Gcra(_, cell) => return save_word(out, cell.load()),
            Engine::TokenBucket(_, cell)
            | Engine::FixedWindow(_, cell)
            | Engine::SlidingWindow(_, cell) => return save_word(out, cell.load()),
            Engine::AllOfWord(_, cell) => return save_word(out, cell.load()),
            Engine::BucketedWindow(alg, cell) => {
                cell.latched(|w| collect(alg, w, &mut buf));
                alg.words()
            }
            Engine::SlidingLog(alg, cell) => {
                cell.latched(|w| collect(alg, w, &mut buf));
                alg.words()
            }
            Engine::AllOfBlock(alg, cell) => {
                cell.latched(|w| collect(alg, w, &mut buf));
                BlockAlgorithm::words(alg)
            }
        };
        header(state_words as u64).write(&mut out)?;
        for &w in &buf {
            out.u64(w)?;
        }
        out.finish(1)
    }

    /// Builds a limiter of `configs` (one limit, or several as one) on
    /// `clock` holding the state saved in `input`: what
    /// [`crate::Builder::build`] makes of a snapshot's states. `configs` must be the saved
    /// limits, in the same order: a snapshot of another configuration is
    /// refused with [`SnapshotError::ConfigMismatch`] naming the first
    /// field that differs (or [`crate::Field::Limits`] when their number
    /// does) before anything is allocated; damaged input with the error
    /// that says how. Names are not saved: the builder applies its own.
    pub(crate) fn from_snapshot(
        input: impl Read,
        configs: &[Config],
        clock: Clock,
    ) -> Result<Limiter, SnapshotError> {
        let mut input = In::new(input);
        let header = Header::read(&mut input)?;
        header.check(configs)?;
        let limiter = Limiter::made(configs, clock)?;
        match limiter.engine() {
            Engine::Gcra(alg, cell) => {
                header.check_layout(1, 0, WORD_STATE_WORDS)?;
                let packed = input.word()?;
                check_word(alg, packed)?;
                cell.store(packed);
            }
            Engine::TokenBucket(alg, cell) => restore_word_cell(&header, &mut input, alg, cell)?,
            Engine::FixedWindow(alg, cell) => restore_word_cell(&header, &mut input, alg, cell)?,
            Engine::SlidingWindow(alg, cell) => restore_word_cell(&header, &mut input, alg, cell)?,
            Engine::AllOfWord(alg, cell) => restore_word_cell(&header, &mut input, alg, cell)?,
            Engine::BucketedWindow(alg, cell) => {
                restore_block_cell(&header, &mut input, alg, cell)?;
            }
            Engine::SlidingLog(alg, cell) => restore_block_cell(&header, &mut input, alg, cell)?,
            Engine::AllOfBlock(alg, cell) => restore_block_cell(&header, &mut input, alg, cell)?,
        }
        input.finish(1)?;
        Ok(limiter)
    }
}

fn restore_word_cell<R: Read, A: WordAlgorithm, W: crate::cell::AtomicWord>(
    header: &Header,
    input: &mut In<R>,
    alg: &A,
    cell: &crate::cell::WordCell<W>,
) -> Result<(), SnapshotError> {
    header.check_layout(1, 0, WORD_STATE_WORDS)?;
    let packed = input.word()?;
    check_word(alg, packed)?;
    cell.store(packed);
    Ok(())
}

fn restore_block_cell<R: Read, A: BlockAlgorithm>(
    header: &Header,
    input: &mut In<R>,
    alg: &A,
    cell: &crate::cell::BlockCell,
) -> Result<(), SnapshotError> {
    header.check_layout(1, 0, alg.words() as u64)?;
    // No other thread sees this limiter yet: no latch is needed, and none
    // is held while the caller's reader runs (a fork would wait for it).
    cell.unshared(|w| {
        read_block(input, alg, w.0)?;
        alg.validate(w).map_err(cannot_have_stored)
    })
}

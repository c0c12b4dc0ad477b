//! Live reconfiguration: which changes a running limiter accepts, and the
//! swap of its parameters.
//!
//! The states already kept are never rewritten (a keyed table may hold
//! millions, and checks run meanwhile): the new parameters read each state
//! as it is. So a change is accepted only when that reading has a
//! defined meaning (the carry-over rules in docs/ALGORITHMS.md, "Live
//! reconfiguration") and the state's layout, its bit widths or word
//! count, stays the same; anything else is refused with
//! [`ReconfigureError`] before anything changes. The parameters themselves
//! are swapped whole through [`crate::policy::live`], so a check decides on the
//! old ones or the new ones.

use crate::algorithm::{BlockAlgorithm, WordAlgorithm, all_of::AllOf};
use crate::config::{Algorithm, Config, ConfigError, Error, Field, Params, ReconfigureError};
use crate::policy::live::Live;

fn refuse(limit: usize, field: Field, message: String) -> Error {
    Error::Reconfigure(ReconfigureError {
        limit,
        field,
        message,
    })
}

/// Checks every rule that does not depend on the layout, and validates the
/// new configs as a constructor would; returns their parameters.
pub(crate) fn check(old: &[Config], new: &[Config]) -> Result<Vec<Params>, Error> {
    if new.len() != old.len() {
        return Err(refuse(
            0,
            Field::Limits,
            format!(
                "{} limits given for a limiter of {}: the number of limits cannot change while running",
                new.len(),
                old.len()
            ),
        ));
    }
    let mut params = Vec::with_capacity(new.len());
    for (i, (o, c)) in old.iter().zip(new).enumerate() {
        let p = c.params().map_err(|e| ConfigError {
            field: e.field,
            message: if new.len() > 1 {
                format!("limit {i}: {}", e.message)
            } else {
                e.message
            },
        })?;
        if c.algorithm != o.algorithm {
            return Err(refuse(
                i,
                Field::Algorithm,
                format!(
                    "{} to {}: the kept states mean nothing to another algorithm",
                    o.algorithm, c.algorithm
                ),
            ));
        }
        if c.capacity != o.capacity {
            return Err(refuse(
                i,
                Field::Capacity,
                format!(
                    "{} to {}: the table was sized at construction",
                    o.capacity, c.capacity
                ),
            ));
        }
        if c.overflow != o.overflow {
            return Err(refuse(
                i,
                Field::Overflow,
                format!(
                    "{:?} to {:?}: the table's overflow policy is fixed at construction",
                    o.overflow, c.overflow
                ),
            ));
        }
        let windowed = matches!(
            c.algorithm,
            Algorithm::FixedWindow
                | Algorithm::SlidingWindow
                | Algorithm::BucketedWindow
                | Algorithm::SlidingLog
        );
        if windowed && c.period_ns != o.period_ns {
            return Err(refuse(
                i,
                Field::PeriodNs,
                format!(
                    "{} ns to {} ns: {} states count per window of the old period, which the new one cannot read",
                    o.period_ns, c.period_ns, c.algorithm
                ),
            ));
        }
        if c.algorithm == Algorithm::BucketedWindow && c.sub_windows != o.sub_windows {
            return Err(refuse(
                i,
                Field::SubWindows,
                format!(
                    "{} to {}: the counters are laid out per sub-window",
                    o.sub_windows, c.sub_windows
                ),
            ));
        }
        if c.algorithm == Algorithm::SlidingLog && c.limit != o.limit {
            return Err(refuse(
                i,
                Field::Limit,
                format!(
                    "{} to {}: a sliding log keeps one entry per admitted unit in a ring of `limit` entries, allocated at construction",
                    o.limit, c.limit
                ),
            ));
        }
        params.push(p);
    }
    Ok(params)
}

/// The refusal for a change of layout, blamed on the field that changed.
fn layout(
    limit: usize,
    old: &Config,
    new: &Config,
    was: impl std::fmt::Display,
    now: impl std::fmt::Display,
    unit: &str,
) -> Error {
    let (field, from, to) = if new.limit != old.limit {
        (Field::Limit, old.limit, new.limit)
    } else {
        (Field::Burst, old.burst, new.burst)
    };
    refuse(
        limit,
        field,
        format!(
            "{} {from} to {to} changes the state layout ({was} to {now} {unit}); a live change keeps the states as they are, so the counts must fit the widths chosen at construction (the same power of two: a limit or burst below 2^k keeps k bits); build a new limiter for this one",
            field.name()
        ),
    )
}

/// Swaps a single-word algorithm's parameters when the layout is kept.
pub(crate) fn word<A: WordAlgorithm>(
    live: &Live<A>,
    new: A,
    old_config: &Config,
    config: &Config,
) -> Result<(), Error> {
    let (was, now) = (live.get().state_bits(), new.state_bits());
    if was != now {
        return Err(layout(0, old_config, config, was, now, "bits"));
    }
    live.swap().replace(new);
    Ok(())
}

/// Swaps a multi-word algorithm's parameters when the layout is kept.
pub(crate) fn block<A: BlockAlgorithm>(
    live: &Live<A>,
    new: A,
    old_config: &Config,
    config: &Config,
) -> Result<(), Error> {
    let (was, now) = (live.get().words(), new.words());
    if was != now {
        return Err(layout(0, old_config, config, was, now, "words"));
    }
    live.swap().replace(new);
    Ok(())
}

/// Swaps a composite's parameters when every limit keeps its place.
pub(crate) fn all_of(
    live: &Live<AllOf>,
    new: AllOf,
    old: &[Config],
    configs: &[Config],
) -> Result<(), Error> {
    same_layout(live.get(), &new, old, configs)?;
    live.swap().replace(new);
    Ok(())
}

/// Refuses `new` when a limit's state would sit or be sized differently
/// than in `was` (so a kept state could not be read by it).
pub(crate) fn same_layout(
    was: &AllOf,
    new: &AllOf,
    old: &[Config],
    configs: &[Config],
) -> Result<(), Error> {
    if let Some((i, was, now)) = was.layout_differs(new) {
        let unit = if new.is_word() { "bits" } else { "words" };
        return Err(layout(i, &old[i], &configs[i], was, now, unit));
    }
    Ok(())
}

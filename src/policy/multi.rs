//! Several limits as one limiter ("10 per second and 1000 per day"): the
//! checks, constructors' validation and the per-limit answer shared by the
//! direct and the keyed limiter.
//!
//! A multi-limit [`crate::Limiter`] or [`crate::KeyedLimiter`] is the
//! ordinary limiter over a composite algorithm (`algorithm::all_of`) whose
//! state is every limit's state side by side, so the cell or the table
//! updates all of a key's limits as one: one CAS when their states fit one
//! word, its latch otherwise. A request is admitted only when every limit
//! admits it, and only then is anything stored; concurrent requests are
//! decided as in some sequential order, with no spend-and-refund window in
//! which one request could be denied by another's tentative spend.
//!
//! This module owns the validation of a list of limits, their names, and
//! [`MultiDecision`]; it touches no atomic.

use crate::algorithm::all_of::{AllOf, Rule, combine};
use crate::check::decision::Decision;
use crate::config::{Config, ConfigError, Error, Field};

pub use crate::algorithm::all_of::MAX_LIMITS;

/// The answer to one request checked against several limits: the combined
/// [`Decision`], which limit denied, and each limit's own decision.
///
/// The combined decision: `allowed` when every limit admits;
/// `remaining` the least over the limits and `limit` that limit's (the
/// first on ties), each limit's on its state after the decision (unchanged
/// when the request is not admitted); `retry_after_ns` 0 when admitted,
/// else the largest of the limits' own (`u64::MAX` if any says never);
/// `reset_after_ns` the largest; `wait_ns` the largest when admitted.
///
/// A limit that would admit the request alone while another denies it
/// reports `allowed: true`, `retry_after_ns: 0`, `wait_ns: 0`, and the
/// `remaining` and `reset_after_ns` of its unchanged state (nothing was
/// spent).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct MultiDecision {
    /// The combined decision (what `check` returns).
    pub decision: Decision,
    /// The limit that denied: the one whose wait is the combined
    /// `retry_after_ns`, the lowest index on ties. `None` when admitted,
    /// and also when no limit denied but a keyed limiter's table had no
    /// room for a new key (overflow policy `deny`).
    pub denied_by: Option<usize>,
    each: [Decision; MAX_LIMITS],
    len: usize,
}

impl MultiDecision {
    /// Each limit's own decision, in the order the limits were given.
    pub fn limits(&self) -> &[Decision] {
        &self.each[..self.len]
    }

    /// From the combined decision and the decisions a composite wrote.
    pub(crate) fn of_many(decision: Decision, each: [Decision; MAX_LIMITS], len: usize) -> Self {
        let denied_by = if decision.allowed {
            None
        } else {
            combine(&each[..len]).1
        };
        MultiDecision {
            decision,
            denied_by,
            each,
            len,
        }
    }

    /// A single-limit limiter's decision, as a list of one.
    pub(crate) fn of_one(decision: Decision) -> Self {
        let mut each = [Decision::default(); MAX_LIMITS];
        each[0] = decision;
        MultiDecision {
            decision,
            denied_by: (!decision.allowed).then_some(0),
            each,
            len: 1,
        }
    }
}

impl std::fmt::Debug for MultiDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiDecision")
            .field("decision", &self.decision)
            .field("denied_by", &self.denied_by)
            .field("limits", &self.limits())
            .finish()
    }
}

/// The limits a limiter enforces, and their optional names.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub configs: Box<[Config]>,
    pub names: Box<[Option<String>]>,
}

impl Limits {
    pub(crate) fn one(config: Config) -> Limits {
        Limits {
            configs: Box::new([config]),
            names: Box::new([None]),
        }
    }

    /// Names the limits in order (an empty name is no name).
    pub(crate) fn name(&mut self, names: &[&str]) -> Result<(), Error> {
        if names.len() != self.configs.len() {
            return Err(ConfigError {
                field: Field::Limits,
                message: format!(
                    "{} names for {} limits: give one name per limit, in order",
                    names.len(),
                    self.configs.len()
                ),
            }
            .into());
        }
        self.names = names
            .iter()
            .map(|n| (!n.is_empty()).then(|| (*n).to_owned()))
            .collect();
        Ok(())
    }
}

/// Checks a list of limits and builds their composite; `max_bits` is how
/// many state bits one word may hold (128 direct, 96 keyed).
///
/// Errors name the field: `Limits` for no limits or more than
/// [`MAX_LIMITS`]; any field of any limit as [`Config::params`] would
/// (the message says which limit); `Capacity` or `Overflow` when a limit's
/// differs from the first's (all limits share one table); `Limit` when
/// the limits' states take more than `u32::MAX` words together (a sliding
/// log of 2^31 entries or more).
pub(crate) fn all_of(configs: &[Config], max_bits: u32) -> Result<AllOf, Error> {
    Ok(AllOf::new(&rules(configs)?, max_bits))
}

/// [`all_of`]'s checks, returning each limit's rule (tiers widen them to
/// one layout before building their composites: `crate::policy::tiers`).
pub(crate) fn rules(configs: &[Config]) -> Result<Vec<Rule>, Error> {
    if !(1..=MAX_LIMITS).contains(&configs.len()) {
        return Err(ConfigError {
            field: Field::Limits,
            message: format!(
                "{} limits: a limiter checks 1 to {MAX_LIMITS} limits together",
                configs.len()
            ),
        }
        .into());
    }
    let first = &configs[0];
    let mut rules = Vec::with_capacity(configs.len());
    for (i, c) in configs.iter().enumerate() {
        let p = c.params().map_err(|e| ConfigError {
            field: e.field,
            message: format!("limit {i}: {}", e.message),
        })?;
        if c.capacity != first.capacity {
            return Err(ConfigError {
                field: Field::Capacity,
                message: format!(
                    "limit {i} has capacity {}, limit 0 has {}: all limits share one table, so one capacity",
                    c.capacity, first.capacity
                ),
            }
            .into());
        }
        if c.overflow != first.overflow {
            return Err(ConfigError {
                field: Field::Overflow,
                message: format!(
                    "limit {i} has overflow {:?}, limit 0 has {:?}: all limits share one table, so one overflow policy",
                    c.overflow, first.overflow
                ),
            }
            .into());
        }
        rules.push(Rule::new(&p));
    }
    // The block layout places each limit's words at a 32-bit offset.
    let mut words = 0usize;
    for (i, rule) in rules.iter().enumerate() {
        words += rule.words();
        if words > u32::MAX as usize {
            return Err(ConfigError {
                field: Field::Limit,
                message: format!(
                    "limit {i}: {} takes {} words of state per key, {words} with the limits before it; several limits keep at most {} words (32 GiB) per key together: lower its limit",
                    configs[i].algorithm.name(),
                    rule.words(),
                    u32::MAX
                ),
            }
            .into());
        }
    }
    Ok(rules)
}

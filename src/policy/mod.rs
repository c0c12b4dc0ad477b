//! What a limiter enforces beyond one limit: several limits as one
//! ([`multi`]), a quota per tier ([`tiers`]), and limits changed while
//! checks run ([`live`] holds the parameters a change swaps,
//! [`reconfigure`] decides which changes are accepted). Above the
//! algorithms and the table, below the limiters that apply them.

pub(crate) mod live;
pub(crate) mod multi;
pub(crate) mod reconfigure;
pub(crate) mod tiers;

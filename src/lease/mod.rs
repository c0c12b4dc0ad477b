//! Leases ([SPEC §8](crate::spec#8-leases-one-limit-for-a-fleet-decided-locally)):
//! a limit kept in Redis, spent locally from grants, without I/O.
//!
//! This module owns the node's side of the lease protocol: per key, the
//! units a grant gave and when they expire (one atomic word, `cell`), the
//! decision to spend locally, to ask for a grant now, or to refill in the
//! background; how big a grant to ask for; what a grant reply does; the
//! node's health (one failed grant puts every key on the failure policy,
//! one probe finds Redis again) and the failure policy's decision. It
//! sends nothing and reads no clock: every call takes the time, and a
//! caller with a connection (the `ratecell-redis-client` crate) carries
//! each [`GrantRequest`] to Redis and hands the reply back to
//! [`Leases::complete`]. It also keeps `cached_deny`'s remembered
//! denials ([`DenialCache`]), the other mode that decides some requests
//! without Redis.
//!
//! It owns the grant rule too (`grant`: pure functions on a key's plain
//! words), which the Redis module runs for every `RATECELL.LEASE`, so that
//! there is one implementation of it and the protocol's model checks
//! that one. It may not touch the keyed table's
//! internals: it hashes keys with the table's [`KeyHasher`](crate::table::KeyHasher),
//! so a key is the same key here and in a [`KeyedLimiter`](crate::KeyedLimiter),
//! and the `local` failure policy is a `KeyedLimiter`.
//!
//! - `config`: [`LeaseConfig`], its defaults and the checks that refuse it.
//! - `grant`: the module's grant rule, a grant's lifetime, and the charges
//!   that carry a node's own admissions (the `local` policy's, while Redis
//!   was away) into the key's state.
//! - `protocol`: the command's arguments, the reply, grant sizing, backoff
//!   and the probe's delay.
//! - `cell`: the grant word, its entry's generation in it, and its CAS loops
//!   (the only atomic a spend writes).
//! - `store`: keys to entries, found without a lock; idle entries reused for
//!   new keys; the key's bytes kept for the command.
//! - `entry`: a key's entry (the grant word and what its lock guards) and
//!   the node's health.
//! - `leases`: [`Leases`], the per-key protocol.
//! - `request`: [`GrantRequest`], a grant on its way, with the debt it
//!   carries.
//! - `deny`: [`DenialCache`].

mod cell;
mod config;
mod deny;
mod entry;
mod grant;
mod leases;
#[cfg(all(test, ratecell_loom))]
mod loom_model;
#[cfg(all(test, not(ratecell_loom)))]
mod model;
mod protocol;
mod request;
mod store;
#[cfg(all(test, not(ratecell_loom)))]
mod tests;

pub use config::{FailurePolicy, LeaseConfig, LeaseError};
pub use deny::DenialCache;
pub use grant::{Charge, Grant, grant};
pub use leases::{Completion, LeaseStats, Leases, Step};
pub use protocol::{
    GrantReply, PROBE_INTERVAL_NS, ReplyError, backoff_ns, grant_size, lease_command,
    probe_delay_ns,
};
pub use request::GrantRequest;

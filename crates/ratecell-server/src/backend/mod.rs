//! Where limits are kept and how one request's checks are decided: in
//! this process ([`memory`]), in Redis one command per request
//! ([`strict`]), or in Redis through leases decided here ([`leased`]).
//!
//! Every backend decides a request's checks the same way: the *binding*
//! checks (every limited descriptor not in shadow mode) are all-or-nothing:
//! all admit and all are counted, or the request is denied and none is
//! counted. A shadow-mode check is decided on its own: counted when it
//! admits; its denial denies nothing. Two exceptions, described in their
//! modules: the leased backend, and the strict one on a Redis Cluster
//! when a request's keys fall in several hash slots.

pub mod leased;
pub mod memory;
pub mod strict;

use std::fmt;
use std::sync::Arc;

use ratecell::{Config as LimitConfig, Decision};

use crate::config::Config;
use crate::settings::{BackendKind, RedisMode, Settings};

/// One check of a request.
#[derive(Clone, Copy, Debug)]
pub struct Check<'a> {
    /// The rule's identity (its path, or an override's): the table the
    /// key is counted in.
    pub table: &'a str,
    pub limit: &'a LimitConfig,
    /// The descriptor's key (prefix, domain, entries).
    pub key: &'a [u8],
    pub cost: u64,
    /// Whether a denial denies the request (not in shadow mode).
    pub binding: bool,
}

/// A backend that could not decide (Redis did not answer in time).
#[derive(Debug)]
pub struct BackendError(pub String);

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The three backends.
pub enum Backend {
    Memory(memory::Memory),
    Strict(strict::Strict),
    Leased(leased::Leased),
}

impl Backend {
    /// The backend the settings name, set up for `config`'s rules.
    pub async fn new(settings: &Settings, config: &Config) -> Result<Backend, String> {
        let b = match &settings.backend {
            BackendKind::Memory => Backend::Memory(memory::Memory::new(
                settings.memory_keys,
                settings.snapshot_dir.clone(),
            )),
            BackendKind::Redis(r) => match r.mode {
                RedisMode::Strict => Backend::Strict(strict::Strict::connect(r).await?),
                RedisMode::Leased => Backend::Leased(leased::Leased::new(r)),
            },
        };
        b.reconfigure(config)?;
        Ok(b)
    }

    /// Decides `checks` as one request (see the module doc); one decision
    /// per check, in order.
    pub async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, BackendError> {
        match self {
            Backend::Memory(m) => Ok(m.decide(checks)),
            Backend::Strict(s) => s.decide(checks).await,
            Backend::Leased(l) => l.decide(checks).await,
        }
    }

    /// Follows a new configuration: a rule whose limit is unchanged keeps
    /// its counts; one whose limit changed keeps them where the library's
    /// live reconfiguration can carry them over. A configuration the
    /// backend cannot keep is refused, naming the rule.
    pub fn reconfigure(&self, config: &Config) -> Result<(), String> {
        let rules: Vec<(String, LimitConfig)> = config
            .rules()
            .iter()
            .filter_map(|r| Some((r.path.clone(), r.limit.as_ref()?.config?)))
            .collect();
        match self {
            Backend::Memory(m) => m.reconfigure(&rules),
            Backend::Strict(_) => Ok(()),
            Backend::Leased(l) => l.reconfigure(&rules),
        }
    }

    /// Saves what must outlive the process (the memory backend's tables,
    /// when a snapshot directory is set).
    pub fn shutdown(&self) {
        if let Backend::Memory(m) = self {
            m.save();
        }
    }

    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Memory(_) => "memory",
            Backend::Strict(_) => "redis (strict)",
            Backend::Leased(_) => "redis (leased)",
        }
    }
}

/// The indices of the binding checks and of the shadow ones.
pub(crate) fn split(checks: &[Check<'_>]) -> (Vec<usize>, Vec<usize>) {
    (0..checks.len()).partition(|&i| checks[i].binding)
}

/// The decision a backend gives a check it could not ask about, under a
/// failure policy that allows.
pub(crate) fn allowed(limit: &LimitConfig) -> Decision {
    Decision {
        allowed: true,
        limit: limit.limit,
        remaining: limit.limit,
        ..Decision::default()
    }
}

/// As [`allowed`], denying.
pub(crate) fn denied(limit: &LimitConfig) -> Decision {
    Decision {
        allowed: false,
        limit: limit.limit,
        remaining: 0,
        retry_after_ns: limit.period_ns,
        ..Decision::default()
    }
}

/// Shared handle type of the rules' tables.
pub(crate) type Tables<T> = std::sync::RwLock<std::collections::HashMap<String, Arc<T>>>;

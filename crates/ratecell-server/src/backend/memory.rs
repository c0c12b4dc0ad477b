//! Limits in this process: one keyed table per rule (ratecell's
//! [`KeyedLimiter`], evicting the key nearest to fresh when full), kept
//! across reloads, optionally saved on shutdown and restored on start.
//!
//! All-or-nothing across tables: each key belongs to one of a fixed set of
//! stripes. A request of one binding check holds its stripe shared; a
//! request of several holds all of theirs exclusively, in order, peeks at
//! every check at one instant, and counts them only if every one admits.
//! A peek (cost 0) says how many cost-1 requests would be admitted
//! (SPEC §3), and a request of cost `c` is admitted exactly when that is at
//! least `c`, so the decision and the counting that follows agree.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use ratecell::{Config as LimitConfig, Decision, KeyedLimiter, Overflow, Request, States};

use super::{Check, Tables, split};

const STRIPES: usize = 1024;

/// The memory backend.
pub struct Memory {
    tables: Tables<KeyedLimiter>,
    stripes: Box<[RwLock<()>]>,
    hasher: std::collections::hash_map::RandomState,
    keys: u64,
    snapshot_dir: Option<PathBuf>,
}

impl Memory {
    pub fn new(keys: u64, snapshot_dir: Option<PathBuf>) -> Memory {
        Memory {
            tables: RwLock::new(HashMap::new()),
            stripes: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            hasher: Default::default(),
            keys,
            snapshot_dir,
        }
    }

    fn snapshot_path(&self, table: &str) -> Option<PathBuf> {
        // A rule's path may hold any byte a YAML value can; the file name
        // is its hash, and the snapshot records the limit it was taken under.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        table.hash(&mut h);
        Some(
            self.snapshot_dir
                .as_ref()?
                .join(format!("{:016x}.ratecell", h.finish())),
        )
    }

    fn make(&self, table: &str, limit: &LimitConfig) -> Arc<KeyedLimiter> {
        let config = limit.capacity(self.keys).overflow(Overflow::Evict);
        let builder = || KeyedLimiter::builder().limit(config);
        if let Some(path) = self.snapshot_path(table).filter(|p| p.exists()) {
            match builder().states(States::snapshot(&path)).build() {
                Ok(t) => {
                    tracing::info!(rule = table, path = %path.display(), "restored the rule's counts from its snapshot");
                    return Arc::new(t);
                }
                Err(e) => {
                    tracing::warn!(rule = table, path = %path.display(), "snapshot not restored, starting fresh: {e}")
                }
            }
        }
        // The limit was checked when the configuration was loaded.
        Arc::new(builder().build().expect("a checked limit builds"))
    }

    fn table(&self, check: &Check<'_>) -> Arc<KeyedLimiter> {
        if let Some(t) = self
            .tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(check.table)
        {
            return t.clone();
        }
        // A per-request override's table, made on first use.
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        tables
            .entry(check.table.to_owned())
            .or_insert_with(|| self.make(check.table, check.limit))
            .clone()
    }

    fn stripe(&self, check: &Check<'_>) -> usize {
        let mut h = self.hasher.build_hasher();
        check.table.hash(&mut h);
        check.key.hash(&mut h);
        (h.finish() as usize) % STRIPES
    }

    /// Decides a request's checks (the module doc's rule).
    pub fn decide(&self, checks: &[Check<'_>]) -> Vec<Decision> {
        let tables: Vec<Arc<KeyedLimiter>> = checks.iter().map(|c| self.table(c)).collect();
        let (binding, shadow) = split(checks);
        let mut out = vec![Decision::default(); checks.len()];
        for &i in &shadow {
            let _g = self.stripes[self.stripe(&checks[i])]
                .read()
                .unwrap_or_else(|e| e.into_inner());
            out[i] = tables[i].check(checks[i].key, checks[i].cost);
        }
        match binding.len() {
            0 => {}
            1 => {
                let i = binding[0];
                let _g = self.stripes[self.stripe(&checks[i])]
                    .read()
                    .unwrap_or_else(|e| e.into_inner());
                out[i] = tables[i].check(checks[i].key, checks[i].cost);
            }
            _ => self.decide_together(checks, &tables, &binding, &mut out),
        }
        out
    }

    fn decide_together(
        &self,
        checks: &[Check<'_>],
        tables: &[Arc<KeyedLimiter>],
        binding: &[usize],
        out: &mut [Decision],
    ) {
        let mut stripes: Vec<usize> = binding.iter().map(|&i| self.stripe(&checks[i])).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _guards: Vec<RwLockWriteGuard<'_, ()>> = stripes
            .iter()
            .map(|&s| self.stripes[s].write().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let now = tables[binding[0]].now_ns();
        // The service made one check per counter, so no two checks here
        // draw on one key.
        let mut all = true;
        for &i in binding {
            let peek = tables[i].check(checks[i].key, Request::new(0).at(now));
            if peek.remaining >= checks[i].cost {
                out[i] = peek;
            } else {
                all = false;
                // Denied: the check stores nothing, and says when to retry.
                out[i] = tables[i].check(checks[i].key, Request::new(checks[i].cost).at(now));
            }
        }
        if !all {
            return;
        }
        for &i in binding {
            out[i] = tables[i].check(checks[i].key, Request::new(checks[i].cost).at(now));
            if !out[i].allowed {
                tracing::error!(
                    rule = checks[i].table,
                    "a check the peek admitted was denied: the request is partly counted"
                );
            }
        }
    }

    /// Keeps the tables of unchanged rules, reconfigures changed ones
    /// (counts carried over where the library can), makes new ones, and
    /// drops removed ones.
    pub fn reconfigure(&self, rules: &[(String, LimitConfig)]) -> Result<(), String> {
        let mut tables = self.tables.write().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::with_capacity(rules.len());
        for (path, limit) in rules {
            let table = match tables.remove(path) {
                Some(t)
                    if t.config().algorithm == limit.algorithm
                        && t.limits()[0] == limit.capacity(self.keys).overflow(Overflow::Evict) =>
                {
                    t
                }
                Some(t) => {
                    match t.reconfigure(&[limit.capacity(self.keys).overflow(Overflow::Evict)]) {
                        Ok(()) => t,
                        Err(e) => {
                            tracing::info!(rule = %path, "the rule's counts start afresh: {e}");
                            self.make(path, limit)
                        }
                    }
                }
                None => self.make(path, limit),
            };
            next.insert(path.clone(), table);
        }
        *tables = next;
        Ok(())
    }

    /// Saves every table to the snapshot directory, if one is set.
    pub fn save(&self) {
        let Some(dir) = &self.snapshot_dir else {
            return;
        };
        if let Err(e) = std::fs::create_dir_all(dir) {
            tracing::error!(dir = %dir.display(), "cannot create the snapshot directory: {e}");
            return;
        }
        for (path, table) in self.tables.read().unwrap_or_else(|e| e.into_inner()).iter() {
            let Some(file) = self.snapshot_path(path) else {
                continue;
            };
            match table.save(&file) {
                Ok(()) => tracing::info!(rule = %path, file = %file.display(), "saved"),
                Err(e) => tracing::error!(rule = %path, file = %file.display(), "not saved: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratecell::Algorithm;

    fn check<'a>(table: &'a str, limit: &'a LimitConfig, key: &'a [u8], cost: u64) -> Check<'a> {
        Check {
            table,
            limit,
            key,
            cost,
            binding: true,
        }
    }

    #[test]
    fn a_denied_request_counts_on_no_descriptor() {
        let m = Memory::new(1024, None);
        let ten = LimitConfig::new(Algorithm::FixedWindow, 10, 3_600_000_000_000);
        let two = LimitConfig::new(Algorithm::FixedWindow, 2, 3_600_000_000_000);
        m.reconfigure(&[("d.a".into(), ten), ("d.b".into(), two)])
            .unwrap();
        let both = |cost| {
            m.decide(&[
                check("d.a", &ten, b"a", cost),
                check("d.b", &two, b"b", cost),
            ])
        };
        let d = both(2);
        assert!(d[0].allowed && d[1].allowed);
        assert_eq!((d[0].remaining, d[1].remaining), (8, 0));
        let d = both(1);
        assert!(d[0].allowed, "a would admit: reported as a peek");
        assert!(!d[1].allowed);
        assert_eq!(d[0].remaining, 8, "a was not counted");
        let alone = m.decide(&[check("d.a", &ten, b"a", 8)]);
        assert!(alone[0].allowed && alone[0].remaining == 0, "{alone:?}");
    }

    #[test]
    fn a_shadow_check_is_decided_on_its_own() {
        let m = Memory::new(1024, None);
        let one = LimitConfig::new(Algorithm::FixedWindow, 1, 3_600_000_000_000);
        m.reconfigure(&[("d.a".into(), one), ("d.s".into(), one)])
            .unwrap();
        let mut s = check("d.s", &one, b"s", 1);
        s.binding = false;
        let d = m.decide(&[check("d.a", &one, b"a", 1), s]);
        assert!(d[0].allowed && d[1].allowed);
        let mut s = check("d.s", &one, b"s", 1);
        s.binding = false;
        let d = m.decide(&[check("d.a", &one, b"b", 1), s]);
        assert!(d[0].allowed, "the shadow check's denial denies nothing");
        assert!(!d[1].allowed);
    }

    #[test]
    fn a_reload_keeps_unchanged_and_carries_changed_counts() {
        let m = Memory::new(1024, None);
        let ten = LimitConfig::new(Algorithm::FixedWindow, 10, 3_600_000_000_000);
        m.reconfigure(&[("d.a".into(), ten)]).unwrap();
        m.decide(&[check("d.a", &ten, b"k", 4)]);
        m.reconfigure(&[("d.a".into(), ten)]).unwrap();
        assert_eq!(m.decide(&[check("d.a", &ten, b"k", 0)])[0].remaining, 6);
        // 10 → 12 keeps the state's layout: the count carries over.
        let twelve = LimitConfig::new(Algorithm::FixedWindow, 12, 3_600_000_000_000);
        m.reconfigure(&[("d.a".into(), twelve)]).unwrap();
        assert_eq!(m.decide(&[check("d.a", &twelve, b"k", 0)])[0].remaining, 8);
        // 12 → 40 needs wider states: the library refuses, the rule starts afresh.
        let forty = LimitConfig::new(Algorithm::FixedWindow, 40, 3_600_000_000_000);
        m.reconfigure(&[("d.a".into(), forty)]).unwrap();
        assert_eq!(m.decide(&[check("d.a", &forty, b"k", 0)])[0].remaining, 40);
    }
}

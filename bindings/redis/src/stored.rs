//! The value a ratecell key holds in Redis, and its one serialised form.
//!
//! A [`Stored`] is the configuration that shapes the state (algorithm,
//! period, sub-windows; limit and burst as last used) plus the state's plain
//! words ([`ratecell::state`]). The same little-endian encoding of those
//! integers carries a state to replicas and the AOF (`RATECELL.RESTORE`);
//! the RDB saves the same integers one by one. [`ENCODING`] versions both.

use ratecell::{Algorithm, Config, state::Rule};

/// The version of the encoding; RDB loads refuse any other.
pub const ENCODING: u64 = 1;

/// Integers before the words: encoding, algorithm, limit, burst, period,
/// sub-windows, `at` flag, word count.
const HEADER: usize = 8;

/// A ratecell key's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The configuration the state was last decided under.
    pub config: Config,
    /// Written by a request with `AT`: kept without expiry.
    pub at: bool,
    /// The state, [`Rule::words`] long.
    pub words: Vec<u64>,
}

impl Stored {
    /// Whether a request under `rule` may use this state, or the error that
    /// refuses it: the algorithm, period and sub-window count shape the
    /// state and may not change on a live key (nor, for the sliding log
    /// whose ring holds `limit` entries, the limit).
    pub fn check_compatible(&self, rule: &Rule, key: &[u8]) -> Result<(), String> {
        let (old, new) = (&self.config, rule.config());
        // Quoted only when refused: this runs on every check.
        let key = || crate::args::text(key);
        if old.algorithm != new.algorithm {
            return Err(format!(
                "ERR key '{}' holds a live {} state; it cannot be checked as {} (DEL it, or wait until it expires)",
                key(),
                old.algorithm,
                new.algorithm
            ));
        }
        if old.period_ns != new.period_ns {
            return Err(format!(
                "ERR key '{}' holds a live state with period {}ns; it cannot be checked with period {}ns (DEL it, or wait until it expires)",
                key(),
                old.period_ns,
                new.period_ns
            ));
        }
        if old.algorithm == Algorithm::BucketedWindow && old.sub_windows != new.sub_windows {
            return Err(format!(
                "ERR key '{}' holds a live state with SUBWINDOWS {}; it cannot be checked with SUBWINDOWS {} (DEL it, or wait until it expires)",
                key(),
                old.sub_windows,
                new.sub_windows
            ));
        }
        if old.algorithm == Algorithm::SlidingLog && old.limit != new.limit {
            return Err(format!(
                "ERR key '{}' holds a live sliding_log state with limit {}; a sliding_log's limit cannot change on a live key (DEL it, or wait until it expires)",
                key(),
                old.limit
            ));
        }
        Ok(())
    }

    /// The integers of the encoding, in order.
    pub fn integers(&self) -> Vec<u64> {
        let c = &self.config;
        let mut out = Vec::with_capacity(HEADER + self.words.len());
        out.extend([
            ENCODING,
            c.algorithm as u64,
            c.limit,
            c.burst,
            c.period_ns,
            u64::from(c.sub_windows),
            u64::from(self.at),
            self.words.len() as u64,
        ]);
        out.extend_from_slice(&self.words);
        out
    }

    /// The encoding as bytes (for `RATECELL.RESTORE`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoding to `out` (the hot path reuses one buffer).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let c = &self.config;
        let header = [
            ENCODING,
            c.algorithm as u64,
            c.limit,
            c.burst,
            c.period_ns,
            u64::from(c.sub_windows),
            u64::from(self.at),
            self.words.len() as u64,
        ];
        out.reserve(8 * (HEADER + self.words.len()));
        for v in header.iter().chain(&self.words) {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// Rebuilds a value from its integers, checking everything: a value
    /// that a limiter would refuse, or whose word count does not match its
    /// configuration, is an error.
    pub fn from_integers(mut next: impl FnMut() -> Option<u64>) -> Result<Stored, String> {
        let mut get = |what: &str| next().ok_or_else(|| format!("state is truncated at {what}"));
        let encoding = get("encoding")?;
        if encoding != ENCODING {
            return Err(format!(
                "state encoding {encoding} is not {ENCODING} (written by another version)"
            ));
        }
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
        Ok(Stored { config, at, words })
    }

    /// The inverse of [`Stored::to_bytes`]; the bytes must hold nothing more.
    pub fn from_bytes(bytes: &[u8]) -> Result<Stored, String> {
        if bytes.len() % 8 != 0 {
            return Err("state length is not a multiple of 8 bytes".into());
        }
        let mut it = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")));
        let stored = Stored::from_integers(|| it.next())?;
        if it.next().is_some() {
            return Err("state has bytes after its words".into());
        }
        Ok(stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_refuse_garbage() {
        let config = Config::new(Algorithm::BucketedWindow, 7, 1_000_000_000).sub_windows(4);
        let s = Stored {
            config,
            at: true,
            words: vec![1, 2, 3],
        };
        assert_eq!(Stored::from_bytes(&s.to_bytes()).unwrap(), s);
        let mut b = s.to_bytes();
        b.extend([0; 8]);
        assert!(Stored::from_bytes(&b).is_err());
        assert!(Stored::from_bytes(&s.to_bytes()[..16]).is_err());
        let mut wrong = s.clone();
        wrong.words.pop();
        assert!(Stored::from_bytes(&wrong.to_bytes()).is_err());
    }
}

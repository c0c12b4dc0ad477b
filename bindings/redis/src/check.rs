//! `RATECELL.CHECK` and `RATECELL.CHECKALL`: one or several limits
//! decided on their keys' states, stored only when admitted, and the parse
//! cache of the one-key command.

use crate::args;
use crate::key::{Form, Held, Key};
use crate::reply::err;
use crate::store::{bytes, now_ns, publish, replicate_del, store_new, store_word};
use crate::tally;
use crate::value::{Shape, Value};
use crate::word;
use ratecell::{Decision, state::Rule};
use redis_module::{RedisError, RedisString, raw};

/// `RATECELL.CHECK`: one limit on one key, decided in place on the stored
/// value (no copy), written back only if it changed.
///
/// `t` is the request's time; `at` says whether a client gave it (`AT`):
/// then the state is kept without expiry.
pub(crate) fn check_one(
    ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    name_bytes: &[u8],
    rule: &Rule,
    cost: u64,
    t: u64,
    at: bool,
) -> Result<Decision, RedisError> {
    let mut key = Key::open(ctx, name);
    let d = match key.held(rule, name_bytes)? {
        Held::Other(shape) => return Err(err(shape.admits(rule, name_bytes).unwrap_err())),
        Held::Word { word, form } => {
            // A one-word state is decided on a copy and written back in
            // the form the key holds it: redis-cell's form stays redis-cell's
            // (SPEC.md §7), so CL.THROTTLE, redis-cell and GET still read it.
            let mut words = [word];
            let d = rule.decide(&mut words, t, cost);
            // An admission writes the key whatever it held; otherwise only
            // a state written with AT (no expiry) checked without, or the
            // reverse, is written again.
            if (d.allowed && cost > 0) || key.expires() == at {
                if !at && rule.is_fresh_at(&words, t) {
                    key.delete();
                    replicate_del(ctx, name);
                } else {
                    let reset_after = (!at).then_some(d.reset_after_ns);
                    let alg = rule.config().algorithm;
                    store_word(ctx, &mut key, name, form, alg, words[0], t, reset_after)?;
                }
            }
            d
        }
        Held::Value(mut v) => {
            let d = rule.decide(v.words_mut(), t, cost);
            if (d.allowed && cost > 0) || v.at() != at {
                v.set_at(at);
                if !at && rule.is_fresh_at(v.words(), t) {
                    key.delete();
                    replicate_del(ctx, name);
                } else {
                    publish(ctx, &mut key, name, &v, t, d.reset_after_ns)?;
                }
            }
            d
        }
        Held::Empty if word::is_word(rule.config().algorithm) => {
            let mut words = [0];
            let d = rule.decide(&mut words, t, cost);
            if d.allowed && cost > 0 {
                let reset_after = (!at).then_some(d.reset_after_ns);
                let alg = rule.config().algorithm;
                store_word(
                    ctx,
                    &mut key,
                    name,
                    Form::Module,
                    alg,
                    words[0],
                    t,
                    reset_after,
                )?;
            }
            d
        }
        Held::Empty => {
            let mut words = vec![0; rule.words()];
            let d = rule.decide(&mut words, t, cost);
            if d.allowed && cost > 0 {
                let v = Value::new(Shape::of(rule), at, &words);
                store_new(ctx, &mut key, name, rule, v, t, d.reset_after_ns)?;
            }
            d
        }
    };
    tally(d.allowed);
    Ok(d)
}

/// One key's part of a `RATECELL.CHECKALL`: its open key, the words it held
/// (and their `AT` flag), and the words to write if the request is
/// admitted, under the last rule that decided them; `form` for a one-word
/// state, in the form the key holds it (a new key: the word type), `None`
/// for a value's block.
pub(crate) struct Work {
    key: Key,
    name: RedisString,
    rule: Rule,
    existed: Option<(Vec<u64>, bool)>,
    pub(crate) words: Vec<u64>,
    form: Option<Form>,
}

/// Opens a limit's key and checks that it may be decided under the
/// limit's rule.
pub(crate) fn open(
    ctx: *mut raw::RedisModuleCtx,
    limit: &args::Limit<'_>,
) -> Result<Work, RedisError> {
    let name = bytes(limit.key);
    let mut key = Key::open(ctx, name.inner);
    let mut form = word::is_word(limit.rule.config().algorithm).then_some(Form::Module);
    let existed = match key.held(&limit.rule, limit.key)? {
        Held::Empty => None,
        Held::Value(v) => {
            form = None; // a block loaded from an older RDB or AOF
            Some((v.words().to_vec(), v.at()))
        }
        Held::Word { word, form: f } => {
            form = Some(f);
            Some((vec![word], !key.expires()))
        }
        Held::Other(shape) => {
            return Err(err(shape.admits(&limit.rule, limit.key).unwrap_err()));
        }
    };
    let words = existed
        .as_ref()
        .map_or_else(|| vec![0; limit.rule.words()], |(w, _)| w.clone());
    Ok(Work {
        key,
        name,
        rule: limit.rule,
        existed,
        words,
        form,
    })
}

/// Writes a decided state (or deletes a fresh one) and replicates the
/// result, never the command.
pub(crate) fn commit(
    ctx: *mut raw::RedisModuleCtx,
    w: Work,
    t: u64,
    at: bool,
) -> Result<(), RedisError> {
    let Work {
        mut key,
        name,
        rule,
        existed,
        words,
        form,
    } = w;
    if !at && rule.is_fresh_at(&words, t) {
        // Equivalent to fresh on the server's clock: hold nothing.
        if existed.is_some() {
            key.delete();
            replicate_del(ctx, name.inner);
        }
        return Ok(());
    }
    if existed.is_none() && words.iter().all(|&w| w == 0) {
        return Ok(()); // a denied request or a peek on a fresh key
    }
    // A state written with AT has no expiry; a request without AT ends that.
    let unchanged = existed
        .as_ref()
        .is_some_and(|(old, old_at)| *old == words && *old_at == at);
    if unchanged {
        return Ok(());
    }
    // A peek at the state to store gives its reset_after: when it becomes
    // equivalent to fresh.
    let reset_after = rule.decide(&mut words.clone(), t, 0).reset_after_ns;
    if let Some(form) = form {
        let reset_after = (!at).then_some(reset_after);
        let alg = rule.config().algorithm;
        return store_word(
            ctx,
            &mut key,
            name.inner,
            form,
            alg,
            words[0],
            t,
            reset_after,
        );
    }
    let value = Value::new(Shape::of(&rule), at, &words);
    store_new(ctx, &mut key, name.inner, &rule, value, t, reset_after)
}

/// Decides every limit of a request on its key, and stores the results only
/// if every limit admits.
pub(crate) fn run(
    ctx: *mut raw::RedisModuleCtx,
    req: args::Request<'_>,
) -> Result<(bool, Vec<Decision>), RedisError> {
    let t = req.at.unwrap_or_else(now_ns);
    let at = req.at.is_some();
    let mut works: Vec<Work> = Vec::with_capacity(req.limits.len());
    let mut decisions = Vec::with_capacity(req.limits.len());
    for limit in &req.limits {
        // A key named twice is decided on what the earlier limit left.
        let same = works.iter().position(|w| w.name.as_slice() == limit.key);
        let d = match same {
            Some(i) => {
                let w = &mut works[i];
                Shape::of(&w.rule)
                    .admits(&limit.rule, limit.key)
                    .map_err(err)?;
                w.rule = limit.rule;
                limit.rule.decide(&mut w.words, t, limit.cost)
            }
            None => {
                let mut w = open(ctx, limit)?;
                let d = limit.rule.decide(&mut w.words, t, limit.cost);
                works.push(w);
                d
            }
        };
        decisions.push(d);
    }
    let admitted = decisions.iter().all(|d| d.allowed);
    tally(admitted);
    if admitted {
        for w in works {
            commit(ctx, w, t, at)?;
        }
    } else {
        // Nothing is stored. A limit that would have admitted reports a
        // peek at its unchanged state, so `remaining` is what is left now.
        if req.limits.len() > 1 {
            for (l, d) in req.limits.iter().zip(decisions.iter_mut()) {
                if d.allowed {
                    let mut words = works
                        .iter()
                        .find(|w| w.name.as_slice() == l.key)
                        .and_then(|w| w.existed.as_ref())
                        .map_or_else(|| vec![0; l.rule.words()], |(w, _)| w.clone());
                    *d = l.rule.decide(&mut words, t, 0);
                }
            }
        }
        // A state written with AT, checked without: it now expires.
        if !at {
            for mut w in works {
                if let Some((old, true)) = w.existed.clone() {
                    w.words = old;
                    commit(ctx, w, t, false)?;
                }
            }
        }
    }
    Ok((admitted, decisions))
}

/// A `RATECELL.CHECK`'s words after the key, each as its length (`u64`,
/// little-endian) and its bytes, and what they parse to.
struct Parsed {
    words: Vec<u8>,
    rule: Rule,
    cost: u64,
    at: Option<u64>,
}

impl Parsed {
    fn same_words(&self, words: &[&[u8]]) -> bool {
        let mut rest = self.words.as_slice();
        for w in words {
            let Some((len, tail)) = rest.split_first_chunk::<8>() else {
                return false;
            };
            let len = u64::from_le_bytes(*len) as usize;
            if len != w.len() || tail.get(..len) != Some(*w) {
                return false;
            }
            rest = &tail[len..];
        }
        rest.is_empty()
    }
}

/// Parses a `RATECELL.CHECK`'s words (the key first), or reuses the last
/// parse when the words after the key are the same bytes: a client sends
/// the same limit on every call, and parsing it (algorithm name, numbers,
/// period units, the configuration's validation) costs more than the
/// comparison.
pub(crate) fn parse_cached(words: &[&[u8]]) -> Result<(Rule, u64, Option<u64>), RedisError> {
    thread_local! {
        // Commands run on Redis's main thread: one entry.
        static LAST: std::cell::RefCell<Option<Parsed>> = const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| {
        if let Some(p) = last.as_ref().filter(|p| p.same_words(&words[1..])) {
            return Ok((p.rule, p.cost, p.at));
        }
        let (limit, at) = args::check_single(words).map_err(err)?;
        let mut bytes = last.take().map(|p| p.words).unwrap_or_default();
        bytes.clear();
        for w in &words[1..] {
            bytes.extend_from_slice(&(w.len() as u64).to_le_bytes());
            bytes.extend_from_slice(w);
        }
        *last = Some(Parsed {
            words: bytes,
            rule: limit.rule,
            cost: limit.cost,
            at,
        });
        Ok((limit.rule, limit.cost, at))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parse_cache_matches_only_the_same_words() {
        let words: [&[u8]; 4] = [b"k", b"gcra", b"10", b"1s"];
        let (rule, cost, at) = parse_cached(&words).unwrap();
        assert_eq!((rule.config().limit, cost, at), (10, 1, None));
        // Another key, the same limit: the cached parse.
        let other: [&[u8]; 4] = [b"j", b"gcra", b"10", b"1s"];
        assert_eq!(parse_cached(&other).unwrap().0.config().limit, 10);
        // The same bytes split differently are other words.
        let p = Parsed {
            words: Vec::new(),
            rule,
            cost,
            at,
        };
        assert!(p.same_words(&[]));
        let mut p = p;
        p.words.extend(2u64.to_le_bytes());
        p.words.extend(b"ab");
        p.words.extend(1u64.to_le_bytes());
        p.words.extend(b"c");
        assert!(p.same_words(&[b"ab", b"c"]));
        assert!(!p.same_words(&[b"a", b"bc"]));
        assert!(!p.same_words(&[b"ab"]));
        assert!(!p.same_words(&[b"ab", b"c", b""]));
        // A changed limit, an added option, an error: parsed again.
        let (rule, cost, at) = parse_cached(&[b"k", b"gcra", b"20", b"1s", b"COST", b"3"]).unwrap();
        assert_eq!((rule.config().limit, cost, at), (20, 3, None));
        let e = parse_cached(&[b"k", b"gcra", b"0", b"1s"]).unwrap_err();
        assert!(matches!(e, RedisError::String(m) if m.contains("limit")));
        let (rule, _, at) = parse_cached(&[b"k", b"gcra", b"20", b"1s", b"AT", b"5"]).unwrap();
        assert_eq!((rule.config().limit, at), (20, Some(5)));
    }
}

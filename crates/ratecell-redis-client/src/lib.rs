//! ratecell's limits kept in Redis, through the `ratecell-redis` module
//! (SPEC.md §7–8), checked from Rust in one of three modes:
//!
//! - [`Mode::Strict`]: one `RATECELL.CHECK` per check; exact.
//! - [`Mode::CachedDeny`]: as strict, but a denial is remembered until its
//!   `retry_after`, and the key's checks meanwhile cost Redis nothing.
//! - [`Mode::Leased`]: units are granted in batches (`RATECELL.LEASE`) and
//!   spent on this node, on an atomic word per key
//!   ([`ratecell::lease::Leases`]); the next grant is fetched by a
//!   background thread before the units run out, so a check waits on
//!   Redis only when its node holds none for the key.
//!
//! Every command waits at most the configured timeout (50 ms by default);
//! with no answer the failure policy decides ([`FailurePolicy`]): deny, or
//! a node-local limiter with the limit divided by the expected nodes, and
//! the decision is counted ([`ClientStats::fallbacks`]). After a failure
//! a strict or cached-deny limiter tries Redis again with backoff (10 ms
//! doubling to 1 s); a leased one sends every key to the failure policy at
//! once and one probe, off the request path (10 ms doubling to 100 ms),
//! finds Redis again. The first success puts checks back on the global
//! limit, with no call from the caller.
//!
//! A check takes ratecell's request shape: a [`Key`] (a `u64` id or any
//! byte string) and a [`Request`] (a cost, or `Request::new(cost)` with
//! `.at(now_ns)`), as a [`ratecell::KeyedLimiter`]'s does:
//! `check(key, request)`, `allow(key)`.
//!
//! The limits are kept on one server, or in a Redis Cluster
//! ([`Builder::cluster`]): every command names one key, which the module
//! declares, so each goes to the master of its key's slot.
//!
//! The API is synchronous, over redis-rs's sync connections with socket
//! timeouts: a check is usable from any thread without a runtime, and a
//! leased check that finds units never leaves the calling thread. An
//! async caller splits a check in two with [`RedisLimiter::try_local`]:
//! what this node decides without the network, answered at once, and the
//! [`Remote`] rest, which waits on Redis and is finished where blocking
//! is allowed (ratecell-tower's store runs it on tokio's blocking pool).
//!
//! ```no_run
//! use ratecell::{Algorithm, Config, Request};
//! use ratecell_redis_client::{Mode, RedisLimiter};
//!
//! let limit = Config::new(Algorithm::FixedWindow, 1000, 1_000_000_000);
//! let limiter = RedisLimiter::builder("redis://127.0.0.1:6379/", limit)
//!     .mode(Mode::Leased)
//!     .prefix(b"api:")
//!     .build()
//!     .unwrap();
//! if limiter.allow("user:42") {
//!     // serve the request
//! }
//! // A cost of 3 for key 42, at an explicit time (UNIX ns).
//! let decision = limiter.check(42, Request::new(3).at(limiter.now_ns()));
//! ```

mod pool;
mod refill;

use pool::{Pool, Servers};
use ratecell::lease::{
    DenialCache, GrantReply, GrantRequest, LeaseConfig, LeaseStats, Leases, Step,
};
use ratecell::{Algorithm, Clock, Config, Decision, Key, KeyedLimiter, Request, Tier};
use redis::Value;
use refill::{Job, Refiller, Refills};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

pub use ratecell::lease::FailurePolicy;

/// The default timeout of a command (SPEC §8).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// How a limit kept in Redis is enforced (SPEC §8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// One `RATECELL.CHECK` per check.
    #[default]
    Strict,
    /// Admissions from Redis; denials remembered until their `retry_after`.
    CachedDeny,
    /// Grants spent locally (gcra, token_bucket, fixed_window and
    /// sliding_window only).
    Leased,
}

/// A limiter that cannot be built: the setting at fault and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The setting's name (`url`, `timeout`, `limit`, `max_grant`, ...).
    pub field: &'static str,
    /// The value and what is accepted.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.field, self.message)
    }
}

impl std::error::Error for Error {}

impl From<ratecell::lease::LeaseError> for Error {
    fn from(e: ratecell::lease::LeaseError) -> Error {
        Error {
            field: e.field,
            message: e.message,
        }
    }
}

/// Settings of a [`RedisLimiter`]; [`RedisLimiter::builder`] makes one.
#[derive(Clone, Debug)]
pub struct Builder {
    url: String,
    cluster: Option<Vec<String>>,
    lease: LeaseConfig,
    mode: Mode,
    timeout: Duration,
    prefix: Vec<u8>,
    send_at: bool,
    clock: Option<Clock>,
}

impl Builder {
    /// The mode (default [`Mode::Strict`]).
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Builder {
        self.mode = mode;
        self
    }

    /// Keeps the limit in a Redis Cluster, of which the builder's `url` is
    /// a node (database 0) and `more_nodes` are others to start from when
    /// it does not answer; the rest are found from the cluster's slot map.
    /// Each command names one key and goes to the master of the key's
    /// slot; redis-rs follows a `MOVED` or `ASK` (one per command). The
    /// timeout bounds each step rather than the whole: a command on a
    /// connection made, the connection's making (a node, the slot map,
    /// each master), and a redirect's slot map and second attempt. A
    /// command that timed out is never sent again. Default: one server.
    #[must_use]
    pub fn cluster(mut self, more_nodes: &[&str]) -> Builder {
        self.cluster = Some(more_nodes.iter().map(|&n| n.to_owned()).collect());
        self
    }

    /// The longest a check waits on Redis: connecting, sending and the
    /// reply together (default 50 ms; 1 ms to 1 minute).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Builder {
        self.timeout = timeout;
        self
    }

    /// What decides when Redis does not answer (default deny).
    #[must_use]
    pub fn failure(mut self, policy: FailurePolicy) -> Builder {
        self.lease = self.lease.failure(policy);
        self
    }

    /// The Redis key of a key is this prefix followed by the key's bytes
    /// (a `u64` key's 8 little-endian bytes). Default: none.
    #[must_use]
    pub fn prefix(mut self, prefix: &[u8]) -> Builder {
        self.prefix = prefix.to_vec();
        self
    }

    /// Sends each check's time as `AT`, so the server decides on the
    /// node's timeline rather than its own clock (tests and replays with
    /// explicit times; states written so never expire in Redis). Off by
    /// default.
    #[must_use]
    pub fn send_at(mut self, on: bool) -> Builder {
        self.send_at = on;
        self.lease = self.lease.send_at(on);
        self
    }

    /// The clock a check reads when its request has no time of its own
    /// (default the TSC clock, `Clock::tsc`).
    #[must_use]
    pub fn clock(mut self, clock: Clock) -> Builder {
        self.clock = Some(clock);
        self
    }

    /// Leased: the largest grant, `W` (default a tenth of the limit).
    #[must_use]
    pub fn max_grant(mut self, units: u64) -> Builder {
        self.lease = self.lease.max_grant(units);
        self
    }

    /// Leased: the refill horizon `H` (default a tenth of the period).
    #[must_use]
    pub fn horizon(mut self, horizon: Duration) -> Builder {
        self.lease = self.lease.horizon_ns(nanos(horizon));
        self
    }

    /// Leased, GCRA: a grant's lifetime `E` (default a tenth of the period).
    #[must_use]
    pub fn lease_expiry(mut self, expiry: Duration) -> Builder {
        self.lease = self.lease.expire_ns(nanos(expiry));
        self
    }

    /// Leased: the margin for clock skew between node and server (1 ms).
    #[must_use]
    pub fn skew(mut self, skew: Duration) -> Builder {
        self.lease = self.lease.skew_ns(nanos(skew));
        self
    }

    /// Checks every setting; connects lazily (a server down now is the
    /// failure policy's, not an error).
    pub fn build(self) -> Result<RedisLimiter, Error> {
        let err = |field, message: String| Err(Error { field, message });
        let config = self.lease.limit;
        if let Err(e) = ratecell::state::Rule::new(&config) {
            return err(e.field.name(), e.message);
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(60)).contains(&self.timeout) {
            return err(
                "timeout",
                format!("{:?} is outside 1 ms ..= 60 s", self.timeout),
            );
        }
        let servers = match &self.cluster {
            None => match redis::Client::open(self.url.as_str()) {
                Ok(c) => Servers::One(c),
                Err(e) => return err("url", format!("{:?}: {e}", self.url)),
            },
            Some(more) => {
                let mut nodes = vec![self.url.clone()];
                nodes.extend(more.iter().cloned());
                for n in &nodes {
                    match redis::IntoConnectionInfo::into_connection_info(n.as_str()) {
                        Ok(info) if info.redis.db != 0 => {
                            return err("cluster", format!("{n:?}: a cluster has database 0 only"));
                        }
                        Ok(_) => {}
                        Err(e) => return err("cluster", format!("{n:?}: {e}")),
                    }
                }
                match Servers::cluster(&nodes, self.timeout) {
                    Ok(s) => s,
                    Err(e) => return err("cluster", format!("{nodes:?}: {e}")),
                }
            }
        };
        let leases = match self.mode {
            Mode::Leased => Some(Leases::new(self.lease)?),
            _ => None,
        };
        let local = self.lease.failure.limiter(&config)?;
        let shared = Arc::new(Shared {
            pool: Pool::new(servers, self.timeout),
            config,
            mode: self.mode,
            prefix: self.prefix,
            send_at: self.send_at,
            clock: self.clock.unwrap_or_else(Clock::tsc),
            leases,
            denials: (self.mode == Mode::CachedDeny).then(|| DenialCache::new(config.capacity)),
            local,
            down: Down::default(),
            counts: Counts::default(),
        });
        let refiller = (self.mode == Mode::Leased).then(|| Refiller::start(shared.clone()));
        Ok(RedisLimiter { shared, refiller })
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A limit kept in Redis, checked in one of three [`Mode`]s. Thread-safe;
/// every method takes `&self`. Dropping it stops its refill thread.
pub struct RedisLimiter {
    shared: Arc<Shared>,
    refiller: Option<Refiller>,
}

/// What the limiter's methods and its refill thread share.
pub(crate) struct Shared {
    pool: Pool,
    config: Config,
    mode: Mode,
    prefix: Vec<u8>,
    send_at: bool,
    clock: Clock,
    leases: Option<Leases>,
    denials: Option<DenialCache>,
    /// The `local` failure policy's limiter, for strict and cached-deny
    /// checks (a leased limiter's is inside its `Leases`).
    local: Option<KeyedLimiter>,
    down: Down,
    counts: Counts,
}

/// Strict and cached-deny: Redis failed, so checks go to the failure
/// policy until `until` (the backoff of SPEC §8, node-wide).
#[derive(Default)]
struct Down {
    failures: AtomicU32,
    until: AtomicU64,
}

#[derive(Default)]
struct Counts {
    commands: AtomicU64,
    failures: AtomicU64,
    fallbacks: AtomicU64,
}

/// A limiter's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Commands sent to Redis (each `RATECELL.CHECK` or `RATECELL.LEASE`).
    pub commands: u64,
    /// Commands that had no answer in time, or an error.
    pub failures: u64,
    /// Checks the failure policy decided (`lease_fallbacks` for a leased
    /// limiter).
    pub fallbacks: u64,
    /// A leased limiter's grant counters.
    pub lease: LeaseStats,
}

impl RedisLimiter {
    /// Settings for `config` (algorithm, limit, period, burst, sub-windows;
    /// `capacity` is how many keys the node tracks, 0 for 65,536) kept at
    /// the Redis server `url` (`redis://host:port/db`), or in the cluster
    /// it is a node of ([`Builder::cluster`]).
    pub fn builder(url: &str, config: Config) -> Builder {
        Builder {
            url: url.to_owned(),
            cluster: None,
            lease: LeaseConfig::new(config),
            mode: Mode::Strict,
            timeout: DEFAULT_TIMEOUT,
            prefix: Vec::new(),
            send_at: false,
            clock: None,
        }
    }

    /// A check of `key` (a `u64` key is its 8 little-endian bytes) for
    /// `request`: its cost (a `u64` is a cost, now; 0 is a peek), at its
    /// time ([`Request::at`], UNIX ns) or else the clock's. The limit has
    /// one tier: a request for another is never admitted
    /// ([`Decision::NEVER`]), as with a [`KeyedLimiter`] that lacks it.
    pub fn check<'k>(&self, key: impl Into<Key<'k>>, request: impl Into<Request>) -> Decision {
        let key = key.into();
        let mut rest = None;
        let d = self
            .shared
            .decide_local(key, request.into(), self.refiller.as_ref(), &mut rest);
        match rest {
            None => d,
            Some(rest) => self.remote(key, rest).finish(),
        }
    }

    /// The part of [`check`](Self::check) that needs no network: the
    /// decision when this node can make it (a leased key's units in hand,
    /// a remembered denial, the failure policy while Redis is in its
    /// backoff), or the [`Remote`] rest of the check, which waits on Redis
    /// (at most the timeout) in [`Remote::finish`]. `check` is this
    /// followed by `finish`; an async caller runs the `finish` where
    /// blocking is allowed (a blocking pool) and answers the `Ok` at once.
    pub fn try_local<'k>(
        &self,
        key: impl Into<Key<'k>>,
        request: impl Into<Request>,
    ) -> Result<Decision, Remote> {
        let key = key.into();
        let mut rest = None;
        let d = self
            .shared
            .decide_local(key, request.into(), self.refiller.as_ref(), &mut rest);
        match rest {
            None => Ok(d),
            Some(rest) => Err(self.remote(key, rest)),
        }
    }

    /// The rest of a check that needs Redis, made out of line: the hot
    /// path (units in hand) then carries no allocation in its frame.
    #[cold]
    #[inline(never)]
    fn remote(&self, key: Key<'_>, (cost, now, waiting): Rest) -> Remote {
        Remote(Box::new(Pending {
            shared: self.shared.clone(),
            refills: self.refiller.as_ref().map(Refiller::refills),
            key: with_bytes(key, <[u8]>::to_vec),
            cost,
            now,
            waiting,
        }))
    }

    /// Whether a cost-1 request of `key` is admitted now.
    pub fn allow<'k>(&self, key: impl Into<Key<'k>>) -> bool {
        self.check(key, 1).allowed
    }

    /// The time a check without its own would use (UNIX ns).
    pub fn now_ns(&self) -> u64 {
        self.shared.clock.now_ns()
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.shared.mode
    }

    /// The limit (algorithm, limit, period, burst, sub-windows; the
    /// capacity is the node's keys).
    pub fn config(&self) -> Config {
        self.shared.config
    }

    /// The counters.
    pub fn stats(&self) -> ClientStats {
        let s = &self.shared;
        let lease = s.leases.as_ref().map(Leases::stats).unwrap_or_default();
        ClientStats {
            commands: s.counts.commands.load(Relaxed),
            failures: s.counts.failures.load(Relaxed),
            fallbacks: s.counts.fallbacks.load(Relaxed) + lease.lease_fallbacks,
            lease,
        }
    }
}

/// Runs `f` on `key`'s bytes (a `u64` key's 8 little-endian bytes).
fn with_bytes<R>(key: Key<'_>, f: impl FnOnce(&[u8]) -> R) -> R {
    match key {
        Key::Id(k) => f(&k.to_le_bytes()),
        Key::Bytes(b) => f(b),
    }
}

/// What is left of a check that needs Redis
/// ([`RedisLimiter::try_local`]). It holds what it needs of its limiter,
/// so it may move to another thread; dropping it unfinished decides
/// nothing and loses nothing but a leased key's fetch (the key asks again
/// on its next check).
#[must_use = "the check's decision is `finish`'s"]
pub struct Remote(Box<Pending>);

struct Pending {
    shared: Arc<Shared>,
    refills: Option<Refills>,
    key: Vec<u8>,
    cost: u64,
    now: u64,
    waiting: Waiting,
}

/// The command a [`Remote`] check waits on.
enum Waiting {
    /// `RATECELL.CHECK`: strict, cached-deny (which remembers a denial),
    /// a leased key this node cannot track.
    Check { remember: bool },
    /// `RATECELL.LEASE` for a leased key with no units in hand.
    Fetch(GrantRequest),
}

/// What a check that needs Redis carries to its [`Remote`]: the cost, the
/// time, and the command to wait on.
type Rest = (u64, u64, Waiting);

impl Remote {
    /// Sends the check's command, waiting at most the limiter's timeout,
    /// and returns the check's decision: Redis's, or the failure policy's
    /// when Redis does not answer in time.
    pub fn finish(self) -> Decision {
        let p = *self.0;
        let key = Key::Bytes(&p.key);
        let s = &p.shared;
        match p.waiting {
            Waiting::Check { remember } => match s.redis_check(key, p.cost, p.now) {
                Ok(d) => {
                    if let (true, false, Some(cache)) = (remember, d.allowed, &s.denials) {
                        cache.remember(key, &d, p.now);
                    }
                    d
                }
                Err(next_attempt) => s.fallback(key, p.cost, p.now, next_attempt),
            },
            Waiting::Fetch(req) => {
                let leases = s.leases.as_ref().expect("a leased limiter has its leases");
                let reply = s.grant(&req);
                let done = s.completed_at(&req);
                let c = leases.complete(&req, reply, done);
                if let (Some(at), Some(r)) = (c.retry_at_ns, &p.refills) {
                    r.send(retry_job(leases, &req, at, done));
                }
                c.decision.expect("a fetch's completion decides its check")
            }
        }
    }
}

impl Shared {
    /// The check's decision when this node makes it; else `rest` is set
    /// to what the check must ask Redis (and the decision returned is
    /// none). The decision comes back as a plain value and the rest
    /// through the caller's slot because a `Result` carrying both through
    /// the layers below made a leased check that finds units, the path
    /// leases exist for, measurably slower.
    #[inline(never)]
    fn decide_local(
        &self,
        key: Key<'_>,
        request: Request,
        refiller: Option<&Refiller>,
        rest: &mut Option<Rest>,
    ) -> Decision {
        if request.requested_tier() != Tier::DEFAULT {
            return Decision::NEVER;
        }
        let at = request.at_ns();
        let now = at.unwrap_or_else(|| self.clock.now_ns());
        let cost = request.cost();
        match self.mode {
            Mode::Strict => self.check_or_wait(key, cost, now, false, rest),
            Mode::CachedDeny => {
                let cache = self
                    .denials
                    .as_ref()
                    .expect("a cached-deny limiter has its cache");
                // The time a denial is remembered from is read before the
                // command, so the remembered wait never outlasts Redis's.
                match cache.check(key, now) {
                    Some(d) => d,
                    None => self.check_or_wait(key, cost, now, true, rest),
                }
            }
            Mode::Leased => self.leased(key, cost, now, refiller, rest),
        }
    }

    /// A `RATECELL.CHECK` to wait on (in `rest`), or the failure policy's
    /// decision while Redis is in its backoff.
    fn check_or_wait(
        &self,
        key: Key<'_>,
        cost: u64,
        now: u64,
        remember: bool,
        rest: &mut Option<Rest>,
    ) -> Decision {
        let until = self.down.until.load(Relaxed);
        if now < until {
            return self.fallback(key, cost, now, until);
        }
        *rest = Some((cost, now, Waiting::Check { remember }));
        Decision::NEVER
    }

    /// Redis's decision, or when to try it next (it failed, now or lately).
    fn redis_check(&self, key: Key<'_>, cost: u64, now: u64) -> Result<Decision, u64> {
        let until = self.down.until.load(Relaxed);
        if now < until {
            return Err(until);
        }
        let c = &self.config;
        let mut cmd = redis::cmd("RATECELL.CHECK");
        with_bytes(key, |b| cmd.arg(self.redis_key(b)));
        cmd.arg(c.algorithm.name())
            .arg(c.limit)
            .arg(format!("{}ns", c.period_ns));
        if c.algorithm.has_burst() && c.burst != 0 {
            cmd.arg("BURST").arg(c.burst);
        }
        if c.algorithm == Algorithm::BucketedWindow {
            cmd.arg("SUBWINDOWS").arg(c.sub_windows);
        }
        cmd.arg("COST").arg(cost);
        if self.send_at {
            cmd.arg("AT").arg(now);
        }
        match self.run(&cmd).and_then(|v| decision(&v)) {
            Some(d) => {
                if self.down.failures.load(Relaxed) != 0 {
                    self.down.failures.store(0, Relaxed);
                }
                Ok(d)
            }
            None => {
                let failures = self.down.failures.fetch_add(1, Relaxed).saturating_add(1);
                let until = now.saturating_add(ratecell::lease::backoff_ns(failures));
                self.down.until.store(until, Relaxed);
                Err(until)
            }
        }
    }

    fn fallback(&self, key: Key<'_>, cost: u64, now: u64, next_attempt: u64) -> Decision {
        self.counts.fallbacks.fetch_add(1, Relaxed);
        match &self.local {
            Some(local) => local.check(key, Request::new(cost).at(now)),
            None => Decision {
                allowed: false,
                limit: if self.config.algorithm.has_burst() && self.config.burst != 0 {
                    self.config.burst
                } else {
                    self.config.limit
                },
                remaining: 0,
                retry_after_ns: next_attempt.saturating_sub(now).max(1),
                reset_after_ns: 0,
                wait_ns: 0,
            },
        }
    }

    fn leased(
        &self,
        key: Key<'_>,
        cost: u64,
        now: u64,
        refiller: Option<&Refiller>,
        rest: &mut Option<Rest>,
    ) -> Decision {
        let leases = self
            .leases
            .as_ref()
            .expect("a leased limiter has its leases");
        match leases.check(key, cost, now) {
            Step::Decided(d) => d,
            Step::Refill(d, req) => {
                if let Some(r) = refiller {
                    r.send(Job {
                        req,
                        due: Instant::now(),
                    });
                }
                d
            }
            Step::Fetch(req) => {
                *rest = Some((cost, now, Waiting::Fetch(req)));
                Decision::NEVER
            }
            Step::Direct => self.check_or_wait(key, cost, now, false, rest),
        }
    }

    /// Fetches `req` off the request path; a retry to queue if it failed.
    pub(crate) fn fetch_in_background(&self, req: &GrantRequest) -> Option<Job> {
        let leases = self.leases.as_ref()?;
        let reply = self.grant(req);
        let done = self.completed_at(req);
        let c = leases.complete(req, reply, done);
        c.retry_at_ns.map(|at| retry_job(leases, req, at, done))
    }

    /// When a grant's answer came, on the node's timeline: the clock's
    /// time, or with `send_at` (one explicit timeline) the request's own.
    fn completed_at(&self, req: &GrantRequest) -> u64 {
        if self.send_at {
            req.at_ns()
        } else {
            self.clock.now_ns()
        }
    }

    fn grant(&self, req: &GrantRequest) -> Option<GrantReply> {
        let leases = self.leases.as_ref()?;
        let args = leases.command(req, &self.prefix);
        let mut cmd = redis::cmd("RATECELL.LEASE");
        for a in &args[1..] {
            cmd.arg(a.as_slice());
        }
        let ints = ints(&self.run(&cmd)?)?;
        GrantReply::from_ints(&ints).ok()
    }

    fn run(&self, cmd: &redis::Cmd) -> Option<Value> {
        self.counts.commands.fetch_add(1, Relaxed);
        match self.pool.run(cmd) {
            Ok(v) => Some(v),
            Err(_) => {
                self.counts.failures.fetch_add(1, Relaxed);
                None
            }
        }
    }

    fn redis_key(&self, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + key.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(key);
        k
    }
}

/// The node's probe after a failed grant, due when its delay ends (`at`
/// on the completion's timeline, `done` its time).
fn retry_job(leases: &Leases, req: &GrantRequest, at: u64, done: u64) -> Job {
    Job {
        req: leases.retry(req, at),
        due: Instant::now() + Duration::from_nanos(at.saturating_sub(done)),
    }
}

fn ints(v: &Value) -> Option<Vec<i64>> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|x| match x {
                Value::Int(i) => Some(*i),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// `RATECELL.CHECK`'s six integers as a decision (`-1`: `u64::MAX`).
fn decision(v: &Value) -> Option<Decision> {
    let v = ints(v)?;
    let [allowed, limit, remaining, retry, reset, wait] = v[..] else {
        return None;
    };
    let u = |x: i64| if x == -1 { u64::MAX } else { x as u64 };
    Some(Decision {
        allowed: allowed == 1,
        limit: u(limit),
        remaining: u(remaining),
        retry_after_ns: u(retry),
        reset_after_ns: u(reset),
        wait_ns: u(wait),
    })
}

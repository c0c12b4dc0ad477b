//! What a check asks: the key ([`Key`]), and the cost, time and tier of the
//! request ([`Request`]); a batch of them ([`Batch`]).
//!
//! One value per question, so that each kind of answer (a decision, each
//! limit's decision, a batch, a wait) is one method, whatever the key's
//! type and whichever options the caller sets.

/// The key a keyed check is for: a `u64` id or a byte string. The same
/// bytes always reach the same state, and a `u64` key is its 8
/// little-endian bytes (`Key::from(7u64)` and `Key::from(&7u64.to_le_bytes())`
/// are one key); an id is only hashed faster.
///
/// Made by `From` from `u64`, `&[u8]`, `&[u8; N]`, `&str`, `&String` and
/// `&Vec<u8>`, so a check takes any of them directly:
///
/// ```
/// use ratecell::{Algorithm, Config, KeyedLimiter};
///
/// let config = Config::new(Algorithm::Gcra, 5, 1_000_000_000).capacity(100);
/// let limiter = KeyedLimiter::builder().limit(config).build().unwrap();
/// assert!(limiter.check(42, 1).allowed);
/// assert!(limiter.check("user:42", 1).allowed);
/// assert!(limiter.check(&b"\x01\x02"[..], 1).allowed);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key<'a> {
    /// A numeric key.
    Id(u64),
    /// A byte-string key (a string's UTF-8 bytes).
    Bytes(&'a [u8]),
}

impl From<u64> for Key<'_> {
    #[inline]
    fn from(id: u64) -> Self {
        Key::Id(id)
    }
}

impl<'a> From<&'a [u8]> for Key<'a> {
    #[inline]
    fn from(bytes: &'a [u8]) -> Self {
        Key::Bytes(bytes)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for Key<'a> {
    #[inline]
    fn from(bytes: &'a [u8; N]) -> Self {
        Key::Bytes(bytes)
    }
}

impl<'a> From<&'a Vec<u8>> for Key<'a> {
    #[inline]
    fn from(bytes: &'a Vec<u8>) -> Self {
        Key::Bytes(bytes)
    }
}

impl<'a> From<&'a str> for Key<'a> {
    #[inline]
    fn from(text: &'a str) -> Self {
        Key::Bytes(text.as_bytes())
    }
}

impl<'a> From<&'a String> for Key<'a> {
    #[inline]
    fn from(text: &'a String) -> Self {
        Key::Bytes(text.as_bytes())
    }
}

/// One of a tiered limiter's tiers: an index checked by the limiter that
/// made it ([`crate::KeyedLimiter::tier`], which refuses a tier it does
/// not have), so a mistyped tier is an error where the tier is named, not
/// a surprise at the check.
///
/// Tier 0 ([`Tier::DEFAULT`], every request's unless it says otherwise)
/// is every limiter's. A `Tier` is an index, not tied to its limiter: used
/// with another limiter that has fewer tiers, the request is denied, and
/// never admitted ([`crate::Decision::NEVER`], counted as a denial).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tier(u32);

impl Tier {
    /// Tier 0: a limiter's own limits (the first tier of a tiered one).
    pub const DEFAULT: Tier = Tier(0);

    /// A tier the caller has already checked against its limiter's count.
    #[inline]
    pub(crate) const fn checked(index: usize) -> Tier {
        Tier(index as u32)
    }

    /// The tier's index in the list the limiter was built with.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// One request's options: its cost (1 by default; 0 is a peek that changes
/// nothing), its time (the limiter's clock by default), and its tier
/// ([`Tier::DEFAULT`] by default).
///
/// A `u64` converts to a request of that cost, now, so `check(key, 3)`
/// reads as it did; anything else is set on a request:
///
/// ```
/// use ratecell::{Algorithm, Clock, Config, Limiter, Request};
///
/// let t = 1_700_000_000_000_000_000;
/// let config = Config::new(Algorithm::FixedWindow, 10, 1_000_000_000);
/// let limiter = Limiter::builder().limit(config).build().unwrap();
/// assert_eq!(limiter.check(Request::new(4).at(t)).remaining, 6);
/// assert_eq!(limiter.check(Request::new(0).at(t)).remaining, 6, "a peek");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    pub(crate) cost: u64,
    pub(crate) at_ns: Option<u64>,
    pub(crate) tier: Tier,
}

impl Request {
    /// A request of `cost` units, now, in tier 0.
    #[inline]
    pub const fn new(cost: u64) -> Request {
        Request {
            cost,
            at_ns: None,
            tier: Tier::DEFAULT,
        }
    }

    /// The request at `now_ns` (UNIX ns, from the caller's clock) instead
    /// of the limiter's clock: for simulations, replays and callers that
    /// read the time once for many checks.
    #[must_use]
    #[inline]
    pub const fn at(mut self, now_ns: u64) -> Request {
        self.at_ns = Some(now_ns);
        self
    }

    /// The request under `tier`'s limits.
    #[must_use]
    #[inline]
    pub const fn tier(mut self, tier: Tier) -> Request {
        self.tier = tier;
        self
    }
}

/// What a request asks, read back: for code that carries a request
/// elsewhere (a limit kept in Redis sends its cost and time as a
/// command's arguments).
impl Request {
    /// The cost, in units.
    #[inline]
    pub const fn cost(&self) -> u64 {
        self.cost
    }

    /// The time set with [`Request::at`], or `None` for the limiter's
    /// clock.
    #[inline]
    pub const fn at_ns(&self) -> Option<u64> {
        self.at_ns
    }

    /// The tier set with [`Request::tier`] ([`Tier::DEFAULT`] unless set).
    #[inline]
    pub const fn requested_tier(&self) -> Tier {
        self.tier
    }
}

impl Default for Request {
    /// One unit, now, tier 0.
    #[inline]
    fn default() -> Request {
        Request::new(1)
    }
}

impl From<u64> for Request {
    /// A request of this cost, now, tier 0.
    #[inline]
    fn from(cost: u64) -> Request {
        Request::new(cost)
    }
}

/// Many requests decided in one call ([`crate::KeyedLimiter::check_batch`]),
/// in order, at one time: `keys[i]` at cost `costs[i]` (1 each by default)
/// in tier `tiers[i]` (tier 0 each by default).
///
/// # Panics
/// [`Batch::costs`] and [`Batch::tiers`] panic when given a slice not as
/// long as the keys.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    pub(crate) keys: &'a [u64],
    pub(crate) costs: Option<&'a [u64]>,
    pub(crate) tiers: Option<&'a [Tier]>,
    pub(crate) at_ns: Option<u64>,
}

impl<'a> Batch<'a> {
    /// A request for each key, of cost 1, now, in tier 0.
    pub const fn new(keys: &'a [u64]) -> Batch<'a> {
        Batch {
            keys,
            costs: None,
            tiers: None,
            at_ns: None,
        }
    }

    /// Request `i` costs `costs[i]`.
    #[must_use]
    pub fn costs(mut self, costs: &'a [u64]) -> Batch<'a> {
        assert_eq!(
            costs.len(),
            self.keys.len(),
            "Batch::costs: costs.len() != keys.len()"
        );
        self.costs = Some(costs);
        self
    }

    /// Request `i` is under tier `tiers[i]`.
    #[must_use]
    pub fn tiers(mut self, tiers: &'a [Tier]) -> Batch<'a> {
        assert_eq!(
            tiers.len(),
            self.keys.len(),
            "Batch::tiers: tiers.len() != keys.len()"
        );
        self.tiers = Some(tiers);
        self
    }

    /// Every request at `now_ns` (UNIX ns) instead of one read of the
    /// limiter's clock.
    #[must_use]
    pub const fn at(mut self, now_ns: u64) -> Batch<'a> {
        self.at_ns = Some(now_ns);
        self
    }

    /// How many requests.
    pub const fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub const fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

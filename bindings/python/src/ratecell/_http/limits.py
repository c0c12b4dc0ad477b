"""The limiter protocol the middlewares call: one ``LimitDecision`` per
named limit, from ``RateLimits.check_limits``, and the adapters that give
any limiter that shape (``Named`` for one limit, ``Multi`` for several
checked as one, ``Tiered`` for a quota per tier; ``as_limits`` picks).
Knows nothing about HTTP fields, ASGI or WSGI."""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Awaitable, Sequence
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from .._types import Decision
from .fields import NS_PER_S, LimitDecision, policy_field

DEFAULT_NAME = "default"


def check_name(name: str) -> str:
    """Returns ``name`` if it can be an RFC 9651 String (non-empty printable
    ASCII); raises ``ValueError`` naming it otherwise."""
    if not isinstance(name, str) or not name or not all(0x20 <= ord(c) <= 0x7E for c in name):
        raise ValueError(
            f"invalid policy name {name!r}: it must be non-empty printable ASCII "
            "(an RFC 9651 String)"
        )
    return name


@runtime_checkable
class RateLimits(Protocol):
    """Decides one request against every limit at once: one
    ``LimitDecision`` per limit, never none (or an awaitable of them, for
    the ASGI middleware). The request is admitted when every item is. An
    implementation must decide all limits as one step: checking independent
    limiters one after another would leave the first charged when the
    second refuses."""

    def check_limits(
        self, key: bytes, cost: int
    ) -> Sequence[LimitDecision] | Awaitable[Sequence[LimitDecision]]: ...


class Checker(Protocol):
    """The shape of a single limiter: ``ratecell.Limiter`` has it, and so
    can a Redis-backed one (whose ``check`` may also be a coroutine)."""

    def check(self, key: Any, cost: int) -> Any: ...


L = TypeVar("L", bound=Checker)


class Named(Generic[L]):
    """A single limiter as ``RateLimits``, under a policy name.

    ``limit`` and ``period`` (seconds) default to ``limiter.config``'s (a
    property, or a method); give them for a limiter without one (a Redis
    client)."""

    __slots__ = ("limiter", "name", "limit", "period_ns", "policy_field")

    def __init__(
        self,
        limiter: L,
        name: str = DEFAULT_NAME,
        *,
        limit: int | None = None,
        period: float | None = None,
    ) -> None:
        self.limiter = limiter
        self.name = check_name(name)
        if limit is None or period is None:
            cfg = getattr(limiter, "config", None)
            if cfg is None:
                raise TypeError("Named: give limit= and period= for a limiter without config")
            if callable(cfg):
                cfg = cfg()
            limit = cfg.limit if limit is None else limit
            period_ns = cfg.period_ns if period is None else _period_ns(period)
        else:
            period_ns = _period_ns(period)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"Named: limit must be a non-negative int, not {limit!r}")
        self.limit = limit
        self.period_ns = period_ns
        self.policy_field = policy_field([LimitDecision(self.name, limit, period_ns, _ANY)])

    def _item(self, d: Decision) -> list[LimitDecision]:
        return [LimitDecision(self.name, self.limit, self.period_ns, d)]

    def check_limits(
        self, key: bytes, cost: int
    ) -> Sequence[LimitDecision] | Awaitable[Sequence[LimitDecision]]:
        d = self.limiter.check(key, cost)
        if type(d) is Decision:  # the common case, before the slower test
            # tuple.__new__ directly: the NamedTuple constructor is a Python
            # function, a frame per request.
            return [_new_tuple(LimitDecision, (self.name, self.limit, self.period_ns, d))]
        if inspect.isawaitable(d):
            return self._later(d)
        return self._item(d)

    async def _later(self, d: Awaitable[Decision]) -> Sequence[LimitDecision]:
        return self._item(await d)


_new_tuple = tuple.__new__

# A placeholder decision for items that only serve the policy field.
_ANY = Decision(True, 0, 0, 0, 0, 0)


def _period_ns(period: float) -> int:
    if isinstance(period, bool) or not isinstance(period, (int, float)) or not period > 0:
        raise ValueError(f"Named: period must be positive seconds, not {period!r}")
    return math.ceil(period * NS_PER_S)


def check_names(names: Sequence[str], count: int) -> tuple[str, ...]:
    """One policy name per limit: each an RFC 9651 String, no two equal; a
    lone unnamed limit is ``default``. Raises ``ValueError`` naming the
    limit otherwise."""
    names = tuple(names)
    if len(names) != count:
        raise ValueError(f"{len(names)} names for {count} limits: give one per limit, in order")
    if count == 1 and not names[0]:
        return (DEFAULT_NAME,)
    for i, name in enumerate(names):
        if not name:
            raise ValueError(f"limit {i} has no name: name every limit of several")
        try:
            check_name(name)
        except ValueError as e:
            raise ValueError(f"limit {i}: {e}") from None
        if name in names[:i]:
            raise ValueError(f"limit {i}: {name!r} is already another limit's name: names must differ")
    return names


class Multi:
    """A multi-limit limiter (``ratecell.MultiLimiter``) as ``RateLimits``:
    one ``check_each`` decides every limit at once, all-or-nothing, and each
    limit reports its own decision in its own item.

    ``names`` default to the limiter's (``Limit(name=...)``). A limit that
    would admit a request another refuses reports ``allowed`` (it spent
    nothing), so ``violated-policies`` lists exactly the limits that
    refused; when none refused but the request was (a keyed table with no
    room for a new key), every limit is reported refusing, with the
    limiter's wait."""

    __slots__ = ("limiter", "_policies", "policy_field")

    def __init__(self, limiter: Any, names: Sequence[str] | None = None) -> None:
        limits = limiter.limits
        self.limiter = limiter
        names = check_names(limiter.names if names is None else names, len(limits))
        self._policies = tuple(
            (name, lim.limit, lim.period_ns) for name, lim in zip(names, limits, strict=True)
        )
        self.policy_field = policy_field([LimitDecision(*p, _ANY) for p in self._policies])

    def check_limits(self, key: bytes, cost: int) -> list[LimitDecision]:
        m = self.limiter.check_each(key, cost)
        each = m.limits
        if not m.decision.allowed and m.denied_by is None:
            retry = m.decision.retry_after_ns
            each = tuple(dataclasses.replace(d, allowed=False, retry_after_ns=retry) for d in each)
        return [
            LimitDecision(name, limit, period_ns, d)
            for (name, limit, period_ns), d in zip(self._policies, each)
        ]


class Tiered:
    """A quota per tier (free, paid, internal...) as ``RateLimits``, each
    request's tier chosen by the middleware's ``tier=f(request)``: a plan
    from a header, a claim, the route.

    ``tiers`` maps each tier's policy name to its ``ratecell.Limit`` (tier
    0 first: the default tier). The fields name the request's tier and
    give its quota. ``f(request)`` returns a tier name or index; a tier
    that is not one of these (None, an unknown plan a client sent) is the
    default tier, so no client can choose a quota it was not given. One
    ``ratecell.TieredLimiter`` (``capacity``, ``overflow``: evict, as every
    HTTP limiter should) holds the keys of every tier; a key whose tier
    changes keeps what it spent. ``close()`` closes it."""

    __slots__ = ("limiter", "_policies", "_index")

    def __init__(
        self,
        tiers: Any,
        *,
        capacity: int = 100_000,
        overflow: str = "evict",
    ) -> None:
        from .._build import _as_given, _c_configs
        from .._tiers import TieredLimiter

        pairs = list(tiers.items() if hasattr(tiers, "items") else tiers)
        if not pairs:
            raise ValueError("Tiered: give at least one tier (name, Limit)")
        names = [name for name, _ in pairs]
        for i, name in enumerate(names):
            if not name:
                raise ValueError(f"tier {i} has no name: name every tier")
        check_names(names, len(names))
        limits = [limit for _, limit in pairs]
        self.limiter = TieredLimiter(limits, capacity=capacity, overflow=overflow)
        given = _as_given(limits, _c_configs(limits, capacity, overflow, "tsc"))
        self._policies = tuple(
            (name, lim.limit, int(lim.period_ns or 0))
            for name, lim in zip(names, given, strict=True)
        )
        self._index = {name: i for i, name in enumerate(names)}

    def tier_index(self, tier: str | int | None) -> int:
        """The tier named or numbered ``tier``; the default tier (0) for
        any other value."""
        if isinstance(tier, str):
            return self._index.get(tier, 0)
        if type(tier) is int and 0 <= tier < len(self._policies):
            return tier
        return 0

    def check_tier(self, key: bytes, cost: int, tier: str | int | None) -> list[LimitDecision]:
        i = self.tier_index(tier)
        d = self.limiter.check(key, cost, tier=i)
        name, limit, period_ns = self._policies[i]
        return [LimitDecision(name, limit, period_ns, d)]

    def check_limits(self, key: bytes, cost: int) -> list[LimitDecision]:
        """The default tier's decision (a middleware given no ``tier=``)."""
        return self.check_tier(key, cost, 0)

    def close(self) -> None:
        self.limiter.close()


def as_limits(limiter: Any) -> RateLimits:
    """``limiter`` itself when it is ``RateLimits``, ``Multi(limiter)`` for
    a multi-limit limiter, else ``Named(limiter)``."""
    if isinstance(limiter, RateLimits):
        return limiter
    if callable(getattr(limiter, "check_each", None)) and hasattr(limiter, "limits"):
        return Multi(limiter)
    if callable(getattr(limiter, "check", None)):
        return Named(limiter)
    raise TypeError(
        f"limiter must have check_limits(key, cost) or check(key, cost), not {type(limiter).__name__}"
    )

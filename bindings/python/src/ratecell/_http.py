"""What the ASGI and WSGI middlewares share: the response fields of
draft-ietf-httpapi-ratelimit-headers-11 and the quota-exceeded problem
document as pure functions of per-limit decisions (RFC 9651 strings,
integers and lists), the limiter protocol, and the per-request settings
(key, cost, exemptions). Knows nothing about ASGI or WSGI."""

from __future__ import annotations

import dataclasses
import inspect
import ipaddress
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any, Generic, Literal, NamedTuple, Protocol, TypeVar, runtime_checkable

from ._types import Decision

QUOTA_EXCEEDED_TYPE = "https://iana.org/assignments/http-problem-types#quota-exceeded"
"""The draft's problem type for a request refused by quota policies (§5.1)."""

SF_INTEGER_MAX = 999_999_999_999_999
"""The largest Integer RFC 9651 serializes (15 digits); larger values are sent as this."""

DEFAULT_NAME = "default"
NS_PER_S = 1_000_000_000
NEVER = 2**64 - 1


def check_name(name: str) -> str:
    """Returns ``name`` if it can be an RFC 9651 String (non-empty printable
    ASCII); raises ``ValueError`` naming it otherwise."""
    if not isinstance(name, str) or not name or not all(0x20 <= ord(c) <= 0x7E for c in name):
        raise ValueError(
            f"invalid policy name {name!r}: it must be non-empty printable ASCII "
            "(an RFC 9651 String)"
        )
    return name


class LimitDecision(NamedTuple):
    """One limit's part of a request's outcome. (A named tuple: one is made
    per limit per request, and a tuple is made several times faster than a
    frozen dataclass.)"""

    name: str
    """The policy name in both fields and in ``violated-policies``."""
    limit: int
    """The quota ``q``: units per period."""
    period_ns: int
    """The window ``w`` in nanoseconds (sent in whole seconds, rounded up)."""
    decision: Decision
    """This limit's decision for the request."""


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
        from ._build import _as_given, _c_configs
        from ._tiers import TieredLimiter

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


def ceil_seconds(ns: int) -> int:
    """Whole seconds, rounded up, capped at ``SF_INTEGER_MAX``."""
    return min(-(-max(ns, 0) // NS_PER_S), SF_INTEGER_MAX)


@lru_cache(maxsize=1024)
def _sf_string(s: str) -> str:
    # Cached: the same few policy names are serialized on every response.
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quota_window(limit: int, period_ns: int) -> tuple[int, int]:
    """The ``q`` and ``w`` of a limit of ``limit`` units per ``period_ns``:
    ``w`` is the period in whole seconds, rounded up (at least 1: the draft's
    window is a non-zero integer), and when the period is not a whole number
    of seconds ``q`` is scaled to that window, rounded down, so that ``q/w``
    is never more than the real rate (10 per 0.5 s is ``q=20;w=1``, 10 per
    1.5 s is ``q=13;w=2``). Unscaled, a 0.5 s period would advertise half
    its real rate."""
    w = max(ceil_seconds(period_ns), 1)
    if period_ns <= 0 or period_ns % NS_PER_S == 0:
        return min(limit, SF_INTEGER_MAX), w
    return min(limit * w * NS_PER_S // period_ns, SF_INTEGER_MAX), w


@lru_cache(maxsize=1024)
def _policy_item(name: str, limit: int, period_ns: int) -> str:
    # Cached: a policy item is the same on every response of its limit.
    q, w = quota_window(limit, period_ns)
    return f"{_sf_string(name)};q={q};w={w}"


def policy_field(items: Sequence[LimitDecision]) -> str:
    """``RateLimit-Policy``: one ``"<name>";q=<limit>;w=<period>`` item per
    limit, as ``quota_window`` gives them."""
    return ", ".join([_policy_item(i.name, i.limit, i.period_ns) for i in items])


def reset_seconds(d: Decision) -> int:
    """The ``t`` of one limit's decision, in whole seconds rounded up: the
    time until more quota is available (draft-11 §4.3).

    - Refused by this limit: its ``retry_after`` (at least 1), when this
      same request could pass; the same value as ``Retry-After`` when this
      limit's wait is the longest. A keyed table with no room for a new key
      (overflow ``deny``) refuses with the table's wait, so ``t`` carries
      that wait, never 0. When no wait helps, ``reset_after``.
    - Admitted: ``reset_after``, when the quota is whole again; more is
      available by then at the latest (exactly then for a fixed window).
      0 when the quota is whole.
    """
    if not d.allowed and d.retry_after_ns != NEVER:
        t = -(-d.retry_after_ns // NS_PER_S) or 1
    else:
        t = -(-d.reset_after_ns // NS_PER_S)
    return t if t <= SF_INTEGER_MAX else SF_INTEGER_MAX


def ratelimit_field(items: Sequence[LimitDecision]) -> str:
    """``RateLimit``: one ``"<name>";r=<remaining>;t=<seconds>`` item per
    limit, ``t`` as ``reset_seconds`` gives it."""
    if len(items) == 1:  # the common case, without a list and a join
        name, _, _, d = items[0]
        r = d.remaining
        if d.allowed:
            t = -(-d.reset_after_ns // NS_PER_S)
            if t > SF_INTEGER_MAX:
                t = SF_INTEGER_MAX
        else:
            t = reset_seconds(d)
        if r > SF_INTEGER_MAX:
            r = SF_INTEGER_MAX
        return f"{_sf_string(name)};r={r};t={t}"
    return ", ".join(
        [
            f"{_sf_string(i.name)};r={min(i.decision.remaining, SF_INTEGER_MAX)}"
            f";t={reset_seconds(i.decision)}"
            for i in items
        ]
    )


def admitted(items: Sequence[LimitDecision]) -> bool:
    """Whether every limit admitted the request."""
    for i in items:
        if not i.decision.allowed:
            return False
    return True


def retry_after_seconds(items: Sequence[LimitDecision]) -> int | None:
    """``Retry-After`` of a refused request: the longest wait of the refusing
    limits, whole seconds rounded up (at least 1). None when admitted, or
    when some limit can never admit the request (no wait helps)."""
    waits = [i.decision.retry_after_ns for i in items if not i.decision.allowed]
    if not waits or NEVER in waits:
        return None
    return max(ceil_seconds(max(waits)), 1)


def problem_body(items: Sequence[LimitDecision]) -> bytes:
    """The ``application/problem+json`` body of a refusal."""
    names = ",".join(_sf_string(i.name) for i in items if not i.decision.allowed)
    return (
        f'{{"type":"{QUOTA_EXCEEDED_TYPE}","title":"Quota exceeded","status":429,'
        f'"violated-policies":[{names}]}}'
    ).encode("ascii")


MISSING_KEY_BODY = (
    b'{"type":"about:blank","title":"Bad Request","status":400,'
    b'"detail":"the request carries no rate-limit key"}'
)
NO_CLIENT_ADDR_BODY = (
    b'{"type":"about:blank","title":"Internal Server Error","status":500,'
    b'"detail":"rate limiting by client address, but the request has no client address '
    b'(a Unix socket, a test client without one): give the middleware key= to key such '
    b'requests"}'
)
UNAVAILABLE_BODY = (
    b'{"type":"about:blank","title":"Service Unavailable","status":503,'
    b'"detail":"the rate limiter failed"}'
)

MissingKey = Literal["reject", "shared", "skip"]
ForwardedHeader = Literal["x-forwarded-for", "forwarded"]
R = TypeVar("R")

_log = logging.getLogger("ratecell")

STORE_ERROR_LOG_INTERVAL = 10.0
"""Seconds between the log lines of store failures after the first."""


class StoreErrorLog:
    """The log line of store failures on the ``ratecell`` logger: the first
    at once, then at most one every ``STORE_ERROR_LOG_INTERVAL`` seconds
    with how many failed since. An outage fails every request, and a line
    per request would bury the log (and cost the time of a write each)."""

    __slots__ = ("_lock", "_next", "_since")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0.0
        self._since = 0

    def failed(self, exc: BaseException, fail_open: bool) -> None:
        now = time.monotonic()
        with self._lock:
            self._since += 1
            if now < self._next:
                return
            since, self._since = self._since, 0
            self._next = now + STORE_ERROR_LOG_INTERVAL
        _log.warning(
            "ratecell: the rate-limit store failed (%s: %s); %s; %d failure(s) since the "
            "last such line",
            type(exc).__name__, exc,
            "requests pass unlimited (fail_open)" if fail_open else "requests get 503",
            since,
        )

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _parse_node(node: str) -> IPAddress | None:
    """One forwarded address without port, brackets or quotes; None when it
    is not an address (RFC 7239's ``unknown``, ``_hidden``)."""
    node = node.strip().strip('"')
    if node.startswith("["):
        node = node[1:].partition("]")[0]
    elif node.count(":") == 1:
        node = node.partition(":")[0]  # IPv4 with a port
    try:
        ip = ipaddress.ip_address(node)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


class ClientIp:
    """Finds the client's address and groups it into a key: the peer, or
    behind trusted proxies the right-most untrusted address of the
    forwarding header; IPv4 under ``ipv4_prefix`` bits, IPv6 under
    ``ipv6_prefix`` (an IPv6 host is usually given a whole /64)."""

    __slots__ = ("proxies", "hops", "header", "v4", "v6", "plain")

    def __init__(
        self,
        trusted_proxies: Iterable[str] | int | None = None,
        forwarded_header: ForwardedHeader = "x-forwarded-for",
        ipv4_prefix: int = 32,
        ipv6_prefix: int = 64,
    ) -> None:
        self.proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
        self.hops = 0
        if isinstance(trusted_proxies, bool):
            raise TypeError("trusted_proxies: give CIDR strings or a hop count, not a bool")
        if isinstance(trusted_proxies, int):
            if trusted_proxies < 0:
                raise ValueError(f"trusted_proxies: a hop count is >= 0, not {trusted_proxies}")
            self.hops = trusted_proxies
        elif isinstance(trusted_proxies, str):
            raise TypeError("trusted_proxies: give a list of CIDRs, not one string")
        elif trusted_proxies is not None:
            try:
                self.proxies = tuple(ipaddress.ip_network(c, strict=False) for c in trusted_proxies)
            except ValueError as e:
                raise ValueError(f"trusted_proxies: {e}") from None
        header = forwarded_header.lower() if isinstance(forwarded_header, str) else forwarded_header
        if header not in ("x-forwarded-for", "forwarded"):
            raise ValueError(
                "forwarded_header must be 'x-forwarded-for' or 'forwarded', "
                f"not {forwarded_header!r}"
            )
        self.header: str = header
        prefixes = (("ipv4_prefix", ipv4_prefix, 32), ("ipv6_prefix", ipv6_prefix, 128))
        for what, bits, top in prefixes:
            if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= top:
                raise ValueError(f"{what} must be an int in 0..{top}, not {bits!r}")
        self.v4 = ipv4_prefix
        self.v6 = ipv6_prefix
        # The peer is the client and an IPv4 peer's text is its key.
        self.plain = not self.proxies and not self.hops and ipv4_prefix == 32

    def _trusted(self, ip: IPAddress) -> bool:
        return any(ip in net for net in self.proxies)

    def client(self, peer: IPAddress, forwarded: Sequence[bytes]) -> IPAddress:
        """The client's address: ``peer``'s unless it is a trusted proxy.
        ``forwarded`` are the header's field lines, in order."""
        if not self.proxies and not self.hops:
            return peer
        if self.proxies and not self._trusted(peer):
            return peer
        nodes: list[IPAddress | None] = []
        for line in forwarded:
            for element in line.decode("latin-1").split(","):
                if self.header == "forwarded":
                    for_value = None
                    for pair in element.split(";"):
                        k, eq, v = pair.partition("=")
                        if eq and k.strip().lower() == "for":
                            for_value = v
                            break
                    nodes.append(None if for_value is None else _parse_node(for_value))
                else:
                    nodes.append(_parse_node(element))
        if self.hops:
            i = len(nodes) - self.hops
            if i < 0:
                return peer
            # The proxy `hops` away wrote it; not an address there: the
            # nearest that is.
            return next((n for n in nodes[i:] if n is not None), peer)
        # From the right: each trusted hop vouches for the one to its left;
        # the first untrusted one is the client. An entry that is not an
        # address ends the walk at the last address a trusted proxy reported.
        client = peer
        for hop in reversed(nodes):
            if hop is None:
                break
            client = hop
            if not self._trusted(hop):
                break
        return client

    def key(self, peer: str | None, forwarded: Callable[[], Sequence[bytes]]) -> str | None:
        """The key of a request from ``peer`` (None when it has no
        address), reading the forwarding header through ``forwarded`` only
        when the peer is a trusted proxy."""
        if not peer:
            return None
        if self.plain and ":" not in peer:
            return peer
        ip = _parse_node(peer)
        if ip is None:
            return None
        if self.proxies or self.hops:
            ip = self.client(ip, forwarded())
        return _grouped(ip, self.v4, self.v6)


@lru_cache(maxsize=4096)
def _grouped(ip: IPAddress, v4: int, v6: int) -> str:
    bits = v4 if ip.version == 4 else v6
    if bits == ip.max_prefixlen:
        return str(ip)
    return str(ipaddress.ip_network((ip, bits), strict=False))


class Settings(Generic[R]):
    """Key, cost and exemption rules over a request ``R`` (an ASGI scope or a
    WSGI environ); ``header_of(request, name)``, ``headers_of(request,
    name)`` (every field line) and ``client_of(request)`` read the
    framework's request."""

    __slots__ = ("limits", "key", "missing_key", "cost", "dry_run", "exempt_paths", "exempt",
                 "fail_open", "name", "policy", "plain", "by_client", "logged_no_client",
                 "on_refusal", "on_dry_run_refusal", "methods", "metrics", "regroup",
                 "on_store_error", "count_store_error", "store_log", "tier", "legacy",
                 "extended")

    def __init__(
        self,
        limiter: Any,
        key: str | Sequence[Any] | Callable[[R], bytes | str | None] | None,
        missing_key: MissingKey,
        cost: Callable[[R], int] | None,
        dry_run: bool,
        exempt: Iterable[str] | Callable[[R], bool] | None,
        fail_open: bool,
        header_of: Callable[[R, str], bytes | None],
        client_of: Callable[[R], str | None],
        headers_of: Callable[[R, str], Sequence[bytes]] | None = None,
        client_ip: ClientIp | None = None,
        on_refusal: Callable[[R, Sequence[LimitDecision]], Any] | None = None,
        on_dry_run_refusal: Callable[[R, Sequence[LimitDecision]], Any] | None = None,
        methods: Iterable[str] | None = None,
        metrics: Callable[[Sequence[LimitDecision], bool, bool], Any] | None = None,
        on_store_error: Callable[[R, Exception], Any] | None = None,
        tier: Callable[[R], str | int | None] | None = None,
        enabled: bool = True,
        legacy: bool = False,
    ) -> None:
        self.limits = as_limits(limiter)
        self.legacy = bool(legacy)
        if tier is not None:
            if not callable(tier):
                raise TypeError(f"tier must be a callable of the request, not {tier!r}")
            if not callable(getattr(self.limits, "check_tier", None)):
                raise TypeError(
                    "tier= chooses among tiers: give the middleware ratecell.asgi.Tiered "
                    f"(or ratecell.wsgi.Tiered) limits, not {type(limiter).__name__}"
                )
        self.tier = tier
        # Whether a request needs more than the plain check and fields:
        # one flag the middlewares test, so those without pay one test.
        self.extended = tier is not None or self.legacy
        if metrics is not None and not callable(metrics):
            raise TypeError(
                f"metrics must be a callable (ratecell.metrics.PrometheusMetrics), not {metrics!r}"
            )
        self.metrics = metrics
        # PrometheusMetrics counts store failures too; a plain function
        # sees decisions only.
        count = getattr(metrics, "store_error", None)
        self.count_store_error: Callable[[bool], Any] | None = count if callable(count) else None
        if on_store_error is not None and not callable(on_store_error):
            raise TypeError(f"on_store_error must be a callable, not {on_store_error!r}")
        self.on_store_error = on_store_error
        self.store_log = StoreErrorLog()
        if isinstance(methods, str):
            raise TypeError("methods: give a list of methods, not one string")
        self.methods: frozenset[str] | None = (
            None if methods is None else frozenset(m.upper() for m in methods)
        )
        # Named, Multi and RedisLimits know their policy field in advance.
        policy = getattr(self.limits, "policy_field", None)
        self.policy: str | None = policy if isinstance(policy, str) else None
        if missing_key not in ("shared", "skip", "reject"):
            raise ValueError(
                f"missing_key must be 'reject', 'shared' or 'skip', not {missing_key!r}"
            )
        self.missing_key = missing_key
        self.by_client = key is None
        self.logged_no_client = False
        self.regroup: ClientIp | None = None
        if key is None:
            ip = client_ip or ClientIp()
            if ip.plain:
                # An IPv4 peer's text is its key, as it comes; request_key
                # groups an IPv6 one (no extra call on the common path).
                self.key: Callable[[R], bytes | str | None] = client_of
                self.regroup = ip
            else:
                lines = headers_of or (lambda r, n: [v] if (v := header_of(r, n)) else [])
                header = ip.header
                self.key = lambda r: ip.key(client_of(r), lambda: lines(r, header))
        elif isinstance(key, str):
            if not key:
                raise ValueError("key: a header name must not be empty")
            name = key.lower()
            self.key = lambda r: header_of(r, name)
        elif isinstance(key, (tuple, list)):
            self.key = _key_parts(key, header_of, client_of, headers_of, client_ip or ClientIp())
        elif callable(key):
            self.key = key
        else:
            raise TypeError(f"key must be None, a header name or a callable, not {key!r}")
        if cost is not None and not callable(cost):
            raise TypeError(f"cost must be a callable, not {cost!r}")
        self.cost = cost
        for what, hook in (("on_refusal", on_refusal), ("on_dry_run_refusal", on_dry_run_refusal)):
            if hook is not None and not callable(hook):
                raise TypeError(f"{what} must be a callable, not {hook!r}")
        self.on_refusal = on_refusal
        self.on_dry_run_refusal = on_dry_run_refusal
        self.dry_run = bool(dry_run)
        self.fail_open = bool(fail_open)
        if exempt is None:
            self.exempt_paths: frozenset[str] = frozenset()
            self.exempt: Callable[[R], bool] | None = None
        elif callable(exempt):
            self.exempt_paths, self.exempt = frozenset(), exempt
        elif isinstance(exempt, str):
            raise TypeError("exempt: give a list of paths, not one string")
        else:
            self.exempt_paths, self.exempt = frozenset(exempt), None
        # Nothing to decide per request but the check itself: the
        # middlewares take a shorter path.
        self.plain = (
            not self.exempt_paths and self.exempt is None and cost is None and self.methods is None
        )
        if not enabled:
            # Off: every request is exempt, through the check the
            # middlewares already make, so an enabled one pays nothing.
            self.exempt_paths, self.exempt, self.plain = frozenset(), lambda r: True, False

    def fields(self, items: Sequence[LimitDecision]) -> tuple[str, str]:
        """The values of ``RateLimit-Policy`` and ``RateLimit``."""
        policy = self.policy
        return (policy_field(items) if policy is None else policy), ratelimit_field(items)

    def request_key(self, request: R) -> bytes | None:
        """The key, or None (skip) / b"" (shared) / raises MissingKeyError,
        or NoClientAddrError when keyed by a client address the request
        does not have."""
        k = self.key(request)
        if type(k) is str:
            if k:
                if self.regroup is None or ":" not in k:
                    return k.encode()
                k = self.regroup.key(k, tuple)
                if k:
                    return k.encode()
        elif type(k) is bytes:
            if k:
                return k
        elif isinstance(k, str):
            k = k.encode()
        if k:
            return bytes(k)
        if self.by_client:
            if not self.logged_no_client:
                self.logged_no_client = True
                _log.error(
                    "ratecell: a request has no client address to key on; answering 500 "
                    "(give the middleware key= to key such requests)"
                )
            raise NoClientAddrError
        if self.missing_key == "shared":
            return b""  # the shared key: no real key is empty
        if self.missing_key == "skip":
            return None
        raise MissingKeyError

    def check_extended(self, request: R, key: bytes) -> Any:
        """The limits' decisions for a request of an ``extended`` setting
        (a tier function, legacy headers)."""
        cost = self.request_cost(request)
        if self.tier is None:
            return self.limits.check_limits(key, cost)
        return self.limits.check_tier(key, cost, self.tier(request))  # type: ignore[attr-defined]

    def store_failed(self, request: R, exc: Exception) -> None:
        """Reports a failure of the limits (the store) before the failure
        policy answers: the hook, the counter, the log line."""
        if self.on_store_error is not None:
            self.on_store_error(request, exc)
        if self.count_store_error is not None:
            self.count_store_error(self.fail_open)
        self.store_log.failed(exc, self.fail_open)

    def request_cost(self, request: R) -> int:
        return 1 if self.cost is None else self.cost(request)

    def is_exempt(self, path: str, request: R, method: str = "GET") -> bool:
        """Whether the request passes unlimited: a method not limited, an
        exempt path, or the exemption predicate."""
        return (
            (self.methods is not None and method not in self.methods)
            or path in self.exempt_paths
            or (self.exempt is not None and bool(self.exempt(request)))
        )


def _header_part(
    header_of: Callable[[Any, str], bytes | None], name: str
) -> Callable[[Any], bytes | None]:
    return lambda r: header_of(r, name)


def _key_parts(
    parts: Sequence[Any],
    header_of: Callable[[Any, str], bytes | None],
    client_of: Callable[[Any], str | None],
    headers_of: Callable[[Any, str], Sequence[bytes]] | None,
    ip: ClientIp,
) -> Callable[[Any], bytes | None]:
    """The key function of ``key=("client", "path", ...)``: each part's
    value in order, length-prefixed so no two lists of values give the
    same key; None (no key) when a part has none. Parts: ``"client"`` (the
    client's address, found and grouped as the middleware's options say),
    ``"path"``, ``"method"``, a header name, or ``f(request)``."""
    if not parts:
        raise ValueError("key: give at least one part")
    lines = headers_of or (lambda r, n: [v] if (v := header_of(r, n)) else [])

    def client(r: Any) -> bytes | None:
        k = ip.key(client_of(r), lambda: lines(r, ip.header))
        return k.encode() if k else None

    def path(r: Any) -> bytes | None:
        # An ASGI scope has "path"; a WSGI environ PATH_INFO (latin-1 text).
        v = r.get("path") if "type" in r else r.get("PATH_INFO")
        return v.encode("utf-8", "surrogateescape") if v else None

    def method(r: Any) -> bytes | None:
        v = r.get("method") if "type" in r else r.get("REQUEST_METHOD")
        return v.encode("ascii") if v else None

    fns: list[Callable[[Any], bytes | str | None]] = []
    for part in parts:
        if part == "client":
            fns.append(client)
        elif part == "path":
            fns.append(path)
        elif part == "method":
            fns.append(method)
        elif isinstance(part, str) and part:
            fns.append(_header_part(header_of, part.lower()))
        elif callable(part):
            fns.append(part)
        else:
            raise TypeError(
                f"key part {part!r}: give 'client', 'path', 'method', a header name or a callable"
            )

    def key(r: Any) -> bytes | None:
        out = bytearray()
        for fn in fns:
            v = fn(r)
            if not v:
                return None
            b = v.encode() if isinstance(v, str) else bytes(v)
            out += len(b).to_bytes(4, "big") + b
        return bytes(out)

    return key


class MissingKeyError(Exception):
    """A request without a key under ``missing_key="reject"``."""


class NoClientAddrError(Exception):
    """A request keyed by client address that has none: a misconfiguration."""


def legacy_values(items: Sequence[LimitDecision], now_s: int) -> tuple[int, int, int] | None:
    """The legacy ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``
    values (GitHub's, slowapi's, flask-limiter's), which describe one
    limit: of a refused request the refusing limit whose wait is the
    longest (the one ``Retry-After`` gives), else the limit with the fewest
    units left (the first of equals). Limit is its ``q`` (as
    ``RateLimit-Policy`` says it), Remaining its ``r``, and Reset the UNIX
    time in whole seconds when its ``t`` ends, counted from ``now_s``.
    None for no items."""
    refused = [i for i in items if not i.decision.allowed]
    if refused:
        item = max(refused, key=lambda i: reset_seconds(i.decision))
    elif items:
        item = min(items, key=lambda i: i.decision.remaining)
    else:
        return None
    q, _ = quota_window(item.limit, item.period_ns)
    return q, min(item.decision.remaining, SF_INTEGER_MAX), now_s + reset_seconds(item.decision)


def legacy_headers(items: Sequence[LimitDecision]) -> list[tuple[bytes, bytes]]:
    """``legacy_values`` as header lines, Reset from the system clock."""
    got = legacy_values(items, int(time.time()))
    if got is None:
        return []
    limit, remaining, reset = got
    return [
        (b"x-ratelimit-limit", str(limit).encode("ascii")),
        (b"x-ratelimit-remaining", str(remaining).encode("ascii")),
        (b"x-ratelimit-reset", str(reset).encode("ascii")),
    ]


def field_headers(fields: tuple[str, str]) -> list[tuple[bytes, bytes]]:
    return [
        (b"ratelimit-policy", fields[0].encode("ascii")),
        (b"ratelimit", fields[1].encode("ascii")),
    ]


def refusal_headers(
    items: Sequence[LimitDecision], fields: tuple[str, str], body: bytes
) -> list[tuple[bytes, bytes]]:
    headers = [*problem_headers(body), *field_headers(fields)]
    secs = retry_after_seconds(items)
    if secs is not None:
        headers.append((b"retry-after", str(secs).encode("ascii")))
    return headers


Refusal = tuple[int, Sequence[tuple[str, str]], bytes]
"""What an ``on_refusal`` hook answers: status, headers, body."""


def hooked_refusal_headers(
    items: Sequence[LimitDecision], fields: tuple[str, str], given: Sequence[tuple[str, str]]
) -> list[tuple[bytes, bytes]]:
    """A hook's headers, plus the RateLimit fields, Retry-After and
    Content-Length unless it set them."""
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in given]
    present = {k for k, _ in headers}
    secs = retry_after_seconds(items)
    for k, v in (
        *field_headers(fields),
        *(() if secs is None else ((b"retry-after", str(secs).encode("ascii")),)),
    ):
        if k not in present:
            headers.append((k, v))
    return headers


def problem_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]


def outcome(items: Sequence[LimitDecision]) -> tuple[bool, int]:
    """Whether every limit admitted the request, and the longest queue wait
    (leaky bucket) among them, in one pass."""
    ok = True
    wait = 0
    for i in items:
        d = i[3]
        if not d.allowed:
            ok = False
        if d.wait_ns > wait:
            wait = d.wait_ns
    return ok, wait


def queue_wait_ns(items: Sequence[LimitDecision]) -> int:
    wait = 0
    for i in items:
        if i.decision.wait_ns > wait:
            wait = i.decision.wait_ns
    return wait

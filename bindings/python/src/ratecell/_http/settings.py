"""A middleware's per-request settings: the key (a header, the client's
address behind trusted proxies, a function), the cost, exemptions, what
a request without a key gets, and the log of a failing store. Knows
nothing about ASGI or WSGI."""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar

from .fields import LimitDecision, policy_field, ratelimit_field
from .limits import as_limits

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

"""ASGI middleware (Starlette, FastAPI, any ASGI 3 app) that rate-limits
HTTP requests with ratecell and sends the fields of
draft-ietf-httpapi-ratelimit-headers-11, plus ``acquire``, which awaits
admission without blocking the event loop::

    from ratecell import Limiter
    from ratecell.asgi import RateLimitMiddleware

    app = RateLimitMiddleware(
        app, Limiter("sliding_window", 100, period=60, capacity=100_000, overflow="evict")
    )

Build keyed limiters for the middleware with ``overflow="evict"``, as
above: the middleware's keys come from clients, who can make up new ones at
will, and a table full of a flood's states then refuses every new client
under the library's default ``"deny"`` (and stops limiting them under
``"allow"``). ``"evict"`` gives each new key the place of the state nearest
to fresh instead (SPEC §5 bounds what that costs).

Standard library only. See the binding's README for every option and the
choices the draft leaves open.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any

from ._errors import CostExceedsLimit, TimedOut
from ._request import U64_MAX, _timeout_ns
from ._http import (
    MISSING_KEY_BODY,
    NO_CLIENT_ADDR_BODY,
    ClientIp,
    ForwardedHeader,
    NoClientAddrError,
    NEVER,
    UNAVAILABLE_BODY,
    MissingKey,
    MissingKeyError,
    Refusal,
    Settings,
    outcome,
    field_headers,
    hooked_refusal_headers,
    legacy_headers as _legacy_headers,
    problem_body,
    problem_headers,
    refusal_headers,
)
from ._http import LimitDecision, Multi, Named, RateLimits, Tiered
from ._types import Decision

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = [
    "RateLimitMiddleware", "acquire", "Named", "Multi", "Tiered", "LimitDecision", "RateLimits"
]


def _header(scope: Scope, name: str) -> bytes | None:
    raw = name.encode("latin-1")
    for k, v in scope.get("headers", ()):
        if k == raw:
            return bytes(v)
    return None


def _headers(scope: Scope, name: str) -> list[bytes]:
    raw = name.encode("latin-1")
    return [bytes(v) for k, v in scope.get("headers", ()) if k == raw]


def _client(scope: Scope) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


class RateLimitMiddleware:
    """Rate-limits every HTTP request of ``app``.

    - ``limiter``: a ``ratecell.Limiter`` (named ``default``, its limit and
      period from its config), ``Named(limiter, "name", limit=, period=)``
      for another name or a limiter without ``config``, a
      ``ratecell.MultiLimiter`` (one item per limit, under the limits'
      names, or ``Multi(limiter, names)``), or anything with
      ``check_limits(key, cost)`` returning one ``LimitDecision`` per limit
      (a multi-limit limiter), possibly as a coroutine (an async Redis
      client).
    - ``key``: None for the client address (``scope["client"]``), a header
      name (an API key), or ``f(scope) -> bytes | str | None``.
    - ``missing_key``, for a ``key`` header or function that gave no key:
      ``"reject"`` (400, the default: the client learns it at once),
      ``"shared"`` (keyless requests share one quota) or ``"skip"`` (not
      limited). A request keyed by client address that has none (a Unix
      socket) is a misconfiguration: 500, logged once on the ``ratecell``
      logger, whatever ``missing_key`` says.
    - ``cost``: ``f(scope) -> int`` (default 1).
    - ``dry_run``: count and send the fields, never refuse.
    - ``exempt``: a list of paths (exact match) or ``f(scope) -> bool``.
    - ``fail_open``: when the limiter raises, pass the request (default:
      answer 503). Either way the failure is logged on the ``ratecell``
      logger (the first at once, then one line every 10 s at most, with
      the count since), counted by ``metrics`` (a ``PrometheusMetrics``:
      ``ratecell_http_store_errors_total``) and given to
      ``on_store_error``.
    - ``enabled``: False turns limiting off (tests, staging): every
      request passes unchecked and without fields.
    - ``legacy_headers``: True also sends ``X-RateLimit-Limit``,
      ``X-RateLimit-Remaining`` and ``X-RateLimit-Reset`` (UNIX seconds)
      for one limit (``ratecell._http.legacy_values`` says which), beside
      the draft's fields.
    - ``key`` may also be a sequence of parts, keyed together:
      ``("client", "path")`` (the client's address as found above and the
      path), ``"method"``, header names, or functions of the scope.
    - ``tier``: ``f(scope) -> str | int | None`` chooses each request's
      tier (a plan from a header, a claim, the route) among ``Tiered``
      limits' tiers; any other value is the default tier.
    - ``on_store_error``: ``f(scope, exception)`` sees every failure of
      the limiter (a Redis store that did not answer), before the failure
      policy answers. Default: none.
    - ``trusted_proxies``: CIDRs of your proxies (``["10.0.0.0/8"]``): when
      the peer is one, the client is the right-most address of
      ``forwarded_header`` (``"x-forwarded-for"``, the default, or
      ``"forwarded"``, RFC 7239) outside them; or a hop count (the client
      is that many addresses from the right). Default None: the peer is the
      client and the headers are ignored (any client can send them).
    - ``ipv4_prefix``, ``ipv6_prefix``: client addresses are keyed by these
      prefixes (32 and 64: an IPv6 host usually holds a whole /64).
    - ``on_refusal``: ``f(scope, decisions) -> (status, headers, body)``
      (or a coroutine of it) answers refusals instead of the problem
      document; the RateLimit fields and Retry-After are added unless it
      set them.
    - ``on_dry_run_refusal``: ``f(scope, decisions)`` (or a coroutine)
      sees every request refused in a dry run.
    - ``methods``: only requests with these methods are limited (say
      ``["POST"]``); others pass without fields. Default: all.
    - ``metrics``: ``ratecell.metrics.PrometheusMetrics()`` (or any
      ``f(decisions, admitted, dry_run)``) counts admitted, refused and
      dry-run-refused requests per policy. Default: none.

    Non-HTTP scopes (websocket, lifespan) pass through untouched.
    """

    def __init__(
        self,
        app: ASGIApp,
        limiter: Any,
        *,
        key: str | Sequence[Any] | Callable[[Scope], bytes | str | None] | None = None,
        missing_key: MissingKey = "reject",
        cost: Callable[[Scope], int] | None = None,
        dry_run: bool = False,
        exempt: Iterable[str] | Callable[[Scope], bool] | None = None,
        fail_open: bool = False,
        trusted_proxies: Iterable[str] | int | None = None,
        forwarded_header: ForwardedHeader = "x-forwarded-for",
        ipv4_prefix: int = 32,
        ipv6_prefix: int = 64,
        on_refusal: Callable[[Scope, Sequence[LimitDecision]], Refusal | Awaitable[Refusal]]
        | None = None,
        on_dry_run_refusal: Callable[[Scope, Sequence[LimitDecision]], Any] | None = None,
        methods: Iterable[str] | None = None,
        metrics: Callable[[Sequence[LimitDecision], bool, bool], Any] | None = None,
        on_store_error: Callable[[Scope, Exception], Any] | None = None,
        tier: Callable[[Scope], str | int | None] | None = None,
        enabled: bool = True,
        legacy_headers: bool = False,
    ) -> None:
        self.app = app
        self.settings: Settings[Scope] = Settings(
            limiter, key, missing_key, cost, dry_run, exempt, fail_open, _header, _client,
            _headers, ClientIp(trusted_proxies, forwarded_header, ipv4_prefix, ipv6_prefix),
            on_refusal, on_dry_run_refusal, methods, metrics, on_store_error, tier, enabled,
            legacy_headers,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        s = self.settings
        if scope["type"] != "http" or (
            not s.plain and s.is_exempt(scope.get("path", ""), scope, scope.get("method", "GET"))
        ):
            await self.app(scope, receive, send)
            return
        try:
            key = s.request_key(scope)
        except NoClientAddrError:
            await _respond(send, 500, problem_headers(NO_CLIENT_ADDR_BODY), NO_CLIENT_ADDR_BODY)
            return
        except MissingKeyError:
            await _respond(send, 400, problem_headers(MISSING_KEY_BODY), MISSING_KEY_BODY)
            return
        if key is None:
            await self.app(scope, receive, send)
            return
        extended = s.extended
        try:
            if not extended:
                items = s.limits.check_limits(key, 1 if s.cost is None else s.cost(scope))
            else:
                items = s.check_extended(scope, key)
            if not isinstance(items, (list, tuple)):
                items = await items  # type: ignore[misc]
        except Exception as e:
            s.store_failed(scope, e)
            if not s.fail_open:
                await _respond(send, 503, problem_headers(UNAVAILABLE_BODY), UNAVAILABLE_BODY)
                return
            await self.app(scope, receive, send)
            return
        fields = s.fields(items)
        ok, wait = outcome(items)
        if s.metrics is not None:
            s.metrics(items, ok, s.dry_run)
        if not ok:
            if not s.dry_run:
                if s.on_refusal is not None:
                    got = s.on_refusal(scope, items)
                    if inspect.isawaitable(got):
                        got = await got
                    status, given, body = got
                    headers = hooked_refusal_headers(items, fields, given)
                    if extended and s.legacy:
                        present = {k for k, _ in headers}
                        headers += [h for h in _legacy_headers(items) if h[0] not in present]
                    if not any(k == b"content-length" for k, _ in headers):
                        headers.append((b"content-length", str(len(body)).encode("ascii")))
                    await _respond(send, status, headers, body)
                    return
                body = problem_body(items)
                headers = refusal_headers(items, fields, body)
                if extended and s.legacy:
                    headers += _legacy_headers(items)
                await _respond(send, 429, headers, body)
                return
            if s.on_dry_run_refusal is not None:
                seen = s.on_dry_run_refusal(scope, items)
                if inspect.isawaitable(seen):
                    await seen
        if wait and not s.dry_run:
            # A leaky bucket's place in its queue: run when its turn comes.
            await asyncio.sleep(wait / 1e9)
        extra = field_headers(fields)
        if extended and s.legacy:
            extra += _legacy_headers(items)

        async def send_with_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_fields)


async def _respond(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def acquire(limiter: Any, key: Any = 0, cost: int = 1, timeout: float | None = None) -> Decision:
    """Awaits until ``limiter`` (a ``ratecell.Limiter``, or anything whose
    ``check(key, cost)`` returns a ``Decision``, possibly as a coroutine)
    admits a request of ``cost`` for ``key`` (for the leaky bucket, also
    until its turn in the queue) and returns the admitting decision.

    Sleeps with ``asyncio.sleep`` between checks, so the event loop keeps
    running. Raises ``TimedOut`` (nothing taken) when admission cannot come
    within ``timeout`` seconds, and ``CostExceedsLimit`` at once when no wait
    can admit the cost.
    """
    # Validated as Limiter.acquire does (ValueError naming timeout).
    timeout_ns = _timeout_ns(timeout)
    deadline = None if timeout_ns == U64_MAX else time.monotonic() + timeout_ns / 1e9
    while True:
        got = limiter.check(key, cost)
        d: Decision = got if isinstance(got, Decision) else await got
        if d.allowed:
            if d.wait_ns:
                await asyncio.sleep(d.wait_ns / 1e9)
            return d
        if d.retry_after_ns == NEVER:
            raise CostExceedsLimit(d, f"cost {cost} exceeds what the limiter can ever admit")
        wait = d.retry_after_ns / 1e9
        if deadline is not None and time.monotonic() + wait > deadline:
            raise TimedOut(d)
        await asyncio.sleep(wait)


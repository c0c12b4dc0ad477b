"""Per-route limits, as slowapi's ``@limiter.limit("5/minute")``: a decorator
on a view (Starlette or FastAPI under ASGI, Flask under WSGI) gives that view
its own limit, with the same fields, refusals and options as the middlewares::

    from ratecell.routes import RouteLimits

    limits = RouteLimits()
    app.wsgi_app = limits.wsgi(app.wsgi_app)      # Flask; limits.asgi(app) for ASGI

    @app.post("/login")
    @limits.limit("5/minute")
    def login(): ...

``limits.asgi(app)`` / ``limits.wsgi(app)`` wraps the application once: it
lets a decorated view see its request and adds the RateLimit fields to
admitted responses. A decorated view called outside it raises
``RuntimeError`` (a misconfiguration, said at the first request). Refusals
are the view's return value: a Starlette ``Response`` under ASGI, Flask's
``(body, status, headers)`` under WSGI, or whatever ``response=`` builds.

Each decorated view has its own limiter (``algorithm``, ``capacity``, and
``overflow="evict"``: a table full of a flood's keys gives a new client the
place of the state nearest to fresh rather than refusing it), keyed like the
middlewares (client address by default). Stacked decorators are
checked one after another, outermost first; for several limits decided
all-or-nothing give ``limit()`` a ``ratecell.MultiLimiter`` instead.
Standard library only.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal, TypeVar

from ._http import (
    MISSING_KEY_BODY,
    NO_CLIENT_ADDR_BODY,
    ClientIp,
    ForwardedHeader,
    LimitDecision,
    MissingKey,
    MissingKeyError,
    Named,
    NoClientAddrError,
    Settings,
    as_limits,
    field_headers,
    outcome,
    problem_body,
    problem_headers,
    refusal_headers,
)

__all__ = ["RouteLimits", "parse_rate", "parse_rates"]

F = TypeVar("F", bound=Callable[..., Any])
Kind = Literal["asgi", "wsgi"]
Headers = list[tuple[bytes, bytes]]
Response = Callable[[int, Sequence[tuple[str, str]], bytes], Any]

# SPEC §2, "Rates in text": a month is 30 days and a year 365, as a
# period must be fixed (and at most 366 days).
_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "month": 30 * 86400, "months": 30 * 86400,
    "year": 365 * 86400, "years": 365 * 86400,
}
_RATE = re.compile(r"^\s*(\d+)\s*(?:/|per)\s*(\d+)?\s*([a-z]+)\s*$", re.IGNORECASE)
_SEPARATORS = re.compile(r"[;,|]")


def parse_rate(rate: str) -> tuple[int, int]:
    """``"5/minute"``, ``"5 per minute"``, ``"100/day"``, ``"10/5 seconds"``,
    ``"1000/month"`` as ``(limit, period in seconds)``; raises ``ValueError``
    naming the string otherwise. (Several rates: ``parse_rates``.)"""
    m = _RATE.match(rate)
    unit = _UNITS.get(m.group(3).lower()) if m else None
    if m is None or unit is None or int(m.group(1)) <= 0 or m.group(2) == "0":
        raise ValueError(
            f"rate {rate!r}: give 'N/unit' or 'N per K units' with unit second, minute, "
            "hour, day, month or year (e.g. '5/minute', '10/5 seconds')"
        )
    return int(m.group(1)), unit * int(m.group(2) or 1)


def parse_rates(rates: str) -> list[tuple[str, int, int]]:
    """One rate or several separated by ``;``, ``,`` or ``|``
    (``"3/minute;5/hour"``, ``"100 per day, 10 per hour"``), as
    ``(text, limit, period in seconds)`` each, in order; raises
    ``ValueError`` naming the string when a part is empty or not a rate."""
    parts = [part.strip() for part in _SEPARATORS.split(rates)]
    if not all(parts):
        raise ValueError(f"rates {rates!r}: an empty rate between separators (; , |)")
    return [(part, *parse_rate(part)) for part in parts]


class _Request:
    """The request a wrapped application is serving, and the fields the
    views it calls add to its response."""

    __slots__ = ("kind", "request", "extra")

    def __init__(self, kind: Kind, request: MutableMapping[str, Any]) -> None:
        self.kind = kind
        self.request = request
        self.extra: Headers = []


_current: ContextVar[_Request | None] = ContextVar("ratecell_routes_request", default=None)


def _asgi_parts() -> tuple[Any, Any, Any]:
    from . import asgi

    return asgi._header, asgi._client, asgi._headers


def _wsgi_parts() -> tuple[Any, Any, Any]:
    from . import wsgi

    return wsgi._header, wsgi._client, wsgi._headers


def _default_response(kind: Kind) -> Response:
    if kind == "wsgi":
        # Flask's (body, status, headers) return value.
        return lambda status, headers, body: (body, status, list(headers))
    try:
        from starlette.responses import Response as StarletteResponse
    except ImportError:  # pragma: no cover - depends on what is installed
        raise TypeError(
            "ratecell.routes: no Starlette to build refusals with; give RouteLimits(response=...)"
        ) from None
    return lambda status, headers, body: StarletteResponse(
        content=body, status_code=status, headers=dict(headers)
    )


def _str_headers(headers: Headers) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]


class RouteLimits:
    """Per-route limits. The keyword options are the middlewares' (``key``,
    ``missing_key``, ``trusted_proxies``, ``forwarded_header``,
    ``ipv4_prefix``, ``ipv6_prefix``), for every decorated view;
    ``algorithm`` and ``capacity`` make each view's limiter from its rate;
    ``response(status, headers, body)`` builds a refusal in the framework's
    terms (default: a Starlette ``Response``, or Flask's tuple);
    ``metrics`` counts outcomes as the middlewares' does."""

    def __init__(
        self,
        *,
        algorithm: str = "sliding_window",
        capacity: int = 100_000,
        key: str | Callable[[Any], bytes | str | None] | None = None,
        missing_key: MissingKey = "reject",
        trusted_proxies: Iterable[str] | int | None = None,
        forwarded_header: ForwardedHeader = "x-forwarded-for",
        ipv4_prefix: int = 32,
        ipv6_prefix: int = 64,
        response: Response | None = None,
        metrics: Callable[[Sequence[LimitDecision], bool, bool], Any] | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.capacity = capacity
        self.key = key
        self.missing_key: MissingKey = missing_key
        self.client_ip = ClientIp(trusted_proxies, forwarded_header, ipv4_prefix, ipv6_prefix)
        self.response = response
        self.metrics = metrics
        self._owned: list[Any] = []

    def limit(
        self,
        rate: str | Any,
        *,
        name: str | None = None,
        cost: Callable[[Any], int] | None = None,
        methods: Iterable[str] | None = None,
        key: str | Callable[[Any], bytes | str | None] | None = None,
    ) -> Callable[[F], F]:
        """A decorator giving a view the limit ``rate`` (``"5/minute"``;
        several rates, ``"3/minute;5/hour"``, decided all-or-nothing and
        each named by its text; or a limiter: a ``ratecell.Limiter``,
        ``MultiLimiter`` or anything the middlewares take), named ``name``
        (default: the rate string, or the limiter's own names). ``cost``, ``methods`` and ``key`` are the
        middlewares' options for this view only."""
        if isinstance(rate, str):
            from ._limiter import Limiter
            from ._multi import MultiLimiter
            from ._types import Limit

            rates = parse_rates(rate)
            # Evict, as every HTTP limiter should: the keys come from
            # clients, and under "deny" a full table refuses every new one.
            limiter: Any
            if len(rates) == 1:
                text, limit, period = rates[0]
                limiter = Limiter(
                    self.algorithm, limit, period=period, capacity=self.capacity,
                    overflow="evict",
                )
                limits: Any = Named(limiter, name or text)
            else:
                if name is not None:
                    raise ValueError(
                        f"rates {rate!r}: name= names one limit; several rates are each "
                        "named by their own text"
                    )
                # One limiter of several limits: all-or-nothing, so a
                # refusal by one spends nothing from the others.
                limiter = MultiLimiter(
                    [Limit(self.algorithm, limit, period=period, name=text)
                     for text, limit, period in rates],
                    capacity=self.capacity, overflow="evict",
                )
                limits = as_limits(limiter)
            self._owned.append(limiter)
        else:
            limits = Named(rate, name) if name is not None else as_limits(rate)
        settings: dict[Kind, Settings[Any]] = {}

        def settings_for(kind: Kind) -> Settings[Any]:
            got = settings.get(kind)
            if got is None:
                parts = _asgi_parts() if kind == "asgi" else _wsgi_parts()
                header_of, client_of, headers_of = parts
                got = Settings(
                    limits, key if key is not None else self.key, self.missing_key, cost,
                    False, None, False, header_of, client_of, headers_of, self.client_ip,
                    None, None, methods, self.metrics,
                )
                settings[kind] = got
            return got

        def decide(ctx: _Request) -> Any | None:
            """None to run the view, or the refusal to return instead."""
            s = settings_for(ctx.kind)
            req = ctx.request
            if ctx.kind == "asgi":
                path, method = req.get("path", ""), req.get("method", "GET")
            else:
                path, method = req.get("PATH_INFO", ""), req.get("REQUEST_METHOD", "GET")
            if s.is_exempt(path, req, method):
                return None
            respond = self.response or _default_response(ctx.kind)
            try:
                k = s.request_key(req)
            except NoClientAddrError:
                body = NO_CLIENT_ADDR_BODY
                return respond(500, _str_headers(problem_headers(body)), body)
            except MissingKeyError:
                body = MISSING_KEY_BODY
                return respond(400, _str_headers(problem_headers(body)), body)
            if k is None:
                return None
            # In-process limiters answer at once (no awaitable).
            items: Sequence[LimitDecision] = s.limits.check_limits(  # type: ignore[assignment]
                k, s.request_cost(req)
            )
            fields = s.fields(items)
            ok, _ = outcome(items)
            if s.metrics is not None:
                s.metrics(items, ok, False)
            if not ok:
                body = problem_body(items)
                return respond(429, _str_headers(refusal_headers(items, fields, body)), body)
            ctx.extra.extend(field_headers(fields))
            return None

        def current() -> _Request:
            ctx = _current.get()
            if ctx is None:
                raise RuntimeError(
                    "ratecell.routes: a rate-limited view ran outside RouteLimits.asgi(app) or "
                    ".wsgi(app): wrap the application with it"
                )
            return ctx

        def decorate(view: F) -> F:
            if inspect.iscoroutinefunction(view):

                @functools.wraps(view)
                async def limited_async(*args: Any, **kwargs: Any) -> Any:
                    refusal = decide(current())
                    if refusal is not None:
                        return refusal
                    return await view(*args, **kwargs)

                return limited_async  # type: ignore[return-value]

            @functools.wraps(view)
            def limited(*args: Any, **kwargs: Any) -> Any:
                refusal = decide(current())
                if refusal is not None:
                    return refusal
                return view(*args, **kwargs)

            return limited  # type: ignore[return-value]

        return decorate

    def asgi(self, app: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        """``app`` with its decorated views able to see their request, and
        the fields they add sent on the response."""

        async def wrapped(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            ctx = _Request("asgi", scope)
            token = _current.set(ctx)

            async def send_with_fields(message: Any) -> None:
                if message["type"] == "http.response.start" and ctx.extra:
                    message = dict(message)
                    message["headers"] = [*message.get("headers", ()), *ctx.extra]
                await send(message)

            try:
                await app(scope, receive, send_with_fields)
            finally:
                _current.reset(token)

        return wrapped

    def wsgi(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        """``app`` with its decorated views able to see their request, and
        the fields they add sent on the response."""

        def wrapped(environ: Any, start_response: Any) -> Iterable[bytes]:
            ctx = _Request("wsgi", environ)

            def start_with_fields(
                status: str, headers: list[tuple[str, str]], exc_info: Any = None
            ) -> Any:
                return start_response(status, [*headers, *_str_headers(ctx.extra)], exc_info)

            token = _current.set(ctx)
            try:
                return app(environ, start_with_fields)
            finally:
                _current.reset(token)

        return wrapped

    def close(self) -> None:
        """Closes the limiters made from rate strings."""
        for limiter in self._owned:
            limiter.close()
        self._owned.clear()

    def __enter__(self) -> RouteLimits:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

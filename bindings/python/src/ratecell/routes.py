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
    UNAVAILABLE_BODY,
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
    legacy_headers,
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


class _Check:
    """One limit (or several decided together) checked for requests of
    either kind: its limits, its per-kind settings, its decision."""

    __slots__ = ("owner", "limits", "key", "cost", "methods", "exempt_when", "settings")

    def __init__(
        self,
        owner: RouteLimits,
        limits: Any,
        key: Any,
        cost: Callable[[Any], int] | None,
        methods: Iterable[str] | None,
        exempt_when: Callable[[Any], bool] | None,
    ) -> None:
        self.owner = owner
        self.limits = limits
        self.key = key
        self.cost = cost
        self.methods = methods
        self.exempt_when = exempt_when
        self.settings: dict[Kind, Settings[Any]] = {}

    def settings_for(self, kind: Kind) -> Settings[Any]:
        got = self.settings.get(kind)
        if got is None:
            o = self.owner
            header_of, client_of, headers_of = _asgi_parts() if kind == "asgi" else _wsgi_parts()
            got = Settings(
                self.limits, self.key if self.key is not None else o.key, o.missing_key,
                self.cost, False, self.exempt_when, o.fail_open, header_of, client_of,
                headers_of, o.client_ip, None, None, self.methods, o.metrics,
                on_store_error=o.on_store_error, legacy=o.legacy_headers,
            )
            self.settings[kind] = got
        return got

    def decide(self, ctx: _Request, respond: Response) -> Any | None:
        """None to go on, or ``respond(status, headers, body)``'s refusal."""
        s = self.settings_for(ctx.kind)
        req = ctx.request
        if ctx.kind == "asgi":
            path, method = req.get("path", ""), req.get("method", "GET")
        else:
            path, method = req.get("PATH_INFO", ""), req.get("REQUEST_METHOD", "GET")
        if s.is_exempt(path, req, method):
            return None
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
        try:
            # In-process limiters answer at once (no awaitable).
            items: Sequence[LimitDecision] = s.limits.check_limits(  # type: ignore[assignment]
                k, s.request_cost(req)
            )
        except Exception as e:
            s.store_failed(req, e)
            if s.fail_open:
                return None
            body = UNAVAILABLE_BODY
            return respond(503, _str_headers(problem_headers(body)), body)
        fields = s.fields(items)
        ok, _ = outcome(items)
        if s.metrics is not None:
            s.metrics(items, ok, False)
        legacy = legacy_headers(items) if s.legacy else []
        if not ok:
            body = problem_body(items)
            headers = refusal_headers(items, fields, body) + legacy
            return respond(429, _str_headers(headers), body)
        ctx.extra.extend(field_headers(fields))
        ctx.extra.extend(legacy)
        return None


_MAX_COMPUTED_RATES = 64
"""The most distinct rates a view's rate function may give: each is a
limiter of its own, kept for the application's life."""


class RouteLimits:
    """Per-route limits. The keyword options are the middlewares' (``key``,
    ``missing_key``, ``trusted_proxies``, ``forwarded_header``,
    ``ipv4_prefix``, ``ipv6_prefix``), for every decorated view;
    ``algorithm`` and ``capacity`` make each view's limiter from its rate;
    ``response(status, headers, body)`` builds a refusal in the framework's
    terms (default: a Starlette ``Response``, or Flask's tuple);
    ``metrics`` counts outcomes as the middlewares' does.

    ``default_limits`` (a rate string) applies to every view that has no
    limit of its own and is not ``exempt``, per client;
    ``application_limits`` to every view not ``exempt``, one quota for all
    clients together. Both are checked by the wrapper before the view runs
    (application-wide first); it finds the view through the framework's
    routing (Starlette or FastAPI routes, Flask's URL map), and applies the
    default to any request whose view it cannot find (a 404).
    ``enabled=False`` turns every limit off (tests, staging);
    ``legacy_headers=True`` adds ``X-RateLimit-*`` as the middlewares do.
    A limiter that raises (a store that did not answer) is the
    middlewares' store failure: logged, counted by ``metrics``, given to
    ``on_store_error(request, exc)``, and answered 503 unless
    ``fail_open``."""

    def __init__(
        self,
        *,
        algorithm: str = "sliding_window",
        capacity: int = 100_000,
        key: str | Sequence[Any] | Callable[[Any], bytes | str | None] | None = None,
        missing_key: MissingKey = "reject",
        trusted_proxies: Iterable[str] | int | None = None,
        forwarded_header: ForwardedHeader = "x-forwarded-for",
        ipv4_prefix: int = 32,
        ipv6_prefix: int = 64,
        response: Response | None = None,
        metrics: Callable[[Sequence[LimitDecision], bool, bool], Any] | None = None,
        default_limits: str | None = None,
        application_limits: str | None = None,
        enabled: bool = True,
        legacy_headers: bool = False,
        fail_open: bool = False,
        on_store_error: Callable[[Any, Exception], Any] | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.fail_open = bool(fail_open)
        self.on_store_error = on_store_error
        self.capacity = capacity
        self.key = key
        self.missing_key: MissingKey = missing_key
        self.client_ip = ClientIp(trusted_proxies, forwarded_header, ipv4_prefix, ipv6_prefix)
        self.response = response
        self.metrics = metrics
        self.enabled = bool(enabled)
        self.legacy_headers = bool(legacy_headers)
        self._owned: list[Any] = []
        self._default = (
            None if default_limits is None
            else _Check(self, self._limits_of(default_limits, None), None, None, None, None)
        )
        # One quota for every client: one key for every request.
        self._application = (
            None if application_limits is None
            else _Check(
                self, self._limits_of(application_limits, None), lambda r: b"application",
                None, None, None,
            )
        )

    def _limits_of(self, rate: str, name: str | None) -> Any:
        """The limits of a rate string (owned, closed by ``close``)."""
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
                self.algorithm, limit, period=period, capacity=self.capacity, overflow="evict",
            )
            limits: Any = Named(limiter, name or text)
        else:
            if name is not None:
                raise ValueError(
                    f"rates {rate!r}: name= names one limit; several rates are each "
                    "named by their own text"
                )
            # One limiter of several limits: all-or-nothing, so a refusal
            # by one spends nothing from the others.
            limiter = MultiLimiter(
                [Limit(self.algorithm, limit, period=period, name=text)
                 for text, limit, period in rates],
                capacity=self.capacity, overflow="evict",
            )
            limits = as_limits(limiter)
        self._owned.append(limiter)
        return limits

    def limit(
        self,
        rate: str | Callable[[Any], str] | Any,
        *,
        name: str | None = None,
        cost: Callable[[Any], int] | None = None,
        methods: Iterable[str] | None = None,
        key: str | Sequence[Any] | Callable[[Any], bytes | str | None] | None = None,
        exempt_when: Callable[[Any], bool] | None = None,
    ) -> Callable[[F], F]:
        """A decorator giving a view the limit ``rate`` (``"5/minute"``;
        several rates, ``"3/minute;5/hour"``, decided all-or-nothing and
        each named by its text; ``f(request) -> rate string``, computed per
        request, say from the user's plan, each distinct rate its own
        limiter, at most 64; or a limiter: a ``ratecell.Limiter``,
        ``MultiLimiter`` or anything the middlewares take), named ``name``
        (default: the rate string, or the limiter's own names). ``cost``,
        ``methods`` and ``key`` are the middlewares' options for this view
        only; ``exempt_when(request)`` true skips this limit for that
        request (the request is the ASGI scope or the WSGI environ)."""
        computed: dict[str, _Check] | None = None
        check: _Check | None = None
        rate_of: Callable[[Any], str] = rate  # type: ignore[assignment]  # used only when callable
        if isinstance(rate, str):
            check = _Check(self, self._limits_of(rate, name), key, cost, methods, exempt_when)
        elif callable(rate) and not hasattr(rate, "check") and not hasattr(rate, "check_limits"):
            computed = {}
        else:
            limits = Named(rate, name) if name is not None else as_limits(rate)
            check = _Check(self, limits, key, cost, methods, exempt_when)

        def check_of(request: Any) -> _Check:
            if check is not None:
                return check
            assert computed is not None
            text = rate_of(request)
            got = computed.get(text)
            if got is None:
                if len(computed) >= _MAX_COMPUTED_RATES:
                    raise RuntimeError(
                        f"ratecell.routes: the view's rate function gave more than "
                        f"{_MAX_COMPUTED_RATES} distinct rates: give it a few fixed ones"
                    )
                got = _Check(self, self._limits_of(text, name), key, cost, methods, exempt_when)
                computed[text] = got
            return got

        def decide(ctx: _Request) -> Any | None:
            if not self.enabled:
                return None
            return check_of(ctx.request).decide(
                ctx, self.response or _default_response(ctx.kind)
            )

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

                limited_async._ratecell_limited = True  # type: ignore[attr-defined]
                return limited_async  # type: ignore[return-value]

            @functools.wraps(view)
            def limited(*args: Any, **kwargs: Any) -> Any:
                refusal = decide(current())
                if refusal is not None:
                    return refusal
                return view(*args, **kwargs)

            limited._ratecell_limited = True  # type: ignore[attr-defined]
            return limited  # type: ignore[return-value]

        return decorate

    def exempt(self, view: F) -> F:
        """Marks a view exempt from ``default_limits`` and
        ``application_limits`` (its own ``limit`` decorators still apply):
        health checks, static files."""
        view._ratecell_exempt = True  # type: ignore[attr-defined]
        return view

    def _before_view(self, ctx: _Request, view: Any) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """The application-wide and default limits of a request whose view
        is ``view`` (None when the routing found none): None to go on, or
        the refusal as (status, headers, body)."""
        if getattr(view, "_ratecell_exempt", False):
            return None
        raw: Response = lambda status, headers, body: (status, list(headers), body)
        for check in (self._application, self._default):
            if check is None or (check is self._default and getattr(view, "_ratecell_limited", False)):
                continue
            refusal = check.decide(ctx, raw)
            if refusal is not None:
                return refusal  # type: ignore[no-any-return]
        return None

    def asgi(self, app: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        """``app`` with its decorated views able to see their request, and
        the fields they add sent on the response."""
        wide = self._default is not None or self._application is not None

        async def wrapped(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            ctx = _Request("asgi", scope)
            if wide and self.enabled:
                refusal = self._before_view(ctx, _starlette_view(app, scope))
                if refusal is not None:
                    status, headers, body = refusal
                    await send({
                        "type": "http.response.start", "status": status,
                        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers],
                    })
                    await send({"type": "http.response.body", "body": body})
                    return
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
        wide = self._default is not None or self._application is not None

        def wrapped(environ: Any, start_response: Any) -> Iterable[bytes]:
            ctx = _Request("wsgi", environ)
            if wide and self.enabled:
                refusal = self._before_view(ctx, _flask_view(app, environ))
                if refusal is not None:
                    status, headers, body = refusal
                    start_response(_status_line(status), headers)
                    return [body]

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


def _status_line(status: int) -> str:
    from http import HTTPStatus

    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def _starlette_view(app: Any, scope: Any) -> Any:
    """The endpoint a Starlette or FastAPI application routes ``scope`` to;
    None when it has no route for it, or is not such an application."""
    routes = getattr(app, "routes", None)
    if not routes:
        return None
    try:
        from starlette.routing import Match
    except ImportError:  # pragma: no cover - depends on what is installed
        return None
    for route in routes:
        try:
            match, child = route.matches(scope)
        except Exception:  # a route that cannot read this scope
            continue
        if match == Match.FULL:
            return child.get("endpoint", getattr(route, "endpoint", None))
    return None


def _flask_view(app: Any, environ: Any) -> Any:
    """The view function a Flask application (``app`` is its ``wsgi_app``
    or the application itself) routes ``environ`` to; None otherwise."""
    flask_app = getattr(app, "__self__", app)
    url_map = getattr(flask_app, "url_map", None)
    views = getattr(flask_app, "view_functions", None)
    if url_map is None or views is None:
        return None
    try:
        endpoint, _ = url_map.bind_to_environ(environ).match()
    except Exception:  # werkzeug's NotFound, MethodNotAllowed, RequestRedirect
        return None
    return views.get(endpoint)

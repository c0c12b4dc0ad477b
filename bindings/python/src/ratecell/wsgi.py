"""WSGI middleware (Flask, Django, any WSGI app) that rate-limits requests
with ratecell and sends the fields of draft-ietf-httpapi-ratelimit-headers-11::

    from ratecell import Limiter
    from ratecell.wsgi import RateLimitMiddleware

    app.wsgi_app = RateLimitMiddleware(
        app.wsgi_app, Limiter("gcra", 10, period=1, capacity=100_000, overflow="evict")
    )

Build keyed limiters for the middleware with ``overflow="evict"``: a flood
of made-up keys then cannot lock new clients out (see ``ratecell.asgi``).

Standard library only. See the binding's README for every option and the
choices the draft leaves open.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from http import HTTPStatus
from typing import Any

from ._http import (
    MISSING_KEY_BODY,
    NO_CLIENT_ADDR_BODY,
    ClientIp,
    ForwardedHeader,
    NoClientAddrError,
    UNAVAILABLE_BODY,
    LimitDecision,
    MissingKey,
    Multi,
    MissingKeyError,
    Named,
    Refusal,
    RateLimits,
    Settings,
    Tiered,
    hooked_refusal_headers,
    legacy_headers as _legacy_headers,
    outcome,
    problem_body,
    problem_headers,
    refusal_headers,
)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

__all__ = ["RateLimitMiddleware", "Named", "Multi", "Tiered", "LimitDecision", "RateLimits"]

_STATUS = {
    400: "400 Bad Request",
    429: "429 Too Many Requests",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}


def _header(environ: Environ, name: str) -> bytes | None:
    value = environ.get("HTTP_" + name.upper().replace("-", "_"))
    # WSGI strings are latin-1 decoded bytes (PEP 3333).
    return None if value is None else value.encode("latin-1")


def _headers(environ: Environ, name: str) -> list[bytes]:
    # The server joins repeated field lines with ", " (PEP 3333).
    v = _header(environ, name)
    return [] if v is None else [v]


def _client(environ: Environ) -> str | None:
    return environ.get("REMOTE_ADDR") or None


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def _str_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]


class RateLimitMiddleware:
    """Rate-limits every request of the WSGI ``app``; the options are those
    of ``ratecell.asgi.RateLimitMiddleware``, with functions taking the WSGI
    ``environ`` (the default key is ``REMOTE_ADDR``). The limiter's
    ``check`` must be synchronous here."""

    def __init__(
        self,
        app: WSGIApp,
        limiter: Any,
        *,
        key: str | Sequence[Any] | Callable[[Environ], bytes | str | None] | None = None,
        missing_key: MissingKey = "reject",
        cost: Callable[[Environ], int] | None = None,
        dry_run: bool = False,
        exempt: Iterable[str] | Callable[[Environ], bool] | None = None,
        fail_open: bool = False,
        trusted_proxies: Iterable[str] | int | None = None,
        forwarded_header: ForwardedHeader = "x-forwarded-for",
        ipv4_prefix: int = 32,
        ipv6_prefix: int = 64,
        on_refusal: Callable[[Environ, Sequence[LimitDecision]], Refusal] | None = None,
        on_dry_run_refusal: Callable[[Environ, Sequence[LimitDecision]], Any] | None = None,
        methods: Iterable[str] | None = None,
        metrics: Callable[[Sequence[LimitDecision], bool, bool], Any] | None = None,
        on_store_error: Callable[[Environ, Exception], Any] | None = None,
        tier: Callable[[Environ], str | int | None] | None = None,
        enabled: bool = True,
        legacy_headers: bool = False,
    ) -> None:
        self.app = app
        self.settings: Settings[Environ] = Settings(
            limiter, key, missing_key, cost, dry_run, exempt, fail_open, _header, _client,
            _headers, ClientIp(trusted_proxies, forwarded_header, ipv4_prefix, ipv6_prefix),
            on_refusal, on_dry_run_refusal, methods, metrics, on_store_error, tier, enabled,
            legacy_headers,
        )

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        s = self.settings
        if not s.plain and s.is_exempt(
            environ.get("PATH_INFO", ""), environ, environ.get("REQUEST_METHOD", "GET")
        ):
            return self.app(environ, start_response)
        try:
            key = s.request_key(environ)
        except NoClientAddrError:
            start_response(_STATUS[500], _str_headers(problem_headers(NO_CLIENT_ADDR_BODY)))
            return [NO_CLIENT_ADDR_BODY]
        except MissingKeyError:
            start_response(_STATUS[400], _str_headers(problem_headers(MISSING_KEY_BODY)))
            return [MISSING_KEY_BODY]
        if key is None:
            return self.app(environ, start_response)
        extended = s.extended
        try:
            if not extended:
                items = s.limits.check_limits(key, 1 if s.cost is None else s.cost(environ))
            else:
                items = s.check_extended(environ, key)
            if not isinstance(items, (list, tuple)):
                raise TypeError("the WSGI middleware needs a synchronous limiter")
        except Exception as e:
            s.store_failed(environ, e)
            if not s.fail_open:
                start_response(_STATUS[503], _str_headers(problem_headers(UNAVAILABLE_BODY)))
                return [UNAVAILABLE_BODY]
            return self.app(environ, start_response)
        policy, ratelimit = fields = s.fields(items)
        ok, wait = outcome(items)
        if s.metrics is not None:
            s.metrics(items, ok, s.dry_run)
        if not ok:
            if not s.dry_run:
                if s.on_refusal is not None:
                    status, given, body = s.on_refusal(environ, items)
                    headers = hooked_refusal_headers(items, fields, given)
                    if extended and s.legacy:
                        present = {k for k, _ in headers}
                        headers += [h for h in _legacy_headers(items) if h[0] not in present]
                    start_response(_status_line(status), _str_headers(headers))
                    return [body]
                body = problem_body(items)
                headers = refusal_headers(items, fields, body)
                if extended and s.legacy:
                    headers += _legacy_headers(items)
                start_response(_STATUS[429], _str_headers(headers))
                return [body]
            if s.on_dry_run_refusal is not None:
                s.on_dry_run_refusal(environ, items)
        if wait and not s.dry_run:
            # A leaky bucket's place in its queue; WSGI serves each request
            # on its own thread, so sleeping holds only this request.
            time.sleep(wait / 1e9)

        if extended and s.legacy:
            legacy = _str_headers(_legacy_headers(items))

            def start_with_legacy(
                status: str, headers: list[tuple[str, str]], exc_info: Any = None
            ) -> Any:
                return start_response(
                    status,
                    [*headers, ("RateLimit-Policy", policy), ("RateLimit", ratelimit), *legacy],
                    exc_info,
                )

            return self.app(environ, start_with_legacy)

        def start_with_fields(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(
                status, [*headers, ("RateLimit-Policy", policy), ("RateLimit", ratelimit)], exc_info
            )

        return self.app(environ, start_with_fields)

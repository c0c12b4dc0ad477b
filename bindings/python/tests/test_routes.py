"""Per-route limits (ratecell.routes) on real servers on 127.0.0.1: a
Starlette app under uvicorn and a Flask app under wsgiref, driven by
http.client over loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_http import get, uvicorn_server, wsgi_server

from ratecell.routes import RouteLimits, parse_rate, parse_rates

starlette_apps = pytest.importorskip("starlette.applications")
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402


def test_rates_parse_and_bad_ones_are_named() -> None:
    assert parse_rate("5/minute") == (5, 60)
    assert parse_rate("5 per minute") == (5, 60)
    assert parse_rate("100/day") == (100, 86400)
    assert parse_rate("10/5 seconds") == (10, 5)
    assert parse_rate("3/h") == (3, 3600)
    assert parse_rate("1000/month") == (1000, 30 * 86400)
    assert parse_rate("5 per 2 Months") == (5, 60 * 86400)
    assert parse_rate("1/year") == (1, 365 * 86400)
    for bad in ("5", "five/minute", "5/fortnight", "0/minute", "5/0 seconds"):
        with pytest.raises(ValueError, match="rate"):
            parse_rate(bad)


def test_several_rates_in_one_string_parse_in_order() -> None:
    assert parse_rates("3/minute;5/hour") == [("3/minute", 3, 60), ("5/hour", 5, 3600)]
    assert parse_rates("100 per day, 10 per hour") == [
        ("100 per day", 100, 86400), ("10 per hour", 10, 3600)
    ]
    assert parse_rates(" 1/second | 2/2 seconds ") == [("1/second", 1, 1), ("2/2 seconds", 2, 2)]
    assert parse_rates("5/minute") == [("5/minute", 5, 60)]
    for bad in ("3/minute;", ";3/minute", "3/minute;;5/hour", "3/minute;5/fortnight", ""):
        with pytest.raises(ValueError, match="rate"):
            parse_rates(bad)


def test_starlette_views_get_their_own_limits() -> None:
    with RouteLimits() as limits:

        @limits.limit("2/minute")
        async def login(request: Any) -> PlainTextResponse:
            return PlainTextResponse("in")

        @limits.limit("1/minute", name="report", methods=["POST"])
        def report(request: Any) -> PlainTextResponse:  # a sync view, run in a thread
            return PlainTextResponse("report")

        async def free(request: Any) -> PlainTextResponse:
            return PlainTextResponse("free")

        app = starlette_apps.Starlette(
            routes=[Route("/login", login), Route("/report", report, methods=["GET", "POST"]),
                    Route("/free", free)]
        )
        with uvicorn_server(limits.asgi(app)) as port:
            for r in (1, 0):
                status, h, body = get(port, "/login")
                assert (status, body) == (200, b"in")
                assert h["ratelimit-policy"] == '"2/minute";q=2;w=60'
                assert h["ratelimit"].startswith(f'"2/minute";r={r};')
            status, h, body = get(port, "/login")
            assert status == 429 and h["content-type"] == "application/problem+json"
            assert h["retry-after"] == h["ratelimit"].rsplit("t=", 1)[1]
            assert b'"violated-policies":["2/minute"]' in body
            for _ in range(3):  # another route, no limit
                status, h, _ = get(port, "/free")
                assert status == 200 and "ratelimit" not in h
            for _ in range(3):  # GET is not limited on /report
                status, h, _ = get(port, "/report")
                assert status == 200 and "ratelimit" not in h


def test_a_view_outside_the_wrapper_is_an_error() -> None:
    with RouteLimits() as limits:

        @limits.limit("2/minute")
        async def view() -> str:
            return "x"

        with pytest.raises(RuntimeError, match="wrap the application"):
            asyncio.run(view())


def test_flask_views_get_their_own_limits() -> None:
    flask = pytest.importorskip("flask")
    app = flask.Flask(__name__)
    with RouteLimits() as limits:

        @app.post("/login")
        @limits.limit("1/minute")
        def login() -> str:
            return "in"

        @app.get("/other")
        @limits.limit("5/minute", key="X-Api-Key")
        def other() -> str:
            return "other"

        app.wsgi_app = limits.wsgi(app.wsgi_app)  # type: ignore[method-assign]
        with wsgi_server(app) as port:
            import http.client

            def post() -> tuple[int, dict[str, str]]:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
                try:
                    conn.request("POST", "/login", body=b"")
                    res = conn.getresponse()
                    res.read()
                    return res.status, {k.lower(): v for k, v in res.getheaders()}
                finally:
                    conn.close()

            status, h = post()
            assert (status, h["ratelimit-policy"]) == (200, '"1/minute";q=1;w=60')
            assert h["ratelimit"].startswith('"1/minute";r=0;')
            status, h = post()
            assert status == 429 and "retry-after" in h
            # Keyed by header on /other: no key is refused (the default), keys are separate.
            assert get(port, "/other")[0] == 400
            assert get(port, "/other", {"X-Api-Key": "a"})[0] == 200


def test_a_full_table_of_a_route_evicts_rather_than_refusing_new_clients() -> None:
    """More clients than the table holds, one request each: every one is
    admitted with its own full quota (a table that denied would refuse
    the 5th on)."""
    flask = pytest.importorskip("flask")
    app = flask.Flask(__name__)
    with RouteLimits(capacity=4, key="X-Api-Key") as limits:

        @app.get("/")
        @limits.limit("2/hour")
        def index() -> str:
            return "in"

        app.wsgi_app = limits.wsgi(app.wsgi_app)  # type: ignore[method-assign]
        with wsgi_server(app) as port:
            for i in range(12):
                status, h, _ = get(port, "/", {"X-Api-Key": f"client-{i}"})
                assert status == 200, (i, status, h)
                assert h["ratelimit"].startswith('"2/hour";r=1;'), (i, h)


def test_several_rates_on_a_starlette_view_are_decided_all_or_nothing() -> None:
    with RouteLimits() as limits:

        @limits.limit("2/minute;3/hour")
        async def login(request: Any) -> PlainTextResponse:
            return PlainTextResponse("in")

        app = starlette_apps.Starlette(routes=[Route("/login", login)])
        with uvicorn_server(limits.asgi(app)) as port:
            for r in (1, 0):
                status, h, _ = get(port, "/login")
                assert status == 200
                assert h["ratelimit-policy"] == '"2/minute";q=2;w=60, "3/hour";q=3;w=3600'
                minute, hour = h["ratelimit"].split(", ")
                assert minute.startswith(f'"2/minute";r={r};'), h
                assert hour.startswith(f'"3/hour";r={r + 1};'), h
            for _ in range(2):
                status, h, body = get(port, "/login")
                assert status == 429
                assert b'"violated-policies":["2/minute"]' in body
                # The hour's limit spent nothing on the refusals.
                assert '"3/hour";r=1;' in h["ratelimit"], h


def test_several_rates_on_a_flask_view_with_words_and_commas() -> None:
    flask = pytest.importorskip("flask")
    app = flask.Flask(__name__)
    with RouteLimits() as limits:

        @app.get("/")
        @limits.limit("100 per day, 2 per hour")
        def index() -> str:
            return "in"

        with pytest.raises(ValueError, match="name"):
            limits.limit("1/minute;2/hour", name="both")

        app.wsgi_app = limits.wsgi(app.wsgi_app)  # type: ignore[method-assign]
        with wsgi_server(app) as port:
            for r in (1, 0):
                status, h, _ = get(port, "/")
                assert status == 200
                assert h["ratelimit-policy"] == '"100 per day";q=100;w=86400, "2 per hour";q=2;w=3600'
                assert f'"2 per hour";r={r};' in h["ratelimit"], h
            status, h, body = get(port, "/")
            assert status == 429 and b'"violated-policies":["2 per hour"]' in body
            assert '"100 per day";r=98;' in h["ratelimit"], h


def test_default_application_wide_exempt_and_computed_limits_on_starlette() -> None:
    """Default limits on views without their own, an application-wide
    limit for every client together, an exempt view, a limit skipped by
    exempt_when, and a limit computed per request from the user's plan."""
    with RouteLimits(
        key="X-User", default_limits="2/hour", application_limits="11/hour", legacy_headers=True
    ) as limits:

        async def index(request: Any) -> PlainTextResponse:
            return PlainTextResponse("index")

        @limits.limit("1/hour")
        async def login(request: Any) -> PlainTextResponse:
            return PlainTextResponse("in")

        @limits.exempt
        async def health(request: Any) -> PlainTextResponse:
            return PlainTextResponse("ok")

        def plan(scope: Any) -> str:
            return "3/hour" if dict(scope["headers"]).get(b"x-plan") == b"pro" else "1/hour"

        @limits.limit(plan, key="X-User")
        async def search(request: Any) -> PlainTextResponse:
            return PlainTextResponse("found")

        app = starlette_apps.Starlette(routes=[
            Route("/", index), Route("/login", login), Route("/health", health),
            Route("/search", search),
        ])
        with uvicorn_server(limits.asgi(app)) as port:
            def ask(path: str, user: str, **extra: str) -> tuple[int, dict[str, str], bytes]:
                return get(port, path, {"X-User": user, **extra})

            # The default applies to / (no limit of its own), per user.
            for r in (1, 0):
                status, h, _ = ask("/", "a")
                assert status == 200 and h["ratelimit"].split(", ")[0].startswith(
                    f'"2/hour";r={r};'
                ), h
                assert h["x-ratelimit-remaining"] == str(r), h
            status, h, body = ask("/", "a")
            assert status == 429 and b'["2/hour"]' in body and h["retry-after"], h
            # /login has its own limit instead of the default.
            assert ask("/login", "a")[0] == 200
            status, _, body = ask("/login", "a")
            assert status == 429 and b'["1/hour"]' in body
            # Exempt: neither limit, however often.
            for _ in range(12):
                status, h, _ = ask("/health", "a")
                assert status == 200 and "ratelimit" not in h
            # Computed per request: the plan's rate.
            assert [ask("/search", "p", **{"X-Plan": "pro"})[0] for _ in range(4)] == [
                200, 200, 200, 429
            ]
            assert [ask("/search", "f")[0] for _ in range(2)] == [200, 429]
            # Application-wide: 11 for all users together, the wrapper
            # checking it first (so the 3 + 2 + 4 + 2 requests above, the
            # views' refusals too, spent it; /health none).
            status, _, body = ask("/", "z")
            assert status == 429 and b'["11/hour"]' in body, body


def test_default_limits_exempt_when_and_the_off_switch_on_flask() -> None:
    flask = pytest.importorskip("flask")
    app = flask.Flask(__name__)
    with RouteLimits(key="X-User", default_limits="1/hour") as limits:

        @app.get("/")
        def index() -> str:
            return "index"

        @app.get("/report")
        @limits.limit("1/hour", exempt_when=lambda environ: environ.get("HTTP_X_ADMIN") == "1")
        def report() -> str:
            return "report"

        @app.get("/health")
        @limits.exempt
        def health() -> str:
            return "ok"

        app.wsgi_app = limits.wsgi(app.wsgi_app)  # type: ignore[method-assign]
        with wsgi_server(app) as port:
            assert [get(port, "/", {"X-User": "a"})[0] for _ in range(2)] == [200, 429]
            assert [get(port, "/report", {"X-User": "a"})[0] for _ in range(2)] == [200, 429]
            # exempt_when: an admin is not limited on /report.
            for _ in range(3):
                status, h, _ = get(port, "/report", {"X-User": "a", "X-Admin": "1"})
                assert status == 200 and "ratelimit" not in h
            assert [get(port, "/health", {"X-User": "a"})[0] for _ in range(3)] == [200] * 3
            # A path no view serves: the default applies (then Flask's 404).
            assert [get(port, "/nowhere", {"X-User": "b"})[0] for _ in range(2)] == [404, 429]
    off = flask.Flask(__name__)
    with RouteLimits(key="X-User", default_limits="1/hour", enabled=False) as limits:

        @off.get("/")
        @limits.limit("1/hour")
        def limited() -> str:
            return "in"

        off.wsgi_app = limits.wsgi(off.wsgi_app)  # type: ignore[method-assign]
        with wsgi_server(off) as port:
            for _ in range(3):
                status, h, _ = get(port, "/", {"X-User": "a"})
                assert status == 200 and "ratelimit" not in h


def test_a_failing_route_limiter_is_a_store_failure_hooked_and_answered() -> None:
    flask = pytest.importorskip("flask")

    class Broken:
        def check_limits(self, key: bytes, cost: int) -> list[Any]:
            raise ConnectionError("store down")

    seen: list[str] = []
    for fail_open, want in ((False, 503), (True, 200)):
        app = flask.Flask(__name__)
        with RouteLimits(
            fail_open=fail_open, on_store_error=lambda request, exc: seen.append(str(exc))
        ) as limits:

            @app.get("/")
            @limits.limit(Broken())
            def index() -> str:
                return "in"

            app.wsgi_app = limits.wsgi(app.wsgi_app)  # type: ignore[method-assign]
            with wsgi_server(app) as port:
                status, h, _ = get(port, "/")
                assert status == want and "ratelimit" not in h, (status, h)
    assert seen == ["store down", "store down"]

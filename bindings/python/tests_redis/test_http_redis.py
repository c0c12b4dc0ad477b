"""The HTTP middlewares with the Redis module as the store: uvicorn (with an
asyncio Redis client) and wsgiref (with a blocking one), driven by
http.client over loopback, against the server scripts/redis-tests.sh
starts (RATECELL_REDIS_URL; these tests fail, not skip, without it). The
limits decide at explicit times (``AT``), so every field follows from
SPEC.md.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
import redis
import redis.asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from ratecell import asgi, wsgi
from ratecell._http import QUOTA_EXCEEDED_TYPE
from ratecell.redis import RedisLimiter, RedisLimits

S = 1_000_000_000
# 1_700_000_000 s is 800 s into its
# hour, so at T0 a 1 s window has 0.5 s left and an hour 2797.5 s.
T0 = 1_700_000_000 * S + 2_500_000_000


def _url() -> str:
    url = os.environ.get("RATECELL_REDIS_URL")
    assert url, "set RATECELL_REDIS_URL (scripts/redis-tests.sh does)"
    return url


@pytest.fixture(autouse=True)
def _flush() -> None:
    redis.Redis.from_url(_url()).flushall()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def _starlette() -> Any:
    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello)])


def _wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


@contextmanager
def uvicorn_server(app: Any) -> Iterator[int]:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            time.sleep(0.01)
        else:
            raise RuntimeError("uvicorn did not start within 5 s")
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class _Threading(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


@contextmanager
def wsgi_server(app: Any) -> Iterator[int]:
    server = make_server("127.0.0.1", 0, app, server_class=_Threading, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def get(port: int, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("GET", "/", headers=headers or {})
        res = conn.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
    finally:
        conn.close()


def asgi_app(limits_of: Any, **kw: Any) -> Any:
    client = redis.asyncio.Redis.from_url(_url())
    return asgi.RateLimitMiddleware(_starlette(), limits_of(client), **kw)


def wsgi_app(limits_of: Any, **kw: Any) -> Any:
    return wsgi.RateLimitMiddleware(_wsgi_app, limits_of(redis.Redis.from_url(_url())), **kw)


KINDS = pytest.mark.parametrize(
    "kind", [(asgi_app, uvicorn_server), (wsgi_app, wsgi_server)], ids=["asgi", "wsgi"]
)


@KINDS
def test_two_named_limits_in_redis_all_or_nothing(kind: Any) -> None:
    make, server = kind
    clock = Clock()

    def limits(client: Any) -> RedisLimits:
        return RedisLimits(
            client,
            {
                "burst": RedisLimiter(client, "fixed_window", 3, period=1, prefix="rl:"),
                "daily": RedisLimiter(client, "fixed_window", 5, period=3600, prefix="rl:"),
            },
            now_ns=clock,
        )

    policy = '"burst";q=3;w=1, "daily";q=5;w=3600'
    with server(make(limits, key="X-Api-Key")) as port:
        key = {"X-Api-Key": "alice"}
        for burst, daily in [(2, 4), (1, 3), (0, 2)]:
            status, h, _ = get(port, key)
            assert status == 200
            assert h["ratelimit-policy"] == policy
            assert h["ratelimit"] == f'"burst";r={burst};t=1, "daily";r={daily};t=2798'
        status, h, body = get(port, key)
        assert status == 429
        assert h["retry-after"] == "1"
        assert h["ratelimit"] == '"burst";r=0;t=1, "daily";r=2;t=2798'
        assert json.loads(body) == {
            "type": QUOTA_EXCEEDED_TYPE,
            "title": "Quota exceeded",
            "status": 429,
            "violated-policies": ["burst"],
        }
        clock.now += 500_000_000
        for burst, daily in [(2, 1), (1, 0)]:
            status, h, _ = get(port, key)
            assert (status, h["ratelimit"]) == (
                200,
                f'"burst";r={burst};t=1, "daily";r={daily};t=2797',
            )
        status, h, body = get(port, key)
        assert status == 429
        assert h["retry-after"] == "2797"
        assert h["ratelimit"] == '"burst";r=1;t=1, "daily";r=0;t=2797'
        assert json.loads(body)["violated-policies"] == ["daily"]
        # Another key has its own limits.
        assert get(port, {"X-Api-Key": "bob"})[0] == 200
    # The state is in Redis, one key per limit, in one hash-tag slot.
    keys = sorted(redis.Redis.from_url(_url()).keys("rl:*"))
    assert keys == [b"rl:{alice}:burst", b"rl:{alice}:daily", b"rl:{bob}:burst",
                    b"rl:{bob}:daily"]


@KINDS
def test_one_limit_in_redis_on_the_server_clock(kind: Any) -> None:
    make, server = kind

    def limits(client: Any) -> RedisLimits:
        return RedisLimits(client, [("", RedisLimiter(client, "gcra", 2, period=60))])

    with server(make(limits)) as port:
        status, h, _ = get(port)
        assert (status, h["ratelimit-policy"]) == (200, '"default";q=2;w=60')
        assert h["ratelimit"] == '"default";r=1;t=30'
        assert get(port)[0] == 200
        status, h, _ = get(port)
        assert status == 429 and 1 <= int(h["retry-after"]) <= 30
    # One limit is RATECELL.CHECK on the limiter's own key (the client's address).
    assert redis.Redis.from_url(_url()).exists("127.0.0.1") == 1


@KINDS
def test_a_bad_limit_fails_closed(kind: Any) -> None:
    make, server = kind

    def limits(client: Any) -> RedisLimits:
        return RedisLimits(client, {"x": RedisLimiter(client, "gcra", 0, period=1)})

    with server(make(limits)) as port:
        status, h, body = get(port)
    assert status == 503 and h["content-type"] == "application/problem+json"
    assert b"rate limiter failed" in body


def test_redis_limits_arguments_are_checked() -> None:
    client = redis.Redis.from_url(_url())
    a = RedisLimiter(client, "gcra", 1, period=1)
    with pytest.raises(ValueError, match="limit 1 has no name"):
        RedisLimits(client, [("a", a), ("", a)])
    with pytest.raises(ValueError, match="must differ"):
        RedisLimits(client, [("a", a), ("a", a)])
    with pytest.raises(TypeError, match="limit 0: a RedisLimiter"):
        RedisLimits(client, [("a", object())])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="at least one"):
        RedisLimits(client, {})


@contextmanager
def pausable_server() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A redis-server of its own on a free 127.0.0.1 port, with the module
    (RATECELL_REDIS_MODULE, which scripts/redis-tests.sh sets), to pause
    with SIGSTOP; always continued and killed at the end."""
    module = os.environ.get("RATECELL_REDIS_MODULE")
    assert module, "set RATECELL_REDIS_MODULE (scripts/redis-tests.sh does)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--dir", d, "--loadmodule", module],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            probe = redis.Redis(port=port, socket_timeout=1)
            for _ in range(100):
                try:
                    if probe.ping():
                        break
                except redis.ConnectionError:
                    time.sleep(0.05)
            else:
                raise RuntimeError("redis-server did not start within 5 s")
            probe.close()
            yield port, proc
        finally:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=10)


@KINDS
def test_a_paused_store_is_answered_within_the_timeout(kind: Any) -> None:
    make, server = kind
    with pausable_server() as (port, proc):

        def limits_of(client: Any) -> RedisLimits:
            return RedisLimits(client, {"": RedisLimiter(client, "gcra", 100, period=1)})

        url = f"redis://127.0.0.1:{port}/0"
        if make is asgi_app:
            closed = asgi.RateLimitMiddleware(
                _starlette(), limits_of(redis.asyncio.Redis.from_url(url))
            )
            opened = asgi.RateLimitMiddleware(
                _starlette(), limits_of(redis.asyncio.Redis.from_url(url)), fail_open=True
            )
        else:
            closed = wsgi.RateLimitMiddleware(_wsgi_app, limits_of(redis.Redis.from_url(url)))
            opened = wsgi.RateLimitMiddleware(
                _wsgi_app, limits_of(redis.Redis.from_url(url)), fail_open=True
            )
        with server(closed) as closed_port, server(opened) as open_port:
            # Both connect and answer while the server runs.
            for p in (closed_port, open_port):
                status, h, _ = get(p)
                assert status == 200 and "ratelimit" in h
            proc.send_signal(signal.SIGSTOP)
            for p, want in ((closed_port, 503), (open_port, 200)):
                start = time.monotonic()
                status, h, _ = get(p)
                took = time.monotonic() - start
                assert (status, "ratelimit" in h) == (want, False)
                assert 0.25 <= took < 2, took
            proc.send_signal(signal.SIGCONT)


def test_redis_limits_timeout_is_checked() -> None:
    client = redis.Redis.from_url(_url())
    lim = RedisLimiter(client, "gcra", 1, period=1)
    for bad in (0, -1, "1", True):
        with pytest.raises(ValueError, match="timeout"):
            RedisLimits(client, {"": lim}, timeout=bad)  # type: ignore[arg-type]
    RedisLimits(client, {"": lim}, timeout=None)

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
            # Each waits out the store's 250 ms (the least it can take),
            # and is ended by it: the Redis clients have no timeout of
            # their own, so a missed one would run into get's 20 s. Half of
            # that bounds what the store controls, not the scheduler.
            for p, want in ((closed_port, 503), (open_port, 200)):
                start = time.monotonic()
                status, h, _ = get(p)
                took = time.monotonic() - start
                assert (status, "ratelimit" in h) == (want, False)
                assert 0.25 <= took < 10, took
            proc.send_signal(signal.SIGCONT)


class _Recorded(redis.Connection):
    """A connection that records what each of its waits may last: a
    connect attempt (its connect timeout), a wait for a reply (the timeout
    given, or the socket's), and each command sent (a handshake's too)."""

    log: list[tuple[str, float | None]] = []

    def _connect(self) -> Any:
        self.log.append(("connect", self.socket_connect_timeout))
        return super()._connect()

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        self.log.append(("send", None))
        super().send_command(*args, **kwargs)

    def can_read(self, timeout: float = 0) -> bool:
        self.log.append(("reply", timeout))
        return super().can_read(timeout)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        # A reply already known to be there (can_read) waits on nothing.
        self.log.append(("read", self.socket_timeout))
        return super().read_response(*args, **kwargs)


def _waits(log: list[tuple[str, float | None]]) -> tuple[int, int, list[float | None]]:
    """Connect attempts, commands sent and the bound of every wait."""
    connects = sum(op == "connect" for op, _ in log)
    sends = sum(op == "send" for op, _ in log)
    return connects, sends, [t for op, t in log if op in ("connect", "reply", "read")]


@pytest.mark.parametrize("server", [wsgi_server, uvicorn_server], ids=["wsgi", "asgi"])
def test_every_request_to_a_stalled_store_waits_at_most_its_timeout(server: Any) -> None:
    """A plain ``redis.Redis`` with redis-py's defaults (no socket
    timeouts, retries on), as a Flask user writes it: while the server is
    paused, every request, not only the first, makes at most one connect
    attempt and sends one command, and each of its waits is bounded by
    the store's timeout; a killed server costs one connect attempt."""
    timeout = 0.25
    with pausable_server() as (port, proc):
        client = redis.Redis.from_url(f"redis://127.0.0.1:{port}/0", connection_class=_Recorded)
        store = RedisLimits(
            client, {"": RedisLimiter(client, "gcra", 100, period=1)}, timeout=timeout
        )
        if server is wsgi_server:
            app: Any = wsgi.RateLimitMiddleware(_wsgi_app, store)
        else:
            # A sync client under ASGI, as the docs allow for FastAPI.
            app = asgi.RateLimitMiddleware(_starlette(), store)
        log = _Recorded.log
        try:
            with server(app) as http_port:
                assert get(http_port)[0] == 200
                proc.send_signal(signal.SIGSTOP)
                for i in range(4):
                    log.clear()
                    start = time.monotonic()
                    status, h, _ = get(http_port)
                    took = time.monotonic() - start
                    connects, sends, bounds = _waits(log)
                    assert (status, "ratelimit" in h) == (503, False), i
                    # The first request's connection is dropped with its
                    # late reply; each later one opens a new connection.
                    assert connects == (0 if i == 0 else 1), (i, log)
                    assert sends == 1, (i, log)  # no handshake, no retry
                    # Every wait bounded by the timeout (the pool's poll
                    # for stale data waits 0), and at most a connect and a
                    # reply's worth of them.
                    assert all(b is not None and b <= timeout for b in bounds), (i, log)
                    assert sum(b or 0 for b in bounds) <= (connects + 1) * timeout, (i, log)
                    # It did wait for the reply (a lower bound only).
                    assert took >= timeout, (i, took)
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=10)
                for i in range(3):
                    log.clear()
                    status, _, _ = get(http_port)
                    connects, sends, bounds = _waits(log)
                    assert status == 503, i
                    assert connects == 1, (i, log)  # refused once, not retried
                    assert all(b is not None and b <= timeout for b in bounds), (i, log)
        finally:
            store.close()
            log.clear()


def test_redis_limits_timeout_is_checked() -> None:
    client = redis.Redis.from_url(_url())
    lim = RedisLimiter(client, "gcra", 1, period=1)
    for bad in (0, -1, "1", True):
        with pytest.raises(ValueError, match="timeout"):
            RedisLimits(client, {"": lim}, timeout=bad)  # type: ignore[arg-type]
    RedisLimits(client, {"": lim}, timeout=None)


def _calls(command: str) -> int:
    """How many times the server ran ``command`` (INFO commandstats)."""
    stats: dict[str, Any] = redis.Redis.from_url(_url()).info("commandstats")
    entry = stats.get("cmdstat_" + command, {})
    return int(entry.get("calls", 0)) if isinstance(entry, dict) else 0


def asgi_app_blocking(limits_of: Any, **kw: Any) -> Any:
    """ASGI with a blocking client, which the cached_deny and leased
    stores take (their checks that ask Redis run in the loop's executor)."""
    return asgi.RateLimitMiddleware(_starlette(), limits_of(redis.Redis.from_url(_url())), **kw)


MODE_KINDS = pytest.mark.parametrize(
    "kind", [(asgi_app_blocking, uvicorn_server), (wsgi_app, wsgi_server)], ids=["asgi", "wsgi"]
)


def _assert_refused(status: int, h: dict[str, str], body: bytes, limit: int, retry: int) -> None:
    """A refusal of the limit "api" with every field of the middleware's
    429: ``t`` and Retry-After both ``retry`` seconds."""
    assert status == 429, body
    assert h["ratelimit-policy"] == f'"api";q={limit};w=3600'
    assert h["ratelimit"] == f'"api";r=0;t={retry}'
    assert h["retry-after"] == str(retry)
    assert h["content-type"] == "application/problem+json"
    assert json.loads(body)["violated-policies"] == ["api"]


@MODE_KINDS
@pytest.mark.parametrize("mode", ["strict", "cached_deny", "leased"])
def test_each_mode_refuses_over_the_limit_with_the_same_fields(kind: Any, mode: Any) -> None:
    make, server = kind
    limit = 40
    stores: list[RedisLimits] = []

    def limits(client: Any) -> RedisLimits:
        # The limit's settings are the limiter's; the store makes its own
        # limiter of the mode from them.
        given = RedisLimiter(client, "fixed_window", limit, period=3600, prefix=f"{mode}:",
                             send_at=True, skew=0)
        stores.append(RedisLimits(client, {"api": given}, now_ns=Clock(), mode=mode))
        return stores[0]

    checks, leases = _calls("ratecell.check"), _calls("ratecell.lease")
    with server(make(limits, key="X-Api-Key")) as port:
        store = stores[0]
        key = {"X-Api-Key": "alice"}
        admitted = refused_in_a_row = requests = 0
        # Until ten refusals in a row: a leased node's last grant may still
        # be on its way when the first refusal comes.
        while refused_in_a_row < 10:
            assert requests < 2 * limit, "no end to admissions"
            requests += 1
            status, h, body = get(port, key)
            if status != 200:
                refused_in_a_row += 1
                _assert_refused(status, h, body, limit, 2798)
                continue
            admitted += 1
            refused_in_a_row = 0
            if mode != "leased":
                # Redis's own count and reset; a leased admission reports
                # the units this node holds, and no reset.
                assert h["ratelimit"] == f'"api";r={limit - admitted};t=2798'
        if mode == "leased":
            assert store.limiter is not None
            # Every grant answered: none can add units now.
            deadline = time.monotonic() + 10
            while True:
                s = store.limiter.stats().lease
                assert s is not None
                if s.fetches + s.refills == s.replies + s.failures:
                    break
                assert time.monotonic() < deadline, s
                time.sleep(0.01)
            while get(port, key)[0] == 200:
                admitted += 1
        store.close()
    assert admitted == limit
    checks, leases = _calls("ratecell.check") - checks, _calls("ratecell.lease") - leases
    if mode == "strict":
        assert (checks, leases) == (requests, 0)
    elif mode == "cached_deny":
        # One command saw the first refusal; the others were remembered.
        assert (checks, leases) == (limit + 1, 0)
    else:
        # Grants of at most a tenth of the limit (the default largest), far
        # fewer than the admissions, and no checks.
        assert checks == 0 and limit // (limit // 10) <= leases <= limit // 2, leases


@MODE_KINDS
def test_cached_deny_sends_no_command_while_a_denial_is_remembered(kind: Any) -> None:
    make, server = kind
    clock = Clock()

    def limits(client: Any) -> RedisLimits:
        given = RedisLimiter(client, "fixed_window", 3, period=3600, prefix="cd:")
        return RedisLimits(client, {"api": given}, now_ns=clock, mode="cached_deny")

    with server(make(limits, key="X-Api-Key")) as port:
        bob = {"X-Api-Key": "bob"}
        for _ in range(3):
            assert get(port, bob)[0] == 200
        _assert_refused(*get(port, bob), 3, 2798)
        before = _calls("ratecell.check")
        clock.now += 1000 * S
        for _ in range(50):
            # The remembered refusal, counted down on the clock.
            _assert_refused(*get(port, bob), 3, 1798)
        assert _calls("ratecell.check") == before, "a command while the denial was remembered"
        # Another key asks Redis; at the window's end "bob" asks again.
        assert get(port, {"X-Api-Key": "carol"})[0] == 200
        clock.now += 1798 * S
        status, h, _ = get(port, bob)
        assert (status, h["ratelimit"]) == (200, '"api";r=2;t=3600')
        assert _calls("ratecell.check") == before + 2


def test_redis_limits_mode_is_checked() -> None:
    client = redis.Redis.from_url(_url())
    strict = RedisLimiter(client, "fixed_window", 5, period=1)
    with pytest.raises(ValueError, match="mode must be one of"):
        RedisLimits(client, {"a": strict}, mode="lease")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="takes one limit, not 2"):
        RedisLimits(client, {"a": strict, "b": strict}, mode="leased")
    with RedisLimiter(client, "fixed_window", 5, period=1, mode="leased") as leased:
        with pytest.raises(ValueError, match=r"limit 0 \('a'\): a 'leased' RedisLimiter"):
            RedisLimits(client, {"a": leased})
        with pytest.raises(ValueError, match="give RedisLimits mode='leased'"):
            RedisLimits(client, {"a": leased}, mode="cached_deny")
        RedisLimits(client, {"a": leased}, mode="leased").close()
    with pytest.raises(TypeError, match="needs a redis.Redis"):
        RedisLimits(redis.asyncio.Redis.from_url(_url()), {"a": strict}, mode="cached_deny")
    # A strict store decides with its own commands: no limiter of a mode.
    assert RedisLimits(client, {"a": strict}).limiter is None

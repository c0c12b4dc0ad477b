"""The ASGI and WSGI middlewares behind real servers on 127.0.0.1 (uvicorn
with Starlette, wsgiref), driven by http.client over loopback. Limiters
decide on an explicit clock, so every expected field follows from SPEC.md.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

import ratecell
from ratecell import asgi, wsgi
from ratecell._http import (
    QUOTA_EXCEEDED_TYPE,
    LimitDecision,
    Multi,
    Named,
    legacy_values,
    policy_field,
    problem_body,
    quota_window,
    ratelimit_field,
    retry_after_seconds,
)

uvicorn = pytest.importorskip("uvicorn")
starlette_apps = pytest.importorskip("starlette.applications")
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

S = 1_000_000_000
# A multiple of 10 s plus 2.5 s: a 10 s fixed window has 7.5 s left.
T0 = 1_700_000_000 * S + 2_500_000_000


class Clocked:
    """A limiter on an explicit clock, with the shape the middleware takes
    (``check`` and ``config``), as a Redis-backed limiter would have."""

    def __init__(self, limiter: ratecell.Limiter) -> None:
        self.limiter = limiter
        self.now = T0

    def check(self, key: Any, cost: int) -> ratecell.Decision:
        return self.limiter.check(key, cost, at=self.now)

    @property
    def config(self) -> ratecell.Config:
        return self.limiter.config


@pytest.fixture
def clocked() -> Iterator[Callable[..., Clocked]]:
    made: list[ratecell.Limiter] = []

    def _make(algorithm: str, limit: int, period: float) -> Clocked:
        lim = ratecell.Limiter(algorithm, limit, period=period, capacity=1024)
        made.append(lim)
        return Clocked(lim)

    yield _make
    for lim in made:
        lim.close()


def d(allowed: bool, remaining: int = 0, retry: int = 0, reset: int = 0) -> ratecell.Decision:
    return ratecell.Decision(allowed, 0, remaining, retry, reset, 0)


def test_fields_for_two_named_limits() -> None:
    items = [
        LimitDecision("burst", 10, 1_500_000_000, d(False, 0, 2 * S + 1, 14 * S)),
        LimitDecision("daily", 1000, 86_400 * S, d(True, 950, 0, 3600 * S)),
    ]
    assert policy_field(items) == '"burst";q=13;w=2, "daily";q=1000;w=86400'
    # t of the refusing limit is its wait (Retry-After), not when it is whole.
    assert ratelimit_field(items) == '"burst";r=0;t=3, "daily";r=950;t=3600'
    assert retry_after_seconds(items) == 3
    assert json.loads(problem_body(items)) == {
        "type": QUOTA_EXCEEDED_TYPE,
        "title": "Quota exceeded",
        "status": 429,
        "violated-policies": ["burst"],
    }
    items[1] = LimitDecision("daily", 1000, 86_400 * S, d(False, 0, 5 * S, 5 * S))
    assert retry_after_seconds(items) == 5
    assert json.loads(problem_body(items))["violated-policies"] == ["burst", "daily"]
    never = [LimitDecision("x", 1, 1000, d(False, 0, 2**64 - 1, 1))]
    assert retry_after_seconds(never) is None
    assert policy_field(never) == '"x";q=1000000;w=1'
    assert policy_field([LimitDecision('a"b\\c', 1, S, d(True))]) == '"a\\"b\\\\c";q=1;w=1'
    assert ratelimit_field([LimitDecision("big", 1, S, d(True, 10**20, 0, 0))]) == (
        '"big";r=999999999999999;t=0'
    )


def test_sub_second_periods_scale_q_to_the_window() -> None:
    assert policy_field([LimitDecision("x", 10, S // 2, d(True))]) == '"x";q=20;w=1'
    assert quota_window(10, 1_500_000_000) == (13, 2)
    assert quota_window(10, 60 * S) == (10, 60)
    assert quota_window(3, 333_333_333) == (9, 1)


def test_full_table_refusal_carries_its_wait_not_t0() -> None:
    # What a keyed table answers a new key it has no room for.
    items = [LimitDecision("k", 10, S, d(False, 0, 4 * S, 0))]
    assert ratelimit_field(items) == '"k";r=0;t=4'
    assert retry_after_seconds(items) == 4
    two = [*items, LimitDecision("j", 5, S, d(False, 0, 4 * S, 0))]
    assert ratelimit_field(two) == '"k";r=0;t=4, "j";r=0;t=4'


def test_bad_arguments_name_the_field(clocked: Callable[..., Clocked]) -> None:
    c = clocked("fixed_window", 1, 10)
    with pytest.raises(ValueError, match="policy name"):
        Named(c, "caf\u00e9")
    with pytest.raises(ValueError, match="missing_key"):
        asgi.RateLimitMiddleware(_starlette(), c, missing_key="deny")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limit= and period="):
        Named(object())  # type: ignore[type-var]
    with pytest.raises(TypeError, match="limiter must have"):
        wsgi.RateLimitMiddleware(_wsgi_app, object())
    with pytest.raises(TypeError, match="exempt"):
        wsgi.RateLimitMiddleware(_wsgi_app, c, exempt="/health")


# -- servers ------------------------------------------------------------------


def _starlette() -> Any:
    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("hello")

    async def health(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return starlette_apps.Starlette(routes=[Route("/", hello), Route("/health", health)])


def _wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    body = b"ok" if environ["PATH_INFO"] == "/health" else b"hello"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


@contextmanager
def uvicorn_server(app: Any) -> Iterator[int]:
    # proxy_headers off: uvicorn would otherwise take X-Forwarded-For from a
    # 127.0.0.1 peer itself, and the middleware's own reading is under test.
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", proxy_headers=False
    )
    server = uvicorn.Server(config)
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


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


@contextmanager
def wsgi_server(app: Any) -> Iterator[int]:
    server = make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer,
                         handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def get(port: int, path: str = "/", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("GET", path, headers=headers or {})
        res = conn.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
    finally:
        conn.close()


ASGI = ("asgi", lambda app, lim, **kw: asgi.RateLimitMiddleware(_starlette(), lim, **kw), uvicorn_server)
WSGI = ("wsgi", lambda app, lim, **kw: wsgi.RateLimitMiddleware(_wsgi_app, lim, **kw), wsgi_server)
BOTH = pytest.mark.parametrize("kind", [ASGI, WSGI], ids=["asgi", "wsgi"])


@contextmanager
def serve(kind: Any, limiter: Any, **kw: Any) -> Iterator[int]:
    _, wrap, server = kind
    with server(wrap(None, limiter, **kw)) as port:
        yield port


# -- behaviour ------------------------------------------------------------------


@BOTH
def test_fields_exact_and_429_exactly_when_the_window_is_full(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 3, 10)
    with serve(kind, Named(c, "api")) as port:
        for remaining in (2, 1, 0):
            status, h, body = get(port)
            assert (status, body) == (200, b"hello")
            assert h["ratelimit-policy"] == '"api";q=3;w=10'
            assert h["ratelimit"] == f'"api";r={remaining};t=8'
            assert "retry-after" not in h
        status, h, body = get(port)
        assert status == 429
        assert h["retry-after"] == "8"  # 7.5 s rounded up
        assert h["ratelimit"] == '"api";r=0;t=8'
        assert h["ratelimit-policy"] == '"api";q=3;w=10'
        assert h["content-type"] == "application/problem+json"
        problem = json.loads(body)
        assert problem["type"] == QUOTA_EXCEEDED_TYPE
        assert problem["violated-policies"] == ["api"]
        c.now += 7_500_000_000 - 1
        status, h, _ = get(port)
        assert (status, h["retry-after"]) == (429, "1")
        c.now += 1
        status, h, _ = get(port)
        assert (status, h["ratelimit"]) == (200, '"api";r=2;t=10')
    stats = c.limiter.stats()
    assert (stats.allowed, stats.denied) == (4, 2)


@BOTH
def test_a_refusal_has_t_equal_to_retry_after(kind: Any, clocked: Any) -> None:
    # GCRA, 2 per 10 s: after two requests the next passes in 5 s, while the
    # quota is whole again only in 10 s. t says the first, as Retry-After.
    c = clocked("gcra", 2, 10)
    with serve(kind, c) as port:
        for _ in range(2):
            assert get(port)[0] == 200
        status, h, _ = get(port)
        assert (status, h["retry-after"], h["ratelimit"]) == (429, "5", '"default";r=0;t=5')


@BOTH
def test_a_full_key_table_refusal_carries_the_same_wait_as_retry_after(kind: Any) -> None:
    # A tiny table that fails closed (overflow deny): some new key finds no
    # place; its refusal carries the table's wait in t and Retry-After.
    lim = ratecell.Limiter("fixed_window", 5, period=10, capacity=1, overflow="deny")
    with lim, serve(kind, lim, key="x-api-key") as port:
        for i in range(10_000):
            status, h, _ = get(port, headers={"x-api-key": f"k{i}"})
            if status == 429:
                break
        else:
            pytest.fail("the table never ran out of room")
        t = h["ratelimit"].rsplit("t=", 1)[1]
        assert int(h["retry-after"]) >= 1
        assert t == h["retry-after"], h


@BOTH
def test_dry_run_never_refuses(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 2, 10)
    with serve(kind, c, dry_run=True) as port:
        seen = []
        for _ in range(6):
            status, h, _ = get(port)
            assert status == 200 and "retry-after" not in h
            seen.append(h["ratelimit"])
    assert seen == ['"default";r=1;t=8'] + ['"default";r=0;t=8'] * 5
    stats = c.limiter.stats()
    assert (stats.checks, stats.allowed, stats.denied) == (6, 2, 4)


@BOTH
def test_concurrent_clients_on_one_key_get_exactly_the_limit(kind: Any, clocked: Any) -> None:
    c = clocked("sliding_window", 20, 3600)
    with serve(kind, c, key="X-Api-Key") as port, ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(lambda _: get(port, "/", {"X-Api-Key": "shared"})[0], range(60)))
    assert (statuses.count(200), statuses.count(429)) == (20, 40)


@BOTH
def test_header_keys_and_missing_key_policies(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 1, 10)
    with serve(kind, c, key="X-Api-Key", missing_key="shared") as port:
        assert get(port, "/", {"X-Api-Key": "a"})[0] == 200
        assert get(port, "/", {"X-Api-Key": "a"})[0] == 429
        assert get(port, "/", {"X-Api-Key": "b"})[0] == 200
        assert get(port)[0] == 200  # keyless requests share one quota
        assert get(port)[0] == 429
    c2 = clocked("fixed_window", 1, 10)
    with serve(kind, c2, key="X-Api-Key") as port:  # "reject" is the default
        status, h, body = get(port)
        assert status == 400 and h["content-type"] == "application/problem+json"
        assert b"no rate-limit key" in body
    with serve(kind, c2, key=lambda r: None, missing_key="skip") as port:
        for _ in range(3):
            status, h, _ = get(port)
            assert status == 200 and "ratelimit" not in h
    assert c2.limiter.stats().checks == 0


@BOTH
def test_behind_a_trusted_proxy_the_right_most_untrusted_address_is_the_key(
    kind: Any, clocked: Any
) -> None:
    # The server's peer is 127.0.0.1, the "proxy"; 1 request per key.
    c = clocked("fixed_window", 1, 10)
    with serve(kind, c, trusted_proxies=["127.0.0.0/8", "10.0.0.0/8"]) as port:
        for xff, status in [
            ("1.2.3.4", 200),
            ("6.6.6.6, 1.2.3.4, 10.0.0.9", 429),  # a spoofed left entry is not another client
            ("5.6.7.8", 200),
            ("2001:db8:0:1::1", 200),
            ("2001:db8:0:1:ffff::2", 429),  # the same /64
            ("2001:db8:0:2::1", 200),
        ]:
            assert get(port, "/", {"X-Forwarded-For": xff})[0] == status, xff
    # Without trusted proxies the header is ignored: both are 127.0.0.1.
    c = clocked("fixed_window", 1, 10)
    with serve(kind, c) as port:
        assert get(port, "/", {"X-Forwarded-For": "1.2.3.4"})[0] == 200
        assert get(port, "/", {"X-Forwarded-For": "5.6.7.8"})[0] == 429


@BOTH
def test_trusted_hops_and_the_forwarded_header(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 1, 10)
    with serve(kind, c, trusted_proxies=2, forwarded_header="forwarded") as port:
        for fwd, status in [
            ("for=6.6.6.6, for=1.2.3.4;proto=http, for=10.0.0.1", 200),
            ('for=7.7.7.7, for="1.2.3.4:5555", for=10.0.0.1', 429),
            ('for="[2001:db8::1]", for=10.0.0.1', 200),
            ("for=10.0.0.1", 200),  # fewer than 2 hops: the peer, 127.0.0.1
            ("for=10.0.0.2", 429),  # the peer again
        ]:
            assert get(port, "/", {"Forwarded": fwd})[0] == status, fwd


def test_client_ip_options_and_prefixes() -> None:
    from ratecell._http import ClientIp

    for bad in (
        {"ipv4_prefix": 33},
        {"ipv6_prefix": 129},
        {"forwarded_header": "x-real-ip"},
        {"trusted_proxies": -1},
        {"trusted_proxies": ["10.0.0.0/33"]},
        {"trusted_proxies": "10.0.0.0/8"},
    ):
        with pytest.raises((ValueError, TypeError)):
            ClientIp(**bad)
    wide = ClientIp(ipv4_prefix=24, ipv6_prefix=48)
    assert wide.key("192.0.2.7", tuple) == "192.0.2.0/24"
    assert wide.key("2001:db8:1:2::1", tuple) == "2001:db8:1::/48"
    assert wide.key("::ffff:192.0.2.7", tuple) == "192.0.2.0/24"
    assert ClientIp().key("2001:db8:1:2:aaaa::1", tuple) == "2001:db8:1:2::/64"
    assert ClientIp().key(None, tuple) is None


def test_ipv6_peers_share_their_64(clocked: Any) -> None:
    c = clocked("fixed_window", 1, 10)
    w = wsgi.RateLimitMiddleware(_wsgi_app, c)
    got: list[str] = []
    for addr in ("2001:db8:0:1::1", "2001:db8:0:1:ffff::2", "2001:db8:0:2::1", "192.0.2.1"):
        w({"PATH_INFO": "/", "REMOTE_ADDR": addr}, lambda s, h, e=None: got.append(s[:3]))
    assert got == ["200", "429", "200", "200"]


def test_no_client_address_is_a_500_not_a_shared_quota(clocked: Any, tmp_path: Any) -> None:
    c = clocked("fixed_window", 1, 10)
    w = wsgi.RateLimitMiddleware(_wsgi_app, c)
    got: list[str] = []
    for _ in range(2):
        body = b"".join(w({"PATH_INFO": "/"}, lambda status, headers, exc=None: got.append(status)))
        assert b"no client address" in body
    assert got == ["500 Internal Server Error"] * 2

    # uvicorn on a Unix socket: its requests have no client address.
    sock = str(tmp_path / "http.sock")
    config = uvicorn.Config(
        asgi.RateLimitMiddleware(_starlette(), c), uds=sock, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(20)
            self.sock.connect(sock)

    try:
        for _ in range(500):
            if server.started:
                break
            time.sleep(0.01)
        for _ in range(2):
            conn = UnixConnection("localhost", timeout=20)
            try:
                conn.request("GET", "/")
                res = conn.getresponse()
                assert res.status == 500 and b"no client address" in res.read()
            finally:
                conn.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert c.limiter.stats().checks == 0


@BOTH
def test_a_refusal_hook_answers_429s_and_the_fields_are_kept(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 1, 10)

    def slow_down(request: Any, items: Any) -> tuple[int, list[tuple[str, str]], bytes]:
        path = request["path"] if isinstance(request.get("path"), str) else request["PATH_INFO"]
        body = f"slow down on {path} ({items[0].name})".encode()
        return 503, [("Content-Type", "text/plain"), ("Retry-After", "60")], body

    with serve(kind, Named(c, "api"), on_refusal=slow_down) as port:
        assert get(port)[0] == 200
        status, h, body = get(port)
        assert (status, body) == (503, b"slow down on / (api)")
        assert h["content-type"] == "text/plain"
        assert h["retry-after"] == "60"  # the hook's own wins
        assert h["ratelimit"] == '"api";r=0;t=8'
        assert h["ratelimit-policy"] == '"api";q=1;w=10'


@BOTH
def test_a_dry_run_hook_sees_every_violation(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 2, 10)
    seen: list[str] = []
    def violation(request: Any, items: Any) -> None:
        seen.append(ratelimit_field(items))

    with serve(kind, c, dry_run=True, on_dry_run_refusal=violation) as port:
        for _ in range(5):
            assert get(port)[0] == 200
    assert seen == ['"default";r=0;t=8'] * 3


@BOTH
def test_a_method_filter_limits_only_those_methods(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 1, 10)
    with serve(kind, c, methods=["post"]) as port:
        for _ in range(3):
            status, h, _ = get(port)
            assert status == 200 and "ratelimit" not in h
        assert c.limiter.stats().checks == 0
        statuses = []
        for _ in range(2):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            try:
                conn.request("POST", "/", body=b"")
                res = conn.getresponse()
                res.read()
                statuses.append(res.status)
            finally:
                conn.close()
        assert statuses[0] != 429 and statuses[1] == 429  # (Starlette answers 405 to a POST)


@BOTH
def test_prometheus_metrics_count_outcomes_per_policy(kind: Any, clocked: Any) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from ratecell.metrics import PrometheusMetrics

    registry = prometheus_client.CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    c = clocked("fixed_window", 2, 10)
    with serve(kind, Named(c, "api"), metrics=metrics) as port:
        assert [get(port)[0] for _ in range(3)] == [200, 200, 429]
    d = clocked("fixed_window", 1, 10)
    with serve(kind, Named(d, "trial"), metrics=metrics, dry_run=True) as port:
        assert [get(port)[0] for _ in range(3)] == [200] * 3
    # Scraped as Prometheus does, over HTTP.
    with wsgi_server(prometheus_client.make_wsgi_app(registry)) as mport:
        status, _, body = get(mport, "/metrics")
    assert status == 200
    text = body.decode()
    for line in (
        'ratecell_http_requests_total{outcome="admitted",policy="api"} 2.0',
        'ratecell_http_requests_total{outcome="refused",policy="api"} 1.0',
        'ratecell_http_requests_total{outcome="admitted",policy="trial"} 1.0',
        'ratecell_http_requests_total{outcome="dry_run_refused",policy="trial"} 2.0',
    ):
        assert line in text, text


@BOTH
def test_exempt_paths_and_predicates_are_never_counted(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 1, 10)
    with serve(kind, c, exempt=["/health"]) as port:
        for _ in range(5):
            status, h, body = get(port, "/health")
            assert (status, body) == (200, b"ok") and "ratelimit" not in h
        assert c.limiter.stats().checks == 0
        assert get(port)[0] == 200
        assert get(port)[0] == 429
    c2 = clocked("fixed_window", 1, 10)
    with serve(kind, c2, exempt=lambda r: True) as port:
        assert [get(port)[0] for _ in range(3)] == [200] * 3
    assert c2.limiter.stats().checks == 0


@BOTH
def test_cost_function(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 10, 10)
    with serve(kind, c, cost=lambda r: 4) as port:
        assert get(port)[1]["ratelimit"] == '"default";r=6;t=8'
        assert get(port)[1]["ratelimit"] == '"default";r=2;t=8'
        status, h, _ = get(port)
        assert (status, h["ratelimit"]) == (429, '"default";r=2;t=8')


@BOTH
def test_a_failing_limiter_fails_closed_unless_told(kind: Any) -> None:
    class Broken:
        def check_limits(self, key: bytes, cost: int) -> list[LimitDecision]:
            raise ConnectionError("store down")

    with serve(kind, Broken()) as port:
        assert get(port)[0] == 503
    with serve(kind, Broken(), fail_open=True) as port:
        assert get(port)[0] == 200


@BOTH
def test_store_failures_reach_the_hook_the_counter_and_the_log(
    kind: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that fails is never silent: the hook sees each failure with
    its request and exception, the counter counts it by outcome, and the
    log says so once (not once per request)."""
    prometheus_client = pytest.importorskip("prometheus_client")
    from ratecell.metrics import PrometheusMetrics

    class Broken:
        def check_limits(self, key: bytes, cost: int) -> list[LimitDecision]:
            raise ConnectionError("store down")

    registry = prometheus_client.CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    seen: list[tuple[str, str]] = []
    kind_name = kind[0]

    def hook(request: Any, exc: Exception) -> None:
        query = request["query_string"].decode() if kind_name == "asgi" else request["QUERY_STRING"]
        seen.append((query, repr(exc)))

    caplog.set_level(logging.WARNING, logger="ratecell")
    with serve(kind, Broken(), metrics=metrics, on_store_error=hook) as port:
        assert [get(port, "/?a")[0] for _ in range(3)] == [503] * 3
    with serve(kind, Broken(), metrics=metrics, on_store_error=hook, fail_open=True) as port:
        assert [get(port, "/?b")[0] for _ in range(2)] == [200] * 2
    assert seen == [("a", "ConnectionError('store down')")] * 3 + [
        ("b", "ConnectionError('store down')")
    ] * 2
    text = prometheus_client.generate_latest(registry).decode()
    assert 'ratecell_http_store_errors_total{outcome="unavailable"} 3.0' in text, text
    assert 'ratecell_http_store_errors_total{outcome="failed_open"} 2.0' in text, text
    # A failure decides nothing per policy.
    assert "ratecell_http_requests_total{" not in text, text
    lines = [r.getMessage() for r in caplog.records if r.name == "ratecell"]
    # One line per middleware: its first failure (the next ones fall in
    # the same 10 s, which three requests on loopback cannot span).
    assert len(lines) == 2, lines
    assert "store down" in lines[0] and "503" in lines[0], lines
    assert "store down" in lines[1] and "fail_open" in lines[1], lines


@BOTH
def test_a_tier_is_chosen_per_request(kind: Any) -> None:
    """A plan from a header picks each request's quota; an unknown plan is
    the default tier's; a key that changes tier keeps what it spent."""
    from ratecell import Limit

    limits = (asgi if kind[0] == "asgi" else wsgi).Tiered(
        {"free": Limit("fixed_window", 2, period=3600),
         "pro": Limit("fixed_window", 5, period=3600)},
        capacity=64,
    )

    def plan(request: Any) -> str | None:
        if kind[0] == "asgi":
            return dict(request["headers"]).get(b"x-plan", b"").decode() or None
        return request.get("HTTP_X_PLAN")  # type: ignore[no-any-return]

    try:
        with serve(kind, limits, key="X-Api-Key", tier=plan) as port:
            def ask(key: str, tier: str | None) -> tuple[int, dict[str, str]]:
                headers = {"X-Api-Key": key} | ({"X-Plan": tier} if tier else {})
                status, h, _ = get(port, "/", headers)
                return status, h

            for r in (1, 0):
                status, h = ask("a", "free")
                assert status == 200 and h["ratelimit-policy"] == '"free";q=2;w=3600', h
                assert h["ratelimit"].startswith(f'"free";r={r};'), h
            assert ask("a", "free")[0] == 429
            for r in (4, 3, 2, 1, 0):
                status, h = ask("b", "pro")
                assert status == 200 and h["ratelimit-policy"] == '"pro";q=5;w=3600', h
                assert h["ratelimit"].startswith(f'"pro";r={r};'), h
            assert ask("b", "pro")[0] == 429
            # No plan, or one the limits lack: the default tier.
            for plan_sent in (None, "enterprise"):
                status, h = ask(f"c-{plan_sent}", plan_sent)
                assert status == 200 and h["ratelimit"].startswith('"free";r=1;'), h
            # Upgraded: the two units spent under free count under pro.
            status, h = ask("a", "pro")
            assert status == 200 and h["ratelimit"].startswith('"pro";r=2;'), h
    finally:
        limits.close()
    with ratecell.Limiter("gcra", 1, period=1) as plain, pytest.raises(TypeError, match="Tiered"):
        kind[1](None, plain, tier=plan)  # no tiers to choose among


@BOTH
def test_a_disabled_middleware_passes_every_request_unchecked(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 1, 10)
    with serve(kind, c, enabled=False) as port:
        for _ in range(5):
            status, h, _ = get(port)
            assert status == 200 and "ratelimit" not in h
    assert c.limiter.stats().checks == 0
    with serve(kind, c) as port:
        assert [get(port)[0] for _ in range(2)] == [200, 429]


@BOTH
def test_legacy_headers_beside_the_drafts_fields(kind: Any, clocked: Any) -> None:
    c = clocked("fixed_window", 3, 10)
    with serve(kind, Named(c, "api"), legacy_headers=True) as port:
        for remaining in ("2", "1", "0"):
            before = int(time.time())
            status, h, _ = get(port)
            after = int(time.time())
            assert status == 200 and h["ratelimit"] == f'"api";r={remaining};t=8'
            assert (h["x-ratelimit-limit"], h["x-ratelimit-remaining"]) == ("3", remaining)
            # t is 8: T0's window has 7.5 s left.
            assert before + 8 <= int(h["x-ratelimit-reset"]) <= after + 8, h
        status, h, _ = get(port)
        assert status == 429 and h["retry-after"] == "8"
        assert (h["x-ratelimit-limit"], h["x-ratelimit-remaining"]) == ("3", "0")
    with serve(kind, Named(clocked("fixed_window", 3, 10), "api")) as port:
        assert "x-ratelimit-limit" not in get(port)[1]
    # The limit with the fewest units left; of a refusal, the refusing one.
    items = [
        LimitDecision("a", 10, S, d(True, 5, 0, S)),
        LimitDecision("b", 100, 3600 * S, d(True, 4, 0, 60 * S)),
    ]
    assert legacy_values(items, 1000) == (100, 4, 1060)
    items[0] = LimitDecision("a", 10, S, d(False, 0, 2 * S, S))
    assert legacy_values(items, 1000) == (10, 0, 1002)


@BOTH
def test_a_key_of_the_address_and_the_path(kind: Any, clocked: Any) -> None:
    with serve(kind, clocked("fixed_window", 1, 10), key=("client", "path")) as port:
        for path in ("/", "/other"):
            assert get(port, path)[0] != 429  # (Starlette answers 404 on /other)
            assert get(port, path)[0] == 429
    parts = ("X-Api-Key", "method")
    with serve(kind, clocked("fixed_window", 1, 10), key=parts) as port:
        assert get(port)[0] == 400  # a part missing: missing_key="reject"
        assert get(port, "/", {"X-Api-Key": "a"})[0] == 200
        assert get(port, "/", {"X-Api-Key": "a"})[0] == 429
        assert get(port, "/", {"X-Api-Key": "b"})[0] == 200


def test_asgi_takes_an_async_limiter(clocked: Any) -> None:
    c = clocked("fixed_window", 1, 10)

    class AsyncClocked:
        async def check(self, key: Any, cost: int) -> ratecell.Decision:
            await asyncio.sleep(0)
            return c.check(key, cost)

    with serve(ASGI, Named(AsyncClocked(), "redis", limit=1, period=10)) as port:
        status, h, _ = get(port)
        assert (status, h["ratelimit"]) == (200, '"redis";r=0;t=8')
        assert get(port)[0] == 429


def test_acquire_awaits_without_blocking_the_loop() -> None:
    async def main() -> tuple[int, ratecell.Decision]:
        with ratecell.Limiter("gcra", 1, period=0.1, capacity=16) as lim:
            ticks = 0
            stop = asyncio.Event()

            async def ticker() -> None:
                nonlocal ticks
                while not stop.is_set():
                    ticks += 1
                    await asyncio.sleep(0.002)

            task = asyncio.create_task(ticker())
            assert (await asgi.acquire(lim, "k")).allowed
            with pytest.raises(ratecell.TimedOut):
                await asgi.acquire(lim, "k", timeout=0)
            before = ticks
            second = await asgi.acquire(lim, "k", timeout=5)
            during = ticks - before
            with pytest.raises(ratecell.CostExceedsLimit):
                await asgi.acquire(lim, "other", cost=2, timeout=5)
            stop.set()
            await task
            return during, second

    during, second = asyncio.run(main())
    assert second.allowed
    assert during > 0, "the event loop ran while acquire waited"


# -- several named limits -------------------------------------------------------


class ClockedMulti:
    """A ``MultiLimiter`` on an explicit clock, with the shape ``Multi``
    takes (``check_each``, ``names``, ``limits``)."""

    def __init__(self, limiter: ratecell.MultiLimiter) -> None:
        self.limiter = limiter
        self.now = T0
        self.names = limiter.names
        self.limits = limiter.limits

    def check_each(self, key: Any, cost: int) -> ratecell.MultiDecision:
        return self.limiter.check_each(key, cost, at=self.now)


def _problem(*violated: str) -> dict[str, Any]:
    return {
        "type": QUOTA_EXCEEDED_TYPE,
        "title": "Quota exceeded",
        "status": 429,
        "violated-policies": list(violated),
    }


@BOTH
def test_two_named_limits_one_item_each_and_all_or_nothing(kind: Any) -> None:
    # "burst" 3 per second and "daily" 5 per hour, fixed windows: at T0 the
    # second has 0.5 s left and the hour 2797.5 s (1_700_000_000 s is 800 s
    # into its hour).
    with ratecell.MultiLimiter(
        [
            ratecell.Limit("fixed_window", 3, period=1, name="burst"),
            ratecell.Limit("fixed_window", 5, period=3600, name="daily"),
        ],
        capacity=1024,
    ) as limiter:
        c = ClockedMulti(limiter)
        policy = '"burst";q=3;w=1, "daily";q=5;w=3600'
        with serve(kind, c) as port:
            for burst, daily in [(2, 4), (1, 3), (0, 2)]:
                status, h, _ = get(port)
                assert status == 200
                assert h["ratelimit-policy"] == policy
                assert h["ratelimit"] == f'"burst";r={burst};t=1, "daily";r={daily};t=2798'
            # "burst" refuses; "daily" would admit and is not charged.
            status, h, body = get(port)
            assert status == 429
            assert h["retry-after"] == "1"  # 0.5 s rounded up
            assert h["ratelimit-policy"] == policy
            assert h["ratelimit"] == '"burst";r=0;t=1, "daily";r=2;t=2798'
            assert json.loads(body) == _problem("burst")
            # The next second: "burst" is fresh, "daily" has its 2 and 2797 s.
            c.now += 500_000_000
            for burst, daily in [(2, 1), (1, 0)]:
                status, h, _ = get(port)
                assert status == 200
                assert h["ratelimit"] == f'"burst";r={burst};t=1, "daily";r={daily};t=2797'
            # "daily" refuses; "burst" is not charged (r stays 1), twice.
            for _ in range(2):
                status, h, body = get(port)
                assert status == 429
                assert h["retry-after"] == "2797"
                assert h["ratelimit"] == '"burst";r=1;t=1, "daily";r=0;t=2797'
                assert json.loads(body) == _problem("daily")
        stats = limiter.stats()
        assert (stats.allowed, stats.denied) == (5, 3)


@BOTH
def test_a_multi_limiter_directly_lists_every_refusing_limit(kind: Any) -> None:
    with ratecell.MultiLimiter(
        [
            ratecell.Limit("sliding_log", 2, period=60, name="minute"),
            ratecell.Limit("sliding_log", 2, period=3600, name="hour"),
        ],
        capacity=64,
    ) as limiter:
        with serve(kind, limiter) as port:
            assert [get(port)[0] for _ in range(2)] == [200, 200]
            status, h, body = get(port)
        assert status == 429
        assert h["ratelimit-policy"] == '"minute";q=2;w=60, "hour";q=2;w=3600'
        # The hour's wait (just under 3600 s) is the longer, rounded up.
        assert h["retry-after"] == "3600"
        assert json.loads(body) == _problem("minute", "hour")


def test_multi_names_are_checked() -> None:
    with ratecell.MultiLimiter(
        [ratecell.Limit("gcra", 3, period=1), ratecell.Limit("gcra", 5, period=3600)]
    ) as two:
        with pytest.raises(ValueError, match="limit 0 has no name"):
            wsgi.RateLimitMiddleware(_wsgi_app, two)
        with pytest.raises(ValueError, match="1 names for 2 limits"):
            Multi(two, ["a"])
        with pytest.raises(ValueError, match="limit 1.*must differ"):
            Multi(two, ["a", "a"])
        with pytest.raises(ValueError, match="limit 1.*policy name"):
            Multi(two, ["a", "caf\u00e9"])
        assert [p[0] for p in Multi(two, ["a", "b"])._policies] == ["a", "b"]
    with ratecell.MultiLimiter([ratecell.Limit("gcra", 3, period=1)]) as one:
        assert Multi(one)._policies == (("default", 3, S),)


@BOTH
def test_a_limits_without_a_fixed_policy_gets_its_field_per_request(kind: Any, clocked: Any) -> None:
    named = Named(clocked("fixed_window", 3, 10), "api")

    class Plain:
        def check_limits(self, key: bytes, cost: int) -> Any:
            return named.check_limits(key, cost)

    with serve(kind, Plain()) as port:
        status, h, _ = get(port)
    assert (status, h["ratelimit-policy"], h["ratelimit"]) == (200, '"api";q=3;w=10', '"api";r=2;t=8')

"""What the ASGI and WSGI middlewares add to a hello-world app, end to end
over loopback. Each server (uvicorn + Starlette, wsgiref) runs in its own
process, with and without the middleware; one keep-alive http.client
connection per server sends requests in alternating short rounds (so load
from other processes on a shared machine hits both alike); the median of
the paired rounds' ratios is reported with each side's median time.

A third server sends the same two fields as fixed text, with no limiter:
what the framework itself spends on two more response headers, the floor
of any middleware that emits them.

Two request times per server: the client's wall-clock time per request,
and the server process's own CPU time per request (on-CPU nanoseconds from
/proc/<pid>/task/*/schedstat, Linux), which waiting for a core on a busy
machine does not inflate.

    python bench_http.py [--rounds 41] [--requests 200]

Needs uvicorn and starlette (scripts/python-tests.sh installs them).
"""

from __future__ import annotations

import argparse
import glob
import http.client
import multiprocessing as mp
import statistics
import time
from typing import Any


def _limiter() -> Any:
    import ratecell

    # Never refuses in the run: the measured path is check + fields.
    return ratecell.Limiter("gcra", 1_000_000_000, period=1, capacity=1024)


# Fields of the size the middleware sends for the limiter above.
FIELDS = [
    ("RateLimit-Policy", '"default";q=1000000000;w=1'),
    ("RateLimit", '"default";r=999999999;t=1'),
]

# The three servers of each framework: plain, fixed fields only, middleware.
MODES = ("plain", "fields", "limited")


def _asgi(mode: str, ports: Any) -> None:
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("hello")

    async def hello_fields(request: Any) -> PlainTextResponse:
        return PlainTextResponse("hello", headers=dict(FIELDS))

    app: Any = Starlette(routes=[Route("/", hello_fields if mode == "fields" else hello)])
    if mode == "limited":
        from ratecell.asgi import RateLimitMiddleware

        app = RateLimitMiddleware(app, _limiter())
    sock = socket.socket()
    # Accepted connections inherit it: without, Nagle holds the body behind
    # the headers until the client's delayed ACK (about 40 ms a request).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    ports.put(sock.getsockname()[1])
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def _wsgi(mode: str, ports: Any) -> None:
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    def hello(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return [b"hello"]

    def hello_fields(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5"), *FIELDS])
        return [b"hello"]

    app: Any = hello_fields if mode == "fields" else hello
    if mode == "limited":
        from ratecell.wsgi import RateLimitMiddleware

        app = RateLimitMiddleware(hello, _limiter())
    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    ports.put(server.server_port)
    server.serve_forever()


def _round(port: int, conn: list[http.client.HTTPConnection], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        try:
            conn[0].request("GET", "/")
            res = conn[0].getresponse()
            res.read()
            if res.will_close:
                conn[0].close()
                conn[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        except (ConnectionError, http.client.HTTPException):
            conn[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            continue
        if res.status != 200:
            raise RuntimeError(f"status {res.status}")
    return (time.perf_counter() - start) / n


def _cpu_ns(pid: int) -> int:
    """The process's on-CPU time so far, all threads, in nanoseconds."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total


def measure(kind: str, target: Any, rounds: int, n: int) -> None:
    ports: Any = mp.Queue()
    procs = [mp.Process(target=target, args=(mode, ports), daemon=True) for mode in MODES]
    try:
        port_of = []
        for p in procs:
            p.start()
            port_of.append(ports.get(timeout=30))
        time.sleep(0.5)
        conns = [[http.client.HTTPConnection("127.0.0.1", port, timeout=20)] for port in port_of]
        for i in range(len(MODES)):
            _round(port_of[i], conns[i], n // 4)
        times: list[list[float]] = [[] for _ in MODES]
        cpu: list[list[float]] = [[] for _ in MODES]
        for _ in range(rounds):
            for i in range(len(MODES)):
                before = _cpu_ns(procs[i].pid)  # type: ignore[arg-type]
                times[i].append(_round(port_of[i], conns[i], n))
                cpu[i].append((_cpu_ns(procs[i].pid) - before) / n / 1e9)  # type: ignore[arg-type]
        for what, t in (("client wall time", times), ("server CPU time", cpu)):
            without, fields, with_ = (statistics.median(t[i]) for i in range(len(MODES)))
            ratio = statistics.median(b / a for a, b in zip(t[0], t[2]))
            floor = statistics.median(b / a for a, b in zip(t[0], t[1]))
            print(
                f"{kind}, {what}: {rounds} paired rounds x {n} requests; median without "
                f"middleware {without * 1e6:.1f} us/request, with {with_ * 1e6:.1f} us/request; "
                f"median paired ratio {ratio:.3f} ({(ratio - 1) * 100:+.1f} %); the fields alone, "
                f"no limiter, {fields * 1e6:.1f} us/request, ratio {floor:.3f} ({(floor - 1) * 100:+.1f} %)"
            )
    finally:
        for p in procs:
            p.terminate()
            p.join(timeout=10)


def in_process(rounds: int, n: int) -> None:
    """The middlewares' own cost: the apps called directly, no server; then
    the frameworks' own request handling in process, with and without. Timed
    in the thread's CPU time, which other processes on the machine do not
    inflate."""
    import asyncio

    from ratecell.asgi import RateLimitMiddleware as Asgi
    from ratecell.wsgi import RateLimitMiddleware as Wsgi

    async def asgi_hello(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hello"})

    def wsgi_hello(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]

    scope = {"type": "http", "path": "/", "headers": [], "client": ("127.0.0.1", 5555)}
    environ = {"PATH_INFO": "/", "REMOTE_ADDR": "127.0.0.1"}

    async def send(message: Any) -> None:
        pass

    async def receive() -> Any:
        return {}

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        pass

    async def asgi_round(app: Any) -> float:
        start = time.thread_time()
        for _ in range(n):
            await app(scope, receive, send)
        return (time.thread_time() - start) / n

    def wsgi_round(app: Any) -> float:
        start = time.thread_time()
        for _ in range(n):
            app(environ, start_response)
        return (time.thread_time() - start) / n

    # The frameworks' own request handling, in process: Starlette's routing
    # and response for a full scope, and wsgiref's handler (parsing nothing,
    # writing status, headers and body to a buffer).
    import io
    import sys
    from wsgiref.handlers import SimpleHandler

    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def hello(request: Any) -> PlainTextResponse:
        return PlainTextResponse("hello")

    starlette = Starlette(routes=[Route("/", hello)])
    full_scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/", "raw_path": b"/", "query_string": b"", "root_path": "",
        "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 5555),
        "server": ("127.0.0.1", 8000),
    }

    async def starlette_round(app: Any) -> float:
        start = time.thread_time()
        for _ in range(n):
            await app(dict(full_scope), receive, send)
        return (time.thread_time() - start) / n

    handler_environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "127.0.0.1",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
    }

    def handler_round(app: Any) -> float:
        start = time.thread_time()
        for _ in range(n):
            SimpleHandler(io.BytesIO(), io.BytesIO(), sys.stderr, dict(handler_environ)).run(app)
        return (time.thread_time() - start) / n

    limiter = _limiter()
    for kind, pair, run in (
        ("asgi in process", (asgi_hello, Asgi(asgi_hello, limiter)), lambda a: asyncio.run(asgi_round(a))),
        ("wsgi in process", (wsgi_hello, Wsgi(wsgi_hello, limiter)), wsgi_round),
        ("Starlette app in process", (starlette, Asgi(starlette, limiter)),
         lambda a: asyncio.run(starlette_round(a))),
        ("wsgiref handler in process", (wsgi_hello, Wsgi(wsgi_hello, limiter)), handler_round),
    ):
        times: list[list[float]] = [[], []]
        for _ in range(rounds):
            for i in range(2):
                times[i].append(run(pair[i]))
        ratio = statistics.median(b / a for a, b in zip(times[0], times[1]))
        print(
            f"{kind} (thread CPU time): {rounds} paired rounds x {n} calls; median without middleware "
            f"{statistics.median(times[0]) * 1e6:.2f} us/call, with "
            f"{statistics.median(times[1]) * 1e6:.2f} us/call; added "
            f"{(statistics.median(times[1]) - statistics.median(times[0])) * 1e6:.2f} us; "
            f"median paired ratio {ratio:.3f} ({(ratio - 1) * 100:+.1f} %)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    measure("asgi (uvicorn + Starlette)", _asgi, args.rounds, args.requests)
    measure("wsgi (wsgiref)", _wsgi, args.rounds, args.requests)
    in_process(args.rounds, args.requests * 5)


if __name__ == "__main__":
    main()

"""docs/HTTP.md's Python snippets are the files under
bindings/python/examples, byte for byte, and each file runs here behind a
real server (uvicorn, wsgiref, waitress), so the docs cannot drift from
the package."""

from __future__ import annotations

import http.client
import re
import runpy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_http import get, uvicorn_server, wsgi_server

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "HTTP.md"
EXAMPLES = ROOT / "bindings" / "python" / "examples"
SNIPPET = re.compile(r"<!-- snippet: (\S+)[^>]*-->\n```python\n(.*?)```", re.DOTALL)

pytest.importorskip("starlette")
pytest.importorskip("flask")


def _doc() -> str:
    if not DOC.exists():
        pytest.skip("docs/HTTP.md is not beside this checkout of the tests")
    return DOC.read_text()


def test_every_python_snippet_is_an_example_file_byte_for_byte() -> None:
    doc = _doc()
    found = SNIPPET.findall(doc)
    assert doc.count("```python") == len(found), "a ```python block without a snippet marker"
    assert {Path(p).name for p, _ in found} == {
        "http_starlette.py", "http_flask.py", "http_waitress.py", "http_tiers.py"
    }
    for path, text in found:
        assert (ROOT / path).read_text() == text, f"docs/HTTP.md's {path} differs from the file"


def _app(name: str) -> Any:
    return runpy.run_path(str(EXAMPLES / name))["app"]


def _fields(port: int, headers: dict[str, str] | None = None) -> tuple[str, str]:
    status, h, _ = get(port, "/", headers)
    assert status == 200, (status, h)
    return h["ratelimit-policy"], h["ratelimit"]


def test_the_starlette_snippet_serves_with_the_fields() -> None:
    with uvicorn_server(_app("http_starlette.py")) as port:
        assert _fields(port) == ('"default";q=100;w=60', '"default";r=99;t=1')


def test_the_flask_snippet_serves_with_the_fields() -> None:
    with wsgi_server(_app("http_flask.py")) as port:
        assert _fields(port) == ('"default";q=100;w=60', '"default";r=99;t=1')


def test_the_tiers_snippet_picks_the_plan() -> None:
    with uvicorn_server(_app("http_tiers.py")) as port:
        assert _fields(port, {"X-Api-Key": "a", "X-Plan": "pro"})[0] == '"pro";q=10000;w=3600'
        assert _fields(port, {"X-Api-Key": "b", "X-Plan": "gold"})[0] == '"free";q=100;w=3600'


@contextmanager
def waitress_server(app: Any, **options: Any) -> Iterator[int]:
    waitress = pytest.importorskip("waitress.server")
    from waitress import wasyncore

    server = waitress.create_server(app, host="127.0.0.1", port=0, **options)
    stop = threading.Event()

    def serve() -> None:
        # server.run() loops until its sockets close under it (an error in
        # the thread); this loop stops when told, then the sockets close.
        while not stop.is_set():
            wasyncore.loop(timeout=0.05, map=server._map, count=1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.effective_port
    finally:
        stop.set()
        thread.join(timeout=10)
        server.task_dispatcher.shutdown()
        server.close()


def _remaining(port: int, client: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("GET", "/", headers={"X-Forwarded-For": client})
        res = conn.getresponse()
        res.read()
        assert res.status == 200
        return int(res.getheader("RateLimit", "").split("r=")[1].split(";")[0])
    finally:
        conn.close()


def test_behind_a_proxy_waitress_told_of_it_keys_each_client() -> None:
    ns = runpy.run_path(str(EXAMPLES / "http_waitress.py"))
    # The snippet's options, with this test's proxy (127.0.0.1) for 10.0.0.1.
    told = {**ns["WAITRESS_PROXY"], "trusted_proxy": "127.0.0.1"}
    with waitress_server(ns["app"], **told) as port:
        # Every new client has its own whole quota: 99 left after its first.
        for i in range(20):
            assert _remaining(port, f"203.0.113.{i}") == 99
    # Not told, waitress drops the header: the clients share the proxy's
    # quota, so some of 20 requests find it spent (GCRA returns one unit
    # in 0.6 s; 20 requests would need 12 s to hide that).
    ns = runpy.run_path(str(EXAMPLES / "http_waitress.py"))
    with waitress_server(ns["app"]) as port:
        assert min(_remaining(port, f"203.0.113.{i}") for i in range(20)) < 99

"""Issue 33 §4 through the WSGI middleware keyed by an API-key header, the
application called directly (standard library only, unlike test_http.py's
real servers): a flood of made-up keys fills the table with live states.
Under ``overflow="deny"`` the next new client is refused; under
``overflow="evict"``, the policy the middleware's documentation builds its
limiters with, it is admitted."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import T0

import ratecell
from ratecell import wsgi


class Clocked:
    """A limiter on an explicit clock, as the middleware takes it."""

    def __init__(self, limiter: ratecell.Limiter) -> None:
        self.limiter = limiter

    def check(self, key: Any, cost: int) -> ratecell.Decision:
        return self.limiter.check(key, cost, at=T0)

    @property
    def config(self) -> ratecell.Config:
        return self.limiter.config


def _hello(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


@pytest.mark.parametrize(("overflow", "status"), [("deny", "429"), ("evict", "200")])
def test_a_flood_of_made_up_keys_locks_out_new_clients_only_under_deny(
    overflow: str, status: str
) -> None:
    with ratecell.Limiter("fixed_window", 1, period=3600, capacity=16, overflow=overflow) as lim:
        app = wsgi.RateLimitMiddleware(_hello, Clocked(lim), key="X-Api-Key")

        def get(key: str) -> str:
            seen: list[str] = []
            environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_X_API_KEY": key}
            app(environ, lambda s, h, *rest: seen.append(s))
            return seen[0].split()[0]

        for i in range(1000):
            get(f"flood-{i}")
        assert get("a-new-legitimate-client") == status

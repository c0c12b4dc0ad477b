"""ratecell.redis.RedisLimiter's three modes (SPEC.md §8) against a real
server with the module: strict, cached_deny and leased decide as the
module does; a leased limit shared by several nodes never admits more than
the limit per window; cached_deny sends nothing for a denied key until its
retry_after (counted by the server's INFO commandstats); a paused server
is answered within the timeout by the failure policy, and the global limit
is back once the server is.

scripts/redis-tests.sh starts the shared server and sets
RATECELL_REDIS_URL and RATECELL_REDIS_MODULE; these tests fail, not skip,
without them. The pause test starts a server of its own.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

import ratecell
from ratecell.redis import RedisLimiter

S = 1_000_000_000
# A whole second: windows of 1 s start at T0 + k·S.
T0 = 1_700_000_000 * S


@pytest.fixture
def client() -> redis.Redis:
    url = os.environ.get("RATECELL_REDIS_URL")
    assert url, "set RATECELL_REDIS_URL (scripts/redis-tests.sh does)"
    c = redis.Redis.from_url(url)
    c.flushall()
    return c


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` since CONFIG RESETSTAT."""
    stats: dict[str, Any] = client.info("commandstats")
    entry = stats.get("cmdstat_" + command.lower(), {})
    return int(entry.get("calls", 0)) if isinstance(entry, dict) else 0


@pytest.mark.parametrize("mode", ["strict", "cached_deny", "leased"])
def test_each_mode_admits_the_limit_then_denies(client: redis.Redis, mode: str) -> None:
    with RedisLimiter(
        client, "fixed_window", limit=5, period_ns=S, mode=mode, send_at=True, skew=0
    ) as lim:
        got = [lim.check("k", at=T0 + i * S // 100) for i in range(8)]
        assert [d.allowed for d in got] == [True] * 5 + [False] * 3, mode
        denied = got[-1]
        assert isinstance(denied, ratecell.Decision)
        assert denied.limit == 5
        # The window's end is T0 + S; the last check was at T0 + 70 ms.
        assert 0 < denied.retry_after_ns <= S - 7 * S // 100
        # The next window admits again.
        assert lim.check("k", at=T0 + S)
        assert lim.allow("k", at=T0 + S + 1)
        stats = lim.stats()
        assert stats.commands >= 1 and stats.failures == 0 and stats.fallbacks == 0
        assert (stats.lease is not None) == (mode == "leased")


def test_leased_nodes_never_exceed_the_limit_in_a_window(client: redis.Redis) -> None:
    limit = 100
    rng = random.Random(35)
    nodes = [
        RedisLimiter(
            redis.Redis.from_url(os.environ["RATECELL_REDIS_URL"]),
            "fixed_window",
            limit=limit,
            period_ns=S,
            mode="leased",
            max_grant=10,
            send_at=True,
            skew=0,
            prefix="fleet:",
        )
        for _ in range(3)
    ]
    admitted: Counter[int] = Counter()
    t = T0
    try:
        for _ in range(3000):
            t += rng.randrange(0, 4 * S // 1000)
            node = rng.choice(nodes)
            if node.check("shared", at=t):
                admitted[(t - T0) // S] += 1
    finally:
        for n in nodes:
            n.close()
    assert len(admitted) >= 4, admitted
    for window, n in admitted.items():
        assert n <= limit, f"window {window}: {n} admitted, limit {limit}"
    # Not vacuous: most windows use most of the limit.
    assert sum(1 for n in admitted.values() if n >= limit * 6 // 10) >= 3, admitted
    grants = sum(n.stats().lease.units_granted for n in nodes)  # type: ignore[union-attr]
    assert grants >= sum(admitted.values())


def test_cached_deny_sends_nothing_for_a_denied_key_until_retry_after(
    client: redis.Redis,
) -> None:
    lim = RedisLimiter(client, "fixed_window", limit=2, period_ns=10 * S, mode="cached_deny")
    client.config_resetstat()
    t = T0
    assert lim.check("k", at=t) and lim.check("k", at=t + 1)
    denied = lim.check("k", at=t + 2)
    assert not denied and denied.retry_after_ns == 10 * S - 2
    assert calls(client, "ratecell.check") == 3
    for i in range(50):
        d = lim.check("k", at=t + 3 + i * S // 10)
        assert not d
        assert d.retry_after_ns == 10 * S - 3 - i * S // 10
    assert calls(client, "ratecell.check") == 3, "remembered denials cost no command"
    # Another key still goes to Redis.
    assert lim.check("other", at=t + 5)
    assert calls(client, "ratecell.check") == 4
    # At retry_after, Redis decides again.
    assert lim.check("k", at=t + 10 * S)
    assert calls(client, "ratecell.check") == 5
    strict = RedisLimiter(client, "fixed_window", limit=2, period_ns=10 * S)
    for i in range(5):
        strict.check("s", at=t + i)
    assert calls(client, "ratecell.check") == 10, "strict: one command per check"


def test_bad_settings_are_named() -> None:
    c = redis.Redis.from_url(os.environ["RATECELL_REDIS_URL"])
    with pytest.raises(ratecell.NotLeasable):
        RedisLimiter(c, "sliding_log", limit=5, period=1.0, mode="leased")
    with pytest.raises(ratecell.InvalidMaxGrant):
        RedisLimiter(c, "gcra", limit=5, period=1.0, mode="leased", max_grant=6)
    with pytest.raises(ratecell.InvalidHorizon):
        RedisLimiter(c, "gcra", limit=5, period=1.0, mode="leased", horizon=2.0)
    with pytest.raises(ratecell.InvalidExpire):
        RedisLimiter(c, "fixed_window", limit=5, period=1.0, mode="leased", lease_expiry=0.5)
    with pytest.raises(ratecell.InvalidSkew):
        RedisLimiter(c, "gcra", limit=5, period=1.0, mode="leased", skew=1.0)
    with pytest.raises(ratecell.InvalidFailure):
        RedisLimiter(
            c, "gcra", limit=5, period=1.0, mode="leased", failure="local", expected_nodes=0
        )
    with pytest.raises(ratecell.InvalidFailure):
        RedisLimiter(c, "gcra", limit=5, period=1.0, failure="open")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mode"):
        RedisLimiter(c, "gcra", limit=5, period=1.0, mode="lazy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        RedisLimiter(c, "gcra", limit=5, period=1.0, timeout=0)


@contextmanager
def own_server() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A redis-server of its own on a free 127.0.0.1 port, with the module,
    to pause with SIGSTOP; always continued and killed at the end."""
    module = os.environ.get("RATECELL_REDIS_MODULE")
    assert module, "set RATECELL_REDIS_MODULE (scripts/redis-tests.sh does)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
                d,
                "--loadmodule",
                module,
            ],
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


TIMEOUT = 0.05
# The client's own socket timeout, far beyond TIMEOUT: a check that missed
# the limiter's timeout would wait this long, so half of it bounds what the
# limiter controls rather than how soon a busy machine runs the thread.
CLIENT_TIMEOUT = 60.0


@pytest.mark.parametrize("mode", ["strict", "cached_deny", "leased"])
def test_a_paused_server_is_the_policys_then_the_global_limit_is_back(mode: str) -> None:
    with own_server() as (port, proc):
        client = redis.Redis(port=port, socket_timeout=CLIENT_TIMEOUT)

        def limiter(failure: str) -> RedisLimiter:
            return RedisLimiter(
                client,
                "fixed_window",
                limit=2,
                # A day's window, aligned to midnight UTC: the rest of it
                # is longer than any retry the policy gives.
                period=86400.0,
                mode=mode,  # type: ignore[arg-type]
                timeout=TIMEOUT,
                failure=failure,
                expected_nodes=1,  # type: ignore[arg-type]
            )

        deny, local = limiter("deny"), limiter("local")
        try:
            # The key's limit is spent in Redis while it answers.
            assert deny.allow("spent") and deny.allow("spent")
            assert not local.check("spent")
            proc.send_signal(signal.SIGSTOP)
            for lim, admitted in ((deny, False), (local, True)):
                start = time.monotonic()
                d = lim.check("fresh")
                took = time.monotonic() - start
                assert d.allowed == admitted, (mode, lim.stats())
                assert took < CLIENT_TIMEOUT / 2, took
                assert lim.stats().fallbacks >= 1
            # Denied by the policy: retry when Redis is next tried.
            assert 0 < deny.check("fresh").retry_after_ns <= S
            proc.send_signal(signal.SIGCONT)
            # Within a few backoff steps, Redis decides again: a check the
            # policy did not decide, denied because the global limit is spent.
            for lim in (deny, local):
                deadline = time.monotonic() + 5
                while True:
                    before = lim.stats().fallbacks
                    d = lim.check("spent")
                    if lim.stats().fallbacks == before:
                        break
                    assert time.monotonic() < deadline, f"{mode}: Redis never came back"
                    time.sleep(0.02)
                # Redis's retry is the rest of the window; the policy's,
                # a second at most (asserted above).
                assert not d and d.retry_after_ns > S, (mode, d)
        finally:
            deny.close()
            local.close()
            client.close()

"""ratecell.redis against a real server with the module loaded.

scripts/redis-tests.sh starts the server and sets RATECELL_REDIS_URL; these
tests fail, not skip, without it.
"""

from __future__ import annotations

import os
import random

import pytest
import redis

import ratecell
from ratecell.redis import RedisLimiter, check_all

SECOND = 1_000_000_000
T0 = 1_700_002_800 * SECOND


@pytest.fixture
def client() -> redis.Redis:
    url = os.environ.get("RATECELL_REDIS_URL")
    assert url, "set RATECELL_REDIS_URL (scripts/redis-tests.sh does)"
    c = redis.Redis.from_url(url)
    c.flushall()
    return c


@pytest.mark.parametrize("algorithm", list(ratecell.Algorithm))
def test_same_decisions_as_the_in_process_limiter(client: redis.Redis, algorithm) -> None:
    rng = random.Random(algorithm.value)
    remote = RedisLimiter(client, algorithm, limit=4, period_ns=SECOND, prefix="py:")
    with ratecell.Limiter(algorithm, limit=4, period_ns=SECOND) as local:
        t = T0
        for _ in range(300):
            t += rng.randrange(0, SECOND // 3) if rng.random() > 0.1 else -rng.randrange(SECOND)
            cost = rng.choice([0, 1, 1, 2, 5])
            assert remote.check("k", cost, at=t) == local.check(0, cost, at=t)


def test_check_on_the_server_clock(client: redis.Redis) -> None:
    limiter = RedisLimiter(client, "sliding_window", limit=2, period=10.0)
    assert limiter.allow("user")
    assert limiter.check("user").remaining == 0
    denied = limiter.check("user")
    # A sliding window's wait may reach into the window after next (SPEC §4).
    assert not denied and 0 < denied.retry_after <= 20.0
    assert isinstance(denied, ratecell.Decision)
    assert 0 < client.pttl("user") <= 20_000
    never = limiter.check("other", cost=3)
    assert never.retry_after_ns == ratecell.NEVER


def test_errors_name_the_field(client: redis.Redis) -> None:
    with pytest.raises(ratecell.InvalidLimit):
        RedisLimiter(client, "gcra", limit=0, period=1.0).check("k")
    with pytest.raises(ratecell.InvalidBurst):
        RedisLimiter(client, "gcra", limit=5, period=1.0, burst=2**33).check("k")
    with pytest.raises(ratecell.InvalidSubWindows):
        RedisLimiter(client, "bucketed_window", limit=5, period=1.0, sub_windows=7).check("k")
    client.set("str", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        RedisLimiter(client, "gcra", limit=5, period=1.0).check("str")


def test_check_all_is_all_or_nothing(client: redis.Redis) -> None:
    per_second = RedisLimiter(client, "gcra", limit=2, period=1.0)
    per_minute = RedisLimiter(client, "fixed_window", limit=1, period=60.0)
    ok, ds = check_all(client, [(per_second, "{u}:s"), (per_minute, "{u}:m")], at=T0)
    assert ok and all(ds)
    ok, ds = check_all(client, [(per_second, "{u}:s"), (per_minute, "{u}:m")], at=T0)
    assert not ok and ds[0].allowed and not ds[1].allowed
    # The per-second limit was charged once only.
    assert per_second.check("{u}:s", 0, at=T0).remaining == 1

"""A leased check that finds units, against a local check, from Python.

    RATECELL_REDIS_URL=redis://127.0.0.1:6379/0 python bench_lease.py [N]

Both limiters are fixed windows of 2**32 - 1 per hour, so every check is
admitted: the local one is a ``ratecell.Limiter`` (a keyed table), the
leased one a ``ratecell.redis.RedisLimiter(mode="leased")`` whose grants
(up to a million units each) come from the Redis module through the
server at ``RATECELL_REDIS_URL`` and are refilled in the background. The
leased check is the C library's ``ratecell_leases_check`` (one atomic
spend), called through ``ratecell._speedups`` when it is built. Prints
ns per check (best of 5 runs of N checks each, one key) and the ratio.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import redis

import ratecell
from ratecell.redis import RedisLimiter

LIMIT = 2**32 - 1
HOUR = 3600.0


def best_ns(check: Callable[[str], object], key: str, n: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(n):
            check(key)
        best = min(best, (time.perf_counter_ns() - start) / n)
    return best


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    url = os.environ.get("RATECELL_REDIS_URL", "redis://127.0.0.1:6379/0")
    client = redis.Redis.from_url(url)
    client.delete("bench:user:1")
    speedups = ratecell._limiter._fast_lease_check is not None
    with (
        ratecell.Limiter("fixed_window", LIMIT, period=HOUR, capacity=1024) as local,
        RedisLimiter(
            client,
            "fixed_window",
            LIMIT,
            period=HOUR,
            mode="leased",
            max_grant=1_000_000,
            prefix="bench:",
        ) as leased,
    ):
        # Warm up: the first check fetches a grant, the next ones spend it.
        for _ in range(1000):
            assert leased.check("user:1") and local.check("user:1")
        local_ns = best_ns(local.check, "user:1", n)
        leased_ns = best_ns(leased.check, "user:1", n)
        stats = leased.stats()
    print(f"speedups: {speedups}; {n} checks x 5, best run")
    print(f"Limiter.check (local)        {local_ns:7.1f} ns/check")
    print(f"RedisLimiter.check (leased)  {leased_ns:7.1f} ns/check")
    print(f"ratio leased/local           {leased_ns / local_ns:7.2f}")
    print(
        f"grant requests: {stats.lease.fetches if stats.lease else 0} fetched, "
        f"{stats.lease.refills if stats.lease else 0} refilled; commands {stats.commands}"
    )


if __name__ == "__main__":
    main()

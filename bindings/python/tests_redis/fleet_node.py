"""One Python node of the fleet of several languages
(test_fleet_languages.py)::

    python fleet_node.py URL KEY LIMIT PERIOD_NS START_NS RUN_NS

checks KEY under a leased fixed window of LIMIT per PERIOD_NS kept at the
Redis server URL, at the wall clock's times sent as ``AT``, from START_NS
for RUN_NS, and prints the times it admitted (``ADMITTED t...``) and its
count of checks (``CHECKS n``).
"""

from __future__ import annotations

import sys
import time

import redis

from ratecell.redis import RedisLimiter


def main() -> None:
    url, key = sys.argv[1], sys.argv[2]
    limit, period, start, run = (int(a) for a in sys.argv[3:7])
    client = redis.Redis.from_url(url)
    with RedisLimiter(
        client, "fixed_window", limit, period, mode="leased", send_at=True, skew=0
    ) as lim:
        while time.time_ns() < start:
            time.sleep(0.0001)
        admitted: list[str] = []
        checks = 0
        end = start + run
        while True:
            t = time.time_ns()
            if t >= end:
                break
            checks += 1
            if lim.check(key, at=t):
                admitted.append(str(t))
    print("ADMITTED " + " ".join(admitted))
    print(f"CHECKS {checks}")


if __name__ == "__main__":
    main()

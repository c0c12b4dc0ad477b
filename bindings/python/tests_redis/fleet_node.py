"""One Python node of the fleet of several languages
(test_fleet_languages.py)::

    python fleet_node.py URL KEY LIMIT PERIOD_NS START_NS RUN_NS [ALGORITHM [TIMELINE]]

checks KEY under a leased limit of ALGORITHM (fixed_window by default),
LIMIT per PERIOD_NS, kept at the Redis server URL, from START_NS for
RUN_NS, each check dated by the wall clock just before it; TIMELINE says
how: ``at`` (the default) sends the dates as ``AT``, so the server decides
on them too (``send_at``); ``caller`` passes them as the checks' ``at``
only, the server deciding grants on its own clock, as a service that
stamps its requests does. Prints the times it admitted (``ADMITTED
t...``) and its count of checks (``CHECKS n``).
"""

from __future__ import annotations

import sys
import time

import redis

from ratecell.redis import RedisLimiter


def main() -> None:
    url, key = sys.argv[1], sys.argv[2]
    limit, period, start, run = (int(a) for a in sys.argv[3:7])
    algorithm = sys.argv[7] if len(sys.argv) > 7 else "fixed_window"
    send_at = (sys.argv[8] if len(sys.argv) > 8 else "at") == "at"
    client = redis.Redis.from_url(url)
    # One clock for the dates and the server (one machine): no skew with AT;
    # without, the default 1 ms.
    skew = 0 if send_at else 0.001
    with RedisLimiter(
        client, algorithm, limit, period, mode="leased", send_at=send_at, skew=skew
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

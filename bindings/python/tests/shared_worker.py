"""A Python worker process for test_shared.py: the same protocol as
bindings/c/tests/shared_worker.c (prints "@ready", waits for a line on
stdin, then THREADS threads check keys 0..KEYS-1 at the instant T and it
prints "@<admitted>").

Usage: python shared_worker.py PATH ALGORITHM LIMIT PERIOD_NS CAPACITY T KEYS THREADS
"""

from __future__ import annotations

import sys
import threading

import ratecell


def main(argv: list[str]) -> int:
    path, algorithm = argv[1], argv[2]
    limit, period_ns, capacity, t, keys, threads = (int(a) for a in argv[3:9])
    limiter = ratecell.Limiter(algorithm, limit, period_ns, capacity=capacity, shared=path)
    print("@ready", flush=True)
    sys.stdin.readline()
    counts = [0] * threads

    def run(i: int) -> None:
        for key in range(keys):
            for _ in range(limit + 4):
                counts[i] += limiter.check(key, 1, at=t).allowed

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(f"@{sum(counts)}", flush=True)
    limiter.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""ratecell from Python, side by side with the `limits` package.

Measures the cost of one rate-limit decision, in µs per call, for:

- pyrate-limiter's Limiter.try_acquire (in-memory, non-blocking);
- the floor: the bare ctypes calls ratecell's methods make, arguments ready,
  and the bare calls into the C extension module that check() and allow()
  make where it is built (RATECELL_NO_SPEEDUPS=1 measures the ctypes path);
- limits (MemoryStorage) FixedWindowRateLimiter.hit and
  MovingWindowRateLimiter.hit, the in-memory limiters Python applications
  use today (Flask-Limiter, SlowAPI);
- ratecell.Limiter with the matching algorithms (fixed_window, and
  sliding_log, the exact moving window), plus gcra and sliding_window;
  check() returns a full Decision, allow() only a bool;
- ratecell's batch call (check_batch over an array('Q') or a numpy uint64
  array), reported per key.

Two scenarios: one hot key, and --keys distinct keys (default 100 000)
visited round-robin, each limiter sized for all of them. Every limit is
100 per second, so the hot key is mostly denied and the many keys are mostly
admitted. Each figure is the best of --repeat rounds; a round times every
implementation once, one pass each (--calls calls on the hot key, or one
visit of every key), on limiters that stay alive across rounds.

    python bindings/python/bench.py                 # the README's table
    python bindings/python/bench.py --smoke         # seconds; checks it runs
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
from array import array
from collections.abc import Callable, Sequence

import ratecell

try:
    import numpy as np
except ImportError:
    np = None

try:
    import limits
    from limits import RateLimitItemPerSecond, storage, strategies
except ImportError:
    limits = None

try:
    import pyrate_limiter
except ImportError:
    pyrate_limiter = None

LIMIT = 100
PERIOD_NS = 1_000_000_000


def timed(run: Callable[[], int]) -> float:
    """µs per call of one run; `run` returns how many calls it made."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        calls = run()
        elapsed = time.perf_counter_ns() - start
    finally:
        gc.enable()
    return elapsed / calls / 1000


def loop(fn: Callable[..., object], keys: Sequence[object]) -> Callable[[], int]:
    def run() -> int:
        for k in keys:
            fn(k)
        return len(keys)

    return run


def batch(fn: Callable[..., object], keys: object, n: int) -> Callable[[], int]:
    def run() -> int:
        fn(keys)
        return n

    return run


def rows(args: argparse.Namespace) -> list[tuple[str, float, float]]:
    hot_int = [42] * args.calls
    hot_str = ["user:42"] * args.calls
    many_int = list(range(args.keys))
    many_str = [f"user:{k}" for k in range(args.keys)]
    # (name, one-key run, many-keys run), each over its own fresh limiter.
    runs: list[tuple[str, Callable[[], int], Callable[[], int]]] = []

    def measure(name: str, make: Callable[[list, list], Callable[[], int]]) -> None:
        """`make(int keys, str keys)` builds a fresh limiter over the
        scenario's keys and returns its timed run."""
        runs.append((name, make(hot_int, hot_str), make(many_int, many_str)))

    if limits is not None:
        item = RateLimitItemPerSecond(LIMIT, 1)
        for label, strategy in (
            ("FixedWindowRateLimiter", strategies.FixedWindowRateLimiter),
            ("MovingWindowRateLimiter", strategies.MovingWindowRateLimiter),
        ):

            def make_limits(ints, strs, strategy=strategy):
                limiter = strategy(storage.MemoryStorage())
                return loop(lambda k: limiter.hit(item, k), strs)

            measure(f"limits {label}.hit (memory)", make_limits)

    if pyrate_limiter is not None:

        def make_pyrate(ints, strs):
            # Its default bucket factory keeps one in-memory bucket for every
            # name: the call, not per-key limiting, is what is compared.
            rate = pyrate_limiter.Rate(LIMIT, pyrate_limiter.Duration.SECOND)
            limiter = pyrate_limiter.Limiter(rate)
            return loop(lambda k: limiter.try_acquire(k, blocking=False), strs)

        measure("pyrate-limiter Limiter.try_acquire (in-memory)", make_pyrate)

    def ratecell_limiter(algorithm: str, n_keys: int) -> ratecell.Limiter:
        return ratecell.Limiter(algorithm, LIMIT, PERIOD_NS, capacity=max(n_keys, 1))

    def keys_of(ints: list) -> int:
        return len(set(ints))

    for algorithm in ("fixed_window", "sliding_log", "gcra", "sliding_window"):

        def make_check(ints, strs, algorithm=algorithm):
            lim = ratecell_limiter(algorithm, keys_of(ints))
            return loop(lim.check, ints)

        measure(f"ratecell {algorithm} check(int)", make_check)

    def make_check_str(ints, strs):
        lim = ratecell_limiter("fixed_window", keys_of(ints))
        return loop(lim.check, strs)

    measure("ratecell fixed_window check(str)", make_check_str)

    def make_allow(ints, strs):
        lim = ratecell_limiter("fixed_window", keys_of(ints))
        return loop(lim.allow, ints)

    measure("ratecell fixed_window allow(int)", make_allow)

    def make_batch(ints, strs):
        lim = ratecell_limiter("fixed_window", keys_of(ints))
        return batch(lim.check_batch, array("Q", ints), len(ints))

    measure("ratecell fixed_window check_batch(array('Q')), per key", make_batch)

    if np is not None:

        def make_batch_np(ints, strs):
            lim = ratecell_limiter("fixed_window", keys_of(ints))
            keys = np.array(ints, dtype=np.uint64)
            flags = np.empty(len(ints), dtype=bool)
            return batch(lambda k: lim.check_batch(k, out=flags), keys, len(ints))

        measure("ratecell fixed_window check_batch(numpy, out=), per key", make_batch_np)

    def make_batch_full(ints, strs):
        lim = ratecell_limiter("fixed_window", keys_of(ints))
        return batch(lambda k: lim.check_batch(k, decisions=True), array("Q", ints), len(ints))

    measure("ratecell fixed_window check_batch(decisions=True), per key", make_batch_full)

    # The floor: the bare ctypes calls the methods below make, with their
    # arguments ready (key already encoded, out-struct already allocated).
    from ratecell import _ffi

    def make_floor_allow(ints, strs):
        lim = ratecell_limiter("fixed_window", keys_of(ints))
        fn, h = _ffi.lib.ratecell_allow, lim._h
        return loop(lambda k: fn(h, k), ints)  # h keeps the limiter alive

    measure("floor: bare ctypes ratecell_allow(h, int)", make_floor_allow)

    def make_floor_check_request(ints, strs):
        lim = ratecell_limiter("fixed_window", keys_of(ints))
        fn, h, out = _ffi.lib.ratecell_check, lim._h, _ffi.CDecision()
        requests = [
            _ffi.CRequest(_ffi.REQUEST_SIZE, 0, 0, raw, len(raw), 1, _ffi.NOW)
            for raw in (s.encode() for s in strs)
        ]
        return loop(lambda r: fn(h, r, out), requests)

    measure("floor: bare ctypes ratecell_check(h, request of bytes, out)", make_floor_check_request)

    # The floor of check() and allow() when they run in the C extension
    # module (the default where it is built): its functions called directly.
    from ratecell import _limiter

    sp = getattr(_limiter, "_speedups", None)
    if sp is not None:

        def make_floor_sp_allow(ints, strs):
            lim = ratecell_limiter("fixed_window", keys_of(ints))
            fn, h = sp.allow, lim._h
            return loop(lambda k: fn(h, k, 1, None, None), ints)

        measure("floor: bare _speedups.allow(h, int, 1, None, None)", make_floor_sp_allow)

        def make_floor_sp_check(ints, strs):
            lim = ratecell_limiter("fixed_window", keys_of(ints))
            fn, h = sp.check, lim._h
            return loop(lambda k: fn(h, k, 1, None, None), strs)

        measure("floor: bare _speedups.check(h, str, 1, None, None)", make_floor_sp_check)

    # Rounds interleave the implementations, so that a burst of load from
    # elsewhere on the machine hits all of them alike; each keeps its best.
    best = {name: [float("inf"), float("inf")] for name, _, _ in runs}
    for round_ in range(args.repeat):
        for name, one, many in runs:
            best[name][0] = min(best[name][0], timed(one))
            best[name][1] = min(best[name][1], timed(many))
        print(f"  round {round_ + 1}/{args.repeat} done", file=sys.stderr, flush=True)
    return [(name, best[name][0], best[name][1]) for name, _, _ in runs]


def environment() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = f", load average {os.getloadavg()[0]:.1f}"
    peers = f"limits {limits.__version__}" if limits is not None else "limits not installed"
    if pyrate_limiter is not None:
        from importlib.metadata import version

        peers += f", pyrate-limiter {version('pyrate-limiter')}"
    from ratecell import _limiter

    path = "C extension" if getattr(_limiter, "_speedups", None) is not None else "ctypes only"
    return (
        f"Python {platform.python_version()}, ratecell {ratecell.library_version()} "
        f"({path}), {peers}, "
        f"numpy {np.__version__ if np is not None else 'not installed'}; "
        f"{cpu}, {os.cpu_count()} CPUs{load}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100_000, help="distinct keys (default 100000)")
    parser.add_argument("--calls", type=int, default=200_000, help="calls per pass on the hot key")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds; the best is shown")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks the script runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.keys, args.calls, args.repeat = 200, 500, 1
    if min(args.keys, args.calls, args.repeat) < 1:
        parser.error("--keys, --calls and --repeat must be at least 1")

    print(f"measuring ({environment()})", file=sys.stderr)
    table = rows(args)
    print(f"\nµs per call (best of {args.repeat}); limit {LIMIT}/s; {environment()}\n")
    print(f"| implementation | one key | {args.keys:,} keys |")
    print("|---|---:|---:|")
    for name, one, many in table:
        print(f"| {name} | {one:.3f} | {many:.3f} |")
    if limits is None:
        print("\n(limits is not installed: `pip install limits` to measure it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

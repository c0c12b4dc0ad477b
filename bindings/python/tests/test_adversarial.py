"""Regression tests for issue 20 (adversarial testing): copies of a limiter,
fork, batch buffers, and numbers too large for a float."""

from __future__ import annotations

import asyncio
import copy
import datetime
import ctypes
import multiprocessing
import pickle
import queue
import threading
import time
from array import array
from typing import Any

import pytest
from conftest import HOUR

import ratecell
from ratecell._limiter import _u64_buffer

T0 = 1_700_000_000_000_000_000


def keyed() -> ratecell.Limiter:
    return ratecell.Limiter("gcra", 2, HOUR, capacity=64)


# -- 1. one owner per native handle ------------------------------------------


@pytest.mark.parametrize(
    "duplicate",
    [copy.copy, copy.deepcopy, pickle.dumps, lambda lim: pickle.dumps(lim, protocol=2)],
    ids=["copy", "deepcopy", "pickle", "pickle-2"],
)
def test_a_limiter_cannot_be_copied_or_pickled(duplicate: Any) -> None:
    lim = keyed()
    with pytest.raises(TypeError, match="cannot be copied or pickled") as info:
        duplicate(lim)
    # It says how to share a limit between processes: a shared region on
    # one machine, the Redis module across machines.
    assert "shared=" in str(info.value) and "Redis module" in str(info.value)
    # The original is untouched and still the only owner.
    assert lim.check(1, 1, at=T0).allowed
    lim.close()


def test_the_native_handle_cannot_be_copied_either() -> None:
    lim = keyed()
    handle = lim._h
    for duplicate in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError):
            duplicate(handle)
    del handle
    lim.close()


def _use(lim: ratecell.Limiter) -> None:  # pragma: no cover - never runs
    lim.check(1)


def test_a_limiter_cannot_be_sent_to_a_spawned_process() -> None:
    lim = keyed()
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_use, args=(lim,))
    with pytest.raises(TypeError, match="cannot be copied or pickled"):
        p.start()
    lim.close()


# -- 2. fork ----------------------------------------------------------------


def _in_child(before: ratecell.Limiter, results: Any) -> None:
    """In a forked child: coarse limiters made before and after the fork
    must see time pass (100/s, one at a time: the next is 10 ms away)."""
    failures = []
    after = ratecell.Limiter("gcra", 100, period=1, burst=1, clock="coarse")
    # The child's refresher must move the time on by 10 ms within 200
    # sleeps of 10 ms (attempts: 2 s idle, longer on a busy machine; a
    # frozen clock never moves).
    t0 = before.now_ns()
    for _ in range(200):
        if before.now_ns() > t0 + 10_000_000:
            break
        time.sleep(0.01)
    if before.now_ns() <= t0 + 10_000_000:
        failures.append(f"the coarse time stood still at {t0}")
    # The bound is the acquire's own timeout, far beyond the 10 ms turn: a
    # clock that moves admits before it however busy the machine, a frozen
    # one never does.
    for name, lim in (("made before the fork", before), ("made in the child", after)):
        lim.check()
        try:
            lim.acquire(timeout=10)
        except ratecell.TimedOut as e:
            failures.append(f"{name}: {e!r}")
    results.put(failures)


def test_coarse_limiters_keep_time_in_a_forked_child() -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    before = ratecell.Limiter("gcra", 100, period=1, burst=1, clock="coarse")
    shared = ratecell.Limiter("gcra", 1000, period=1, capacity=64, clock="coarse")
    for key in range(8):
        shared.check(key)
    stop = threading.Event()

    def checker(i: int) -> None:
        # Existing keys only: the latch a key insertion takes is another
        # test's subject.
        while not stop.is_set():
            before.check(cost=0)
            shared.check(i, 0)

    threads = [threading.Thread(target=checker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        children = [ctx.Process(target=_in_child, args=(before, results)) for _ in range(4)]
        for c in children:
            c.start()
        # Beyond each child's own bounds (200 sleeps, two 10 s acquires).
        outcomes = [results.get(timeout=60) for _ in children]
        for c in children:
            c.join(timeout=10)
            if c.is_alive():  # pragma: no cover - the defect's symptom
                c.kill()
                c.join()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert outcomes == [[]] * len(children)
    assert all(c.exitcode == 0 for c in children)


BLOCK_LIMIT = 20
BLOCK_KEYS = 16


def _block_limiters() -> list[ratecell.Limiter]:
    """Keyed and direct limiters of the block algorithms, whose per-key
    latch records no holder: a fork must never copy one held."""
    out = []
    for capacity in (64, 0):
        out.append(ratecell.Limiter("sliding_log", BLOCK_LIMIT, HOUR, capacity=capacity))
        out.append(
            ratecell.Limiter(
                "bucketed_window", BLOCK_LIMIT, HOUR, sub_windows=6, capacity=capacity
            )
        )
    return out


def _block_child(limiters: list[ratecell.Limiter], counted: list[list[int]], results: Any) -> None:
    """In a forked child: every key answers, and admits at most what the
    inherited state had left (the parent's counts, copied at the fork, are
    at most what it really admitted: each is bumped after its check)."""
    failures = []
    for n, lim in enumerate(limiters):
        for key in range(BLOCK_KEYS):
            admitted = sum(lim.check(key, 1, at=T0).allowed for _ in range(BLOCK_LIMIT + 5))
            if counted[n][key] + admitted > BLOCK_LIMIT:
                failures.append(
                    f"limiter {n} key {key}: {counted[n][key]} counted before the fork,"
                    f" {admitted} more in the child"
                )
    results.put(failures)


def test_a_fork_while_block_latches_are_held_never_hangs_the_child() -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    limiters = _block_limiters()
    counted = [[0] * BLOCK_KEYS for _ in limiters]
    stop = threading.Event()

    def hammer(seed: int) -> None:
        i, fresh = seed, (seed + 1) << 40
        while not stop.is_set():
            i += 1
            key = (i * 7) % BLOCK_KEYS
            for n, lim in enumerate(limiters):
                if lim.check(key, 1, at=T0).allowed:
                    counted[n][key] += 1
            fresh += 1
            limiters[0].check(fresh, 1, at=T0)  # new keys: evictions latch places

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    children = []
    outcomes: list[Any] = []
    try:
        for _ in range(20):
            time.sleep(0.005)
            c = ctx.Process(target=_block_child, args=(limiters, counted, results))
            c.start()
            children.append(c)
        # Hung children (the defect) fail the test after 60 s in all, not
        # the CI run.
        deadline = time.monotonic() + 60
        for _ in children:
            try:
                outcomes.append(results.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:  # pragma: no cover - the defect's symptom
                outcomes.append("hung")
    finally:
        stop.set()
        for t in threads:
            t.join()
        for c in children:
            c.join(timeout=5)
            if c.is_alive():  # pragma: no cover - the defect's symptom
                c.kill()
                c.join()
    assert outcomes == [[]] * len(children)


# -- 8. batch buffers --------------------------------------------------------


def _address(pointer: Any) -> int:
    if pointer is None or isinstance(pointer, int):
        return pointer or 0
    return ctypes.addressof(pointer)


def test_a_misaligned_key_buffer_is_read_from_an_aligned_copy() -> None:
    raw = bytearray(4 * 8 + 1)
    keys = memoryview(raw)[1:].cast("Q")
    keys[0], keys[1], keys[2], keys[3] = 1, 1, 1, 2
    pointer, n, _keep = _u64_buffer(keys, "keys")
    assert n == 4 and _address(pointer) % 8 == 0
    lim = keyed()
    assert list(lim.check_batch(keys, at=T0)) == [1, 1, 0, 1]


def test_a_misaligned_numpy_array_is_read_from_an_aligned_copy() -> None:
    np = pytest.importorskip("numpy")
    raw = bytearray(4 * 8 + 1)
    keys = np.frombuffer(raw, dtype=np.uint64, offset=1)
    keys[:] = [1, 1, 1, 2]
    pointer, n, _keep = _u64_buffer(keys, "keys")
    assert n == 4 and _address(pointer) % 8 == 0
    lim = keyed()
    assert list(lim.check_batch(keys, at=T0)) == [1, 1, 0, 1]


def test_out_may_not_overlap_the_keys_or_costs() -> None:
    lim = keyed()
    raw = bytearray(4 * 8)
    keys = memoryview(raw).cast("Q")
    with pytest.raises(ValueError, match="out overlaps keys"):
        lim.check_batch(keys, at=T0, out=raw)
    costs = array("Q", [1, 1, 1, 1])
    with pytest.raises(ValueError, match="out overlaps costs"):
        lim.check_batch([1, 2, 3, 4], costs, at=T0, out=memoryview(costs).cast("B"))
    # A separate buffer is fine.
    out = bytearray(4)
    assert lim.check_batch(keys, at=T0, out=out) is out


@pytest.mark.parametrize("keys", [b"abc", bytearray(b"abc"), "abc", memoryview(b"abcdefgh")])
def test_bytes_are_not_a_batch_of_keys(keys: Any) -> None:
    lim = keyed()
    with pytest.raises(TypeError, match="keys"):
        lim.check_batch(keys)


def test_bools_are_not_keys_in_a_batch_either() -> None:
    lim = keyed()
    with pytest.raises(TypeError):
        lim.check(True)
    with pytest.raises(TypeError, match=r"keys\[0\] must be an int, not bool"):
        lim.check_batch([True, False])
    with pytest.raises(TypeError, match=r"costs\[1\] must be an int, not bool"):
        lim.check_batch([1, 2], [1, True])


def test_numpy_arrays_of_any_byte_order_or_objects_are_converted() -> None:
    np = pytest.importorskip("numpy")
    lim = keyed()
    for keys in (
        np.array([1, 1, 1, 2], dtype=">u8"),
        np.array([1, 1, 1, 2], dtype=object),
        np.array([1, 1, 1, 2], dtype=np.uint32),
    ):
        lim.reset(1)
        lim.reset(2)
        assert list(lim.check_batch(keys, at=T0)) == [1, 1, 0, 1], keys.dtype
    with pytest.raises(TypeError, match=r"keys\[0\] must be an int, not bool"):
        lim.check_batch(np.array([True, False]))
    with pytest.raises(TypeError, match="keys"):
        lim.check_batch(np.array(["a"], dtype=object))


# -- 10. numbers too large for a float ---------------------------------------


def test_a_period_too_large_for_a_float_is_invalid_period() -> None:
    with pytest.raises(ratecell.InvalidPeriod, match="period"):
        ratecell.Limiter("gcra", 1, period=1e300)
    with pytest.raises(ratecell.InvalidPeriod, match="period"):
        ratecell.Limiter("gcra", 1, period=10**400)


def test_a_timeout_too_large_is_a_value_error_naming_timeout() -> None:
    lim = keyed()
    # Finite timeouts beyond what the C ABI can hold (about 584 years) are
    # refused, never silently made "forever".
    for timeout in (10**400, 10**30, 1e300, datetime.timedelta.max):
        with pytest.raises(ValueError, match="timeout"):
            lim.acquire(1, timeout=timeout)
    # Nothing was taken by the refused calls.
    assert lim.check(1, 0, at=T0).remaining == 2
    # None and float('inf') still mean wait without limit (admitted at
    # once here: the key is fresh).
    assert lim.acquire(1, timeout=float("inf")).allowed
    assert lim.acquire(1, timeout=None).allowed
    assert lim.acquire(2, timeout=18_446_744_073).allowed


def test_the_asgi_acquire_checks_its_timeout_alike() -> None:
    from ratecell import asgi

    lim = keyed()
    with pytest.raises(ValueError, match="timeout"):
        asyncio.run(asgi.acquire(lim, 1, timeout=10**400))
    assert asyncio.run(asgi.acquire(lim, 1, timeout=float("inf"))).allowed

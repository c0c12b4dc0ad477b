"""The Limiter API: lifetime, keys, batches, acquire, statistics, threads."""

from __future__ import annotations

import ctypes
import dataclasses
import datetime
import math
import os
import re
import sys
import threading
import time
from array import array
from pathlib import Path

import pytest
from conftest import HOUR, MINUTE, SECOND, T0

import ratecell
from ratecell import Decision, Limiter, LimiterClosed


try:
    import numpy as np
except ImportError:  # scripts/python-tests.sh installs it; a bare run skips
    np = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy is not installed")


# -- package and library ----------------------------------------------------


def test_versions_agree(repo):
    cargo = (repo / "Cargo.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', cargo, re.M)[1]
    assert ratecell.library_version() == version
    assert ratecell.__version__ == version


def test_the_installed_package_bundles_its_library():
    # scripts/python-tests.sh sets this for the venv it installs into: the
    # library must come from the package, not from the repository.
    if not os.environ.get("RATECELL_EXPECT_BUNDLED"):
        pytest.skip("only meaningful for an installed package")
    path = Path(ratecell.library_path())
    assert path.parent == Path(ratecell.__file__).parent
    assert path.is_file()


# -- lifetime ----------------------------------------------------------------


def test_with_closes_and_close_is_idempotent():
    with Limiter("gcra", 10, SECOND) as lim:
        assert lim.check().allowed
        assert not lim.closed
    assert lim.closed
    lim.close()
    lim.close()
    assert "closed" in repr(lim)


@pytest.mark.parametrize(
    "call",
    [
        lambda lim: lim.check(),
        lambda lim: lim.check(b"k"),
        lambda lim: lim.allow(),
        lambda lim: lim.allow(0, 1, at=T0),
        lambda lim: lim.check(0, 1, at=T0),
        lambda lim: lim.check(b"k"),
        lambda lim: lim.check("k", 1, at=T0),
        lambda lim: lim.check_batch([1, 2]),
        lambda lim: lim.check_batch([1], at=T0),
        lambda lim: lim.acquire(timeout=0),
        lambda lim: lim.reset(1),
        lambda lim: lim.stats(),
        lambda lim: lim.now_ns(),
        lambda lim: lim.config,
        lambda lim: lim.__enter__(),
    ],
)
def test_every_call_after_close_raises(call):
    lim = Limiter("gcra", 10, SECOND, capacity=16)
    lim.close()
    with pytest.raises(LimiterClosed, match="closed"):
        call(lim)


def test_close_while_another_thread_waits_in_acquire():
    # The C object must outlive the call in flight: the waiter finishes with
    # a real decision, and only then is the limiter freed.
    lim = Limiter("gcra", 1, period=0.3)
    assert lim.check().allowed
    result: dict[str, object] = {}

    def waiter() -> None:
        result["decision"] = lim.acquire(timeout=5)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.05)
    lim.close()
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(result["decision"], Decision) and result["decision"].allowed
    with pytest.raises(LimiterClosed):
        lim.check()


# -- decisions ---------------------------------------------------------------


def test_decision_is_a_frozen_readable_record(make):
    d = make("leaky_bucket", 10, SECOND, burst=3).check(0, 1, at=T0)
    d2 = make("leaky_bucket", 10, SECOND, burst=3).check(0, 1, at=T0)
    assert d == d2 and hash(d) == hash(d2)
    assert dataclasses.asdict(d) == {
        "allowed": True,
        "limit": 3,
        "remaining": 2,
        "retry_after_ns": 0,
        "reset_after_ns": 100_000_000,
        "wait_ns": 0,
    }
    assert d.reset_after == pytest.approx(0.1)
    assert bool(d) is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.allowed = False  # type: ignore[misc]
    assert "allowed=True" in repr(d)


def test_now_ns_is_unix_time(make):
    lim = make("gcra", 10, SECOND)
    assert abs(lim.now_ns() - time.time_ns()) < 2 * SECOND
    assert abs(make("gcra", 10, SECOND, clock="coarse").now_ns() - time.time_ns()) < 2 * SECOND


def test_check_uses_the_limiter_clock(make):
    lim = make("fixed_window", 3, HOUR)
    before = time.time_ns()
    d = lim.check()
    # reset is the end of the current hour window, measured from "now".
    assert 0 < d.reset_after_ns <= HOUR
    off = (before + d.reset_after_ns) % HOUR
    assert min(off, HOUR - off) < 2 * SECOND
    assert [lim.allow() for _ in range(3)] == [True, True, False]


# -- the yes/no check --------------------------------------------------------


@pytest.mark.parametrize("capacity", [0, 16])
def test_allow_three_then_denied(make, capacity):
    lim = make("fixed_window", 3, HOUR, capacity=capacity)
    answers = [lim.allow(1, 1, at=T0 + t) for t in (0, SECOND, MINUTE, MINUTE)]
    assert answers == [True, True, True, False]
    # A fresh key is admitted only when the limiter keeps keys apart.
    assert lim.allow(2, 1, at=T0 + MINUTE) is (capacity > 0)
    assert lim.allow(1, 1, at=T0 + HOUR - 1) is False
    assert lim.allow(1, 1, at=T0 + HOUR) is True
    assert lim.stats().checks == 7


@pytest.mark.parametrize("capacity", [0, 16])
@pytest.mark.parametrize("algorithm", list(ratecell.Algorithm))
def test_allow_agrees_with_check(make, algorithm, capacity):
    # Mostly int keys at cost 1 (the yes/no call), and the byte keys and
    # other costs that take the full check.
    yes_no = make(algorithm, 3, MINUTE, capacity=capacity)
    full = make(algorithm, 3, MINUTE, capacity=capacity)
    keys = [0, 1, 2, 2**64 - 1, b"k", "k"]
    now, answers = T0, []
    for i in range(200):
        key, cost = keys[i * 7 % len(keys)], (1, 1, 1, 0, 1, 2)[i % 6]
        now += i * 5 % 4 * 3 * SECOND  # about 13 requests a minute
        got = yes_no.allow(key, cost, at=now)
        assert got is full.check(key, cost, at=now).allowed, (i, key, cost)
        answers.append(got)
    assert True in answers and False in answers
    assert yes_no.stats() == full.stats()


def test_allow_reads_the_limiter_clock(make):
    lim = make("gcra", 2, HOUR)  # no window edge for the real clock to cross
    assert [lim.allow(k) for k in (7, 8, 9)] == [True, True, False]
    assert lim.allow(b"any", 0) is False  # a peek, through check


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((2**64, 1, T0), ValueError),
        ((1.0, 1, T0), TypeError),
        ((1, 1.0, T0), TypeError),
        ((1, 1, -5), ValueError),
        ((1, 1, 2**64 - 1), ValueError),
        ((1, 1, "now"), TypeError),
    ],
)
def test_allow_refuses_what_check_refuses(make, args, error):
    lim = make("gcra", 10, SECOND, capacity=16)
    key, cost, at = args
    with pytest.raises(error):
        lim.allow(key, cost, at=at)
    assert lim.stats().checks == 0


# -- keys --------------------------------------------------------------------


def test_capacity_zero_ignores_keys(make):
    lim = make("fixed_window", 2, HOUR)
    assert lim.check(1, 1, at=T0).allowed
    assert lim.check(2, 1, at=T0).allowed
    assert not lim.check(b"anyone", 1, at=T0).allowed


def test_keys_are_independent(make):
    lim = make("fixed_window", 2, HOUR, capacity=64)
    for key in (0, 1, 2**64 - 1, b"", b"a", "user:42"):
        assert lim.check(key, 2, at=T0).allowed, key
        assert not lim.check(key, 1, at=T0).allowed, key


def test_every_spelling_of_a_byte_key_is_the_same_key(make):
    lim = make("fixed_window", 6, HOUR, capacity=64)
    raw = "clé".encode()
    spellings = [
        raw,
        "clé",
        bytearray(raw),
        memoryview(raw),
        memoryview(b"x" + raw)[1:],
        memoryview(bytes(b for c in raw for b in (c, 0)))[::2],  # not contiguous
    ]
    remaining = [lim.check(k, 1, at=T0).remaining for k in spellings]
    assert remaining == [5, 4, 3, 2, 1, 0]
    assert not lim.check(raw, 1, at=T0).allowed


def test_an_int_key_is_its_eight_little_endian_bytes(make):
    lim = make("sliding_log", 3, HOUR, capacity=64)
    key = 0x0102030405060708
    assert lim.check(key, 1, at=T0).remaining == 2
    assert lim.check(key.to_bytes(8, "little"), 1, at=T0).remaining == 1
    assert lim.check(key.to_bytes(8, "big"), 1, at=T0).remaining == 2
    # numpy integers and other __index__ types are ints.
    if np is not None:
        assert lim.check(np.uint64(key), 1, at=T0).remaining == 0


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((-1, 1, T0), ValueError),
        ((2**64, 1, T0), ValueError),
        ((1.0, 1, T0), TypeError),
        ((None, 1, T0), TypeError),
        ((1, -1, T0), ValueError),
        ((1, 2**64, T0), ValueError),
        ((1, 1.5, T0), TypeError),
        ((1, 1, -5), ValueError),
        ((1, 1, float(T0)), TypeError),
        ((1, 1, 2**64 - 1), ValueError),  # RATECELL_NOW: not a time
        (([1], 1, T0), TypeError),
    ],
)
def test_out_of_range_arguments_are_refused_not_wrapped(make, args, error):
    lim = make("gcra", 10, SECOND, capacity=16)
    key, cost, at = args
    with pytest.raises(error):
        lim.check(key, cost, at=at)
    assert lim.stats().checks == 0


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda lim: lim.check(-1), ValueError),
        (lambda lim: lim.check(2**64), ValueError),
        (lambda lim: lim.check(1, -1), ValueError),
        (lambda lim: lim.check(1.5), TypeError),
        (lambda lim: lim.allow(2**64), ValueError),
        (lambda lim: lim.allow(1, 0.5), TypeError),
        (lambda lim: lim.allow(True), TypeError),
        (lambda lim: lim.check(7, tier=1), ratecell.InvalidTier),
        (lambda lim: lim.check(7, tier=1.0), TypeError),
        (lambda lim: lim.allow(7, tier=-1), ratecell.InvalidTier),
        (lambda lim: lim.check(7, at=2**64), ValueError),
        (lambda lim: lim.check(b"k", -1), ValueError),
        (lambda lim: lim.acquire(-1), ValueError),
        (lambda lim: lim.acquire(1, 2**64), ValueError),
        (lambda lim: lim.reset(-1), ValueError),
    ],
)
def test_argument_errors_of_the_clocked_calls(make, call, error):
    lim = make("gcra", 10, SECOND, capacity=16)
    with pytest.raises(error):
        call(lim)
    assert lim.stats().checks == 0


def test_reset(make):
    lim = make("fixed_window", 1, HOUR, capacity=64)
    for key in (7, b"seven"):
        assert lim.check(key, 1, at=T0).allowed
        assert not lim.check(key, 1, at=T0).allowed
        lim.reset(key)
        assert lim.check(key, 1, at=T0).allowed
    shared = make("fixed_window", 1, HOUR)
    assert shared.check(0, 1, at=T0).allowed
    shared.reset()
    assert shared.check(0, 1, at=T0).allowed


# -- batches -----------------------------------------------------------------

KEYS = [5, 1, 5, 2**64 - 1, 5, 1, 0, 5]
COSTS = [1, 2, 1, 3, 0, 2, 1, 1]


def _sequential(algorithm: str, keys, costs, now: int) -> list[Decision]:
    with Limiter(algorithm, 3, HOUR, capacity=64) as twin:
        return [twin.check(k, c, at=now) for k, c in zip(keys, costs, strict=True)]


@pytest.mark.parametrize("algorithm", [a.spec_name for a in ratecell.Algorithm])
def test_a_batch_decides_as_sequential_checks(make, algorithm):
    lim = make(algorithm, 3, HOUR, capacity=64)
    flags, decisions = lim.check_batch(KEYS, COSTS, at=T0, decisions=True)
    expected = _sequential(algorithm, KEYS, COSTS, T0)
    assert decisions == expected
    assert list(flags) == [int(d.allowed) for d in expected]
    assert isinstance(flags, bytearray)


def test_batch_without_costs_costs_one_each(make):
    lim = make("fixed_window", 2, HOUR, capacity=64)
    assert list(lim.check_batch([9, 9, 9, 8], at=T0)) == [1, 1, 0, 1]
    assert list(lim.check_batch([10, 10, 10])) == [1, 1, 0]


@pytest.mark.parametrize(
    "container",
    [
        list,
        tuple,
        lambda xs: (x for x in xs),
        lambda xs: array("Q", xs),
        lambda xs: array("L", xs) if array("L").itemsize == 8 else array("Q", xs),
        lambda xs: memoryview(array("Q", xs)),
        lambda xs: memoryview(array("Q", xs)).toreadonly(),
        lambda xs: (ctypes.c_uint64 * len(xs))(*xs),
    ],
    ids=["list", "tuple", "generator", "array-Q", "array-L", "memoryview", "readonly", "ctypes"],
)
def test_batch_accepts_any_buffer_or_iterable(make, container):
    lim = make("sliding_log", 3, HOUR, capacity=64)
    _, decisions = lim.check_batch(container(KEYS), container(COSTS), at=T0, decisions=True)
    assert decisions == _sequential("sliding_log", KEYS, COSTS, T0)


def test_a_writable_uint64_buffer_is_read_in_place():
    from ratecell._limiter import _u64_buffer

    keys = array("Q", KEYS)
    ptr, n, _ = _u64_buffer(keys, "keys")
    assert n == len(KEYS)
    assert ctypes.addressof(ptr) == keys.buffer_info()[0]


@needs_numpy
def test_numpy_uint64_arrays_are_read_in_place():
    from ratecell._limiter import _u64_buffer

    keys = np.array(KEYS, dtype=np.uint64)
    ptr, n, _ = _u64_buffer(keys, "keys")
    assert (ptr, n) == (keys.ctypes.data, len(KEYS))
    keys.flags.writeable = False
    ptr, _, _ = _u64_buffer(keys, "keys")
    assert ptr == keys.ctypes.data
    # A strided view cannot be read in place: it is converted.
    strided = np.array(KEYS * 2, dtype=np.uint64)[::2]
    ptr, n, keep = _u64_buffer(strided, "keys")
    assert n == len(KEYS) and list(keep) == list(strided)


@needs_numpy
@pytest.mark.parametrize(
    "make_keys",
    [
        lambda: np.array(KEYS, dtype=np.uint64),
        lambda: np.array(KEYS * 2, dtype=np.uint64)[::2],
        lambda: np.array(KEYS[:3] + KEYS[4:], dtype=np.int64),  # int64: converted
    ],
    ids=["uint64", "strided", "int64"],
)
def test_batch_with_numpy(make, make_keys):
    keys = make_keys()
    costs = np.ones(len(keys), dtype=np.uint64)
    lim = make("fixed_window", 3, HOUR, capacity=64)
    out = np.zeros(len(keys), dtype=bool)
    result = lim.check_batch(keys, costs, at=T0, out=out)
    assert result is out
    expected = _sequential("fixed_window", [int(k) for k in keys], [1] * len(keys), T0)
    assert out.tolist() == [d.allowed for d in expected]


@needs_numpy
def test_batch_refuses_negative_numpy_keys(make):
    lim = make("gcra", 10, SECOND, capacity=16)
    with pytest.raises(ValueError):
        lim.check_batch(np.array([1, -1], dtype=np.int64))
    with pytest.raises(TypeError):
        lim.check_batch(np.array([1.0, 2.0]))


def test_batch_argument_errors(make):
    lim = make("gcra", 10, SECOND, capacity=16)
    with pytest.raises(ValueError, match="2 keys but 1 costs"):
        lim.check_batch([1, 2], [1])
    with pytest.raises(ValueError):
        lim.check_batch([1, -2])
    with pytest.raises(TypeError):
        lim.check_batch(["a", "b"])
    with pytest.raises(ValueError):
        lim.check_batch([1, 2, 3], out=bytearray(2))
    with pytest.raises(TypeError):
        lim.check_batch([1, 2], out=b"\0\0")
    assert lim.stats().checks == 0


def test_empty_batch(make):
    lim = make("gcra", 10, SECOND, capacity=16)
    assert lim.check_batch([]) == bytearray()
    assert lim.check_batch(array("Q"), decisions=True) == (bytearray(), [])
    assert lim.stats().checks == 0


def test_large_batch_counts_exactly(make):
    lim = make("fixed_window", 5, HOUR, capacity=20_000)
    keys = array("Q", (i % 10_000 for i in range(60_000)))
    flags = lim.check_batch(keys, at=T0)
    assert sum(flags) == 50_000
    s = lim.stats()
    assert (s.checks, s.allowed, s.denied, s.keys_tracked) == (60_000, 50_000, 10_000, 10_000)


# -- acquire -----------------------------------------------------------------


def test_acquire_waits_for_its_turn():
    with Limiter("gcra", 1, period=0.2) as lim:
        assert lim.check().allowed
        start = time.monotonic()
        d = lim.acquire(timeout=5)
        waited = time.monotonic() - start
        assert d.allowed
        assert waited >= 0.15


def test_acquire_of_a_leaky_bucket_waits_out_its_queue_place():
    with Limiter("leaky_bucket", 10, SECOND, burst=3) as lim:  # T = 100 ms
        start = time.monotonic()
        for _ in range(3):
            lim.acquire(timeout=5)
        # The third request's turn is two intervals after the first.
        assert time.monotonic() - start >= 0.15


@pytest.mark.parametrize("timeout", [0, 0.05, datetime.timedelta(milliseconds=50)])
def test_acquire_times_out_with_its_last_decision(timeout):
    with Limiter("fixed_window", 1, HOUR, capacity=16) as lim:
        assert lim.check(b"k").allowed
        start = time.monotonic()
        with pytest.raises(ratecell.TimedOut) as info:
            lim.acquire(b"k", timeout=timeout)
        assert time.monotonic() - start < 30
        e = info.value
        assert isinstance(e, TimeoutError)
        assert not e.decision.allowed
        assert 0 < e.decision.retry_after_ns <= HOUR
        # Nothing was taken from the limit; other keys are unaffected.
        assert lim.check(b"k", 0).remaining == 0
        assert lim.acquire(b"other", timeout=0).allowed


def test_acquire_of_an_impossible_cost_fails_at_once():
    with Limiter("token_bucket", 5, SECOND) as lim:
        start = time.monotonic()
        with pytest.raises(ratecell.CostExceedsLimit) as info:
            lim.acquire(cost=6, timeout=None)
        assert time.monotonic() - start < 5
        assert info.value.decision.retry_after == math.inf
        assert isinstance(info.value, ValueError)


def test_acquire_argument_errors():
    with Limiter("gcra", 10, SECOND) as lim:
        with pytest.raises(ValueError):
            lim.acquire(timeout=-1)
        with pytest.raises(ValueError):
            lim.acquire(timeout=float("nan"))
        with pytest.raises(TypeError):
            lim.acquire(timeout="1s")
        assert lim.acquire(timeout=float("inf")).allowed
        # A finite timeout past the C ABI's range is refused, never "forever".
        with pytest.raises(ValueError, match="timeout"):
            lim.acquire(timeout=10**30)


def test_acquire_releases_the_gil_while_it_waits():
    """Another Python thread runs while one sleeps in ratecell_acquire.

    The main thread records the time of every loop turn. Had the waiter
    held the GIL through its C call, no turn could fall inside that call:
    one turn inside shows it released. How many turns fall inside is the
    scheduler's (a busy machine runs the main thread less), so that is not
    asserted.
    """
    lim = Limiter("gcra", 1, period=0.5)
    assert lim.check().allowed
    window: dict[str, float] = {}

    def waiter() -> None:
        window["start"] = time.monotonic()
        lim.acquire(timeout=10)
        window["end"] = time.monotonic()

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    try:
        thread = threading.Thread(target=waiter)
        ticks: list[float] = []
        thread.start()
        while thread.is_alive():
            ticks.append(time.monotonic())
            time.sleep(0.001)
        thread.join()
    finally:
        sys.setswitchinterval(old_interval)
        lim.close()
    start, end = window["start"], window["end"]
    assert end - start >= 0.3, "acquire returned before its turn"
    inside = [t for t in ticks if start + 0.1 < t < end - 0.1]
    assert inside, f"no main-thread turn during a {end - start:.2f} s wait"


# -- statistics --------------------------------------------------------------


def test_stats_count_checks(make):
    lim = make("fixed_window", 2, HOUR, capacity=100)
    for key in (1, 1, 1, 2, b"x"):
        lim.check(key, 1, at=T0)
    s = lim.stats()
    assert (s.checks, s.allowed, s.denied) == (5, 4, 1)
    assert s.keys_tracked == 3
    assert s.capacity >= 100
    assert s.bytes_allocated > 0
    assert (s.evictions, s.overflows) == (0, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.checks = 0  # type: ignore[misc]


def _fill(lim: Limiter, keys: range, now: int) -> int:
    """Checks new keys until the table overflows; returns how many fit."""
    before = lim.stats().overflows
    for placed, key in enumerate(keys):
        lim.check(key, 1, at=now)
        if lim.stats().overflows > before:
            return placed
    raise AssertionError("the table never overflowed")


@pytest.mark.parametrize(("overflow", "admitted"), [("deny", False), ("allow", True)])
def test_overflow_policy_and_its_count(make, overflow, admitted):
    lim = make("fixed_window", 1, HOUR, capacity=1, overflow=overflow)
    placed = _fill(lim, range(1000), T0)
    assert placed >= 1
    s = lim.stats()
    assert (s.keys_tracked, s.overflows) == (placed, 1)
    # The key that overflowed was decided by the policy, and is untracked.
    assert lim.check(placed, 1, at=T0).allowed is admitted
    assert lim.stats().overflows == 2
    assert all(lim.check(k, 0, at=T0).remaining == 0 for k in range(placed))


@pytest.mark.parametrize("overflow", ["evict", ratecell.Overflow.EVICT, 2])
def test_evict_tracks_every_new_key_in_the_place_of_a_live_one(make, overflow):
    lim = make("fixed_window", 1, HOUR, capacity=1, overflow=overflow)
    assert all(lim.check(k, 1, at=T0).allowed for k in range(1000))
    s = lim.stats()
    assert s.overflows == 0
    assert s.evicted_live == 1000 - s.keys_tracked > 0
    # The last key is tracked: spent, not untracked.
    assert not lim.check(999, 1, at=T0).allowed


def test_fresh_entries_are_evicted_losslessly(make):
    lim = make("fixed_window", 1, SECOND, capacity=1)
    placed = _fill(lim, range(1000), T0)
    # One period later every stored entry is equivalent to fresh: exactly as
    # many new keys fit, each by evicting one.
    later = range(10_000, 10_000 + placed)
    assert all(lim.check_batch(later, at=T0 + SECOND))
    s = lim.stats()
    assert (s.evictions, s.overflows, s.keys_tracked) == (placed, 1, placed)
    # Nothing was lost: the old keys are fresh again in their new window,
    # where there is room (a peek is the cost-1 request, SPEC §3: on the full
    # table it would overflow).
    assert not lim.check(0, 0, at=T0 + SECOND).allowed
    lim.reset(10_000)
    assert lim.check(0, 0, at=T0 + SECOND).remaining == 1


# -- threads -----------------------------------------------------------------


@pytest.mark.parametrize("algorithm", [a.spec_name for a in ratecell.Algorithm])
def test_threads_together_admit_exactly_the_limit(algorithm):
    limit, threads, per_thread = 500, 8, 200
    with Limiter(algorithm, limit, HOUR, capacity=64) as lim:
        admitted = [0] * threads
        barrier = threading.Barrier(threads)

        def work(i: int) -> None:
            barrier.wait()
            for j in range(per_thread):
                # Mix single checks and batches on the same two keys.
                if j % 4 == 0:
                    admitted[i] += sum(lim.check_batch([1, 2], at=T0 + j))
                else:
                    admitted[i] += lim.check(1 + j % 2, 1, at=T0 + j).allowed

        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        # Keys 1 and 2 see 800 and 1200 requests within one window of 500.
        assert sum(admitted) == 2 * limit
        s = lim.stats()
        assert (s.allowed, s.denied) == (2 * limit, threads * per_thread * 5 // 4 - 2 * limit)


def test_threads_on_the_real_clock_never_exceed_the_limit():
    with Limiter("sliding_log", 100, 60 * SECOND, capacity=16) as lim:
        counts: list[int] = []

        def work() -> None:
            counts.append(sum(lim.allow(b"shared") for _ in range(100)))

        pool = [threading.Thread(target=work) for _ in range(4)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert sum(counts) == 100

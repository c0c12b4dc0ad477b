"""The two ways Limiter.check and Limiter.allow run: the C extension module
ratecell._speedups when it is built, and the ctypes path (always present,
forced here by clearing the module's hooks, and in a subprocess with
RATECELL_NO_SPEEDUPS=1). Both must decide, refuse and build decisions alike."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import HOUR, SECOND, T0

import ratecell
from ratecell import Decision, Limiter, LimiterClosed, _ffi, _limiter

HAVE_SPEEDUPS = _limiter._speedups is not None

PATHS = [
    pytest.param(
        "c", marks=pytest.mark.skipif(not HAVE_SPEEDUPS, reason="ratecell._speedups not built")
    ),
    "ctypes",
]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """Runs the test on the C path or on the ctypes path."""
    if request.param == "ctypes":
        monkeypatch.setattr(_limiter, "_fast_check", None)
        monkeypatch.setattr(_limiter, "_fast_allow", None)
    else:
        assert _limiter._fast_check is not None
    return request.param


def test_an_installed_package_has_the_extension_module():
    # scripts/python-tests.sh installs with a C compiler at hand: the
    # extension must have been built and loaded.
    if not os.environ.get("RATECELL_EXPECT_BUNDLED"):
        pytest.skip("only meaningful for an installed package")
    assert HAVE_SPEEDUPS
    assert _limiter._speedups.__file__.endswith(".abi3.so")


# Every kind of key and cost the fast path takes, and each it hands back.
KEYS = [
    0,
    1,
    7,
    2**64 - 1,
    "user:1",
    "",
    "ü-key",
    b"raw",
    b"",
    bytearray(b"ba"),
    memoryview(b"mv"),
    True,
    3.0,
    None,
    -1,
    2**64,
    object(),
]
COSTS = [0, 1, 2, 5, 2**64 - 1, -1, 2**64, 1.0, True, None, "1"]


def _outcome(fn, *args, **kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as e:  # the type and message are what is compared
        return ("raised", type(e), str(e))


def _run_all(make):
    """Every key and cost through check and allow on a fresh limiter, on the
    real clock. Its window is an hour, and a run that straddles a window's
    edge is run again: calls on either side of the edge would decide apart
    for a reason that is not the path."""
    for _ in range(3):
        lim = make("fixed_window", 3, HOUR, capacity=64, clock="coarse")
        window = lim.now_ns() // HOUR
        got = []
        for key in KEYS:
            for cost in COSTS:
                for fn in (lim.check, lim.allow):
                    out = _outcome(fn, key, cost)
                    if out[0] == "ok" and isinstance(out[1], Decision):
                        d = out[1]
                        # Times move between calls; the rest is deterministic.
                        out = (
                            "ok",
                            d.allowed,
                            d.limit,
                            d.remaining,
                            d.retry_after_ns > 0,
                            d.wait_ns,
                        )
                    got.append((repr(key)[:20], repr(cost), fn.__name__, out))
        if lim.now_ns() // HOUR == window:
            return got
    pytest.fail("three runs in a row straddled an hour's edge")


def test_both_paths_decide_and_refuse_alike(make, monkeypatch):
    if not HAVE_SPEEDUPS:
        pytest.skip("ratecell._speedups not built")
    fast = _run_all(make)
    monkeypatch.setattr(_limiter, "_fast_check", None)
    monkeypatch.setattr(_limiter, "_fast_allow", None)
    slow = _run_all(make)
    assert fast == slow
    # The table covers decisions, denials and refusals.
    outcomes = {o[3][0] for o in fast}
    assert outcomes == {"ok", "raised"}
    assert any(o[3] == ("ok", False) for o in fast)


# Times and tiers, each valid or refused (a time of 2**64 - 1 is the C ABI's
# "now", refused as a time).
ATS = [T0, T0 + SECOND, 0, -1, 2**64 - 1, 2**64, float(T0), "now"]
TIERS = [None, 0, 1, 2, -1, 2**32, True, 1.0, "1"]


def _run_at_tier(limiter):
    got = []
    for key in (7, "user:1", b"raw", 2**64, 3.0):
        for cost in (1, 2, -1):
            for at in ATS:
                for tier in TIERS:
                    for name in ("check", "allow"):
                        fn = getattr(limiter, name)
                        out = _outcome(fn, key, cost, at=at, tier=tier)
                        got.append((repr(key), cost, repr(at), repr(tier), name, out))
    return got


@pytest.mark.parametrize("tiered", [False, True], ids=["limiter", "tiered"])
def test_both_paths_decide_and_refuse_times_and_tiers_alike(tiered, monkeypatch):
    if not HAVE_SPEEDUPS:
        pytest.skip("ratecell._speedups not built")

    def make_limiter():
        if tiered:
            tiers = [ratecell.Limit("gcra", n, period=1.0) for n in (3, 30)]
            return ratecell.TieredLimiter(tiers, capacity=64)
        return Limiter("gcra", 3, SECOND, capacity=64)

    with make_limiter() as lim:
        fast = _run_at_tier(lim)
    monkeypatch.setattr(_limiter, "_fast_check", None)
    monkeypatch.setattr(_limiter, "_fast_allow", None)
    with make_limiter() as lim:
        slow = _run_at_tier(lim)
    assert fast == slow
    outcomes = {o[5][0] for o in fast}
    assert outcomes == {"ok", "raised"}
    raised = {o[5][1] for o in fast if o[5][0] == "raised"}
    assert raised == {TypeError, ValueError, ratecell.InvalidTier}
    assert any(o[5] == ("ok", False) for o in fast) and any(o[5] == ("ok", True) for o in fast)


def test_decision_is_the_public_dataclass(make, path):
    lim = make("gcra", 10, SECOND)
    d = lim.check(0, 1)
    assert type(d) is Decision
    assert dataclasses.is_dataclass(d)
    assert d == Decision(True, 10, 9, 0, d.reset_after_ns, 0)
    assert d.reset_after_ns > 0
    assert repr(d) == (
        f"Decision(allowed=True, limit=10, remaining=9, retry_after_ns=0, "
        f"reset_after_ns={d.reset_after_ns}, wait_ns=0)"
    )
    assert hash(d) == hash(Decision(True, 10, 9, 0, d.reset_after_ns, 0))
    assert bool(d) and type(d.allowed) is bool
    assert all(
        type(getattr(d, f)) is int
        for f in ("limit", "remaining", "retry_after_ns", "reset_after_ns", "wait_ns")
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.allowed = False  # type: ignore[misc]
    assert dataclasses.replace(d, allowed=False).allowed is False
    assert dataclasses.asdict(d)["remaining"] == 9
    assert pickle.loads(pickle.dumps(d)) == d
    assert copy.copy(d) == d
    assert d.retry_after == 0.0


def test_values_across_the_u64_range(make, path):
    # A cost above the limit is never admitted: retry_after_ns is NEVER.
    lim = make("gcra", 5, SECOND, capacity=8)
    for key in (2**64 - 1, "k", b"k"):
        d = lim.check(key, 2**64 - 1)
        assert not d.allowed
        assert d.retry_after_ns == ratecell.NEVER == 2**64 - 1
        assert lim.allow(key, 6) is False
        assert lim.allow(key, 1) is True


def test_str_and_bytes_keys_are_one_key(make, path):
    lim = make("fixed_window", 2, HOUR, capacity=8)
    assert lim.check("ключ").remaining == 1
    assert lim.allow("ключ".encode())
    assert not lim.check("ключ").allowed
    assert lim.check(b"other").remaining == 1


def test_a_str_key_without_a_utf8_form_is_ratecells_error(make, path):
    # A lone surrogate has no UTF-8 form: ratecell's InvalidKey (a
    # ValueError, as UnicodeEncodeError was), on either path, and nothing
    # is checked.
    lim = make("fixed_window", 2, HOUR, capacity=8)
    for call in (lambda: lim.check("a\ud800b"), lambda: lim.allow("\udfff")):
        with pytest.raises(ratecell.InvalidKey, match="UTF-8") as info:
            call()
        assert isinstance(info.value, ValueError)
        assert not isinstance(info.value, UnicodeError)
    assert lim.stats().checks == 0


def test_a_closed_limiter_raises(path):
    lim = Limiter("gcra", 1, SECOND)
    lim.close()
    with pytest.raises(LimiterClosed):
        lim.check("a")
    with pytest.raises(LimiterClosed):
        lim.allow(1)


def test_a_status_raises_its_exception(path):
    # A NULL handle (which the binding never passes otherwise) makes the
    # library answer RATECELL_NULL_ARGUMENT, mapped to its exception.
    lim = Limiter("gcra", 1, SECOND, capacity=4)
    real = lim._h
    lim._h = _ffi.LimiterHandle()
    try:
        for call in (
            lambda: lim.check(1),
            lambda: lim.check("a", 2),
            lambda: lim.check(b"a"),
            lambda: lim.allow(1),
            lambda: lim.allow(1, 2),
            lambda: lim.allow("a"),
        ):
            with pytest.raises(ratecell.NullArgument):
                call()
    finally:
        lim._h = real
        lim.close()


def test_close_while_other_threads_check(path):
    # Threads checking while another closes: each call either runs on a
    # live limiter or raises LimiterClosed, never touches a freed one.
    lim = Limiter("fixed_window", 10**9, SECOND, capacity=1024)
    errors: list[BaseException] = []
    calls = [0] * 4

    def worker(n: int) -> None:
        i = 0
        try:
            while True:
                if n % 2:
                    assert lim.check(f"k{i % 97}").allowed
                else:
                    assert lim.allow(i % 1000)
                i += 1
                calls[n] = i
        except LimiterClosed:
            return
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while min(calls) < 1000 and not errors and time.monotonic() < deadline:
        time.sleep(0.001)
    lim.close()
    for t in threads:
        t.join()
    assert errors == []
    assert min(calls) >= 1000


def test_the_environment_variable_forces_ctypes():
    code = (
        "import ratecell, ratecell._limiter as L\n"
        "assert L._speedups is None and L._fast_check is None, L._speedups\n"
        "with ratecell.Limiter('fixed_window', 1, period=3600.0, capacity=4) as lim:\n"
        "    assert lim.check('a').allowed and not lim.allow('a')\n"
        "print('ctypes only')\n"
    )
    # The package this test imports, wherever it is (installed or not).
    here = str(Path(ratecell.__file__).resolve().parents[1])
    env = dict(os.environ, RATECELL_NO_SPEEDUPS="1", PYTHONPATH=here)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ctypes only"

"""A quota per tier: ``TieredLimiter`` holds each key to the tier its check
names, a key moving tiers keeps what it spent, bad input raises the
exception naming the field, and ``persist=`` saves and restores every tier."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import T0

import ratecell
from ratecell import Algorithm, Limit


def tiered(limits, algorithm=Algorithm.FIXED_WINDOW, period=60.0, **kwargs):
    tiers = [Limit(algorithm, n, period=period) for n in limits]
    return ratecell.TieredLimiter(tiers, capacity=kwargs.pop("capacity", 100), **kwargs)


def test_each_key_gets_its_tiers_quota():
    with tiered([3, 30, 300]) as lim:
        assert lim.tiers == 3
        for tier, want in enumerate([3, 30, 300]):
            got = sum(lim.check(tier, 1, at=T0, tier=tier).allowed for _ in range(400))
            assert got == want
        # Key 1 spent 30 as paid: nothing left as free, 270 as internal.
        assert not lim.check(1, 1, at=T0, tier=0).allowed
        d = lim.check(1, 0, at=T0, tier=2)
        assert (d.limit, d.remaining) == (300, 270)
        assert lim.check(b"k", 5, at=T0, tier=1).remaining == 25
        assert lim.check("k", 0, at=T0, tier=1).remaining == 25
        assert lim.check(9, tier=1).limit == 30
        assert lim.check("alice", tier=2).limit == 300
        # A check that names no tier is tier 0's.
        assert lim.check(10, 0, at=T0).limit == 3


def test_a_tier_out_of_range_is_refused_and_checks_nothing():
    with tiered([2, 20]) as lim:
        for tier in (2, -1, 1 << 40):
            with pytest.raises(ratecell.InvalidTier):
                lim.check(5, 1, at=T0, tier=tier)
        with pytest.raises(
            IndexError, match=r"^tier 7 is outside 0\.\.1: the limiter has 2 tiers$"
        ):
            lim.check(5, tier=7)
        with pytest.raises(TypeError):
            lim.check(5, tier="1")
        assert lim.check(5, 0, at=T0, tier=1).remaining == 20
        assert lim.stats().keys_tracked == 0


def test_every_call_names_the_tier_and_a_plain_limiter_has_tier_0_only():
    # One keyword on every call, the same refusal on each (naming the tier
    # and the count), nothing checked.
    with tiered([2, 20]) as lim:
        calls = [
            lambda t: lim.check(5, at=T0, tier=t),
            lambda t: lim.check(b"5", 2, at=T0, tier=t),
            lambda t: lim.allow(5, at=T0, tier=t),
            lambda t: lim.allow("5", 2, at=T0, tier=t),
            lambda t: lim.check_each(5, at=T0, tier=t),
            lambda t: lim.check_batch([5], tiers=[t], at=T0),
            lambda t: lim.check(5, tier=t),
            lambda t: lim.allow(5, tier=t),
            lambda t: lim.acquire(5, tier=t, timeout=0),
        ]
        for call in calls:
            with pytest.raises(
                ratecell.InvalidTier, match=r"^tier 3 is outside 0\.\.1: the limiter has 2 tiers$"
            ):
                call(3)
        assert lim.stats().checks == 0
        assert [bool(call(1)) for call in calls[:6]] == [True] * 6
        # The int key 5 spent 4 of tier 1's 20 (check, allow, check_each,
        # the batch); the byte key "5" (b"5" is the same key) 2 + 2.
        assert lim.check(5, 0, at=T0, tier=1).remaining == 16
        assert lim.check("5", 0, at=T0, tier=1).remaining == 16
        lim.reset(5)  # the key's one state, whichever tier read it
        assert lim.check(5, 0, at=T0, tier=1).remaining == 20
    with ratecell.Limiter("gcra", 5, period=1.0, capacity=4) as plain:
        assert plain.check(1, at=T0, tier=0).allowed and plain.allow(1, at=T0, tier=0)
        assert list(plain.check_batch([1, 2], tiers=[0, 0], at=T0)) == [1, 1]
        with pytest.raises(
            ratecell.InvalidTier, match=r"^tier 1 is outside 0\.\.0: the limiter has 1 tier$"
        ):
            plain.check(1, tier=1)
        with pytest.raises(ratecell.InvalidTier, match="tier 1 is outside"):
            plain.check_batch([1, 2], tiers=[0, 1])


def test_the_removed_variants_are_gone():
    # One method per call with keyword arguments replaced the _at, _bytes
    # and _tier variants (as in the Rust and C APIs).
    removed = [
        *("check_at", "allow_at", "check_bytes", "check_bytes_at", "check_each_at"),
        *("check_tier", "check_tier_at", "check_tier_each_at", "acquire_tier", "reset_key"),
        *("check_batch_at", "check_batch_tier", "check_batch_tier_at"),
    ]
    for cls in (ratecell.Limiter, ratecell.MultiLimiter, ratecell.TieredLimiter):
        assert [name for name in removed if hasattr(cls, name)] == []


def test_bad_tiers_raise_the_error_naming_the_field():
    gcra = Limit(Algorithm.GCRA, 5, period=1.0)
    window = Limit(Algorithm.FIXED_WINDOW, 5, period=60.0)
    with pytest.raises(ratecell.InvalidLength):
        ratecell.TieredLimiter([], capacity=10)
    with pytest.raises(ratecell.InvalidLength):
        ratecell.TieredLimiter([gcra] * (ratecell.MAX_TIERS + 1), capacity=10)
    with pytest.raises(ratecell.InvalidLength):
        ratecell.TieredLimiter([[gcra, window], [gcra]], capacity=10)
    with pytest.raises(ratecell.InvalidAlgorithm):
        ratecell.TieredLimiter([gcra, window], capacity=10)
    with pytest.raises(ratecell.InvalidPeriod):
        ratecell.TieredLimiter([window, Limit(Algorithm.FIXED_WINDOW, 5, period=30.0)], capacity=10)
    with pytest.raises(ratecell.InvalidCapacity):
        ratecell.TieredLimiter([gcra, gcra], capacity=0)
    with pytest.raises(ratecell.InvalidLimit):
        ratecell.TieredLimiter([gcra, Limit(Algorithm.GCRA, 0, period=1.0)], capacity=10)
    ratecell.TieredLimiter([gcra] * ratecell.MAX_TIERS, capacity=10).close()


def test_tiers_of_several_limits():
    rate, day = 1.0, 86400.0
    free = [Limit(Algorithm.GCRA, 1, period=rate), Limit(Algorithm.FIXED_WINDOW, 3, period=day)]
    paid = [Limit(Algorithm.GCRA, 100, period=rate), Limit(Algorithm.FIXED_WINDOW, 50, period=day)]
    with ratecell.TieredLimiter([free, paid], capacity=10) as lim:
        assert lim.check(4, 40, at=T0, tier=1).allowed
        m = lim.check_each(4, 1, at=T0, tier=0)
        assert not m.decision.allowed
        assert len(m.limits) == 2 and m.denied_by is not None


def test_threads_at_one_instant_admit_exactly_each_tiers_limit():
    limits = [5, 50, 500]
    with tiered(limits, algorithm=Algorithm.TOKEN_BUCKET, period=3600.0) as lim:
        keys = 12
        counts = [[0] * keys for _ in range(4)]

        def run(mine):
            for _ in range(300):
                for k in range(keys):
                    if lim.check(k, 1, at=T0, tier=k % 3).allowed:
                        mine[k] += 1

        threads = [threading.Thread(target=run, args=(c,)) for c in counts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for k in range(keys):
            assert sum(c[k] for c in counts) == limits[k % 3]


def test_a_batch_names_a_tier_per_request():
    with tiered([3, 30]) as lim:
        flags, ds = lim.check_batch(
            [1, 1, 1, 1, 2, 2], tiers=[0, 0, 0, 0, 1, 1], at=T0, decisions=True
        )
        assert list(flags) == [1, 1, 1, 0, 1, 1]
        assert (ds[5].limit, ds[5].remaining) == (30, 28)
        # Each as check would decide it, one by one.
        assert lim.check(2, 0, at=T0, tier=1).remaining == 28
        assert list(lim.check_batch([3, 4], tiers=[1, 0])) == [1, 1]
        # A tier no limiter has anywhere: nothing decided, nothing stored.
        with pytest.raises(ratecell.InvalidTier, match="tier 2"):
            lim.check_batch([9, 9], tiers=[1, 2], at=T0)
        assert lim.check(9, 0, at=T0, tier=1).remaining == 30
        with pytest.raises(ratecell.InvalidTier):
            lim.check_batch([9], tiers=[-1])
        with pytest.raises(TypeError):
            lim.check_batch([9], tiers=[1.0])
        with pytest.raises(ValueError, match="2 keys but 1 tiers"):
            lim.check_batch([9, 9], tiers=[1])


def test_acquire_waits_for_the_named_tier():
    with tiered([1, 3], algorithm=Algorithm.TOKEN_BUCKET, period=3600.0) as lim:
        for _ in range(3):
            assert lim.acquire(7, tier=1, timeout=0).allowed
        with pytest.raises(ratecell.TimedOut):
            lim.acquire(7, tier=1, timeout=0)
        assert lim.acquire(b"free", tier=0, timeout=0).limit == 1
        with pytest.raises(ratecell.TimedOut):
            lim.acquire(b"free", timeout=0)  # no tier named: tier 0's
        with pytest.raises(ratecell.CostExceedsLimit):
            lim.acquire(8, 4, tier=1, timeout=0)
        with pytest.raises(ratecell.InvalidTier, match="tier 2"):
            lim.acquire(8, tier=2, timeout=0)


def test_a_snapshot_keeps_the_tiers(tmp_path):
    path = tmp_path / "tiers.snap"
    free, paid = (
        Limit(Algorithm.FIXED_WINDOW, 3, period=60.0),
        Limit(Algorithm.FIXED_WINDOW, 30, period=60.0),
    )
    with ratecell.TieredLimiter([free, paid], capacity=100) as lim:
        lim.check(1, 10, at=T0, tier=1)
        lim.save(path, now_ns=T0)
    with ratecell.TieredLimiter.restore(path, [free, paid], capacity=100) as back:
        assert back.tiers == 2
        assert back.check(1, 0, at=T0, tier=1).remaining == 20
        assert not back.check(1, 1, at=T0, tier=0).allowed
    with ratecell.TieredLimiter.restore(path) as back:
        assert back.tiers == 2
        assert back.check(1, 0, at=T0, tier=1).remaining == 20
    other = Limit(Algorithm.FIXED_WINDOW, 40, period=60.0)
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.TieredLimiter.restore(path, [free, other], capacity=100)
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.Limiter.restore(
            path, ratecell.Limiter("fixed_window", 3, 60 * 10**9, capacity=100).config
        )
    with pytest.raises(TypeError, match="capacity"):
        ratecell.TieredLimiter.restore(path, [free, paid])


def wait_for_file(path):
    """Waits for ``path`` to appear (a periodic save renaming it into
    place), for at most 30 s."""
    deadline = time.monotonic() + 30
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"no periodic save of {path}")
        time.sleep(0.001)


def trace_request(i):
    """Request ``i`` of a fixed trace: a key of 5, mostly its own tier."""
    key = i * 7 % 5
    tier = i // 4 % 2 if i % 4 == 0 else key % 2
    return key, tier, 1 + i % 4


def test_persist_saves_every_tier_and_the_reopened_limiter_decides_alike(tmp_path):
    """Half a trace on a ``TieredLimiter(..., persist=)`` saving every
    millisecond; the file as its saving thread (not its close) left it,
    as a process killed then would leave it, reopens into a limiter that
    decides the rest as the original."""
    path = tmp_path / "tiers.snap"
    hour = 3600.0
    tiers = [
        [Limit(Algorithm.GCRA, 5, period=hour), Limit(Algorithm.TOKEN_BUCKET, 8, period=hour)],
        [Limit(Algorithm.GCRA, 50, period=hour), Limit(Algorithm.TOKEN_BUCKET, 80, period=hour)],
    ]
    with ratecell.TieredLimiter(tiers, capacity=100, persist=path, every=0.001) as lim:
        assert lim.tiers == 2
        # The first half before the limiter's clock (by which the saver
        # judges which states are live), the rest after every save.
        start = lim.now_ns() - 10 * 10**9
        for i in range(60):
            key, tier, cost = trace_request(i)
            lim.check_each(key, cost, at=start + i * 10**8, tier=tier)
        # A save may have been under way during the checks; the one after
        # the first to rename began after them (one save at a time).
        path.unlink(missing_ok=True)
        wait_for_file(path)
        path.unlink()
        wait_for_file(path)
        copy = tmp_path / "copy.snap"
        copy.write_bytes(path.read_bytes())
        with ratecell.TieredLimiter(tiers, capacity=100, persist=copy, every=hour) as back:
            assert back.tiers == 2
            rest = lim.now_ns() + 10**9
            denied = 0
            for i in range(60, 120):
                key, tier, cost = trace_request(i)
                at = rest + (i - 60) * 10**8
                want = lim.check_each(key, cost, at=at, tier=tier)
                got = back.check_each(key, cost, at=at, tier=tier)
                assert got == want, (i, key, tier, cost)
                denied += not want.decision.allowed
            assert denied > 0, "the trace never reached a limit: it tests nothing restored"


def test_persist_refuses_other_tiers_by_name(tmp_path):
    path = tmp_path / "tiers.snap"
    free, paid = (
        Limit(Algorithm.TOKEN_BUCKET, 2, period=3600.0),
        Limit(Algorithm.TOKEN_BUCKET, 20, period=3600.0),
    )
    with ratecell.TieredLimiter([free, paid], capacity=100, persist=path, every=3600) as lim:
        assert lim.tiers == 2
        assert lim.check(1, 15, tier=1).allowed
    with ratecell.TieredLimiter([free, paid], capacity=100, persist=path, every=3600) as back:
        assert back.check(1, 0, tier=1).remaining == 5
        assert not back.check(1, 1, tier=0).allowed
    saved = path.read_bytes()
    assert saved[8:12] == (3).to_bytes(4, "little"), "format version 3"
    # Another number of tiers, another tier's limit, no tiers at all.
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.TieredLimiter([free], capacity=100, persist=path)
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.TieredLimiter(
            [free, Limit(Algorithm.TOKEN_BUCKET, 30, period=3600.0)], capacity=100, persist=path
        )
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.Limiter("token_bucket", 2, 3600 * 10**9, capacity=100, persist=path)
    plain = tmp_path / "plain.snap"
    ratecell.Limiter("token_bucket", 2, 3600 * 10**9, capacity=100, persist=plain).close()
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.TieredLimiter([free, paid], capacity=100, persist=plain)
    # Bad tiers are named as without persist, and make no file.
    with pytest.raises(ratecell.InvalidLength):
        ratecell.TieredLimiter([], capacity=100, persist=tmp_path / "x.snap")
    with pytest.raises(ratecell.InvalidCapacity):
        ratecell.TieredLimiter([free, paid], capacity=0, persist=tmp_path / "x.snap")
    with pytest.raises(ValueError, match="every"):
        ratecell.TieredLimiter([free], capacity=100, persist=tmp_path / "x.snap", every=0)
    assert not (tmp_path / "x.snap").exists()
    assert path.read_bytes() == saved, "a refused open leaves the file as it was"

"""Snapshots (docs/SNAPSHOT.md): save and restore through the C ABI, a
configuration that differs, and missing or damaged files."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SECOND

import ratecell

T0 = 1_700_000_000 * SECOND


@pytest.mark.parametrize("algorithm", list(ratecell.Algorithm))
@pytest.mark.parametrize("capacity", [0, 100])
def test_save_and_restore_decide_alike(tmp_path: Path, algorithm: ratecell.Algorithm, capacity: int) -> None:
    path = tmp_path / "limits.snap"
    with ratecell.Limiter(algorithm, 4, SECOND, capacity=capacity) as lim:
        for key in range(10):
            lim.check(key, key % 4, at=T0 + key)
        lim.save(path, now_ns=T0 + 10)
        back = ratecell.Limiter.restore(path, lim.config)
        any_config = ratecell.Limiter.restore(str(path))
        for i in range(40):
            key, t = i % 10, T0 + 10 + i * (SECOND // 20)
            want = lim.check(key, 1, at=t)
            assert back.check(key, 1, at=t) == want
            assert any_config.check(key, 1, at=t) == want
        back.close()
        any_config.close()


def test_a_different_configuration_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "limits.snap"
    lim = ratecell.Limiter("gcra", 5, SECOND, capacity=10)
    lim.save(path)
    other = ratecell.Limiter("gcra", 6, SECOND, capacity=10).config
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.Limiter.restore(path, other)
    allow = ratecell.Limiter("gcra", 5, SECOND, capacity=10, overflow="allow").config
    assert ratecell.Limiter.restore(path, allow).config.overflow == ratecell.Overflow.ALLOW


def test_missing_and_damaged_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ratecell.SnapshotNotFound) as missing:
        ratecell.Limiter.restore(tmp_path / "missing.snap")
    assert isinstance(missing.value, FileNotFoundError)
    path = tmp_path / "limits.snap"
    lim = ratecell.Limiter("sliding_log", 3, SECOND, capacity=10)
    lim.check(1, 2, at=T0)
    lim.save(path, now_ns=T0)
    data = path.read_bytes()
    bad = tmp_path / "bad.snap"
    for damaged in (b"", data[:20], data[:-1], data[:50] + bytes([data[50] ^ 4]) + data[51:], b"x" * 200):
        bad.write_bytes(damaged)
        with pytest.raises(ratecell.SnapshotDamaged):
            ratecell.Limiter.restore(bad)
    with pytest.raises(ratecell.SnapshotIO):
        lim.save(tmp_path / "no-such-dir" / "x.snap")
    lim.close()
    with pytest.raises(ratecell.LimiterClosed):
        lim.save(path)

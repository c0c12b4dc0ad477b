"""Periodic saving (docs/SNAPSHOT.md, "Periodic saving") from Python:
``Limiter(..., persist=path, every=s)`` and ``MultiLimiter(..., persist=...)``
save in the background, restore at start, stop saving on close, and a
process killed with SIGKILL while saving leaves a file that restores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import HOUR, SECOND

import ratecell



def wait_for(what: str, cond: Callable[[], bool], limit: float = 20.0) -> None:
    """Polls ``cond`` every 10 ms for at most ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {limit} s waiting for {what}")
        time.sleep(0.01)


def spent(path: Path, config: ratecell.Config, key: int) -> bool:
    """Whether the snapshot at ``path`` restores with ``key`` spent."""
    try:
        back = ratecell.Limiter.restore(path, config)
    except ratecell.SnapshotError:
        return False
    with back:
        return not back.check(key, 1).allowed


def test_saves_happen_restore_at_start_and_close_stops_the_saver(tmp_path: Path) -> None:
    path = tmp_path / "limits.snap"
    lim = ratecell.Limiter("gcra", 3, HOUR, capacity=100, persist=path, every=0.01)
    config = lim.config
    for _ in range(3):
        assert lim.check(7, 1).allowed
    # Saved by the background thread, with no call from here.
    wait_for("a periodic save holding key 7", lambda: spent(path, config, 7))
    lim.close()
    lim.close()  # idempotent
    assert lim.closed
    with pytest.raises(ratecell.LimiterClosed):
        lim.check(7, 1)
    # The saver stopped: a removed file is not written again.
    path.unlink()
    time.sleep(0.1)
    assert not path.exists()
    # Restored at start: the state survives the restart.
    with ratecell.Limiter("gcra", 3, HOUR, capacity=100, persist=path, every=3600) as lim:
        assert lim.check(7, 1).allowed, "no file: a fresh start"
    assert path.exists(), "close saved a last time"
    with ratecell.Limiter("gcra", 3, HOUR, capacity=100, persist=path, every=3600) as lim:
        assert lim.check(7, 1).remaining == 1
        assert "ratecell.Limiter gcra" in repr(lim)


def written_bytes() -> int:
    """Bytes this process has handed to write() so far (Linux)."""
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="needs /proc/self/io")
def test_close_saves_once_and_still_raises(tmp_path: Path) -> None:
    path = tmp_path / "limits.snap"
    lim = ratecell.Limiter("gcra", 3, HOUR, capacity=20_000, persist=path, every=3600)
    for key in range(10_000):
        lim.check(key, 1)
    before = written_bytes()
    lim.close()
    written = written_bytes() - before
    size = path.stat().st_size
    assert size > 100_000, "a snapshot large enough to tell one save from two"
    assert size <= written < 2 * size, f"close wrote {written} bytes, the snapshot is {size}"
    # Still one save, and its failure is still raised.
    gone = tmp_path / "gone"
    gone.mkdir()
    lim = ratecell.Limiter("gcra", 3, HOUR, capacity=100, persist=gone / "x.snap", every=3600)
    lim.check(1, 1)
    gone.rmdir()
    with pytest.raises(ratecell.SnapshotIO):
        lim.close()
    assert lim.closed


def test_close_during_a_call_keeps_what_the_call_admits(tmp_path: Path) -> None:
    path = tmp_path / "limits.snap"
    lim = ratecell.Limiter("gcra", 1, SECOND, capacity=10, persist=path, every=3600)
    config = lim.config
    assert lim.check(7, 1).allowed
    entered = threading.Event()
    got: list[ratecell.Decision] = []

    def wait_for_the_next() -> None:
        entered.set()
        got.append(lim.acquire(7, 1, timeout=10.0))

    waiter = threading.Thread(target=wait_for_the_next)
    waiter.start()
    entered.wait()
    time.sleep(0.3)  # inside acquire, asleep in C
    lim.close()
    waiter.join()
    assert got and got[0].allowed
    # Saved again when the call returned: both admissions are in the file,
    # so the key waits a second from the second.
    with ratecell.Limiter.restore(path, config) as back:
        assert not back.check(7, 0).allowed


def test_a_file_that_does_not_fit_is_refused_and_bad_arguments_named(tmp_path: Path) -> None:
    path = tmp_path / "limits.snap"
    with ratecell.Limiter("token_bucket", 5, SECOND, capacity=10, persist=path, every=60):
        pass
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.Limiter("token_bucket", 6, SECOND, capacity=10, persist=path)
    path.write_bytes(b"not a snapshot")
    with pytest.raises(ratecell.SnapshotDamaged):
        ratecell.Limiter("token_bucket", 5, SECOND, capacity=10, persist=path)
    with pytest.raises(ValueError, match="every"):
        ratecell.Limiter("gcra", 5, SECOND, persist=tmp_path / "x.snap", every=0)
    with pytest.raises(TypeError, match="every"):
        ratecell.Limiter("gcra", 5, SECOND, persist=tmp_path / "x.snap", every="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="persist and shared"):
        ratecell.Limiter("gcra", 5, SECOND, capacity=4, persist=tmp_path / "x.snap", shared="x")
    with pytest.raises(ratecell.InvalidLimit):
        ratecell.Limiter("gcra", 0, SECOND, persist=tmp_path / "x.snap")
    with pytest.raises(ratecell.SnapshotIO):
        ratecell.Limiter("gcra", 5, SECOND, persist=tmp_path / "missing" / "x.snap").close()
    assert not (tmp_path / "x.snap").exists()


def test_several_limits_persist_and_restore(tmp_path: Path) -> None:
    path = tmp_path / "multi.snap"
    limits = [
        ratecell.Limit("sliding_log", 2, period_ns=HOUR, name="hourly"),
        ratecell.Limit("token_bucket", 5, period_ns=HOUR, name="tokens"),
    ]
    with ratecell.MultiLimiter(limits, capacity=10, persist=path, every=3600) as lim:
        assert lim.check(3).allowed and lim.check(3).allowed
    with ratecell.MultiLimiter(limits, capacity=10, persist=path, every=3600) as lim:
        d = lim.check_each(3)
        assert not d.decision.allowed
        assert d.denied_name == "hourly"
        assert d.limits[1].remaining == 3
    back = ratecell.MultiLimiter.restore(path, limits=limits, capacity=10)
    assert back.check_each(3).denied_by == 0
    back.close()
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.MultiLimiter.restore(path, limits=limits[::-1], capacity=10)
    with pytest.raises(ratecell.SnapshotConfigMismatch):
        ratecell.MultiLimiter(limits[:1], capacity=10, persist=path)
    with pytest.raises(TypeError):
        ratecell.MultiLimiter.restore(path)
    # The file's own configuration: every limit comes back.
    with ratecell.Limiter.restore(path) as any_config:
        assert not any_config.check(3).allowed


CHILD = textwrap.dedent(
    """
    import sys, time
    import ratecell
    lim = ratecell.Limiter("gcra", 1000, 3600 * 10**9, capacity=30000,
                           persist=sys.argv[1], every=0.001)
    deadline = time.monotonic() + 60  # bounded, should the parent die
    key = 0
    while time.monotonic() < deadline:
        lim.check(key % 20000, 1)
        key += 1
    """
)


def test_a_process_killed_while_saving_leaves_a_snapshot_that_restores(tmp_path: Path) -> None:
    path = tmp_path / "killed.snap"
    config = ratecell.Limiter("gcra", 1000, 3600 * SECOND, capacity=30000).config

    def keys_saved() -> int:
        try:
            with ratecell.Limiter.restore(path, config) as back:
                return back.stats().keys_tracked
        except ratecell.SnapshotError:
            return 0

    for round_ in range(3):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], env=os.environ.copy())
        try:
            wait_for("a save holding keys", lambda: keys_saved() > 0, limit=30.0)
            time.sleep(0.03 + 0.04 * round_)
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=10) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=10)
        assert keys_saved() > 0, f"round {round_}: the file left by the killed process"

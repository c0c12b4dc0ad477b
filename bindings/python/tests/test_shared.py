"""``Limiter(..., shared=path)``: one limit across processes (issue 24).

- C and Python processes started separately share one region and admit
  exactly the limit at one instant (needs the C worker, built by
  scripts/python-tests.sh and named by RATECELL_SHARED_C_WORKER);
- ``multiprocessing`` workers, forked and spawned, open the same path (the
  pre-fork server pattern);
- files that are not this region raise the named ``SharedRegionError``
  subclasses.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import ratecell

from conftest import HOUR, SECOND, T0

SHAREABLE = ["gcra", "leaky_bucket", "token_bucket", "fixed_window", "sliding_window"]
WORKER = Path(__file__).with_name("shared_worker.py")


@pytest.fixture
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh path under /dev/shm, removed afterwards."""
    name = tmp_path_factory.mktemp("shm").name
    path = f"/dev/shm/ratecell-pytest-{os.getpid()}-{name}"
    yield path
    if os.path.exists(path):
        os.unlink(path)


def _marked(stream) -> str:
    while True:
        line = stream.readline()
        assert line, "the worker ended early"
        if "@" in line:
            return line[line.index("@") + 1 :].strip()


@pytest.mark.parametrize("algorithm", SHAREABLE)
def test_c_and_python_processes_admit_exactly_the_limit(region: str, algorithm: str) -> None:
    c_worker = os.environ.get("RATECELL_SHARED_C_WORKER")
    if not c_worker:
        pytest.skip("RATECELL_SHARED_C_WORKER not set (scripts/python-tests.sh builds it)")
    limit, keys = 40, 10
    args = [region, algorithm, str(limit), str(HOUR), "1000", str(T0), str(keys), "2"]
    commands = [[c_worker, *args], [c_worker, *args]] + [[sys.executable, str(WORKER), *args]] * 2
    workers = [
        subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for c in commands
    ]
    try:
        for w in workers:
            assert _marked(w.stdout) == "ready"
        for w in workers:
            w.stdin.write("go\n")
            w.stdin.flush()
        total = sum(int(_marked(w.stdout)) for w in workers)
        for w in workers:
            assert w.wait(timeout=120) == 0
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    assert total == limit * keys, "2 C and 2 Python processes x 2 threads"


def _mp_worker(path: str, barrier, out) -> None:
    limiter = ratecell.Limiter("gcra", 30, HOUR, capacity=100, shared=path)
    barrier.wait(timeout=60)
    out.put(sum(limiter.check(7, 1, at=T0).allowed for _ in range(30)))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_workers_open_the_same_path(region: str, method: str) -> None:
    ctx = multiprocessing.get_context(method)
    # The parent makes the region first, as a pre-fork server's master would.
    parent = ratecell.Limiter("gcra", 30, HOUR, capacity=100, shared=region)
    assert parent.check(7, 1, at=T0).allowed
    barrier = ctx.Barrier(4)
    out = ctx.Queue()
    procs = [ctx.Process(target=_mp_worker, args=(region, barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    total = sum(out.get(timeout=10) for _ in procs)
    assert total == 29, "the parent took 1 of 30; the workers share the other 29"
    parent.close()


def test_files_that_are_not_this_region_raise_named_errors(region: str) -> None:
    ratecell.Limiter("gcra", 5, HOUR, capacity=100, shared=region).close()
    with pytest.raises(ratecell.SharedConfigMismatch):
        ratecell.Limiter("gcra", 6, HOUR, capacity=100, shared=region)
    data = Path(region).read_bytes()
    Path(region).write_bytes(data[:100])
    with pytest.raises(ratecell.SharedTruncated):
        ratecell.Limiter("gcra", 5, HOUR, capacity=100, shared=region)
    Path(region).write_bytes(bytes(range(256)) * (len(data) // 256))
    with pytest.raises(ratecell.SharedNotARegion):
        ratecell.Limiter("gcra", 5, HOUR, capacity=100, shared=region)
    version = bytearray(data)
    version[8] = 99
    Path(region).write_bytes(bytes(version))
    with pytest.raises(ratecell.SharedVersion):
        ratecell.Limiter("gcra", 5, HOUR, capacity=100, shared=region)
    with pytest.raises(ratecell.SharedUnsupported):
        ratecell.Limiter("sliding_log", 5, HOUR, capacity=100, shared=region + "-log")
    with pytest.raises(ratecell.SharedUnsupported):
        ratecell.Limiter("gcra", 5, HOUR, shared=region + "-direct")
    with pytest.raises(ratecell.SharedIO):
        ratecell.Limiter("gcra", 5, HOUR, capacity=100, shared="/nonexistent-dir/x")
    with pytest.raises(ValueError):
        ratecell.Limiter("gcra", 5, HOUR, capacity=100, shared=region, shared_mode=0o10000)

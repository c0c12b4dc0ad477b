"""Cross-language parity: replays tests/parity/trace.csv and compares every
decision field with tests/parity/expected.csv, which the Rust core, the C
program bindings/c/tests/parity.c and the Go binding must all print
exactly (the format is described in tests/parity.rs)."""

from __future__ import annotations

from pathlib import Path

import pytest

import ratecell

FIELDS = ("allowed", "limit", "remaining", "retry_after_ns", "reset_after_ns", "wait_ns")


def _line(number: int, d: ratecell.Decision) -> str:
    return (
        f"{number},{int(d.allowed)},{d.limit},{d.remaining},"
        f"{d.retry_after_ns},{d.reset_after_ns},{d.wait_ns}"
    )


def replay(trace: str, batch: bool) -> list[str]:
    """The decisions of the trace, one expected.csv line per check. With
    ``batch``, every check goes through a one-element ``check_batch``."""
    limiters: dict[str, ratecell.Limiter] = {}
    out: list[str] = []
    try:
        for number, text in enumerate(trace.splitlines(), start=1):
            if not text or text.startswith("#"):
                continue
            f = text.split(",")
            kind = f[0]
            if kind == "limiter":
                limiters[f[1]] = ratecell.Limiter(
                    f[2],
                    int(f[3]),
                    int(f[4]),
                    burst=int(f[5]),
                    sub_windows=int(f[6]),
                    capacity=int(f[7]),
                    overflow=f[8],
                )
            elif kind == "check":
                lim, key, cost, now = limiters[f[1]], int(f[2]), int(f[3]), int(f[4])
                if batch:
                    _, (d,) = lim.check_batch([key], [cost], at=now, decisions=True)
                else:
                    d = lim.check(key, cost, at=now)
                out.append(_line(number, d))
            elif kind == "check_bytes":
                key = bytes.fromhex(f[2])
                d = limiters[f[1]].check(key, int(f[3]), at=int(f[4]))
                out.append(_line(number, d))
            elif kind == "reset_key":
                limiters[f[1]].reset(int(f[2]))
            else:
                raise AssertionError(f"trace line {number}: unknown record {kind!r}")
    finally:
        for lim in limiters.values():
            lim.close()
    return out


@pytest.fixture(scope="module")
def parity_files() -> tuple[str, list[str]]:
    root = Path(__file__).resolve().parents[3] / "tests" / "parity"
    trace = (root / "trace.csv").read_text()
    expected = (root / "expected.csv").read_text().splitlines()
    return trace, expected


@pytest.mark.parametrize("batch", [False, True], ids=["check", "check_batch"])
def test_python_replays_the_parity_trace_exactly(parity_files, batch):
    trace, expected = parity_files
    got = replay(trace, batch)
    assert len(expected) > 800, "the trace exercises every limiter"
    for g, e in zip(got, expected, strict=False):  # lengths compared below
        if g != e:
            gf, ef = g.split(","), e.split(",")
            assert gf[0] == ef[0], f"decision for trace line {ef[0]} missing (got line {gf[0]})"
            diffs = [
                f"{name}: got {a}, expected {b}"
                for name, a, b in zip(FIELDS, gf[1:], ef[1:], strict=True)
                if a != b
            ]
            raise AssertionError(f"trace line {ef[0]}: " + "; ".join(diffs))
    assert len(got) == len(expected)


def test_the_trace_covers_every_algorithm_both_ways(parity_files):
    trace, _ = parity_files
    seen = set()
    for text in trace.splitlines():
        f = text.split(",")
        if f[0] == "limiter":
            seen.add((ratecell.Algorithm.from_name(f[2]), int(f[7]) > 0))
    assert seen == {(a, keyed) for a in ratecell.Algorithm for keyed in (False, True)}

"""Shared fixtures of the ratecell Python tests."""

from __future__ import annotations

from pathlib import Path

import pytest

import ratecell

# bindings/python/tests -> repository root
REPO = Path(__file__).resolve().parents[3]

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
# A window-aligned instant well inside the u64 range (multiple of an hour).
T0 = 1_700_002_800 * SECOND


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def make():
    """Builds limiters and closes them after the test."""
    made: list[ratecell.Limiter] = []

    def _make(*args, **kwargs) -> ratecell.Limiter:
        lim = ratecell.Limiter(*args, **kwargs)
        made.append(lim)
        return lim

    yield _make
    for lim in made:
        lim.close()

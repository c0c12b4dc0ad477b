"""The values the API hands out and takes: the algorithm, overflow and clock
enumerations, and the frozen ``Decision``, ``Stats`` and ``Config``
records, with their conversions from the C structures."""

from __future__ import annotations

import datetime
import enum
from ctypes import c_uint32
from dataclasses import dataclass

from . import _errors, _ffi
from ._decision import NEVER, Decision

__all__ = ["Algorithm", "Overflow", "Clock", "Decision", "Stats", "Config", "NEVER", "Limit"]


class Algorithm(enum.IntEnum):
    """The seven algorithms of SPEC.md §4, numbered as in the C ABI."""

    GCRA = 1
    LEAKY_BUCKET = 2
    TOKEN_BUCKET = 3
    FIXED_WINDOW = 4
    SLIDING_WINDOW = 5
    BUCKETED_WINDOW = 6
    SLIDING_LOG = 7

    @property
    def spec_name(self) -> str:
        """The SPEC name: ``"gcra"``, ``"leaky_bucket"``, ..."""
        name: bytes = _ffi.lib.ratecell_algorithm_name(self.value)
        return name.decode("ascii")

    @classmethod
    def from_name(cls, name: str) -> Algorithm:
        """Looks an algorithm up by its SPEC name (``"-"`` may stand for
        ``"_"``, as the C library accepts). Raises ``UnknownAlgorithm``."""
        raw = name.encode("utf-8")
        out = c_uint32()
        status = _ffi.lib.ratecell_algorithm_from_name(raw, len(raw), out)
        if status:
            raise _errors.error_for_status(status, f"unknown algorithm {name!r}")
        return cls(out.value)


class Overflow(enum.IntEnum):
    """What a keyed limiter does with a new key when its table is full."""

    DENY = 0
    """Deny the request (fail closed; the default)."""
    ALLOW = 1
    """Admit it as an untracked fresh key (fail open)."""
    EVICT = 2
    """Evict the live state nearest to fresh and track the new key there
    (the HTTP middleware's recommended policy: a flood of new keys cannot
    lock out the next client; SPEC §5 bounds what an evicted key gains)."""


class Clock(enum.IntEnum):
    """The clock read by the calls without an explicit time."""

    TSC = 0
    """The CPU time-stamp counter calibrated to UNIX time (the default)."""
    COARSE = 1
    """A process-wide time refreshed every millisecond (cheaper, up to ~1 ms
    behind)."""


@dataclass(frozen=True, slots=True)
class Stats:
    """A snapshot of a limiter's counters (``ratecell_stats``)."""

    checks: int
    """Requests decided (allowed + denied)."""
    allowed: int
    """Requests admitted (peeks that would be admitted included)."""
    denied: int
    """Requests denied (overflow denials included)."""
    keys_tracked: int
    """Keys with a state in the table now (0 for capacity 0)."""
    evictions: int
    """Entries dropped because they were equivalent to fresh."""
    overflows: int
    """New keys that found no free or evictable place and were denied or
    admitted untracked (``Overflow.DENY``, ``Overflow.ALLOW``)."""
    capacity: int
    """Keys the table was sized for (0 for capacity 0)."""
    bytes_allocated: int
    """Bytes of state allocated at construction."""
    evicted_live: int
    """Live states evicted for new keys (``Overflow.EVICT``)."""

    @classmethod
    def _from_c(cls, c: _ffi.CStats) -> Stats:
        return cls(
            c.checks,
            c.allowed,
            c.denied,
            c.keys_tracked,
            c.evictions,
            c.overflows,
            c.capacity,
            c.bytes_allocated,
            c.evicted_live,
        )


@dataclass(frozen=True, slots=True)
class Config:
    """A limiter's configuration, as given (``Limiter.config``)."""

    algorithm: Algorithm
    limit: int
    period_ns: int
    burst: int
    """0 means "same as limit"."""
    sub_windows: int
    capacity: int
    """0: one shared state, keys ignored; more: a table of that many keys."""
    overflow: Overflow
    clock: Clock

    @classmethod
    def _from_c(cls, c: _ffi.CConfig) -> Config:
        return cls(
            Algorithm(c.algorithm),
            c.limit,
            c.period_ns,
            c.burst,
            c.sub_windows,
            c.capacity,
            Overflow(c.overflow),
            Clock(c.clock),
        )


@dataclass(frozen=True, slots=True)
class Limit:
    """One of several limits: ``limit`` units per period (``period_ns`` in
    nanoseconds or ``period`` in seconds or a ``timedelta``; give exactly
    one), with an optional ``name`` (kept for callers that report which
    limit denied, such as one HTTP header item per limit)."""

    algorithm: Algorithm | str | int
    limit: int
    period_ns: int | None = None
    period: float | datetime.timedelta | None = None
    burst: int = 0
    sub_windows: int | None = None
    name: str = ""

"""The values the API hands out and takes: the algorithm, overflow and clock
enumerations, and the frozen ``Decision``, ``Stats`` and ``Config``
records, with their conversions from the C structures."""

from __future__ import annotations

import ctypes
import enum
import math
import struct
from ctypes import c_uint32
from dataclasses import dataclass

from . import _errors, _ffi

__all__ = ["Algorithm", "Overflow", "Clock", "Decision", "Stats", "Config", "NEVER"]

NEVER = _ffi.U64_MAX
"""``retry_after_ns`` of a request that no wait can admit (cost above the
limit or burst); every returned duration also saturates at this value."""


def _seconds(ns: int) -> float:
    return math.inf if ns == NEVER else ns / 1e9


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


@dataclass(frozen=True)
class Decision:
    """The answer to one request (SPEC.md §3).

    Durations are integer nanoseconds from the request's time, saturating at
    ``2**64 - 1`` (``NEVER``), which ``retry_after_ns`` uses for a cost that
    can never be admitted. The ``retry_after``, ``reset_after`` and ``wait``
    properties give the same in seconds (``math.inf`` for never). A decision
    is truthy when the request was admitted.
    """

    allowed: bool
    """Admitted or not (for a peek, cost 0: would a cost-1 request be)."""
    limit: int
    """B for GCRA, leaky bucket and token bucket; L for the others."""
    remaining: int
    """Cost-1 requests that would be admitted now, after this decision."""
    retry_after_ns: int
    """0 when admitted; else the least wait after which this request would be."""
    reset_after_ns: int
    """Time until the key is fresh again (remaining == limit); 0 if it is."""
    wait_ns: int = 0
    """Leaky bucket only: how long an admitted request waits for its turn."""

    def __bool__(self) -> bool:
        return self.allowed

    @property
    def retry_after(self) -> float:
        """``retry_after_ns`` in seconds; ``math.inf`` when never."""
        return _seconds(self.retry_after_ns)

    @property
    def reset_after(self) -> float:
        """``reset_after_ns`` in seconds."""
        return _seconds(self.reset_after_ns)

    @property
    def wait(self) -> float:
        """``wait_ns`` in seconds."""
        return _seconds(self.wait_ns)


# A frozen dataclass's generated __init__ goes through object.__setattr__
# once per field, which costs as much as the C call it reports on. Writing
# the instance's __dict__ directly makes the same object in well under half
# the time (Decision has no __slots__ for this reason), and one struct unpack
# reads the C decision faster than six ctypes field reads. Only this module
# builds decisions this way, from values the library just wrote.
_new = object.__new__
_unpack_c = struct.Struct("?7x5Q").unpack_from
if struct.calcsize("?7x5Q") != ctypes.sizeof(_ffi.CDecision):
    raise ImportError("ratecell: struct ratecell_decision has an unexpected layout")


def decision_from_c(c: _ffi.CDecision) -> Decision:
    allowed, limit, remaining, retry, reset, wait = _unpack_c(c)
    d = _new(Decision)
    fields = d.__dict__
    fields["allowed"] = allowed
    fields["limit"] = limit
    fields["remaining"] = remaining
    fields["retry_after_ns"] = retry
    fields["reset_after_ns"] = reset
    fields["wait_ns"] = wait
    return d


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

"""The answer to a request, ``Decision``, the per-limit answer
``MultiDecision`` (``check_each``), and their conversion from the C
structures: below every other module of the package but ``_ffi`` (the
errors that carry a decision name it)."""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from . import _ffi

__all__ = ["Decision", "MultiDecision", "NEVER", "decision_from_c", "multi_decision_from_c"]

NEVER = _ffi.U64_MAX
"""``retry_after_ns`` of a request that no wait can admit (cost above the
limit or burst); every returned duration also saturates at this value."""


def _seconds(ns: int) -> float:
    return math.inf if ns == NEVER else ns / 1e9


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
class MultiDecision:
    """One request's answer from each of a limiter's limits
    (``check_each``; a limiter of one limit gives that limit's).

    ``decision`` is the combined decision (what ``check`` returns): admitted
    only when every limit admits; ``remaining`` the least over the limits,
    each on its state after the decision (unchanged when denied);
    ``retry_after`` the largest of the limits' own; ``reset_after`` the
    largest; ``wait`` the largest when admitted. ``limits`` holds each
    limit's own decision, in order; a limit that alone would admit a
    request another denies reports ``allowed`` with the ``remaining`` of its
    unchanged state. ``denied_by`` is the index of the limit that denied
    (``None`` when none did) and ``denied_name`` its name ("" if unnamed).
    """

    decision: Decision
    denied_by: int | None
    denied_name: str | None
    limits: tuple[Decision, ...]

    def __bool__(self) -> bool:
        return self.decision.allowed


def multi_decision_from_c(c: _ffi.CMultiDecision, names: Sequence[str] | None) -> MultiDecision:
    """``c`` as a ``MultiDecision``; ``names`` are the limits' (None: every
    name is "")."""
    denied = None if c.denied_by == _ffi.NO_LIMIT else int(c.denied_by)
    return MultiDecision(
        decision=decision_from_c(c.decision),
        denied_by=denied,
        denied_name=None if denied is None else (names[denied] if names is not None else ""),
        limits=tuple(decision_from_c(c.limits[i]) for i in range(c.count)),
    )

"""Exceptions: one class per ``ratecell_status`` of the C ABI, plus
``LimiterClosed`` for a call on a closed ``Limiter``.

Each class also derives from the built-in exception a Python caller would
expect to catch (``ValueError`` for a bad configuration, ``TimeoutError``
for a timed-out acquire, ``MemoryError`` for a failed allocation), so code
that knows nothing of ratecell still handles them sensibly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _ffi

if TYPE_CHECKING:
    from ._decision import Decision

__all__ = [
    "RatecellError",
    "NullArgument",
    "InvalidConfig",
    "InvalidAlgorithm",
    "InvalidLimit",
    "InvalidPeriod",
    "InvalidBurst",
    "InvalidSubWindows",
    "InvalidCapacity",
    "InvalidOverflow",
    "InvalidClock",
    "UnknownAlgorithm",
    "OutOfMemory",
    "TimedOut",
    "CostExceedsLimit",
    "InvalidLength",
    "InvalidKey",
    "Panic",
    "LimiterClosed",
    "NotLeasable",
    "InvalidLeaseOption",
    "InvalidMaxGrant",
    "InvalidHorizon",
    "InvalidExpire",
    "InvalidSkew",
    "InvalidFailure",
    "InvalidReply",
    "InvalidGrant",
    "InvalidStates",
    "error_for_status",
]


class RatecellError(Exception):
    """Base of every ratecell exception. ``status`` is the C status code
    (``None`` for errors raised by the Python layer alone)."""

    status: int | None = None

    def __init__(self, message: str | None = None) -> None:
        if message is None:
            message = status_str(self.status) if self.status is not None else "ratecell error"
        super().__init__(message)


class NullArgument(RatecellError):
    """RATECELL_NULL_ARGUMENT. The binding never passes NULL where the C ABI
    forbids it, so this means a bug in the binding."""

    status = 1


class InvalidConfig(RatecellError, ValueError):
    """A configuration field is out of range; ``field`` names it."""

    field: str = ""


class InvalidAlgorithm(InvalidConfig):
    """RATECELL_INVALID_ALGORITHM: not one of the seven algorithms."""

    status = 2
    field = "algorithm"


class InvalidLimit(InvalidConfig):
    """RATECELL_INVALID_LIMIT: limit outside 1 ..= 2^32 - 1 (or, for GCRA and
    the leaky bucket, above period_ns)."""

    status = 3
    field = "limit"


class InvalidPeriod(InvalidConfig):
    """RATECELL_INVALID_PERIOD_NS: period outside 1 µs ..= 366 days."""

    status = 4
    field = "period_ns"


class InvalidBurst(InvalidConfig):
    """RATECELL_INVALID_BURST: burst out of range for the algorithm."""

    status = 5
    field = "burst"


class InvalidSubWindows(InvalidConfig):
    """RATECELL_INVALID_SUB_WINDOWS: bucketed window with sub_windows outside
    1 ..= 64 or not dividing the period."""

    status = 6
    field = "sub_windows"


class InvalidCapacity(InvalidConfig):
    """RATECELL_INVALID_CAPACITY: more keys than memory can address."""

    status = 7
    field = "capacity"


class InvalidOverflow(InvalidConfig):
    """RATECELL_INVALID_OVERFLOW: not ``"deny"``, ``"allow"`` or ``"evict"``."""

    status = 8
    field = "overflow"


class InvalidClock(InvalidConfig):
    """RATECELL_INVALID_CLOCK: not ``"tsc"`` or ``"coarse"``."""

    status = 9
    field = "clock"


class UnknownAlgorithm(RatecellError, ValueError):
    """RATECELL_UNKNOWN_ALGORITHM: a name that names no algorithm."""

    status = 10


class OutOfMemory(RatecellError, MemoryError):
    """RATECELL_OUT_OF_MEMORY: the limiter's table could not be allocated."""

    status = 11


class _WithDecision(RatecellError):
    def __init__(self, decision: Decision, message: str | None = None) -> None:
        super().__init__(message)
        self.decision = decision


class TimedOut(_WithDecision, TimeoutError):
    """RATECELL_TIMED_OUT: ``acquire`` would not be admitted before its
    time-out. ``decision`` is the last (denied) decision; nothing was taken
    from the limit."""

    status = 12


class CostExceedsLimit(_WithDecision, ValueError):
    """RATECELL_COST_EXCEEDS_LIMIT: ``acquire`` of a cost that no wait can
    ever admit. ``decision`` has ``retry_after_ns == 2**64 - 1``."""

    status = 13


class InvalidLength(RatecellError, ValueError):
    """RATECELL_INVALID_LENGTH: a key or batch longer than any buffer can be
    (or, in C, a struct's size field this library does not know)."""

    status = 14


class Panic(RatecellError):
    """RATECELL_PANIC: a bug inside the library, caught at the C boundary.
    The limiter is still safe to use."""

    status = 15


class SnapshotError(RatecellError):
    """A snapshot could not be saved or restored (docs/SNAPSHOT.md)."""


class SnapshotIO(SnapshotError, OSError):
    """RATECELL_SNAPSHOT_IO: the snapshot file could not be read or written."""

    status = 16


class SnapshotNotFound(SnapshotError, FileNotFoundError):
    """RATECELL_SNAPSHOT_NOT_FOUND: no snapshot file at the path."""

    status = 17


class SnapshotDamaged(SnapshotError, ValueError):
    """RATECELL_SNAPSHOT_DAMAGED: not a snapshot, truncated, or damaged."""

    status = 18


class SnapshotVersion(SnapshotError, ValueError):
    """RATECELL_SNAPSHOT_VERSION: a snapshot format this library does not read."""

    status = 19


class SnapshotConfigMismatch(SnapshotError, ValueError):
    """RATECELL_SNAPSHOT_CONFIG_MISMATCH: the snapshot was saved from a
    limiter of another configuration."""

    status = 20


class SnapshotSeveralLimits(SnapshotError, ValueError):
    """RATECELL_SNAPSHOT_SEVERAL_LIMITS: reserved, no longer raised
    (limiters of several limits are saved since snapshot format version 2);
    kept so no status is renumbered."""

    status = 21


class SharedRegionError(RatecellError, OSError):
    """Base of the errors of ``Limiter(..., shared=path)``: the region file
    could not be used (statuses 22 to 28)."""


class SharedIO(SharedRegionError):
    """RATECELL_SHARED_IO: the file could not be opened, created, sized or
    mapped."""

    status = 22


class SharedNotARegion(SharedRegionError):
    """RATECELL_SHARED_NOT_A_REGION: the file is not a ratecell region."""

    status = 23


class SharedTruncated(SharedRegionError):
    """RATECELL_SHARED_TRUNCATED: the file is shorter than its region."""

    status = 24


class SharedVersion(SharedRegionError):
    """RATECELL_SHARED_VERSION: the region has another layout version."""

    status = 25


class SharedConfigMismatch(SharedRegionError, ValueError):
    """RATECELL_SHARED_CONFIG_MISMATCH: the region was made with another
    configuration."""

    status = 26


class SharedStale(SharedRegionError):
    """RATECELL_SHARED_STALE: the region was made before the last boot;
    remove the file."""

    status = 27


class SharedUnsupported(SharedRegionError, ValueError):
    """RATECELL_SHARED_UNSUPPORTED: this algorithm, capacity 0, or this
    platform cannot be shared."""

    status = 28


class ReconfigureRefused(RatecellError, ValueError):
    """RATECELL_RECONFIGURE_REFUSED: ``reconfigure`` was given a change with
    no carry-over for the kept states (another algorithm, a window's
    period, a count width) or one of what cannot change (number of limits,
    capacity, overflow, clock, a shared region); nothing changed."""

    status = 29


class InvalidTier(RatecellError, IndexError):
    """RATECELL_INVALID_TIER: a request named a ``tier`` the limiter does
    not have (not below its number of tiers); nothing was checked. The
    message names the tier and how many the limiter has."""

    status = 30


class NotLeasable(InvalidConfig):
    """RATECELL_NOT_LEASABLE: a leased limit of an algorithm that cannot be
    leased (only gcra, token_bucket, fixed_window and sliding_window can)."""

    status = 31
    field = "algorithm"


class InvalidLeaseOption(InvalidConfig):
    """A lease option out of range (``ratecell.redis.RedisLimiter`` in
    leased mode); ``field`` names it."""


class InvalidMaxGrant(InvalidLeaseOption):
    """RATECELL_INVALID_MAX_GRANT: ``max_grant`` is above the limit."""

    status = 32
    field = "max_grant"


class InvalidHorizon(InvalidLeaseOption):
    """RATECELL_INVALID_HORIZON: the refill horizon is longer than the
    period."""

    status = 33
    field = "horizon"


class InvalidExpire(InvalidLeaseOption):
    """RATECELL_INVALID_EXPIRE: a lease expiry for an algorithm other than
    gcra, or outside one emission interval ..= the period."""

    status = 34
    field = "lease_expiry"


class InvalidSkew(InvalidLeaseOption):
    """RATECELL_INVALID_SKEW: the skew margin is not less than the period."""

    status = 35
    field = "skew"


class InvalidFailure(InvalidLeaseOption):
    """RATECELL_INVALID_FAILURE: an unknown failure policy, or
    ``expected_nodes`` below 1 for ``local``."""

    status = 36
    field = "failure"


class InvalidReply(RatecellError, ValueError):
    """RATECELL_INVALID_REPLY: a reply that is not RATECELL.LEASE's."""

    status = 37


class InvalidGrant(RatecellError, ValueError):
    """RATECELL_INVALID_GRANT: a grant completed on leases that did not
    make it (a bug in the binding)."""

    status = 38


class InvalidStates(InvalidConfig):
    """RATECELL_INVALID_STATES: where the states come from does not fit the
    options (a field those states do not read is set). The Python
    constructors set the states themselves, so seeing it means a bug."""

    status = 39
    field = "states"


class InvalidKey(RatecellError, ValueError):
    """A ``str`` key that has no UTF-8 form (a lone surrogate, say): keys
    are bytes, and a ``str`` is its UTF-8. Raised by the Python layer, so
    ``status`` is None."""


class LimiterClosed(RatecellError, ValueError):
    """A call on a ``Limiter`` after ``close()`` (or after its ``with``
    block)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or "operation on a closed ratecell Limiter")


_BY_STATUS: dict[int, type[RatecellError]] = {
    cls.status: cls
    for cls in (
        NullArgument,
        InvalidAlgorithm,
        InvalidLimit,
        InvalidPeriod,
        InvalidBurst,
        InvalidSubWindows,
        InvalidCapacity,
        InvalidOverflow,
        InvalidClock,
        UnknownAlgorithm,
        OutOfMemory,
        TimedOut,
        CostExceedsLimit,
        InvalidLength,
        Panic,
        SnapshotIO,
        SnapshotNotFound,
        SnapshotDamaged,
        SnapshotVersion,
        SnapshotConfigMismatch,
        SnapshotSeveralLimits,
        SharedIO,
        SharedNotARegion,
        SharedTruncated,
        SharedVersion,
        SharedConfigMismatch,
        SharedStale,
        SharedUnsupported,
        ReconfigureRefused,
        InvalidTier,
        NotLeasable,
        InvalidMaxGrant,
        InvalidHorizon,
        InvalidExpire,
        InvalidSkew,
        InvalidFailure,
        InvalidReply,
        InvalidGrant,
        InvalidStates,
    )
    if cls.status is not None
}


def status_str(status: int | None) -> str:
    """``ratecell_status_str``: the library's description of a status."""
    if status is None:
        return "ratecell error"
    text: bytes = _ffi.lib.ratecell_status_str(status)
    return text.decode("utf-8", "replace")


def error_for_status(status: int, message: str | None = None) -> RatecellError:
    """The exception for a failed call's status (not for the two acquire
    statuses, which carry a decision and are raised where it is known)."""
    cls = _BY_STATUS.get(status)
    if cls is None or issubclass(cls, _WithDecision):
        err = RatecellError(message or f"{status_str(status)} (status {status})")
        err.status = status
        return err
    return cls(message)

"""ratecell: lock-free in-process rate limiting, from Python.

A ctypes binding of the ratecell C library (``include/ratecell.h``). One
``Limiter`` class covers a single shared limit (``capacity=0``) and per-key
limits (``capacity=N`` keys, allocated up front)::

    import ratecell

    with ratecell.Limiter("sliding_window", limit=5, period=1.0, capacity=10_000) as limiter:
        d = limiter.check("user:42")
        if not d.allowed:
            print(f"retry in {d.retry_after:.3f} s")

Decisions follow SPEC.md exactly, the same as the Rust, C and Go APIs
(``tests/parity``). Every call releases the GIL while in C.
"""

from ._errors import (
    CostExceedsLimit,
    InvalidAlgorithm,
    InvalidBurst,
    InvalidCapacity,
    InvalidClock,
    InvalidConfig,
    InvalidExpire,
    InvalidFailure,
    InvalidGrant,
    InvalidStates,
    InvalidHorizon,
    InvalidKey,
    InvalidLeaseOption,
    InvalidLength,
    InvalidLimit,
    InvalidMaxGrant,
    InvalidOverflow,
    InvalidPeriod,
    InvalidReply,
    InvalidSkew,
    InvalidSubWindows,
    InvalidTier,
    LimiterClosed,
    NotLeasable,
    NullArgument,
    OutOfMemory,
    Panic,
    SharedConfigMismatch,
    SharedIO,
    SharedNotARegion,
    SharedRegionError,
    SharedStale,
    SharedTruncated,
    SharedUnsupported,
    SharedVersion,
    RatecellError,
    ReconfigureRefused,
    SnapshotConfigMismatch,
    SnapshotDamaged,
    SnapshotError,
    SnapshotIO,
    SnapshotNotFound,
    SnapshotSeveralLimits,
    SnapshotVersion,
    TimedOut,
    UnknownAlgorithm,
)
from ._ffi import LIBRARY_PATH as _LIBRARY_PATH
from ._ffi import library_version
from ._limiter import Limiter
from ._multi import MAX_LIMITS, Limit, MultiDecision, MultiLimiter
from ._tiers import MAX_TIERS, TieredLimiter
from ._types import NEVER, Algorithm, Clock, Config, Decision, Overflow, Stats

__version__ = "0.1.0"

__all__ = [
    "Limiter",
    "MultiLimiter",
    "TieredLimiter",
    "MAX_TIERS",
    "Limit",
    "MultiDecision",
    "MAX_LIMITS",
    "Decision",
    "Stats",
    "Config",
    "Algorithm",
    "Overflow",
    "Clock",
    "NEVER",
    "library_path",
    "library_version",
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
    "SharedRegionError",
    "SharedIO",
    "SharedNotARegion",
    "SharedTruncated",
    "SharedVersion",
    "SharedConfigMismatch",
    "SharedStale",
    "SharedUnsupported",
    "ReconfigureRefused",
    "InvalidTier",
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
    "SnapshotError",
    "SnapshotIO",
    "SnapshotNotFound",
    "SnapshotDamaged",
    "SnapshotVersion",
    "SnapshotConfigMismatch",
    "SnapshotSeveralLimits",
]


def library_path() -> str:
    """The path of the loaded shared library (the copy bundled in the
    package, ``$RATECELL_LIBRARY``, or the repository's target/release)."""
    return str(_LIBRARY_PATH)

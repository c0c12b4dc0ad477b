"""The one place that touches the C library: finding and loading it, the C
structures of ``include/ratecell.h``, and ``argtypes``/``restype`` for every
function the package calls.

Nothing outside this module calls ``ctypes.CDLL`` or names a C symbol; the
rest of the package goes through the function objects defined here, or
through ``ratecell._speedups`` (see ``speedups``), which this module hands
the addresses of the functions it calls. The library is loaded with
``ctypes.CDLL`` (not ``PyDLL``), so every ctypes call releases the GIL while
it runs: a thread blocked in ``ratecell_acquire`` lets the others go on.
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import (
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Any

__all__ = [
    "LIBRARY_NAME",
    "LIBRARY_PATH",
    "U32_MAX",
    "U64_MAX",
    "CBatch",
    "CConfig",
    "CDecision",
    "CMultiDecision",
    "COptions",
    "CRequest",
    "NOW",
    "MAX_LIMITS",
    "NO_LIMIT",
    "CStats",
    "CLeaseOptions",
    "CGrantInfo",
    "CCompletion",
    "CLeaseStats",
    "LeasesHandle",
    "GrantHandle",
    "DenialsHandle",
    "LimiterHandle",
    "PersistedHandle",
    "STATES_FRESH",
    "STATES_PERSISTED",
    "STATES_SHARED",
    "STATES_SNAPSHOT",
    "lib",
    "speedups",
]

if sys.maxsize <= 2**32:
    # The key, cost and batch buffers are passed as raw 64-bit words.
    raise ImportError("ratecell needs a 64-bit Python")

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

if sys.platform == "darwin":
    LIBRARY_NAME = "libratecell.dylib"
elif sys.platform == "win32":
    LIBRARY_NAME = "ratecell.dll"
else:
    LIBRARY_NAME = "libratecell.so"

# The library's major.minor this package was written against: the C ABI
# may change between minor versions before 1.0.
ABI_VERSION = (0, 1)


def _repository_library(here: Path) -> Path | None:
    """target/release of the ratecell checkout this file lives in, if any
    (an editable install, or the tests run against the source tree)."""
    for parent in here.parents:
        if (parent / "Cargo.toml").is_file() and (parent / "include" / "ratecell.h").is_file():
            target = os.environ.get("CARGO_TARGET_DIR")
            base = Path(target) if target else parent / "target"
            if not base.is_absolute():
                base = parent / base
            return base / "release" / LIBRARY_NAME
    return None


def _bundled(here: Path) -> list[Path]:
    """The library the package's build put beside this module. setuptools-rust
    names it as it names extension modules (``libratecell.cpython-311-x86_64-
    linux-gnu.so``, whichever Python built the wheel); a plain
    ``libratecell.so`` is looked for too."""
    stem, suffix = os.path.splitext(LIBRARY_NAME)
    named = sorted(
        p for p in here.glob(stem + ".*") if p.suffix in (suffix, ".so", ".pyd") and p.is_file()
    )
    return named or [here / LIBRARY_NAME]


def _candidates() -> list[Path]:
    """Where the library is looked for, in order: the copy bundled in the
    package by ``pip install``, then ``$RATECELL_LIBRARY`` (a file, or a
    directory holding it), then the repository's cargo target directory."""
    here = Path(__file__).resolve().parent
    found = _bundled(here)
    env = os.environ.get("RATECELL_LIBRARY")
    if env:
        path = Path(env)
        found.append(path / LIBRARY_NAME if path.is_dir() else path)
    repo = _repository_library(here)
    if repo is not None:
        found.append(repo)
    return found


def _load() -> tuple[ctypes.CDLL, Path]:
    tried = _candidates()
    for path in tried:
        if path.is_file():
            return ctypes.CDLL(str(path)), path
    raise ImportError(
        "ratecell: the shared library was not found; looked at "
        + ", ".join(str(p) for p in tried)
        + ". Install the package with `pip install ./bindings/python` (it builds the "
        "library with cargo), or set RATECELL_LIBRARY to a built " + LIBRARY_NAME
    )


lib, LIBRARY_PATH = _load()


class CConfig(Structure):
    """``struct ratecell_config``."""

    _fields_ = [
        ("algorithm", c_uint32),
        ("limit", c_uint64),
        ("period_ns", c_uint64),
        ("burst", c_uint64),
        ("sub_windows", c_uint32),
        ("capacity", c_uint64),
        ("overflow", c_uint32),
        ("clock", c_uint32),
    ]


class CDecision(Structure):
    """``struct ratecell_decision``."""

    _fields_ = [
        ("allowed", c_bool),
        ("limit", c_uint64),
        ("remaining", c_uint64),
        ("retry_after_ns", c_uint64),
        ("reset_after_ns", c_uint64),
        ("wait_ns", c_uint64),
    ]


MAX_LIMITS = 8
"""``RATECELL_MAX_LIMITS``."""
MAX_TIERS = 16
"""``RATECELL_MAX_TIERS``."""
NO_LIMIT = U32_MAX
"""``RATECELL_NO_LIMIT``."""


class CMultiDecision(Structure):
    """``struct ratecell_multi_decision``."""

    _fields_ = [
        ("decision", CDecision),
        ("denied_by", c_uint32),
        ("count", c_uint32),
        ("limits", CDecision * MAX_LIMITS),
    ]


class CStats(Structure):
    """``struct ratecell_stats``."""

    _fields_ = [
        ("checks", c_uint64),
        ("allowed", c_uint64),
        ("denied", c_uint64),
        ("keys_tracked", c_uint64),
        ("evictions", c_uint64),
        ("overflows", c_uint64),
        ("capacity", c_uint64),
        ("bytes_allocated", c_uint64),
        ("evicted_live", c_uint64),
    ]


class CRequest(Structure):
    """``struct ratecell_request``: one request (key, cost, time, tier)."""

    _fields_ = [
        ("size", c_uint32),
        ("tier", c_uint32),
        ("key_id", c_uint64),
        # A bytes object (ctypes keeps it alive with the structure), or
        # None for the int key `key_id`.
        ("key_bytes", c_char_p),
        ("key_len", c_size_t),
        ("cost", c_uint64),
        ("at_ns", c_uint64),
    ]


class CBatch(Structure):
    """``struct ratecell_batch``: ``n`` requests at one time."""

    _fields_ = [
        ("size", c_uint32),
        ("n", c_size_t),
        ("keys", c_void_p),
        ("costs", c_void_p),
        ("tiers", c_void_p),
        ("at_ns", c_uint64),
    ]


class COptions(Structure):
    """``struct ratecell_options``: what ``ratecell_limiter_build`` makes,
    with where its states come from (``states``, a ``STATES_*`` value)."""

    _fields_ = [
        ("size", c_uint32),
        ("states", c_uint32),
        ("configs", POINTER(CConfig)),
        ("n_limits", c_size_t),
        ("n_tiers", c_size_t),
        ("path", c_char_p),
        ("save_every_ns", c_uint64),
        ("shared_path", c_char_p),
        ("shared_mode", c_uint32),
    ]


# `ratecell_states`: where a limiter's states come from.
STATES_FRESH = 0
STATES_SNAPSHOT = 1
STATES_PERSISTED = 2
STATES_SHARED = 3


class CLeaseOptions(Structure):
    """``struct ratecell_lease_options``: how a node holds grants."""

    _fields_ = [
        ("size", c_uint32),
        ("failure", c_uint32),
        ("expected_nodes", c_uint32),
        ("send_at", c_uint32),
        ("max_grant", c_uint64),
        ("horizon_ns", c_uint64),
        ("expire_ns", c_uint64),
        ("skew_ns", c_uint64),
        ("prefix", c_char_p),
        ("prefix_len", c_size_t),
    ]


class CGrantInfo(Structure):
    """``struct ratecell_grant_info``."""

    _fields_ = [
        ("key", c_void_p),
        ("key_len", c_size_t),
        ("want", c_uint64),
        ("at_ns", c_uint64),
        ("is_fetch", c_bool),
    ]


class CCompletion(Structure):
    """``struct ratecell_completion``: what a grant's reply decided."""

    _fields_ = [
        ("has_decision", c_bool),
        ("decision", CDecision),
        ("has_retry", c_bool),
        ("retry_at_ns", c_uint64),
    ]


class CLeaseStats(Structure):
    """``struct ratecell_lease_stats``."""

    _fields_ = [
        ("fetches", c_uint64),
        ("refills", c_uint64),
        ("replies", c_uint64),
        ("units_granted", c_uint64),
        ("empty_grants", c_uint64),
        ("failures", c_uint64),
        ("lease_fallbacks", c_uint64),
        ("remembered_denials", c_uint64),
        ("direct", c_uint64),
        ("keys", c_uint64),
    ]


LEASE_MAX_ARGS = 19
"""``RATECELL_LEASE_MAX_ARGS``."""
STEP_DECIDED, STEP_REFILL, STEP_FETCH, STEP_DIRECT = 0, 1, 2, 3
"""``RATECELL_STEP_*``: what ``ratecell_leases_check`` found to do."""
FAILURE_DENY, FAILURE_LOCAL = 0, 1
"""``RATECELL_FAILURE_*``."""

NOW = U64_MAX
"""``RATECELL_NOW``: ``at_ns`` of a request decided at the limiter's clock."""
REQUEST_SIZE = ctypes.sizeof(CRequest)
BATCH_SIZE = ctypes.sizeof(CBatch)

# Status-returning functions: restype c_uint32 (ratecell_status is a
# uint32_t in C11). Pointers to caller buffers are c_void_p so that a ctypes
# array, a buffer's address (int) or None (NULL for an empty buffer) can be
# passed without building a pointer object per call.
_STATUS = c_uint32
# RATECELL_DENIED: ratecell_allow's answer for a request not admitted (an
# outcome, not an error; RATECELL_OK, 0, is its answer for one admitted).
DENIED = 40
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "ratecell_config_init": (None, [POINTER(CConfig), c_uint32, c_uint64, c_uint64]),
    "ratecell_status_str": (c_char_p, [c_uint32]),
    "ratecell_version": (c_char_p, []),
    "ratecell_algorithm_name": (c_char_p, [c_uint32]),
    "ratecell_algorithm_from_name": (_STATUS, [c_char_p, c_size_t, POINTER(c_uint32)]),
    "ratecell_options_init": (None, [POINTER(COptions)]),
    "ratecell_limiter_build": (_STATUS, [POINTER(COptions), POINTER(c_void_p)]),
    "ratecell_limiter_free": (None, [c_void_p]),
    "ratecell_limiter_config": (_STATUS, [c_void_p, POINTER(CConfig)]),
    "ratecell_limiter_tiers": (c_uint32, [c_void_p]),
    "ratecell_limiter_reconfigure": (_STATUS, [c_void_p, POINTER(CConfig), c_size_t]),
    "ratecell_request_init": (None, [POINTER(CRequest)]),
    "ratecell_batch_init": (None, [POINTER(CBatch)]),
    "ratecell_check": (_STATUS, [c_void_p, POINTER(CRequest), POINTER(CDecision)]),
    "ratecell_check_each": (_STATUS, [c_void_p, POINTER(CRequest), POINTER(CMultiDecision)]),
    "ratecell_check_batch": (_STATUS, [c_void_p, POINTER(CBatch), c_void_p, c_void_p]),
    "ratecell_allow": (_STATUS, [c_void_p, c_uint64]),
    "ratecell_acquire": (_STATUS, [c_void_p, POINTER(CRequest), c_uint64, POINTER(CDecision)]),
    "ratecell_reset": (_STATUS, [c_void_p, POINTER(CRequest)]),
    "ratecell_now_ns": (c_uint64, [c_void_p]),
    "ratecell_stats": (_STATUS, [c_void_p, POINTER(CStats)]),
    "ratecell_snapshot_save": (_STATUS, [c_void_p, c_char_p]),
    "ratecell_snapshot_stop": (_STATUS, [c_void_p]),
    "ratecell_snapshot_save_at": (_STATUS, [c_void_p, c_char_p, c_uint64]),
    "ratecell_lease_options_init": (None, [POINTER(CLeaseOptions)]),
    "ratecell_leases_new": (_STATUS, [POINTER(CConfig), POINTER(CLeaseOptions), POINTER(c_void_p)]),
    "ratecell_leases_free": (None, [c_void_p]),
    "ratecell_leases_now_ns": (c_uint64, [c_void_p]),
    "ratecell_leases_check": (
        _STATUS,
        [c_void_p, POINTER(CRequest), POINTER(c_uint32), POINTER(CDecision), POINTER(c_void_p)],
    ),
    "ratecell_grant_info": (_STATUS, [c_void_p, POINTER(CGrantInfo)]),
    "ratecell_grant_command": (
        _STATUS,
        [c_void_p, c_void_p, c_void_p, c_size_t, POINTER(c_size_t)],
    ),
    "ratecell_grant_free": (None, [c_void_p]),
    "ratecell_leases_complete": (
        _STATUS,
        [c_void_p, c_void_p, c_void_p, c_size_t, c_uint64, POINTER(CCompletion)],
    ),
    "ratecell_leases_retry": (_STATUS, [c_void_p, c_void_p, c_uint64, POINTER(c_void_p)]),
    "ratecell_leases_stats": (_STATUS, [c_void_p, POINTER(CLeaseStats)]),
    "ratecell_denials_new": (_STATUS, [c_uint64, c_uint32, POINTER(c_void_p)]),
    "ratecell_denials_free": (None, [c_void_p]),
    "ratecell_denials_check": (
        _STATUS,
        [c_void_p, POINTER(CRequest), POINTER(c_bool), POINTER(CDecision)],
    ),
    "ratecell_denials_remember": (_STATUS, [c_void_p, POINTER(CRequest), POINTER(CDecision)]),
}

for _name, (_restype, _argtypes) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes


class LimiterHandle(c_void_p):
    """An owned ``ratecell_limiter *``, freed when the last reference to it
    goes away.

    ``Limiter.close()`` only drops the limiter's own reference. A thread that
    is inside a call (say, sleeping in ``ratecell_acquire`` with the GIL
    released) holds another one in its frame, so the C object outlives that
    call and ``ratecell_limiter_free`` is always the last call on it, as the
    header requires, whatever order Python threads close and call in.
    """

    __slots__ = ()

    # The free function is bound as a default so that it is still reachable
    # when a handle is collected during interpreter shutdown.
    def __del__(self, _free: object = lib.ratecell_limiter_free) -> None:
        if self.value:
            _free(self)  # type: ignore[operator]
            self.value = None

    # A copy would be a second owner of the same C object: two frees. Every
    # way Python duplicates an object (copy, deepcopy, pickle) is refused.
    def __copy__(self) -> LimiterHandle:
        raise TypeError(NOT_COPYABLE)

    def __deepcopy__(self, memo: object) -> LimiterHandle:
        raise TypeError(NOT_COPYABLE)

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError(NOT_COPYABLE)


class PersistedHandle(LimiterHandle):
    """An owned ``ratecell_limiter *`` made with ``RATECELL_STATES_PERSISTED``,
    and the file it is saved to (``path``). Freeing it stops the library's
    saving thread and saves a last time, reporting to nobody;
    ``close_now`` makes that last save first and returns its status."""

    __slots__ = ("path",)

    def __init__(self, path: bytes = b"") -> None:
        super().__init__()
        self.path = path

    def close_now(self) -> int | None:
        """Stops the saving thread and saves a last time
        (``ratecell_snapshot_stop``, after which the free saves nothing
        more), returning that save's status, when no other thread is inside
        a call on the limiter; None, doing nothing, when one is (or this
        Python cannot tell): that call's admissions must reach the free's
        last save.

        A thread inside a call holds a reference in its frame (see
        ``LimiterHandle``), so the references counted here are the calls
        in flight: the caller's local and ``getrefcount``'s argument are
        the only ones when there are none."""
        getrefcount = getattr(sys, "getrefcount", None)
        if getrefcount is None or getrefcount(self) > _OWN_REFERENCES:
            return None
        status: int = lib.ratecell_snapshot_stop(self)
        return status


# In `PersistedHandle.close_now`: the closing method's local and
# getrefcount's argument.
_OWN_REFERENCES = 3


class LeasesHandle(c_void_p):
    """An owned ``ratecell_leases *``, freed when the last reference goes
    away (a thread inside a call holds one in its frame, as for
    ``LimiterHandle``)."""

    __slots__ = ()

    def __del__(self, _free: object = lib.ratecell_leases_free) -> None:
        if self.value:
            _free(self)  # type: ignore[operator]
            self.value = None


class GrantHandle(c_void_p):
    """An owned ``ratecell_grant *``, freed when the last reference goes
    away. A grant keeps its key's entry alive, not the leases, so it may
    outlive them (it is then only freed)."""

    __slots__ = ()

    def __del__(self, _free: object = lib.ratecell_grant_free) -> None:
        if self.value:
            _free(self)  # type: ignore[operator]
            self.value = None


class DenialsHandle(c_void_p):
    """An owned ``ratecell_denials *``, freed when the last reference goes
    away."""

    __slots__ = ()

    def __del__(self, _free: object = lib.ratecell_denials_free) -> None:
        if self.value:
            _free(self)  # type: ignore[operator]
            self.value = None


NOT_COPYABLE = (
    "a ratecell.Limiter cannot be copied or pickled: it owns a native limiter. "
    "Share the one object between threads; in another process (multiprocessing), "
    "make a new Limiter there from the same configuration (each process then "
    "limits on its own). For one limit across the processes of one machine, "
    "open the same shared=path in each; across machines, use the Redis module"
)


def library_version() -> str:
    """``ratecell_version()``: the loaded library's version string."""
    version: bytes = lib.ratecell_version()
    return version.decode("ascii")


def _check_abi() -> None:
    parts = library_version().split(".")
    if tuple(int(p) for p in parts[:2]) != ABI_VERSION:
        raise ImportError(
            f"ratecell: {LIBRARY_PATH} is version {library_version()}, but this package "
            f"speaks the C ABI of {ABI_VERSION[0]}.{ABI_VERSION[1]}.x"
        )


_check_abi()

SPEEDUPS_DISABLED = bool(os.environ.get("RATECELL_NO_SPEEDUPS"))
"""``RATECELL_NO_SPEEDUPS`` set and not empty: the ctypes path everywhere."""


def speedups(decision: type, raise_error: Any) -> Any:
    """``ratecell._speedups`` bound to this library, or None when it is not
    built (a pure ctypes install), cannot be loaded by this interpreter, or
    ``RATECELL_NO_SPEEDUPS`` is set. The module fills a ``ratecell_request``
    on the C stack and calls ``ratecell_check`` and ``ratecell_allow`` at
    the addresses given here, holding the GIL (they never block), and
    builds ``decision`` objects itself; a failed call's status goes to
    ``raise_error(status, handle, tier)``, which returns the exception."""
    if SPEEDUPS_DISABLED:
        return None
    try:
        from . import _speedups
    except ImportError:
        return None

    def address(fn: Any) -> int | None:
        return ctypes.cast(fn, c_void_p).value

    _speedups.init(
        address(lib.ratecell_check),
        address(lib.ratecell_allow),
        ctypes.sizeof(CRequest),
        ctypes.sizeof(CDecision),
        decision,
        raise_error,
    )
    # A module built before the leased check existed has no init_leases:
    # ratecell.redis then takes the ctypes path.
    if hasattr(_speedups, "init_leases"):
        _speedups.init_leases(address(lib.ratecell_leases_check), address(lib.ratecell_grant_free))
    return _speedups

"""``Limiter``: the owned C limiter handle and every call on it.

Owns argument conversion (keys, costs, times, buffers of keys) and the
mapping of C statuses to exceptions; the C signatures themselves live in
``_ffi``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import datetime
import math
import operator
import os
from array import array
from collections.abc import Sequence
from ctypes import c_char, c_uint64
from typing import Any

from . import _errors, _ffi
from ._errors import CostExceedsLimit, LimiterClosed, TimedOut
from ._decision import decision_from_c
from ._types import (
    Algorithm,
    Clock,
    Config,
    Decision,
    Limit,
    Overflow,
    Stats,
)

__all__ = ["Limiter", "Key", "BytesKey"]

U32_MAX = _ffi.U32_MAX
U64_MAX = _ffi.U64_MAX

BytesKey = bytes | bytearray | memoryview | str
Key = int | BytesKey

_lib = _ffi.lib
_CDecision = _ffi.CDecision
_CRequest = _ffi.CRequest
_REQUEST_SIZE = _ffi.REQUEST_SIZE
_NOW = _ffi.NOW
_check = _lib.ratecell_check
_allow = _lib.ratecell_allow
_check_batch = _lib.ratecell_check_batch
_acquire = _lib.ratecell_acquire
_reset = _lib.ratecell_reset
_tiers = _lib.ratecell_limiter_tiers
_now_ns = _lib.ratecell_now_ns

_TIMED_OUT = TimedOut.status
_COST_EXCEEDS_LIMIT = CostExceedsLimit.status
_INVALID_TIER = _errors.InvalidTier.status


def _tier_error(h: Any, tier: Any) -> _errors.InvalidTier:
    """``InvalidTier`` naming ``tier`` and how many tiers the limiter of
    handle ``h`` has."""
    n = int(_tiers(h)) if h else 0
    return _errors.InvalidTier(
        f"tier {tier} is outside 0..{n - 1}: the limiter has {n} tier{'' if n == 1 else 's'}"
    )


def _raise_error(status: int, h: Any, tier: Any) -> _errors.RatecellError:
    """The exception of a failed request's ``status``; for
    RATECELL_INVALID_TIER, naming ``tier`` (None is tier 0) and the count."""
    if status == _INVALID_TIER:
        return _tier_error(h, 0 if tier is None else tier)
    return _errors.error_for_status(status)


# check and allow in C when the extension module is there: no ctypes call,
# no Decision built in Python. It takes exact int, str and bytes keys,
# exact int costs in range, `at` None or an exact int and `tier` None or an
# exact int, and answers None for anything else, which the ctypes path
# below then handles (and refuses with the same errors).
_speedups = _ffi.speedups(Decision, _raise_error)
_fast_check = _speedups.check if _speedups is not None else None
_fast_allow = _speedups.allow if _speedups is not None else None
# ratecell.redis's leased check (ratecell_leases_check), when the extension
# module has it.
_fast_lease_check = getattr(_speedups, "lease_check", None)

# memoryview formats of a native 64-bit unsigned integer ("L" is what numpy
# and array('L') export on LP64 platforms; itemsize is checked too).
_U64_FORMATS = frozenset({"Q", "L", "@Q", "@L", "=Q", "=L", "<Q", "<L"})
_U64_TYPESTR = "<u8"  # numpy's array interface, little-endian uint64


def _u64(value: Any, name: str) -> int:
    """``value`` as an int in 0 ..= 2**64 - 1 (ctypes would silently wrap
    anything outside)."""
    if type(value) is not int:
        if isinstance(value, (float, bool)) or value is None:
            raise TypeError(f"{name} must be an int, not {type(value).__name__}")
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if not 0 <= value <= U64_MAX:
        raise ValueError(f"{name} = {value} is outside 0 ..= 2**64 - 1")
    checked: int = value
    return checked


def _bytes_key(key: Any) -> bytes:
    if type(key) is bytes:
        return key
    if isinstance(key, str):
        return key.encode("utf-8")
    try:
        # Keys are short: one copy is cheaper than pinning the buffer, and
        # it is the only way to read a non-contiguous memoryview.
        return memoryview(key).tobytes()
    except TypeError:
        raise TypeError(
            f"a byte key must be bytes, bytearray, memoryview or str, not {type(key).__name__}"
        ) from None


def _is_bytes_key(key: Any) -> bool:
    return isinstance(key, (bytes, bytearray, memoryview, str))


def _timeout_ns(timeout: Any) -> int:
    """``timeout`` in nanoseconds for the C ABI, whose ``U64_MAX`` means no
    limit: None and ``float('inf')`` wait without limit; any finite timeout
    must fit below that (about 584 years), else it is refused rather than
    silently turned into "forever" (issue 20, item 10)."""
    if timeout is None:
        return U64_MAX
    if isinstance(timeout, datetime.timedelta):
        seconds: int | float = timeout.total_seconds()
    elif type(timeout) is int:
        # Exact: no float conversion to overflow.
        seconds = timeout
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(f"timeout must be seconds or a timedelta, not {type(timeout).__name__}")
    if isinstance(seconds, float) and math.isinf(seconds) and seconds > 0:
        return U64_MAX
    if (isinstance(seconds, float) and math.isnan(seconds)) or seconds < 0:
        raise ValueError(f"timeout must be >= 0 seconds, not {timeout!r}")
    # Ints exactly; floats compared before rounding (1e300 * 1e9 is inf).
    ns = seconds * 1_000_000_000 if isinstance(seconds, int) else seconds * 1e9
    if ns >= U64_MAX:
        raise ValueError(
            f"timeout must be below {U64_MAX // 1_000_000_000} seconds, not {timeout!r}"
            " (pass None or float('inf') to wait without limit)"
        )
    return ns if isinstance(ns, int) else round(ns)


def _at_ns(at: Any) -> int:
    """``at`` (UNIX ns) for ``ratecell_request.at_ns``: an int below
    ``2**64 - 1``, which the C ABI reserves for "now" (``RATECELL_NOW``)."""
    at_ns = _u64(at, "at")
    if at_ns == _NOW:
        raise ValueError(
            f"at = {at_ns} is outside 0 ..= 2**64 - 2 (2**64 - 1 is the C ABI's 'now')"
        )
    return at_ns


def _tier(tier: Any, h: Any) -> int:
    """``tier`` as a ``uint32_t``: an int; one no ``uint32_t`` holds raises
    ``InvalidTier`` (the library refuses the others it does not have)."""
    if type(tier) is not int:
        raise TypeError(f"tier must be an int, not {type(tier).__name__}")
    if not 0 <= tier <= U32_MAX:
        raise _tier_error(h, tier)
    return tier


def _default_request() -> bytes:
    """The bytes of a request as ``ratecell_request_init`` sets it up (key
    id 0, cost 1, now, tier 0, its size)."""
    request = _CRequest()
    _lib.ratecell_request_init(request)
    if request.size != _REQUEST_SIZE:
        raise ImportError(
            f"ratecell: struct ratecell_request is {request.size} bytes, not {_REQUEST_SIZE}"
        )
    return bytes(request)


# Copying these bytes into a new request costs a fraction of what setting
# its seven fields from Python does (the ctypes path, per call).
_DEFAULT_REQUEST = _default_request()
_new_request = _CRequest.from_buffer_copy


def _request(h: Any, key: Any, cost: Any, at: Any, tier: Any) -> _ffi.CRequest:
    """The ``ratecell_request`` of ``(key, cost, at, tier)``, each checked
    (a refusal raises, naming the argument)."""
    if type(key) is int and 0 <= key <= U64_MAX:
        raw = None
    elif _is_bytes_key(key):
        raw = _bytes_key(key)
    else:
        key = _u64(key, "key")
        raw = None
    if type(cost) is not int or not 0 <= cost <= U64_MAX:
        cost = _u64(cost, "cost")
    at_ns = None if at is None else _at_ns(at)
    t = None if tier is None else _tier(tier, h)
    request = _new_request(_DEFAULT_REQUEST)
    if raw is not None:
        # ctypes keeps `raw` alive with the request.
        request.key_bytes = raw
        request.key_len = len(raw)
    elif key:
        request.key_id = key
    if cost != 1:
        request.cost = cost
    if at_ns is not None:
        request.at_ns = at_ns
    if t:
        request.tier = t
    return request


def _decide(h: Any, key: Any, cost: Any, at: Any, tier: Any) -> Decision:
    """``Limiter.check`` on the ctypes path."""
    out = _CDecision()
    status = _check(h, _request(h, key, cost, at, tier), out)
    if status:
        raise _raise_error(status, h, tier)
    return decision_from_c(out)


def _tier_array(tiers: Any, n: int, h: Any) -> array[int]:
    """``tiers`` (one per request) as the u32s the C ABI reads. A value no
    tier of the limiter has raises ``InvalidTier`` naming the first (the
    library would refuse the batch all the same, without naming it)."""
    if isinstance(tiers, (bytes, bytearray, str)):
        raise TypeError(f"tiers must be an iterable of ints, not {type(tiers).__name__}")
    try:
        given = list(tiers)
    except TypeError:
        raise TypeError(f"tiers must be an iterable of ints, not {type(tiers).__name__}") from None
    values = []
    for i, t in enumerate(given):
        try:
            values.append(operator.index(t))
        except TypeError:
            raise TypeError(f"tiers[{i}] must be an int, not {type(t).__name__}") from None
    if len(values) != n:
        raise ValueError(f"{n} keys but {len(values)} tiers")
    count = int(_tiers(h))
    for t in values:
        if not 0 <= t < count:
            raise _tier_error(h, t)
    return array("I", values)


def _u64_buffer(obj: Any, name: str) -> tuple[Any, int, Any]:
    """``(pointer argument, length, keep-alive)`` for a sequence of u64.

    Contiguous, 8-byte aligned native uint64 buffers (``array('Q')``, numpy
    ``uint64`` arrays, ctypes arrays, ...) are passed to C in place; a
    misaligned one is copied into an aligned buffer (C reads ``uint64_t``
    there); anything else (lists, other dtypes or byte orders, object
    arrays) is converted once into an ``array('Q')``. Bytes and strings are
    refused: they are byte keys, not a batch of u64 keys.
    """
    if isinstance(obj, (bytes, bytearray, str)) or (
        isinstance(obj, memoryview)
        and obj.format in ("B", "b", "c")
        and isinstance(obj.obj, (bytes, bytearray))
    ):
        raise TypeError(
            f"{name} must be a buffer or an iterable of int keys, not {type(obj).__name__} "
            "(a batch takes u64 keys; check byte-string keys one by one with check())"
        )
    interface = getattr(obj, "__array_interface__", None)
    if isinstance(interface, dict):
        # numpy-like: its data pointer is usable even when the array is
        # read-only, which the buffer protocol path below would have to copy.
        shape = interface.get("shape")
        data = interface.get("data")
        if (
            interface.get("typestr") == _U64_TYPESTR
            and isinstance(shape, tuple)
            and len(shape) == 1
            and interface.get("strides") in (None, (8,))
            and interface.get("mask") is None
            and isinstance(data, tuple)
        ):
            n = shape[0]
            if n == 0:
                return None, 0, obj
            if data[0] % ctypes.alignment(c_uint64) == 0:
                return data[0], n, obj
            aligned = (c_uint64 * n)()
            ctypes.memmove(aligned, data[0], n * 8)
            return aligned, n, aligned
    try:
        view = memoryview(obj)
    except (TypeError, ValueError, NotImplementedError, BufferError):
        # Not a buffer, or one the buffer protocol cannot describe (numpy
        # object arrays): read it element by element.
        values = obj
    else:
        if (
            view.ndim == 1
            and view.itemsize == 8
            and view.format in _U64_FORMATS
            and view.c_contiguous
        ):
            n = len(view)
            if n == 0:
                return None, 0, None
            kind = c_uint64 * n
            if not view.readonly:
                buf = kind.from_buffer(view)
                if ctypes.addressof(buf) % ctypes.alignment(c_uint64) == 0:
                    return buf, n, buf
            # Read-only, or misaligned: an aligned copy.
            buf = kind.from_buffer_copy(view)
            return buf, n, buf
        try:
            values = view.tolist()
        except NotImplementedError:
            # A format memoryview cannot read (another byte order).
            values = obj
    if not isinstance(values, (list, tuple)):
        try:
            values = list(values)
        except TypeError:
            raise TypeError(
                f"{name} must be a buffer or an iterable of ints, not {type(obj).__name__}"
            ) from None
    kinds = set(map(type, values))
    if kinds - {int}:
        # What array('Q') would take but check() refuses (bools), or what it
        # would refuse with a message that does not name the element.
        for i, value in enumerate(values):
            kind = type(value)
            if kind is not int and (
                issubclass(kind, bool)
                or kind.__name__ in ("bool", "bool_")
                or not hasattr(kind, "__index__")
            ):
                raise TypeError(f"{name}[{i}] must be an int, not {kind.__name__}")
    try:
        converted = array("Q", values)
    except OverflowError:
        raise ValueError(f"{name}: every value must be in 0 ..= 2**64 - 1") from None
    except TypeError as e:
        raise TypeError(f"{name} must be a buffer or an iterable of ints ({e})") from None
    n = len(converted)
    return (converted.buffer_info()[0] if n else None), n, converted


def _address(pointer: Any) -> int:
    """The address a pointer argument of ``_u64_buffer`` or ``_out_flags``
    stands for (0 for None)."""
    if pointer is None:
        return 0
    if isinstance(pointer, int):
        return pointer
    return ctypes.addressof(pointer)


def _refuse_overlap(out: int, out_len: int, buf: int, buf_len: int, name: str) -> None:
    """The C ABI forbids an output overlapping an input."""
    if out and buf and out < buf + buf_len and buf < out + out_len:
        raise ValueError(f"out overlaps {name}: give a separate buffer for the flags")


def _out_flags(out: Any, n: int) -> tuple[Any, Any]:
    """``(result object, pointer argument)`` for ``n`` allowed flags."""
    if out is None:
        flags = bytearray(n)
        return flags, ((c_char * n).from_buffer(flags) if n else None)
    view = memoryview(out)
    if view.readonly or not view.c_contiguous or view.itemsize != 1:
        raise TypeError("out must be a writable contiguous buffer of bytes (or bools)")
    if view.nbytes < n:
        raise ValueError(f"out holds {view.nbytes} flags; the batch has {n}")
    return out, ((c_char * n).from_buffer(view) if n else None)


class Limiter:
    """A rate limiter over the ratecell C library.

    ``capacity=0`` (the default) makes one shared state: every key argument
    is ignored. ``capacity > 0`` makes a table of that many keys, allocated
    up front. Keys are ints in ``0 ..= 2**64 - 1`` or byte strings
    (``bytes``, ``bytearray``, ``memoryview``, or ``str`` as UTF-8); the int
    ``k`` and the bytes ``k.to_bytes(8, "little")`` are the same key.

    Thread-safe: share one limiter between threads. ``check`` and ``allow``
    hold the GIL for the tens of nanoseconds they spend in C; every other
    call releases it while in C, so ``acquire`` sleeps without blocking
    other threads.
    Use it as a context manager or call ``close()``; calls after that raise
    ``LimiterClosed``.
    """

    __slots__ = ("_h", "__weakref__")

    # A copy would share the native handle with the original (a use after
    # free once either is closed): copy, deepcopy and pickle are refused.
    def __copy__(self) -> Limiter:
        raise TypeError(_ffi.NOT_COPYABLE)

    def __deepcopy__(self, memo: object) -> Limiter:
        raise TypeError(_ffi.NOT_COPYABLE)

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError(_ffi.NOT_COPYABLE)

    def __init__(
        self,
        algorithm: Algorithm | str | int,
        limit: int,
        period_ns: int | None = None,
        *,
        period: float | datetime.timedelta | None = None,
        burst: int = 0,
        sub_windows: int | None = None,
        capacity: int = 0,
        overflow: Overflow | str | int = Overflow.DENY,
        clock: Clock | str | int = Clock.TSC,
        shared: str | os.PathLike[str] | None = None,
        shared_mode: int = 0o600,
        persist: str | os.PathLike[str] | None = None,
        every: float | datetime.timedelta = 5.0,
    ) -> None:
        """Makes a limiter of ``limit`` units per period.

        The period is ``period_ns`` (int nanoseconds) or ``period`` (seconds
        as a number, or a ``timedelta``); give exactly one. ``burst`` 0 means
        "same as limit"; ``sub_windows`` defaults to 10 when 10 divides the
        period, else 1 (it matters only for the bucketed window). Enum
        arguments take the enum, its value, or its name (``"gcra"``,
        ``"allow"``, ``"coarse"``). An out-of-range field raises the
        ``InvalidConfig`` subclass naming it.

        ``shared=path`` puts the table in the file ``path`` (a bare name is
        placed under ``/dev/shm``), created with ``shared_mode`` by the
        first process and attached by the others: every process on the
        machine that opens it, in any language, shares one limit. Needs
        ``capacity >= 1`` and a word algorithm; a region that does not fit
        raises a ``SharedRegionError`` subclass. Open it in each process
        (after a fork, or in each ``multiprocessing`` worker): a limiter
        cannot be pickled, but a path can.

        ``persist=path`` makes the limits survive a restart (crash-safe
        limits in one line): the limiter is restored from the snapshot file
        ``path`` if it exists (else made fresh), and a background thread of
        the library saves it there atomically every ``every`` seconds (a
        number or a ``timedelta``; at least 1 ms). A file that exists but
        cannot be restored raises (``SnapshotDamaged``, or
        ``SnapshotConfigMismatch`` for another configuration): remove it to
        start afresh. ``close()`` saves a last time (raising ``SnapshotIO``
        if that fails) and stops the thread. Not with ``shared``.
        """
        self._h: _ffi.LimiterHandle | None = None
        if (period_ns is None) == (period is None):
            raise TypeError("give exactly one of period_ns (ns) and period (seconds)")
        if period is not None:
            period_ns = _period_ns(period)
        algorithm_value = _enum_value(algorithm, Algorithm, "algorithm", _errors.InvalidAlgorithm)
        overflow_value = _enum_value(overflow, Overflow, "overflow", _errors.InvalidOverflow)
        clock_value = _enum_value(clock, Clock, "clock", _errors.InvalidClock)
        limit = _config_int(limit, "limit", _errors.InvalidLimit, U64_MAX)
        period_ns = _config_int(period_ns, "period_ns", _errors.InvalidPeriod, U64_MAX)
        burst = _config_int(burst, "burst", _errors.InvalidBurst, U64_MAX)
        capacity = _config_int(capacity, "capacity", _errors.InvalidCapacity, U64_MAX)

        cfg = _ffi.CConfig()
        _lib.ratecell_config_init(cfg, algorithm_value, limit, period_ns)
        cfg.burst = burst
        if sub_windows is not None:
            cfg.sub_windows = _config_int(
                sub_windows, "sub_windows", _errors.InvalidSubWindows, U32_MAX
            )
        cfg.capacity = capacity
        cfg.overflow = overflow_value
        cfg.clock = clock_value

        configs = (_ffi.CConfig * 1)(cfg)
        if persist is not None:
            if shared is not None:
                raise ValueError(
                    "persist and shared cannot be combined: a shared region lives in its file"
                )
            self._h = _open_persisted(configs, persist, every)
            return
        self._h = _build(configs, 1, 0, shared, shared_mode)

    # -- lifetime ---------------------------------------------------------

    def close(self) -> None:
        """Releases the limiter. Idempotent. A call still running in another
        thread (an ``acquire`` asleep) finishes first: the C object is freed
        when the last call on it returns.

        A limiter made with ``persist=`` is saved a last time first (raising
        ``SnapshotIO`` if that save fails, after which it is closed all the
        same); its saving thread stops when the C object is freed."""
        h = self._h
        self._h = None
        if isinstance(h, _ffi.PersistedHandle) and h.persisted:
            status = h.close_now()
            if status is None:
                # A call still runs in another thread and holds the handle:
                # the C object (and its last save) must wait for it, so the
                # error is raised from a save made now; the close when that
                # call returns saves once more, keeping what it admitted.
                status = _lib.ratecell_persisted_save(h.persisted)
            if status:
                raise _errors.error_for_status(status)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has been called."""
        return self._h is None

    def __enter__(self) -> Limiter:
        if self._h is None:
            raise LimiterClosed()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._h is None:
            return "<ratecell.Limiter closed>"
        c = self.config
        return (
            f"<ratecell.Limiter {c.algorithm.spec_name} {c.limit}/{c.period_ns}ns"
            f" burst={c.burst} capacity={c.capacity}>"
        )

    # -- snapshots (docs/SNAPSHOT.md) ---------------------------------------

    def save(self, path: str | os.PathLike[str], now_ns: int | None = None) -> None:
        """Saves a snapshot to ``path`` atomically (temporary file, fsync,
        rename). States equivalent to fresh at ``now_ns`` (default: the
        limiter's clock) are left out. Other threads may keep checking.
        Raises ``SnapshotIO`` when the file cannot be written."""
        h = self._handle()
        p = os.fsencode(path)
        if now_ns is None:
            status = _lib.ratecell_snapshot_save(h, p)
        else:
            status = _lib.ratecell_snapshot_save_at(h, p, _u64(now_ns, "now_ns"))
        if status:
            raise _errors.error_for_status(status)

    @classmethod
    def restore(cls, path: str | os.PathLike[str], config: Config | None = None) -> Limiter:
        """A limiter restored from the snapshot file at ``path``.

        With ``config`` (a ``Config``, as ``Limiter.config`` returns), a
        snapshot of another configuration raises ``SnapshotConfigMismatch``
        before anything is allocated; without it the file's own
        configuration is used (it sizes the table: trust the file as you
        would a configuration). Raises ``SnapshotNotFound``,
        ``SnapshotDamaged`` or ``SnapshotVersion`` for a missing, damaged or
        unsupported file."""
        if config is None:
            status, handle = _restore(path, None)
        else:
            cfg = _ffi.CConfig()
            _lib.ratecell_config_init(cfg, int(config.algorithm), config.limit, config.period_ns)
            cfg.burst = config.burst
            cfg.sub_windows = config.sub_windows
            cfg.capacity = config.capacity
            cfg.overflow = int(config.overflow)
            cfg.clock = int(config.clock)
            status, handle = _restore(path, _options((_ffi.CConfig * 1)(cfg), 1, 0))
        if status:
            raise _errors.error_for_status(status)
        limiter = cls.__new__(cls)
        limiter._h = handle
        return limiter

    def _handle(self) -> _ffi.LimiterHandle:
        h = self._h
        if h is None:
            raise LimiterClosed()
        return h

    # -- checks -----------------------------------------------------------

    # `at` and `tier` are meant as keywords, but not declared keyword-only
    # (`*`) in check and allow: CPython (3.11 to 3.13 at least) does not
    # specialise calls to a function with keyword-only parameters, which
    # costs every call about 25 ns, a fifth of allow().
    def check(
        self, key: Key = 0, cost: int = 1, at: int | None = None, tier: int | None = None
    ) -> Decision:
        """Decides a request of ``cost`` for ``key`` and returns its
        ``Decision``. Cost 0 is a peek: nothing is stored. A denied request
        is a decision with ``allowed`` False, not an exception.

        ``key`` is an int in ``0 ..= 2**64 - 1`` or a byte string
        (``bytes``, ``bytearray``, ``memoryview``, or ``str`` as UTF-8).
        ``at`` is the request's time in UNIX nanoseconds from the caller's
        clock (deterministic: tests, replays, callers that already hold a
        timestamp); None, the default, is the limiter's clock. ``tier``
        names the key's tier on a ``TieredLimiter`` (None is tier 0); a
        tier the limiter does not have raises ``InvalidTier`` and checks
        nothing."""
        # The hot path, inlined: every Python call it avoids is tens of ns.
        # `h` stays referenced in this frame until the call returns, so
        # close() in another thread cannot free the native limiter under it.
        # A closed limiter's None goes to the extension too, which answers
        # None for it (one test fewer on the hot path).
        h = self._h
        if _fast_check is not None:
            decision: Decision | None = _fast_check(h, key, cost, at, tier)
            if decision is not None:
                return decision
        if h is None:
            raise LimiterClosed()
        return _decide(h, key, cost, at, tier)

    def allow(
        self, key: Key = 0, cost: int = 1, at: int | None = None, tier: int | None = None
    ) -> bool:
        """``check(key, cost, at=at, tier=tier).allowed``, without building a
        ``Decision``. One request (cost 1, now, no tier) for an int key is
        the library's yes/no call (``ratecell_allow``), which on a limiter of
        capacity 0 computes nothing but the answer."""
        h = self._h
        if _fast_allow is not None:
            allowed: bool | None = _fast_allow(h, key, cost, at, tier)
            if allowed is not None:
                return allowed
        if h is None:
            raise LimiterClosed()
        if (
            type(key) is int
            and type(cost) is int
            and cost == 1
            and at is None
            and tier is None
            and 0 <= key <= U64_MAX
        ):
            # ratecell_allow: two arguments, the answer as the return value
            # (1 or 0, a negated status below 0): no request, no out-parameter.
            answer: int = _allow(h, key)
            if answer >= 0:
                return answer == 1
            raise _errors.error_for_status(-answer)
        # Byte keys, other costs, times and tiers, and arguments to refuse:
        # the full check.
        return _decide(h, key, cost, at, tier).allowed

    def check_batch(
        self,
        keys: Any,
        costs: Any = None,
        *,
        tiers: Any = None,
        at: int | None = None,
        decisions: bool = False,
        out: Any = None,
    ) -> Any:
        """Decides ``len(keys)`` requests with one clock read (or at ``at``,
        UNIX ns) and one call into C: ``keys[i]`` at cost ``costs[i]`` (every
        cost 1 when ``costs`` is None) under tier ``tiers[i]`` (tier 0 each
        when ``tiers`` is None), in order.

        ``keys`` and ``costs`` are any buffers or iterables of u64: a
        contiguous uint64 buffer (``array('Q')``, a numpy ``uint64`` array)
        is read in place, anything else is converted once. ``tiers`` is an
        iterable of ints; every tier is checked first: one the limiter does
        not have raises ``InvalidTier`` and nothing is decided or stored.

        Returns a ``bytearray`` of allowed flags (1 admitted, 0 denied), or
        ``out`` filled with them when given (any writable buffer of at
        least ``len(keys)`` bytes, e.g. a numpy ``bool`` array). With
        ``decisions=True`` returns ``(flags, [Decision, ...])``.
        """
        h = self._handle()
        key_ptr, n, key_keep = _u64_buffer(keys, "keys")
        cost_ptr, cost_keep = None, None
        if costs is not None:
            cost_ptr, m, cost_keep = _u64_buffer(costs, "costs")
            if m != n:
                raise ValueError(f"{n} keys but {m} costs")
        tier_keep = None if tiers is None else _tier_array(tiers, n, h)
        at_ns = _NOW if at is None else _at_ns(at)
        flags, flag_ptr = _out_flags(out, n)
        _refuse_overlap(_address(flag_ptr), n, _address(key_ptr), 8 * n, "keys")
        _refuse_overlap(_address(flag_ptr), n, _address(cost_ptr), 8 * n, "costs")
        full = (_CDecision * n)() if decisions and n else None
        batch = _ffi.CBatch(
            _ffi.BATCH_SIZE,
            n,
            _address(key_ptr) or None,
            _address(cost_ptr) or None,
            tier_keep.buffer_info()[0] if tier_keep is not None and n else None,
            at_ns,
        )
        status = _check_batch(h, batch, flag_ptr, full)
        # Until here the keep-alive names hold the (possibly converted)
        # buffers C read from; release the pins on caller buffers now.
        del key_keep, cost_keep, tier_keep, key_ptr, cost_ptr, flag_ptr
        if status:
            raise _errors.error_for_status(status)
        if decisions:
            return flags, ([decision_from_c(d) for d in full] if full is not None else [])
        return flags

    # -- blocking ---------------------------------------------------------

    def acquire(
        self,
        key: Key = 0,
        cost: int = 1,
        *,
        tier: int | None = None,
        timeout: float | datetime.timedelta | None = None,
    ) -> Decision:
        """Waits until a request of ``cost`` for ``key`` (under ``tier``,
        as for ``check``) is admitted (for the leaky bucket, also until its
        turn in the queue) and returns the admitting decision. It waits on
        the limiter's clock.

        ``timeout`` is in seconds (or a ``timedelta``); None or
        ``float('inf')`` waits as long as it takes, and a finite timeout
        beyond what the C ABI holds (about 584 years) is a ``ValueError``.
        Raises ``TimedOut`` (with ``.decision``, nothing taken from the
        limit) when the request would not be admitted in time,
        ``CostExceedsLimit`` at once when no wait can admit the cost, and
        ``InvalidTier`` at once for a tier the limiter does not have.

        The wait happens in C with the GIL released: other Python threads
        keep running. A ``KeyboardInterrupt`` is seen when it returns.
        """
        h = self._handle()
        timeout_ns = _timeout_ns(timeout)
        req = _request(h, key, cost, None, tier)
        out = _CDecision()
        status = _acquire(h, req, timeout_ns, out)
        if status == 0:
            return decision_from_c(out)
        if status == _TIMED_OUT:
            raise TimedOut(decision_from_c(out))
        if status == _COST_EXCEEDS_LIMIT:
            raise CostExceedsLimit(
                decision_from_c(out),
                f"cost {req.cost} exceeds what the limiter can ever admit ({out.limit} at once)",
            )
        raise _raise_error(status, h, tier)

    # -- state ------------------------------------------------------------

    def reset(self, key: Key = 0) -> None:
        """Forgets ``key``'s state (for capacity 0: the one shared state);
        its next request is decided as a fresh key's, under any tier."""
        h = self._handle()
        status = _reset(h, _request(h, key, 1, None, None))
        if status:
            raise _errors.error_for_status(status)

    def stats(self) -> Stats:
        """A snapshot of the counters (approximate while other threads
        check)."""
        h = self._handle()
        out = _ffi.CStats()
        status = _lib.ratecell_stats(h, out)
        if status:
            raise _errors.error_for_status(status)
        return Stats._from_c(out)

    def now_ns(self) -> int:
        """The limiter's clock: UNIX nanoseconds, what ``check`` uses."""
        h = self._h
        if h is None:
            raise LimiterClosed()
        now: int = _now_ns(h)
        return now

    def reconfigure(self, *limits: Limit) -> None:
        """Changes the limits while other threads keep checking, keeping
        every state: one ``Limit`` per limit, in order (one for a
        ``Limiter``; a ``Limit``'s name is ignored, a ``MultiLimiter``
        keeps its names). Each check sees the old limits or the new ones,
        never a mix. What a state keeps is the algorithm's carry-over rule
        (docs/ALGORITHMS.md, "Live reconfiguration"): limit and burst
        changes keep what was spent. A change with no carry-over (another
        algorithm, a window algorithm's period, a count width, a shared
        region, another number of limits) raises ``ReconfigureRefused``;
        an out-of-range field its ``InvalidConfig`` subclass. Nothing
        changes then. Capacity, overflow and clock stay the limiter's.
        """
        self._reconfigured(limits, _reconfigure(self, limits))

    def _reconfigured(self, limits: Sequence[Limit], configs: Any) -> None:
        """What a subclass keeps about its limits after a reconfiguration."""

    @property
    def config(self) -> Config:
        """The configuration as given (a burst of 0 stays 0)."""
        h = self._handle()
        out = _ffi.CConfig()
        status = _lib.ratecell_limiter_config(h, out)
        if status:
            raise _errors.error_for_status(status)
        return Config._from_c(out)


def _period_ns(period: Any) -> int:
    if isinstance(period, datetime.timedelta):
        # timedelta is exact in microseconds: no float rounding.
        return (
            period.days * 86_400_000_000_000
            + period.seconds * 1_000_000_000
            + period.microseconds * 1_000
        )
    if isinstance(period, (int, float)) and not isinstance(period, bool):
        if isinstance(period, float) and not math.isfinite(period):
            raise _errors.InvalidPeriod(f"period_ns: period = {period!r} seconds is not finite")
        ns = period * 1_000_000_000
        if ns >= 2**64:
            # Also before round(): a float this large may be infinite.
            raise _errors.InvalidPeriod(
                f"period_ns: period = {period!r} seconds is more than 2**64 - 1 ns"
            )
        return round(ns)
    raise TypeError(f"period must be seconds or a timedelta, not {type(period).__name__}")


def _config_int(value: Any, name: str, error: type[_errors.InvalidConfig], top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            if isinstance(value, (bool, float)):
                raise TypeError
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None
    if not 0 <= value <= top:
        raise error(f"{name} = {value}: {_errors.status_str(error.status)}")
    checked: int = value
    return checked


def _enum_value(value: Any, kind: Any, name: str, error: type[_errors.InvalidConfig]) -> int:
    if isinstance(value, kind):
        return int(value)
    if isinstance(value, str):
        if kind is Algorithm:
            try:
                return int(Algorithm.from_name(value))
            except _errors.UnknownAlgorithm:
                raise error(f"{name} = {value!r}: no such algorithm") from None
        try:
            return int(kind[value.upper().replace("-", "_")])
        except KeyError:
            choices = ", ".join(repr(m.name.lower()) for m in kind)
            raise error(f"{name} = {value!r}: expected one of {choices}") from None
    # Raw ints go to C as they are, so an unknown value is refused there.
    return _config_int(value, name, error, U32_MAX)


_CONFIG_FIELDS: dict[type[_errors.RatecellError], str] = {
    _errors.InvalidAlgorithm: "algorithm",
    _errors.InvalidLimit: "limit",
    _errors.InvalidPeriod: "period_ns",
    _errors.InvalidBurst: "burst",
    _errors.InvalidSubWindows: "sub_windows",
    _errors.InvalidCapacity: "capacity",
    _errors.InvalidOverflow: "overflow",
    _errors.InvalidClock: "clock",
}


def _every_ns(every: Any) -> int:
    """The saving period in ns: seconds (a number) or a ``timedelta``, > 0."""
    if isinstance(every, datetime.timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, (int, float)) and not isinstance(every, bool):
        seconds = float(every)
    else:
        raise TypeError(f"every must be seconds or a timedelta, not {type(every).__name__}")
    if math.isnan(seconds) or seconds <= 0:
        raise ValueError(f"every must be > 0 seconds, not {every!r}")
    return min(round(seconds * 1e9), U64_MAX)


def _snapshot_path(path: Any, name: str) -> bytes:
    p = os.fsencode(path)
    if b"\0" in p:
        raise ValueError(f"{name}: the path contains a NUL byte")
    return p


def _options(
    configs: Any, n_limits: int, n_tiers: int, shared: Any = None, shared_mode: Any = 0o600
) -> _ffi.COptions:
    """The ``ratecell_options`` of ``configs`` (``n_tiers`` rows of
    ``n_limits``, or one row when ``n_tiers`` is 0), in the shared region at
    ``shared`` when not None: the one struct ``ratecell_limiter_build``,
    ``ratecell_limiter_restore`` and ``ratecell_persisted_open`` take. It
    keeps ``configs`` and the path alive."""
    options = _ffi.COptions()
    _lib.ratecell_options_init(options)
    options.configs = configs
    options.n_limits = n_limits
    options.n_tiers = n_tiers
    if shared is not None:
        if isinstance(shared_mode, bool) or not isinstance(shared_mode, int):
            raise TypeError("shared_mode must be an int (permission bits, e.g. 0o600)")
        if not 0 <= shared_mode <= 0o7777:
            raise ValueError(f"shared_mode = {shared_mode:#o}: outside 0..=0o7777")
        path = os.fsencode(shared)
        if b"\0" in path:
            raise ValueError("shared: the path contains a NUL byte")
        options.shared_path = path
        options.shared_mode = shared_mode
    return options


def _build(
    configs: Any, n_limits: int, n_tiers: int, shared: Any = None, shared_mode: Any = 0o600
) -> _ffi.LimiterHandle:
    """``ratecell_limiter_build`` of ``_options(...)``; a refusal raises the
    ``InvalidConfig`` subclass naming the field (or the
    ``SharedRegionError`` subclass)."""
    options = _options(configs, n_limits, n_tiers, shared, shared_mode)
    handle = _ffi.LimiterHandle()
    status = _lib.ratecell_limiter_build(options, handle)
    if status:
        raise _first_config_error(status, configs)
    return handle


def _restore(path: Any, options: _ffi.COptions | None) -> tuple[int, _ffi.LimiterHandle]:
    """``ratecell_limiter_restore`` of ``options`` (None: the file's own
    configuration) from the snapshot file at ``path``: its status, and the
    handle (owning a limiter only when the status is 0)."""
    p = _snapshot_path(path, "path")
    handle = _ffi.LimiterHandle()
    return _lib.ratecell_limiter_restore(options, p, handle), handle


def _open_persisted(
    configs: Any, path: Any, every: Any, per_tier: int | None = None
) -> _ffi.PersistedHandle:
    """Restores (or makes) the limiter of ``configs`` and starts its saver
    (``ratecell_persisted_open``; with ``per_tier``, ``configs`` are tiers
    of that many limits each, tier by tier); the handle closes it when
    freed."""
    every_ns = _every_ns(every)
    p = _snapshot_path(path, "persist")
    if per_tier is None:
        options = _options(configs, len(configs), 0)
    else:
        options = _options(configs, per_tier, len(configs) // per_tier)
    persisted = ctypes.c_void_p()
    status = _lib.ratecell_persisted_open(options, p, every_ns, persisted)
    if status:
        raise _config_error(status, configs[0])
    handle = _ffi.PersistedHandle()
    # Owned from here: freeing the handle closes the persisted limiter.
    handle.persisted = persisted.value
    if _lib.ratecell_persisted_limiter(persisted, handle):
        raise RuntimeError("ratecell_persisted_limiter refused a live handle")
    return handle


def _config_error(status: int, cfg: _ffi.CConfig) -> _errors.RatecellError:
    err = _errors.error_for_status(status)
    field = _CONFIG_FIELDS.get(type(err))
    if field is None:
        return err
    value = getattr(cfg, field)
    return type(err)(f"{field} = {value}: {_errors.status_str(status)}")


def _c_configs(
    limits: Sequence[Limit],
    capacity: Any,
    overflow: Any,
    clock: Any,
) -> Any:
    """The C configs of ``limits`` sharing ``capacity``, ``overflow`` and
    ``clock``; bad values raise the ``InvalidConfig`` subclass naming the
    field (``InvalidLength`` for no limits or more than ``MAX_LIMITS``)."""
    n = len(limits)
    if not 1 <= n <= _ffi.MAX_LIMITS:
        raise _errors.InvalidLength(
            f"{n} limits: a limiter checks 1 to {_ffi.MAX_LIMITS} limits together"
        )
    overflow_value = _enum_value(overflow, Overflow, "overflow", _errors.InvalidOverflow)
    clock_value = _enum_value(clock, Clock, "clock", _errors.InvalidClock)
    capacity = _config_int(capacity, "capacity", _errors.InvalidCapacity, U64_MAX)
    configs = (_ffi.CConfig * n)()
    for cfg, lim in zip(configs, limits, strict=True):
        period_ns = lim.period_ns
        if (period_ns is None) == (lim.period is None):
            raise TypeError("give each Limit exactly one of period_ns (ns) and period (s)")
        if lim.period is not None:
            period_ns = _period_ns(lim.period)
        algorithm = _enum_value(lim.algorithm, Algorithm, "algorithm", _errors.InvalidAlgorithm)
        limit = _config_int(lim.limit, "limit", _errors.InvalidLimit, U64_MAX)
        period_ns = _config_int(period_ns, "period_ns", _errors.InvalidPeriod, U64_MAX)
        _lib.ratecell_config_init(cfg, algorithm, limit, period_ns)
        cfg.burst = _config_int(lim.burst, "burst", _errors.InvalidBurst, U64_MAX)
        if lim.sub_windows is not None:
            cfg.sub_windows = _config_int(
                lim.sub_windows, "sub_windows", _errors.InvalidSubWindows, U32_MAX
            )
        cfg.capacity = capacity
        cfg.overflow = overflow_value
        cfg.clock = clock_value
    return configs


def _as_given(limits: Sequence[Limit], configs: Any) -> tuple[Limit, ...]:
    """``limits`` as checked: each period in whole nanoseconds."""
    return tuple(
        dataclasses.replace(lim, period_ns=int(cfg.period_ns), period=None)
        for lim, cfg in zip(limits, configs, strict=True)
    )


def _reconfigure(limiter: Limiter, limits: Sequence[Limit]) -> Any:
    """``Limiter.reconfigure``: the limiter's own capacity, overflow and
    clock go with every new limit (they cannot change live). Returns the C
    configs it applied."""
    h = limiter._handle()
    current = _ffi.CConfig()
    status = _lib.ratecell_limiter_config(h, current)
    if status:
        raise _errors.error_for_status(status)
    configs = _c_configs(limits, current.capacity, current.overflow, current.clock)
    status = _lib.ratecell_limiter_reconfigure(h, configs, len(configs))
    if status:
        raise _first_config_error(status, configs)
    return configs


def _first_config_error(status: int, configs: Any) -> _errors.RatecellError:
    """The error of a refused list: the field's exception, showing the
    first config's value of that field (all limits share capacity, overflow
    and clock; for the others the message names the field, not the limit)."""
    return _config_error(status, configs[0])

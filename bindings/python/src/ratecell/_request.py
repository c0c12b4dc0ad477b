"""What a call on a limiter asks, checked: keys, costs, times, tiers,
timeouts and buffers of keys, turned into the ``ratecell_request`` (and a
batch's arrays) the C ABI reads; and a failed request's status turned into
its exception. A refusal raises naming the argument.

The calls themselves are ``Limiter``'s (``_limiter``); the C signatures
live in ``_ffi``.
"""

from __future__ import annotations

import ctypes
import datetime
import math
import operator
from array import array
from ctypes import c_char, c_uint64
from typing import Any

from . import _errors, _ffi
from ._decision import decision_from_c
from ._types import Decision

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
_tiers = _lib.ratecell_limiter_tiers

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
        try:
            return key.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _errors.InvalidKey(
                f"a str key must have a UTF-8 form: {e.reason} at index {e.start}"
            ) from None
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

"""Making a limiter: the configuration's arguments (limits, periods, the
enums, capacity) checked and turned into C configs, and the C calls that
build, restore, persist and reconfigure a limiter with them. A refusal
raises the ``InvalidConfig`` subclass naming the field.

Shared by ``Limiter``, ``MultiLimiter`` and ``TieredLimiter``.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import operator
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _errors, _ffi
from ._types import Algorithm, Clock, Limit, Overflow

if TYPE_CHECKING:
    from ._limiter import Limiter

U32_MAX = _ffi.U32_MAX
U64_MAX = _ffi.U64_MAX

_lib = _ffi.lib


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
    configs: Any,
    n_limits: int,
    n_tiers: int,
    shared: Any = None,
    shared_mode: Any = 0o600,
    *,
    states: int | None = None,
    path: bytes | None = None,
    every_ns: int = 0,
) -> _ffi.COptions:
    """The ``ratecell_options`` of ``configs`` (``n_tiers`` rows of
    ``n_limits``, or one row when ``n_tiers`` is 0; None and 0 for a
    snapshot's own), their states from ``states`` (fresh, or the shared
    region at ``shared`` when not None, unless given) with ``path`` and
    ``every_ns``: the one struct ``ratecell_limiter_build`` takes. It keeps
    ``configs`` and the paths alive."""
    options = _ffi.COptions()
    _lib.ratecell_options_init(options)
    options.configs = configs
    options.n_limits = n_limits
    options.n_tiers = n_tiers
    options.states = _ffi.STATES_FRESH if states is None else states
    options.path = path
    options.save_every_ns = every_ns
    if shared is not None:
        if isinstance(shared_mode, bool) or not isinstance(shared_mode, int):
            raise TypeError("shared_mode must be an int (permission bits, e.g. 0o600)")
        if not 0 <= shared_mode <= 0o7777:
            raise ValueError(f"shared_mode = {shared_mode:#o}: outside 0..=0o7777")
        region = os.fsencode(shared)
        if b"\0" in region:
            raise ValueError("shared: the path contains a NUL byte")
        options.states = _ffi.STATES_SHARED
        options.shared_path = region
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
    """``ratecell_limiter_build`` of ``options`` (None: the file's own
    configuration), its states from the snapshot file at ``path``: its
    status, and the handle (owning a limiter only when the status is 0)."""
    if options is None:
        options = _options(None, 0, 0)
    options.states = _ffi.STATES_SNAPSHOT
    options.path = _snapshot_path(path, "path")
    handle = _ffi.LimiterHandle()
    return _lib.ratecell_limiter_build(options, handle), handle


def _open_persisted(
    configs: Any, path: Any, every: Any, per_tier: int | None = None
) -> _ffi.PersistedHandle:
    """``ratecell_limiter_build`` of ``configs`` persisted at ``path``:
    restored from the file if it exists (else fresh) and saved there every
    ``every`` by the library's thread (with ``per_tier``, ``configs`` are
    tiers of that many limits each, tier by tier); the handle stops the
    thread, saving a last time, when freed."""
    every_ns = _every_ns(every)
    p = _snapshot_path(path, "persist")
    if per_tier is None:
        n_limits, n_tiers = len(configs), 0
    else:
        n_limits, n_tiers = per_tier, len(configs) // per_tier
    options = _options(
        configs, n_limits, n_tiers, states=_ffi.STATES_PERSISTED, path=p, every_ns=every_ns
    )
    handle = _ffi.PersistedHandle(p)
    status = _lib.ratecell_limiter_build(options, handle)
    if status:
        raise _config_error(status, configs[0])
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

"""Several limits checked as one: ``Limit``, ``MultiLimiter`` and the
per-limit answer ``MultiDecision`` (``ratecell_limiter_new_multi`` and
``ratecell_check_each*`` of the C ABI).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _errors, _ffi
from ._limiter import (
    _as_given,
    _c_configs,
    _first_config_error,
    U32_MAX,
    U64_MAX,
    Key,
    Limiter,
    _bytes_key,
    _config_error,
    _config_int,
    _enum_value,
    _is_bytes_key,
    _open_persisted,
    _period_ns,
    _snapshot_path,
    _u64,
)
from ._decision import decision_from_c
from ._types import Algorithm, Clock, Config, Decision, Limit, Overflow

__all__ = ["Limit", "MultiDecision", "MultiLimiter", "MAX_LIMITS"]

MAX_LIMITS = _ffi.MAX_LIMITS
"""The most limits one limiter checks together."""

_lib = _ffi.lib


@dataclass(frozen=True, slots=True)
class MultiDecision:
    """One request's answer from several limits.

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


class MultiLimiter(Limiter):
    """A ``Limiter`` enforcing several limits (1 to ``MAX_LIMITS``, any
    algorithms mixed) as one: a request is admitted only when every limit
    admits it, and only then is anything stored. Every ``Limiter`` method
    works and returns the combined decision; ``check_each`` also returns
    each limit's. ``capacity``, ``overflow`` and ``clock`` are shared by all
    limits (0: one shared state; more: a table of that many keys, each
    holding all its limits in one place).

    Bad lists raise the ``InvalidConfig`` subclass naming the field:
    ``InvalidLength`` for no limits or more than ``MAX_LIMITS``.
    """

    __slots__ = ("_names", "_limits")

    def __init__(
        self,
        limits: Sequence[Limit],
        *,
        capacity: int = 0,
        overflow: Overflow | str | int = Overflow.DENY,
        clock: Clock | str | int = Clock.TSC,
        persist: str | os.PathLike[str] | None = None,
        every: float | datetime.timedelta = 5.0,
    ) -> None:
        """``persist=path`` and ``every`` as for ``Limiter``: restored from
        the snapshot file if it exists (it must hold the same limits in the
        same order, else ``SnapshotConfigMismatch``) and saved there every
        ``every`` seconds."""
        self._h = None
        self._names: tuple[str, ...] = tuple(lim.name for lim in limits)
        configs = _c_configs(limits, capacity, overflow, clock)
        self._limits = _as_given(limits, configs)
        if persist is not None:
            self._h = _open_persisted(configs, persist, every)
            return
        handle = _ffi.LimiterHandle()
        status = _lib.ratecell_limiter_new_multi(configs, len(configs), handle)
        if status:
            raise _first_config_error(status, configs)
        self._h = handle

    @classmethod
    def restore(
        cls,
        path: str | os.PathLike[str],
        config: Config | None = None,
        *,
        limits: Sequence[Limit] | None = None,
        capacity: int = 0,
        overflow: Overflow | str | int = Overflow.DENY,
        clock: Clock | str | int = Clock.TSC,
    ) -> MultiLimiter:
        """A limiter of several limits restored from the snapshot file at
        ``path`` (``ratecell_limiter_restore_multi``): ``limits`` (with
        ``capacity``, ``overflow`` and ``clock`` as for the constructor)
        must be the saved limits in the same order, else
        ``SnapshotConfigMismatch`` before anything is allocated. Names are
        not saved: they are taken from ``limits``. (``config`` is for one
        limit, as ``Limiter.restore`` takes it; give ``limits`` here.)"""
        if limits is None or config is not None:
            raise TypeError("MultiLimiter.restore takes limits=[Limit, ...], not a config")
        configs = _c_configs(limits, capacity, overflow, clock)
        handle = _ffi.LimiterHandle()
        p = _snapshot_path(path, "path")
        status = _lib.ratecell_limiter_restore_multi(configs, len(configs), p, handle)
        if status:
            raise _first_config_error(status, configs)
        limiter = cls.__new__(cls)
        limiter._h = handle
        limiter._names = tuple(lim.name for lim in limits)
        limiter._limits = _as_given(limits, configs)
        return limiter

    def _reconfigured(self, limits: Sequence[Limit], configs: Any) -> None:
        # Names stay; the limits are the new ones.
        self._limits = tuple(
            dataclasses.replace(new, name=old.name)
            for old, new in zip(self._limits, _as_given(limits, configs), strict=True)
        )

    @property
    def names(self) -> tuple[str, ...]:
        """The limits' names, in order ("" where none was given)."""
        return self._names

    @property
    def limits(self) -> tuple[Limit, ...]:
        """The limits as given, in order, each with its period in
        ``period_ns``."""
        return self._limits

    def check_each(self, key: Key = 0, cost: int = 1) -> MultiDecision:
        """``check`` with each limit's own decision and the denying limit."""
        return self._each(key, cost, None)

    def check_each_at(self, key: Key, cost: int, now_ns: int) -> MultiDecision:
        """``check_each`` at the caller's time ``now_ns`` (UNIX ns)."""
        return self._each(key, cost, _u64(now_ns, "now_ns"))

    def _each(self, key: Any, cost: Any, now_ns: int | None) -> MultiDecision:
        h = self._handle()
        cost = _u64(cost, "cost")
        out = _ffi.CMultiDecision()
        if _is_bytes_key(key):
            data = _bytes_key(key)
            if now_ns is None:
                status = _lib.ratecell_check_bytes_each(h, data, len(data), cost, out)
            else:
                status = _lib.ratecell_check_bytes_each_at(h, data, len(data), cost, now_ns, out)
        elif now_ns is None:
            status = _lib.ratecell_check_each(h, _u64(key, "key"), cost, out)
        else:
            status = _lib.ratecell_check_each_at(h, _u64(key, "key"), cost, now_ns, out)
        if status:
            raise _errors.error_for_status(status)
        denied = None if out.denied_by == _ffi.NO_LIMIT else int(out.denied_by)
        return MultiDecision(
            decision=decision_from_c(out.decision),
            denied_by=denied,
            denied_name=None if denied is None else self._names[denied],
            limits=tuple(decision_from_c(out.limits[i]) for i in range(out.count)),
        )

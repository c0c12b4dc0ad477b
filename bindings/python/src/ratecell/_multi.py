"""Several limits checked as one: ``Limit`` and ``MultiLimiter``
(``ratecell_limiter_build`` with ``n_limits`` of the C ABI), whose limits'
names ``check_each`` reports (``MultiDecision``, in ``_decision``).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Sequence
from typing import Any

from . import _ffi
from ._build import (
    _as_given,
    _build,
    _c_configs,
    _first_config_error,
    _open_persisted,
    _options,
    _restore,
)
from ._decision import MultiDecision
from ._limiter import Limiter
from ._types import Algorithm, Clock, Config, Decision, Limit, Overflow

__all__ = ["Limit", "MultiDecision", "MultiLimiter", "MAX_LIMITS"]

MAX_LIMITS = _ffi.MAX_LIMITS
"""The most limits one limiter checks together."""

_lib = _ffi.lib


class MultiLimiter(Limiter):
    """A ``Limiter`` enforcing several limits (1 to ``MAX_LIMITS``, any
    algorithms mixed) as one: a request is admitted only when every limit
    admits it, and only then is anything stored. Every ``Limiter`` method
    works and returns the combined decision; ``check_each`` also returns
    each limit's, with the names given. ``capacity``, ``overflow`` and
    ``clock`` are shared by all limits (0: one shared state; more: a table
    of that many keys, each holding all its limits in one place).

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
        self._h = _build(configs, len(configs), 0)

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
        ``path``: ``limits`` (with
        ``capacity``, ``overflow`` and ``clock`` as for the constructor)
        must be the saved limits in the same order, else
        ``SnapshotConfigMismatch`` before anything is allocated. Names are
        not saved: they are taken from ``limits``. (``config`` is for one
        limit, as ``Limiter.restore`` takes it; give ``limits`` here.)"""
        if limits is None or config is not None:
            raise TypeError("MultiLimiter.restore takes limits=[Limit, ...], not a config")
        configs = _c_configs(limits, capacity, overflow, clock)
        status, handle = _restore(path, _options(configs, len(configs), 0))
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

    def _limit_names(self) -> Sequence[str]:
        return self._names

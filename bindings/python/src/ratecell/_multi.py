"""Several limits checked as one: ``Limit``, ``MultiLimiter`` and the
per-limit answer ``MultiDecision`` (``ratecell_limiter_build`` with
``n_limits`` and ``ratecell_check_each`` of the C ABI).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass
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
from ._limiter import Limiter
from ._request import Key, _raise_error, _request
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

    def check_each(
        self, key: Key = 0, cost: int = 1, *, at: int | None = None, tier: int | None = None
    ) -> MultiDecision:
        """``check`` (the same arguments, the same effect on the limiter)
        with each limit's own decision and the denying limit."""
        return _check_each(self, key, cost, at, tier, self._names)


def _check_each(
    limiter: Limiter, key: Any, cost: Any, at: Any, tier: Any, names: Sequence[str] | None
) -> MultiDecision:
    """``ratecell_check_each`` on ``limiter``; ``names`` are its limits'
    (None: every name is "")."""
    h = limiter._handle()
    out = _ffi.CMultiDecision()
    status = _lib.ratecell_check_each(h, _request(h, key, cost, at, tier), out)
    if status:
        raise _raise_error(status, h, tier)
    denied = None if out.denied_by == _ffi.NO_LIMIT else int(out.denied_by)
    return MultiDecision(
        decision=decision_from_c(out.decision),
        denied_by=denied,
        denied_name=None if denied is None else (names[denied] if names is not None else ""),
        limits=tuple(decision_from_c(out.limits[i]) for i in range(out.count)),
    )

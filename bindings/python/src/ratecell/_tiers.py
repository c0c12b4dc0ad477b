"""A quota per tier: ``TieredLimiter`` (``ratecell_limiter_new_tiered_multi``
and ``ratecell_check_tier*`` of the C ABI).
"""

from __future__ import annotations

import datetime
import operator
import os
from array import array
from collections.abc import Sequence
from typing import Any

from . import _errors, _ffi
from ._decision import decision_from_c
from ._limiter import (
    U32_MAX,
    Key,
    Limiter,
    _bytes_key,
    _c_configs,
    _first_config_error,
    _is_bytes_key,
    _open_persisted,
    _u64,
)
from ._multi import MultiDecision
from ._types import Clock, Decision, Limit, Overflow

__all__ = ["TieredLimiter", "MAX_TIERS"]

MAX_TIERS = _ffi.MAX_TIERS
"""The most tiers one limiter serves."""

_lib = _ffi.lib


def _tier_configs(
    tiers: Sequence[Limit | Sequence[Limit]], capacity: Any, overflow: Any, clock: Any
) -> tuple[Any, int, int]:
    """The C configs of ``tiers``, tier by tier, with the limits per tier
    and the number of tiers; ``InvalidLength`` for no tiers, too many, or
    tiers of different lengths."""
    rows = [[t] if isinstance(t, Limit) else list(t) for t in tiers]
    if not 1 <= len(rows) <= MAX_TIERS:
        raise _errors.InvalidLength(f"{len(rows)} tiers: a tiered limiter serves 1 to {MAX_TIERS}")
    per_tier = len(rows[0])
    for i, row in enumerate(rows):
        if len(row) != per_tier:
            raise _errors.InvalidLength(
                f"tier {i} has {len(row)} limits, tier 0 has {per_tier}: every tier has the same limits"
            )
    per_row = [_c_configs(row, capacity, overflow, clock) for row in rows]
    configs = (_ffi.CConfig * (per_tier * len(rows)))()
    for i, row_configs in enumerate(per_row):
        for j, cfg in enumerate(row_configs):
            configs[i * per_tier + j] = cfg
    return configs, per_tier, len(rows)


class TieredLimiter(Limiter):
    """One keyed limiter serving several tiers (free, paid, internal...):
    ``tiers[i]`` is tier ``i``'s ``Limit``, or a sequence of ``Limit``s
    checked as one (every tier then lists the same limits in the same
    order, with its own values). ``check_tier`` names a key's tier on each
    check, ``check_batch_tier`` a tier per request of a batch, and
    ``acquire_tier`` the tier to wait for. Tier 0 is the default tier:
    every ``Limiter`` method that names none (``check``, ``check_batch``,
    ``acquire``, ...) is tier 0's.

    A key whose tier changes keeps its state, read by its new tier's limits
    at its next check (the carry-over rules of ``reconfigure``, for that
    one key): what it spent counts against its new quota. Tiers may differ
    in ``limit``, ``burst`` and the period of GCRA, the leaky bucket and the
    token bucket; a tier that differs from tier 0 in what ``reconfigure``
    cannot change raises the ``InvalidConfig`` subclass naming that field.
    No tiers, more than ``MAX_TIERS``, or tiers of different lengths raise
    ``InvalidLength``; ``capacity`` 0 raises ``InvalidCapacity`` (tiers are
    per key). See docs/ALGORITHMS.md, "A quota per tier".

    ``persist=path`` and ``every`` as for ``Limiter``: restored with every
    tier from the snapshot file if it exists (it must hold the same tiers
    of the same limits, else ``SnapshotConfigMismatch``, also for a file
    saved by a limiter made without tiers) and saved there, every tier,
    every ``every`` seconds; ``close()`` saves a last time.
    """

    __slots__ = ("_tiers",)

    def __init__(
        self,
        tiers: Sequence[Limit | Sequence[Limit]],
        *,
        capacity: int,
        overflow: Overflow | str | int = Overflow.DENY,
        clock: Clock | str | int = Clock.TSC,
        persist: str | os.PathLike[str] | None = None,
        every: float | datetime.timedelta = 5.0,
    ) -> None:
        self._h = None
        configs, per_tier, n = _tier_configs(tiers, capacity, overflow, clock)
        self._tiers = n
        if persist is not None:
            self._h = _open_persisted(configs, persist, every, per_tier)
            return
        handle = _ffi.LimiterHandle()
        status = _lib.ratecell_limiter_new_tiered_multi(configs, per_tier, n, handle)
        if status:
            raise _first_config_error(status, configs)
        self._h = handle

    @classmethod
    def restore(  # type: ignore[override]
        cls,
        path: str | os.PathLike[str],
        tiers: Sequence[Limit | Sequence[Limit]] | None = None,
        *,
        capacity: int | None = None,
        overflow: Overflow | str | int = Overflow.DENY,
        clock: Clock | str | int = Clock.TSC,
    ) -> TieredLimiter:
        """A tiered limiter restored from the snapshot file at ``path``
        (saved by ``save``, which keeps every tier), each key with the
        state it had.

        With ``tiers`` (and ``capacity``, as for the constructor), a
        snapshot of other tiers, or of a limiter made without tiers,
        raises ``SnapshotConfigMismatch`` before anything is allocated;
        without them the file's own tiers are used (they size the table:
        trust the file as you would a configuration; a file of a limiter
        made without tiers gives one tier, its limits). Raises
        ``SnapshotNotFound``, ``SnapshotDamaged`` or ``SnapshotVersion``
        for a missing, damaged or unsupported file."""
        p = os.fsencode(path)
        handle = _ffi.LimiterHandle()
        if tiers is None:
            status = _lib.ratecell_limiter_restore(p, handle)
        else:
            if capacity is None:
                raise TypeError("restore() with tiers needs capacity, as the constructor does")
            configs, per_tier, n = _tier_configs(tiers, capacity, overflow, clock)
            status = _lib.ratecell_limiter_restore_tiered(configs, per_tier, n, p, handle)
        if status:
            raise _errors.error_for_status(status)
        limiter = cls.__new__(cls)
        limiter._h = handle
        limiter._tiers = int(_lib.ratecell_limiter_tiers(handle))
        return limiter

    @property
    def tiers(self) -> int:
        """How many tiers the limiter serves."""
        return self._tiers

    def check_tier(self, key: Key, tier: int, cost: int = 1) -> Decision:
        """Decides a request of ``cost`` for ``key`` (an int, or bytes or
        str) under tier ``tier``'s limits, now. A tier not below ``tiers``
        raises ``InvalidTier`` and checks nothing."""
        return self._decide(key, tier, cost, None)

    def check_tier_at(self, key: Key, tier: int, cost: int, now_ns: int) -> Decision:
        """``check_tier`` at the caller's time ``now_ns`` (UNIX ns)."""
        return self._decide(key, tier, cost, _u64(now_ns, "now_ns"))

    def check_tier_each_at(self, key: int, tier: int, cost: int, now_ns: int) -> MultiDecision:
        """``check_tier_at`` with each limit's own decision and the denying
        limit's index (for tiers of several limits; names are not kept)."""
        h = self._handle()
        tier = self._tier_arg(tier)
        m = _ffi.CMultiDecision()
        status = _lib.ratecell_check_tier_each_at(
            h, _u64(key, "key"), tier, _u64(cost, "cost"), _u64(now_ns, "now_ns"), m
        )
        if status:
            raise self._error(status, tier)
        denied = None if m.denied_by == _ffi.NO_LIMIT else int(m.denied_by)
        return MultiDecision(
            decision=decision_from_c(m.decision),
            denied_by=denied,
            denied_name=None if denied is None else "",
            limits=tuple(decision_from_c(m.limits[i]) for i in range(m.count)),
        )

    def check_batch_tier(
        self,
        keys: Any,
        tiers: Any,
        costs: Any = None,
        *,
        decisions: bool = False,
        out: Any = None,
    ) -> Any:
        """``check_batch`` with a tier per request: ``keys[i]`` under tier
        ``tiers[i]`` (an iterable of ints, one per key). Every tier is
        checked first: one not below ``tiers`` raises ``InvalidTier`` and
        nothing is decided or stored."""
        return self._batch(keys, costs, None, decisions, out, self._tier_array(tiers))

    def check_batch_tier_at(
        self,
        keys: Any,
        tiers: Any,
        costs: Any,
        now_ns: int,
        *,
        decisions: bool = False,
        out: Any = None,
    ) -> Any:
        """``check_batch_tier`` at the caller's time ``now_ns``."""
        return self._batch(
            keys, costs, _u64(now_ns, "now_ns"), decisions, out, self._tier_array(tiers)
        )

    def acquire_tier(
        self,
        key: Key,
        tier: int,
        cost: int = 1,
        timeout: float | datetime.timedelta | None = None,
    ) -> Decision:
        """``acquire`` under tier ``tier``'s limits: waits until that tier
        admits the request. A tier not below ``tiers`` raises
        ``InvalidTier`` at once, nothing checked."""
        tier = self._tier_arg(tier)
        try:
            return self._acquire(key, cost, timeout, tier)
        except _errors.InvalidTier:
            raise self._error(_errors.InvalidTier.status, tier) from None

    def _tier_array(self, tiers: Any) -> array[int]:
        """``tiers`` as the u32s the C ABI reads; a value no tier has
        raises ``InvalidTier`` (the C ABI would refuse it all the same)."""
        if isinstance(tiers, (bytes, bytearray, str)):
            raise TypeError(f"tiers must be an iterable of ints, not {type(tiers).__name__}")
        values = [self._tier_arg(operator.index(t)) for t in tiers]
        for t in values:
            if t >= self._tiers:
                raise self._error(_errors.InvalidTier.status, t)
        return array("I", values)

    def _decide(self, key: Any, tier: Any, cost: Any, now_ns: int | None) -> Decision:
        h = self._handle()
        tier = self._tier_arg(tier)
        cost = _u64(cost, "cost")
        out = _ffi.CDecision()
        if _is_bytes_key(key):
            raw = _bytes_key(key)
            if now_ns is None:
                status = _lib.ratecell_check_bytes_tier(h, raw, len(raw), tier, cost, out)
            else:
                status = _lib.ratecell_check_bytes_tier_at(
                    h, raw, len(raw), tier, cost, now_ns, out
                )
        elif now_ns is None:
            status = _lib.ratecell_check_tier(h, _u64(key, "key"), tier, cost, out)
        else:
            status = _lib.ratecell_check_tier_at(h, _u64(key, "key"), tier, cost, now_ns, out)
        if status:
            raise self._error(status, tier)
        return decision_from_c(out)

    def _tier_arg(self, tier: Any) -> int:
        if type(tier) is not int:
            raise TypeError(f"tier must be an int, not {type(tier).__name__}")
        if not 0 <= tier <= U32_MAX:
            raise _errors.InvalidTier(f"tier {tier} is outside 0..{self._tiers - 1}")
        return tier

    def _error(self, status: int, tier: int) -> _errors.RatecellError:
        if status == _errors.InvalidTier.status:
            return _errors.InvalidTier(f"tier {tier} is outside 0..{self._tiers - 1}")
        return _errors.error_for_status(status)

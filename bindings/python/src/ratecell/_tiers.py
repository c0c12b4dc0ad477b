"""A quota per tier: ``TieredLimiter`` (``ratecell_limiter_build`` with
``n_tiers``, and the ``tier`` of ``ratecell_request`` of the C ABI).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from typing import Any

from . import _errors, _ffi
from ._build import _build, _c_configs, _open_persisted, _options, _restore
from ._limiter import Limiter
from ._types import Clock, Limit, Overflow

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
    order, with its own values). ``check(key, tier=t)`` (and ``allow``,
    ``check_each``, ``acquire``) names a key's tier on each check, and
    ``check_batch(keys, tiers=[...])`` a tier per request of a batch. Tier
    0 is the default tier: a call that names none is tier 0's. A tier not
    below ``tiers`` raises ``InvalidTier`` (naming the tier and how many
    there are) and checks nothing.

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
        self._h = _build(configs, per_tier, n)

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
        if tiers is None:
            status, handle = _restore(path, None)
        else:
            if capacity is None:
                raise TypeError("restore() with tiers needs capacity, as the constructor does")
            configs, per_tier, n = _tier_configs(tiers, capacity, overflow, clock)
            status, handle = _restore(path, _options(configs, per_tier, n))
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

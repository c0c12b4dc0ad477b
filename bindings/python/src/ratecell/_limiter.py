"""``Limiter``: the owned C limiter handle and every call on it.

Its arguments are checked and converted in ``_request``, its
configuration in ``_build``; the C signatures live in ``_ffi``.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from typing import Any

from . import _errors, _ffi
from ._build import (
    _build,
    _config_int,
    _enum_value,
    _open_persisted,
    _options,
    _period_ns,
    _reconfigure,
    _restore,
)
from ._decision import MultiDecision, decision_from_c, multi_decision_from_c
from ._errors import CostExceedsLimit, LimiterClosed, TimedOut
from ._request import (
    U32_MAX,
    U64_MAX,
    BytesKey,
    Key,
    _address,
    _at_ns,
    _CDecision,
    _decide,
    _lib,
    _NOW,
    _out_flags,
    _raise_error,
    _refuse_overlap,
    _request,
    _tier_array,
    _timeout_ns,
    _u64,
    _u64_buffer,
)
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

_allow = _lib.ratecell_allow
_check_batch = _lib.ratecell_check_batch
_acquire = _lib.ratecell_acquire
_reset = _lib.ratecell_reset
_now_ns = _lib.ratecell_now_ns

_TIMED_OUT = TimedOut.status
_COST_EXCEEDS_LIMIT = CostExceedsLimit.status

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

class Limiter:
    """A rate limiter over the ratecell C library.

    ``capacity=0`` (the default) makes one shared state: every key argument
    is ignored. ``capacity > 0`` makes a table sized to hold that many live
    keys, allocated up front (a size to provide for, not a cap: it may take
    up to about 1.45 times as many into its spare places; SPEC §5). Keys are ints in ``0 ..= 2**64 - 1`` or byte strings
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
        if isinstance(h, _ffi.PersistedHandle) and h.value:
            status = h.close_now()
            if status is None:
                # A call still runs in another thread and holds the handle:
                # the free (and its last save) must wait for it, so the
                # error is raised from a save made now; the free when that
                # call returns saves once more, keeping what it admitted.
                status = _lib.ratecell_snapshot_save(h, h.path)
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
            # ratecell_allow: a key in, its answer out, no request to build.
            status: int = _allow(h, key)
            if status and status != _ffi.DENIED:
                raise _errors.error_for_status(status)
            return not status
        # Byte keys, other costs, times and tiers, and arguments to refuse:
        # the full check.
        return _decide(h, key, cost, at, tier).allowed

    def check_each(
        self, key: Key = 0, cost: int = 1, *, at: int | None = None, tier: int | None = None
    ) -> MultiDecision:
        """``check`` (the same arguments, the same effect on the limiter)
        with each limit's own decision and the denying limit's index
        (``ratecell_check_each``): one decision in ``limits`` for a limiter
        of one limit, one per limit of the key's tier for a
        ``TieredLimiter``. Names are a ``MultiLimiter``'s; other limiters'
        limits are unnamed (``""``)."""
        h = self._handle()
        out = _ffi.CMultiDecision()
        status = _lib.ratecell_check_each(h, _request(h, key, cost, at, tier), out)
        if status:
            raise _raise_error(status, h, tier)
        return multi_decision_from_c(out, self._limit_names())

    def _limit_names(self) -> Sequence[str] | None:
        """The limits' names for ``check_each`` (None: unnamed)."""
        return None

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

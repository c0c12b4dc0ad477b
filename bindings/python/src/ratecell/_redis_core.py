"""What a ``RedisLimiter``'s checks share with its background thread
(``_Core``): the connections, the counters, the node's leases (``leased``)
or remembered denials (``cached_deny``) through the C library, the
failure policy's state; the thread that fetches grants off the request
path (``_Refiller``); and the counters a limiter reports
(``RedisStats``, ``LeaseStats``). The limiters themselves are
``ratecell.redis``'s."""

from __future__ import annotations

import contextlib
import ctypes
import heapq
import itertools
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis as _redis

from . import _errors, _ffi
from ._decision import decision_from_c
from ._limiter import _request
from ._redis_wire import _OUTAGE, Key, _pooled_call, _timed_pool

@dataclass(frozen=True)
class LeaseStats:
    """A leased limiter's grant counters (``ratecell_lease_stats``)."""

    fetches: int
    """Grants asked for with a check waiting."""
    refills: int
    """Grants asked for in the background."""
    replies: int
    """Replies received."""
    units_granted: int
    """Units granted, over every reply."""
    empty_grants: int
    """Replies that granted nothing (the limit is spent for now)."""
    failures: int
    """Grant requests that had no answer."""
    lease_fallbacks: int
    """Checks decided by the failure policy (SPEC §8)."""
    remembered_denials: int
    """Checks denied here by a denial Redis gave, not yet over."""
    direct: int
    """Checks the node could not track (each a RATECELL.CHECK)."""
    keys: int
    """Keys tracked now."""


@dataclass(frozen=True)
class RedisStats:
    """A ``RedisLimiter``'s counters."""

    commands: int
    """Commands sent to Redis (each RATECELL.CHECK or RATECELL.LEASE)."""
    failures: int
    """Commands that had no answer in time, or an error."""
    fallbacks: int
    """Checks the failure policy decided (lease_fallbacks when leased)."""
    lease: LeaseStats | None
    """A leased limiter's grant counters; None for the other modes."""


_MODES = ("strict", "cached_deny", "leased")
_FAILURES = {"deny": _ffi.FAILURE_DENY, "local": _ffi.FAILURE_LOCAL}
_lib = _ffi.lib
_INVALID_REPLY = _errors.InvalidReply.status
_NO_REPLY = (None, 0)


class _Core:
    """What a ``RedisLimiter``'s checks and its refill thread share: the
    connections, the counters, the leases (leased) or the remembered
    denials (cached_deny), the failure policy's state."""

    def __init__(self, client: Any, timeout: float | None) -> None:
        self.client = client
        self.pool = None if timeout is None else _timed_pool(client, timeout)
        self.lock = threading.Lock()
        self.commands = 0
        self.failures = 0
        self.fallbacks = 0
        self.down_failures = 0
        self.down_until = 0
        self.leases: _ffi.LeasesHandle | None = None
        self.denials: _ffi.DenialsHandle | None = None
        self.send_at = False

    def call(self, command: str, args: Sequence[Any]) -> Any:
        """The reply, or None when Redis did not answer in time (counted);
        a ResponseError is raised."""
        with self.lock:
            self.commands += 1
        try:
            if self.pool is not None:
                return _pooled_call(self.pool, command, args)
            return self.client.execute_command(command, *args)
        except _redis.ResponseError:
            with self.lock:
                self.failures += 1
            raise
        except _OUTAGE:
            with self.lock:
                self.failures += 1
            return None

    def now_ns(self) -> int:
        if self.leases is not None:
            return int(_lib.ratecell_leases_now_ns(self.leases))
        return time.time_ns()

    def grant_reply(self, grant: _ffi.GrantHandle, foreground: bool) -> list[int] | None:
        """Sends the grant's RATECELL.LEASE; its integers, or None."""
        ptrs = (ctypes.c_void_p * _ffi.LEASE_MAX_ARGS)()
        lens = (ctypes.c_size_t * _ffi.LEASE_MAX_ARGS)()
        n = ctypes.c_size_t()
        status = _lib.ratecell_grant_command(grant, ptrs, lens, _ffi.LEASE_MAX_ARGS, n)
        if status:
            raise _errors.error_for_status(status)
        args = [ctypes.string_at(ptrs[i] or 0, lens[i]) for i in range(1, n.value)]
        try:
            reply = self.call("RATECELL.LEASE", args)
        except _redis.ResponseError:
            if foreground:
                raise
            return None
        if not isinstance(reply, list) or not all(type(x) is int for x in reply):
            return None if reply is None else [-1]  # not a lease reply: refused below
        return reply

    def complete(self, grant: _ffi.GrantHandle, reply: list[int] | None, done: int) -> Any:
        """Hands the reply (or its absence) to the leases: the completion."""
        out = _ffi.CCompletion()
        status = _INVALID_REPLY
        if reply is not None:
            try:
                ints = (ctypes.c_int64 * len(reply))(*reply)
            except (OverflowError, TypeError):
                ints = None
            if ints is not None:
                status = _lib.ratecell_leases_complete(
                    self.leases, grant, ints, len(reply), done, out
                )
        if status == _INVALID_REPLY:
            # A reply that is not RATECELL.LEASE's is no answer.
            status = _lib.ratecell_leases_complete(self.leases, grant, None, 0, done, out)
        if status:
            raise _errors.error_for_status(status)
        return out

    def retry(self, grant: _ffi.GrantHandle, c: Any, done: int) -> tuple[float, Any] | None:
        """A failed grant's retry and its due time (monotonic seconds)."""
        if not c.has_retry:
            return None
        new = _ffi.GrantHandle()
        status = _lib.ratecell_leases_retry(self.leases, grant, c.retry_at_ns, ctypes.byref(new))
        if status:
            raise _errors.error_for_status(status)
        now = done if done != _ffi.NOW else self.now_ns()
        return time.monotonic() + max(c.retry_at_ns - now, 0) / 1e9, new

    def fetch_in_background(self, grant: _ffi.GrantHandle) -> tuple[float, Any] | None:
        """Fetches a refill or a retry off the request path: its retry."""
        reply = self.grant_reply(grant, foreground=False)
        done = _grant_at(grant) if self.send_at else _ffi.NOW
        return self.retry(grant, self.complete(grant, reply, done), done)


def _grant_at(grant: _ffi.GrantHandle) -> int:
    info = _ffi.CGrantInfo()
    if _lib.ratecell_grant_info(grant, info):
        raise _errors.NullArgument()
    return int(info.at_ns)


def _grant_key(grant: _ffi.GrantHandle) -> bytes:
    info = _ffi.CGrantInfo()
    if _lib.ratecell_grant_info(grant, info):
        raise _errors.NullArgument()
    return ctypes.string_at(info.key, info.key_len)


_STOP = object()
# Refills waiting for the thread: beyond this many, a refill is dropped
# (its key fetches when it runs dry, waiting on Redis once).
_QUEUE_BOUND = 4096


class _Refiller:
    """The daemon thread that fetches refills and retries failed grants,
    so that a check waits on Redis only when its node holds no units. Its
    queue is bounded; a retry is queued once per key (one attempt per
    backoff step, SPEC §8). Holds the core, never the limiter: a limiter
    that is dropped stops its thread."""

    def __init__(self, core: _Core) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(_QUEUE_BOUND)
        self.dropped = 0
        self.thread = threading.Thread(
            target=self._run, args=(core, self.queue), name="ratecell-refill", daemon=True
        )
        self.thread.start()

    def send(self, grant: _ffi.GrantHandle) -> None:
        try:
            self.queue.put_nowait((0.0, grant))
        except queue.Full:
            self.dropped += 1

    def stop(self) -> None:
        while True:
            try:
                self.queue.put_nowait(_STOP)
                return
            except queue.Full:
                # Make room: the thread is stopping, queued refills are moot.
                with contextlib.suppress(queue.Empty):
                    self.queue.get_nowait()

    @staticmethod
    def _run(core: _Core, q: queue.Queue[Any]) -> None:
        waiting: list[tuple[float, int, Any]] = []
        retrying: set[bytes] = set()
        seq = itertools.count()
        while True:
            now = time.monotonic()
            while waiting and waiting[0][0] <= now:
                _, _, grant = heapq.heappop(waiting)
                retrying.discard(_grant_key(grant))
                try:
                    again = core.fetch_in_background(grant)
                except Exception:
                    # The thread must outlive any one grant: its key asks
                    # again when it runs dry.
                    again = None
                if again is not None:
                    key = _grant_key(again[1])
                    if key not in retrying:
                        retrying.add(key)
                        heapq.heappush(waiting, (again[0], next(seq), again[1]))
            wait = max(waiting[0][0] - time.monotonic(), 0.0) if waiting else 1.0
            try:
                item = q.get(timeout=wait)
            except queue.Empty:
                continue
            if item is _STOP:
                return
            heapq.heappush(waiting, (item[0], next(seq), item[1]))


def _leases_check(h: Any, key: Key, cost: int, at: int | None) -> tuple[int, Any, Any]:
    """``ratecell_leases_check`` on the ctypes path: (step, decision or
    None, grant address or None)."""
    out = _ffi.CDecision()
    grant = ctypes.c_void_p()
    step = ctypes.c_uint32()
    status = _lib.ratecell_leases_check(
        h, _request(None, key, cost, at, None), ctypes.byref(step), out, ctypes.byref(grant)
    )
    if status:
        raise _errors.error_for_status(status)
    d = decision_from_c(out) if step.value in (_ffi.STEP_DECIDED, _ffi.STEP_REFILL) else None
    return step.value, d, grant.value

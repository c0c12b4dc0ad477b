"""ratecell across machines: the same decisions, made inside Redis.

A client of the ratecell Redis module (``bindings/redis``), on redis-py
(install ``ratecell[redis]``). ``RedisLimiter`` mirrors ``Limiter``'s
per-key methods (``check(key, cost, *, at=None)`` and ``allow``) and
returns the same ``ratecell.Decision``; the state lives in the Redis key, so
every process that uses the same server (or cluster) shares the limit::

    import redis
    from ratecell.redis import RedisLimiter

    limiter = RedisLimiter(redis.Redis(), "gcra", limit=100, period=1.0)
    d = limiter.check("user:42")
    if not d:
        print(f"retry in {d.retry_after:.3f} s")

A limiter has one of three modes (SPEC.md §8): ``"strict"``, one
``RATECELL.CHECK`` per check; ``"cached_deny"``, as strict but a denial is
remembered until its ``retry_after`` and the key's checks meanwhile cost
Redis nothing; ``"leased"``, units granted in batches (``RATECELL.LEASE``)
and spent on this node, with the next grant fetched by a background
thread before they run out, so a check waits on Redis only when its node
holds no units for the key. The lease protocol and the local spending are
the C library's (``ratecell_leases_*``), the same code every language's
client runs; this module brings redis-py, the timeout and the thread. Every
command waits at most ``timeout`` (50 ms by default); with no answer the
``failure`` policy decides (``"deny"``, or ``"local"``: a limiter of this
node's own with the limit divided by ``expected_nodes``), and Redis is
tried again with backoff (10 ms doubling to 1 s)::

    limiter = RedisLimiter(redis.Redis(), "fixed_window", limit=1000, period=1.0,
                           mode="leased", failure="local", expected_nodes=4)
    if limiter.allow("user:42"):
        ...

``check_all`` checks several limits as one all-or-nothing request
(``RATECELL.CHECKALL``). ``RedisLimits`` gives the HTTP middlewares
(``ratecell.asgi``, ``ratecell.wsgi``) one or several named limits kept in
Redis, with a ``redis.Redis`` or a ``redis.asyncio.Redis`` client, or one
limit in ``mode="cached_deny"`` or ``"leased"`` (a ``redis.Redis``). Errors
from the module that name a configuration field raise the matching
``InvalidConfig`` subclass; anything else is redis-py's own exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import datetime
import functools
import inspect
import queue
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import redis as _redis

from . import _errors, _ffi
from ._decision import decision_from_c
from ._http import LimitDecision, check_names, policy_field
from ._limiter import Limiter, _fast_lease_check, _request
from ._redis_core import (
    _FAILURES,
    _MODES,
    LeaseStats,
    RedisStats,
    _Core,
    _grant_at,
    _leases_check,
    _lib,
    _Refiller,
)
from ._redis_wire import (
    Key,
    _backoff_ns,
    _decision,
    _errors_algorithm,
    _period_ns,
    _raise,
    _pooled_call,
    _seconds_ns,
    _timed_pool,
)
from ._types import Algorithm, Decision

__all__ = ["RedisLimiter", "RedisLimits", "RedisStats", "LeaseStats", "check_all"]

Mode = Literal["strict", "cached_deny", "leased"]
Failure = Literal["deny", "local"]

DEFAULT_TIMEOUT = 0.05
"""The longest a command waits for Redis by default, in seconds (SPEC §8)."""


class RedisLimiter:
    """One limit (algorithm, limit, period, burst, sub-windows) kept per key
    in Redis by the ratecell module, checked in one of three modes.

    ``client`` is a ``redis.Redis`` or ``redis.RedisCluster``; the limiter
    is thread-safe. ``prefix`` is prepended to every key (str as UTF-8,
    bytes, or an int as its 8 little-endian bytes). Arguments are those of
    ``ratecell.Limiter`` (the period as ``period_ns`` or ``period``
    seconds); a bad one raises the ``InvalidConfig`` subclass that names it
    (in strict and cached_deny modes, the server checks them on the first
    call).

    ``mode`` is ``"strict"`` (default), ``"cached_deny"`` or ``"leased"``
    (gcra, token_bucket, fixed_window and sliding_window only). ``timeout``
    (seconds, default 0.05; None to wait as long as the client does)
    bounds every command: with a ``redis.Redis`` the limiter keeps its own
    pool of the client's connections, whose every socket operation waits
    at most that long. With no answer, ``failure`` decides: ``"deny"``
    (``retry_after`` the time to the next attempt) or ``"local"`` (a limiter
    of this node's own, the limit and burst divided by ``expected_nodes``),
    counted in ``stats().fallbacks``; Redis is tried again with backoff and
    its first answer puts checks back on the global limit. An error reply
    (a bad argument, WRONGTYPE) is raised, not a failure.

    Leased: ``max_grant`` (default a tenth of the limit), ``horizon``,
    ``lease_expiry`` (gcra) and ``skew`` (seconds, default 1 ms) as SPEC §8
    names them; ``capacity``, the keys the node tracks (default 65,536);
    ``send_at=True`` sends each check's time (``at``, or this node's clock)
    as ``AT``, so the server decides on the node's timeline (tests and
    replays with explicit times; use ``skew=0`` then). In strict and
    cached_deny modes ``at`` is always sent as ``AT``, as before.

    Use it as a context manager or call ``close()`` to stop the refill
    thread (it also stops when the limiter is collected).
    """

    __slots__ = (
        "_client",
        "_args",
        "_prefix",
        "_core",
        "_lh",
        "_fast",
        "_refiller",
        "_local",
        "_mode",
        "_settings",
        "algorithm",
        "limit",
        "period_ns",
        "burst",
        "__weakref__",
    )

    def __init__(
        self,
        client: Any,
        algorithm: Algorithm | str | int,
        limit: int,
        period_ns: int | None = None,
        *,
        period: float | datetime.timedelta | None = None,
        burst: int = 0,
        sub_windows: int | None = None,
        prefix: str | bytes = "",
        mode: Mode = "strict",
        timeout: float | None = DEFAULT_TIMEOUT,
        failure: Failure = "deny",
        expected_nodes: int = 1,
        max_grant: int = 0,
        horizon: float | datetime.timedelta | None = None,
        lease_expiry: float | datetime.timedelta | None = None,
        skew: float | datetime.timedelta | None = 0.001,
        capacity: int = 0,
        send_at: bool = False,
    ) -> None:
        self._lh: _ffi.LeasesHandle | None = None
        self._refiller: _Refiller | None = None
        if isinstance(algorithm, str):
            name = algorithm.lower().replace("-", "_")
        else:
            name = Algorithm(algorithm).spec_name
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
        if failure not in _FAILURES:
            raise _errors.InvalidFailure(f"failure must be 'deny' or 'local', not {failure!r}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
        ):
            raise ValueError(f"timeout must be positive seconds or None, not {timeout!r}")
        self._client = client
        self._mode = mode
        # What makes this limit again in another mode (RedisLimits).
        self._settings: dict[str, Any] = dict(
            algorithm=name, limit=limit, period_ns=_period_ns(period_ns, period),
            burst=burst, sub_windows=sub_windows, prefix=prefix, timeout=timeout,
            failure=failure, expected_nodes=expected_nodes, max_grant=max_grant,
            horizon=horizon, lease_expiry=lease_expiry, skew=skew, capacity=capacity,
            send_at=send_at,
        )
        self.algorithm = name
        self.limit = limit
        self.period_ns = _period_ns(period_ns, period)
        self.burst = burst
        args: list[Any] = [name, limit, f"{self.period_ns}ns"]
        if burst:
            args += ["BURST", burst]
        if sub_windows is not None:
            args += ["SUBWINDOWS", sub_windows]
        self._args = args
        self._prefix = prefix.encode() if isinstance(prefix, str) else prefix
        self._core = core = _Core(client, timeout)
        self._fast = None
        self._local: Limiter | None = None
        # The policy's own limiter: strict and cached_deny checks, and a
        # leased key the node cannot track (the leases keep theirs).
        if failure == "local":
            if (
                isinstance(expected_nodes, bool)
                or not isinstance(expected_nodes, int)
                or (expected_nodes < 1)
            ):
                raise _errors.InvalidFailure(
                    f"expected_nodes must be 1 or more, not {expected_nodes!r}"
                )
            self._local = Limiter(
                name,
                max(limit // expected_nodes, 1),
                self.period_ns,
                burst=max(burst // expected_nodes, 1) if burst else 0,
                sub_windows=sub_windows,
                capacity=capacity or 65_536,
            )
        if mode == "cached_deny":
            h = _ffi.DenialsHandle()
            status = _lib.ratecell_denials_new(capacity, 0, ctypes.byref(h))
            if status:
                raise _errors.error_for_status(status)
            core.denials = h
        elif mode == "leased":
            self._lh = core.leases = self._new_leases(
                name,
                limit,
                burst,
                sub_windows,
                capacity,
                failure,
                expected_nodes,
                max_grant,
                horizon,
                lease_expiry,
                skew,
                send_at,
            )
            core.send_at = send_at
            self._fast = _fast_lease_check
            self._refiller = _Refiller(core)
            weakref.finalize(self, self._refiller.stop)

    def _new_leases(
        self,
        name: str,
        limit: int,
        burst: int,
        sub_windows: int | None,
        capacity: int,
        failure: str,
        expected_nodes: int,
        max_grant: int,
        horizon: Any,
        lease_expiry: Any,
        skew: Any,
        send_at: bool,
    ) -> _ffi.LeasesHandle:
        cfg = _ffi.CConfig()
        algorithm = _errors_algorithm(name)
        _lib.ratecell_config_init(cfg, algorithm, limit, self.period_ns)
        cfg.burst = burst
        if sub_windows is not None:
            cfg.sub_windows = sub_windows
        cfg.capacity = capacity
        o = _ffi.CLeaseOptions()
        _lib.ratecell_lease_options_init(o)
        o.failure = _FAILURES[failure]
        if (
            isinstance(expected_nodes, bool)
            or not isinstance(expected_nodes, int)
            or not (0 <= expected_nodes <= _ffi.U32_MAX)
        ):
            raise _errors.InvalidFailure(
                f"expected_nodes must be 1 or more, not {expected_nodes!r}"
            )
        o.expected_nodes = expected_nodes
        o.send_at = 1 if send_at else 0
        o.max_grant = max_grant
        o.horizon_ns = _seconds_ns(horizon, "horizon")
        o.expire_ns = _seconds_ns(lease_expiry, "lease_expiry")
        o.skew_ns = _seconds_ns(skew, "skew")
        o.prefix = self._prefix
        o.prefix_len = len(self._prefix)
        h = _ffi.LeasesHandle()
        status = _lib.ratecell_leases_new(cfg, o, ctypes.byref(h))
        if status:
            raise _errors.error_for_status(status)
        return h

    def close(self) -> None:
        """Stops the refill thread (leased); checks still work, refills are
        then no longer fetched in the background."""
        if self._refiller is not None:
            self._refiller.stop()

    def __enter__(self) -> RedisLimiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def mode(self) -> str:
        """``"strict"``, ``"cached_deny"`` or ``"leased"``."""
        return self._mode

    def _key(self, key: Key) -> bytes:
        if isinstance(key, int):
            return self._prefix + key.to_bytes(8, "little")
        return self._prefix + (key.encode() if isinstance(key, str) else key)

    def _command(self, key: Key, cost: int, now_ns: int | None) -> list[Any]:
        args: list[Any] = [self._key(key), *self._args, "COST", cost]
        if now_ns is not None:
            args += ["AT", now_ns]
        return args

    def check(self, key: Key, cost: int = 1, *, at: int | None = None) -> Decision:
        """Decides a request of ``cost`` units for ``key`` (cost 0 is a
        peek). ``at`` (UNIX ns) decides at that time instead of the clock
        (strict and cached_deny: sent as ``AT``, the state then kept
        without expiry; leased: the node's time, sent when ``send_at``)."""
        fast = self._fast
        if fast is not None:
            r = fast(self._lh, key, cost, at, None)
            if r.__class__ is Decision:
                return r
            return self._leased(key, cost, at, r)
        return self._decide(key, cost, at)

    def allow(self, key: Key, cost: int = 1, *, at: int | None = None) -> bool:
        """Whether ``check`` admits the request."""
        fast = self._fast
        if fast is not None:
            r = fast(self._lh, key, cost, at, None)
            if r.__class__ is Decision:
                return r.allowed
            return self._leased(key, cost, at, r).allowed
        return self._decide(key, cost, at).allowed

    def stats(self) -> RedisStats:
        """The counters."""
        core = self._core
        lease = None
        fallbacks = core.fallbacks
        if self._lh is not None:
            c = _ffi.CLeaseStats()
            if _lib.ratecell_leases_stats(self._lh, c):
                raise _errors.NullArgument()
            lease = LeaseStats(*(int(getattr(c, f[0])) for f in _ffi.CLeaseStats._fields_))
            fallbacks += lease.lease_fallbacks
        return RedisStats(core.commands, core.failures, fallbacks, lease)

    # Strict and cached_deny.

    def _decide(self, key: Key, cost: int, at: int | None) -> Decision:
        if self._mode == "leased":
            return self._leased(key, cost, at, None)
        r = self._try_local(key, cost, at)
        return r if isinstance(r, Decision) else r()

    def _try_local(self, key: Key, cost: int, at: int | None) -> Decision | Callable[[], Decision]:
        """The check's decision when this node makes it without Redis (a
        leased key's units in hand, a remembered denial, the failure policy
        during a backoff); else a function that finishes it, waiting on
        Redis at most ``timeout``. A check is the two in sequence;
        ``RedisLimits`` runs the function in a thread under an event loop."""
        if self._mode == "leased":
            fast = self._fast
            r = fast(self._lh, key, cost, at, None) if fast is not None else None
            if r.__class__ is Decision:
                return r
            if r is None:
                r = _leases_check(self._lh, key, cost, at)
            step, d, g = r
            if step == _ffi.STEP_FETCH:
                # Owned from here, so that it is freed if the rest never runs.
                owned = (step, d, _ffi.GrantHandle(g))
                return functools.partial(self._leased, key, cost, at, owned)
            if step != _ffi.STEP_DIRECT:
                return self._leased(key, cost, at, r)
        core = self._core
        now = at if at is not None else time.time_ns()
        if self._mode == "cached_deny":
            # The time a denial is remembered from is read before the
            # command, so the remembered wait never outlasts the one Redis
            # gave.
            request = _request(None, key, cost, now, None)
            out = _ffi.CDecision()
            found = ctypes.c_bool()
            status = _lib.ratecell_denials_check(core.denials, request, ctypes.byref(found), out)
            if status:
                raise _errors.error_for_status(status)
            if found.value:
                return decision_from_c(out)
            if now < core.down_until:
                return self._fallback(key, cost, now)
            return functools.partial(self._cached_deny_remote, key, cost, at, now, request)
        if now < core.down_until:
            return self._fallback(key, cost, now)
        return functools.partial(self._strict_remote, key, cost, at, now)

    def _redis_check(self, key: Key, cost: int, at: int | None, now: int) -> Decision | None:
        """Redis's decision; None when it did not answer, now or lately
        (the backoff of SPEC §8, node-wide, is running)."""
        core = self._core
        if now < core.down_until:
            return None
        try:
            reply = core.call("RATECELL.CHECK", self._command(key, cost, at))
        except _redis.ResponseError as e:
            _raise(e)
            raise
        if reply is None:
            with core.lock:
                core.down_failures += 1
                core.down_until = now + _backoff_ns(core.down_failures)
            return None
        if core.down_failures:
            core.down_failures = 0
        return _decision(reply)

    def _strict(self, key: Key, cost: int, at: int | None) -> Decision:
        return self._strict_remote(key, cost, at, at if at is not None else time.time_ns())

    def _strict_remote(self, key: Key, cost: int, at: int | None, now: int) -> Decision:
        d = self._redis_check(key, cost, at, now)
        return d if d is not None else self._fallback(key, cost, now)

    def _fallback(self, key: Key, cost: int, now: int) -> Decision:
        core = self._core
        with core.lock:
            core.fallbacks += 1
        if self._local is not None:
            return self._local.check(self._key(key)[len(self._prefix) :], cost, at=now)
        limit = self.burst if self.burst and self.algorithm in _BURSTY else self.limit
        return Decision(False, limit, 0, max(core.down_until - now, 1), 0, 0)

    def _cached_deny_remote(
        self, key: Key, cost: int, at: int | None, now: int, request: Any
    ) -> Decision:
        d = self._redis_check(key, cost, at, now)
        if d is None:
            return self._fallback(key, cost, now)
        if not d.allowed:
            c = _ffi.CDecision(
                False, d.limit, d.remaining, d.retry_after_ns, d.reset_after_ns, d.wait_ns
            )
            status = _lib.ratecell_denials_remember(self._core.denials, request, c)
            if status:
                raise _errors.error_for_status(status)
        return d

    # Leased.

    def _leased(self, key: Key, cost: int, at: int | None, r: Any) -> Decision:
        core = self._core
        if r is None:
            r = _leases_check(self._lh, key, cost, at)
        step, d, g = r
        grant = g if g is None or isinstance(g, _ffi.GrantHandle) else _ffi.GrantHandle(g)
        if step == _ffi.STEP_DECIDED:
            return d  # type: ignore[no-any-return]
        if step == _ffi.STEP_REFILL:
            assert grant is not None and self._refiller is not None
            self._refiller.send(grant)
            return d  # type: ignore[no-any-return]
        if step == _ffi.STEP_FETCH:
            assert grant is not None
            reply = core.grant_reply(grant, foreground=True)
            # When the answer came, on the node's clock (the request's own
            # time with send_at): a probe is due a delay after it.
            done = _grant_at(grant) if core.send_at else _ffi.NOW
            c = core.complete(grant, reply, done)
            again = core.retry(grant, c, done)
            if again is not None and self._refiller is not None:
                with contextlib.suppress(queue.Full):
                    self._refiller.queue.put_nowait(again)
            return decision_from_c(c.decision)
        return self._strict(key, cost, at)


_BURSTY = frozenset({"gcra", "leaky_bucket", "token_bucket"})


def _check_all_args(
    limits: Iterable[tuple[RedisLimiter, Key] | tuple[RedisLimiter, Key, int]],
    now_ns: int | None,
) -> list[Any]:
    args: list[Any] = []
    if now_ns is not None:
        args += ["AT", now_ns]
    for item in limits:
        limiter, key = item[0], item[1]
        cost = item[2] if len(item) > 2 else 1  # type: ignore[misc]
        args += ["LIMIT", limiter._key(key), *limiter._args, "COST", cost]
    return args


def _check_all_reply(reply: Sequence[Any]) -> tuple[bool, list[Decision]]:
    return int(reply[0]) == 1, [_decision(r) for r in reply[1:]]


def check_all(
    client: Any,
    limits: Iterable[tuple[RedisLimiter, Key] | tuple[RedisLimiter, Key, int]],
    *,
    at: int | None = None,
) -> tuple[bool, list[Decision]]:
    """Checks several ``(limiter, key[, cost])`` as one request: admitted,
    and stored, only if every limit admits. Returns the overall answer and
    one decision per limit (when not admitted, the limits that would have
    admitted report a peek at their unchanged state). ``at`` (UNIX ns), as
    for ``RedisLimiter.check``. In a cluster the keys must share a slot:
    use a hash tag (``{user:42}:minute``)."""
    try:
        reply = client.execute_command("RATECELL.CHECKALL", *_check_all_args(limits, at))
    except _redis.ResponseError as e:
        _raise(e)
        raise
    return _check_all_reply(reply)


class RedisLimits:
    """Named limits kept in Redis, as the HTTP middlewares take them
    (``RateLimitMiddleware(app, RedisLimits(client, {...}))``).

    ``limits`` maps each policy name to a ``RedisLimiter`` (a mapping or a
    sequence of ``(name, limiter)``, in the order the fields list them); a
    lone limit may be named ``""`` for ``default``. One limit is one
    ``RATECELL.CHECK`` on the limiter's key (``<prefix><key>``); several
    are one ``RATECELL.CHECKALL``, all-or-nothing, on the keys
    ``<prefix>{<key>}:<name>``, whose hash tag puts them in one cluster
    slot. ``client`` is a ``redis.Redis`` (for WSGI or ASGI) or a
    ``redis.asyncio.Redis`` (ASGI: the check is awaited, so the event loop
    never blocks on Redis). The limiters' own clients are not used.

    ``now_ns``, a function returning UNIX ns, decides at that time instead
    of the server's clock (``AT``: tests and replays; such states never
    expire). A leased store spends its units at that time and sends it to
    the server only when the limiter was made with ``send_at=True``.

    ``mode`` is ``"strict"`` (the default: the commands above),
    ``"cached_deny"`` or ``"leased"`` (SPEC.md §8). In the last two the
    store decides through a ``RedisLimiter`` of that mode, made on
    ``client`` (a ``redis.Redis`` or ``redis.RedisCluster``) with the given
    limiter's limit and settings (prefix, ``timeout``, ``failure``,
    ``expected_nodes``, the lease options); one limit only, since a limit
    decided on its own cannot join an all-or-nothing ``RATECELL.CHECKALL``.
    A remembered denial, or a leased key's units in hand, answer without a
    command; under an event loop (ASGI) a check that must ask Redis runs in
    the loop's default executor, so the loop never waits on Redis. A Redis
    that does not answer within the limiter's ``timeout`` (0.05 s by
    default; the store's ``timeout`` applies to strict only) is the
    limiter's ``failure`` policy's to decide (``"deny"``: a 429 whose
    Retry-After is the next attempt; ``"local"``: this node's share), not a
    503. The fields are the same in every mode. ``close()`` stops a leased
    store's refill thread.

    ``timeout`` (seconds, default 0.25; None for none) bounds each check: a
    server that has not answered by then raises ``TimeoutError``, which the
    middlewares answer with 503, or by passing the request with
    ``fail_open=True``. A stalled Redis must not stall every request
    behind it. With a ``redis.asyncio`` client the call is cancelled
    (``asyncio.wait_for``). With a ``redis.Redis`` the store keeps a pool
    of its own, made from the client's address and credentials, whose
    every socket operation (connect, handshake, command, reply) waits at
    most ``timeout`` and is never retried, whatever the client's own
    timeouts and retries say: every request during a stall, not only the
    first, is answered within the timeout. A connection whose reply did
    not come is dropped. Other sync clients (a cluster client) are called
    as they are: bound them with their own ``socket_timeout``.
    """

    __slots__ = (
        "_client", "_limiters", "_policies", "_now_ns", "_timeout", "_moded", "_pool",
        "policy_field",
    )

    def __init__(
        self,
        client: Any,
        limits: Mapping[str, RedisLimiter] | Sequence[tuple[str, RedisLimiter]],
        *,
        now_ns: Callable[[], int] | None = None,
        timeout: float | None = 0.25,
        mode: Mode = "strict",
    ) -> None:
        self._moded: RedisLimiter | None = None
        self._pool: Any = None
        if mode not in _MODES:
            raise ValueError(
                f"RedisLimits: mode must be one of {', '.join(_MODES)}, not {mode!r}"
            )
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
        ):
            raise ValueError(
                f"RedisLimits: timeout must be positive seconds or None, not {timeout!r}"
            )
        self._timeout = timeout
        pairs = list(limits.items() if isinstance(limits, Mapping) else limits)
        if not pairs:
            raise ValueError("RedisLimits: give at least one (name, RedisLimiter)")
        for i, (_, limiter) in enumerate(pairs):
            if not isinstance(limiter, RedisLimiter):
                raise TypeError(f"limit {i}: a RedisLimiter, not {type(limiter).__name__}")
        names = check_names([name for name, _ in pairs], len(pairs))
        for i, (name, limiter) in enumerate(pairs):
            if limiter.mode not in ("strict", mode):
                raise ValueError(
                    f"limit {i} ({name!r}): a {limiter.mode!r} RedisLimiter in a store of mode "
                    f"{mode!r}: give RedisLimits mode={limiter.mode!r}"
                )
        if mode != "strict":
            if len(pairs) != 1:
                raise ValueError(
                    f"RedisLimits: mode={mode!r} takes one limit, not {len(pairs)}: a limit "
                    "decided on its own cannot join an all-or-nothing RATECELL.CHECKALL "
                    "(several limits are strict)"
                )
            if inspect.iscoroutinefunction(getattr(client, "execute_command", None)):
                raise TypeError(
                    f"RedisLimits: mode={mode!r} needs a redis.Redis (or RedisCluster) client, "
                    f"not {type(client).__name__}: its checks that ask Redis run in a thread"
                )
            self._moded = RedisLimiter(client, **{**pairs[0][1]._settings, "mode": mode})
        self._client = client
        if mode == "strict" and timeout is not None:
            # The client's own pool connects and shakes hands under the
            # user's settings (redis-py's defaults: no timeout, retries),
            # which a stalled server turns into seconds per request.
            self._pool = _timed_pool(client, timeout)
        self._limiters = tuple(limiter for _, limiter in pairs)
        self._policies = tuple(
            (name, limiter.limit, limiter.period_ns)
            for name, limiter in zip(names, self._limiters, strict=True)
        )
        self._now_ns = now_ns
        self.policy_field = policy_field(
            [LimitDecision(*p, Decision(True, 0, 0, 0, 0, 0)) for p in self._policies]
        )

    def _items(self, decisions: Sequence[Decision]) -> list[LimitDecision]:
        return [
            LimitDecision(name, limit, period_ns, d)
            for (name, limit, period_ns), d in zip(self._policies, decisions, strict=True)
        ]

    @property
    def limiter(self) -> RedisLimiter | None:
        """The limiter that decides in cached_deny and leased modes (its
        ``stats()``); None in strict mode."""
        return self._moded

    def close(self) -> None:
        """Stops a leased store's refill thread (as ``RedisLimiter.close``)
        and closes the store's own connections."""
        if self._moded is not None:
            self._moded.close()
        if self._pool is not None:
            self._pool.disconnect()

    def check_limits(
        self, key: bytes, cost: int
    ) -> list[LimitDecision] | Awaitable[list[LimitDecision]]:
        now = None if self._now_ns is None else self._now_ns()
        if self._moded is not None:
            r = self._moded._try_local(key, cost, now)
            if isinstance(r, Decision):
                return self._items([r])
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return self._items([r()])
            return self._finish_in_executor(loop, r)
        if len(self._limiters) == 1:
            command = "RATECELL.CHECK"
            args = self._limiters[0]._command(key, cost, now)
        else:
            command = "RATECELL.CHECKALL"
            args = _check_all_args(
                [
                    (limiter, b"{" + key + b"}:" + name.encode("ascii"), cost)
                    for limiter, (name, _, _) in zip(self._limiters, self._policies, strict=True)
                ],
                now,
            )
        try:
            if self._pool is not None and self._timeout is not None:
                reply = self._bounded(self._pool, command, args, self._timeout)
            else:
                reply = self._client.execute_command(command, *args)
        except _redis.ResponseError as e:
            _raise(e)
            raise
        if inspect.isawaitable(reply):
            return self._later(reply)
        return self._decide(reply)

    @staticmethod
    def _bounded(pool: Any, command: str, args: Sequence[Any], timeout: float) -> Any:
        """``command`` on a connection of ``pool`` (``_timed_pool``'s: a new
        connection's connect and handshake wait at most ``timeout`` each,
        once), its reply awaited for at most ``timeout`` seconds."""
        return _pooled_call(pool, command, args, timeout)

    async def _finish_in_executor(
        self, loop: asyncio.AbstractEventLoop, finish: Callable[[], Decision]
    ) -> list[LimitDecision]:
        return self._items([await loop.run_in_executor(None, finish)])

    def _decide(self, reply: Any) -> list[LimitDecision]:
        if len(self._limiters) == 1:
            return self._items([_decision(reply)])
        return self._items(_check_all_reply(reply)[1])

    async def _later(self, reply: Awaitable[Any]) -> list[LimitDecision]:
        try:
            if self._timeout is None:
                got = await reply
            else:
                try:
                    got = await asyncio.wait_for(reply, self._timeout)
                except asyncio.TimeoutError:
                    raise TimeoutError(
                        f"ratecell.redis: no answer within {self._timeout} s"
                    ) from None
        except _redis.ResponseError as e:
            _raise(e)
            raise
        return self._decide(got)

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

``check_all`` checks several limits as one all-or-nothing request
(``RATECELL.CHECKALL``). ``RedisLimits`` gives the HTTP middlewares
(``ratecell.asgi``, ``ratecell.wsgi``) one or several named limits kept in
Redis, with a ``redis.Redis`` or a ``redis.asyncio.Redis`` client. Errors from the module that name a configuration
field raise the matching ``InvalidConfig`` subclass; anything else is
redis-py's own exception.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import redis as _redis

from . import _errors
from ._http import LimitDecision, check_names, policy_field
from ._types import NEVER, Algorithm, Decision

__all__ = ["RedisLimiter", "RedisLimits", "check_all"]

Key = str | bytes


def _period_ns(period_ns: int | None, period: float | datetime.timedelta | None) -> int:
    if (period_ns is None) == (period is None):
        raise TypeError("give exactly one of period_ns (ns) and period (seconds)")
    if period is None:
        assert period_ns is not None
        return period_ns
    if isinstance(period, datetime.timedelta):
        return (
            period.days * 86_400_000_000_000
            + period.seconds * 1_000_000_000
            + period.microseconds * 1_000
        )
    return round(period * 1_000_000_000)


def _decision(reply: Sequence[int]) -> Decision:
    if len(reply) != 6:
        raise _errors.RatecellError(f"unexpected reply from RATECELL.CHECK: {reply!r}")
    allowed, limit, remaining, retry, reset, wait = (int(v) for v in reply)
    return Decision(
        allowed=allowed == 1,
        limit=limit,
        remaining=remaining,
        retry_after_ns=NEVER if retry == -1 else retry,
        reset_after_ns=reset,
        wait_ns=wait,
    )


# The argument a module error names, and the exception it becomes.
_FIELD_ERRORS: list[tuple[str, type[_errors.InvalidConfig]]] = [
    ("limit", _errors.InvalidLimit),
    ("period", _errors.InvalidPeriod),
    ("BURST", _errors.InvalidBurst),
    ("SUBWINDOWS", _errors.InvalidSubWindows),
    ("algorithm", _errors.InvalidAlgorithm),
]


def _raise(e: _redis.ResponseError) -> None:
    message = str(e)
    for name, error in _FIELD_ERRORS:
        if message.startswith(name + " "):
            raise error(message) from e
    raise e


class RedisLimiter:
    """One limit (algorithm, limit, period, burst, sub-windows) kept per key
    in Redis by the ratecell module.

    ``client`` is a ``redis.Redis`` or ``redis.RedisCluster``; the limiter
    holds no state of its own and is as thread-safe as the client.
    ``prefix`` is prepended to every key. Arguments are those of
    ``ratecell.Limiter`` (the period as ``period_ns`` or ``period`` seconds);
    the server checks them and a bad one raises the ``InvalidConfig``
    subclass that names it, on the first call.
    """

    __slots__ = ("_client", "_args", "_prefix", "algorithm", "limit", "period_ns", "burst")

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
    ) -> None:
        if isinstance(algorithm, str):
            name = algorithm.lower().replace("-", "_")
        else:
            name = Algorithm(algorithm).spec_name
        self._client = client
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

    def _key(self, key: Key) -> bytes:
        return self._prefix + (key.encode() if isinstance(key, str) else key)

    def _command(self, key: Key, cost: int, now_ns: int | None) -> list[Any]:
        args: list[Any] = [self._key(key), *self._args, "COST", cost]
        if now_ns is not None:
            args += ["AT", now_ns]
        return args

    def _run(self, key: Key, cost: int, now_ns: int | None) -> Decision:
        try:
            reply = self._client.execute_command(
                "RATECELL.CHECK", *self._command(key, cost, now_ns)
            )
        except _redis.ResponseError as e:
            _raise(e)
            raise
        return _decision(reply)

    def check(self, key: Key, cost: int = 1, *, at: int | None = None) -> Decision:
        """Decides a request of ``cost`` units for ``key`` (cost 0 is a
        peek) and stores the result in Redis. ``at`` (UNIX ns) decides at
        that time instead of the server's clock; the state is then kept
        without expiry (replays, tests)."""
        return self._run(key, cost, at)

    def allow(self, key: Key, cost: int = 1, *, at: int | None = None) -> bool:
        """Whether ``check`` admits the request."""
        return self._run(key, cost, at).allowed


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
    expire).

    ``timeout`` (seconds, default 0.25; None for none) bounds each check: a
    server that has not answered by then raises ``TimeoutError``, which the
    middlewares answer with 503, or by passing the request with
    ``fail_open=True``. A stalled Redis must not stall every request
    behind it. With a ``redis.asyncio`` client the call is cancelled
    (``asyncio.wait_for``); with a ``redis.Redis`` the reply is awaited on
    the pooled connection for at most ``timeout``, and the connection is
    dropped when it does not come. Opening a *new* connection to a stalled
    server is bounded by the client's own ``socket_connect_timeout`` and
    ``socket_timeout``: set them too. Other sync clients (a cluster
    client) are called as they are.
    """

    __slots__ = ("_client", "_limiters", "_policies", "_now_ns", "_timeout", "policy_field")

    def __init__(
        self,
        client: Any,
        limits: Mapping[str, RedisLimiter] | Sequence[tuple[str, RedisLimiter]],
        *,
        now_ns: Callable[[], int] | None = None,
        timeout: float | None = 0.25,
    ) -> None:
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
        self._client = client
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

    def check_limits(
        self, key: bytes, cost: int
    ) -> list[LimitDecision] | Awaitable[list[LimitDecision]]:
        now = None if self._now_ns is None else self._now_ns()
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
            if self._timeout is not None and isinstance(self._client, _redis.Redis):
                reply = self._bounded(command, args, self._timeout)
            else:
                reply = self._client.execute_command(command, *args)
        except _redis.ResponseError as e:
            _raise(e)
            raise
        if inspect.isawaitable(reply):
            return self._later(reply)
        return self._decide(reply)

    def _bounded(self, command: str, args: Sequence[Any], timeout: float) -> Any:
        """``command`` on a pooled connection of a ``redis.Redis``, its
        reply awaited for at most ``timeout`` seconds."""
        pool = self._client.connection_pool
        try:
            conn = pool.get_connection()
        except TypeError:  # redis-py before 5.3 names the command
            conn = pool.get_connection(command)
        try:
            conn.send_command(command, *args)
            if not conn.can_read(timeout=timeout):
                conn.disconnect()  # the late reply must not answer the next command
                raise TimeoutError(f"ratecell.redis: {command}: no answer within {timeout} s")
            return conn.read_response()
        except _redis.ResponseError:
            raise
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)

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

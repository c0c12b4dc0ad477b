"""The Redis module's side of ``ratecell.redis``: its replies read as
``Decision``s, its errors raised as ratecell's, the durations and
algorithm names its commands take, and the connections whose every
command waits at most the limiter's timeout. No limiter state: the
limiters (``ratecell.redis``) and the node's lease bookkeeping
(``_redis_core``) use these."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import redis as _redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import _errors
from ._types import NEVER, Algorithm, Decision

Key = str | bytes | int
"""A key of a limit kept in Redis: its bytes (a str as UTF-8), or an int."""


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


def _seconds_ns(value: float | datetime.timedelta | None, name: str) -> int:
    """Seconds (a number or a timedelta; None for 0, the default) as ns."""
    if value is None:
        return 0
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be seconds >= 0, not {value!r}")
    return round(value * 1_000_000_000)


def _backoff_ns(failures: int) -> int:
    """SPEC §8's wait after the ``failures``-th failure in a row: 10 ms,
    doubling, at most one second (as ``ratecell::lease::backoff_ns``)."""
    return min(10_000_000 << min(max(failures - 1, 0), 16), 1_000_000_000)


# What a command that had no answer raises: the failure policy's, not the
# caller's. A ResponseError is an answer (a bad argument, WRONGTYPE) and is
# raised to the caller.
_OUTAGE = (_redis.ConnectionError, _redis.TimeoutError, TimeoutError, OSError)


def _timed_pool(client: Any, timeout: float) -> Any:
    """A pool of ``client``'s connections whose every socket operation
    (connect, handshake, send, reply) waits at most ``timeout`` seconds and
    is never retried; None for any other client than a ``redis.Redis`` (a
    cluster client: its own settings bound it; an asyncio client, which
    only ``RedisLimits`` uses)."""
    if not isinstance(client, _redis.Redis):
        return None
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if pool is None or kwargs is None:
        return None
    kwargs = dict(kwargs)
    kwargs.pop("retry_on_error", None)
    kwargs.update(
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry_on_timeout=False,
        retry=Retry(NoBackoff(), 0),
    )
    if "lib_name" in kwargs:
        # No CLIENT SETINFO handshake on a new connection: its replies are
        # awaited one by one, each for the whole timeout, on a server that
        # is paused. The module needs no client name.
        kwargs.update(lib_name=None, lib_version=None)
    return _redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)


def _pooled_call(
    pool: Any, command: str, args: Sequence[Any], timeout: float | None = None
) -> Any:
    """``command`` on a connection of ``pool``, whose sockets bound the
    wait, its reply awaited for at most ``timeout`` seconds when given; a
    connection that failed or answered late is dropped (a late reply must
    not answer the next command)."""
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py before 5.3 names the command
        conn = pool.get_connection(command)
    try:
        conn.send_command(command, *args)
        if timeout is not None and not conn.can_read(timeout=timeout):
            conn.disconnect()
            raise TimeoutError(f"ratecell.redis: {command}: no answer within {timeout} s")
        return conn.read_response()
    except _redis.ResponseError:
        raise
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _errors_algorithm(name: str) -> int:
    """The C value of an algorithm's name, or ``InvalidAlgorithm``."""
    try:
        return int(Algorithm[name.upper()])
    except KeyError:
        raise _errors.InvalidAlgorithm(f"unknown algorithm {name!r}") from None

"""The response fields of draft-ietf-httpapi-ratelimit-headers-11 and the
quota-exceeded problem document, as pure functions of per-limit decisions
(RFC 9651 strings, integers and lists), and the legacy ``X-RateLimit-*``
headers. Knows nothing about ASGI or WSGI."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from .._types import Decision

QUOTA_EXCEEDED_TYPE = "https://iana.org/assignments/http-problem-types#quota-exceeded"
"""The draft's problem type for a request refused by quota policies (§5.1)."""

SF_INTEGER_MAX = 999_999_999_999_999
"""The largest Integer RFC 9651 serializes (15 digits); larger values are sent as this."""

NS_PER_S = 1_000_000_000
NEVER = 2**64 - 1


class LimitDecision(NamedTuple):
    """One limit's part of a request's outcome. (A named tuple: one is made
    per limit per request, and a tuple is made several times faster than a
    frozen dataclass.)"""

    name: str
    """The policy name in both fields and in ``violated-policies``."""
    limit: int
    """The quota ``q``: units per period."""
    period_ns: int
    """The window ``w`` in nanoseconds (sent in whole seconds, rounded up)."""
    decision: Decision
    """This limit's decision for the request."""


def ceil_seconds(ns: int) -> int:
    """Whole seconds, rounded up, capped at ``SF_INTEGER_MAX``."""
    return min(-(-max(ns, 0) // NS_PER_S), SF_INTEGER_MAX)


@lru_cache(maxsize=1024)
def _sf_string(s: str) -> str:
    # Cached: the same few policy names are serialized on every response.
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def quota_window(limit: int, period_ns: int) -> tuple[int, int]:
    """The ``q`` and ``w`` of a limit of ``limit`` units per ``period_ns``:
    ``w`` is the period in whole seconds, rounded up (at least 1: the draft's
    window is a non-zero integer), and when the period is not a whole number
    of seconds ``q`` is scaled to that window, rounded down, so that ``q/w``
    is never more than the real rate (10 per 0.5 s is ``q=20;w=1``, 10 per
    1.5 s is ``q=13;w=2``). Unscaled, a 0.5 s period would advertise half
    its real rate."""
    w = max(ceil_seconds(period_ns), 1)
    if period_ns <= 0 or period_ns % NS_PER_S == 0:
        return min(limit, SF_INTEGER_MAX), w
    return min(limit * w * NS_PER_S // period_ns, SF_INTEGER_MAX), w


@lru_cache(maxsize=1024)
def _policy_item(name: str, limit: int, period_ns: int) -> str:
    # Cached: a policy item is the same on every response of its limit.
    q, w = quota_window(limit, period_ns)
    return f"{_sf_string(name)};q={q};w={w}"


def policy_field(items: Sequence[LimitDecision]) -> str:
    """``RateLimit-Policy``: one ``"<name>";q=<limit>;w=<period>`` item per
    limit, as ``quota_window`` gives them."""
    return ", ".join([_policy_item(i.name, i.limit, i.period_ns) for i in items])


def reset_seconds(d: Decision) -> int:
    """The ``t`` of one limit's decision, in whole seconds rounded up: the
    time until more quota is available (draft-11 §4.3).

    - Refused by this limit: its ``retry_after`` (at least 1), when this
      same request could pass; the same value as ``Retry-After`` when this
      limit's wait is the longest. A keyed table with no room for a new key
      (overflow ``deny``) refuses with the table's wait, so ``t`` carries
      that wait, never 0. When no wait helps, ``reset_after``.
    - Admitted: ``reset_after``, when the quota is whole again; more is
      available by then at the latest (exactly then for a fixed window).
      0 when the quota is whole.
    """
    if not d.allowed and d.retry_after_ns != NEVER:
        t = -(-d.retry_after_ns // NS_PER_S) or 1
    else:
        t = -(-d.reset_after_ns // NS_PER_S)
    return t if t <= SF_INTEGER_MAX else SF_INTEGER_MAX


def ratelimit_field(items: Sequence[LimitDecision]) -> str:
    """``RateLimit``: one ``"<name>";r=<remaining>;t=<seconds>`` item per
    limit, ``t`` as ``reset_seconds`` gives it."""
    if len(items) == 1:  # the common case, without a list and a join
        name, _, _, d = items[0]
        r = d.remaining
        if d.allowed:
            t = -(-d.reset_after_ns // NS_PER_S)
            if t > SF_INTEGER_MAX:
                t = SF_INTEGER_MAX
        else:
            t = reset_seconds(d)
        if r > SF_INTEGER_MAX:
            r = SF_INTEGER_MAX
        return f"{_sf_string(name)};r={r};t={t}"
    return ", ".join(
        [
            f"{_sf_string(i.name)};r={min(i.decision.remaining, SF_INTEGER_MAX)}"
            f";t={reset_seconds(i.decision)}"
            for i in items
        ]
    )


def admitted(items: Sequence[LimitDecision]) -> bool:
    """Whether every limit admitted the request."""
    for i in items:
        if not i.decision.allowed:
            return False
    return True


def retry_after_seconds(items: Sequence[LimitDecision]) -> int | None:
    """``Retry-After`` of a refused request: the longest wait of the refusing
    limits, whole seconds rounded up (at least 1). None when admitted, or
    when some limit can never admit the request (no wait helps)."""
    waits = [i.decision.retry_after_ns for i in items if not i.decision.allowed]
    if not waits or NEVER in waits:
        return None
    return max(ceil_seconds(max(waits)), 1)


def problem_body(items: Sequence[LimitDecision]) -> bytes:
    """The ``application/problem+json`` body of a refusal."""
    names = ",".join(_sf_string(i.name) for i in items if not i.decision.allowed)
    return (
        f'{{"type":"{QUOTA_EXCEEDED_TYPE}","title":"Quota exceeded","status":429,'
        f'"violated-policies":[{names}]}}'
    ).encode("ascii")


MISSING_KEY_BODY = (
    b'{"type":"about:blank","title":"Bad Request","status":400,'
    b'"detail":"the request carries no rate-limit key"}'
)
NO_CLIENT_ADDR_BODY = (
    b'{"type":"about:blank","title":"Internal Server Error","status":500,'
    b'"detail":"rate limiting by client address, but the request has no client address '
    b'(a Unix socket, a test client without one): give the middleware key= to key such '
    b'requests"}'
)
UNAVAILABLE_BODY = (
    b'{"type":"about:blank","title":"Service Unavailable","status":503,'
    b'"detail":"the rate limiter failed"}'
)



def legacy_values(items: Sequence[LimitDecision], now_s: int) -> tuple[int, int, int] | None:
    """The legacy ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``
    values (GitHub's, slowapi's, flask-limiter's), which describe one
    limit: of a refused request the refusing limit whose wait is the
    longest (the one ``Retry-After`` gives), else the limit with the fewest
    units left (the first of equals). Limit is its ``q`` (as
    ``RateLimit-Policy`` says it), Remaining its ``r``, and Reset the UNIX
    time in whole seconds when its ``t`` ends, counted from ``now_s``.
    None for no items."""
    refused = [i for i in items if not i.decision.allowed]
    if refused:
        item = max(refused, key=lambda i: reset_seconds(i.decision))
    elif items:
        item = min(items, key=lambda i: i.decision.remaining)
    else:
        return None
    q, _ = quota_window(item.limit, item.period_ns)
    return q, min(item.decision.remaining, SF_INTEGER_MAX), now_s + reset_seconds(item.decision)


def legacy_headers(items: Sequence[LimitDecision]) -> list[tuple[bytes, bytes]]:
    """``legacy_values`` as header lines, Reset from the system clock."""
    got = legacy_values(items, int(time.time()))
    if got is None:
        return []
    limit, remaining, reset = got
    return [
        (b"x-ratelimit-limit", str(limit).encode("ascii")),
        (b"x-ratelimit-remaining", str(remaining).encode("ascii")),
        (b"x-ratelimit-reset", str(reset).encode("ascii")),
    ]


def field_headers(fields: tuple[str, str]) -> list[tuple[bytes, bytes]]:
    return [
        (b"ratelimit-policy", fields[0].encode("ascii")),
        (b"ratelimit", fields[1].encode("ascii")),
    ]


def refusal_headers(
    items: Sequence[LimitDecision], fields: tuple[str, str], body: bytes
) -> list[tuple[bytes, bytes]]:
    headers = [*problem_headers(body), *field_headers(fields)]
    secs = retry_after_seconds(items)
    if secs is not None:
        headers.append((b"retry-after", str(secs).encode("ascii")))
    return headers


Refusal = tuple[int, Sequence[tuple[str, str]], bytes]
"""What an ``on_refusal`` hook answers: status, headers, body."""


def hooked_refusal_headers(
    items: Sequence[LimitDecision], fields: tuple[str, str], given: Sequence[tuple[str, str]]
) -> list[tuple[bytes, bytes]]:
    """A hook's headers, plus the RateLimit fields, Retry-After and
    Content-Length unless it set them."""
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in given]
    present = {k for k, _ in headers}
    secs = retry_after_seconds(items)
    for k, v in (
        *field_headers(fields),
        *(() if secs is None else ((b"retry-after", str(secs).encode("ascii")),)),
    ):
        if k not in present:
            headers.append((k, v))
    return headers


def problem_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]


def outcome(items: Sequence[LimitDecision]) -> tuple[bool, int]:
    """Whether every limit admitted the request, and the longest queue wait
    (leaky bucket) among them, in one pass."""
    ok = True
    wait = 0
    for i in items:
        d = i[3]
        if not d.allowed:
            ok = False
        if d.wait_ns > wait:
            wait = d.wait_ns
    return ok, wait


def queue_wait_ns(items: Sequence[LimitDecision]) -> int:
    wait = 0
    for i in items:
        if i.decision.wait_ns > wait:
            wait = i.decision.wait_ns
    return wait

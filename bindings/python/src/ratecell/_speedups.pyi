# Typing of the C extension module ratecell._speedups (_speedups.c).
from typing import Any

from ._types import Decision

def init(
    check: int | None,
    allow: int | None,
    request_size: int,
    decision_size: int,
    decision: type[Decision],
    raise_error: Any,
    /,
) -> None: ...
def check(
    handle: Any, key: object, cost: object, at: object, tier: object, /
) -> Decision | None: ...
def allow(handle: Any, key: object, cost: object, at: object, tier: object, /) -> bool | None: ...
def init_leases(lease_check: int | None, grant_free: int | None, /) -> None: ...
def lease_check(
    handle: Any, key: object, cost: object, at: object, tier: object, /
) -> Decision | tuple[int, Decision | None, int | None] | None: ...

# Typing of the C extension module ratecell._speedups (_speedups.c).
from typing import Any

from ._types import Decision

def init(
    check: int | None,
    check_bytes: int | None,
    allow_key: int | None,
    decision_size: int,
    decision: type[Decision],
    error_for_status: Any,
    /,
) -> None: ...
def check(handle: Any, key: object, cost: object, /) -> Decision | None: ...
def allow(handle: Any, key: object, cost: object, /) -> bool | None: ...

"""Per-process memos of what a receipt's stored bytes alone determine (their reading, the
page's parts drawn from the document). A receipt is immutable, so such a memo cannot go stale,
and it is keyed by the bytes themselves: bytes changed behind the site's back are another key.

Each memo is bounded in entries, and bytes over SMALL are never memoised (read afresh each
time), so that a process holds at most a few MiB of them whatever size receipts are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

SMALL = 16 * 1024  # bytes; receipts are usually 1-3 KiB, the largest allowed 256 KiB

P = ParamSpec("P")
R = TypeVar("R")


def memoisable(data: object) -> bool:
    return isinstance(data, bytes) and len(data) <= SMALL


def of_bytes(maxsize: int) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A bounded LRU memo of a function whose first argument is the stored bytes."""

    def decorator(function: Callable[P, R]) -> Callable[P, R]:
        cached = functools.lru_cache(maxsize=maxsize)(function)

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if args and memoisable(args[0]):
                return cached(*args, **kwargs)  # type: ignore[arg-type,no-any-return]
            return function(*args, **kwargs)

        wrapper.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return wrapper

    return decorator


def first(key: Any) -> Any:
    return key[0] if isinstance(key, tuple) and key else key

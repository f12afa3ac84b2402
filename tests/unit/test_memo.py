"""The per-process memos of what stored bytes alone determine (lib/memo.py): bounded, and
never holding large receipts."""

from __future__ import annotations

import pytest

from receiptsite.lib import memo

pytestmark = pytest.mark.unit


def test_small_bytes_are_read_once_and_large_ones_every_time() -> None:
    calls: list[bytes] = []

    @memo.of_bytes(maxsize=2)
    def reading(data: bytes, language: str) -> int:
        calls.append(data)
        return len(data)

    small, large = b"x" * 100, b"y" * (memo.SMALL + 1)
    assert [reading(small, "en") for _ in range(3)] == [100] * 3
    assert calls == [small]
    assert [reading(large, "en") for _ in range(3)] == [memo.SMALL + 1] * 3
    assert calls == [small] + [large] * 3
    reading(small, "zh-hans")  # another argument, another entry
    reading(b"z", "en")  # a third entry: the oldest goes (maxsize 2)
    reading(small, "en")
    assert calls[-3:] == [small, b"z", small]

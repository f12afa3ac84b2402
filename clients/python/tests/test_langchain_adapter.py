"""The LangChain adapter with no site at all: a client that raises on every record never
breaks the run. The agent is langchain_helpers'; the tests against a live site are in
test_langchain_adapter_live.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from client_helpers import NO_SITE
from langchain_helpers import ANSWER, run_agent
from receiptsite_client import Client, Entry
from receiptsite_client.langchain import ReceiptCallbackHandler

pytestmark = pytest.mark.unit


class BrokenClient(Client):
    """A client whose outbox cannot be written (a full disk, say): record raises."""

    def record(self, document: dict[str, Any]) -> Entry:
        raise OSError("No space left on device")


def test_a_client_that_raises_never_breaks_the_run(tmp_path: Path) -> None:
    """No site at all: a client that raises on every record. The run still ends as usual."""
    client = BrokenClient(NO_SITE, "rk_000000000000_unused", str(tmp_path / "o.db"))
    handler = ReceiptCallbackHandler(client, "lc-broken")
    assert handler.raise_error is False

    answer, _, recorder = run_agent(handler)

    assert answer == ANSWER
    assert len(recorder.tools) == 5
    # 5 starts, 5 ends, 1 completion: every failure kept, none raised into LangChain.
    assert len(handler.errors) == 11
    assert all(isinstance(error, OSError) for error in handler.errors)
    assert handler.entries == []
    assert handler.urls == {}

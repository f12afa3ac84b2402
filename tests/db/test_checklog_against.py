"""`checklog --against FILE` takes a saved checkpoint whose only difference from the signed note
is its final newline, one missing or one more, as shells and `jq -r` save it; it refuses
anything else."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from tests.conftest import Producer

pytestmark = pytest.mark.db


def checklog_against(path: Path) -> str:
    out = StringIO()
    call_command("checklog", "--against", str(path), stdout=out)
    return out.getvalue()


@pytest.fixture
def saved(producer: Producer, client: Client) -> str:
    receipt = producer.publish(idempotency_key="a")
    producer.publish(idempotency_key="b")
    note = client.get("/api/log/checkpoint").content.decode()
    assert note.endswith("\n") and not note.endswith("\n\n")
    # The verification JSON carries the same note: what `jq -r .log.checkpoint` prints of it.
    verify = client.get(f"/api/receipt/{receipt['id']}/verify").json()
    assert verify["log"]["checkpoint"].endswith("\n")
    producer.publish(idempotency_key="c")  # the log grew since it was saved
    return note


@pytest.mark.parametrize(
    "how",
    ["as served", "without its final newline", "with one newline more (jq -r)"],
)
def test_a_checkpoint_saved_with_or_without_its_final_newline_checks_out(
    saved: str, tmp_path: Path, how: str
) -> None:
    text = {
        "as served": saved,
        "without its final newline": saved[:-1],
        "with one newline more (jq -r)": saved + "\n",
    }[how]
    path = tmp_path / "checkpoint.txt"
    path.write_bytes(text.encode())
    assert f"Consistent with the checkpoint of size 2 in {path}." in checklog_against(path)


@pytest.mark.parametrize(
    "how", ["two newlines more", "the newline and a character more missing",
            "a space at the end", "a blank line first", "one character changed"],
)  # fmt: skip
def test_anything_else_is_still_refused(saved: str, tmp_path: Path, how: str) -> None:
    text = {
        "two newlines more": saved + "\n\n",
        "the newline and a character more missing": saved[:-2],
        "a blank line first": "\n" + saved,
        "a space at the end": saved + " ",
        "one character changed": saved.replace("\n2\n", "\n3\n", 1),
    }[how]
    path = tmp_path / "checkpoint.txt"
    path.write_bytes(text.encode())
    with pytest.raises(CommandError) as refused:
        checklog_against(path)
    assert f"{path} is not a checkpoint signed by one of this site's keys" in str(refused.value)

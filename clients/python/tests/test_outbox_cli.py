"""`receipt-outbox`, the installed command, run as a user would: the exits when it cannot start
(no outbox, no key, no http(s) site) and with the site unreachable. Against a live site:
test_outbox_cli_live.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from client_helpers import document
from client_helpers import run_outbox as run
from receiptsite_client import Client

pytestmark = pytest.mark.unit


def test_flush_exits_2_without_a_key_or_an_outbox(tmp_path: Path, refused_url: str) -> None:
    outbox = tmp_path / "receipts.sqlite3"
    missing = run("flush", "--outbox", str(outbox), "--site", refused_url, key="rk_x")
    assert missing.returncode == 2 and "no outbox at" in missing.stderr
    assert not outbox.exists()  # a typo does not leave an empty outbox behind

    Client(refused_url, "rk_x", outbox, deadline=0.1).record(document("wf"))
    no_key = run("flush", "--outbox", str(outbox), "--site", refused_url)
    assert no_key.returncode == 2 and "RECEIPTSITE_API_KEY" in no_key.stderr
    bad_site = run("flush", "--outbox", str(outbox), "--site", "ftp://x", key="rk_x")
    assert bad_site.returncode == 2 and "http(s) URL" in bad_site.stderr
    down = run(
        "flush", "--outbox", str(outbox), "--site", refused_url, "--deadline", "0.2", key="rk_x"
    )
    assert down.returncode == 1
    assert down.stdout.startswith("pending ")

"""The keys' history through gunicorn: the keys document publishes the signed statements of
every change of a key's status, and a rotation is recorded only with the outgoing key's word
(PREVIOUS_SIGNING_KEY_FILE), on a live site with its own database (README, "Rotating the
signing key"; docs/verification.md, "The keys' history")."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from receiptsite.integrity import keys
from receiptsite.ledger import key_chain
from tests.conftest import EXAMPLE_BODY
from tests.livesite import LiveSite

pytestmark = pytest.mark.live


def keys_document(live: LiveSite) -> dict[str, Any]:
    document: dict[str, Any] = live.get("/.well-known/receipt-keys.json").json()
    return document


def stated(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(base64.b64decode(item["statement"])) for item in document["history"]]


def restart_with(live: LiveSite, **env: str) -> None:
    live.base_env.update(env)
    live.stop()
    live._serve()


def test_a_rotation_is_published_signed_by_both_keys_and_only_with_the_old_key(
    tmp_path: Path,
) -> None:
    with LiveSite(workers=1) as live:
        assert live.post("/api/receipts", {**EXAMPLE_BODY, "idempotency_key": "a"}).status == 201
        document = keys_document(live)
        [old] = document["keys"]
        assert [(s["kid"], s["status"]) for s in stated(document)] == [(old["kid"], "active")]
        assert key_chain.check(document["history"], anchor=old["kid"]).problems == []

        old_file = tmp_path / "old.pem"
        old_file.write_bytes(Path(live.base_env["SIGNING_KEY_FILE"]).read_bytes())
        new_file = tmp_path / "new.pem"
        new_file.write_bytes(keys.generate_private_key_pem())
        new = keys.jwk_thumbprint(keys.public_raw(keys.load_private_key_pem(
            new_file.read_bytes())))
        # Without the old key at hand, the new key is not slipped in: nothing is stored.
        restart_with(live, SIGNING_KEY_FILE=str(new_file))
        refused = live.post("/api/receipts", {**EXAMPLE_BODY, "idempotency_key": "b"})
        assert refused.status == 503, refused.text
        assert "PREVIOUS_SIGNING_KEY_FILE" in refused.json()["detail"]
        assert keys_document(live) == document

        restart_with(live, PREVIOUS_SIGNING_KEY_FILE=str(old_file))
        assert live.post("/api/receipts", {**EXAMPLE_BODY, "idempotency_key": "b"}).status == 201
        document = keys_document(live)
        assert [(s["kid"], s["status"], s["signed_by"]) for s in stated(document)[1:]] == [
            (new, "active", [new, old["kid"]]),
            (old["kid"], "retired", [new, old["kid"]]),
        ]
        chain = key_chain.check(document["history"], anchor=old["kid"])
        assert chain.problems == []
        assert key_chain.disagreements(chain, document["keys"]) == []
        assert "The keys' history (3 signed statement(s)) checks out" in live.manage("checklog")

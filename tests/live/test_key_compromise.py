"""Key compromise, end to end on a live site (gunicorn, its own database: SQLite, or
PostgreSQL when the suite runs there), as an operator meets it (README, "Key compromise").

The story: the site's key signs receipt `before`; later it leaks, at a time T; after T it
signs `after` (nobody knows yet); the operator runs `compromisekey <kid> --at T`, which marks
the key compromised, activates a new key, and signs `before` again with it, since a
checkpoint signed before T holds its leaf. `after` is not provably older than T: it fails, and
so does any checkpoint the leaked key signs after T, on the server, in `checklog` and in
receipt-verify. (The browser verifier's side is in tests/test_browser.py.)
"""

from __future__ import annotations

import json
import re
from base64 import b64decode
from collections.abc import Iterator
from datetime import datetime
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from receiptsite_client import verify as client

from receiptsite.integrity import keys, note
from receiptsite.integrity.encoding import b64url_decode
from receiptsite.ledger import key_chain
from tests.conftest import EXAMPLE_BODY
from tests.db.test_key_compromise import stamp, tick
from tests.livesite import LiveSite

pytestmark = pytest.mark.live

NEW_KEY_FILE = re.compile(r"Now point SIGNING_KEY_FILE at (\S+) and restart")


def publish(live: LiveSite, **changes: Any) -> dict[str, Any]:
    response = live.post("/api/receipts", {**EXAMPLE_BODY, **changes})
    assert response.status == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def keys_document(live: LiveSite) -> dict[str, Any]:
    document: dict[str, Any] = live.get("/.well-known/receipt-keys.json").json()
    return document


def verify(live: LiveSite, receipt_id: str) -> dict[str, Any]:
    response = live.get(f"/api/receipt/{receipt_id}/verify")
    assert response.status == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def check(body: dict[str, Any], name: str) -> dict[str, str]:
    [found] = [c for c in body["checks"] if c["name"] == name]
    return found


@pytest.fixture(scope="module")
def compromised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with LiveSite(workers=2) as live:
        leaked = keys.load_private_key_pem(Path(live.base_env["SIGNING_KEY_FILE"]).read_bytes())
        before = publish(live, idempotency_key="before")
        checkpoint_before = live.get("/api/log/checkpoint").text
        [old] = keys_document(live)["keys"]
        tick()
        leaked_at = stamp()
        tick()
        after = publish(live, idempotency_key="after")
        checkpoint_after = live.get("/api/log/checkpoint").text
        # One argument with "=": a kid is base64url and may begin with "-".
        output = live.manage("compromisekey", f"--at={leaked_at}", "--", old["kid"])
        yield {
            "live": live,
            "leaked": leaked,
            "old": old,
            "leaked_at": leaked_at,
            "before": before,
            "after": after,
            "output": output,
            "checkpoint_before": checkpoint_before,
            "checkpoint_after": checkpoint_after,
            "folder": tmp_path_factory.mktemp("compromise"),
        }


@pytest.fixture(scope="module")
def restarted(compromised: dict[str, Any]) -> dict[str, Any]:
    """The running site, not restarted, stores a receipt after the compromise: it read the new
    key that compromisekey wrote into SIGNING_KEY_FILE at its first write."""
    compromised["later"] = publish(compromised["live"], idempotency_key="later")
    return compromised


def test_the_keys_document_shows_the_key_compromised_with_its_time(
    compromised: dict[str, Any],
) -> None:
    document = keys_document(compromised["live"])
    old, new = document["keys"]
    assert old["kid"] == compromised["old"]["kid"]
    assert (old["status"], old["compromised_at"]) == ("compromised", compromised["leaked_at"])
    assert old["retired_at"] is not None
    assert new["status"] == "active" and "compromised_at" not in new
    assert document["log"]["verifier_key"] == document["log"]["verifier_keys"][1]
    output = compromised["output"]
    assert "Signed again by" in output and "1 receipt(s)" in output
    assert "Wrote the new key in place of the compromised one in SIGNING_KEY_FILE" in output
    # SIGNING_KEY_FILE now holds the new key, a PKCS#8 file only its owner may read.
    path = Path(compromised["live"].base_env["SIGNING_KEY_FILE"])
    assert path.stat().st_mode & 0o077 == 0
    private = keys.load_private_key_pem(path.read_bytes())
    assert keys.jwk_thumbprint(keys.public_raw(private)) == new["kid"]


def test_the_keys_history_states_the_new_key_and_the_compromise_signed_by_the_new_key(
    compromised: dict[str, Any],
) -> None:
    document = keys_document(compromised["live"])
    old, new = (key["kid"] for key in document["keys"])
    made = [json.loads(b64decode(item["statement"])) for item in document["history"]]
    assert [(s["kid"], s["status"], s["signed_by"]) for s in made] == [
        (old, "active", [old]),
        (new, "active", [new]),
        (old, "compromised", [new]),
    ]
    assert made[2]["compromised_at"] == compromised["leaked_at"]
    chain = key_chain.check(document["history"], anchor=old)
    assert chain.problems == []
    assert key_chain.disagreements(chain, document["keys"]) == []


def test_with_a_new_key_file_the_site_stores_nothing_until_restarted_with_it(
    tmp_path: Path,
) -> None:
    with LiveSite(workers=1) as live:
        publish(live, idempotency_key="before")
        [old] = keys_document(live)["keys"]
        new_file = tmp_path / "next.pem"
        new_file.write_bytes(keys.generate_private_key_pem())
        output = live.manage(
            "compromisekey", f"--at={stamp()}", f"--new-key-file={new_file}", "--", old["kid"]
        )
        match = NEW_KEY_FILE.search(output)
        assert match and match[1] == str(new_file.resolve()), output
        # Until the restart the site still holds the leaked key: it stores and signs nothing.
        checkpoint = live.get("/api/log/checkpoint").text
        refused = live.post("/api/receipts", {**EXAMPLE_BODY, "idempotency_key": "refused"})
        assert refused.status == 503 and refused.json()["type"].endswith("/cannot-sign")
        assert live.get("/api/log/checkpoint").text == checkpoint
        health = live.get("/healthz")
        assert health.status == 503 and "compromised" in health.json()["detail"]
        live.base_env["SIGNING_KEY_FILE"] = str(new_file)
        live.stop()
        live._serve()
        later = publish(live, idempotency_key="later")
        assert live.get("/healthz").status == 200
        assert (
            verify(live, later["id"])["signature"]["key_id"]
            == keys_document(live)["keys"][1]["kid"]
        )


def test_a_receipt_logged_before_the_compromise_verifies_by_the_new_key(
    restarted: dict[str, Any],
) -> None:
    live, old = restarted["live"], restarted["old"]
    new = keys_document(live)["keys"][1]
    body = verify(live, restarted["before"]["id"])
    assert body["status"] == "valid", body["checks"]
    assert body["signature"]["key_id"] == new["kid"]
    data = client.b64decode(body["canonical_bytes"])
    assert keys.verify_signature(
        b64url_decode(new["x"]), data, client.b64decode(body["signature"]["value"])
    )
    detail = check(body, "signature")["detail"]
    assert old["kid"] in detail and new["kid"] in detail
    assert f"compromised as of {restarted['leaked_at']}" in detail
    # The checkpoint it rests on, for anyone to check: the one the old key signed before.
    evidence = body["signature"]["evidence"]
    assert evidence["checkpoint"] == restarted["checkpoint_before"]
    assert (evidence["tree_size"], evidence["leaf_index"]) == (1, 0)
    assert evidence["signed_at"] < restarted["leaked_at"]
    assert evidence["signed_at_source"] == "site"
    page = live.get(f"/run/{restarted['before']['id']}").text
    assert 'data-verdict="valid"' in page
    assert "Warning: this receipt does not verify" not in page


def test_a_receipt_not_provably_logged_before_fails_and_the_page_says_why(
    restarted: dict[str, Any],
) -> None:
    live, old = restarted["live"], restarted["old"]
    body = verify(live, restarted["after"]["id"])
    assert body["status"] == "invalid"
    assert body["signature"]["key_id"] == old["kid"]
    signature = check(body, "signature")
    assert signature["result"] == "fail"
    assert f"compromised as of {restarted['leaked_at']}" in signature["detail"]
    assert "cannot be shown to have been logged before" in signature["detail"]
    # The other checks pass: the bytes are the ones stored and logged.
    assert [c["name"] for c in body["checks"] if c["result"] == "fail"] == ["signature"]
    page = live.get(f"/run/{restarted['after']['id']}").text
    assert 'data-verdict="invalid"' in page
    assert "Warning: this receipt does not verify" in page
    # The time in the page's one date form, in the reader's language.
    leaked = datetime.fromisoformat(restarted["leaked_at"])
    english = f"{leaked.day} {leaked:%B %Y, %H:%M:%S} UTC"
    assert "reported compromised (it may have leaked) as of " in page
    assert english in unescape(page)
    assert "It may have been altered" not in page
    chinese = live.get(
        f"/run/{restarted['after']['id']}", headers={"Accept-Language": "zh-Hans"}
    ).text
    assert f"自 {leaked.year}年{leaked.month}月{leaked.day}日 {leaked:%H:%M:%S} UTC 起已泄露" in (
        unescape(chinese)
    )


def test_the_new_key_signs_the_log_and_new_receipts(restarted: dict[str, Any]) -> None:
    live = restarted["live"]
    document = keys_document(live)
    assert live.get("/healthz").status == 200
    later = verify(live, restarted["later"]["id"])
    assert later["status"] == "valid"
    assert later["signature"]["key_id"] == document["keys"][1]["kid"]
    checkpoint = live.get("/api/log/checkpoint").text
    assert note.verify_note(checkpoint, [document["log"]["verifier_key"]]) is not None
    assert note.verify_note(checkpoint, [document["log"]["verifier_keys"][0]]) is None
    assert "OK: 3 leaves" in live.manage("checklog")


def test_checklog_accepts_a_checkpoint_the_old_key_signed_before_and_no_other(
    restarted: dict[str, Any],
) -> None:
    live, folder = restarted["live"], restarted["folder"]
    origin = keys_document(live)["log"]["origin"]
    before = folder / "before.txt"
    before.write_text(restarted["checkpoint_before"])
    assert "before the compromise" in live.manage("checklog", "--against", str(before))
    # Signed by the leaked key after T: by the site itself, or by whoever holds the key.
    after = folder / "after.txt"
    after.write_text(restarted["checkpoint_after"])
    forged = folder / "forged.txt"  # the current tree, which the leaked key never signed
    body = live.get("/api/log/checkpoint").text.partition("\n\n")[0] + "\n"
    forged.write_text(note.sign_note(body, origin, restarted["leaked"]))
    for path in (after, forged):
        with pytest.raises(RuntimeError, match="has no record of signing it before then"):
            live.manage("checklog", "--against", str(path))


def test_receipt_verify_takes_the_new_signature_and_refuses_the_leaked_keys_checkpoint(
    restarted: dict[str, Any],
) -> None:
    live = restarted["live"]
    base = live.url
    verified = client.verify_target(f"{base}/run/{restarted['before']['id']}")
    assert verified.status == "valid"
    signature = verified.check("signature")
    assert signature is not None and "resting on the checkpoint of 1 leaves" in signature.detail
    result = client.verify_target(f"{base}/run/{restarted['after']['id']}")
    assert result.status == "invalid" and result.failed() == ["signature"]
    signature = result.check("signature")
    assert signature is not None and restarted["leaked_at"] in signature.detail
    # The verification of `before` with its checkpoint swapped for the one the leaked key
    # signed after T: genuine signature, wrong time, refused.
    verification = verify(live, restarted["before"]["id"])
    text = restarted["checkpoint_before"].partition("\n\n")[0] + "\n"
    origin = verification["log"]["origin"]
    verification["log"]["checkpoint"] = note.sign_note(text, origin, restarted["leaked"])
    [size, root] = text.splitlines()[1:3]
    verification["log"]["tree_size"], verification["log"]["root_hash"] = int(size), root
    verification["log"]["inclusion_proof"] = []
    checked = client.verify_verification(verification, keys_document(live), None)
    checkpoint = checked.check("checkpoint_signature")
    assert checkpoint is not None and checkpoint.result == client.FAIL
    assert "signed only by a key marked compromised" in checkpoint.detail
    assert restarted["leaked_at"] in checkpoint.detail


def test_the_server_never_serves_a_checkpoint_the_leaked_key_signed_after(
    restarted: dict[str, Any],
) -> None:
    """A note by the leaked key stored behind the site's back (as if it had signed after T):
    the site refuses to serve it, fails the log check, and recovers once `signcheckpoint`
    signs the tree with the active key."""
    live = restarted["live"]
    current = live.get("/api/log/checkpoint").text
    origin = keys_document(live)["log"]["origin"]
    forged = note.sign_note(current.partition("\n\n")[0] + "\n", origin, restarted["leaked"])
    live.manage(
        "shell",
        "-c",
        (
            "from receiptsite.receipts.models import SignedCheckpoint, SigningKey; "
            f"k = SigningKey.objects.get(kid={restarted['old']['kid']!r}); "
            f"SignedCheckpoint.objects.create(tree_size={current.splitlines()[1]}, "
            f"note={forged!r}, signing_key=k)"
        ),
    )
    refused = live.get("/api/log/checkpoint")
    assert refused.status == 503 and restarted["old"]["kid"] in refused.json()["detail"]
    assert live.get("/healthz").status == 503
    body = verify(live, restarted["before"]["id"])
    assert body["status"] == "invalid" and body["log"] is None
    assert "compromised" in check(body, "log_inclusion")["detail"]
    with pytest.raises(RuntimeError, match="signed after it was compromised"):
        live.manage("checklog")
    live.manage("signcheckpoint")
    assert live.get("/api/log/checkpoint").text != forged
    assert verify(live, restarted["before"]["id"])["status"] == "valid"
    assert live.get("/healthz").status == 200


# --- the command, on the suite's own database --------------------------------------------




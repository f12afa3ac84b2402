"""Key rotation goes forward only (ledger/keyring.py): a retired key is never made active again,
and a process whose key another host retired signs nothing more, says so in its log and on
/healthz. From the site's side: the commands and the HTTP answers."""

from __future__ import annotations

import logging
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from receiptsite.config import signing_key
from receiptsite.integrity.keys import generate_private_key_pem
from receiptsite.ledger import keyring
from receiptsite.receipts.models import KeyStatement, Receipt, SignedCheckpoint, SigningKey
from tests.conftest import Producer, assert_problem, example_body

pytestmark = [pytest.mark.db, pytest.mark.usefixtures("own_key_file")]


def new_key(folder: Path, name: str) -> tuple[str, Ed25519PrivateKey]:
    path = folder / name
    path.write_bytes(generate_private_key_pem())
    return str(path), signing_key(str(path))


def as_a_new_process(settings: Any, key: Ed25519PrivateKey, previous: Any = None) -> None:
    """A process started now with SIGNING_KEY_FILE (and PREVIOUS_SIGNING_KEY_FILE) naming
    these keys: it holds nothing it recorded before."""
    keyring._held.clear()
    keyring.forget()
    settings.SIGNING_KEY = key
    settings.PREVIOUS_SIGNING_KEY = previous


def state() -> list[Any]:
    return [
        list(SigningKey.objects.order_by("pk").values_list("kid", "status")),
        list(KeyStatement.objects.values_list("pk", flat=True)),
        SignedCheckpoint.objects.count(),
    ]


def test_signcheckpoint_refuses_to_make_a_retired_key_active_again(
    db: None, settings: Any, tmp_path: Path
) -> None:
    old = settings.SIGNING_KEY
    old_kid = keyring.active_key().kid
    _, new = new_key(tmp_path, "signing-2027.pem")
    as_a_new_process(settings, new, previous=old)  # the rotation, done right
    call_command("signcheckpoint", stdout=StringIO())
    new_kid = SigningKey.objects.get(status=SigningKey.ACTIVE).kid
    assert new_kid != old_kid
    before = state()
    # A shell that still names the old key (and, as PREVIOUS_SIGNING_KEY_FILE, the new one:
    # all it would take to sign over), or one that names the old key alone.
    for previous in (new, None):
        as_a_new_process(settings, old, previous=previous)
        with pytest.raises(CommandError) as refused:
            call_command("signcheckpoint", stdout=StringIO())
        line = str(refused.value)
        assert "\n" not in line
        assert f"the key in SIGNING_KEY_FILE ({old_kid}) is retired" in line
        assert f"the active key is {new_kid}" in line
        assert state() == before  # nothing stated, nothing signed, the new key still active


def test_a_host_whose_key_another_host_retired_refuses_to_sign_and_says_so(
    producer: Producer, client: Client, settings: Any, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer.publish(idempotency_key="before")  # this host has recorded and used its key
    old_kid = keyring.active_key().kid
    # Another host, restarted with the new key first in a rolling restart, activates it (this
    # process stands for it: it holds the old key's private half to sign over with).
    _, new = new_key(tmp_path, "signing-2027.pem")
    new_kid = keyring.record(keyring.configured_from(new)).kid
    assert SigningKey.objects.get(kid=old_kid).status == SigningKey.RETIRED
    before = state()
    stored = Receipt.objects.count()

    with caplog.at_level(logging.ERROR, logger="receiptsite.ledger.keyring"):
        response = producer.post(example_body(idempotency_key="after"))
    body = assert_problem(response, 503, "cannot-sign")
    assert f"the key in SIGNING_KEY_FILE ({old_kid}) is retired" in body["detail"]
    assert f"the active key is {new_kid}" in body["detail"]
    assert Receipt.objects.count() == stored and state() == before  # signed nothing
    (logged,) = [r.getMessage() for r in caplog.records if r.name == "receiptsite.ledger.keyring"]
    assert logged.startswith(
        f"signing key: refusing to sign: the key in SIGNING_KEY_FILE ({old_kid}) is retired"
    )
    assert f"the active key is {new_kid}" in logged

    health = client.get("/healthz")
    said = assert_problem(health, 503, "cannot-sign")
    assert said["detail"] == body["detail"]
    assert {c["name"]: c["result"] for c in said["checks"]} == {
        "database": "pass", "signing_key": "fail", "log": "pass"
    }
    # Reads keep working; restarted with the active key, the host signs again.
    assert client.get("/api/log/checkpoint").status_code == 200
    as_a_new_process(settings, new)
    assert producer.post(example_body(idempotency_key="after")).status_code == 201
    assert client.get("/healthz").status_code == 200


def test_a_rotation_forward_is_unchanged(db: None, settings: Any, tmp_path: Path) -> None:
    old = settings.SIGNING_KEY
    old_kid = keyring.active_key().kid
    _, new = new_key(tmp_path, "signing-2027.pem")
    as_a_new_process(settings, new, previous=old)
    out = StringIO()
    call_command("signcheckpoint", stdout=out)
    assert dict(SigningKey.objects.values_list("kid", "status")) == {
        old_kid: SigningKey.RETIRED, keyring.configured().kid: SigningKey.ACTIVE
    }
    assert keyring.configured().kid in out.getvalue()


def test_a_host_whose_key_was_retired_elsewhere_signs_no_decision_nor_withdrawal(
    producer: Producer, auditor: Any, settings: Any, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from receiptsite.receipts.models import DecisionLink, WithdrawalStatement
    from receiptsite.review.services import decision_record
    from tests.db.test_withdrawal import withdraw

    answer = producer.publish(idempotency_key="to-review")
    receipt = Receipt.objects.get(public_id=answer["id"])
    old_kid = keyring.active_key().kid
    _, new = new_key(tmp_path, "signing-2027.pem")
    keyring.record(keyring.configured_from(new))  # another host's rolling restart, first
    keyring.record(keyring.configured_from(settings.SIGNING_KEY))  # this host, as it held it
    before = (DecisionLink.objects.count(), WithdrawalStatement.objects.count(), state())

    with caplog.at_level(logging.ERROR, logger="receiptsite.ledger.keyring"):
        with pytest.raises(keyring.CannotSign) as refused:
            decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")
        assert f"({old_kid}) is retired" in refused.value.detail
        body = assert_problem(withdraw(producer, answer["id"]), 503, "cannot-sign")
        assert f"({old_kid}) is retired" in body["detail"]
    assert (DecisionLink.objects.count(), WithdrawalStatement.objects.count(), state()) == before
    assert sum("refusing to sign" in r.getMessage() for r in caplog.records) == 2

"""The keys and their history: every change of a key's status is a signed key-status/v1
statement chained to the one before (ledger/key_history.py), published in the keys document,
checked by `checklog`; and the database refuses a key row that no statement records
(migrations/0016_key_history), tried here with raw SQL as the site's own role could send it."""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
from io import StringIO
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.apps import apps
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import Error, connection, transaction
from django.test import Client
from django.utils import timezone

from receiptsite.config import signing_key
from receiptsite.integrity import keys
from receiptsite.integrity.canonical import canonical_bytes
from receiptsite.integrity.encoding import b64url
from receiptsite.integrity.keys import generate_private_key_pem
from receiptsite.ledger import key_chain, key_history, key_statement_v1, keyring
from receiptsite.receipts.models import KeyStatement, SigningKey
from tests.conftest import Producer, command_line

pytestmark = [pytest.mark.db, pytest.mark.usefixtures("own_key_file")]


def run(name: str, *args: str) -> str:
    out = StringIO()
    call_command(name, *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def rotate(settings: Any, folder: Path) -> str:
    """Point SIGNING_KEY_FILE at a new key, as an operator does, and return its kid."""
    new_file = folder / "new-key.pem"
    new_file.write_bytes(generate_private_key_pem())
    settings.SIGNING_KEY_FILE = str(new_file)
    settings.SIGNING_KEY = signing_key(str(new_file))
    return keys.jwk_thumbprint(keys.public_raw(settings.SIGNING_KEY))


def statements() -> list[dict[str, Any]]:
    return [json.loads(bytes(data)) for data in
            KeyStatement.objects.order_by("position").values_list("canonical_bytes", flat=True)]


def history(client: Client) -> list[dict[str, Any]]:
    body = client.get("/.well-known/receipt-keys.json").json()
    result: list[dict[str, Any]] = body["history"]
    return result


def compromise(producer: Producer) -> tuple[str, str]:
    """A receipt signed, then its key marked compromised: the old kid and the new."""
    producer.publish()
    old = SigningKey.objects.get(status=SigningKey.ACTIVE).kid
    run("compromisekey", *command_line(old, at="2026-01-01T00:00:00Z"))
    new = SigningKey.objects.get(status=SigningKey.ACTIVE).kid
    return old, new


def test_the_history_begins_with_the_active_keys_activation(client: Client, db: None) -> None:
    keyring.active_key()
    first = statements()[0]
    active = SigningKey.objects.get(status=SigningKey.ACTIVE)
    assert first["format"] == key_statement_v1.FORMAT == "key-status/v1"
    assert first["position"] == 0 and first["previous_hash"] == "0" * 64
    assert (first["kid"], first["status"], first["x"]) == (
        active.kid, "active", b64url(bytes(active.public_key))
    )
    chain = key_chain.check(history(client), anchor=active.kid)
    assert chain.problems == []


def test_a_rotation_is_stated_and_signed_by_the_new_key_and_the_old(
    client: Client, db: None, settings: Any, tmp_path: Path
) -> None:
    old = keyring.active_key().kid
    before = KeyStatement.objects.count()
    new = rotate(settings, tmp_path)
    run("signcheckpoint")
    made = statements()[before:]
    assert [(s["kid"], s["status"], s["signed_by"]) for s in made] == [
        (new, "active", [new, old]),
        (old, "retired", [new, old]),
    ]
    retired = SigningKey.objects.get(kid=old)
    assert made[1]["retired_at"] == key_statement_v1.timestamp(retired.retired_at)
    published = history(client)
    assert [item["hash"] for item in published[before:]] == [
        hashlib.sha256(canonical_bytes(s)).hexdigest() for s in made
    ]
    assert made[0]["previous_hash"] == published[before - 1]["hash"]
    assert key_chain.check(published, anchor=statements()[0]["kid"]).problems == []
    assert "The keys' history (" in run("checklog")


def test_a_rotation_without_the_outgoing_key_is_refused_and_changes_nothing(
    db: None, settings: Any, tmp_path: Path
) -> None:
    old = keyring.active_key()
    keyring._held.clear()  # a process started with the new key only
    keyring.forget()
    before = list(KeyStatement.objects.values_list("pk", flat=True))
    rotate(settings, tmp_path)
    with pytest.raises(CommandError, match="PREVIOUS_SIGNING_KEY_FILE"):
        run("signcheckpoint")
    assert list(KeyStatement.objects.values_list("pk", flat=True)) == before
    assert SigningKey.objects.get(status=SigningKey.ACTIVE).kid == old.kid
    settings.PREVIOUS_SIGNING_KEY = old.private  # PREVIOUS_SIGNING_KEY_FILE set
    run("signcheckpoint")
    assert SigningKey.objects.get(kid=old.kid).status == SigningKey.RETIRED
    assert statements()[-1]["signed_by"][1] == old.kid


def test_compromisekey_states_the_new_key_and_the_compromise(
    producer: Producer, client: Client
) -> None:
    before = KeyStatement.objects.count()
    old, new = compromise(producer)
    made = statements()[before:]
    assert [(s["kid"], s["status"], s["signed_by"]) for s in made] == [
        (new, "active", [new]),
        (old, "compromised", [new]),
    ]
    assert made[1]["compromised_at"] == "2026-01-01T00:00:00.000000Z"
    assert key_chain.check(history(client)).problems == []
    assert "The keys' history (" in run("checklog")


def test_a_new_key_that_its_predecessor_did_not_sign_over_to_is_not_believed() -> None:
    """An activation without the outgoing key's signature, and no compromise of that key
    after it: what a key of one's own added behind the site's back looks like."""
    first, second = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    made = [_statement(0, first, "active", [first]), ]
    made.append(_statement(1, second, "active", [second], previous=made[0]["hash"]))
    problems = key_chain.check(made).problems
    assert problems and "without the signature of the outgoing key" in problems[0]


def test_a_retired_key_made_active_again_is_not_believed() -> None:
    """A reactivation signed as an activation must be (by the key itself, then the active key):
    what someone holding the site's database role and the old key could append."""
    old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    made = [_statement(0, old, "active", [old])]
    made.append(_statement(1, new, "active", [new, old], previous=made[-1]["hash"]))
    made.append(_statement(2, old, "retired", [new, old], previous=made[-1]["hash"]))
    assert key_chain.check(made).problems == []
    made.append(_statement(3, old, "active", [old, new], previous=made[-1]["hash"]))
    problems = key_chain.check(made).problems
    old_kid = keys.jwk_thumbprint(keys.public_raw(old))
    assert problems and f"it makes the retired key {old_kid} active again" in problems[0]


def _statement(
    position: int, key: Ed25519PrivateKey, status: str, signers: list[Ed25519PrivateKey],
    previous: str = "0" * 64,
) -> dict[str, Any]:
    public = keys.public_raw(key)
    kids = [keys.jwk_thumbprint(keys.public_raw(signer)) for signer in signers]
    from datetime import UTC, datetime

    doc = key_statement_v1.document(
        position=position, kid=keys.jwk_thumbprint(public), x=b64url(public), status=status,
        at=datetime.now(UTC), retired_at=None, compromised_at=None, previous_hash=previous,
        made_by="site", signed_by=kids,
    )
    data = canonical_bytes(doc)
    return {
        "statement": base64.b64encode(data).decode(),
        "hash": hashlib.sha256(data).hexdigest(),
        "signatures": [
            {"kid": kid, "signature": base64.b64encode(signer.sign(data)).decode()}
            for kid, signer in zip(kids, signers, strict=True)
        ],
    }


# --- the database refuses what no statement records --------------------------------------


def snapshot() -> list[Any]:
    return [
        list(SigningKey.objects.order_by("pk").values_list(
            "kid", "public_key", "status", "retired_at", "compromised_at")),
        list(KeyStatement.objects.order_by("pk").values_list(
            "position", "kid", "status", "compromised_at", "statement_hash")),
    ]


def own_key_statement(status: str, kid: str, public: bytes, position: int, previous: str,
                      ) -> tuple[str, list[Any]]:
    """An INSERT of a statement as the site role could write it (signed by whom it likes)."""
    now = "2026-06-01 00:00:00"
    return (
        "INSERT INTO receipts_keystatement (position, kid, public_key, status, at, retired_at, "
        "compromised_at, previous_hash, statement_hash, canonical_bytes, signatures, made_by) "
        "VALUES (%s, %s, %s, %s, %s, NULL, NULL, %s, %s, %s, %s, 'site')",
        [position, kid, public, status, now, previous, "f" * 64, b"{}", "[]"],
    )


ATTACKS = [
    "revive the compromised key",
    "revive it, compromised_at kept",
    "move compromised_at",
    "change a public key",
    "change a kid",
    "retire the active key",
    "delete a key",
    "insert a key of ones own",
    "state the compromised key active again",
    "a statement out of the chain",
    "change a statement",
    "delete a statement",
]


def attack(name: str, old: str, new: str) -> tuple[str, Any]:
    newest = KeyStatement.objects.order_by("-position").first()
    assert newest is not None
    own = Ed25519PrivateKey.generate()
    own_public = keys.public_raw(own)
    old_public = bytes(SigningKey.objects.get(kid=old).public_key)
    return {
        "revive the compromised key": (
            "UPDATE receipts_signingkey SET status = 'active', compromised_at = NULL, "
            "retired_at = NULL WHERE kid = %s", [old]),
        "revive it, compromised_at kept": (
            "UPDATE receipts_signingkey SET status = 'active' WHERE kid = %s", [old]),
        "move compromised_at": (
            "UPDATE receipts_signingkey SET compromised_at = retired_at WHERE kid = %s", [old]),
        "change a public key": (
            "UPDATE receipts_signingkey SET public_key = %s WHERE kid = %s", [own_public, new]),
        "change a kid": ("UPDATE receipts_signingkey SET kid = %s WHERE kid = %s",
                         [keys.jwk_thumbprint(own_public), new]),
        "retire the active key": (
            "UPDATE receipts_signingkey SET status = 'retired', retired_at = created_at "
            "WHERE kid = %s", [new]),
        "delete a key": ("DELETE FROM receipts_signingkey WHERE kid = %s", [new]),
        "insert a key of ones own": (
            "INSERT INTO receipts_signingkey (kid, public_key, status, created_at) "
            "VALUES (%s, %s, 'active', created_at_placeholder)".replace(
                "created_at_placeholder", "'2026-06-01 00:00:00'"),
            [keys.jwk_thumbprint(own_public), own_public]),
        "state the compromised key active again": own_key_statement(
            "active", old, old_public, newest.position + 1, newest.statement_hash),
        "a statement out of the chain": own_key_statement(
            "active", keys.jwk_thumbprint(own_public), own_public, newest.position + 1,
            "e" * 64),
        "change a statement": (
            "UPDATE receipts_keystatement SET status = 'active' WHERE kid = %s", [old]),
        "delete a statement": ("DELETE FROM receipts_keystatement WHERE kid = %s", [old]),
    }[name]


@pytest.mark.parametrize("name", ATTACKS)
def test_the_database_refuses_a_key_change_no_statement_records(
    producer: Producer, name: str
) -> None:
    old, new = compromise(producer)
    before = snapshot()
    statement, params = attack(name, old, new)
    with pytest.raises(Error), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)
    assert snapshot() == before


def test_a_key_of_ones_own_stated_behind_the_sites_back_fails_checklog(
    producer: Producer, client: Client
) -> None:
    """The database cannot check a signature: a statement of one's own, chained and signed by
    one's own key, is let in with its key row, and `checklog` and the keys document's reader
    find it out (the active key did not sign over to it)."""
    producer.publish()
    newest = KeyStatement.objects.order_by("-position").first()
    assert newest is not None
    own = Ed25519PrivateKey.generate()
    item = _statement(newest.position + 1, own, "active", [own], previous=newest.statement_hash)
    data = base64.b64decode(item["statement"])
    doc = json.loads(data)
    public = keys.public_raw(own)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO receipts_keystatement (position, kid, public_key, status, at, "
            "retired_at, compromised_at, previous_hash, statement_hash, canonical_bytes, "
            "signatures, made_by) VALUES (%s, %s, %s, 'active', %s, NULL, NULL, %s, %s, %s, %s, "
            "'site')",
            [doc["position"], doc["kid"], public, "2026-06-01 00:00:00", doc["previous_hash"],
             item["hash"], data, json.dumps(item["signatures"])],
        )
        cursor.execute(
            "INSERT INTO receipts_signingkey (kid, public_key, status, created_at) "
            "VALUES (%s, %s, 'active', '2026-06-01 00:00:00')", [doc["kid"], public],
        )
    problems = key_chain.check(history(client)).problems
    assert problems and "without the signature of the outgoing key" in problems[0]
    with pytest.raises(CommandError, match="without the signature of the outgoing key"):
        run("checklog")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="database roles are PostgreSQL's")
@pytest.mark.parametrize("name", ATTACKS)
def test_the_site_role_is_refused_each_the_same(
    producer: Producer, settings: Any, name: str
) -> None:
    from tests.db.test_site_role import acting_as, migrate_granting, new_role

    old, new = compromise(producer)
    role = new_role()
    migrate_granting(settings, role)
    before = snapshot()
    statement, params = attack(name, old, new)
    with pytest.raises(Error), acting_as(role) as cursor:
        cursor.execute(statement, params)
    assert snapshot() == before


# --- migration 0016 states the keys it finds ---------------------------------------------

migration = importlib.import_module("receiptsite.receipts.migrations.0016_key_history")


def as_an_older_release_left_them() -> Any:
    """The keys as a release before the history left them: the guards of 0016 dropped (inside
    the test's transaction), no statement, a retired key and a compromised one besides the
    active one. Returns a schema editor for the migration's functions."""
    cursor = connection.cursor()
    editor = SimpleNamespace(
        connection=connection, execute=lambda sql, params=None: cursor.execute(sql)
    )
    migration.remove(apps, editor)
    KeyStatement.objects.all().delete()
    now = timezone.now()
    for status in (SigningKey.RETIRED, SigningKey.COMPROMISED):
        public = keys.public_raw(Ed25519PrivateKey.generate())
        SigningKey.objects.create(
            kid=keys.jwk_thumbprint(public), public_key=public, status=status,
            retired_at=now, compromised_at=now if status == SigningKey.COMPROMISED else None,
        )
    return editor


def test_the_migration_states_the_keys_it_finds_its_own_first(
    db: None, settings: Any, tmp_path: Path
) -> None:
    active = keyring.active_key()
    editor = as_an_older_release_left_them()
    assert "no statement of the history vouches" in key_history.check()[1][0]
    migration.state_existing(apps, editor)
    migration.install(apps, editor)
    made = statements()
    assert [(s["kid"], s["made_by"], s["signed_by"]) for s in made][0] == (
        active.kid, "migration", [active.kid]
    )
    assert [s["status"] for s in made] == ["active", "retired", "compromised"]
    assert key_history.check() == (3, [])
    # The site's statements follow, and the guards are back.
    rotate(settings, tmp_path)
    run("signcheckpoint")
    assert key_history.check() == (5, [])
    with pytest.raises(Error), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE receipts_signingkey SET status = 'active' "
                       "WHERE status = 'compromised'")


def test_the_migration_refuses_to_state_the_keys_without_a_key(
    db: None, settings: Any
) -> None:
    keyring.active_key()
    editor = as_an_older_release_left_them()
    settings.SIGNING_KEY = None
    with pytest.raises(RuntimeError, match="set SIGNING_KEY_FILE"):
        migration.state_existing(apps, editor)
    assert KeyStatement.objects.count() == 0

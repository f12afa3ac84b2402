"""The management commands: tenants, API keys, signing keys, signing the log and the log
monitor."""

from __future__ import annotations

import base64
import hashlib
import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from receiptsite.config import signing_key
from receiptsite.integrity import note
from receiptsite.integrity.keys import generate_private_key_pem, load_private_key_pem
from receiptsite.ledger import keyring, log
from receiptsite.receipts.models import ApiKey, Receipt, SignedCheckpoint, SigningKey, Tenant
from receiptsite.receipts.services import receipt_ingest
from tests.conftest import Producer, command_line, example_body, remember_a_tree_not_stored, tamper

pytestmark = pytest.mark.db

KEY_RE = re.compile(r"rk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")


def run(*args: Any, **options: Any) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO(), **options)
    return out.getvalue()


def new_key(slug: str = "acme") -> str:
    output = run("createapikey", slug)
    assert output.endswith("\n")
    last = output.splitlines()[-1]
    assert KEY_RE.fullmatch(last), output
    return last


def status_with(key: str) -> int:
    response = Client().get("/api/receipts", headers={"Authorization": f"Bearer {key}"})
    return int(response.status_code)


# --- createtenant ------------------------------------------------------------------------------


def test_createtenant_creates_a_tenant(db: None) -> None:
    output = run("createtenant", "initech", name="  Initech Ltd ")
    tenant = Tenant.objects.get(slug="initech")
    assert tenant.name == "Initech Ltd"
    assert "initech" in output


def test_createtenant_takes_the_name_as_an_option(db: None) -> None:
    run("createtenant", "globex", "--name", "Globex Corporation")
    assert Tenant.objects.get(slug="globex").name == "Globex Corporation"


def test_createtenant_refuses_a_duplicate_slug(tenant: Tenant) -> None:
    with pytest.raises(CommandError, match="exists"):
        run("createtenant", "acme", name="Another Acme")
    assert Tenant.objects.get(slug="acme").name == "Acme Corp"
    assert Tenant.objects.count() == 1


@pytest.mark.parametrize("slug", ["has space", "a/b", "ünï", "", "acme!", "a.b", "x" * 51])
def test_createtenant_refuses_a_bad_slug(db: None, slug: str) -> None:
    with pytest.raises(CommandError):
        run("createtenant", slug, name="Bad")
    assert Tenant.objects.count() == 0


@pytest.mark.parametrize("name", ["", "   ", "n" * 201])
def test_createtenant_refuses_a_bad_name(db: None, name: str) -> None:
    with pytest.raises(CommandError):
        run("createtenant", "okay", name=name)
    assert Tenant.objects.count() == 0


def test_createtenant_requires_a_name(db: None) -> None:
    with pytest.raises(CommandError):
        run("createtenant", "okay")
    assert Tenant.objects.count() == 0


# --- createapikey ------------------------------------------------------------------------------


def test_createapikey_prints_the_key_alone_on_the_last_line(tenant: Tenant) -> None:
    output = run("createapikey", "acme")
    lines = output.splitlines()
    assert len(lines) >= 2
    key = lines[-1]
    assert KEY_RE.fullmatch(key)
    assert key == key.strip()
    # The secret is shown once: only on that line.
    assert output.count(key) == 1
    assert key[len("rk_") + 13 :] not in "\n".join(lines[:-1])


def test_the_new_key_authenticates(tenant: Tenant) -> None:
    key = new_key()
    assert status_with(key) == 200
    response = Producer(Client(), key).post(
        {"workflow_id": "wf-1", "phase": "start", "subject": {"type": "tool", "name": "t"}}
    )
    assert response.status_code == 201
    assert Receipt.objects.get().tenant == tenant


def test_only_the_prefix_and_a_sha256_digest_are_stored(tenant: Tenant) -> None:
    key = new_key()
    row = ApiKey.objects.get()
    assert row.tenant == tenant
    assert row.prefix == key[: ApiKey.PREFIX_LENGTH]
    assert row.digest == hashlib.sha256(key.encode()).hexdigest()
    secret = key[ApiKey.PREFIX_LENGTH + 1 :]
    for column, value in ApiKey.objects.filter(pk=row.pk).values().get().items():
        text = str(value)
        assert key not in text, column
        assert secret not in text, column


def test_each_key_is_new(tenant: Tenant) -> None:
    keys = {new_key() for _ in range(3)}
    assert len(keys) == 3
    assert len({k[: ApiKey.PREFIX_LENGTH] for k in keys}) == 3
    assert ApiKey.objects.count() == 3


def test_createapikey_refuses_an_unknown_tenant(db: None) -> None:
    with pytest.raises(CommandError, match="nope"):
        run("createapikey", "nope")
    assert ApiKey.objects.count() == 0


# --- revokeapikey and rotation --------------------------------------------------------------


def test_a_revoked_key_gets_a_401(tenant: Tenant) -> None:
    key = new_key()
    assert status_with(key) == 200
    output = run("revokeapikey", key[: ApiKey.PREFIX_LENGTH])
    assert key[: ApiKey.PREFIX_LENGTH] in output
    assert status_with(key) == 401
    assert ApiKey.objects.get().revoked_at is not None


def test_revoking_twice_keeps_the_first_revocation(tenant: Tenant) -> None:
    key = new_key()
    run("revokeapikey", key[: ApiKey.PREFIX_LENGTH])
    first = ApiKey.objects.get().revoked_at
    run("revokeapikey", key[: ApiKey.PREFIX_LENGTH])
    assert ApiKey.objects.get().revoked_at == first
    assert status_with(key) == 401


@pytest.mark.parametrize("prefix", ["rk_000000000000", "nope", "", "rk_"])
def test_revokeapikey_refuses_an_unknown_prefix(tenant: Tenant, prefix: str) -> None:
    key = new_key()
    with pytest.raises(CommandError):
        run("revokeapikey", prefix)
    assert ApiKey.objects.get().revoked_at is None
    assert status_with(key) == 200


def test_receipts_of_a_revoked_key_stay(tenant: Tenant) -> None:
    key = new_key()
    producer = Producer(Client(), key)
    answer = producer.post(
        {"workflow_id": "wf-1", "phase": "start", "subject": {"type": "tool", "name": "t"}}
    ).json()
    run("revokeapikey", key[: ApiKey.PREFIX_LENGTH])
    assert Receipt.objects.filter(public_id=answer["id"]).exists()
    assert Client().get(f"/api/receipt/{answer['id']}/verify").json()["status"] == "valid"


def test_a_tenant_with_two_active_keys_can_use_both(tenant: Tenant) -> None:
    old, new = new_key(), new_key()
    assert status_with(old) == 200
    assert status_with(new) == 200
    run("revokeapikey", old[: ApiKey.PREFIX_LENGTH])
    assert status_with(old) == 401
    assert status_with(new) == 200


def test_revoking_one_tenants_key_leaves_the_others(tenant: Tenant, other_tenant: Tenant) -> None:
    mine, theirs = new_key("acme"), new_key("globex")
    run("revokeapikey", mine[: ApiKey.PREFIX_LENGTH])
    assert status_with(mine) == 401
    assert status_with(theirs) == 200


# --- signingkeys ------------------------------------------------------------------------------


def rotate(settings: Any, tmp_path: Path) -> str:
    """Point SIGNING_KEY_FILE at a new key and restart (settings load it); its kid."""
    new_file = tmp_path / "new-key.pem"
    new_file.write_bytes(generate_private_key_pem())
    settings.SIGNING_KEY_FILE = str(new_file)
    settings.SIGNING_KEY = signing_key(str(new_file))
    return keyring.configured().kid


def test_signingkeys_lists_the_active_key(db: None) -> None:
    output = run("signingkeys")
    kid = keyring.configured().kid
    [line] = [line for line in output.splitlines() if kid in line]
    assert "active" in line
    assert SigningKey.objects.get(kid=kid).status == SigningKey.ACTIVE


def test_signingkeys_lists_a_retired_key_after_rotation(
    db: None, settings: Any, tmp_path: Path
) -> None:
    old = keyring.configured().kid
    new = rotate(settings, tmp_path)
    assert new != old
    # Listing records nothing: until a write path runs, the old key is the recorded one.
    assert new not in run("signingkeys")
    assert f"{new}." in run("signcheckpoint")
    lines = run("signingkeys").splitlines()
    assert any(new in line and "active" in line for line in lines)
    assert any(old in line and "retired" in line for line in lines)


def test_compromisekey_will_not_take_the_compromised_key_as_the_new_one(
    db: None, settings: Any, tmp_path: Path
) -> None:
    kid = keyring.configured().kid
    with pytest.raises(CommandError, match="the compromised key itself"):
        run("compromisekey", *command_line(kid, at="2026-01-01T00:00:00Z",
                                           new_key_file=settings.SIGNING_KEY_FILE))
    assert SigningKey.objects.get(kid=kid).status == SigningKey.ACTIVE


def test_compromising_the_old_key_first_signs_with_the_new_one(
    producer: Producer, client: Client, settings: Any, tmp_path: Path
) -> None:
    old = keyring.configured().kid
    publish(producer, 2)
    new = rotate(settings, tmp_path)  # restarted, but no write path has run yet
    assert "already names the new key" in run(
        "compromisekey",
        *command_line(old, at=SigningKey.objects.get(kid=old).created_at.isoformat()),
    )
    assert SigningKey.objects.get(kid=old).status == SigningKey.COMPROMISED
    assert SigningKey.objects.get(kid=new).status == SigningKey.ACTIVE
    latest = SignedCheckpoint.objects.order_by("-tree_size", "-id").first()
    assert latest is not None and latest.tree_size == 2
    assert latest.signing_key.kid == new
    assert "OK: 2 leaves" in run("checklog")


# --- signcheckpoint -----------------------------------------------------------------------------


def test_signcheckpoint_is_a_no_op_when_the_checkpoint_is_current(producer: Producer) -> None:
    publish(producer, 2)
    before = SignedCheckpoint.objects.count()
    output = run("signcheckpoint")
    assert "tree of 2 leaves" in output and keyring.configured().kid in output
    assert SignedCheckpoint.objects.count() == before


def test_signcheckpoint_refuses_a_rolled_back_log(producer: Producer, settings: Any) -> None:
    publish(producer, 1)
    remember_a_tree_not_stored(settings, size=5)
    with pytest.raises(CommandError, match="5 leaves"):
        run("signcheckpoint")


# --- checklog ---------------------------------------------------------------------------------


def publish(producer: Producer, count: int) -> list[str]:
    return [producer.publish(idempotency_key=None)["id"] for _ in range(count)]


def checkpoint(client: Client) -> str:
    response = client.get("/api/log/checkpoint")
    assert response.status_code == 200
    return response.content.decode()


def test_checklog_passes_on_an_empty_log(db: None) -> None:
    assert run("checklog").startswith("OK: 0 leaves")


def test_checklog_passes_on_a_healthy_log(producer: Producer) -> None:
    publish(producer, 5)
    output = run("checklog")
    assert output.startswith("OK: 5 leaves recomputed")


def test_checklog_fails_while_the_latest_checkpoint_lags_the_log(
    producer: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(producer, 2)
    monkeypatch.setattr(log, "sign_appended", lambda current: None)  # a tree left unsigned
    receipt_ingest(api_key=ApiKey.objects.get(), payload=example_body(idempotency_key="late"))
    monkeypatch.undo()
    with pytest.raises(CommandError, match="latest signed checkpoint has 2 leaves, the log 3"):
        run("checklog")
    run("signcheckpoint")
    assert run("checklog").startswith("OK: 3 leaves")


def test_checklog_fails_when_a_receipts_bytes_were_changed(producer: Producer) -> None:
    ids = publish(producer, 4)
    receipt = Receipt.objects.get(public_id=ids[2])
    forged = receipt.raw_bytes().replace(b'"12 findings"', b'"13 findings"')
    assert forged != receipt.raw_bytes()
    tamper(ids[2], canonical_bytes=forged)
    with pytest.raises(CommandError, match="leaf 2"):
        run("checklog")


def test_checklog_fails_when_the_first_receipt_was_changed(producer: Producer) -> None:
    ids = publish(producer, 3)
    tamper(ids[0], canonical_bytes=b"{}")
    with pytest.raises(CommandError, match="leaf 0"):
        run("checklog")


def write(tmp_path: Path, text: str, name: str = "checkpoint.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_checklog_against_an_earlier_checkpoint_passes(
    producer: Producer, client: Client, tmp_path: Path
) -> None:
    publish(producer, 3)
    saved = write(tmp_path, checkpoint(client))
    publish(producer, 4)
    output = run("checklog", against=str(saved))
    assert f"Consistent with the checkpoint of size 3 in {saved}" in output
    assert "OK: 7 leaves" in output


@pytest.mark.parametrize("earlier", [0, 1, 2, 5])
def test_checklog_against_checkpoints_of_every_size_passes(
    producer: Producer, client: Client, tmp_path: Path, earlier: int
) -> None:
    publish(producer, earlier)
    saved = write(tmp_path, checkpoint(client))
    publish(producer, 3)
    output = run("checklog", "--against", str(saved))
    assert "OK: " in output


def test_checklog_against_todays_checkpoint_passes(
    producer: Producer, client: Client, tmp_path: Path
) -> None:
    publish(producer, 3)
    saved = write(tmp_path, checkpoint(client))
    assert "size 3" in run("checklog", against=str(saved))


def test_checklog_against_a_checkpoint_with_an_altered_root_fails(
    producer: Producer, client: Client, tmp_path: Path
) -> None:
    publish(producer, 3)
    text = checkpoint(client)
    origin, size, root, rest = text.split("\n", 3)
    altered = bytearray(base64.b64decode(root))
    altered[0] ^= 1
    saved = write(tmp_path, "\n".join(
        [origin, size, base64.b64encode(bytes(altered)).decode(), rest]
    ))
    publish(producer, 2)
    with pytest.raises(CommandError, match="not a checkpoint signed"):
        run("checklog", against=str(saved))


def sign_with(private_pem: bytes, body: str, name: str) -> str:
    return note.sign_note(body, name, load_private_key_pem(private_pem))


def test_checklog_against_a_site_signed_checkpoint_of_another_tree_fails(
    producer: Producer, client: Client, tmp_path: Path, settings: Any
) -> None:
    """A checkpoint the site's own key signed, for a tree the log does not extend (a fork)."""
    publish(producer, 3)
    origin, size, _ = note.parse_checkpoint(checkpoint(client).split("\n\n")[0] + "\n")
    body = note.checkpoint_body(origin, size, hashlib.sha256(b"another tree").digest())
    forged = sign_with(Path(settings.SIGNING_KEY_FILE).read_bytes(), body, origin)
    saved = write(tmp_path, forged)
    publish(producer, 2)
    with pytest.raises(CommandError, match="NOT consistent"):
        run("checklog", against=str(saved))


def test_checklog_against_a_checkpoint_signed_by_an_unknown_key_fails(
    producer: Producer, client: Client, tmp_path: Path
) -> None:
    publish(producer, 3)
    genuine = checkpoint(client)
    body = genuine.split("\n\n")[0] + "\n"
    origin = body.split("\n")[0]
    saved = write(tmp_path, sign_with(generate_private_key_pem(), body, origin))
    with pytest.raises(CommandError, match="not a checkpoint signed"):
        run("checklog", against=str(saved))


def test_checklog_against_a_checkpoint_larger_than_the_log_fails(
    producer: Producer, client: Client, tmp_path: Path, settings: Any
) -> None:
    publish(producer, 2)
    origin, _, root = note.parse_checkpoint(checkpoint(client).split("\n\n")[0] + "\n")
    body = note.checkpoint_body(origin, 9, root)
    saved = write(tmp_path, sign_with(Path(settings.SIGNING_KEY_FILE).read_bytes(), body, origin))
    with pytest.raises(CommandError, match="only 2"):
        run("checklog", against=str(saved))


@pytest.mark.parametrize("text", ["", "not a checkpoint\n", "a\n1\nAAAA\n\n— a AAAA\n"])
def test_checklog_against_a_malformed_file_fails(
    producer: Producer, tmp_path: Path, text: str
) -> None:
    publish(producer, 1)
    with pytest.raises(CommandError):
        run("checklog", against=str(write(tmp_path, text)))


def test_checklog_against_a_missing_file_fails(producer: Producer, tmp_path: Path) -> None:
    publish(producer, 1)
    with pytest.raises(CommandError, match="cannot read"):
        run("checklog", against=str(tmp_path / "missing.txt"))


# --- createauditor ------------------------------------------------------------------------------


def test_createauditor_makes_a_staff_user_in_the_auditors_group(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.contrib.auth.models import User

    monkeypatch.setenv("DJANGO_AUDITOR_PASSWORD", "a-long-test-password-1")
    out = run("createauditor", "ada", "--email", "ada@example.org", "--noinput")
    assert "ada was created as an auditor" in out
    ada = User.objects.get(username="ada")
    assert ada.is_staff and not ada.is_superuser and ada.email == "ada@example.org"
    assert list(ada.groups.values_list("name", flat=True)) == ["Auditors"]
    assert ada.check_password("a-long-test-password-1")
    assert ada.has_perm("receipts.add_reviewdecision") and ada.has_perm("audit.view_auditentry")


def test_createauditor_makes_an_existing_user_an_auditor_and_keeps_the_password(
    db: None,
) -> None:
    from django.contrib.auth.models import User

    User.objects.create_user("bob", password="bobs-own-password-2")
    assert "bob is now an auditor" in run("createauditor", "bob", "--noinput")
    bob = User.objects.get(username="bob")
    assert bob.is_staff and bob.check_password("bobs-own-password-2")
    assert bob.groups.filter(name="Auditors").exists()


@pytest.mark.parametrize(
    ("username", "password", "words"),
    [
        ("ada", "", "DJANGO_AUDITOR_PASSWORD"),
        ("ada", "short", "too short"),
        ("ada", "ada", "too short"),
        ("not a name!", "a-long-test-password-1", "USERNAME"),
    ],
)
def test_createauditor_refuses_bad_input_and_changes_nothing(
    db: None, monkeypatch: pytest.MonkeyPatch, username: str, password: str, words: str
) -> None:
    from django.contrib.auth.models import User

    monkeypatch.setenv("DJANGO_AUDITOR_PASSWORD", password)
    with pytest.raises(CommandError, match=words):
        run("createauditor", username, "--noinput")
    assert not User.objects.exists()

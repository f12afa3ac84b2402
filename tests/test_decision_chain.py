"""The auditors' record cannot be quietly rewritten: each review decision is signed (RFC 8785
bytes, Ed25519 by the site's active key) and chained to the one before it; `checkdecisions`,
the admin and the CSV export expose a decision changed, removed, reordered or slipped in.

The first part runs in the suite's database; the second drives a real gunicorn (tests/livesite.py)
over HTTP, tampering with its database through the documented maintenance path only (SQLite:
dropping and recreating the triggers; PostgreSQL: `session_replication_role = replica`).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import importlib
import io
import json
import re
import sqlite3
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from http.cookiejar import CookieJar
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.db import Error, connection, transaction
from django.test import Client
from django.utils import timezone

from receiptsite.integrity import keys
from receiptsite.integrity.canonical import canonical_bytes, is_canonical
from receiptsite.ledger import keyring
from receiptsite.receipts import guards_v1
from receiptsite.receipts.models import DecisionLink, Receipt, ReviewDecision, SigningKey
from receiptsite.review import chain as decisions
from receiptsite.review.services import decision_record
from tests.conftest import Producer, example_body
from tests.livesite import PYTHON, REPO, LiveSite, is_postgres, suite_database_url

migration = importlib.import_module("receiptsite.receipts.migrations.0011_decision_chain")

GUARDED = ("receipts_reviewdecision", "receipts_decisionlink")


@pytest.fixture
def receipt(producer: Producer) -> Receipt:
    return Receipt.objects.get(public_id=producer.publish()["id"])


@pytest.fixture
def auditor(db: None) -> User:
    user = User.objects.create_user("ada", password="pw-for-tests-only", is_staff=True)
    user.groups.add(Group.objects.get(name="Auditors"))
    return user


@pytest.fixture
def three(receipt: Receipt, auditor: User) -> list[ReviewDecision]:
    """Three decisions: accepted, needs follow-up, and a correction of the second."""
    first = decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")
    second = decision_record(
        receipt=receipt,
        reviewer=auditor,
        conclusion="needs_follow_up",
        follow_up="Ask about the e-mail",
    )
    third = decision_record(
        receipt=receipt, reviewer=auditor, conclusion="accepted", supersedes=second
    )
    return [first, second, third]


@contextmanager
def guard_lifted() -> Iterator[Any]:
    """The documented maintenance path, in the test's own transaction (rolled back after)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET session_replication_role = replica")
        else:
            for table in GUARDED:
                cursor.execute(f"DROP TRIGGER {table}_no_update")
                cursor.execute(f"DROP TRIGGER {table}_no_delete")
        try:
            yield cursor
        finally:
            if connection.vendor == "postgresql":
                cursor.execute("SET session_replication_role = DEFAULT")


@contextmanager
def removed(cursor: Any, table: str, pk: int) -> Iterator[None]:
    """Delete a row, and put it back afterwards: the suite's database checks its foreign keys
    when the test ends (the ones to a removed decision would fail)."""
    cursor.execute(f"SELECT * FROM {table} WHERE id = %s", [pk])
    row = cursor.fetchone()
    cursor.execute(f"DELETE FROM {table} WHERE id = %s", [pk])
    try:
        yield
    finally:
        cursor.execute(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(row))})", row)


def check_fails(*, naming: str) -> str:
    """checkdecisions exits 1, and its first finding is the one expected."""
    with pytest.raises(CommandError) as failed:
        call_command("checkdecisions")
    assert failed.value.returncode == 1
    first = str(failed.value).splitlines()[1]
    assert first.startswith(f"- {naming}"), str(failed.value)
    return str(failed.value)


def check_passes() -> str:
    out = io.StringIO()
    call_command("checkdecisions", stdout=out)
    assert out.getvalue().startswith("OK: The record of review decisions checks out")
    return out.getvalue()


# --- the record, in the suite's database ------------------------------------------------------


def test_each_decision_is_signed_and_chained_to_the_one_before(
    three: list[ReviewDecision], receipt: Receipt, auditor: User
) -> None:
    links = list(DecisionLink.objects.order_by("position"))
    assert [link.position for link in links] == [0, 1, 2]
    assert [link.decision_id for link in links] == [d.pk for d in three]
    assert links[0].previous_hash == "0" * 64 and links[0].previous_decision_id is None
    key = SigningKey.objects.get(status=SigningKey.ACTIVE)
    for before, link in zip([None, *links], links, strict=False):
        data = bytes(link.canonical_bytes)
        assert is_canonical(data)
        assert hashlib.sha256(data).hexdigest() == link.decision_hash
        assert keys.verify_signature(bytes(key.public_key), data, bytes(link.signature))
        assert link.signing_key == key and link.chained_by == "site"
        if before is not None:
            assert link.previous_hash == before.decision_hash
            assert link.previous_decision_id == before.decision_id
    second = three[1]
    assert json.loads(bytes(links[1].canonical_bytes)) == {
        "format": "review-decision/v1",
        "decision_id": second.pk,
        "receipt_id": str(receipt.public_id),
        "reviewer_id": auditor.pk,
        "reviewed_at": second.reviewed_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "conclusion": "needs_follow_up",
        "exception_note": "",
        "follow_up": "Ask about the e-mail",
        "output_hash": receipt.output_hash,
        "supersedes": None,
        "previous_decision_id": three[0].pk,
        "previous_hash": links[0].decision_hash,
        "chained_at": links[1].chained_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "chained_by": "site",
    }
    assert json.loads(bytes(links[2].canonical_bytes))["supersedes"] == second.pk


def test_a_sound_record_checks_out(three: list[ReviewDecision]) -> None:
    out = check_passes()
    assert (
        f"3 decisions, each signed and chained to the one before; the head is decision "
        f"hash {DecisionLink.objects.get(position=2).decision_hash} at position 2" in out
    )


def test_an_empty_record_checks_out(db: None) -> None:
    assert "it holds no decision yet" in check_passes()


def test_a_changed_conclusion_is_named(three: list[ReviewDecision]) -> None:
    with guard_lifted() as cursor:
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'accepted' WHERE id = %s",
            [three[1].pk],
        )
    message = check_fails(naming=f"decision {three[1].pk} (position 1) was changed")
    assert 'conclusion was "needs_follow_up", is "accepted"' in message
    assert f"decision {three[0].pk} " not in message and f"decision {three[2].pk} " not in message


def test_a_rewritten_link_is_named_even_with_a_fresh_hash(three: list[ReviewDecision]) -> None:
    # Changing the decision and recomputing its link's bytes and hash is not enough: the
    # signature is the site's, and the next link names the old hash.
    link = DecisionLink.objects.get(decision=three[1])
    doc = json.loads(bytes(link.canonical_bytes)) | {"conclusion": "accepted"}
    data = canonical_bytes(doc)
    with guard_lifted() as cursor:
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'accepted' WHERE id = %s",
            [three[1].pk],
        )
        cursor.execute(
            "UPDATE receipts_decisionlink SET canonical_bytes = %s, "
            "decision_hash = %s WHERE id = %s",
            [data, hashlib.sha256(data).hexdigest(), link.pk],
        )
    check_fails(
        naming=f"decision {three[1].pk} (position 1) was changed: its link's hash or "
        "signature does not verify"
    )


def test_a_removed_decision_is_named(three: list[ReviewDecision]) -> None:
    with guard_lifted() as cursor, removed(cursor, "receipts_reviewdecision", three[1].pk):
        check_fails(naming=f"decision {three[1].pk} (position 1) was removed")


def test_a_decision_removed_with_its_link_is_named_by_the_next(
    three: list[ReviewDecision],
) -> None:
    link = DecisionLink.objects.get(decision=three[1]).pk
    with (
        guard_lifted() as cursor,
        removed(cursor, "receipts_decisionlink", link),
        removed(cursor, "receipts_reviewdecision", three[1].pk),
    ):
        message = check_fails(
            naming=f"decision {three[2].pk} (position 2) follows a removed "
            f"decision: it was signed after decision {three[1].pk}"
        )
    assert len(message.splitlines()) == 2  # one finding: the rest of the chain holds


def test_two_swapped_decisions_are_named(three: list[ReviewDecision]) -> None:
    # Swap the places of the first two in the record.
    first, second = (DecisionLink.objects.get(decision=d) for d in three[:2])
    with guard_lifted() as cursor:
        cursor.execute("UPDATE receipts_decisionlink SET position = 99 WHERE id = %s", [first.pk])
        cursor.execute("UPDATE receipts_decisionlink SET position = 0 WHERE id = %s", [second.pk])
        cursor.execute("UPDATE receipts_decisionlink SET position = 1 WHERE id = %s", [first.pk])
    check_fails(
        naming=f"decision {three[1].pk} (position 0) was reordered: it was signed after "
        f"decision {three[0].pk}, and now follows nothing"
    )


def test_two_decisions_with_swapped_contents_are_named(three: list[ReviewDecision]) -> None:
    with guard_lifted() as cursor:
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'needs_follow_up', "
            "follow_up = 'Ask about the e-mail' WHERE id = %s",
            [three[0].pk],
        )
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'accepted', "
            "follow_up = '' WHERE id = %s",
            [three[1].pk],
        )
    message = check_fails(naming=f"decision {three[0].pk} (position 0) was changed")
    assert f"- decision {three[1].pk} (position 1) was changed" in message


def test_a_decision_slipped_in_behind_the_site_is_named(
    three: list[ReviewDecision], receipt: Receipt, auditor: User
) -> None:
    # The site role may INSERT into the table: a row that skips decision_record has no link.
    slipped = ReviewDecision.objects.create(
        receipt=receipt, reviewer=auditor, conclusion="accepted", output_hash="0" * 64
    )
    check_fails(naming=f"decision {slipped.pk} is in no link of the record")


def test_a_cut_off_end_is_caught_against_a_noted_head(three: list[ReviewDecision]) -> None:
    head = DecisionLink.objects.get(position=2).decision_hash
    call_command("checkdecisions", "--head", head, stdout=io.StringIO())
    with guard_lifted() as cursor:
        cursor.execute("DELETE FROM receipts_decisionlink WHERE decision_id = %s", [three[2].pk])
        cursor.execute("DELETE FROM receipts_reviewdecision WHERE id = %s", [three[2].pk])
    check_passes()  # a shorter chain is a chain: only a head kept elsewhere shows the cut
    check_fails_with = pytest.raises(CommandError, match=f"no decision with the hash {head}")
    with check_fails_with:
        call_command("checkdecisions", "--head", head)


def test_the_database_refuses_to_change_or_remove_a_link(three: list[ReviewDecision]) -> None:
    statements = [
        "UPDATE receipts_decisionlink SET decision_hash = 'forged'",
        "DELETE FROM receipts_decisionlink",
    ]
    if connection.vendor == "postgresql":
        statements.append("TRUNCATE receipts_decisionlink")
    else:
        statements += [
            "INSERT OR REPLACE INTO receipts_decisionlink SELECT * FROM receipts_decisionlink "
            "WHERE position = 0",
            "UPDATE OR REPLACE receipts_decisionlink SET position = 0",
        ]
    for sql in statements:
        with (
            pytest.raises(Error, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            if sql.startswith("TRUNCATE"):
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute(sql)
    assert DecisionLink.objects.count() == 3
    check_passes()


def test_the_replace_trigger_knows_every_unique_key_of_the_links(db: None) -> None:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, migration.TABLE)
    found = {
        frozenset(c["columns"]) for c in constraints.values() if c["unique"] or c["primary_key"]
    }
    assert found == {frozenset(k) for k in migration.UNIQUE_KEYS}


def test_a_second_link_at_one_place_is_refused(three: list[ReviewDecision]) -> None:
    # The invariant that keeps the chain from forking, as the database holds it.
    last = DecisionLink.objects.get(position=2)
    fork = DecisionLink(
        position=2,
        decision=three[0],
        previous_hash=last.previous_hash,
        canonical_bytes=b"{}",
        decision_hash="f" * 64,
        signature=b"",
        signing_key=last.signing_key,
    )
    with pytest.raises(Error), transaction.atomic():
        fork.save(force_insert=True)


def test_a_decision_signed_by_a_retired_key_still_verifies(
    three: list[ReviewDecision], receipt: Receipt, auditor: User, settings: Any
) -> None:
    old = SigningKey.objects.get(status=SigningKey.ACTIVE)
    settings.SIGNING_KEY = Ed25519PrivateKey.generate()
    keyring.forget()
    later = decision_record(receipt=receipt, reviewer=auditor, conclusion="rejected")
    old.refresh_from_db()
    assert old.status == SigningKey.RETIRED
    assert DecisionLink.objects.get(decision=later).signing_key != old
    assert "4 decisions" in check_passes()


def test_decisions_by_a_key_compromised_later_verify_once_a_good_key_vouches(
    three: list[ReviewDecision], receipt: Receipt, auditor: User, settings: Any
) -> None:
    old = SigningKey.objects.get(status=SigningKey.ACTIVE)
    SigningKey.objects.filter(pk=old.pk).update(
        status=SigningKey.COMPROMISED, compromised_at=timezone.now()
    )
    check_fails(
        naming=f"decision {three[0].pk} (position 0) was signed by the key {old.kid}, "
        "since compromised, and no later decision"
    )
    settings.SIGNING_KEY = Ed25519PrivateKey.generate()
    keyring.forget()
    decision_record(receipt=receipt, reviewer=auditor, conclusion="rejected")
    check_passes()


def test_a_decision_signed_after_its_key_was_compromised_fails(
    three: list[ReviewDecision], settings: Any
) -> None:
    old = SigningKey.objects.get(status=SigningKey.ACTIVE)
    chained = DecisionLink.objects.get(decision=three[1]).chained_at
    SigningKey.objects.filter(pk=old.pk).update(
        status=SigningKey.COMPROMISED, compromised_at=chained - timedelta(microseconds=1)
    )
    message = check_fails(
        naming=f"decision {three[0].pk} (position 0) was signed by the key "
        f"{old.kid}, since compromised, and no later decision"
    )
    assert (
        f"- decision {three[1].pk} (position 1) was signed by the key {old.kid} after it "
        "was compromised" in message
    )


def test_the_migration_chains_the_decisions_it_finds(receipt: Receipt, auditor: User) -> None:
    # Decisions stored as an older release stored them: rows without links.
    older = [
        ReviewDecision.objects.create(
            receipt=receipt, reviewer=auditor, conclusion=c, output_hash=receipt.output_hash
        )
        for c in ("accepted", "rejected")
    ]
    check_fails(naming=f"decision {older[0].pk} is in no link")
    migration.chain_existing(apps, SimpleNamespace(connection=connection))
    links = list(DecisionLink.objects.order_by("position"))
    assert [(link.decision_id, link.chained_by) for link in links] == [
        (older[0].pk, "migration"),
        (older[1].pk, "migration"),
    ]
    assert "2 of them predate the chain" in check_passes()
    newer = decision_record(receipt=receipt, reviewer=auditor, conclusion="accepted")
    assert DecisionLink.objects.get(decision=newer).previous_hash == links[1].decision_hash
    check_passes()


def test_the_migration_writes_the_document_the_site_writes(
    three: list[ReviewDecision], settings: Any
) -> None:
    # 0011 freezes review-decision/v1 as review/chain.py built it: for the same decision and
    # the same place in the chain, the same bytes, the same hash and the same key id.
    lookups = [lookup for _, lookup in migration.DECISION_FIELDS]
    links = list(DecisionLink.objects.select_related("signing_key").order_by("position"))
    assert [link.decision_id for link in links] == [d.pk for d in three]
    assert links[0].previous_hash == migration.GENESIS
    for link in links:
        row = ReviewDecision.objects.filter(pk=link.decision_id).values(*lookups).get()
        chain = {name: getattr(link, name) for name in migration.CHAIN_FIELDS}
        data = migration.canonical_bytes(migration.document(row, chain))
        assert data == canonical_bytes(decisions.document(row, chain)) == link.canonical_bytes
        assert hashlib.sha256(data).hexdigest() == link.decision_hash
    public = keys.public_raw(settings.SIGNING_KEY)
    assert migration.kid(public) == keys.jwk_thumbprint(public) == links[0].signing_key.kid


def test_the_migration_refuses_to_chain_without_a_key(
    receipt: Receipt, auditor: User, settings: Any
) -> None:
    ReviewDecision.objects.create(
        receipt=receipt, reviewer=auditor, conclusion="accepted", output_hash=receipt.output_hash
    )
    settings.SIGNING_KEY = None
    with pytest.raises(RuntimeError, match="set SIGNING_KEY_FILE"):
        migration.chain_existing(apps, SimpleNamespace(connection=connection))
    assert DecisionLink.objects.count() == 0


def test_the_admin_shows_whether_the_record_checks_out(
    three: list[ReviewDecision], auditor: User
) -> None:
    client = Client()
    client.force_login(auditor)
    page = client.get("/admin/receipts/reviewdecision/").content.decode()
    assert "The record of review decisions checks out: 3 decisions" in page
    entry = client.get(f"/admin/receipts/reviewdecision/{three[1].pk}/change/").content.decode()
    link = DecisionLink.objects.get(decision=three[1])
    assert link.decision_hash in entry
    assert base64.b64encode(bytes(link.signature)).decode() in entry
    with guard_lifted() as cursor:
        cursor.execute(
            "UPDATE receipts_reviewdecision SET conclusion = 'rejected' WHERE id = %s",
            [three[1].pk],
        )
    page = html.unescape(client.get("/admin/receipts/reviewdecision/").content.decode())
    assert "The record of review decisions does not check out." in page
    assert f"decision {three[1].pk} (position 1) was changed" in page


# --- end to end, through a live server ---------------------------------------------------------


class Desk:
    """An auditor's browser, without the browser: a cookie jar, the admin's login and CSRF."""

    def __init__(self, site: LiveSite, username: str, password: str) -> None:
        self.site = site
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        login = self.get("/admin/login/?next=/admin/")
        status, _ = self.post(
            "/admin/login/?next=/admin/",
            {"username": username, "password": password, "next": "/admin/"},
            page=login,
        )
        assert status == 302 or "Log out" in self.get("/admin/")

    def _open(self, request: urllib.request.Request) -> tuple[int, str]:
        try:
            with self.opener.open(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read().decode()

    def get(self, path: str) -> str:
        status, body = self._open(urllib.request.Request(self.site.url + path))
        assert status == 200, (status, body[:2000])
        return body

    def post(self, path: str, fields: dict[str, str], *, page: str) -> tuple[int, str]:
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token, page[:2000]
        data = urllib.parse.urlencode({"csrfmiddlewaretoken": token.group(1), **fields})

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), NoRedirect
        )
        request = urllib.request.Request(self.site.url + path, data=data.encode(), method="POST")
        try:
            with opener.open(request, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read().decode()

    def csv(self) -> list[dict[str, str]]:
        text = self.get("/admin/receipts/reviewdecision/export.csv?from=2000-01-01&to=2999-12-31")
        return list(csv.DictReader(io.StringIO(text)))


def checkdecisions(site: LiveSite, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PYTHON), "manage.py", "checkdecisions", *args],
        cwd=REPO,
        env=site.base_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def tamper(site: LiveSite, *statements: str) -> None:
    """Change the live site's database behind its back, by the one maintenance path."""
    if site.database_url.startswith("sqlite"):
        db = sqlite3.connect(site.database_url.removeprefix("sqlite:///"))
        with db:
            for table in GUARDED:
                db.execute(f"DROP TRIGGER {table}_no_update")
                db.execute(f"DROP TRIGGER {table}_no_delete")
            for statement in statements:
                db.execute(statement)
            for table in GUARDED:
                for trigger in guards_v1.sqlite_triggers(table):
                    db.execute(trigger)
        db.close()
    else:
        import psycopg

        with psycopg.connect(site.database_url) as pg:
            pg.execute("SET session_replication_role = replica")
            for statement in statements:
                pg.execute(statement)  # type: ignore[arg-type]


def verify_rows(rows: list[dict[str, str]], published: dict[str, Any]) -> None:
    """Check an export as an auditor would, with the site's published keys only."""
    by_kid = {
        k["kid"]: Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(k["x"] + "=="))
        for k in published["keys"]
    }
    previous = ("", "0" * 64)
    for position, row in enumerate(rows):
        data = row["signed_document"].encode()
        assert hashlib.sha256(data).hexdigest() == row["decision_hash"]
        by_kid[row["signing_key"]].verify(base64.b64decode(row["signature"]), data)
        signed = json.loads(data)
        assert (signed["decision_id"], signed["conclusion"], signed["receipt_id"]) == (
            int(row["decision_id"]),
            row["conclusion"],
            row["receipt_id"],
        )
        assert (row["previous_decision_id"], row["previous_hash"]) == previous
        assert int(row["position"]) == position and row["record_check"] == "sound"
        previous = (row["decision_id"], row["decision_hash"])


@pytest.mark.live
def test_the_record_end_to_end_through_a_live_server() -> None:
    with LiveSite(workers=3) as site:
        site.manage(
            "shell",
            "-c",
            (
                "from django.contrib.auth.models import Group, User; "
                "u = User.objects.create_user('ada', password='pw-for-tests-only', is_staff=True); "
                "u.groups.add(Group.objects.get(name='Auditors'))"
            ),
        )
        receipt = site.post("/api/receipts", example_body()).json()["id"]
        desk = Desk(site, "ada", "pw-for-tests-only")

        # One decision in the admin, then several on the page at once (two auditors' saves
        # racing, more than the workers): the record must not fork.
        add = desk.get("/admin/receipts/reviewdecision/add/")
        status, _ = desk.post(
            "/admin/receipts/reviewdecision/add/",
            {
                "receipt": _receipt_pk(site, receipt),
                "conclusion": "needs_follow_up",
                "follow_up": "Call the client",
                "exception_note": "",
                "supersedes": "",
            },
            page=add,
        )
        assert status == 302
        page = desk.get(f"/run/{receipt}")
        output_hash = site.get(f"/api/receipt/{receipt}/verify").json()["output_hash"]
        barrier = threading.Barrier(6, timeout=30)
        answers: list[int] = []

        def save(n: int) -> None:
            barrier.wait()
            answers.append(
                desk.post(
                    f"/run/{receipt}/decisions",
                    {
                        "conclusion": "accepted",
                        "follow_up": f"note {n}",
                        "output_hash": output_hash,
                    },
                    page=page,
                )[0]
            )

        threads = [threading.Thread(target=save, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert answers == [302] * 6

        rows = desk.csv()
        assert len(rows) == 7
        verify_rows(
            sorted(rows, key=lambda r: int(r["position"])),
            site.get("/.well-known/receipt-keys.json").json(),
        )
        sound = checkdecisions(site)
        assert sound.returncode == 0, sound.stderr
        assert "7 decisions" in sound.stdout
        readme = readme_check(site, desk)
        assert readme.returncode == 0, readme.stderr
        head = sound.stdout.split("decision hash ")[1].split()[0]
        assert readme.stdout == f"OK: 7 decisions, head {head}\n"
        assert "checks out: 7 decisions" in desk.get("/admin/receipts/reviewdecision/")

        by_position = {int(r["position"]): r for r in rows}
        changed = by_position[0]["decision_id"]
        tamper(
            site, f"UPDATE receipts_reviewdecision SET conclusion = 'accepted' WHERE id = {changed}"
        )
        bad = checkdecisions(site)
        assert bad.returncode == 1
        assert (
            f"- decision {changed} (position 0) was changed: conclusion was "
            '"needs_follow_up", is "accepted"' in bad.stderr
        )
        listing = html.unescape(desk.get("/admin/receipts/reviewdecision/"))
        assert "does not check out" in listing
        assert f"decision {changed} (position 0) was changed" in listing
        export = {r["decision_id"]: r for r in desk.csv()}
        assert export[changed]["record_check"].startswith("changed: decision")
        tamper(
            site,
            "UPDATE receipts_reviewdecision SET conclusion = 'needs_follow_up' "
            f"WHERE id = {changed}",
        )
        assert checkdecisions(site).returncode == 0

        # Swap two places in the record.
        a, b = by_position[2]["decision_id"], by_position[3]["decision_id"]
        place = "UPDATE receipts_decisionlink SET position = {} WHERE decision_id = {}"
        tamper(site, place.format(999, a), place.format(2, b), place.format(3, a))
        bad = checkdecisions(site)
        assert bad.returncode == 1
        assert bad.stderr.splitlines()[1].startswith(
            f"- decision {b} (position 2) was reordered"
        ), bad.stderr
        assert "does not check out" in desk.get("/admin/receipts/reviewdecision/")
        tamper(site, place.format(999, a), place.format(3, b), place.format(2, a))
        assert checkdecisions(site).returncode == 0

        # Remove one: the decision only, then (another) with its link.
        gone = by_position[4]["decision_id"]
        tamper(site, f"DELETE FROM receipts_reviewdecision WHERE id = {gone}")
        bad = checkdecisions(site)
        assert bad.returncode == 1
        assert bad.stderr.splitlines()[1] == (
            f"- decision {gone} (position 4) was removed: its signed link remains, the "
            "decision is gone"
        )
        assert f"decision {gone} (position 4) was removed" in html.unescape(
            desk.get("/admin/receipts/reviewdecision/")
        )


def readme_check(site: LiveSite, desk: Desk) -> subprocess.CompletedProcess[str]:
    """The README's check of an export, run as an auditor would run it."""
    text = (REPO / "README.md").read_text()
    start = text.index("## For auditors: the record of decisions")
    section = text[start : text.index("\n## ", start + 1)]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    folder = site.tmp / "auditor"
    folder.mkdir()
    (folder / "receipt-keys.json").write_text(site.get("/.well-known/receipt-keys.json").text)
    (folder / "decisions.csv").write_text(
        desk.get("/admin/receipts/reviewdecision/export.csv"), newline=""
    )
    return subprocess.run(
        [str(PYTHON), "-c", code], cwd=folder, capture_output=True, text=True, timeout=60
    )


def _receipt_pk(site: LiveSite, public_id: str) -> str:
    out = site.manage(
        "shell",
        "-c",
        (
            "from receiptsite.receipts.models import Receipt; "
            f"print(Receipt.objects.get(public_id='{public_id}').pk)"
        ),
    )
    return out.strip().splitlines()[-1]


@pytest.mark.live
def test_two_auditors_saving_at_once_do_not_fork_the_record_on_postgresql() -> None:
    """Saves that would race are made to: a session of the test holds the link table so that
    every save has read the record's end before any may append. Without the site's lock they
    would all claim the same place (and all but one fail); with it they take turns."""
    if not is_postgres(suite_database_url()):
        pytest.skip("SQLite has one writer at a time (BEGIN IMMEDIATE): saves cannot race")
    import psycopg

    with LiveSite(workers=3) as site:
        site.manage(
            "shell",
            "-c",
            (
                "from django.contrib.auth.models import Group, User; "
                "u = User.objects.create_user('ada', password='pw-for-tests-only', is_staff=True); "
                "u.groups.add(Group.objects.get(name='Auditors'))"
            ),
        )
        receipt = site.post("/api/receipts", example_body()).json()["id"]
        output_hash = site.get(f"/api/receipt/{receipt}/verify").json()["output_hash"]
        desks = [Desk(site, "ada", "pw-for-tests-only") for _ in range(3)]
        pages = [desk.get(f"/run/{receipt}") for desk in desks]
        answers: list[int] = []

        def save(n: int) -> None:
            answers.append(
                desks[n].post(
                    f"/run/{receipt}/decisions",
                    {
                        "conclusion": "accepted",
                        "follow_up": f"note {n}",
                        "output_hash": output_hash,
                    },
                    page=pages[n],
                )[0]
            )

        with psycopg.connect(site.database_url) as holder:
            holder.execute("LOCK TABLE receipts_decisionlink IN SHARE ROW EXCLUSIVE MODE")
            threads = [threading.Thread(target=save, args=(n,)) for n in range(3)]
            for thread in threads:
                thread.start()
            with psycopg.connect(site.database_url, autocommit=True) as watcher:
                for _ in range(300):
                    (waiting,) = watcher.execute(  # type: ignore[misc]
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type IN ('Lock', 'advisory') AND pid <> %s",
                        [holder.info.backend_pid],
                    ).fetchone()
                    if waiting == 3:
                        break
                    threading.Event().wait(0.05)
                assert waiting == 3, "the saves did not all start"
            holder.rollback()  # release: the saves go on
        for thread in threads:
            thread.join()
        assert answers == [302] * 3
        rows = sorted(
            Desk(site, "ada", "pw-for-tests-only").csv(), key=lambda r: int(r["position"])
        )
        assert [int(r["position"]) for r in rows] == [0, 1, 2]
        verify_rows(rows, site.get("/.well-known/receipt-keys.json").json())
        assert checkdecisions(site).returncode == 0


@pytest.mark.live
def test_migrate_chains_the_decisions_an_older_release_made() -> None:
    """`migrate` over a database whose decisions predate the record chains them, in order."""
    with LiveSite(workers=1) as site:
        site.post("/api/receipts", example_body())
        site.manage("migrate", "receipts", "0010_key_compromise")
        site.manage(
            "shell",
            "-c",
            (
                "from django.contrib.auth.models import User; "
                "from receiptsite.receipts.models import Receipt, ReviewDecision; "
                "r = Receipt.objects.get(); u = User.objects.create_user('old-auditor'); "
                "[ReviewDecision.objects.create(receipt=r, reviewer=u, conclusion=c, "
                "output_hash=r.output_hash) for c in ('accepted', 'needs_follow_up')]"
            ),
        )
        site.manage("migrate")
        sound = checkdecisions(site)
        assert sound.returncode == 0, sound.stderr
        assert "2 decisions" in sound.stdout
        assert "2 of them predate the chain" in sound.stdout
        out = site.manage(
            "shell",
            "-c",
            (
                "from receiptsite.receipts.models import DecisionLink as L; "
                "print([(l.position, l.decision_id, l.chained_by) "
                "for l in L.objects.order_by('position')])"
            ),
        )
        assert out.strip().splitlines()[-1] == "[(0, 1, 'migration'), (1, 2, 'migration')]"

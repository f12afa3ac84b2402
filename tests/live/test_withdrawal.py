"""Withdrawal: POST /api/receipts/<id>/withdrawal (and the admin's action) erases a receipt's
content and keeps its place in the log; the page and the verification answer 410; the list
and the detail show it withdrawn; the database permits this one change, and only after a
withdrawal record exists; the content leaves SQLite's files (the database file and its
write-ahead log), as read from the disk; and a producer's outbox that sends a withdrawn
receipt again is refused and gives up, publishing nothing (as the site's own role too)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from receiptsite_client import Client

from receiptsite.integrity import merkle
from tests.conftest import example_body
from tests.livesite import LiveSite, is_postgres, suite_database_url

pytestmark = pytest.mark.live


# --- the tenant's route ------------------------------------------------------------------------


# --- what the routes show afterwards ----------------------------------------------------------


# --- the auditor's action ---------------------------------------------------------------------


# --- the database permits the erasure only after a withdrawal ------------------------------


# --- end to end, through a live server --------------------------------------------------------


@pytest.fixture(scope="module")
def live() -> Iterator[LiveSite]:
    with LiveSite(workers=2) as site:
        yield site


def marked_body(marker: str) -> dict[str, Any]:
    return example_body(
        workflow_id=f"wf-{marker}",
        idempotency_key=f"key-{marker}",
        session_id=f"session-{marker}",
        subject={"type": "tool", "name": f"tool-{marker}"},
        # Long enough for SQLite's overflow pages and PostgreSQL's TOAST.
        result=f"The customer {marker} " + "lorem ipsum " * 400 + f"again {marker}",
        input_summary=f"Summary naming {marker}",
    )


@pytest.mark.live
def test_end_to_end_through_a_live_server(live: LiveSite) -> None:
    marker = secrets.token_hex(12)
    stored = live.post("/api/receipts", marked_body(marker))
    assert stored.status == 201, stored
    receipt_id = stored.json()["id"]
    before = live.get(f"/api/receipt/{receipt_id}/verify").json()
    assert before["status"] == "valid"
    other_key = live.add_tenant("globex", "Globex")
    path = f"/api/receipts/{receipt_id}/withdrawal"
    assert live.post(path, {"reason": "secret"}, key=other_key).status == 404
    assert live.post(path, {"reason": "nope"}).status == 422
    done = live.post(path, {"reason": "personal_data", "note": "names a person"})
    assert done.status == 201, done
    again = live.post(path, {"reason": "other"})
    assert again.status == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == done.json()
    # Withdrawals of one receipt at once: one record, every answer the first one.
    racing = live.post("/api/receipts", marked_body(secrets.token_hex(8))).json()["id"]
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(
            pool.map(
                lambda _: live.post(f"/api/receipts/{racing}/withdrawal", {"reason": "legal"}),
                range(6),
            )
        )
    assert {a.status for a in answers} == {201}
    assert len({a.text for a in answers}) == 1
    assert sum(a.headers.get("Idempotent-Replayed") != "true" for a in answers) == 1

    verify = live.get(f"/api/receipt/{receipt_id}/verify")
    assert verify.status == 410, verify
    body = verify.json()
    assert body["status"] == "withdrawn" and body["reason"] == "personal_data"
    log = body["log"]
    leaf = base64.b64decode(body["leaf_hash"])
    assert leaf == merkle.leaf_hash(base64.b64decode(before["canonical_bytes"]))
    assert merkle.verify_inclusion(
        leaf,
        log["index"],
        log["tree_size"],
        [base64.b64decode(p) for p in log["inclusion_proof"]],
        base64.b64decode(log["root_hash"]),
    )
    assert log["checkpoint"] == live.get("/api/log/checkpoint").text
    assert_the_answer_lets_a_copy_be_checked(live, body, before)
    page = live.get(f"/run/{receipt_id}")
    assert page.status == 410 and "by the publisher, for personal data." in page.text
    assert body["statement"]["hash"] in page.text
    detail = live.get(f"/api/receipts/{receipt_id}", key=live.api_key).json()
    assert detail["withdrawn_at"] == done.json()["withdrawn_at"] and "document" not in detail
    assert marker not in verify.text + page.text + json.dumps(detail)
    assert "OK:" in live.manage("checklog")
    entries = live.get("/api/audit-logs", key=live.api_key).json()["entries"]
    assert entries[1]["route"] == "POST /api/receipts/{id}/withdrawal"
    assert receipt_id not in live.logs()
    assert "OK: The withdrawals' statements check out" in live.manage("checkwithdrawals")
    if is_postgres(live.database_url):
        import psycopg

        def last_vacuum() -> Any:
            with psycopg.connect(live.database_url) as owner:
                (vacuumed,) = owner.execute(
                    "SELECT last_vacuum FROM pg_stat_user_tables "
                    "WHERE relname = 'receipts_receipt'"
                ).fetchone() or (None,)
            return vacuumed

        # The request only erased: the VACUUM is the command's, run by the owner.
        assert last_vacuum() is None
        assert "OK: VACUUM (INDEX_CLEANUP ON) receipts_receipt" in live.manage("scrubwithdrawn")
        assert last_vacuum() is not None


def assert_the_answer_lets_a_copy_be_checked(
    live: LiveSite, body: dict[str, Any], before: dict[str, Any]
) -> None:
    """What a holder of the original bytes checks them against, with the published keys only:
    the kept output hash and signature, the recomputed log_inclusion check, and the
    withdrawal's signed statement."""
    published = live.get("/.well-known/receipt-keys.json").json()
    by_kid = {
        k["kid"]: Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(k["x"] + "=="))
        for k in published["keys"]
    }
    copy = base64.b64decode(before["canonical_bytes"])
    assert body["output_hash"] == before["output_hash"] == hashlib.sha256(copy).hexdigest()
    assert body["signature"] == before["signature"]
    by_kid[body["signature"]["key_id"]].verify(base64.b64decode(body["signature"]["value"]), copy)
    assert [(c["name"], c["result"]) for c in body["checks"]] == [("log_inclusion", "pass")]
    statement = body["statement"]
    data = base64.b64decode(statement["canonical_bytes"])
    assert hashlib.sha256(data).hexdigest() == statement["hash"]
    key_id = statement["signature"]["key_id"]
    by_kid[key_id].verify(base64.b64decode(statement["signature"]["value"]), data)
    signed = json.loads(data)
    assert signed["format"] == "withdrawal/v1"
    assert (signed["receipt_id"], signed["withdrawn_by"], signed["reason"]) == (
        body["receipt_id"],
        "publisher",
        "personal_data",
    )
    assert signed["withdrawn_at"] == body["withdrawn_at"]
    assert (signed["output_hash"], signed["leaf_hash"]) == (body["output_hash"], body["leaf_hash"])


@pytest.mark.live
def test_the_database_refuses_a_raw_erasure_without_a_withdrawal_on_a_live_site(
    live: LiveSite,
) -> None:
    stored = live.post("/api/receipts", marked_body(secrets.token_hex(8)))
    receipt_id = stored.json()["id"]
    if is_postgres(live.database_url):
        import psycopg

        with (
            psycopg.connect(live.database_url) as db,
            pytest.raises(psycopg.errors.RestrictViolation, match="append-only"),
        ):
            db.execute(
                "UPDATE receipts_receipt SET canonical_bytes = ''::bytea, "
                "workflow_id = '' WHERE public_id = %s",
                [receipt_id],
            )
    else:
        lite = sqlite3.connect(live.database_url.removeprefix("sqlite:///"))
        try:
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                lite.execute(
                    "UPDATE receipts_receipt SET canonical_bytes = X'' WHERE public_id = ?",
                    [receipt_id.replace("-", "")],
                )
        finally:
            lite.close()
    assert live.get(f"/api/receipt/{receipt_id}/verify").json()["status"] == "valid"


def database_files(site: LiveSite) -> list[Path]:
    main = Path(site.database_url.removeprefix("sqlite:///"))
    return [p for p in (main, Path(f"{main}-wal"), Path(f"{main}-journal")) if p.exists()]


@pytest.mark.live
@pytest.mark.skipif(is_postgres(suite_database_url()), reason="reads SQLite's own files")
def test_the_content_leaves_sqlites_files_and_its_write_ahead_log(live: LiveSite) -> None:
    marker = secrets.token_hex(12)
    kept_marker = secrets.token_hex(12)
    stored = live.post("/api/receipts", marked_body(marker)).json()
    live.post("/api/receipts", marked_body(kept_marker))

    def on_disk(text: str) -> bool:
        return any(text.encode() in path.read_bytes() for path in database_files(live))

    assert on_disk(marker) and on_disk(kept_marker)  # the test can see content on the disk
    answer = live.post(f"/api/receipts/{stored['id']}/withdrawal", {"reason": "personal_data"})
    assert answer.status == 201
    # The request only erases; the command takes the old pages out of the write-ahead log.
    assert "OK:" in live.manage("scrubwithdrawn")
    assert not on_disk(marker)
    assert on_disk(kept_marker)
    wal = Path(live.database_url.removeprefix("sqlite:///") + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert live.get(f"/api/receipt/{stored['id']}/verify").status == 410


# --- a producer's retry after a withdrawal -----------------------------------------------------

# An address where nothing listens (port 9, discard: no test's server binds a port that low),
# for a client whose send never reaches a site.
NO_SITE = "http://127.0.0.1:9"


def tenant_receipts(site: LiveSite, key: str) -> list[str]:
    """The ids of every receipt of the key's tenant, newest first."""
    found: list[str] = []
    cursor = ""
    while True:
        page = site.get(f"/api/receipts?limit=200&cursor={cursor}", key=key).json()
        found += [summary["id"] for summary in page["receipts"]]
        if not page["next_cursor"]:
            return found
        cursor = page["next_cursor"]


def assert_a_retry_of_a_withdrawn_receipt_publishes_nothing(site: LiveSite, tmp: Path) -> None:
    """The outbox's own case: its send reached the site and stored the receipt, but the
    process died before it noted the answer, so the entry is still pending. The receipt is
    withdrawn meanwhile; the next flush sends it again, is answered 410 and gives up."""
    outbox = tmp / f"outbox-{secrets.token_hex(4)}.sqlite3"
    marker = secrets.token_hex(8)
    pending = Client(NO_SITE, site.api_key, outbox, deadline=0.3).record(marked_body(marker))
    assert pending.receipt_status == "pending"
    sent = site.post("/api/receipts", dict(pending.document))  # the send that got through
    assert sent.status == 201, sent
    receipt_id = sent.json()["id"]
    withdrawn = site.post(f"/api/receipts/{receipt_id}/withdrawal", {"reason": "personal_data"})
    assert withdrawn.status == 201, withdrawn
    before = tenant_receipts(site, site.api_key)

    client = Client(site.url, site.api_key, outbox)
    [entry] = client.flush()
    assert entry.receipt_status == "failed" and entry.receipt_id is None
    assert entry.error is not None and entry.error.startswith("410 withdrawn"), entry.error
    assert entry.problem is not None and entry.problem["id"] == receipt_id
    attempts = entry.publish_attempts
    assert client.flush() == []  # final: never sent again
    assert client.entries()[0].publish_attempts == attempts
    # A batch holding it stores the others only.
    batch = site.post(
        "/api/receipts/batch",
        {"receipts": [dict(pending.document), marked_body(secrets.token_hex(8))]},
    )
    assert [r["status"] for r in batch.json()["results"]] == [410, 201]
    assert batch.json()["results"][0]["id"] == receipt_id
    after = tenant_receipts(site, site.api_key)
    assert after[1:] == before and after[0] == batch.json()["results"][1]["id"]
    verify = site.get(f"/api/receipt/{receipt_id}/verify")
    assert verify.status == 410 and marker not in verify.text


@pytest.mark.live
def test_the_outboxs_retry_of_a_withdrawn_receipt_ends_without_publishing_it_again(
    live: LiveSite, tmp_path: Path
) -> None:
    assert_a_retry_of_a_withdrawn_receipt_publishes_nothing(live, tmp_path)


# --- PostgreSQL: the site's own role, which owns nothing --------------------------------------


@pytest.fixture(scope="module")
def role_site() -> Iterator[Any]:
    from tests.live.test_row_level_security import RoleSite, admin_connect

    server = suite_database_url()
    role = f"receiptsite_site_{secrets.token_hex(5)}"
    with admin_connect(server) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
    try:
        live = RoleSite(workers=2, role=role, env={"DATABASE_SITE_ROLE": role})
        with live:
            live.other_key = live.add_tenant("globex", "Globex")
            yield live
    finally:
        with admin_connect(server) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.mark.live
@pytest.mark.skipif(not is_postgres(suite_database_url()), reason="PostgreSQL's roles")
def test_the_site_role_erases_only_through_a_withdrawal_of_its_own_tenant(role_site: Any) -> None:
    import psycopg

    site = role_site
    ours = site.post("/api/receipts", marked_body("ours")).json()["id"]
    kept = site.post("/api/receipts", marked_body("kept")).json()["id"]
    theirs = site.post("/api/receipts", marked_body("theirs"), key=site.other_key).json()["id"]
    done = site.post(f"/api/receipts/{ours}/withdrawal", {"reason": "legal"})
    assert done.status == 201, done
    assert site.get(f"/api/receipt/{ours}/verify").status == 410  # read by id, as the role
    assert site.get(f"/run/{ours}").status == 410
    with psycopg.connect(site.database_url) as owner:
        rows = owner.execute("SELECT public_id::text, id FROM receipts_receipt").fetchall()
        ids: dict[str, int] = {str(public): int(pk) for public, pk in rows}
        tenants: dict[str, int] = dict(
            owner.execute("SELECT slug, id FROM receipts_tenant").fetchall()
        )
        acme, globex = tenants["acme"], tenants["globex"]

    def as_acme(
        sql: str, params: list[Any], error: type[Exception] | tuple[type[Exception], ...]
    ) -> None:
        with site.connect() as conn:
            conn.execute("SELECT set_config('app.tenant_id', %s, true)", [str(acme)])
            with pytest.raises(error):
                conn.execute(sql, params)

    # No UPDATE privilege on receipts at all, not even on its own.
    as_acme(
        "UPDATE receipts_receipt SET canonical_bytes = ''::bytea WHERE id = %s",
        [ids[kept]],
        psycopg.errors.InsufficientPrivilege,
    )
    # The owner's function erases only what a withdrawal permits.
    as_acme("SELECT receiptsite_erase_withdrawn(%s)", [ids[kept]], psycopg.errors.RestrictViolation)
    # Another tenant's receipt: a withdrawal for it cannot be written as that tenant...
    as_acme(
        "INSERT INTO receipts_withdrawal (receipt_id, receipt_public_id, tenant_id, "
        "withdrawn_at, reason, note, withdrawn_by, api_key_id) SELECT %s, %s, %s, now(), "
        "'other', '', 'publisher', (SELECT id FROM receipts_apikey LIMIT 1)",
        [ids[theirs], theirs, globex],
        # The tie (migration 0015), a BEFORE trigger, refuses it before the policy's check.
        (psycopg.errors.IntegrityConstraintViolation, psycopg.errors.InsufficientPrivilege),
    )
    # ...nor under our own tenant: the database ties a withdrawal to its receipt's tenant...
    as_acme(
        "INSERT INTO receipts_withdrawal (receipt_id, receipt_public_id, "
        "tenant_id, withdrawn_at, reason, note, withdrawn_by, api_key_id) "
        "SELECT %s, %s, %s, now(), 'other', '', 'publisher', "
        "(SELECT id FROM receipts_apikey WHERE tenant_id = %s LIMIT 1)",
        [ids[theirs], theirs, acme, acme],
        psycopg.errors.IntegrityConstraintViolation,
    )
    # ...so the function finds no withdrawal that lets it erase theirs.
    as_acme(
        "SELECT receiptsite_erase_withdrawn(%s)", [ids[theirs]], psycopg.errors.RestrictViolation
    )
    assert site.get(f"/api/receipt/{theirs}/verify").json()["status"] == "valid"
    assert site.get(f"/api/receipt/{kept}/verify").json()["status"] == "valid"
    assert "OK:" in site.manage("checklog")


@pytest.mark.live
@pytest.mark.skipif(not is_postgres(suite_database_url()), reason="PostgreSQL's roles")
def test_the_site_role_refuses_a_retry_of_a_withdrawn_receipt(
    role_site: Any, tmp_path: Path
) -> None:
    # The look-up reads the withdrawals under the tenant's row-level security, as the role.
    assert_a_retry_of_a_withdrawn_receipt_publishes_nothing(role_site, tmp_path)

"""Reads never write: a GET computes and answers. Keys, checkpoints and LOG_STATE_FILE are
written by the paths that change them (an ingest, `migrate`, a command), never by a read. The
one row a tenant's read adds is its own entry in the API audit log.

Checked on the real database (SQLite, or PostgreSQL with DATABASE_URL): the statements every
GET route runs, the rows of every table and LOG_STATE_FILE's bytes and mtime, before and after,
in the states where a read was once tempted to write (a key rotated in but not yet recorded, a
stored tree not yet signed, a log rolled back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, get_resolver

from receiptsite.config import signing_key
from receiptsite.integrity.keys import generate_private_key_pem
from receiptsite.ledger import log
from receiptsite.receipts.models import ApiKey, Receipt
from receiptsite.receipts.services import receipt_ingest
from tests.conftest import Producer, example_body, remember_a_tree_not_stored

pytestmark = pytest.mark.db

WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "MERGE", "TRUNCATE", "CREATE", "DROP", "ALTER")


def get_routes(receipt_id: str, size: int) -> Iterator[str]:
    """Every route of the site but the admin's, as a GET would ask for it."""
    for pattern in get_resolver().url_patterns:
        if not isinstance(pattern, URLPattern):
            continue  # the admin: a site of its own, behind a login
        route = "/" + str(pattern.pattern).replace("<receipt_id:receipt_id>", receipt_id)
        if route == "/api/log/consistency":
            route += f"?first=1&second={size}"
        yield route
    yield f"/run/{receipt_id}?part=verification"  # the htmx "Check again"


def state(path: Path) -> dict[str, Any]:
    """Every table's row count and LOG_STATE_FILE as it is on disk."""
    counts = {model._meta.db_table: model._default_manager.count() for model in apps.get_models()}
    try:
        file = (path.read_bytes(), path.stat().st_mtime_ns)
    except FileNotFoundError:
        file = None
    return {"rows": counts, "log_state_file": file}


def rotated(settings: Any, tmp_path: Path) -> None:
    """A new key in SIGNING_KEY_FILE and a restart, but no write path has run since."""
    new_file = tmp_path / "new-key.pem"
    new_file.write_bytes(generate_private_key_pem())
    settings.SIGNING_KEY_FILE = str(new_file)
    settings.SIGNING_KEY = signing_key(str(new_file))


def unsigned(settings: Any, tmp_path: Path) -> None:
    """A receipt stored and committed without its note (an older release, or a crash)."""
    signer, log.sign_appended = log.sign_appended, lambda current: None
    try:
        receipt_ingest(api_key=ApiKey.objects.get(), payload=example_body(idempotency_key="late"))
    finally:
        log.sign_appended = signer


def rolled_back(settings: Any, tmp_path: Path) -> None:
    """The database restored from a backup older than the largest tree signed."""
    remember_a_tree_not_stored(settings)


def as_is(settings: Any, tmp_path: Path) -> None:
    pass


@pytest.mark.parametrize("situation", [as_is, rotated, unsigned, rolled_back])
def test_no_get_writes_to_the_database_or_the_state_file(
    producer: Producer, client: Client, settings: Any, tmp_path: Path,
    situation: Callable[[Any, Path], None],
) -> None:
    ids = [producer.publish(idempotency_key=f"k{i}")["id"] for i in range(3)]
    situation(settings, tmp_path)
    routes = list(get_routes(ids[1], Receipt.objects.count()))
    headers = {"Authorization": producer.headers()["Authorization"], "HX-Request": "true"}
    before = state(Path(settings.LOG_STATE_FILE))
    answered = {}
    with CaptureQueriesContext(connection) as queries:
        for route in routes:
            answered[route] = client.get(route, headers=headers).status_code
    writes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(WRITES)]
    # The one row a tenant's read writes is its own API audit-log entry, one INSERT each.
    audit = [w for w in writes if w.lstrip().startswith('INSERT INTO "audit_auditentry"')]
    assert [w for w in writes if w not in audit] == []
    # (POST-only routes answer a GET 405 before the key is read: no tenant, no entry.)
    tenant_reads = [r for r in routes if r.startswith(("/api/receipts", "/api/audit-logs"))
                    and r != "/api/receipts/batch" and not r.endswith("/withdrawal")]
    assert len(audit) == len(tenant_reads) == 3
    before["rows"]["audit_auditentry"] += len(tenant_reads)
    assert state(Path(settings.LOG_STATE_FILE)) == before
    # Not vacuous: the reads were answered, the receipt's as well as the log's.
    assert answered[f"/run/{ids[1]}"] == 200
    assert answered[f"/api/receipt/{ids[1]}/verify"] == 200
    assert answered["/api/receipts"] == 200
    assert answered["/.well-known/receipt-keys.json"] == 200
    expected = 503 if situation is rolled_back else 200
    assert answered["/api/log/checkpoint"] == answered["/healthz"] == expected

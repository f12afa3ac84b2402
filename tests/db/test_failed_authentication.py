"""Failed authentications of tenant routes (401): limited per client address in a rate-limit
scope of their own, `auth` (a 429 once an address has spent it, while a valid key from that
address is still served), and each one within the limit recorded without the key
(receiptsite/audit): append-only, pruned with the API audit log, read-only to auditors.

In-process on the suite's database (SQLite, or PostgreSQL with DATABASE_URL), each limit on
both stores (`store`: the database, or a throwaway Redis). Several gunicorn workers sharing one
limit are tests/live/test_failed_authentication.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.db import Error, connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from receiptsite import logconfig
from receiptsite.audit.models import AuditEntry, FailedAuthentication, PrunePermit
from receiptsite.config import rate_limits
from receiptsite.receipts.models import ApiKey, Tenant
from tests.conftest import assert_problem, example_body

pytestmark = pytest.mark.db

ADDRESS, OTHER_ADDRESS = "198.51.100.7", "203.0.113.9"
RECEIPT = "0f0e0d0c-0b0a-4908-8706-050403020100"
UNKNOWN_KEY = "rk_0123456789ab_" + "s3cretUnknownKeyPart" * 2


def call(
    client: Client, key: str | None = None, *, path: str = "/api/receipts", method: str = "get",
    address: str = ADDRESS, **headers: str,
) -> Any:
    """One request to a tenant route from `address`, with `key` as its bearer key if given."""
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    if method == "post":
        return client.post(path, data="{}", content_type="application/json", headers=headers,
                           REMOTE_ADDR=address)
    return client.get(path, headers=headers, REMOTE_ADDR=address)


def secret_of(key: str) -> str:
    """The part of a key that is not its public prefix."""
    return key[ApiKey.PREFIX_LENGTH + 1:]


def row_text(row: FailedAuthentication) -> str:
    return " ".join(str(value) for value in
                    FailedAuthentication.objects.filter(pk=row.pk).values().get().values())


# --- what is recorded -----------------------------------------------------------------------


def test_each_failure_is_recorded_with_its_reason_and_never_the_key(
    client: Client, tenant: Tenant, api_key: str
) -> None:
    revoked_row, revoked = ApiKey.issue(tenant)
    ApiKey.objects.filter(pk=revoked_row.pk).update(revoked_at=timezone.now())
    known = api_key[: ApiKey.PREFIX_LENGTH]
    wrong_secret = f"{known}_{'W' * 43}"
    # (Authorization header or None, route, method, reason, key prefix recorded)
    cases = [
        (None, "/api/receipts", "get", "missing", ""),
        ("Bearer", "/api/receipts", "post", "missing", ""),
        (f"Basic {api_key}", "/api/receipts/batch", "post", "malformed", ""),
        ("Bearer not-a-key", "/api/audit-logs", "get", "malformed", ""),
        (f"Bearer {UNKNOWN_KEY}", f"/api/receipts/{RECEIPT}", "get", "unknown", ""),
        (f"Bearer {wrong_secret}", "/api/receipts", "get", "unknown", known),
        (f"Bearer {revoked}", f"/api/receipts/{RECEIPT}/withdrawal", "post", "revoked",
         revoked[: ApiKey.PREFIX_LENGTH]),
    ]
    for n, (authorization, path, method, _, _) in enumerate(cases):
        headers = {"X-Request-ID": f"failed-{n}"}
        if authorization is not None:
            headers["Authorization"] = authorization
        response = call(client, path=path, method=method, **headers)
        assert_problem(response, 401, "unauthorized")
        assert response["WWW-Authenticate"] == 'Bearer realm="receipts"'
    assert AuditEntry.objects.count() == 0  # no tenant, no API audit-log entry
    rows = list(FailedAuthentication.objects.order_by("pk"))
    assert [r.request_id for r in rows] == [f"failed-{n}" for n in range(len(cases))]
    for row, (_, path, method, reason, prefix) in zip(rows, cases, strict=True):
        assert (row.reason, row.key_prefix, row.method, row.client_address) == (
            reason, prefix, method.upper(), ADDRESS)
        assert row.path == logconfig.mask(path)  # as the logs write it
        assert abs((timezone.now() - row.at).total_seconds()) < 60
        text = row_text(row)
        for key in (api_key, revoked, wrong_secret, UNKNOWN_KEY):
            assert secret_of(key) not in text, text
        assert RECEIPT not in text


def test_a_missing_or_malformed_key_is_not_looked_up(client: Client, api_key: str) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Token {api_key}"}):
        with CaptureQueriesContext(connection) as queries:
            assert call(client, **headers).status_code == 401
        assert not [q["sql"] for q in queries if "receipts_apikey" in q["sql"]]
        writes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("INSERT")]
        assert len(writes) == 1 and '"audit_failedauthentication"' in writes[0], writes


def test_with_rate_limits_off_every_failure_is_answered_401_and_recorded(
    client: Client, settings: Any, db: None
) -> None:
    settings.RATE_LIMITS = rate_limits("off")
    assert [call(client, UNKNOWN_KEY).status_code for _ in range(25)] == [401] * 25
    assert FailedAuthentication.objects.count() == 25


# --- the limit ------------------------------------------------------------------------------


def test_an_address_that_spent_its_failures_gets_429_and_nothing_more_is_recorded(
    store: str, client: Client, settings: Any
) -> None:
    settings.RATE_LIMITS = rate_limits("auth=3/0.001")
    statuses = [call(client, UNKNOWN_KEY).status_code for _ in range(3)]
    assert statuses == [401, 401, 401]
    for headers in ({"Authorization": f"Bearer {UNKNOWN_KEY}"}, {}):
        refused = call(client, **headers)
        assert_problem(refused, 429, "rate-limited")
        assert int(refused["Retry-After"]) >= 1
    assert FailedAuthentication.objects.count() == 3
    # Another address has a bucket of its own.
    assert call(client, UNKNOWN_KEY, address=OTHER_ADDRESS).status_code == 401
    assert FailedAuthentication.objects.filter(client_address=OTHER_ADDRESS).count() == 1


def test_a_valid_key_from_a_refused_address_is_served_and_spends_nothing_of_its_limit(
    store: str, client: Client, api_key: str, settings: Any
) -> None:
    settings.RATE_LIMITS = rate_limits("auth=1/0.001")
    for _ in range(3):
        assert call(client, api_key).status_code == 200
    assert call(client, UNKNOWN_KEY).status_code == 401  # its one failure is still there
    assert call(client, UNKNOWN_KEY).status_code == 429
    assert call(client, api_key).status_code == 200
    posted = client.post("/api/receipts", example_body(), content_type="application/json",
                         headers={"Authorization": f"Bearer {api_key}"}, REMOTE_ADDR=ADDRESS)
    assert posted.status_code == 201, posted.content


def test_the_client_address_is_the_one_trusted_proxies_report(
    client: Client, settings: Any, db: None
) -> None:
    settings.RATE_LIMITS = rate_limits("auth=1/0.001")
    settings.TRUSTED_PROXIES = ["10.0.0.1"]
    behind = {"X-Forwarded-For": f"{ADDRESS}, 10.0.0.1"}
    assert call(client, UNKNOWN_KEY, address="10.0.0.1", **behind).status_code == 401
    assert call(client, UNKNOWN_KEY, address="10.0.0.1", **behind).status_code == 429
    other = {"X-Forwarded-For": OTHER_ADDRESS}
    assert call(client, UNKNOWN_KEY, address="10.0.0.1", **other).status_code == 401
    recorded = FailedAuthentication.objects.order_by("pk").values_list("client_address", flat=True)
    assert list(recorded) == [ADDRESS, OTHER_ADDRESS]


# --- append-only, and pruned with the audit log ----------------------------------------------


@pytest.fixture
def failures(client: Client, db: None) -> list[FailedAuthentication]:
    for _ in range(2):
        call(client, UNKNOWN_KEY)
    return list(FailedAuthentication.objects.order_by("pk"))


def _fields(row: FailedAuthentication) -> dict[str, Any]:
    return {f.attname: getattr(row, f.attname)
            for f in FailedAuthentication._meta.concrete_fields if f.attname != "id"}


def snapshot() -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM audit_failedauthentication ORDER BY id")
        return list(cursor.fetchall())


_NAMES = "id, at, request_id, client_address, method, path, reason, key_prefix"
_COPY = f"({_NAMES}) SELECT {_NAMES} FROM audit_failedauthentication"
STATEMENTS = {
    "update": ({"sqlite", "postgresql"}, "UPDATE audit_failedauthentication SET reason = 'x'"),
    "delete": ({"sqlite", "postgresql"}, "DELETE FROM audit_failedauthentication"),
    "upsert": ({"sqlite", "postgresql"},
               f"INSERT INTO audit_failedauthentication {_COPY} WHERE id = (SELECT MIN(id) "
               "FROM audit_failedauthentication) ON CONFLICT (id) DO UPDATE SET reason = 'x'"),
    "insert or replace": ({"sqlite"}, f"INSERT OR REPLACE INTO audit_failedauthentication {_COPY}"),
    "truncate": ({"postgresql"}, "TRUNCATE audit_failedauthentication"),
}


@pytest.mark.parametrize("statement", STATEMENTS)
def test_the_database_refuses_to_change_or_remove_a_record(
    failures: list[FailedAuthentication], statement: str
) -> None:
    vendors, sql = STATEMENTS[statement]
    if connection.vendor not in vendors:
        pytest.skip(f"{connection.vendor} has no {statement.upper()}")
    before = snapshot()
    assert len(before) == 2
    with pytest.raises(Error, match="append-only"), transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute(sql)
    assert snapshot() == before


def test_pruneauditlog_removes_only_the_records_older_than_audit_log_days(
    failures: list[FailedAuthentication], settings: Any, capsys: Any
) -> None:
    settings.AUDIT_LOG_DAYS = 30
    now = timezone.now()
    template = _fields(failures[0])
    old = [FailedAuthentication.objects.create(**{**template, "at": now - timedelta(days=d)})
           for d in (31, 400)]
    kept = FailedAuthentication.objects.create(**{**template, "at": now - timedelta(days=29)})
    # Not without the command's permit, however old.
    with pytest.raises(Error, match="append-only"), transaction.atomic():
        FailedAuthentication.objects.filter(pk=old[1].pk).delete()
    call_command("pruneauditlog")
    assert "0 API audit-log entries and 2 failed authentications" in capsys.readouterr().out
    assert not FailedAuthentication.objects.filter(pk__in=[r.pk for r in old]).exists()
    assert FailedAuthentication.objects.filter(
        pk__in=[kept.pk, *(r.pk for r in failures)]).count() == 3
    assert PrunePermit.objects.get().removed == 2


# --- the admin ------------------------------------------------------------------------------


def test_auditors_read_the_failures_in_the_admin_and_change_nothing(
    client: Client, failures: list[FailedAuthentication]
) -> None:
    call(Client(), UNKNOWN_KEY, address=OTHER_ADDRESS)
    auditor = User.objects.create_user("auditor", password="x", is_staff=True)
    auditor.groups.add(Group.objects.get(name="Auditors"))
    client.force_login(auditor)
    changelist = "/admin/audit/failedauthentication/"
    listing = client.get(changelist)
    assert listing.status_code == 200
    assert len(listing.context["cl"].result_list) == 3
    found = client.get(changelist, {"q": OTHER_ADDRESS}).context["cl"].result_list
    assert [row.client_address for row in found] == [OTHER_ADDRESS]
    assert client.get(changelist, {"reason__exact": "unknown"}).status_code == 200
    row = failures[0]
    page = client.get(f"{changelist}{row.pk}/change/").content.decode()
    assert ADDRESS in page and "Save" not in page
    assert client.get(f"{changelist}add/").status_code == 403
    assert client.post(f"{changelist}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert FailedAuthentication.objects.filter(pk=row.pk).exists()
    # Staff without the Auditors' permission see nothing of it.
    client.force_login(User.objects.create_user("clerk", password="x", is_staff=True))
    assert client.get(changelist).status_code == 403

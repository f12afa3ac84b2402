"""Tenant isolation enforced by PostgreSQL's row-level security (receipts/rowsecurity.py), as
an operator deploys it: `migrate` runs as the owner with DATABASE_SITE_ROLE naming the site
role, and gunicorn runs as that role, which owns nothing, is no superuser and cannot bypass
row-level security.

The role is made here, under a name of its own, on the suite's server, and dropped at the end.
Raw SQL run as that role against the live site's database shows what the policies allow; the
live site then serves two tenants over HTTP and never crosses them. SQLite has no row-level
security: the module is skipped there.
"""

from __future__ import annotations

import http.cookiejar
import re
import secrets
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from receiptsite.receipts.rowsecurity import SCOPED
from tests.conftest import example_body
from tests.livesite import LiveSite, admin_connect, is_postgres, suite_database_url

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not is_postgres(suite_database_url()),
        reason="row-level security is PostgreSQL's; SQLite has none (run with DATABASE_URL)",
    ),
]

psycopg = pytest.importorskip("psycopg")


def as_role(url: str, role: str) -> str:
    """`url` with the role as its user (the server trusts loopback connections)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    netloc = f"{role}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


@dataclass
class RoleSite(LiveSite):
    """A live site migrated by the owner (the suite's role) and served as `role`."""

    role: str = ""
    other_key: str = ""
    ids: dict[str, list[str]] = field(default_factory=dict)

    def _serve(self, ready: tuple[int, ...] = (200,)) -> None:
        owner = self.base_env["DATABASE_URL"]
        self.base_env["DATABASE_URL"] = as_role(owner, self.role)
        try:
            super()._serve(ready)
        finally:
            self.base_env["DATABASE_URL"] = owner  # manage.py commands run as the owner

    def connect(self) -> Any:
        """A raw connection to the site's database as the site role."""
        return psycopg.connect(as_role(self.database_url, self.role), connect_timeout=10)


def publish(site: RoleSite, key: str, **changes: Any) -> str:
    answer = site.post("/api/receipts", example_body(**changes), key=key)
    assert answer.status == 201, answer
    receipt_id: str = answer.json()["id"]
    return receipt_id


@pytest.fixture(scope="module")
def site() -> Iterator[RoleSite]:
    server = suite_database_url()
    role = f"receiptsite_site_{secrets.token_hex(5)}"
    with admin_connect(server) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
    try:
        live = RoleSite(workers=2, role=role, env={"DATABASE_SITE_ROLE": role})
        with live:
            live.other_key = live.add_tenant("globex", "Globex")
            acme = [publish(live, live.api_key, idempotency_key=f"acme-{i}") for i in range(3)]
            parent = publish(
                live, live.api_key, idempotency_key="acme-parent", phase="completion",
                subject={"type": "task", "name": "acme_report"},
                links={"child_receipt_ids": [acme[0]]},
            )
            globex = [
                publish(live, live.other_key, idempotency_key=f"globex-{i}",
                        subject={"type": "tool", "name": f"globex_tool_{i}"})
                for i in range(2)
            ]
            live.ids = {"acme": [*acme, parent], "globex": globex}
            yield live
    finally:
        with admin_connect(server) as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")


def tenant_id(site: RoleSite, slug: str) -> int:
    with psycopg.connect(site.database_url) as owner:
        row = owner.execute("SELECT id FROM receipts_tenant WHERE slug = %s", [slug]).fetchone()
    assert row is not None
    return int(row[0])


def as_tenant(conn: Any, tenant: int) -> None:
    """What the site does first in a tenant request's transaction."""
    conn.execute("SELECT set_config('app.tenant_id', %s, true)", [str(tenant)])


# --- the role ----------------------------------------------------------------------------------


def test_the_site_role_is_no_superuser_owns_no_table_and_cannot_bypass(site: RoleSite) -> None:
    with site.connect() as conn:
        assert conn.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone() == (False, False)
        owned = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' "
            "AND tableowner = current_user"
        ).fetchone()
        assert owned == (0,)
        secured = {
            name for (name,) in conn.execute(
                "SELECT relname FROM pg_class WHERE relrowsecurity AND relkind = 'r'"
            )
        }
        tables = {name for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert "receipts_receipt" in secured
        assert secured == {s.table for s in SCOPED} & tables


def test_the_site_role_may_not_truncate_or_lift_the_guard(site: RoleSite) -> None:
    with site.connect() as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("TRUNCATE receipts_receipt")
        conn.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SET session_replication_role = replica")


# --- raw SQL as the site role ----------------------------------------------------------------


def test_without_a_tenant_nothing_is_listed_or_found(site: RoleSite) -> None:
    with site.connect() as conn:
        assert conn.execute("SELECT count(*) FROM receipts_receipt").fetchone() == (0,)
        found = conn.execute(
            "SELECT count(*) FROM receipts_receipt WHERE public_id = %s", [site.ids["acme"][0]]
        ).fetchone()
        assert found == (0,)


def test_a_tenant_sees_only_its_own_rows(site: RoleSite) -> None:
    acme, globex = tenant_id(site, "acme"), tenant_id(site, "globex")
    with site.connect() as conn:
        as_tenant(conn, acme)
        listed = {str(r[0]) for r in conn.execute("SELECT public_id FROM receipts_receipt")}
        assert listed == set(site.ids["acme"])
        other = conn.execute(
            "SELECT count(*) FROM receipts_receipt WHERE tenant_id = %s OR public_id = %s",
            [globex, site.ids["globex"][0]],
        ).fetchone()
        assert other == (0,)


def test_a_tenant_cannot_update_or_delete_any_receipt(site: RoleSite) -> None:
    # Receipts are append-only: the site role holds no UPDATE or DELETE privilege on them, so
    # another tenant's rows (which it could not even see) and its own are refused alike; and
    # the trigger behind that refuses the owner too.
    acme, globex = tenant_id(site, "acme"), tenant_id(site, "globex")
    for statement, params in [
        ("UPDATE receipts_receipt SET workflow_id = 'moved' WHERE tenant_id = %s", [globex]),
        ("DELETE FROM receipts_receipt WHERE public_id = %s", [site.ids["globex"][0]]),
        ("UPDATE receipts_receipt SET workflow_id = 'moved' WHERE tenant_id = %s", [acme]),
    ]:
        with site.connect() as conn:
            as_tenant(conn, acme)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement, params)


def _copy_statement(conn: Any) -> str:
    """INSERT a copy of one visible receipt under a new id, for the tenant given as %s."""
    columns = [
        name for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'receipts_receipt' AND column_name <> 'id' "
            "ORDER BY ordinal_position"
        )
    ]
    values = {"tenant_id": "%s", "public_id": "gen_random_uuid()", "idempotency_key": "NULL"}
    chosen = ", ".join(values.get(c, c) for c in columns)
    return (
        f"INSERT INTO receipts_receipt ({', '.join(columns)}) "
        f"SELECT {chosen} FROM receipts_receipt LIMIT 1"
    )


def test_a_tenant_cannot_insert_a_row_for_another_tenant(site: RoleSite) -> None:
    acme, globex = tenant_id(site, "acme"), tenant_id(site, "globex")
    with site.connect() as conn:
        as_tenant(conn, acme)
        statement = _copy_statement(conn)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            conn.execute(statement, [globex])
        conn.rollback()
        # The same statement for its own tenant is allowed (and rolled back: the database is
        # the live site's, and its log must keep matching its receipts).
        as_tenant(conn, acme)
        assert conn.execute(statement, [acme]).rowcount == 1
        conn.rollback()


def test_the_tenant_setting_ends_with_its_transaction(site: RoleSite) -> None:
    with site.connect() as conn:
        as_tenant(conn, tenant_id(site, "acme"))
        assert conn.execute("SELECT count(*) FROM receipts_receipt").fetchone() != (0,)
        conn.commit()
        assert conn.execute("SELECT count(*) FROM receipts_receipt").fetchone() == (0,)


def test_the_public_path_reads_one_receipt_by_id_and_cannot_list(site: RoleSite) -> None:
    wanted = site.ids["globex"][1]
    with site.connect() as conn:
        conn.execute("SELECT set_config('app.receipt_ids', %s, false)", [wanted])
        rows = [str(r[0]) for r in conn.execute("SELECT public_id FROM receipts_receipt")]
        assert rows == [wanted]
        counted = conn.execute(
            "SELECT count(*) FROM receipts_receipt WHERE public_id <> %s", [wanted]
        ).fetchone()
        assert counted == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            conn.execute(_copy_statement(conn), [tenant_id(site, "globex")])


def test_the_auditor_setting_reads_every_tenant(site: RoleSite) -> None:
    with site.connect() as conn:
        conn.execute("SELECT set_config('app.auditor', 'on', true)")
        count = conn.execute("SELECT count(*) FROM receipts_receipt").fetchone()
        assert count == (len(site.ids["acme"]) + len(site.ids["globex"]),)


# --- the live site, running as the site role ---------------------------------------------------


def test_each_tenant_lists_its_own_receipts_only(site: RoleSite) -> None:
    for key, slug in ((site.api_key, "acme"), (site.other_key, "globex")):
        answer = site.get("/api/receipts?limit=200", key=key)
        assert answer.status == 200, answer
        assert {r["id"] for r in answer.json()["receipts"]} == set(site.ids[slug])


def test_a_detail_of_another_tenants_receipt_is_not_found(site: RoleSite) -> None:
    own = site.get(f"/api/receipts/{site.ids['acme'][1]}", key=site.api_key)
    assert own.status == 200, own
    assert own.json()["document"]["id"] == site.ids["acme"][1]
    other = site.get(f"/api/receipts/{site.ids['globex'][0]}", key=site.api_key)
    assert other.status == 404, other
    mine = site.get(f"/api/receipts/{site.ids['globex'][0]}", key=site.other_key)
    assert mine.status == 200, mine


def test_ingest_replays_and_links_within_the_tenant(site: RoleSite) -> None:
    replay = site.post("/api/receipts", example_body(idempotency_key="acme-1"), key=site.api_key)
    assert replay.status == 201, replay
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json()["id"] == site.ids["acme"][1]
    # The same key in the other tenant is that tenant's own, new receipt; and a link to the
    # first tenant's receipt names nothing there.
    crossed = site.post(
        "/api/receipts",
        example_body(idempotency_key="acme-1-globex", links={"child_receipt_ids":
                                                               [site.ids["acme"][0]]}),
        key=site.other_key,
    )
    assert crossed.status == 422, crossed
    assert "/links/child_receipt_ids/0" in crossed.text
    batch = site.post(
        "/api/receipts/batch",
        {"receipts": [example_body(idempotency_key="acme-1"),
                      example_body(idempotency_key="globex-0",
                                   subject={"type": "tool", "name": "globex_tool_0"})]},
        key=site.other_key,
    )
    assert batch.status == 200, batch
    first, second = batch.json()["results"]
    assert first.get("status") == 201, first
    assert (first["status"], first["replayed"]) == (201, False)  # new: acme's key is acme's
    assert first["id"] not in site.ids["acme"]
    assert (second["status"], second["replayed"], second["id"]) == (
        201, True, site.ids["globex"][0])


def test_verify_page_and_handoff_serve_every_tenants_receipts_by_id(site: RoleSite) -> None:
    for slug in ("acme", "globex"):
        for receipt_id in site.ids[slug]:
            verified = site.get(f"/api/receipt/{receipt_id}/verify")
            assert verified.status == 200, verified
            assert verified.json()["status"] == "valid", verified
            page = site.get(f"/run/{receipt_id}")
            assert page.status == 200, page
            assert site.get(f"/run/{receipt_id}/handoff.txt").status == 200
    assert "globex_tool_1" in site.get(f"/run/{site.ids['globex'][1]}").text
    assert site.get("/healthz").status == 200


def test_a_page_names_the_receipts_it_links_to(site: RoleSite) -> None:
    parent = site.get(f"/run/{site.ids['acme'][-1]}").text
    # The child's subject, read by its id from the parent's own document.
    assert re.search(r"website_audit", parent), parent[:2000]


def test_the_admin_of_a_staff_user_reads_every_tenant(site: RoleSite) -> None:
    password = secrets.token_urlsafe(16)
    site.base_env["DJANGO_SUPERUSER_PASSWORD"] = password
    try:
        site.manage("createsuperuser", "--noinput", "--username", "auditor",
                    "--email", "auditor@example.org")
    finally:
        del site.base_env["DJANGO_SUPERUSER_PASSWORD"]
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = browser.open(site.url + "/admin/login/?next=/admin/", timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token is not None
    body = urllib.parse.urlencode({
        "csrfmiddlewaretoken": token.group(1), "username": "auditor", "password": password,
        "next": "/admin/",
    }).encode()
    browser.open(urllib.request.Request(site.url + "/admin/login/?next=/admin/", data=body),
                 timeout=30).read()
    listing = browser.open(site.url + "/admin/receipts/receipt/?all=",
                           timeout=30).read().decode()
    for receipt_id in [*site.ids["acme"], *site.ids["globex"]]:
        assert receipt_id in listing


def test_each_tenant_reads_its_own_audit_log_only(site: RoleSite) -> None:
    for key in (site.api_key, site.other_key):
        answer = site.get("/api/audit-logs?limit=200", key=key)
        assert answer.status == 200, answer
        prefixes = {entry["key_prefix"] for entry in answer.json()["entries"]}
        assert prefixes == {key[: len("rk_") + 12]}

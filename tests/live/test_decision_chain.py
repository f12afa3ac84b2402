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
import io
import json
import re
import sqlite3
import subprocess
import threading
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from receiptsite.receipts import guards_v1
from tests.conftest import example_body
from tests.db.test_decision_chain import GUARDED
from tests.livesite import PYTHON, REPO, LiveSite, is_postgres, suite_database_url

pytestmark = pytest.mark.live


# --- the record, in the suite's database ------------------------------------------------------


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
                "receipt": receipt,  # the admin's add form takes the receipt's id
                "output_hash": site.get(f"/api/receipt/{receipt}/verify").json()["output_hash"],
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
def test_two_auditors_correcting_one_decision_at_once_get_a_form_error_on_postgresql() -> None:
    """Two auditors correct the same decision at once, in the admin and on the page: a session
    of the test holds the record's lock, so both have read that the decision is still open
    before either may store. One correction is stored; the other auditor gets a form error
    (the admin: 200 with the form, the page: 422), never a 500."""
    if not is_postgres(suite_database_url()):
        pytest.skip("SQLite has one writer at a time (BEGIN IMMEDIATE): saves cannot race")
    import psycopg

    from receiptsite.review.chain import CHAIN_LOCK

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
        desks = [Desk(site, "ada", "pw-for-tests-only") for _ in range(2)]
        first = desks[0].get(f"/run/{receipt}")
        for n in range(2):  # two decisions to correct: one in the admin, one on the page
            status, _ = desks[0].post(
                f"/run/{receipt}/decisions",
                {"conclusion": "accepted", "follow_up": f"first {n}", "output_hash": output_hash},
                page=first,
            )
            assert status == 302
        ids = sorted(int(row["decision_id"]) for row in desks[0].csv())

        def race(path: str, fields: dict[str, str], pages: list[str]) -> list[tuple[int, str]]:
            answers: list[tuple[int, str]] = []

            def save(n: int) -> None:
                answers.append(desks[n].post(path, {**fields, "follow_up": f"by {n}"},
                                             page=pages[n]))

            with psycopg.connect(site.database_url) as holder:
                holder.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK])
                threads = [threading.Thread(target=save, args=(n,)) for n in range(2)]
                for thread in threads:
                    thread.start()
                with psycopg.connect(site.database_url, autocommit=True) as watcher:
                    for _ in range(300):
                        (waiting,) = watcher.execute(  # type: ignore[misc]
                            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                            "AND NOT granted",
                        ).fetchone()
                        if waiting == 2:
                            break
                        threading.Event().wait(0.05)
                    assert waiting == 2, "the saves did not both start"
                holder.rollback()  # release: the saves go on
            for thread in threads:
                thread.join()
            return sorted(answers)

        add = "/admin/receipts/reviewdecision/add/"
        answers = race(
            add,
            {"receipt": receipt, "output_hash": output_hash, "conclusion": "rejected",
             "exception_note": "", "supersedes": str(ids[0])},
            [desk.get(add) for desk in desks],
        )
        assert [status for status, _ in answers] == [200, 302], answers[0][1][:3000]
        assert "corrected meanwhile" in answers[0][1]
        answers = race(
            f"/run/{receipt}/decisions",
            {"conclusion": "rejected", "supersedes": str(ids[1]), "output_hash": output_hash},
            [desk.get(f"/run/{receipt}") for desk in desks],
        )
        assert [status for status, _ in answers] == [302, 422], answers[1][1][:3000]
        assert "corrected meanwhile" in answers[1][1]
        rows = desks[0].csv()
        assert len(rows) == 4
        assert sorted(row["supersedes"] for row in rows) == ["", "", str(ids[0]), str(ids[1])]
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

"""The restore drill of README "Backups and recovery", on a throwaway PostgreSQL cluster of
this module's own (tests/pgcluster.py), served by a real gunicorn:

1. Point-in-time recovery loses nothing: a base backup, more receipts, the WAL archived, the
   cluster lost and restored from the base backup and the archive; the site answers as before,
   every receipt verifies and the rollback guard has nothing to refuse.
2. A restore that loses receipts (an ordinary pg_dump, more receipts, pg_restore): the guard
   refuses, `continuelog` ends the log with a signed statement and continues under a new
   origin, which /healthz, the keys document and `receipt-checklog` show; a kept checkpoint of
   the ended log is followed into the new one, and one of what was lost is refused.
3. A restore older than that `continuelog` is refused again, and recovered the same way.

Its result does not depend on the suite's database (any_database): it brings its own server.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import example_body
from tests.livesite import VENV_BIN, LiveSite, admin_connect
from tests.pgcluster import PG_BIN, ThrowawayCluster

pytestmark = [
    pytest.mark.live,
    pytest.mark.any_database,
    pytest.mark.skipif(PG_BIN is None, reason="initdb and pg_ctl are not installed"),
]


class Drill:
    def __init__(self, cluster: ThrowawayCluster, site: LiveSite) -> None:
        self.cluster, self.site = cluster, site
        self.database = site.database_url.rsplit("/", 1)[1]
        self.archive = cluster.base / "archive"
        self.files = cluster.base / "files"  # what the operator keeps: backups, checkpoints

    def pg(self, *args: str) -> str:
        """A PostgreSQL client program, as the cluster's owner, against the cluster."""
        return self.cluster.run(args[0], "-h", "127.0.0.1", "-p", str(self.cluster.port),
                                "-U", "postgres", *args[1:])  # fmt: skip

    def sql(self, statement: str) -> Any:
        with admin_connect(self.cluster.url) as admin:
            cursor = admin.execute(statement)
            return cursor.fetchall() if cursor.description is not None else None

    def publish(self, name: str) -> dict[str, Any]:
        body = example_body(idempotency_key=f"drill/{name}")
        answer = self.site.post(
            "/api/receipts", body, headers={"Authorization": f"Bearer {self.site.api_key}"}
        )
        assert answer.status == 201, (answer, self.site.logs())
        return dict(answer.json())

    def verdict(self, receipt: dict[str, Any]) -> dict[str, Any]:
        answer = self.site.get(f"/api/receipt/{receipt['id']}/verify")
        return dict(answer.json()) if answer.status == 200 else {"status": answer.status}

    def keep_checkpoint(self, name: str) -> Path:
        path = self.files / name
        path.write_text(self.site.get("/api/log/checkpoint").text)
        return path

    def replace_database(self, dump: Path) -> None:
        """The site stopped, its database dropped and restored from `dump` (pg_restore)."""
        self.site.stop()
        self.sql(f'DROP DATABASE "{self.database}" WITH (FORCE)')
        self.sql(f'CREATE DATABASE "{self.database}"')
        self.pg("pg_restore", "--exit-on-error", "-d", self.database, str(dump))

    def checklog(self, *args: str) -> subprocess.CompletedProcess[str]:
        keys = self.files / "keys.json"
        keys.write_text(self.site.get("/.well-known/receipt-keys.json").text)
        return subprocess.run(
            [str(VENV_BIN / "receipt-checklog"), f"{self.site.url}/log", f"--key={keys}", *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip


@pytest.fixture(scope="module")
def drill() -> Iterator[Drill]:
    cluster = ThrowawayCluster()
    try:
        cluster.init()
        archive = cluster.base / "archive"
        files = cluster.base / "files"
        for folder in (archive, files):
            folder.mkdir()
            if cluster.as_user:  # written by the server (archive) and pg_dump (files)
                subprocess.run(["chown", "postgres:postgres", str(folder)], check=True)
        # WAL archiving, as README "Backups and recovery" sets it up.
        with open(cluster.data / "postgresql.conf", "a") as conf:
            conf.write(
                "wal_level = replica\narchive_mode = on\n"
                f"archive_command = 'test ! -f {archive}/%f && cp %p {archive}/%f'\n"
            )
        cluster.start()
        with LiveSite(workers=1, server_url=cluster.url, migrate=True) as site:
            yield Drill(cluster, site)
            if not cluster.running():
                cluster.start()
    finally:
        cluster.remove()


def test_point_in_time_recovery_loses_no_receipt(drill: Drill) -> None:
    site, cluster = drill.site, drill.cluster
    before = [drill.publish(f"pitr/{i}") for i in range(2)]
    base = cluster.base / "base"
    drill.pg("pg_basebackup", "-D", str(base), "-X", "stream", "-c", "fast")
    after = [drill.publish(f"pitr/after/{i}") for i in range(3)]
    archived = drill.sql("SELECT archived_count FROM pg_stat_archiver")[0][0]
    drill.sql("SELECT pg_switch_wal()")  # the WAL of the last receipts, archived now
    deadline = time.monotonic() + 30
    while drill.sql("SELECT archived_count FROM pg_stat_archiver")[0][0] <= archived:
        assert time.monotonic() < deadline, cluster.log()
        time.sleep(0.1)

    # The disaster: the server and its data directory are gone.
    site.stop()
    cluster.stop("immediate")
    subprocess.run([*cluster.as_user, "rm", "-rf", str(cluster.data)], check=True)
    subprocess.run([*cluster.as_user, "cp", "-a", str(base), str(cluster.data)], check=True)
    (cluster.data / "recovery.signal").touch()
    with open(cluster.data / "postgresql.auto.conf", "a") as conf:
        conf.write(f"restore_command = 'cp {drill.archive}/%f %p'\n")
    cluster.start()
    deadline = time.monotonic() + 60
    while drill.sql("SELECT pg_is_in_recovery()")[0][0]:
        assert time.monotonic() < deadline, cluster.log()
        time.sleep(0.2)
    site._serve()

    health = site.get("/healthz").json()
    assert health == {"status": "ok"}, health
    for receipt in before + after:
        verdict = drill.verdict(receipt)
        assert verdict["status"] == "valid", verdict
    assert drill.publish("pitr/next")["log_index"] == 5


def test_a_restore_that_lost_receipts_is_refused_then_continued_under_a_new_origin(
    drill: Drill,
) -> None:
    site = drill.site
    early = drill.keep_checkpoint("early.checkpoint")  # a monitor's copy, 6 leaves
    origin = early.read_text().split("\n")[0]
    dump = drill.files / "nightly.dump"
    drill.pg("pg_dump", "-Fc", "-f", str(dump), drill.database)
    lost = [drill.publish(f"dump/lost/{i}") for i in range(2)]
    late = drill.keep_checkpoint("late.checkpoint")  # 8 leaves, two of them lost below
    drill.replace_database(dump)
    site._serve(ready=(503,))

    # The guard refuses: nothing is stored, and /healthz says why.
    health = site.get("/healthz")
    assert health.status == 503
    assert "restored from an old backup" in health.json()["detail"]
    refused = site.post("/api/receipts", example_body(idempotency_key="drill/refused"),
                        headers={"Authorization": f"Bearer {site.api_key}"})  # fmt: skip
    assert refused.status == 503

    out = site.manage("continuelog", "--checkpoint", str(late))
    assert f"The log {origin} ended: it had signed 8 leaves" in out
    assert "the stored tree of 6 leaves is kept, and 2 leaves it had signed are lost" in out
    new = f"{origin}/2"
    health = site.get("/healthz")
    assert health.status == 200, health
    (ended,) = health.json()["log"]["ended"]
    assert (ended["origin"], ended["continued_as"], ended["lost"]) == (origin, new, 2)
    keys = site.get("/.well-known/receipt-keys.json").json()
    assert keys["log"]["origin"] == new and keys["log"]["ended"] == [ended]
    for receipt in lost:
        assert site.get(f"/api/receipt/{receipt['id']}/verify").status == 404
    fresh = drill.publish("dump/after")
    assert fresh["log_index"] == 6
    verdict = drill.verdict(fresh)
    assert verdict["status"] == "valid" and verdict["log"]["origin"] == new, verdict

    # A verifier's kept checkpoint of the ended log: followed into the new one when the kept
    # tree holds it, refused, by the site's own statement, when it is of what was lost.
    followed = drill.checklog(f"--against={early}")
    assert followed.returncode == 0, followed.stdout + followed.stderr
    assert f"The kept checkpoint is of the log {origin}" in followed.stdout
    refused_copy = drill.checklog(f"--against={late}")
    assert refused_copy.returncode == 1, refused_copy.stdout + refused_copy.stderr
    assert "which the site says it lost" in refused_copy.stdout


def test_a_restore_older_than_the_continuation_is_refused_and_recovered_alike(
    drill: Drill,
) -> None:
    site = drill.site
    origin = site.get("/api/log/checkpoint").text.split("\n")[0]
    drill.replace_database(drill.files / "nightly.dump")  # from before `continuelog`
    site._serve(ready=(503,))
    health = site.get("/healthz")
    assert health.status == 503 and "does not continue" in health.json()["detail"], health
    out = site.manage("continuelog")
    assert f"The log {origin} ended" in out
    assert site.get("/healthz").status == 200
    assert site.get("/api/log/checkpoint").text.startswith(f"{origin.rsplit('/', 1)[0]}/3\n6\n")

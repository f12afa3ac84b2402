"""A throwaway PostgreSQL cluster of a test's own (initdb + pg_ctl on a free loopback port):
the fault tests stop and start it, the restore drill archives its WAL and restores it. The
machine's shared PostgreSQL server is never touched."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.livesite import free_port


def _pg_bin() -> Path | None:
    candidates = [Path("/usr/lib/postgresql/15/bin"), Path("/usr/local/bin")]
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


PG_BIN = _pg_bin()


class ThrowawayCluster:
    """initdb + pg_ctl on a free loopback port, trust authentication, in a temporary directory.

    initdb refuses to run as root, so as root every PostgreSQL command runs as the `postgres`
    user (runuser), in a directory owned by it.
    """

    def __init__(self) -> None:
        assert PG_BIN is not None
        self.base = Path(tempfile.mkdtemp(prefix="receiptsite-pg-"))
        self.data = self.base / "data"
        self.sockets = self.base / "sockets"
        self.logfile = self.base / "postgres.log"
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self.sockets.mkdir()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            for path in (self.base, self.sockets):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]

    def run(self, *args: str, timeout: float = 60) -> str:
        assert PG_BIN is not None
        done = subprocess.run(
            [*self.as_user, str(PG_BIN / args[0]), *args[1:]],
            capture_output=True,
            timeout=timeout,
            cwd=self.base,
        )
        output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} failed ({done.returncode}):\n{output}\n{self.log()}"
            )
        return output

    def init(self) -> None:
        self.run(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
            "--locale=C", "--no-sync",
        )  # fmt: skip

    def start(self, *settings: str) -> None:
        """Start the server; `settings`: more `name=value` server settings (`-c`)."""
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1"
        options += "".join(f" -c {setting}" for setting in settings)
        self.run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-o", options,
            "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def running(self) -> bool:
        assert PG_BIN is not None
        done = subprocess.run(
            [*self.as_user, str(PG_BIN / "pg_ctl"), "-D", str(self.data), "status"],
            capture_output=True,
            timeout=30,
        )
        return done.returncode == 0

    def remove(self) -> None:
        try:
            if self.data.exists() and self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def log(self) -> str:
        try:
            return "--- postgres log ---\n" + self.logfile.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

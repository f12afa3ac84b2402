"""The site bench/run.py starts: its settings, its database set up, and gunicorn serving it.

- `site_environment()`: the production settings (receiptsite.settings) with RATE_LIMITS off
  and everything of the run's own in its temporary directory (the database URL, a new signing
  key, LOG_STATE_FILE, SECRET_KEY, VAR_DIR); the database itself is created, and dropped at
  exit, by bench/_common.py's `own_database()`;
- `set_up_site()`: this process switched to those settings, Django set up, `migrate`, static
  files collected, two tenants with one API key each;
- `Server`: one gunicorn with the repository's gunicorn.conf.py, started and stopped as a
  context manager, either the site (`site_server()`) or the raw WSGI baseline of
  bench/raw_wsgi.py (`raw_server()`), under the same command line;
- `http()`: one request to it, with the answer's status and body whatever the status.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import _common

from siteload.dataset import TENANTS

REPO = _common.REPO
BENCH = REPO / "bench"
VENV_BIN = (
    REPO / ".venv" / "bin" if (REPO / ".venv" / "bin").is_dir() else Path(sys.executable).parent
)
GUNICORN = VENV_BIN / "gunicorn"
START_TIMEOUT = 60  # seconds until a gunicorn answers

Tenant = tuple[int, str, str, int, str]  # (tenant id, slug, name, API key id, key prefix)


@dataclass
class Site:
    """The rows every receipt of a tenant points to, the signing key, and the raw API keys
    (by tenant) the load sends."""

    tenants: list[Tenant]
    signing_key_id: int
    keys: list[str]


def site_environment(database_url: str, tmp: Path) -> dict[str, str]:
    """The environment of this process and of every gunicorn of the run: the production
    settings, on the run's own database and files in `tmp`."""
    from receiptsite.integrity.keys import generate_private_key_pem

    key_file = tmp / "signing-key.pem"
    key_file.write_bytes(generate_private_key_pem())
    key_file.chmod(0o600)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "GUNICORN"))},
        "DJANGO_SETTINGS_MODULE": "receiptsite.settings",
        "DATABASE_URL": database_url,
        "SECRET_KEY": secrets.token_urlsafe(40),
        "SIGNING_KEY_FILE": str(key_file),
        "SITE_URL": "http://127.0.0.1",
        "ALLOWED_HOSTS": "127.0.0.1",
        "RATE_LIMITS": "off",
        "LOG_STATE_FILE": str(tmp / "log-state.json"),
        "VAR_DIR": str(tmp / "var"),
        "STATIC_ROOT": str(tmp / "static"),
        "DEBUG": "false",
        "PYTHONUNBUFFERED": "1",
    }
    # A developer's shell may name a Redis, proxies or a bind address: none is the run's.
    for name in ("REDIS_URL", "TRUSTED_PROXIES", "WEB_CONCURRENCY", "BIND", "PORT"):
        env.pop(name, None)
    return env


def set_up_site(env: dict[str, str]) -> Site:
    """This process on the run's settings (the fill, the checks and the query plans read the
    same database as the site), migrated, with the tenants of the data set."""
    os.environ.clear()
    os.environ.update(env)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command

    from receiptsite.ledger import keyring
    from receiptsite.receipts.models import ApiKey, Tenant

    call_command("migrate", verbosity=0, interactive=False)
    call_command("collectstatic", verbosity=0, interactive=False)
    tenants, keys = [], []
    for slug, name in TENANTS:
        tenant = Tenant.objects.create(slug=slug, name=name)
        key, raw = ApiKey.issue(tenant)
        tenants.append((tenant.pk, slug, name, key.pk, key.prefix))
        keys.append(raw)
    return Site(tenants=tenants, signing_key_id=keyring.active_key().row.pk, keys=keys)


def gunicorn_flags(workers: int, threads: int, connections: int) -> list[str]:
    """What the run adds to gunicorn.conf.py, for the site and the baseline alike.

    `--worker-connections`: wrk opens all its connections at one instant and keeps them alive,
    and a gthread worker accepts every connection the kernel hands it (up to 1,000). One worker
    often took all 16 while the other idled (seen in /proc/net/tcp; benoitc/gunicorn#2817):
    /healthz then served about 450 requests a second against 1,000 to 1,500 when they were
    split, and the raw baseline 1,150 against 3,000 to 3,500, at random from run to run. So each
    worker may hold only its share of wrk's connections (and at least 2 × threads), which
    splits them evenly. This is the run's, not the site's (bench/README.md says why): a proxy
    in front (deploy/nginx) opens a connection per request, so that no worker keeps
    connections it has no thread for."""
    per_worker = max(2 * threads, -(-connections // workers))
    return ["-k", "gthread", "-w", str(workers), "--threads", str(threads),
            "--worker-connections", str(per_worker)]  # fmt: skip


def http(
    url: str, method: str = "GET", body: bytes | None = None, key: str = "", timeout: float = 60
) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """One gunicorn with the repository's gunicorn.conf.py and the run's worker flags."""

    def __init__(self, app: Sequence[str], env: dict[str, str], flags: Sequence[str], tmp: Path,
                 name: str, ready: str) -> None:  # fmt: skip
        self.app, self.env, self.flags, self.tmp, self.name = app, env, flags, tmp, name
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready = ready
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.stderr_path = self.tmp / f"{self.name}.stderr"
        self.stderr = open(self.stderr_path, "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(GUNICORN), *self.app, "-c", "gunicorn.conf.py", *self.flags],
            cwd=REPO,
            env={**self.env, "BIND": f"127.0.0.1:{self.port}"},
            stdout=subprocess.DEVNULL,  # the access log: one line per request
            stderr=self.stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        # Ready when `ready` answers 200: polled, since gunicorn says nothing a parent could
        # wait on once its workers have booted.
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                self.__exit__()
                sys.exit(f"{self.name}: gunicorn exited:\n{self.stderr_path.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                if http(self.url + self.ready, timeout=2)[0] == 200:
                    return self
            if time.monotonic() > deadline:
                self.__exit__()
                sys.exit(f"{self.name}: {self.ready} did not answer 200 in {START_TIMEOUT} s")
            time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        process, self.process = self.process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=20)
            # Its own session: whatever of it outlived the master (a worker) goes too.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self.stderr.close()

    def workers(self) -> list[int]:
        """The master's children now (workers come and go with max_requests)."""
        assert self.process is not None
        master = self.process.pid
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                stat = Path(entry.path, "stat").read_text()
                if int(stat.rpartition(")")[2].split()[1]) == master:
                    found.append(int(entry.name))
        return found


def site_server(env: dict[str, str], flags: Sequence[str], tmp: Path) -> Server:
    return Server(["receiptsite.wsgi"], env, flags, tmp, "site", "/healthz")


def raw_server(env: dict[str, str], flags: Sequence[str], tmp: Path) -> Server:
    return Server(["--pythonpath", str(BENCH), "raw_wsgi:application"], env, flags, tmp, "raw", "/")

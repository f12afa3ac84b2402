"""A real site for live tests: gunicorn with the repository's gunicorn.conf.py, several worker
processes, a fresh database of its own, spoken to over HTTP only.

    with LiveSite(workers=4) as site:
        answer = site.post("/api/receipts", body)

The database is new for each site: an SQLite file in a temporary directory, or, when the
suite runs on PostgreSQL (DATABASE_URL=postgres://...), a database `receiptsite_live_<random>`
created on that server and dropped WITH (FORCE) afterwards. Another server may be given
(`server_url=`), e.g. a throwaway cluster that a test stops and starts.

The site is set up as an operator would: a migrated database, `signcheckpoint` (what `migrate`
does after its migrations: record the site's signing key and sign the empty tree),
`createtenant`, `createapikey` (its key is the last line of the output), then gunicorn; the
live tests therefore never use pytest-django's database fixtures. The migrations run once per
test run and server, into a template (`manage.py migrate` with no signing key, so it holds no
key and no checkpoint): each site's database is a copy of it (SQLite's backup of the file;
PostgreSQL's CREATE DATABASE ... TEMPLATE), and the three commands run in one process. A site
that must migrate for itself (`migrate=True`, or another server) runs
`manage.py migrate`; a copy for a DATABASE_SITE_ROLE runs it too, with nothing left to apply,
for the grants its post_migrate makes. What one run's processes share (the templates, the collected
static files) lives in the folder RECEIPTSITE_TEST_RUN names, which tests/conftest.py makes
and removes. HTTP goes through the standard library, with a timeout on every call.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
# The repository's virtual environment, else the one running the tests.
VENV_BIN = (
    REPO / ".venv" / "bin" if (REPO / ".venv" / "bin").is_dir() else Path(sys.executable).parent
)
GUNICORN = VENV_BIN / "gunicorn"
# How the README and the systemd unit start gunicorn: with the site's settings checked first
# (receiptsite/serve.py), so that every live site serves as production does.
SERVE = [str(VENV_BIN / "python"), "-m", "receiptsite.serve"]
PYTHON = VENV_BIN / "python"

# Every variable the site, its settings or gunicorn read: a live site gets exactly the values
# set below, never the suite's own (tests/settings.py puts its test values into os.environ).
SITE_VARIABLES = {
    "DATABASE_URL",
    "DATABASE_TIMEOUT",
    "DATABASE_PREPARED_STATEMENTS",
    "DATABASE_SITE_ROLE",
    "SECRET_KEY",
    "DEBUG",
    "ALLOWED_HOSTS",
    "SITE_URL",
    "SIGNING_KEY_FILE",
    "PREVIOUS_SIGNING_KEY_FILE",
    "LOG_ORIGIN",
    "RATE_LIMITS",
    "TRUSTED_PROXIES",
    "METRICS_ALLOWED_FROM",
    "METRICS_DIR",
    "PROMETHEUS_MULTIPROC_DIR",
    "LOG_STATE_FILE",
    "LOG_LEVEL",
    "VAR_DIR",
    "TEXT_LIMIT",
    "RECEIPT_MAX_BYTES",
    "BATCH_MAX_BYTES",
    "TEST_DATABASE_NAME",
    "DJANGO_SETTINGS_MODULE",
    "WEB_CONCURRENCY",
    "BIND",
    "PORT",
    "FORWARDED_ALLOW_IPS",
    "GUNICORN_CMD_ARGS",
    "GUNICORN_CONTROL_SOCKET",
    "QUICKSTART_ADDRPORT",
    "AUDIT_LOG_DAYS",
    "REDIS_URL",
    "WITNESS_POLICY_FILE",
    "WITNESS_INTERVAL",
    "STATIC_ROOT",
}

COMMAND_TIMEOUT = 120  # seconds, for one manage.py command
START_TIMEOUT = 30  # seconds until /healthz answers 200
STOP_TIMEOUT = 15  # seconds between SIGTERM and SIGKILL
HTTP_TIMEOUT = 30  # seconds, for one HTTP call unless told otherwise


def free_port() -> int:
    """A port free on the loopback interface now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def suite_database_url() -> str:
    return os.environ.get("DATABASE_URL", "")


def is_postgres(url: str) -> bool:
    return urlsplit(url).scheme in ("postgres", "postgresql")


def with_database(url: str, name: str) -> str:
    """`url` (a postgres:// URL) naming database `name` instead of its own."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(name), parts.query, ""))


def admin_connect(server_url: str) -> Any:
    """An autocommit psycopg connection to the server's maintenance database, for CREATE and
    DROP DATABASE (which cannot run inside a transaction)."""
    import psycopg

    own = unquote(urlsplit(server_url).path.lstrip("/"))
    last: Exception | None = None
    for dbname in dict.fromkeys(["postgres", own or "postgres"]):
        try:
            return psycopg.connect(
                with_database(server_url, dbname), autocommit=True, connect_timeout=10
            )
        except psycopg.OperationalError as error:
            last = error
    assert last is not None
    raise last


@dataclass
class Response:
    status: int
    headers: Message
    body: bytes
    elapsed: float  # seconds

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "")

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def __repr__(self) -> str:
        body = self.body[:2000].decode("utf-8", "replace")
        return f"<Response {self.status} {self.content_type} {body!r}>"


# --- what one test run's processes share (pytest-xdist's workers included) --------------------

RUN_FOLDER = "RECEIPTSITE_TEST_RUN"
_OWN_RUN = "_receiptsite_own_run"  # on the pytest config of the process that made the folder


def start_run(config: Any) -> None:
    """pytest_configure of both suites' conftest.py: make the run's folder in the process
    that starts the run, before pytest-xdist's workers start (they inherit it)."""
    if hasattr(config, "workerinput") or os.environ.get(RUN_FOLDER):
        return
    os.environ[RUN_FOLDER] = tempfile.mkdtemp(prefix="receiptsite-run-")
    setattr(config, _OWN_RUN, os.environ[RUN_FOLDER])


def end_run(config: Any) -> None:
    """pytest_unconfigure: in the process that made it, drop the run's templates and remove
    its folder, once the workers are done."""
    folder = getattr(config, _OWN_RUN, None)
    if folder is None:
        return
    drop_templates()
    shutil.rmtree(folder, ignore_errors=True)
    os.environ.pop(RUN_FOLDER, None)
    delattr(config, _OWN_RUN)


def run_folder() -> Path:
    """The folder of this test run's shared state (made by tests/conftest.py; made here for a
    process that uses LiveSite without it, e.g. a script)."""
    folder = os.environ.get(RUN_FOLDER)
    if not folder:
        folder = os.environ[RUN_FOLDER] = tempfile.mkdtemp(prefix="receiptsite-run-")
    return Path(folder)


@contextlib.contextmanager
def run_lock(name: str) -> Iterator[None]:
    """One process of the run at a time (a lock file in the run's folder)."""
    with open(run_folder() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def collect_static_once(site: LiveSite) -> None:
    """The site runs with DEBUG off, so WhiteNoise serves the collected, hashed files (a page
    is a 500 without their manifest): collected once per test run, before the first site
    serves, whichever process starts it."""
    done = run_folder() / "static-collected"
    with run_lock("static"):
        if not done.exists():
            site.manage("collectstatic", "--noinput", "-v", "0")
            done.touch()


TEMPLATES = "templates.json"  # PostgreSQL templates made this run: (server url, name) pairs


def template_database(server: str | None) -> str:
    """The run's migrated template for `server` (None: SQLite): a file path, or a database
    name on that server. Made by the first process that asks, under the run's lock."""
    tag = "sqlite" if server is None else hashlib.sha256(server.encode()).hexdigest()[:12]
    with run_lock(f"template-{tag}"):
        done = run_folder() / f"template-{tag}"
        if done.exists():
            return done.read_text()
        if server is None:
            name = str(run_folder() / "template.sqlite3")
            url = f"sqlite:///{name}"
        else:
            name = f"receiptsite_template_{secrets.token_hex(6)}"
            with admin_connect(server) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
            made = run_folder() / TEMPLATES
            known = json.loads(made.read_text()) if made.exists() else []
            made.write_text(json.dumps([*known, [server, name]]))
            url = with_database(server, name)
        env = {
            **{k: v for k, v in os.environ.items() if k not in SITE_VARIABLES},
            "DJANGO_SETTINGS_MODULE": "receiptsite.settings",
            "DATABASE_URL": url,
            "SECRET_KEY": secrets.token_urlsafe(40),
            # No signing key: the template holds no key and no checkpoint; each site's own
            # key signs its empty tree (`signcheckpoint`), as its `migrate` would have.
            "DEBUG": "true",
            "LOG_STATE_FILE": str(run_folder() / f"template-{tag}-log-state.json"),
            "VAR_DIR": str(run_folder() / "var"),
        }
        _run_manage(env, "migrate", "--noinput", "-v", "0")
        done.write_text(name)
        return name


def drop_templates() -> None:
    """Drop the PostgreSQL templates this run made (tests/conftest.py, at the run's end)."""
    made = run_folder() / TEMPLATES
    for server, name in json.loads(made.read_text()) if made.exists() else []:
        with contextlib.suppress(Exception), admin_connect(server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _run_manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(PYTHON), "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=COMMAND_TIMEOUT,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"manage.py {' '.join(args)} failed ({done.returncode}):\n"
            f"{done.stdout.decode(errors='replace')}\n{done.stderr.decode(errors='replace')}"
        )
    return done.stdout.decode()


@dataclass
class LiveSite:
    """One gunicorn serving the site on a free loopback port, with a database of its own."""

    workers: int = 4
    server_url: str | None = None  # a PostgreSQL server; None: the suite's choice
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the site
    tenant: str = "acme"
    tenant_name: str = "Acme Corp"
    migrate: bool = False  # run `manage.py migrate` rather than copy the run's template

    port: int = 0
    url: str = ""
    api_key: str = ""
    tmp: Path = field(default_factory=Path)
    database_url: str = ""
    _process: subprocess.Popen[bytes] | None = None
    _dropdb: tuple[str, str] | None = None  # (server url, database name) to drop at the end
    _template: str | None = None  # the run's template this site's database copies

    # --- life cycle --------------------------------------------------------------------------

    def __enter__(self) -> LiveSite:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def start(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="receiptsite-live-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._create_database()
        key_file = self.tmp / "signing-key.pem"
        from receiptsite.integrity.keys import generate_private_key_pem

        key_file.write_bytes(generate_private_key_pem())
        key_file.chmod(0o600)
        self.base_env = {
            **{k: v for k, v in os.environ.items() if k not in SITE_VARIABLES},
            "DJANGO_SETTINGS_MODULE": "receiptsite.settings",
            "DATABASE_URL": self.database_url,
            "SECRET_KEY": secrets.token_urlsafe(40),
            "SIGNING_KEY_FILE": str(key_file),
            "SITE_URL": self.url,
            "ALLOWED_HOSTS": "127.0.0.1",
            "RATE_LIMITS": "off",
            "LOG_STATE_FILE": str(self.tmp / "log-state.json"),
            "VAR_DIR": str(self.tmp / "var"),
            # The run's own: two runs at once (.ci/run's) never write each other's files.
            "STATIC_ROOT": str(run_folder() / "static"),
            "DEBUG": "false",
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        if self._template is None:
            self.manage("migrate", "--noinput")
            self.api_key = self.add_tenant(self.tenant, self.tenant_name)
        else:
            # What `migrate` does after its migrations, then the tenant and its key: one
            # process (each manage.py start costs about a second of CPU).
            # `migrate` with nothing left to apply where a site role is to be granted what
            # it needs (its post_migrate does that, and signs), else `signcheckpoint`.
            first = "c('migrate', verbosity=0)" if "DATABASE_SITE_ROLE" in self.env else (
                "c('signcheckpoint')")
            output = self.manage("shell", "-c", (
                "from django.core.management import call_command as c; "
                f"{first}; c('createtenant', {self.tenant!r}, '--name', "
                f"{self.tenant_name!r}); c('createapikey', {self.tenant!r})"
            ))
            self.api_key = _last_line(output)
        collect_static_once(self)
        self._serve()

    def add_tenant(self, slug: str, name: str) -> str:
        """Create a tenant and one API key for it; return the key."""
        self.manage("createtenant", slug, "--name", name)
        return _last_line(self.manage("createapikey", slug))

    def manage(self, *args: str) -> str:
        """Run a manage.py command against this site's database; its stdout."""
        return _run_manage(self.base_env, *args)

    def _serve(self, ready: tuple[int, ...] = (200,)) -> None:
        """Start gunicorn and wait until /healthz answers one of `ready` (a site refusing
        its log, after a restore, answers 503 and is up)."""
        env = {
            **self.base_env,
            "WEB_CONCURRENCY": str(self.workers),
            "BIND": f"127.0.0.1:{self.port}",
        }
        self._stdout = open(self.tmp / "gunicorn.stdout", "wb")  # noqa: SIM115
        self._stderr = open(self.tmp / "gunicorn.stderr", "wb")  # noqa: SIM115
        self._process = subprocess.Popen(
            SERVE,
            cwd=REPO,
            env=env,
            stdout=self._stdout,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group, so stop() reaches every worker
        )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"gunicorn exited with {self._process.returncode} before answering:\n"
                    f"{self.logs()}"
                )
            try:
                if self.get("/healthz", timeout=2).status in ready:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"/healthz did not answer {ready} within {START_TIMEOUT} s:\n{self.logs()}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop gunicorn: SIGTERM (graceful), then SIGKILL to its process group if it hangs."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_TIMEOUT)
        # Workers left behind by a master that died or hung: the group is ours (its id is
        # the master's pid, from start_new_session).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_TIMEOUT)
        for stream in (self._stdout, self._stderr):
            stream.close()

    def close(self) -> None:
        """Stop gunicorn, drop the database, remove the temporary directory. Idempotent."""
        try:
            self.stop()
        finally:
            try:
                self._drop_database()
            finally:
                if self.tmp != Path() and self.tmp.exists():
                    # Keep the logs readable after the directory is gone.
                    self._final_logs = self.logs()
                    shutil.rmtree(self.tmp, ignore_errors=True)

    # --- database --------------------------------------------------------------------------

    def _create_database(self) -> None:
        server = self.server_url or suite_database_url()
        postgres = bool(server) and is_postgres(server)
        own = self.migrate or self.server_url is not None
        self._template = None if own else template_database(server if postgres else None)
        if postgres:
            name = f"receiptsite_live_{secrets.token_hex(6)}"
            template = f' TEMPLATE "{self._template}"' if self._template else ""
            with admin_connect(server) as admin:
                _create_with_retry(admin, f'CREATE DATABASE "{name}"{template}')
            self._dropdb = (server, name)
            self.database_url = with_database(server, name)
        else:
            path = self.tmp / "db.sqlite3"
            if self._template is not None:
                with contextlib.closing(sqlite3.connect(self._template)) as source, \
                        contextlib.closing(sqlite3.connect(path)) as copy:
                    source.backup(copy)
            self.database_url = f"sqlite:///{path}"

    def _drop_database(self) -> None:
        target, self._dropdb = self._dropdb, None
        if target is None:
            return
        server, name = target
        with admin_connect(server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    # --- logs --------------------------------------------------------------------------------

    def stdout(self) -> str:
        return self._read("gunicorn.stdout")

    def stderr(self) -> str:
        return self._read("gunicorn.stderr")

    def logs(self) -> str:
        if getattr(self, "_final_logs", None) is not None:
            return str(self._final_logs)
        return f"--- gunicorn stdout ---\n{self.stdout()}\n--- gunicorn stderr ---\n{self.stderr()}"

    def _read(self, name: str) -> str:
        for stream in (getattr(self, "_stdout", None), getattr(self, "_stderr", None)):
            if stream is not None and not stream.closed:
                stream.flush()
        try:
            return (self.tmp / name).read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    # --- HTTP ------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = HTTP_TIMEOUT,
    ) -> Response:
        """One HTTP call; any status is returned, never raised. `key`: a bearer API key."""
        data: bytes | None = None
        sent = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return Response(
                    answer.status, answer.headers, answer.read(), time.monotonic() - started
                )
        except urllib.error.HTTPError as error:
            with error:
                return Response(error.code, error.headers, error.read(), time.monotonic() - started)

    def get(self, path: str, **options: Any) -> Response:
        return self.request("GET", path, **options)

    def post(self, path: str, body: Any, **options: Any) -> Response:
        options.setdefault("key", self.api_key)
        return self.request("POST", path, body, **options)


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    assert lines, "the command printed nothing"
    return lines[-1]


def _create_with_retry(admin: Any, statement: str) -> None:
    """CREATE DATABASE ... TEMPLATE is refused while another session copies the same
    template ("source database ... is being accessed by other users"): try again briefly."""
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            admin.execute(statement)
            return
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)

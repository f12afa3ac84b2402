"""Small fixtures shared by the suite. Tests run against a real database: SQLite by default,
PostgreSQL when DATABASE_URL says so (.ci/run runs both).

The tests are laid out by what they cost, one folder each, and every module carries its
folder's marker (checked at collection, below): tests/unit (in this process, no database),
tests/db (in this process, the database through pytest-django), tests/live (real processes of
the site: gunicorn, manage.py) and tests/browser (Debian's Chromium, on a live site).
`scripts/test -m "not live and not browser"` is the fast loop."""

from __future__ import annotations

import base64
import copy
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.db import connection
from django.test import Client
from django.utils import timezone

from receiptsite.integrity.keys import jwk_thumbprint, public_raw
from receiptsite.ledger import key_history, keyring
from receiptsite.receipts.models import ApiKey, Receipt, SigningKey, Tenant
from tests.examples import EXAMPLE_BODY
from tests.livesite import end_run, start_run

SITE = "https://receipts.example.org"
TESTS = Path(__file__).resolve().parent
# A folder's marks: what its modules' `pytestmark` must hold, no more and no less.
COSTS = {"unit": {"unit"}, "db": {"db"}, "live": {"live"}, "browser": {"browser", "live"}}



def example_body(**changes: Any) -> dict[str, Any]:
    """The example body with top-level fields changed; a value of None removes the field."""
    body = copy.deepcopy(EXAMPLE_BODY)
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def remember_a_tree_not_stored(
    settings: Any, size: int = 10, root: bytes = b"\x01" * 32, origin: str | None = None
) -> None:
    """The site remembers (LOG_STATE_FILE) a signed tree of `size` leaves and this `root`, of
    the log `origin` (default LOG_ORIGIN), that the database does not hold: as after a restore
    from a backup older than that tree."""
    Path(settings.LOG_STATE_FILE).write_text(json.dumps({
        "origin": origin or settings.LOG_ORIGIN, "tree_size": size,
        "root_hash": base64.b64encode(root).decode(),
    }))  # fmt: skip


@pytest.fixture(autouse=True)
def isolated_log_state(settings: Any, tmp_path: Any) -> Iterator[None]:
    """Each test's database starts with an empty log, so the remembered largest signed tree
    (LOG_STATE_FILE) must start empty too; and the cached signing-key row must be forgotten
    when the database rolls back."""
    settings.LOG_STATE_FILE = tmp_path / "log-state.json"
    keyring.forget()
    yield
    keyring.forget()


@pytest.fixture
def tenant(db: None) -> Tenant:
    return Tenant.objects.create(slug="acme", name="Acme Corp")


@pytest.fixture
def other_tenant(db: None) -> Tenant:
    return Tenant.objects.create(slug="globex", name="Globex")


@pytest.fixture
def api_key(tenant: Tenant) -> str:
    return ApiKey.issue(tenant)[1]


@pytest.fixture
def other_key(other_tenant: Tenant) -> str:
    return ApiKey.issue(other_tenant)[1]


class Producer:
    """A test client that speaks the API as a producer does."""

    def __init__(self, client: Client, key: str) -> None:
        self.client, self.key = client, key

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", **extra}

    def post(self, body: Any, path: str = "/api/receipts", **extra: str) -> Any:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.client.post(
            path, data=data, content_type="application/json", headers=self.headers(**extra)
        )

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(path, params, headers=self.headers())

    def publish(self, **changes: Any) -> dict[str, Any]:
        response = self.post(example_body(**changes))
        assert response.status_code == 201, response.content
        answer: dict[str, Any] = response.json()
        return answer


@pytest.fixture
def producer(client: Client, api_key: str) -> Producer:
    return Producer(client, api_key)


@pytest.fixture
def other_producer(other_key: str) -> Producer:
    return Producer(Client(), other_key)


def command_line(*positional: str, **options: Any) -> list[str]:
    """A management command's arguments as an operator types them: options first, then `--`
    before the positionals. A kid is base64url, and one in 64 begins with `-`, which a command
    line without `--` reads as an option (call_command puts required options given as keywords
    after the positionals, so `--` cannot simply be added there)."""
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
    return [*flags, "--", *positional]


def mark_compromised(kid: str | None = None, at: datetime | None = None) -> SigningKey:
    """Mark the key `kid` (default: the active one) compromised as of `at` (default: now)
    behind the site's back, as another process might, and nothing else: its statement in the
    keys' history (key_history.py), signed by a key of the test's own, then its row (the
    database refuses a status no statement records)."""
    key = (SigningKey.objects.get(kid=kid) if kid is not None
           else SigningKey.objects.get(status=SigningKey.ACTIVE))
    signer = Ed25519PrivateKey.generate()
    return key_history.key_status_record(
        kid=key.kid,
        public=bytes(key.public_key),
        status=SigningKey.COMPROMISED,
        taking_over=key_history.Signer(jwk_thumbprint(public_raw(signer)), signer),
        compromised_at=at or timezone.now(),
    )


def row_security_statements(route: str) -> int:
    """What PostgreSQL's row-level security adds to the statements of one request, as a test
    counts them (inside the test's transaction, a request's BEGIN and COMMIT are a SAVEPOINT
    and its RELEASE): a tenant route's `set_config` and that pair, a public route of one
    receipt its `set_config` and the reset after. Nothing on SQLite (receipts/rowsecurity.py)."""
    if connection.vendor != "postgresql":
        return 0
    return {"tenant": 3, "receipt": 2}[route]


def lift_guard(table: str) -> None:
    """The one documented maintenance path around the append-only triggers, for tests only:
    drop the table's triggers inside the test's transaction (rolled back after the test)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"DROP TRIGGER {table}_append_only ON {table}")
        else:
            cursor.execute(f"DROP TRIGGER {table}_no_update")


def tamper(receipt_id: str, **columns: Any) -> None:
    """Change a stored receipt behind the site's back."""
    lift_guard("receipts_receipt")
    Receipt.objects.filter(public_id=receipt_id).update(**columns)


def assert_problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    """An RFC 9457 problem answer with this status and type."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == f"{SITE}/problems/{slug}"
    assert body["status"] == status
    assert body["title"] and body["detail"]
    return body


def count_receipts() -> int:
    return Receipt.objects.count()


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """unix://... of a redis-server of the test module's own, without persistence (never the
    machine's shared Redis)."""
    import redis

    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    folder = tmp_path_factory.mktemp("redis")
    sock = folder / "redis.sock"
    process = subprocess.Popen(
        [server, "--port", "0", "--unixsocket", str(sock), "--save", "",
         "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"unix://{sock}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if redis.Redis.from_url(url).ping():
                    break
            except redis.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start (exit {process.poll()})")
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=15)


def pytest_configure(config: pytest.Config) -> None:
    start_run(config)  # the folder the run's processes share (tests/livesite.py)


def pytest_unconfigure(config: pytest.Config) -> None:
    end_run(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each of the site's test modules sits in the folder of its cost and says so."""
    for item in items:
        path = Path(str(item.path)).resolve()
        if not path.is_relative_to(TESTS):
            continue  # the client's tests (clients/python/tests)
        folder = path.relative_to(TESTS).parts[0]
        if folder not in COSTS:
            raise pytest.UsageError(f"{item.nodeid}: a test module lives in tests/unit, "
                                    "tests/db, tests/live or tests/browser, by what it needs")
        marks = {m.name for m in item.iter_markers()} & {"unit", "db", "live", "browser"}
        if marks != COSTS[folder]:
            raise pytest.UsageError(f"{item.nodeid}: a test in tests/{folder} must be marked "
                                    f"{sorted(COSTS[folder])}, not {sorted(marks)}")
        if folder == "unit" and {"db", "transactional_db"} & set(getattr(item, "fixturenames", ())):
            raise pytest.UsageError(f"{item.nodeid}: uses the database, so it belongs in "
                                    "tests/db")


def flush_redis(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


@pytest.fixture(params=["database", "redis"])
def store(request: pytest.FixtureRequest, db: None, settings: Any) -> str:
    """Where the rate limits' buckets are: the database (REDIS_URL unset), or Redis."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        flush_redis(url)
        settings.REDIS_URL = url
    else:
        settings.REDIS_URL = None
    return str(request.param)


@pytest.fixture
def auditor(db: None) -> Any:
    """A staff user in the Auditors group (`ada`)."""
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user("ada", password="pw-for-tests-only", is_staff=True)
    user.groups.add(Group.objects.get(name="Auditors"))
    return user


def signed_in(user: Any) -> Client:
    """A test client signed in as `user`."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def own_key_file(settings: Any, tmp_path: Path) -> None:
    """compromisekey writes the new key in place of the compromised one: in a copy of the
    suite's key file, never over the file the tests after this one read."""
    copy = tmp_path / "suite-key.pem"
    copy.write_bytes(Path(settings.SIGNING_KEY_FILE).read_bytes())
    settings.SIGNING_KEY_FILE = str(copy)

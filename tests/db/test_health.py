"""/healthz as a load balancer uses it: on the host's private address, whatever the Host, and a
readiness answer that says why it is not ready (the database, the signing key, the log's
guard; with a witness policy, how far the witnessed checkpoint is behind). Live, against
gunicorn and its log: tests/live/test_health_private.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import OperationalError
from django.test import Client

from receiptsite.ledger import log
from tests.conftest import SITE, Producer, assert_problem, remember_a_tree_not_stored
from tests.db.test_witnesses import cosign, one_of_two

pytestmark = pytest.mark.db

PRIVATE = "10.0.0.5:8000"  # the host's private address, as a load balancer names it


def test_healthz_answers_on_the_private_address_whatever_the_host(
    client: Client, db: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        for host in (PRIVATE, "10.0.0.5", "[fd00::5]:8000", "internal-lb.example"):
            response = client.get("/healthz", HTTP_HOST=host)
            assert response.status_code == 200, (host, response.content)
            assert response.json() == {"status": "ok"}
    assert caplog.records == []  # no DisallowedHost, no traceback


def test_every_other_path_keeps_its_host_check(client: Client, db: None) -> None:
    for path in ("/api/log/checkpoint", "/", "/healthz/", "/healthz.json"):
        assert client.get(path, HTTP_HOST=PRIVATE).status_code == 400, path


def checks(response: Any) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["result"], c["detail"]) for c in response.json()["checks"]}


def test_without_a_key_healthz_says_the_key_and_that_the_rest_is_sound(
    client: Client, db: None, settings: Any
) -> None:
    settings.SIGNING_KEY = None
    response = client.get("/healthz", HTTP_HOST=PRIVATE)
    body = assert_problem(response, 503, "cannot-sign")
    assert body["detail"] == (
        "The site has no signing key it may use: SIGNING_KEY_FILE is not set."
    )
    assert checks(response) == {
        "database": ("pass", "it answers"),
        "signing_key": ("fail", body["detail"]),
        "log": ("pass", "signed at 0 leaves, and sound"),
    }


def test_a_log_the_guard_refuses_is_said_with_its_reason(
    producer: Producer, client: Client, settings: Any
) -> None:
    producer.publish()
    remember_a_tree_not_stored(settings)
    response = client.get("/healthz")
    body = assert_problem(response, 503, "log-not-signed")
    result, detail = checks(response)["log"]
    assert result == "fail" and detail == body["detail"]
    assert "a tree of 10 leaves was signed before" in detail
    assert checks(response)["signing_key"] == ("pass", "the configured key may sign")


def test_a_database_that_does_not_answer_is_said_and_nothing_else_is_guessed(
    client: Client, db: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def down(kid: str) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(log, "readiness", down)  # /healthz's one query
    response = client.get("/healthz", HTTP_HOST=PRIVATE)
    body = assert_problem(response, 503, "database-unavailable")
    assert response["Retry-After"] == "5"
    assert body["checks"] == [
        {"name": "database", "result": "fail", "detail": body["detail"]}
    ]
    said = [(r.name, r.getMessage()) for r in caplog.records]
    assert ("receiptsite.middleware", "database unavailable: OperationalError") in said, said
    assert all(r.exc_info is None for r in caplog.records)  # no traceback


def test_with_a_witness_policy_healthz_says_how_far_behind_the_witnessed_checkpoint_is(
    producer: Producer, client: Client, settings: Any
) -> None:
    rules = one_of_two(settings)
    producer.publish(idempotency_key="a")
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "witnesses": {"tree_size": 1, "witnessed_size": None, "leaves_behind": 1,
                      "witnessed_at": None},
    }  # fmt: skip
    assert cosign(rules, "w1", at=1_700_000_000) == []
    producer.publish(idempotency_key="b")
    producer.publish(idempotency_key="c")
    assert client.get("/healthz").json()["witnesses"] == {
        "tree_size": 3, "witnessed_size": 1, "leaves_behind": 2,
        "witnessed_at": "2023-11-14T22:13:20.000000Z",
    }  # fmt: skip
    # Witnesses behind never make the site unready; an unready site still says it.
    settings.SIGNING_KEY = None
    body = assert_problem(client.get("/healthz"), 503, "cannot-sign")
    assert body["witnesses"]["leaves_behind"] == 2
    assert body["type"] == f"{SITE}/problems/cannot-sign"


def test_the_health_check_answers_when_allowed_hosts_names_another_host_than_site_urls(
    client: Any, settings: Any, db: None
) -> None:
    # ALLOWED_HOSTS may name only what a proxy forwards (here the loopback), not SITE_URL's.
    settings.SITE_URL = "https://receipts.example.org"
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    answer = client.get("/healthz", HTTP_HOST="10.0.0.5:8000")
    assert answer.status_code in (200, 503), answer.content
    assert answer.status_code != 400
    assert client.get("/", HTTP_HOST="10.0.0.5:8000").status_code == 400

"""HTTP caching that a front proxy or a browser can use, and never a stale verdict as current
(receiptsite/api/views.py, `conditional`): an ETag on the verification JSON, the page, the
hand-off text, the bundle, the keys document, the checkpoints and the tiles; `304 Not Modified`
to an If-None-Match that names it; Cache-Control saying how long each may be reused.

A receipt route's ETag is made after its every check was run again, from the answer's own
bytes (the time of the check and the page's CSP nonce left out: a weak `W/` ETag then), so it
changes with whatever the answer shows: a grown log, a row changed behind the site's back, a
withdrawal, a key's compromise, another language. Its answers stay `no-store`.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.conftest import Producer, assert_problem, mark_compromised, signed_in, tamper

pytestmark = pytest.mark.db

RECEIPT_ROUTES = {
    "verify": "/api/receipt/{id}/verify",
    "page": "/run/{id}",
    "handoff": "/run/{id}/handoff.txt",
    "bundle": "/run/{id}/bundle.json",
}
# Whose bytes hold the time of the check (and, on the page, a CSP nonce): a weak ETag.
WEAK = {"verify", "page", "bundle"}
CAPABILITY = {
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex",
    "Referrer-Policy": "same-origin",
}
# The public routes and what they say about reuse.
PUBLIC = {
    "/.well-known/receipt-keys.json": "public, max-age=5, must-revalidate",
    "/api/log/checkpoint": "no-cache",
    "/log/checkpoint": "public, max-age=5",
    "/log/tile/0/000.p/2": "public, max-age=31536000, immutable",
}


@pytest.fixture
def stored(producer: Producer) -> dict[str, Any]:
    producer.publish(idempotency_key="first")
    return producer.publish(idempotency_key="second")


def path_of(route: str, receipt_id: str) -> str:
    return RECEIPT_ROUTES[route].format(id=receipt_id)


def get(client: Client, path: str, etag: str | None = None, **headers: str) -> Any:
    if etag is not None:
        headers["If-None-Match"] = etag
    return client.get(path, headers=headers)


def assert_not_modified(answer: Any, etag: str) -> None:
    assert answer.status_code == 304, (answer.status_code, answer.content[:200])
    assert answer.content == b""
    assert answer["ETag"] == etag


def verification(client: Client, receipt_id: str) -> Any:
    answer = get(client, path_of("verify", receipt_id))
    assert answer.status_code == 200, answer.content
    return answer


# --- every route: an ETag, and the 304 that names it -------------------------------------------


@pytest.mark.parametrize("route", list(RECEIPT_ROUTES))
def test_a_receipt_route_answers_304_to_its_etag_and_stays_no_store(
    client: Client, stored: dict[str, Any], route: str
) -> None:
    path = path_of(route, stored["id"])
    first = get(client, path)
    assert first.status_code == 200, first.content
    etag = first["ETag"]
    assert etag.startswith('W/"' if route in WEAK else '"') and etag.endswith('"'), etag
    for name, value in CAPABILITY.items():
        assert first[name] == value, name
    again = get(client, path, etag)
    assert_not_modified(again, etag)
    # The 304 is an answer of the capability URL too, and says what the 200 says of variants.
    for name, value in CAPABILITY.items():
        assert again[name] == value, name
    assert again.get("Vary") == first.get("Vary")
    # The language changes the page's answers, never the API's (middleware.BrowserOnly).
    varies = {v.strip() for v in again.get("Vary", "").split(",")}
    assert ("Accept-Language" in varies) == (route != "verify"), again.get("Vary")
    head = client.head(path, headers={"If-None-Match": etag})
    assert_not_modified(head, etag)


def test_the_handoff_etag_is_the_hash_of_its_bytes(client: Client, stored: dict[str, Any]) -> None:
    first = get(client, path_of("handoff", stored["id"]))
    assert first["ETag"] == '"' + hashlib.sha256(first.content).hexdigest()[:32] + '"'


@pytest.mark.parametrize("path", list(PUBLIC))
def test_a_public_route_says_how_long_it_may_be_reused_and_answers_304(
    client: Client, stored: dict[str, Any], path: str
) -> None:
    first = get(client, path)
    assert first.status_code == 200, first.content
    assert first["Cache-Control"] == PUBLIC[path]
    etag = first["ETag"]
    assert etag == '"' + hashlib.sha256(first.content).hexdigest()[:32] + '"'
    again = get(client, path, etag)
    assert_not_modified(again, etag)
    assert again["Cache-Control"] == PUBLIC[path]
    assert again.get("Vary") == first.get("Vary") is None  # the same for every request
    assert again["Access-Control-Allow-Origin"] == "*"
    assert "X-Robots-Tag" not in again  # no capability URL


@pytest.mark.parametrize("route", ["verify", "page", "bundle"])
def test_the_time_of_the_check_differs_but_the_etag_does_not(
    client: Client, stored: dict[str, Any], route: str
) -> None:
    path = path_of(route, stored["id"])
    first, second = get(client, path), get(client, path)
    assert first.content != second.content  # "verified_at" / "Checked at": made now
    assert first["ETag"] == second["ETag"]


def test_a_304_costs_the_queries_of_the_200_since_every_check_is_run_again(
    client: Client, stored: dict[str, Any]
) -> None:
    for route in RECEIPT_ROUTES:
        path = path_of(route, stored["id"])
        get(client, path)  # the first answer may fill per-process caches
        with CaptureQueriesContext(connection) as full:
            etag = get(client, path)["ETag"]
        with CaptureQueriesContext(connection) as revalidated:
            assert get(client, path, etag).status_code == 304
        assert len(revalidated.captured_queries) == len(full.captured_queries), route


# --- a changed state: a new ETag, and the whole answer -----------------------------------------


def test_a_new_receipt_grows_the_log_so_the_older_receipts_etags_change(
    client: Client, producer: Producer, stored: dict[str, Any]
) -> None:
    before = {route: get(client, path_of(route, stored["id"])) for route in RECEIPT_ROUTES}
    assert before["verify"].json()["log"]["tree_size"] == 2
    checkpoint = get(client, "/api/log/checkpoint")
    keys = get(client, "/.well-known/receipt-keys.json")

    producer.publish(idempotency_key="third")

    for route in ("verify", "bundle"):  # each holds the tree's size and the proof
        now = get(client, path_of(route, stored["id"]), before[route]["ETag"])
        assert now.status_code == 200, route
        assert now["ETag"] != before[route]["ETag"], route
    assert verification(client, stored["id"]).json()["log"]["tree_size"] == 3
    # The page and the hand-off text show nothing of the log's size: each is what it was, and
    # a 304 says so (the page's "Verify in this browser" asks the verification JSON itself).
    for route in ("page", "handoff"):
        etag = before[route]["ETag"]
        assert_not_modified(get(client, path_of(route, stored["id"]), etag), etag)
    grown = get(client, "/api/log/checkpoint", checkpoint["ETag"])
    assert grown.status_code == 200 and grown.content.split(b"\n")[1] == b"3"
    assert grown["ETag"] != checkpoint["ETag"]
    assert_not_modified(get(client, "/.well-known/receipt-keys.json", keys["ETag"]), keys["ETag"])


@pytest.mark.parametrize("route", list(RECEIPT_ROUTES))
def test_a_row_changed_behind_the_sites_back_is_never_answered_304(
    client: Client, stored: dict[str, Any], route: str
) -> None:
    path = path_of(route, stored["id"])
    etag = get(client, path)["ETag"]
    assert get(client, path, etag).status_code == 304

    tamper(stored["id"], workflow_id="wf-forged")

    changed = get(client, path, etag)
    assert changed.status_code == 200
    assert changed["ETag"] != etag
    assert verification(client, stored["id"]).json()["status"] == "invalid"
    if route == "page":
        assert "alert-bad" in changed.content.decode()
    if route == "handoff":
        assert changed.content.decode().startswith("WARNING: this receipt does not verify")


@pytest.mark.parametrize("route", list(RECEIPT_ROUTES))
def test_after_a_withdrawal_the_old_etag_no_longer_matches(
    client: Client, producer: Producer, stored: dict[str, Any], route: str
) -> None:
    path = path_of(route, stored["id"])
    etag = get(client, path)["ETag"]
    withdrawn = producer.post(
        json.dumps({"reason": "personal_data"}),
        path=f"/api/receipts/{stored['id']}/withdrawal",
    )
    assert withdrawn.status_code == 201, withdrawn.content

    answer = get(client, path, etag)
    assert answer.status_code == 410, answer.status_code
    assert answer.content
    assert "ETag" not in answer  # an error answer is not revalidated
    assert answer["Cache-Control"] == "no-store"
    assert get(client, path, "*").status_code == 410


def test_a_key_compromise_changes_the_keys_document_and_the_verdict(
    client: Client, stored: dict[str, Any]
) -> None:
    keys = get(client, "/.well-known/receipt-keys.json")
    checked = verification(client, stored["id"])
    assert checked.json()["status"] == "valid"

    # Compromised since before the receipt was stored: nothing it signed counts.
    mark_compromised(at=timezone.now() - timedelta(days=1))

    now_keys = get(client, "/.well-known/receipt-keys.json", keys["ETag"])
    assert now_keys.status_code == 200
    assert now_keys["ETag"] != keys["ETag"]
    assert [k["status"] for k in now_keys.json()["keys"]] == ["compromised"]
    now = get(client, path_of("verify", stored["id"]), checked["ETag"])
    assert now.status_code == 200 and now["ETag"] != checked["ETag"]
    assert now.json()["status"] == "invalid"


def test_a_key_rotation_changes_the_keys_documents_etag(
    client: Client, producer: Producer, stored: dict[str, Any], settings: Any, tmp_path: Path
) -> None:
    from tests.db.test_keys_and_log import rotate

    keys = get(client, "/.well-known/receipt-keys.json")
    rotate(settings, tmp_path)
    producer.publish(idempotency_key="after-rotation")  # a write path records the new key

    now = get(client, "/.well-known/receipt-keys.json", keys["ETag"])
    assert now.status_code == 200
    assert now["ETag"] != keys["ETag"]
    assert [k["status"] for k in now.json()["keys"]] == ["retired", "active"]
    assert_not_modified(get(client, "/.well-known/receipt-keys.json", now["ETag"]), now["ETag"])


# --- the language, and the page's other variants -----------------------------------------------


@pytest.mark.parametrize("route", ["page", "handoff"])
@pytest.mark.parametrize("how", ["accept-language", "query", "cookie"])
def test_another_language_is_another_etag_under_the_same_vary(
    stored: dict[str, Any], route: str, how: str
) -> None:
    path = path_of(route, stored["id"])
    english = get(Client(), path)
    client, headers = Client(), {}
    if how == "accept-language":
        headers["Accept-Language"] = "zh-hans"
    elif how == "query":
        path += "?lang=zh-hans"
    else:
        client.cookies[django_settings.LANGUAGE_COOKIE_NAME] = "zh-hans"
    chinese = get(client, path, **headers)
    assert chinese.status_code == 200
    assert chinese["Content-Language"] == "zh-hans"
    assert chinese["ETag"] != english["ETag"]
    # An English copy is not current for a reader in Chinese; the Chinese one is.
    assert get(client, path, english["ETag"], **headers).status_code == 200
    again = get(client, path, chinese["ETag"], **headers)
    assert_not_modified(again, chinese["ETag"])
    # The cookie and Accept-Language choose the language: both are in Vary, 304 and 200 alike.
    for answer in (english, chinese, again):
        assert {"Accept-Language", "Cookie"} <= {v.strip() for v in answer["Vary"].split(",")}
    assert again["Vary"] == chinese["Vary"]


def test_the_json_answers_are_the_same_in_every_language(
    client: Client, stored: dict[str, Any]
) -> None:
    for route in ("verify", "bundle"):
        path = path_of(route, stored["id"])
        english = get(client, path)
        chinese = get(client, path, english["ETag"], **{"Accept-Language": "zh-hans"})
        assert_not_modified(chinese, english["ETag"])


def test_the_verification_panel_alone_has_an_etag_of_its_own(
    client: Client, stored: dict[str, Any]
) -> None:
    path = path_of("page", stored["id"])
    page = get(client, path)
    panel = get(client, path + "?part=verification", **{"HX-Request": "true"})
    assert panel.status_code == 200 and b"<html" not in panel.content
    assert panel["ETag"] != page["ETag"]
    assert "HX-Request" in panel["Vary"]
    again = get(client, path + "?part=verification", panel["ETag"], **{"HX-Request": "true"})
    assert_not_modified(again, panel["ETag"])
    assert again["Vary"] == panel["Vary"]


def test_an_auditors_page_with_the_decision_form_has_no_etag(
    auditor: Any, stored: dict[str, Any]
) -> None:
    """Its CSRF token is made for this request: a copy kept is not told it is current."""
    client = signed_in(auditor)
    page = get(client, path_of("page", stored["id"]))
    assert page.status_code == 200
    assert b'name="csrfmiddlewaretoken"' in page.content
    assert "ETag" not in page
    assert get(client, path_of("page", stored["id"]), "*").status_code == 200
    # Its hand-off text holds no form: revalidated as anyone's.
    handoff = get(client, path_of("handoff", stored["id"]))
    assert_not_modified(
        get(client, path_of("handoff", stored["id"]), handoff["ETag"]), handoff["ETag"]
    )


# --- If-None-Match's forms, as Django compares them ---------------------------------------------


@pytest.mark.parametrize("route", list(RECEIPT_ROUTES))
def test_if_none_match_star_weak_forms_and_lists(
    client: Client, stored: dict[str, Any], route: str
) -> None:
    path = path_of(route, stored["id"])
    etag = get(client, path)["ETag"]
    opaque = etag.removeprefix("W/")
    assert get(client, path, "*").status_code == 304  # any current answer
    assert_not_modified(get(client, path, "W/" + opaque), etag)  # compared weakly
    assert_not_modified(get(client, path, opaque), etag)
    assert_not_modified(get(client, path, f'"something-else", {etag}'), etag)
    other = get(client, path, '"something-else"')
    assert other.status_code == 200 and other["ETag"] == etag


def test_if_none_match_star_on_an_unknown_receipt_is_its_404(client: Client, db: None) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    for route in RECEIPT_ROUTES:
        answer = get(client, path_of(route, missing), "*")
        assert answer.status_code == 404, route
        assert "ETag" not in answer


def test_if_match_with_a_weak_etag_is_the_412_problem(
    client: Client, stored: dict[str, Any]
) -> None:
    path = path_of("verify", stored["id"])
    etag = get(client, path)["ETag"]
    refused = client.get(path, headers={"If-Match": etag})  # a weak ETag never matches If-Match
    assert_problem(refused, 412, "precondition-failed")
    assert refused["Cache-Control"] == "no-store"
    keys = get(client, "/.well-known/receipt-keys.json")["ETag"]
    matched = client.get("/.well-known/receipt-keys.json", headers={"If-Match": keys})
    assert matched.status_code == 200 and matched["ETag"] == keys

"""The layers only a browser's pages use (the session, the language, the signed-in user, its
messages, htmx: receiptsite/middleware.py, BrowserOnly and LocaleMiddleware) run on the pages
and the admin, and let a route of the API straight through: there nothing reads a cookie, and
the answer is in English whatever the request's language, so nothing varies on either. Django's
own checks still find them (tests/unit/test_security_headers.py: no check is silenced).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import translation

from receiptsite.middleware import path_kind
from tests.conftest import Producer

pytestmark = pytest.mark.db

API_PATHS = [
    "/api/receipt/{id}/verify",
    "/api/receipts/{id}",
    "/.well-known/receipt-keys.json",
    "/api/log/checkpoint",
    "/log/checkpoint",
    "/api/openapi.json",
    "/healthz",
]


def varies(response: Any) -> set[str]:
    return {v.strip() for v in response.get("Vary", "").split(",") if v.strip()}


@pytest.mark.parametrize("path", API_PATHS)
def test_an_api_answer_reads_no_cookie_and_no_language(
    client: Client, producer: Producer, path: str
) -> None:
    stored = producer.publish()
    client.cookies["sessionid"] = "a-session-nobody-has"
    client.cookies["django_language"] = "zh-hans"
    headers = {"Accept-Language": "zh-hans"}
    if path.startswith("/api/receipts/"):
        headers["Authorization"] = f"Bearer {producer.key}"
    answer = client.get(f"{path.format(id=stored['id'])}?lang=zh-hans", headers=headers)
    assert answer.status_code == 200, answer.content[:300]
    assert not {"Cookie", "Accept-Language"} & varies(answer), answer.get("Vary")
    assert "Content-Language" not in answer
    assert "Set-Cookie" not in answer and not answer.cookies


def test_the_page_still_gets_every_layer(client: Client, producer: Producer) -> None:
    stored = producer.publish()
    answer = client.get(f"/run/{stored['id']}", headers={"Accept-Language": "zh-hans"})
    assert answer.status_code == 200
    assert answer["Content-Language"] == "zh-hans"
    assert {"Accept-Language", "HX-Request"} <= varies(answer), answer.get("Vary")
    # The signed-in user's layer ran: the page's context has a user (AnonymousUser here).
    assert answer.wsgi_request.user.is_anonymous


def test_an_api_route_answers_in_english_after_a_page_in_another_language(
    client: Client, producer: Producer
) -> None:
    # A thread keeps the language its last page activated; an API route must not run in it.
    stored = producer.publish()
    client.get(f"/run/{stored['id']}", headers={"Accept-Language": "zh-hans"})
    assert translation.get_language() == "zh-hans"
    client.get("/healthz")
    assert translation.get_language() == "en"


def test_only_the_routes_marked_as_the_apis_skip_the_layers() -> None:
    assert path_kind("/api/receipt/x/verify").api
    assert path_kind("/metrics").api and path_kind("/v1/traces").api
    assert not path_kind("/run/x").api
    assert not path_kind("/admin/login/").api
    assert not path_kind("/api/no-such-route").api  # a 404: the site's own page of it


def test_django_finds_each_layer_as_its_own(settings: Any, db: None) -> None:
    # The admin's checks (admin.E408-E410) look for subclasses of Django's classes.
    from django.contrib.auth.middleware import AuthenticationMiddleware
    from django.contrib.messages.middleware import MessageMiddleware
    from django.contrib.sessions.middleware import SessionMiddleware
    from django.core import checks
    from django.utils.module_loading import import_string

    layers = [import_string(m) for m in settings.MIDDLEWARE]
    for django_class in (SessionMiddleware, AuthenticationMiddleware, MessageMiddleware):
        assert any(issubclass(layer, django_class) for layer in layers), django_class
    found = [e.id for e in checks.run_checks() if (e.id or "").startswith(("admin.", "axes."))]
    assert found == []


def test_the_first_route_whose_shape_a_path_has_decides() -> None:
    # The URLconf's routes are one pattern (middleware._routes): its order is theirs.
    assert not path_kind("/api/receipts/batch").capability  # that route, not an id
    assert path_kind("/api/receipts/not-an-id").capability
    assert path_kind("/run/x/no/such/route").capability  # under a capability prefix
    tile = path_kind("/log/tile/0/x001/002.p/3")
    assert tile.cross_origin and tile.api and not tile.capability
    assert path_kind("/") == path_kind("/nowhere") == path_kind("/admin/")

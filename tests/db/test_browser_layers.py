"""The layers only a browser's pages use (settings.BROWSER_MIDDLEWARE: the session, the
language, the signed-in user, messages, htmx, django-axes) run on the pages and the admin, and
never on a route of the API (receiptsite/middleware.py, BrowserMiddleware): there nothing reads
a cookie, and the answer is in English whatever the request's language, so nothing varies on
either. A class Django's handler would have to call a hook of stops the site at start.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.utils import translation

from receiptsite.middleware import BrowserMiddleware, check_browser_layers, path_kind
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


def test_a_layer_with_a_hook_only_middleware_gets_stops_the_site(settings: Any) -> None:
    settings.BROWSER_MIDDLEWARE = [
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
    ]

    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    with pytest.raises(ImproperlyConfigured, match="^BROWSER_MIDDLEWARE: django.middleware"
                       r".csrf.CsrfViewMiddleware has process_view"):
        BrowserMiddleware(view)


def test_the_system_check_asks_for_what_the_admin_and_axes_need(settings: Any) -> None:
    assert check_browser_layers() == []
    settings.BROWSER_MIDDLEWARE = [
        m for m in settings.BROWSER_MIDDLEWARE if not m.endswith(".SessionMiddleware")
    ]
    assert [(e.id, e.msg.split()[0]) for e in check_browser_layers()] == [
        ("receiptsite.E002", "django.contrib.sessions.middleware.SessionMiddleware")
    ]
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if not m.endswith(".BrowserMiddleware")]
    assert "receiptsite.E001" in {e.id for e in check_browser_layers()}


def test_the_first_route_whose_shape_a_path_has_decides() -> None:
    # The URLconf's routes are one pattern (middleware._routes): its order is theirs.
    assert not path_kind("/api/receipts/batch").capability  # that route, not an id
    assert path_kind("/api/receipts/not-an-id").capability
    assert path_kind("/run/x/no/such/route").capability  # under a capability prefix
    tile = path_kind("/log/tile/0/x001/002.p/3")
    assert tile.cross_origin and tile.api and not tile.capability
    assert path_kind("/") == path_kind("/nowhere") == path_kind("/admin/")

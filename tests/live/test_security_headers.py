"""The production configuration's security headers, graded as the MDN HTTP Observatory grades
them, from live responses of a real gunicorn; and `check --deploy` with nothing silenced.

The scorer below is our own reading of the Observatory's published tests and modifiers
("HTTP Observatory Scoring Methodology", MDN: tests and scoring). Every site starts at 100;
penalties are taken first, and only a score of 90 or more then earns the bonuses; 100 or more
is an A+. It implements the tests that apply to one response: CSP, cookies, CORS, redirection
(the same path over plain http), Referrer-Policy, HSTS, Subresource Integrity, X-Content-Type-
Options, X-Frame-Options and Cross-Origin-Resource-Policy. The Observatory does not score
Cross-Origin-Opener-Policy or Permissions-Policy; the site sends both anyway, and the live test
checks them beside the score.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.examples import EXAMPLE_BODY
from tests.livesite import PYTHON, REPO, SITE_VARIABLES, LiveSite
from tests.unit.test_security_headers import (
    Answer,
    hsts_max_age,
    observatory,
    parse_csp,
)

# The headers of the answers: the same whichever database is behind them.
pytestmark = [pytest.mark.live, pytest.mark.any_database]

# --- the live site, configured for production --------------------------------------------------

FORWARDED_HTTPS = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}


def fetch(site: LiveSite, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None) -> Answer:
    """One request as the TLS proxy forwards it (or, with `headers={}`, as plain http);
    redirects are answers, never followed."""
    connection = http.client.HTTPConnection("127.0.0.1", site.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return Answer(response.status, response.getheaders(), response.read())
    finally:
        connection.close()


@pytest.fixture(scope="module")
def production() -> Iterator[tuple[LiveSite, dict[str, tuple[Answer, Answer]]]]:
    """A live site as deployed behind a TLS proxy, and each answer graded: (over https, the
    same request over plain http)."""
    env = {"SITE_URL": "https://127.0.0.1", "TRUSTED_PROXIES": "127.0.0.1"}
    with LiveSite(workers=1, env=env) as site:
        post_headers = {**FORWARDED_HTTPS, "Authorization": f"Bearer {site.api_key}",
                        "Content-Type": "application/json"}
        body = json.dumps(EXAMPLE_BODY).encode()
        created = fetch(site, "POST", "/api/receipts", body, post_headers)
        assert created.status == 201, created.body
        receipt = json.loads(created.body)["id"]
        page = fetch(site, "GET", f"/run/{receipt}", headers=FORWARDED_HTTPS)
        assert page.status == 200, page.body
        stylesheet = re.search(rb'href="(/static/css/site\.[0-9a-f]+\.css)"', page.body)
        assert stylesheet, page.body[:2000]
        paths = {
            "the receipt page": ("GET", f"/run/{receipt}", 200),
            "the verify JSON": ("GET", f"/api/receipt/{receipt}/verify", 200),
            "an API answer without a key": ("GET", "/api/receipts", 401),
            "the admin login": ("GET", "/admin/login/", 200),
            "a static file": ("GET", stylesheet.group(1).decode(), 200),
            "the 404 page": ("GET", "/run/00000000-0000-4000-8000-000000000000", 404),
        }
        answers: dict[str, tuple[Answer, Answer]] = {}
        for name, (method, path, status) in paths.items():
            answer = fetch(site, method, path, headers=FORWARDED_HTTPS)
            assert answer.status == status, (name, answer.status, answer.body[:500])
            answers[name] = (answer, fetch(site, method, path, headers={}))
        answers["an API answer, 201"] = (created, fetch(site, "GET", "/api/receipts", headers={}))
        yield site, answers


# --- the scorer -------------------------------------------------------------------------------


# --- the scorer on made-up answers: it can tell a bad response from a good one --------------


# --- the live site, configured for production --------------------------------------------------


ANSWERS = [
    "the receipt page", "the verify JSON", "an API answer without a key", "an API answer, 201",
    "the admin login", "a static file", "the 404 page",
]  # fmt: skip


@pytest.mark.live
@pytest.mark.parametrize("name", ANSWERS)
def test_each_answer_scores_an_a_plus_on_the_observatory(
    production: tuple[LiveSite, dict[str, tuple[Answer, Answer]]], name: str
) -> None:
    site, answers = production
    answer, plain = answers[name]
    grade = observatory(answer, plain, origin=f"https://127.0.0.1:{site.port}")
    assert grade.grade == "A+" and grade.score >= 100, grade.results
    # Each test passes the best way this site can: no points are left on the table.
    assert grade.result("content-security-policy") == "csp-implemented-with-no-unsafe"
    assert grade.result("strict-transport-security") == (
        "hsts-implemented-max-age-at-least-six-months"
    )
    assert grade.result("redirection") == "redirection-to-https"
    assert grade.result("x-frame-options") == "x-frame-options-implemented-via-csp"
    assert grade.result("x-content-type-options") == "x-content-type-options-nosniff"
    assert grade.result("referrer-policy") == "referrer-policy-private"
    assert grade.result("cross-origin-resource-policy") == (
        "cross-origin-resource-policy-implemented-with-same-origin"
    )
    assert grade.results["cookies"][0] in (
        "cookies-not-found", "cookies-secure-with-httponly-sessions-and-samesite"
    )  # fmt: skip
    assert grade.results["subresource-integrity"][1] == 0
    assert grade.results["cross-origin-resource-sharing"][1] == 0


@pytest.mark.live
@pytest.mark.parametrize("name", ANSWERS)
def test_each_answer_carries_the_headers_the_site_promises(
    production: tuple[LiveSite, dict[str, tuple[Answer, Answer]]], name: str
) -> None:
    _, answers = production
    answer, plain = answers[name]
    assert hsts_max_age(answer) == 31536000
    assert answer.get("Strict-Transport-Security") == (
        "max-age=31536000; includeSubDomains; preload"
    )
    csp = parse_csp(answer.all("Content-Security-Policy"))
    assert csp["object-src"] == {"'none'"}
    assert csp["base-uri"] == {"'none'"}
    assert csp["frame-ancestors"] == {"'none'"}
    assert csp["form-action"] == {"'self'"}
    assert not any(s.startswith("'unsafe") for sources in csp.values() for s in sources)
    assert answer.get("Cross-Origin-Opener-Policy") == "same-origin"
    assert answer.get("Cross-Origin-Resource-Policy") == "same-origin"
    policy = answer.get("Permissions-Policy") or ""
    assert {"camera=()", "microphone=()", "geolocation=()", "payment=()"} <= set(
        policy.split(", ")
    )
    # Plain http is sent to the same URL over https, never served.
    assert plain.status == 301 and (plain.get("Location") or "").startswith("https://127.0.0.1:")


@pytest.mark.live
def test_the_public_json_stays_readable_from_other_sites(
    production: tuple[LiveSite, dict[str, tuple[Answer, Answer]]],
) -> None:
    """CORP same-origin governs no-cors loads only; a verifier's cross-origin fetch() is a CORS
    request, which Access-Control-Allow-Origin: * allows."""
    _, answers = production
    answer, _ = answers["the verify JSON"]
    assert answer.get("Access-Control-Allow-Origin") == "*"
    assert answer.get("Access-Control-Allow-Credentials") is None


@pytest.mark.live
@pytest.mark.parametrize("name", ["the receipt page", "the verify JSON", "the 404 page"])
def test_a_capability_url_keeps_its_headers_on_the_redirect_to_https(
    production: tuple[LiveSite, dict[str, tuple[Answer, Answer]]], name: str
) -> None:
    """The redirect is SecurityMiddleware's, made before any view runs; it names the link in
    its Location, so it is kept out of caches and referrers like the page itself."""
    _, answers = production
    for answer in answers[name]:  # over https, then the 301 of plain http
        assert answer.get("Cache-Control") == "no-store", (name, answer.status)
        assert answer.get("X-Robots-Tag") == "noindex", (name, answer.status)
        assert answer.get("Referrer-Policy") == "same-origin", (name, answer.status)
    _, plain = answers["the verify JSON"]
    assert plain.status == 301 and plain.get("Access-Control-Allow-Origin") == "*"


@pytest.mark.live
def test_the_health_check_answers_over_plain_http(
    production: tuple[LiveSite, dict[str, tuple[Answer, Answer]]],
) -> None:
    site, _ = production
    answer = fetch(site, "GET", "/healthz", headers={})
    assert answer.status == 200
    assert answer.get("Strict-Transport-Security") is None  # HSTS is for https answers only


# --- check --deploy ----------------------------------------------------------------------------


# --- check --deploy ----------------------------------------------------------------------------


def deploy_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    from receiptsite.integrity.keys import generate_private_key_pem

    key = tmp_path / "signing.pem"
    key.write_bytes(generate_private_key_pem())
    production = {
        **{k: v for k, v in os.environ.items() if k not in SITE_VARIABLES},
        "DJANGO_SETTINGS_MODULE": "receiptsite.settings",
        "DEBUG": "false",
        "SITE_URL": "https://receipts.example.org",
        "TRUSTED_PROXIES": "127.0.0.1",
        "SECRET_KEY": secrets.token_urlsafe(50),  # as README and quickstart make it
        "SIGNING_KEY_FILE": str(key),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "VAR_DIR": str(tmp_path / "var"),
        **env,
    }
    return subprocess.run(
        [str(PYTHON), "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO, env=production, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_check_deploy_passes_with_the_production_settings(tmp_path: Path) -> None:
    done = deploy_check(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


@pytest.mark.parametrize(
    ("env", "warning"),
    [
        ({"SITE_URL": "http://receipts.example.org"}, "security.W004"),  # no HSTS over http
        # Without a trusted proxy the site cannot tell https from http, so it cannot redirect.
        ({"TRUSTED_PROXIES": ""}, "security.W008"),
        ({"SECRET_KEY": "short"}, "security.W009"),
    ],
)
def test_check_deploy_fails_where_production_would_be_unsafe(
    tmp_path: Path, env: dict[str, str], warning: str
) -> None:
    done = deploy_check(tmp_path, **env)
    assert done.returncode != 0
    assert warning in done.stderr + done.stdout

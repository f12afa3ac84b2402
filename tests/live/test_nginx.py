"""The front proxy: deploy/nginx/receiptsite.conf, the very file an operator installs, run by
Debian's nginx (/usr/sbin/nginx) in front of a live site.

The file is rendered by replacing only its operator-edited values (the host name, the
certificate's paths, the listening ports, gunicorn's address, STATIC_ROOT, the log and cache
folders) with this test's, and included from a small nginx.conf of the test's own, as Debian's
stock nginx.conf includes sites-enabled/: bench/_nginx.py does it, for this test and for
`bench/run.py --front nginx` alike. Each nginx is a master of our own (`-p` its folder, free
loopback ports, `daemon off`), stopped with SIGQUIT. The site believes nginx because
TRUSTED_PROXIES is 127.0.0.1, the address nginx connects to gunicorn from; the test's clients
connect to nginx from other loopback addresses (Linux answers all of 127.0.0.0/8), so that
what the site believes about the client shows in its rate limit (`read`, counted per client
address, never refilled during the test). A receipt link must never reach nginx's logs: the
access and error logs of every nginx are searched for the receipt's id, including those of an
nginx whose upstream is down (a 502, which nginx logs at `error` with the request line: a
control nginx, the same file with its error log at `error`, shows the id would be there).
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest

from receiptsite.api.reading import too_big
from tests.examples import EXAMPLE_BODY
from tests.livesite import REPO, LiveSite, free_port
from tests.unit.test_security_headers import Answer, observatory

# The nginx of the shipped file is bench/_nginx.py's (bench/run.py --front nginx runs it too),
# imported by the name bench/run.py gives it: bench/ is no package, its files are top-level
# modules. Appended, so that none of bench/'s names hides another module.
sys.path.append(str(REPO / "bench"))
import _nginx as nginxsite  # noqa: E402
from _nginx import HOST, Certificate, TLSConnection, make_certificate, running  # noqa: E402

# What is tested is the proxy in front; the database behind it changes nothing.
pytestmark = [pytest.mark.live, pytest.mark.any_database]

HSTS = "max-age=31536000; includeSubDomains; preload"
BATCH_MAX_BYTES = 5 * 1024 * 1024  # the site's default, receiptsite/settings.py
READ_BURST = 10  # the site's `read` limit: 10 requests per client address, then 429
# Headers the site gives a static file that nginx, serving the file itself, must give too.
STATIC_HEADERS = [
    "Cache-Control", "Access-Control-Allow-Origin", "Content-Security-Policy",
    "Cross-Origin-Resource-Policy", "Cross-Origin-Opener-Policy", "Permissions-Policy",
    "Referrer-Policy", "Strict-Transport-Security", "X-Content-Type-Options",
]  # fmt: skip


class Nginx(nginxsite.Nginx):
    """The shipped configuration, rendered and run by bench/_nginx.py, with the test's clients
    and its reading of the access log."""

    # --- what it wrote ------------------------------------------------------------------------

    def access_entries(self, since: int = 0, count: int = 0) -> list[dict[str, str]]:
        """The access log's entries from the `since`-th on, once there are `count` of them
        (nginx writes an entry as it frees the request, which may be after the client has its
        answer: after a 413's discarded body, say), or after a few seconds."""
        path = self.tmp / "logs" / "receiptsite.access.log"
        deadline = time.monotonic() + 5
        while True:
            text = path.read_text() if path.exists() else ""
            # Whole lines only: the last may be being written.
            entries = [json.loads(line) for line in text.split("\n")[:-1]][since:]
            if len(entries) >= count or time.monotonic() > deadline:
                return entries
            time.sleep(0.02)

    # --- HTTP ---------------------------------------------------------------------------------

    def https(self, method: str, path: str, body: bytes | None = None,
              headers: dict[str, str] | None = None, source: str = "127.0.0.2") -> Answer:
        """One request over TLS, from the loopback address `source`; redirects not followed."""
        connection = TLSConnection(self.https_port, self.certificate.context, source)
        return self._exchange(connection, method, path, body,
                              {"Host": f"{HOST}:{self.https_port}", **(headers or {})})  # fmt: skip

    def http(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        connection = HTTPConnection("127.0.0.1", self.http_port, timeout=30)
        return self._exchange(connection, "GET", path, None,
                              {"Host": f"{HOST}:{self.http_port}", **(headers or {})})  # fmt: skip

    def _exchange(self, connection: HTTPConnection, method: str, path: str,
                  body: bytes | None, headers: dict[str, str]) -> Answer:  # fmt: skip
        """One request, returned once nginx has logged it (so that a test reading the log
        after its requests finds every one of them, in order)."""
        logged = len(self.access_entries())
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            answer = Answer(response.status, response.getheaders(), response.read())
        finally:
            connection.close()
        self.access_entries(logged, 1)
        return answer


# --- the site and its front -----------------------------------------------------------------------


@dataclass
class Deployment:
    site: LiveSite
    front: Nginx
    receipt: dict[str, Any] = field(default_factory=dict)  # published through the front


@pytest.fixture(scope="module")
def certificate() -> Iterator[Certificate]:
    folder = Path(tempfile.mkdtemp(prefix="receiptsite-tls-"))
    try:
        yield make_certificate(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def deployment(certificate: Certificate) -> Iterator[Deployment]:
    front = Nginx(certificate)
    env = {
        "SITE_URL": f"https://{HOST}:{front.https_port}",
        "ALLOWED_HOSTS": HOST,
        "TRUSTED_PROXIES": "127.0.0.1",
        "RATE_LIMITS": f"read={READ_BURST}/0.0001",
    }
    try:
        with LiveSite(workers=2, env=env) as site:
            front.upstream = f"127.0.0.1:{site.port}"
            front.static_root = Path(site.base_env["STATIC_ROOT"])
            with running(front):
                created = front.https(
                    "POST", "/api/receipts", json.dumps(EXAMPLE_BODY).encode(),
                    {"Authorization": f"Bearer {site.api_key}",
                     "Content-Type": "application/json"},
                )  # fmt: skip
                assert created.status == 201, (created, front.logs(), site.logs())
                yield Deployment(site, front, json.loads(created.body))
    finally:
        front.close()


def hsts(answer: Answer) -> list[str]:
    return answer.all("Strict-Transport-Security")


# --- the configuration ----------------------------------------------------------------------------


def test_the_rendered_configuration_passes_nginx_t(deployment: Deployment) -> None:
    output = deployment.front.check_output
    assert "syntax is ok" in output and "test is successful" in output, output
    assert "[warn]" not in output and "[emerg]" not in output, output


# --- TLS, the redirect, HSTS ----------------------------------------------------------------------


def test_https_serves_the_site_with_the_certificate_and_hsts_once(deployment: Deployment) -> None:
    answer = deployment.front.https("GET", "/")
    assert answer.status == 200, answer
    assert answer.get("Server") == "nginx"  # nginx answered, and says no version
    assert answer.get("X-Request-ID")  # ... for the site, which answered it
    assert hsts(answer) == [HSTS]
    # HTTP/2 is offered (ALPN), for the clients that speak it.
    context = ssl.create_default_context(cafile=str(deployment.front.certificate.cert))
    context.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", deployment.front.https_port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname=HOST) as tls:  # fmt: skip
        assert tls.selected_alpn_protocol() == "h2"
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    # A client that does not trust the certificate, or asks for another name, is refused.
    stranger = TLSConnection(deployment.front.https_port, ssl.create_default_context(),
                             "127.0.0.2")  # fmt: skip
    with pytest.raises(ssl.SSLCertVerificationError):
        stranger.connect()
    stranger.close()


def test_plain_http_is_redirected_to_https(deployment: Deployment) -> None:
    front = deployment.front
    path = "/run/00000000-0000-4000-8000-000000000001?lang=en"
    for headers in ({}, {"X-Forwarded-Proto": "https"}):  # what a client claims changes nothing
        answer = front.http(path, headers)
        assert answer.status == 301, answer
        # The standard port: the test's own port is an artefact of the test.
        assert answer.get("Location") == f"https://{HOST}{path}"
        assert answer.get("Server") == "nginx" and answer.get("X-Request-ID") is None
        assert answer.get("Cache-Control") == "no-store"  # it names the link
        assert hsts(answer) == []  # HSTS is for https answers only
    # Let's Encrypt's HTTP-01 challenge is answered over plain http, from the webroot.
    challenge = front.tmp / "acme" / ".well-known" / "acme-challenge"
    challenge.mkdir(parents=True)
    (challenge / "token-123").write_text("token-123.thumbprint")
    answer = front.http("/.well-known/acme-challenge/token-123")
    assert (answer.status, answer.body) == (200, b"token-123.thumbprint")
    assert answer.get("Content-Type") == "text/plain"


# --- the proxy headers ----------------------------------------------------------------------------

LIMITED = "/api/receipt/00000000-0000-4000-8000-{:012d}/verify"  # `read`, per client: 404s


def test_the_site_counts_the_client_nginx_saw_whatever_it_claims(deployment: Deployment) -> None:
    """X-Forwarded-For is replaced, not appended to: from 127.0.0.1, a trusted proxy's address,
    an appended header would let the client's own claim through (the site skips trusted hops)."""
    front = deployment.front
    mark = len(front.access_entries())
    statuses = [
        front.https("GET", LIMITED.format(i), source="127.0.0.1",
                    headers={"X-Forwarded-For": f"203.0.113.{i}"}).status
        for i in range(READ_BURST + 1)
    ]  # fmt: skip
    assert statuses == [404] * READ_BURST + [429]
    # Another client has its own bucket: the site does not see nginx (127.0.0.1) in each.
    other = front.https("GET", LIMITED.format(100), source="127.0.0.3",
                        headers={"X-Forwarded-For": "127.0.0.1"})  # fmt: skip
    assert other.status == 404, other
    clients = [entry["client"] for entry in front.access_entries(mark, READ_BURST + 2)]
    assert clients == ["127.0.0.1"] * (READ_BURST + 1) + ["127.0.0.3"]


def test_x_forwarded_proto_from_the_client_is_overwritten(deployment: Deployment) -> None:
    # The site redirects what it believes is plain http; over TLS nginx says https, always.
    answer = deployment.front.https("GET", "/api/log/checkpoint",
                                    headers={"X-Forwarded-Proto": "http"})  # fmt: skip
    assert answer.status == 200, answer
    assert hsts(answer) == [HSTS]


# --- the body limit -------------------------------------------------------------------------------


def test_a_body_over_the_site_s_limit_is_refused_by_nginx(deployment: Deployment) -> None:
    site, front = deployment.site, deployment.front

    def post(size: int) -> tuple[str, Answer]:
        request_id = secrets.token_hex(16)
        answer = front.https(
            "POST", "/api/receipts/batch", b" " * size,
            {"Authorization": f"Bearer {site.api_key}", "Content-Type": "application/json",
             "X-Request-ID": request_id},
        )  # fmt: skip
        return request_id, answer

    # At the limit the site answers itself (a body of blanks is no JSON).
    request_id, answer = post(BATCH_MAX_BYTES)
    assert answer.status == 400 and answer.get("X-Request-ID") == request_id, answer
    # Over it, nginx does, in the site's problem+json, and the site never sees the request.
    mark = len(front.access_entries())
    request_id, answer = post(BATCH_MAX_BYTES + 1)
    assert answer.status == 413, answer
    assert answer.get("Content-Type") == "application/problem+json"
    assert answer.get("X-Request-ID") is None
    problem = json.loads(answer.body)
    expected = too_big(BATCH_MAX_BYTES)
    assert problem == {"type": f"https://{HOST}/problems/payload-too-large",
                       "title": expected.title, "status": 413, "detail": expected.detail}
    assert hsts(answer) == [HSTS]
    [entry] = front.access_entries(mark, 1)
    assert (entry["status"], entry["upstream_status"]) == ("413", "")
    assert request_id not in site.stdout()


# --- static files ---------------------------------------------------------------------------------


def test_static_files_are_served_by_nginx_with_the_site_s_headers(deployment: Deployment) -> None:
    site, front = deployment.site, deployment.front
    home = front.https("GET", "/")
    mark = len(front.access_entries())
    found = re.search(rb'href="(/static/css/site\.[0-9a-f]{12}\.css)"', home.body)
    assert found, home.body[:2000]
    path = found.group(1).decode()
    answer = front.https("GET", path)
    assert answer.status == 200, answer
    assert answer.get("X-Request-ID") is None  # not the site's: nginx's, from STATIC_ROOT
    [entry] = front.access_entries(mark, 1)
    assert (entry["status"], entry["upstream_status"]) == ("200", "")
    assert answer.body == (front.static_root / path.removeprefix("/static/")).read_bytes()
    # The same headers as the site gives the same file (WhiteNoise), each once.
    own = site.get(path, headers={"Host": HOST, "X-Forwarded-Proto": "https"})
    assert own.status == 200, own
    for name in STATIC_HEADERS:
        assert answer.all(name) == own.headers.get_all(name), name
    assert answer.get("Cache-Control") == "max-age=315360000, public, immutable"
    plain = front.https("GET", "/static/css/site.css")
    assert plain.status == 200 and plain.get("Cache-Control") == "max-age=60, public"
    # The Observatory's grade, as for the site's own answers (the redirect goes to the
    # standard port, so the origin is the host without the test's port).
    grade = observatory(answer, front.http(path), origin=f"https://{HOST}")
    assert grade.grade == "A+" and grade.score >= 100, grade.results
    # collectstatic's gzip copy, for a client that takes it.
    zipped = front.https("GET", path, headers={"Accept-Encoding": "gzip"})
    assert zipped.get("Content-Encoding") == "gzip" and zipped.get("Vary") == "Accept-Encoding"


def test_a_static_file_is_revalidated_with_a_304(deployment: Deployment) -> None:
    front = deployment.front
    path = "/static/css/site.css"
    answer = front.https("GET", path)
    etag, modified = answer.get("ETag"), answer.get("Last-Modified")
    assert answer.status == 200 and etag and modified, answer
    for condition in ({"If-None-Match": etag}, {"If-Modified-Since": modified}):
        again = front.https("GET", path, headers=condition)
        assert again.status == 304 and again.body == b"", (condition, again)
        assert again.get("ETag") == etag
        assert hsts(again) == [HSTS]
    changed = front.https("GET", path, headers={"If-None-Match": '"other"'})
    assert changed.status == 200


# --- the cache ------------------------------------------------------------------------------------


def test_what_the_site_marks_public_is_cached_and_revalidated_by_nginx(
    deployment: Deployment,
) -> None:
    """A hash tile of the log is public and immutable (its Cache-Control and ETag are the
    site's): nginx stores it, answers it again, and answers a conditional GET with a 304,
    without asking the site."""
    site, front = deployment.site, deployment.front
    tile = "/log/tile/0/000.p/1"
    mark = len(front.access_entries())
    first = front.https("GET", tile)
    assert first.status == 200, first
    assert first.get("Cache-Control") == "public, max-age=31536000, immutable"
    second = front.https("GET", tile)
    assert second.body == first.body and hsts(second) == [HSTS]
    etag = first.get("ETag")
    assert etag
    revalidated = front.https("GET", tile, headers={"If-None-Match": etag})
    assert revalidated.status == 304 and revalidated.body == b"", revalidated
    assert hsts(revalidated) == [HSTS]
    entries = front.access_entries(mark, 3)
    assert [(e["status"], e["cache"]) for e in entries] == [
        ("200", "MISS"), ("200", "HIT"), ("304", "HIT")
    ]
    assert site.stdout().count(f"GET {tile} ") == 1  # the site was asked once


def test_receipts_the_admin_and_credentials_are_never_cached(deployment: Deployment) -> None:
    site, front = deployment.site, deployment.front
    page = f"/run/{deployment.receipt['id']}"
    key = {"Authorization": f"Bearer {site.api_key}"}
    public = "/log/checkpoint?for=test_never_cached"  # public for 5 s: cacheable, this key new
    asked: list[tuple[str, dict[str, str], int, str]] = [
        (page, {}, 200, "MISS"), (page, {}, 200, "MISS"),  # no-store: never kept
        ("/", {}, 200, "MISS"), ("/", {}, 200, "MISS"),  # no Cache-Control: never kept
        ("/admin/login/", {}, 200, "BYPASS"), ("/admin/login/", {}, 200, "BYPASS"),
        # A tenant's answer is neither served from the cache nor stored for the next client.
        ("/api/receipts?limit=1", key, 200, "BYPASS"), ("/api/receipts?limit=1", key, 200,
                                                          "BYPASS"),
        ("/api/receipts?limit=1", {}, 401, "MISS"),
        # What the site marks public, asked with a cookie or credentials, is not stored either.
        (public + "-cookie", {"Cookie": "theme=dark"}, 200, "BYPASS"),
        (public + "-cookie", {}, 200, "MISS"), (public + "-cookie", {}, 200, "HIT"),
        (public + "-key", {"Authorization": "Bearer rk_0"}, 200, "BYPASS"),
        (public + "-key", {}, 200, "MISS"), (public + "-key", {}, 200, "HIT"),
    ]  # fmt: skip
    mark = len(front.access_entries())
    for path, headers, status, _ in asked:
        answer = front.https("GET", path, headers=headers, source="127.0.0.4")
        assert answer.status == status, (path, answer)
    caches = [entry["cache"] for entry in front.access_entries(mark, len(asked))]
    assert caches == [cache for *_, cache in asked], caches


# --- a receipt through the front ------------------------------------------------------------------


def test_a_receipt_published_through_nginx_opens_through_it(deployment: Deployment) -> None:
    front, receipt = deployment.front, deployment.receipt
    assert receipt["url"] == f"https://{HOST}:{front.https_port}/run/{receipt['id']}"
    page = front.https("GET", f"/run/{receipt['id']}", source="127.0.0.5")
    assert page.status == 200 and (page.get("Content-Type") or "").startswith("text/html"), page
    assert page.get("Cache-Control") == "no-store" and hsts(page) == [HSTS]
    verification = front.https("GET", f"/api/receipt/{receipt['id']}/verify", source="127.0.0.5")
    assert verification.status == 200, verification
    verified = json.loads(verification.body)
    assert (verified["receipt_id"], verified["receipt_url"]) == (receipt["id"], receipt["url"])


# --- the logs -------------------------------------------------------------------------------------


def secrets_in(logs: dict[str, str], receipt_id: str, *others: str) -> list[str]:
    """The logs that hold the receipt's id past its first 8 hex digits (in any case, hyphens
    or not) or any of `others`."""
    tail = receipt_id.lower().replace("-", "")[8:]
    found = []
    for name, text in logs.items():
        flat = text.lower().replace("-", "").replace("%2d", "")
        if tail in flat or any(other in text for other in others):
            found.append(name)
    return found


def test_the_logs_hold_no_receipt_link(deployment: Deployment) -> None:
    site, front, receipt = deployment.site, deployment.front, deployment.receipt
    rid = receipt["id"]
    url = receipt["url"]
    spelt = rid.upper().replace("-", "%2D", 1)  # the same link, spelt otherwise
    mark = len(front.access_entries())
    asked = [
        (f"/run/{rid}?from=/run/{rid}", {"Referer": url, "X-Request-ID": rid}, 200),
        (f"/?from=/run/{rid}", {"Referer": url}, 200),  # a query string is never logged
        (f"/run/{spelt}", {}, 200),
        (f"/run/{rid}/handoff.txt", {"Referer": url}, 200),
        (f"/api/receipt/{rid}/verify?id={rid}", {"Referer": url}, 200),
        (f"/run/{rid}/no-such-page", {}, 404),
        ("/static/css/no-such-file.css", {"Referer": url}, 404),  # nginx's own: an error entry
    ]  # fmt: skip
    for path, headers, status in asked:
        answer = front.https("GET", path, headers=headers, source="127.0.0.6")
        assert answer.status == status, (path, answer)
    assert front.http(f"/run/{rid}?from={rid}", {"Referer": url}).status == 301

    # The lines are there, each path cut where the site's own logs cut it.
    short = rid[:8]
    entries = front.access_entries(mark, len(asked) + 1)
    paths = [entry["path"] for entry in entries]
    assert paths == [
        f"/run/{short}-…", "/", f"/run/{rid.upper()[:8]}-…", f"/run/{short}-…/handoff.txt",
        f"/api/receipt/{short}-…/verify", f"/run/{short}-…", "/static/css/no-such-file.css",
        f"/run/{short}-…",
    ]  # fmt: skip
    # A request id the client chose is cut like a path; the site's own are kept whole.
    assert entries[0]["request_id"] == f"{short}-…"
    assert re.fullmatch(r"[0-9a-f]{32}", entries[2]["request_id"])
    logs = front.log_files()
    assert secrets_in(logs, rid, site.api_key) == [], logs


def test_an_upstream_down_keeps_receipt_links_out_of_the_error_log(
    deployment: Deployment, certificate: Certificate
) -> None:
    """With gunicorn not answering, nginx answers 502 and logs, at `error`, the request line,
    the upstream's URL and the Referer: the shipped file keeps its error log at `crit`, so the
    entry is not written (the control nginx, the same file at `error`, writes it), and the
    access log has the 502 with the path cut."""
    rid, url = deployment.receipt["id"], deployment.receipt["url"]
    closed = f"127.0.0.1:{free_port()}"  # nobody listens there
    path = f"/run/{rid}?from={rid}"
    logs: dict[str, dict[str, str]] = {}
    for level in ("crit", "error"):
        front = Nginx(certificate, closed, deployment.front.static_root, level)
        with running(front):
            answer = front.https("GET", path, headers={"Referer": url})
            assert answer.status == 502, answer
            assert answer.get("Content-Type") == "application/problem+json"
            assert json.loads(answer.body)["type"] == f"https://{HOST}/problems/bad-gateway"
            assert hsts(answer) == [HSTS]
            [entry] = front.access_entries(0, 1)
            assert (entry["status"], entry["upstream_status"], entry["path"]) == (
                "502", "502", f"/run/{rid[:8]}-…"
            )
            logs[level] = front.log_files()
    assert secrets_in(logs["crit"], rid) == [], logs["crit"]
    # The control: the entry the shipped level leaves out holds the link three times over.
    control = logs["error"]["receiptsite.error.log"]
    assert "connect() failed" in control and f'request: "GET {path} HTTP/1.1"' in control
    assert f'upstream: "http://{closed}{path}"' in control and f'referrer: "{url}"' in control
    assert secrets_in(logs["error"], rid) == ["receiptsite.error.log"]

"""The scorer of security headers, as the MDN HTTP Observatory grades them, held to made-up
answers (tests/live/test_security_headers.py grades a real gunicorn's, and runs `check
--deploy`); and no system check is silenced.

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

from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.cookies import SimpleCookie

import pytest
from django.conf import settings

from tests.livesite import REPO

pytestmark = pytest.mark.unit

# --- the scorer -------------------------------------------------------------------------------

GRADES = [
    (100, "A+"), (90, "A"), (85, "A-"), (80, "B+"), (70, "B"), (65, "B-"), (60, "C+"),
    (50, "C"), (45, "C-"), (40, "D+"), (30, "D"), (25, "D-"), (0, "F"),
]  # fmt: skip
BROAD = {"ftp:", "http:", "https:", "*", "http://*", "http://*.*", "https://*", "https://*.*"}
INLINE = {"'unsafe-inline'", "data:"}
SIX_MONTHS = 15_552_000  # the Observatory's own rounding of six months


@dataclass
class Answer:
    """One HTTP response as the scorer sees it: status, headers (a name may repeat), body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name.lower()]

    def get(self, name: str) -> str | None:
        values = self.all(name)
        return values[0] if values else None


@dataclass
class Grade:
    results: dict[str, tuple[str, int]] = field(default_factory=dict)  # test -> (result, points)

    @property
    def score(self) -> int:
        points = [p for _, p in self.results.values()]
        score = 100 + sum(p for p in points if p < 0)
        if score >= 90:
            score += sum(p for p in points if p > 0)
        return max(score, 0)

    @property
    def grade(self) -> str:
        return next(letter for floor, letter in GRADES if self.score >= floor)

    def result(self, test: str) -> str:
        return self.results[test][0]


def parse_csp(values: list[str]) -> dict[str, set[str]]:
    """Directive -> sources; several policies (headers or comma-joined) are all enforced, and
    the Observatory reads the strictest union of them the simple way: later directives add."""
    policy: dict[str, set[str]] = {}
    for value in values:
        for one in value.split(","):
            for part in one.split(";"):
                words = part.strip().split()
                if words:
                    policy.setdefault(words[0].lower(), set()).update(
                        w.lower() if w.startswith("'") else w for w in words[1:]
                    )
    return policy


def csp_test(answer: Answer, https: bool) -> tuple[str, int]:
    values = answer.all("Content-Security-Policy")
    if not values:
        return "csp-not-implemented", -25
    csp = parse_csp(values)
    default = csp.get("default-src", {"*"})
    script = csp.get("script-src", default)
    style = csp.get("style-src", default)
    objects = csp.get("object-src", default)
    active = [s for d, sources in csp.items() if d not in ("img-src", "media-src") for s in sources]
    passive = [s for d in ("img-src", "media-src") for s in csp.get(d, default)]
    if script & (BROAD | INLINE) or objects & BROAD:
        return "csp-implemented-with-unsafe-inline", -20
    if https and any(s.startswith(("http:", "ftp:")) for s in active):
        return "csp-implemented-with-insecure-scheme", -20
    if "'unsafe-eval'" in script | style:
        return "csp-implemented-with-unsafe-eval", -10
    if https and any(s.startswith(("http:", "ftp:")) for s in passive):
        return "csp-implemented-with-insecure-scheme-in-passive-content-only", -10
    if style & (BROAD | INLINE):
        return "csp-implemented-with-unsafe-inline-in-style-src-only", 0
    if csp.get("default-src") == {"'none'"}:
        return "csp-implemented-with-no-unsafe-default-src-none", 10
    return "csp-implemented-with-no-unsafe", 5


def hsts_max_age(answer: Answer) -> int | None:
    value = answer.get("Strict-Transport-Security")
    if value is None or "," in value:
        return None
    for part in value.split(";"):
        name, _, number = part.strip().lower().partition("=")
        if name == "max-age" and number.isdigit():
            return int(number)
    return None


def hsts_test(answer: Answer, https: bool) -> tuple[str, int]:
    if not https:
        return "hsts-not-implemented-no-https", -20
    if answer.get("Strict-Transport-Security") is None:
        return "hsts-not-implemented", -20
    max_age = hsts_max_age(answer)
    if max_age is None:
        return "hsts-header-invalid", -20
    if max_age < SIX_MONTHS:
        return "hsts-implemented-max-age-less-than-six-months", -10
    return "hsts-implemented-max-age-at-least-six-months", 0


def cookies_test(answer: Answer, hsts: bool) -> tuple[str, int]:
    lines = answer.all("Set-Cookie")
    if not lines:
        return "cookies-not-found", 0
    worst: tuple[str, int] | None = None

    def worse(result: str, points: int) -> None:
        nonlocal worst
        if worst is None or points < worst[1]:
            worst = (result, points)

    all_samesite = True
    for line in lines:
        jar = SimpleCookie()
        jar.load(line)
        for name, morsel in jar.items():
            secure, httponly = bool(morsel["secure"]), bool(morsel["httponly"])
            samesite = str(morsel["samesite"]).lower()
            session = "sess" in name.lower() or "login" in name.lower()
            if samesite and samesite not in ("lax", "strict", "none"):
                worse("cookies-samesite-flag-invalid", -20)
            if samesite == "none" and not secure:
                worse("cookies-samesite-flag-invalid", -20)
            if not secure:
                worse(*(("cookies-without-secure-flag-but-protected-by-hsts", -5) if hsts
                        else ("cookies-without-secure-flag", -20)))
            if "csrf" in name.lower() and not samesite:
                worse("cookies-anticsrf-without-samesite-flag", -20)
            if session and not secure:
                worse(*(("cookies-session-without-secure-flag-but-protected-by-hsts", -10)
                        if hsts else ("cookies-session-without-secure-flag", -40)))
            if session and not httponly:
                worse("cookies-session-without-httponly-flag", -30)
            all_samesite = all_samesite and bool(samesite)
    if worst is not None:
        return worst
    if all_samesite:
        return "cookies-secure-with-httponly-sessions-and-samesite", 5
    return "cookies-secure-with-httponly-sessions", 0


def cors_test(answer: Answer, origin: str) -> tuple[str, int]:
    allowed = answer.get("Access-Control-Allow-Origin")
    if allowed is None:
        return "cross-origin-resource-sharing-not-implemented", 0
    if allowed.strip() == "*":
        return "cross-origin-resource-sharing-implemented-with-public-access", 0
    credentials = (answer.get("Access-Control-Allow-Credentials") or "").strip().lower()
    if allowed.strip() == origin and credentials == "true":
        return "cross-origin-resource-sharing-implemented-with-universal-access", -50
    return "cross-origin-resource-sharing-implemented-with-restricted-access", 0


def redirection_test(plain: Answer, host: str) -> tuple[str, int]:
    """`plain`: the answer to the same URL over plain http."""
    location = plain.get("Location")
    if plain.status not in (301, 302, 303, 307, 308) or not location:
        return "redirection-missing", -20
    if not location.startswith("https://"):
        return "redirection-not-to-https", -20
    if location.split("/")[2] != host:
        return "redirection-off-host-from-http", -5
    return "redirection-to-https", 0


def referrer_test(answer: Answer) -> tuple[str, int]:
    good = {"no-referrer", "same-origin", "strict-origin", "strict-origin-when-cross-origin"}
    bad = {"origin", "origin-when-cross-origin", "unsafe-url", "no-referrer-when-downgrade"}
    values = answer.all("Referrer-Policy")
    if not values:
        return "referrer-policy-not-implemented", 0
    known = [v.strip().lower() for v in ",".join(values).split(",") if v.strip().lower()
             in good | bad]
    if known and known[-1] in good:
        return "referrer-policy-private", 5
    if known:
        return "referrer-policy-unsafe", -5
    return "referrer-policy-header-invalid", -5


class _Scripts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts.append(dict(attrs))


def sri_test(answer: Answer, origin: str) -> tuple[str, int]:
    if not (answer.get("Content-Type") or "").startswith("text/html"):
        return "sri-not-implemented-response-not-html", 0
    parser = _Scripts()
    parser.feed(answer.body.decode("utf-8", "replace"))
    sources = [s for s in parser.scripts if s.get("src")]
    if not sources:
        return "sri-not-implemented-but-no-scripts-loaded", 0
    external = [s for s in sources if str(s["src"]).startswith(("http:", "https:", "//"))
                and not str(s["src"]).startswith(origin + "/")]
    if not external:
        return "sri-not-implemented-but-all-scripts-loaded-from-secure-origin", 0
    insecure = any(not str(s["src"]).startswith("https:") for s in external)
    if all(s.get("integrity") for s in external):
        return (("sri-implemented-but-external-scripts-not-loaded-securely", -20) if insecure
                else ("sri-implemented-and-external-scripts-loaded-securely", 5))
    return (("sri-not-implemented-and-external-scripts-not-loaded-securely", -50) if insecure
            else ("sri-not-implemented-but-external-scripts-loaded-securely", -5))


def xcto_test(answer: Answer) -> tuple[str, int]:
    value = answer.get("X-Content-Type-Options")
    if value is None:
        return "x-content-type-options-not-implemented", -5
    if value.strip().lower() != "nosniff":
        return "x-content-type-options-header-invalid", -5
    return "x-content-type-options-nosniff", 0


def xfo_test(answer: Answer) -> tuple[str, int]:
    if "frame-ancestors" in parse_csp(answer.all("Content-Security-Policy")):
        return "x-frame-options-implemented-via-csp", 5
    value = (answer.get("X-Frame-Options") or "").strip().lower()
    if not value:
        return "x-frame-options-not-implemented", -20
    if value in ("deny", "sameorigin"):
        return "x-frame-options-sameorigin-or-deny", 0
    if value.startswith("allow-from"):
        return "x-frame-options-allow-from-origin", 0
    return "x-frame-options-header-invalid", -20


def corp_test(answer: Answer) -> tuple[str, int]:
    value = (answer.get("Cross-Origin-Resource-Policy") or "").strip().lower()
    if not value:
        return "cross-origin-resource-policy-not-implemented", 0
    if value in ("same-origin", "same-site"):
        return f"cross-origin-resource-policy-implemented-with-{value}", 10
    if value == "cross-origin":
        return "cross-origin-resource-policy-implemented-with-cross-origin", 0
    return "cross-origin-resource-policy-header-invalid", -5


def observatory(answer: Answer, plain: Answer, *, origin: str, https: bool = True) -> Grade:
    """Grade `answer` (fetched from `origin`), with `plain` the same URL fetched over http."""
    hsts = hsts_test(answer, https)
    return Grade({
        "content-security-policy": csp_test(answer, https),
        "cookies": cookies_test(answer, hsts[1] == 0),
        "cross-origin-resource-sharing": cors_test(answer, "https://example.com"),
        "redirection": redirection_test(plain, origin.split("/")[2]),
        "referrer-policy": referrer_test(answer),
        "strict-transport-security": hsts,
        "subresource-integrity": sri_test(answer, origin),
        "x-content-type-options": xcto_test(answer),
        "x-frame-options": xfo_test(answer),
        "cross-origin-resource-policy": corp_test(answer),
    })  # fmt: skip


# --- the scorer on made-up answers: it can tell a bad response from a good one --------------

GOOD = [
    ("Content-Type", "text/html; charset=utf-8"),
    ("Content-Security-Policy", "default-src 'self'; object-src 'none'; frame-ancestors 'none'"),
    ("Strict-Transport-Security", "max-age=31536000; includeSubDomains"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
]
REDIRECT = Answer(301, [("Location", "https://a.example/")])


def test_the_scorer_gives_a_well_configured_response_an_a_plus() -> None:
    grade = observatory(Answer(200, GOOD), REDIRECT, origin="https://a.example")
    assert (grade.score, grade.grade) == (125, "A+")


@pytest.mark.parametrize(
    ("change", "score", "letter"),
    [
        ({"Content-Security-Policy": None}, 55, "C"),  # -25, -20 (no frame-ancestors nor XFO)
        ({"Content-Security-Policy": "default-src 'self' 'unsafe-inline'"}, 60, "C+"),
        ({"Strict-Transport-Security": None}, 80, "B+"),
        ({"Strict-Transport-Security": "max-age=86400"}, 115, "A+"),  # 90: bonuses still
        ({"X-Content-Type-Options": None}, 120, "A+"),
        ({"Cross-Origin-Resource-Policy": None}, 115, "A+"),
        # One result per test, the worst: no HttpOnly (-30) beats no Secure under HSTS (-10).
        ({"Set-Cookie": "sessionid=x; Path=/; SameSite=Lax"}, 70, "B"),
        ({"Set-Cookie": "csrftoken=x; Secure; Path=/"}, 80, "B+"),
        ({"Set-Cookie": "csrftoken=x; Secure; Path=/; SameSite=Lax"}, 130, "A+"),
    ],
)
def test_the_scorer_takes_the_published_points(
    change: dict[str, str | None], score: int, letter: str
) -> None:
    headers = [(k, v) for k, v in GOOD if k not in change]
    headers += [(k, v) for k, v in change.items() if v is not None]
    grade = observatory(Answer(200, headers), REDIRECT, origin="https://a.example")
    assert (grade.score, grade.grade) == (score, letter), grade.results


def test_the_scorer_takes_points_for_a_missing_redirect_and_external_scripts() -> None:
    page = Answer(200, GOOD, b'<script src="https://cdn.example/x.js"></script>')
    grade = observatory(page, Answer(200, []), origin="https://a.example")
    assert grade.result("redirection") == "redirection-missing"
    assert grade.score == 100 - 20 - 5


def test_no_check_is_silenced() -> None:
    assert settings.SILENCED_SYSTEM_CHECKS == []
    assert "SILENCED_SYSTEM_CHECKS" not in (REPO / "receiptsite" / "settings.py").read_text()


def test_every_header_test_has_a_published_entry() -> None:
    grade = observatory(Answer(200, GOOD), REDIRECT, origin="https://a.example")
    assert set(grade.results) == {
        "content-security-policy", "cookies", "cross-origin-resource-sharing", "redirection",
        "referrer-policy", "strict-transport-security", "subresource-integrity",
        "x-content-type-options", "x-frame-options", "cross-origin-resource-policy",
    }  # fmt: skip

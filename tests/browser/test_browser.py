"""The reviewer's page in a real browser: Debian's Chromium driven by Playwright, against a real
gunicorn (tests/livesite.py). axe-core checks accessibility; the page's own Web Crypto code checks
the receipt."""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from receiptsite.integrity import keys, note
from receiptsite.integrity.encoding import b64url_decode
from tests.conftest import EXAMPLE_BODY
from tests.livesite import LiveSite, is_postgres

pytestmark = [
    pytest.mark.browser,
    pytest.mark.live,
]

CHROMIUM = "/usr/bin/chromium"
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21aa", "wcag22aa"]
AUDITOR = ("ada", "a-long-test-password-1")

if not Path(CHROMIUM).exists():  # scripts/test installs it; say so plainly if it is missing
    pytest.fail(f"{CHROMIUM} is missing: run scripts/test, which installs Debian's chromium",
                pytrace=False)

from axe_playwright_python.base import AXE_SCRIPT  # noqa: E402
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright  # noqa: E402


def tamper_live(site: LiveSite, receipt_id: str) -> None:
    """Change a stored receipt's bytes behind the site's back, in the live site's database."""
    sql_drop_sqlite = "DROP TRIGGER receipts_receipt_no_update"
    sql_drop_pg = "DROP TRIGGER receipts_receipt_append_only ON receipts_receipt"
    update = (
        "UPDATE receipts_receipt SET canonical_bytes = {placeholder} WHERE public_id = {id}"
    )
    if is_postgres(site.database_url):
        import psycopg

        with psycopg.connect(site.database_url.replace("postgres://", "postgresql://"),
                             autocommit=True) as conn:
            found = conn.execute("SELECT canonical_bytes FROM receipts_receipt WHERE "
                                 "public_id = %s", [receipt_id]).fetchone()
            assert found is not None, "the receipt is not in the live database"
            data = found[0]
            conn.execute(sql_drop_pg)
            conn.execute(update.format(placeholder="%s", id="%s"),
                         [bytes(data).replace(b"12 findings", b"13 findings"), receipt_id])
    else:
        path = site.database_url[len("sqlite:///"):]
        db = sqlite3.connect(path)
        hex_id = receipt_id.replace("-", "")
        row = db.execute("SELECT canonical_bytes FROM receipts_receipt WHERE public_id = ?",
                           [hex_id]).fetchone()
        assert row is not None, "the receipt is not in the live database"
        db.execute(sql_drop_sqlite)
        db.execute(update.format(placeholder="?", id="?"),
                   [bytes(row[0]).replace(b"12 findings", b"13 findings"), hex_id])
        db.commit()
        db.close()


def awkward_signing_key(folder: Path) -> Path:
    """A key whose C2SP verifier key has "+" and "/" in its base64 part: verifiers that
    split the key string on "+" carelessly break on it (one did, so it is pinned here)."""
    from receiptsite.integrity import keys, note

    while True:
        pem = keys.generate_private_key_pem()
        public = keys.public_raw(keys.load_private_key_pem(pem))
        encoded = note.verifier_key("127.0.0.1/receipts", public).split("+", 2)[2]
        if "+" in encoded and "/" in encoded:
            path = folder / "awkward-key.pem"
            path.write_bytes(pem)
            return path


def publish(live: LiveSite, **changes: Any) -> dict[str, Any]:
    body = {**EXAMPLE_BODY, **changes}
    response = live.post("/api/receipts", body,
                         headers={"Authorization": f"Bearer {live.api_key}"})
    assert response.status == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    key = awkward_signing_key(tmp_path_factory.mktemp("keys"))
    with LiveSite(workers=2, env={"SIGNING_KEY_FILE": str(key)}) as live:
        valid = publish(live, idempotency_key="valid")
        tampered = publish(live, idempotency_key="tampered")
        started = publish(live, idempotency_key="start", phase="start", outcome=None)
        tamper_live(live, tampered["id"])
        live.manage(
            "shell", "-c",
            "from django.contrib.auth.models import Group, User; "
            f"u = User.objects.create_user({AUDITOR[0]!r}, password={AUDITOR[1]!r}, "
            "is_staff=True); u.groups.add(Group.objects.get(name='Auditors'))",
        )
        yield {"live": live, "valid": valid, "tampered": tampered, "start": started}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-quic"],
        )
        yield browser
        browser.close()


class Watched:
    """A page whose console errors and CSP violations are collected."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))
        self.failed: list[str] = []
        page.on("response", lambda r: self.failed.append(f"{r.status} {r.url}")
                if r.status >= 400 else None)
        # Injected by the browser itself (not a page script), so the CSP does not apply to it.
        page.add_init_script(
            "window.__csp = []; document.addEventListener('securitypolicyviolation',"
            " e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
        )

    def csp_violations(self) -> list[str]:
        result: list[str] = self.page.evaluate("window.__csp || []")
        return result

    def assert_clean(self, base: str, *, expected_404: bool = False) -> None:
        assert self.csp_violations() == []
        errors = self.errors
        if expected_404:  # the browser reports the 404 of the page itself; nothing else
            errors = [e for e in errors if "status of 404" not in e]
            assert len(errors) == len(self.errors) - 1
        assert errors == [], self.failed
        assert all(url.startswith(base) for url in self.requests), self.requests


@pytest.fixture
def watched(browser: Browser, site: dict[str, Any]) -> Iterator[Watched]:
    context = browser.new_context(
        permissions=["clipboard-read", "clipboard-write"], base_url=site["live"].url
    )
    yield Watched(context.new_page())
    context.close()


def axe_violations(page: Page) -> list[dict[str, Any]]:
    page.evaluate(AXE_SCRIPT)
    options = json.dumps({"runOnly": {"type": "tag", "values": WCAG_TAGS}})
    result: dict[str, Any] = page.evaluate(f"axe.run(document, {options})")
    return [
        {"id": v["id"], "nodes": [n["html"][:120] for n in v["nodes"]]}
        for v in result["violations"]
    ]


def verify_in_browser(page: Page) -> dict[str, str]:
    page.get_by_role("button", name="Verify in this browser").click()
    # Locator waits, not wait_for_function: the page's CSP forbids evaluating strings.
    page.locator("#browser-results li").nth(3).wait_for(timeout=15_000)
    results = {}
    for item in page.locator("#browser-results li").all():
        name = item.get_attribute("data-check") or ""  # the check, whatever the page's language
        results[name] = item.locator(".result").inner_text()
    return results


# --- the states ---------------------------------------------------------------------------


def test_a_valid_receipt_verifies_in_the_browser(watched: Watched, site: dict[str, Any]) -> None:
    page = watched.page
    page.goto(f"/run/{site['valid']['id']}")
    assert "every check passed" in page.inner_text("#server-check")
    results = verify_in_browser(page)
    assert results == {"hash": "PASS", "signature": "PASS", "log inclusion": "PASS",
                       "checkpoint signature": "PASS"}
    watched.assert_clean(site["live"].url)


def test_a_tampered_receipt_fails_in_the_browser_with_the_warning(
    watched: Watched, site: dict[str, Any]
) -> None:
    page = watched.page
    page.goto(f"/run/{site['tampered']['id']}")
    alert = page.get_by_role("alert")
    assert "Warning: this receipt does not verify" in alert.inner_text()
    assert alert.is_visible()
    results = verify_in_browser(page)
    assert results["hash"] == "FAIL"
    assert results["signature"] == "FAIL"
    assert results["log inclusion"] == "FAIL"
    watched.assert_clean(site["live"].url)


@pytest.mark.parametrize("which", ["valid", "tampered", "start", "missing"])
def test_axe_finds_no_violation(watched: Watched, site: dict[str, Any], which: str) -> None:
    receipt_id = "00000000-0000-4000-8000-000000000000" if which == "missing" else \
        site[which]["id"]
    response = watched.page.goto(f"/run/{receipt_id}")
    assert response is not None
    assert response.status == (404 if which == "missing" else 200)
    assert axe_violations(watched.page) == []
    watched.assert_clean(site["live"].url, expected_404=which == "missing")


def test_axe_finds_no_violation_in_dark_mode_and_in_chinese(
    browser: Browser, site: dict[str, Any]
) -> None:
    context = browser.new_context(color_scheme="dark", locale="zh-CN",
                                  base_url=site["live"].url)
    page = context.new_page()
    page.goto(f"/run/{site['valid']['id']}")
    assert page.locator("html").get_attribute("lang") == "zh-hans"
    assert axe_violations(page) == []
    context.close()


def test_the_decision_form_is_accessible_and_records_a_review(
    watched: Watched, site: dict[str, Any]
) -> None:
    page = watched.page
    receipt_id = site["valid"]["id"]
    page.goto(f"/admin/login/?next=/run/{receipt_id}")
    page.fill("#id_username", AUDITOR[0])
    page.fill("#id_password", AUDITOR[1])
    page.click("input[type=submit]")
    page.wait_for_url(f"**/run/{receipt_id}")
    form = page.locator("form.decision-form")
    assert form.is_visible()
    assert axe_violations(page) == []
    page.select_option("#id_conclusion", "needs_follow_up")
    page.fill("#id_follow_up", "Send the report again by post")
    page.get_by_role("button", name="Record this decision").click()
    page.wait_for_selector("ol.decisions li")
    assert "Needs follow-up" in page.inner_text("#decisions")
    assert "Send the report again by post" in page.inner_text("#decisions")
    watched.assert_clean(site["live"].url)


def test_the_page_works_without_javascript(browser: Browser, site: dict[str, Any]) -> None:
    context = browser.new_context(java_script_enabled=False, base_url=site["live"].url)
    page = context.new_page()
    page.goto(f"/run/{site['valid']['id']}")
    assert "every check passed" in page.inner_text("#server-check")
    assert "sha256sum" in page.inner_text("#integrity")
    assert site["valid"]["output_hash"] in page.inner_text("#integrity")
    assert not page.get_by_role("button", name="Verify in this browser").is_visible()
    assert "Work item:" in page.inner_text("#handoff-block")
    page.get_by_role("link", name="Check again").click()
    assert "every check passed" in page.inner_text("#server-check")
    context.close()


def test_check_again_refreshes_the_panel_in_place(watched: Watched,
                                                  site: dict[str, Any]) -> None:
    page = watched.page
    page.goto(f"/run/{site['valid']['id']}")
    before = page.inner_text("#server-check")
    page.evaluate("document.title = 'marker'")
    with page.expect_response(lambda r: "part=verification" in r.url):
        page.get_by_role("link", name="Check again").click()
    # A newer "Checked at" once htmx has swapped the panel in place...
    expect(page.locator("#server-check")).not_to_have_text(before)
    assert "every check passed" in page.inner_text("#server-check")
    assert page.title() == "marker"  # ...with no navigation
    watched.assert_clean(site["live"].url)


def test_keyboard_alone_verifies_and_copies(watched: Watched, site: dict[str, Any]) -> None:
    page = watched.page
    page.goto(f"/run/{site['valid']['id']}")

    def tab_to(name: str) -> None:
        for _ in range(80):
            page.keyboard.press("Tab")
            focused = page.evaluate("document.activeElement.textContent.trim()")
            if focused == name:
                return
        raise AssertionError(f"Tab never reached {name!r}")

    tab_to("Copy hand-off")
    page.keyboard.press("Enter")
    expect(page.locator("button[data-copy]")).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("Work item:") and site["valid"]["url"] in copied
    tab_to("Verify in this browser")
    page.keyboard.press("Enter")
    page.locator("#browser-results li").nth(3).wait_for(timeout=15_000)
    assert page.locator("#browser-results .check-pass").count() == 4
    watched.assert_clean(site["live"].url)


@pytest.mark.parametrize("which", ["valid", "tampered"])
def test_a_320_px_screen_has_no_horizontal_scroll(
    browser: Browser, site: dict[str, Any], which: str
) -> None:
    context = browser.new_context(viewport={"width": 320, "height": 640},
                                  base_url=site["live"].url)
    page = context.new_page()
    page.goto(f"/run/{site[which]['id']}")
    page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], widths
    context.close()


def test_the_page_prints_the_whole_receipt(browser: Browser, site: dict[str, Any],
                                           tmp_path: Path) -> None:
    context = browser.new_context(base_url=site["live"].url)
    page = context.new_page()
    page.goto(f"/run/{site['valid']['id']}")
    page.emulate_media(media="print")
    assert not page.get_by_role("button", name="Verify in this browser").is_visible()
    pdf = page.pdf(path=str(tmp_path / "receipt.pdf"))
    assert pdf[:4] == b"%PDF" and len(pdf) > 10_000
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", str(tmp_path / "receipt.pdf"), "-"],
                              capture_output=True, text=True, check=True).stdout
        assert "What it does not show" in text and "Technical details" in text
    context.close()


def test_the_in_browser_check_reads_the_same_bytes_as_the_server(
    watched: Watched, site: dict[str, Any]
) -> None:
    """The page's hash is the hash of the verification JSON's bytes, as sha256sum gives."""
    import hashlib

    page = watched.page
    page.goto(f"/run/{site['valid']['id']}")
    verify_in_browser(page)
    answer = site["live"].get(f"/api/receipt/{site['valid']['id']}/verify").json()
    digest = hashlib.sha256(base64.b64decode(answer["canonical_bytes"])).hexdigest()
    assert digest in page.inner_text("#browser-results")


@pytest.mark.parametrize(
    ("missing", "init_script"),
    [
        # Outside a secure context a browser has no crypto.subtle at all.
        ("web crypto", "Object.defineProperty(window.crypto, 'subtle', {value: undefined});"),
        # An older browser has Web Crypto but no Ed25519.
        ("ed25519",
         "const original = crypto.subtle.importKey.bind(crypto.subtle);"
         "crypto.subtle.importKey = (format, data, algorithm, ...rest) =>"
         " (algorithm && algorithm.name === 'Ed25519')"
         "   ? Promise.reject(new DOMException('Unsupported', 'NotSupportedError'))"
         "   : original(format, data, algorithm, ...rest);"),
    ],
)
def test_a_browser_that_cannot_check_says_so_and_never_failed(
    browser: Browser, site: dict[str, Any], missing: str, init_script: str
) -> None:
    context = browser.new_context(base_url=site["live"].url)
    page = context.new_page()
    page.add_init_script(init_script)  # the browser's own injection, not a page script
    page.goto(f"/run/{site['valid']['id']}")
    page.get_by_role("button", name="Verify in this browser").click()
    results = page.locator("#browser-results")
    expect(results.locator("li").last).to_contain_text("could not check here", ignore_case=True)
    text = results.inner_text()
    assert "FAIL" not in text
    if missing == "ed25519":
        assert "PASS" in text  # the hash and the inclusion proof still checked
        assert results.locator(".check-unchecked").count() == 2  # both signatures
    context.close()


# --- checkpoints the page must not accept -----------------------------------------------
# The page reads a C2SP signed note as the server does (receiptsite/integrity/note.py and
# `checklog`): the text ends at the LAST blank line, and a signature only counts when its key
# is published and not marked compromised. Where a test needs a note no honest site serves,
# Playwright swaps the checkpoint in the verification JSON for one signed with a real key;
# the page's own code and the browser's Web Crypto still do all the checking.


def note_text(signed: str) -> str:
    """The text of a signed note as the server splits it: up to the last blank line."""
    return signed[: signed.rindex("\n\n") + 1]


def signature_line(text: str, origin: str, key: Ed25519PrivateKey) -> str:
    """One real signature line (newline included) by `key` over the note text `text`."""
    return note.sign_note(text, origin, key)[len(text) + 1:]


def site_key(live: LiveSite) -> Ed25519PrivateKey:
    """The live site's active signing key, read from its SIGNING_KEY_FILE."""
    return keys.load_private_key_pem(Path(live.base_env["SIGNING_KEY_FILE"]).read_bytes())


def serve_checkpoint(page: Page, receipt_id: str, craft: Callable[[str], str]) -> None:
    """Pass the receipt's verification JSON through from the live site with only its
    checkpoint replaced by craft(the real checkpoint)."""
    def handle(route: Route) -> None:
        response = route.fetch()
        answer = response.json()
        answer["log"]["checkpoint"] = craft(answer["log"]["checkpoint"])
        route.fulfill(response=response, json=answer)

    page.route(f"**/api/receipt/{receipt_id}/verify", handle)


def checkpoint_result(page: Page) -> tuple[str, str]:
    item = page.locator('#browser-results li[data-check="checkpoint signature"]')
    return item.locator(".result").inner_text(), item.inner_text()


@pytest.fixture(scope="module")
def compromised(site: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A site whose first key leaked: it signed a receipt (`early`), then leaked, then signed
    another (`before`); the operator rotated (README "Rotating the signing key":
    SIGNING_KEY_FILE pointed at a new key, the site restarted), the new key signed a third,
    and `compromisekey` marked the first key compromised as of the leak: `early`, logged
    before, is signed again by the new key; `before` is not provably older and fails. (`site`
    first: it collects the static files this site serves too.)"""
    with LiveSite(workers=2) as live:
        leaked = keys.load_private_key_pem(Path(live.base_env["SIGNING_KEY_FILE"]).read_bytes())
        early = publish(live, idempotency_key="early")
        [old] = live.get("/.well-known/receipt-keys.json").json()["keys"]
        leaked_at = live.get(f"/api/receipt/{early['id']}/verify").json()["verified_at"]
        before = publish(live, idempotency_key="before")
        fresh = live.tmp / "rotated-key.pem"
        fresh.write_bytes(keys.generate_private_key_pem())
        fresh.chmod(0o600)
        # For manage.py and the restarted site; the old key signs over to the new one in the
        # keys' history (README, "Rotating the signing key").
        live.base_env["PREVIOUS_SIGNING_KEY_FILE"] = live.base_env["SIGNING_KEY_FILE"]
        live.base_env["SIGNING_KEY_FILE"] = str(fresh)
        live.stop()
        live._serve()
        after = publish(live, idempotency_key="after")
        # One argument with "=": a kid is base64url and may begin with "-".
        live.manage("compromisekey", f"--at={leaked_at}", "--", old["kid"])
        document = live.get("/.well-known/receipt-keys.json").json()
        assert [k["status"] for k in document["keys"]] == ["compromised", "active"]
        yield {"live": live, "early": early, "before": before, "after": after,
               "leaked": leaked, "keys": document}


@pytest.fixture
def watched_compromised(browser: Browser, compromised: dict[str, Any]) -> Iterator[Watched]:
    context = browser.new_context(base_url=compromised["live"].url)
    yield Watched(context.new_page())
    context.close()


def test_a_checkpoint_signed_by_a_compromised_key_does_not_count(
    watched_compromised: Watched, compromised: dict[str, Any]
) -> None:
    live, leaked = compromised["live"], compromised["leaked"]
    origin = compromised["keys"]["log"]["origin"]

    def by_the_leaked_key(real: str) -> str:
        return note.sign_note(note_text(real), origin, leaked)

    # What the server's checklog makes of that note: it counts no compromised key.
    real = live.get(f"/api/receipt/{compromised['after']['id']}/verify").json()["log"]
    leaked_note = by_the_leaked_key(real["checkpoint"])
    counted = [note.verifier_key(origin, b64url_decode(k["x"]))
               for k in compromised["keys"]["keys"] if k["status"] != "compromised"]
    assert note.verify_note(leaked_note, counted) is None
    # ...though the signature itself is real, by a key the document still lists.
    assert note.verify_note(leaked_note, compromised["keys"]["log"]["verifier_keys"]) \
        == note_text(real["checkpoint"])

    page = watched_compromised.page
    serve_checkpoint(page, compromised["after"]["id"], by_the_leaked_key)
    page.goto(f"/run/{compromised['after']['id']}")
    results = verify_in_browser(page)
    assert results == {"hash": "PASS", "signature": "PASS", "log inclusion": "PASS",
                       "checkpoint signature": "FAIL"}
    assert "signed only by a key marked compromised" in checkpoint_result(page)[1]
    watched_compromised.assert_clean(live.url)


def test_a_checkpoint_cosigned_by_a_compromised_key_counts_the_good_signature(
    watched_compromised: Watched, compromised: dict[str, Any]
) -> None:
    """The compromised key's signature is ignored, not held against the note, as the server
    ignores a signature by a key it does not count."""
    origin = compromised["keys"]["log"]["origin"]

    def cosigned(real: str) -> str:
        return real + signature_line(note_text(real), origin, compromised["leaked"])

    page = watched_compromised.page
    serve_checkpoint(page, compromised["after"]["id"], cosigned)
    page.goto(f"/run/{compromised['after']['id']}")
    assert verify_in_browser(page) == {"hash": "PASS", "signature": "PASS",
                                       "log inclusion": "PASS", "checkpoint signature": "PASS"}
    watched_compromised.assert_clean(compromised["live"].url)


def test_a_receipt_signed_by_a_compromised_key_fails_in_the_browser(
    watched_compromised: Watched, compromised: dict[str, Any]
) -> None:
    page = watched_compromised.page
    page.goto(f"/run/{compromised['before']['id']}")
    assert "Warning: this receipt does not verify" in page.get_by_role("alert").inner_text()
    results = verify_in_browser(page)
    assert results == {"hash": "PASS", "signature": "FAIL", "log inclusion": "PASS",
                       "checkpoint signature": "PASS"}
    assert "compromised" in page.locator("#browser-results li").nth(1).inner_text()
    watched_compromised.assert_clean(compromised["live"].url)


def test_a_keys_document_that_revives_the_compromised_key_is_not_believed(
    watched_compromised: Watched, compromised: dict[str, Any]
) -> None:
    """The keys document as whoever changed the key's row behind the site's back would have it
    served: the leaked key `active` again. Its history says otherwise, and the page believes
    the history (docs/verification.md, "The keys' history")."""
    page = watched_compromised.page

    def revived(route: Route) -> None:
        response = route.fetch()
        document = response.json()
        leaked = document["keys"][0]
        leaked.update(status="active", retired_at=None)
        leaked.pop("compromised_at")
        route.fulfill(response=response, json=document)

    page.route("**/.well-known/receipt-keys.json", revived)
    page.goto(f"/run/{compromised['before']['id']}")
    page.get_by_role("button", name="Verify in this browser").click()
    page.locator("#browser-results li").nth(4).wait_for(timeout=15_000)
    items = page.locator("#browser-results li")
    results = {item.get_attribute("data-check"): item.locator(".result").inner_text()
               for item in items.all()}
    assert results == {"keys' history": "FAIL", "hash": "PASS", "signature": "FAIL",
                       "log inclusion": "PASS", "checkpoint signature": "PASS"}
    assert "listed otherwise than its newest statement says" in items.nth(0).inner_text()
    assert "compromised" in items.nth(2).inner_text()
    watched_compromised.assert_clean(compromised["live"].url)


def test_a_receipt_signed_again_after_the_compromise_verifies_in_the_browser(
    watched_compromised: Watched, compromised: dict[str, Any]
) -> None:
    page = watched_compromised.page
    page.goto(f"/run/{compromised['early']['id']}")
    assert "every check passed" in page.inner_text("#server-check")
    assert verify_in_browser(page) == {"hash": "PASS", "signature": "PASS",
                                       "log inclusion": "PASS", "checkpoint signature": "PASS"}
    # The evidence the site gives for the new signature is checked here too.
    signature = page.locator("#browser-results li").nth(1).inner_text()
    assert "resting on a checkpoint of" in signature and "site's own record" in signature
    watched_compromised.assert_clean(compromised["live"].url)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"inclusion_proof": [base64.b64encode(bytes(32)).decode()]}, "inclusion proof"),
        ({"signed_at": "2999-01-01T00:00:00.000000Z"}, "not before the compromise"),
    ],
)
def test_evidence_that_does_not_hold_fails_the_signature_in_the_browser(
    watched_compromised: Watched, compromised: dict[str, Any], change: dict[str, Any], said: str
) -> None:
    """A re-signed receipt's `signature.evidence` (docs/verification.md) changed on its way:
    a proof that does not lead to the checkpoint's root, a checkpoint not signed before the
    compromise. The signature itself still verifies; the page fails it, saying why."""
    page = watched_compromised.page
    receipt_id = compromised["early"]["id"]

    def handle(route: Route) -> None:
        response = route.fetch()
        answer = response.json()
        answer["signature"]["evidence"].update(change)
        route.fulfill(response=response, json=answer)

    page.route(f"**/api/receipt/{receipt_id}/verify", handle)
    page.goto(f"/run/{receipt_id}")
    assert verify_in_browser(page) == {"hash": "PASS", "signature": "FAIL",
                                       "log inclusion": "PASS", "checkpoint signature": "PASS"}
    signature = page.locator("#browser-results li").nth(1).inner_text()
    assert "its evidence does not hold" in signature and said in signature
    watched_compromised.assert_clean(compromised["live"].url)


def test_the_page_says_why_a_receipt_by_the_compromised_key_fails(
    watched_compromised: Watched, compromised: dict[str, Any]
) -> None:
    page = watched_compromised.page
    page.goto(f"/run/{compromised['before']['id']}")
    alert = page.get_by_role("alert").inner_text()
    assert "was reported compromised" in alert and "may have been altered" not in alert
    page.get_by_role("button", name="Verify in this browser").click()
    signature = page.locator("#browser-results li").nth(1)
    expect(signature).to_contain_text("could not be shown to be logged before then")
    watched_compromised.assert_clean(compromised["live"].url)


@pytest.mark.parametrize("crafted", ["signed again after a blank line",
                                     "junk after a second blank line"])
def test_the_checkpoint_text_ends_at_its_last_blank_line_as_on_the_server(
    watched: Watched, site: dict[str, Any], crafted: str
) -> None:
    """Notes whose first blank line ends the real checkpoint text, followed by its real
    signature: read up to the first blank line they pass, but the server reads them up to the
    last one (or rejects them) and takes no checkpoint from them."""
    live, key = site["live"], site_key(site["live"])
    document = live.get("/.well-known/receipt-keys.json").json()
    origin = document["log"]["origin"]

    def craft(real: str) -> str:
        if crafted == "signed again after a blank line":
            # A well-formed note, by the site's real key, whose text is the whole real note.
            return note.sign_note(real, origin, key)
        return real + "\n" + "not a signature\n"

    real = live.get(f"/api/receipt/{site['valid']['id']}/verify").json()["log"]["checkpoint"]
    body = real.split("\n\n", 1)[0] + "\n"  # the first-blank-line reading: the real checkpoint
    assert note.verify_note(real, [document["log"]["verifier_key"]]) == body
    assert craft(real).startswith(body + "\n")  # a blank line right after the real text
    server_reads = note.verify_note(craft(real), document["log"]["verifier_keys"])
    if crafted == "signed again after a blank line":
        assert server_reads == real
        with pytest.raises(ValueError):
            note.parse_checkpoint(real)  # it holds a blank line: not a checkpoint text
    else:
        assert server_reads is None

    page = watched.page
    serve_checkpoint(page, site["valid"]["id"], craft)
    page.goto(f"/run/{site['valid']['id']}")
    results = verify_in_browser(page)
    assert results == {"hash": "PASS", "signature": "PASS", "log inclusion": "PASS",
                       "checkpoint signature": "FAIL"}
    watched.assert_clean(live.url)

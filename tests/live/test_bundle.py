"""GET /run/<id>/bundle.json, the offline bundle, and the page's machine-readable facts and
"check it yourself" commands.

End to end through a live gunicorn (tests/livesite.py) on the suite's database (SQLite, or
PostgreSQL with DATABASE_URL): the bundle is downloaded over HTTP, the site is stopped, and
`receipt-verify --key` checks the file with no network. The page's JSON-LD block is parsed
from the live page, and its Linux command (and the parts of the macOS one that this machine
has) is run against the live site.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from receiptsite_client.verify import BUNDLE_CHECK_NAMES, parse_tlog_proof

from receiptsite.integrity import merkle, tlogproof
from receiptsite.integrity.encoding import b64decode
from tests.conftest import example_body
from tests.db.test_bundle import page_parts
from tests.livesite import VENV_BIN, LiveSite, Response

pytestmark = pytest.mark.live

CLI = VENV_BIN / "receipt-verify"


# --- reading the page ----------------------------------------------------------------------


# --- the live site -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site() -> Iterator[dict[str, Any]]:
    with LiveSite(workers=2) as live:
        published = []
        for i in range(3):
            answer = live.post("/api/receipts", example_body(idempotency_key=f"bundle-{i}"))
            assert answer.status == 201, answer
            published.append(answer.json())
        yield {"live": live, "receipts": published}


def bundle_of(site: dict[str, Any], which: int = 0) -> tuple[Response, dict[str, Any]]:
    receipt_id = site["receipts"][which]["id"]
    answer = site["live"].get(f"/run/{receipt_id}/bundle.json")
    assert answer.status == 200, answer
    return answer, answer.json()


def assert_capability_headers(answer: Response) -> None:
    assert answer.headers["Referrer-Policy"] == "same-origin"
    assert answer.headers["X-Robots-Tag"] == "noindex"
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.headers["Access-Control-Allow-Origin"] == "*"


@pytest.mark.live
def test_the_bundle_is_a_download_with_the_page_headers(site: dict[str, Any]) -> None:
    receipt_id = site["receipts"][0]["id"]
    answer, body = bundle_of(site)
    assert answer.content_type == "application/json"
    assert answer.headers["Content-Disposition"] == (
        f'attachment; filename="receipt-{receipt_id}.bundle.json"'
    )
    assert_capability_headers(answer)
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert set(body) == {"bundle", "verification", "keys", "tlog_proof"}
    assert body["bundle"] == "receipt-bundle/v1"
    head = site["live"].request("HEAD", f"/run/{receipt_id}/bundle.json")
    assert head.status == 200 and head.body == b""


@pytest.mark.live
def test_the_bundle_holds_what_the_verify_and_keys_routes_serve(site: dict[str, Any]) -> None:
    receipt_id = site["receipts"][1]["id"]
    _answer, body = bundle_of(site, 1)
    verification = site["live"].get(f"/api/receipt/{receipt_id}/verify").json()
    keys = site["live"].get("/.well-known/receipt-keys.json").json()
    del verification["verified_at"], body["verification"]["verified_at"]
    assert body["verification"] == verification
    assert body["verification"]["status"] == "valid"
    assert body["keys"] == keys


@pytest.mark.live
def test_the_tlog_proof_is_the_log_part_in_the_c2sp_format(site: dict[str, Any]) -> None:
    _answer, body = bundle_of(site, 1)
    log = body["verification"]["log"]
    text = body["tlog_proof"]
    hashes = "".join(f"{h}\n" for h in log["inclusion_proof"])
    assert text == f"c2sp.org/tlog-proof@v1\nindex {log['index']}\n{hashes}\n{log['checkpoint']}"
    # Read back by the site's reader and by receipt-verify's own, which share no code.
    for parsed in (tlogproof.parse_proof(text), parse_tlog_proof(text)):
        assert parsed.index == log["index"] == 1
        assert parsed.hashes == [b64decode(h) for h in log["inclusion_proof"]]
        assert parsed.checkpoint == log["checkpoint"]
        assert parsed.extra is None
    # And the proof holds by itself: the leaf of the bytes, up to the checkpoint's root.
    data = b64decode(body["verification"]["canonical_bytes"])
    lines = log["checkpoint"].split("\n")
    assert merkle.verify_inclusion(
        merkle.leaf_hash(data), log["index"], int(lines[1]), parsed.hashes, b64decode(lines[2])
    )


@pytest.mark.live
def test_an_unknown_or_malformed_id_is_the_page_404(site: dict[str, Any]) -> None:
    live = site["live"]
    page_path = "/run/00000000-0000-4000-8000-000000000000"
    page_404 = live.get(page_path)
    for path in (
        "/run/00000000-0000-4000-8000-000000000000/bundle.json",
        "/run/not-a-receipt/bundle.json",
        "/run/00000000-0000-4000-8000-00000000000/bundle.json",
    ):
        answer = live.get(path)
        assert answer.status == 404, path
        assert answer.content_type == page_404.content_type == "text/html; charset=utf-8"
        # The page's 404 (its language links name the path asked for).
        assert answer.text.replace(path, "") == page_404.text.replace(page_path, "")
        assert "Content-Disposition" not in answer.headers
        assert_capability_headers(answer)


@pytest.mark.live
def test_another_method_is_refused(site: dict[str, Any]) -> None:
    receipt_id = site["receipts"][0]["id"]
    answer = site["live"].request("POST", f"/run/{receipt_id}/bundle.json", b"{}")
    assert answer.status == 405
    assert "GET" in answer.headers["Allow"]


@pytest.mark.live
def test_receipt_verify_checks_the_downloaded_bundle_with_no_network(
    tmp_path: Path,
) -> None:
    """Download, stop the site, then check the file with a pinned key: nothing to reach."""
    with LiveSite(workers=1) as live:
        answer = live.post("/api/receipts", example_body(idempotency_key="offline"))
        receipt_id = answer.json()["id"]
        live.post("/api/receipts", example_body(idempotency_key="offline-2"))
        download = live.get(f"/run/{receipt_id}/bundle.json")
        keys = live.get("/.well-known/receipt-keys.json").json()
        live.stop()
        with pytest.raises(OSError):
            live.get("/healthz", timeout=2)  # nothing answers now
    file = tmp_path / f"receipt-{receipt_id}.bundle.json"
    file.write_bytes(download.body)
    x = keys["keys"][0]["x"]
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(keys))

    for key in (x, str(keys_file)):
        done = subprocess.run(
            [str(CLI), str(file), f"--key={key}", "--json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        checks = json.loads(done.stdout)["checks"]
        # `witnesses` is a check only with --policy: without one they are reported, not required.
        assert [c["name"] for c in checks] == [n for n in BUNDLE_CHECK_NAMES if n != "witnesses"]
        assert {c["result"] for c in checks} == {"pass"}

    # A tlog proof that disagrees with the log part is caught, offline too.
    bundle = json.loads(download.body)
    bundle["tlog_proof"] = bundle["tlog_proof"].replace("index 0\n", "index 1\n")
    file.write_text(json.dumps(bundle))
    done = subprocess.run(
        [str(CLI), str(file), f"--key={x}", "--json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stdout
    failed = [c["name"] for c in json.loads(done.stdout)["checks"] if c["result"] == "fail"]
    assert failed == ["tlog_proof"]


@pytest.mark.live
def test_no_log_line_holds_a_bundle_path_in_full(site: dict[str, Any]) -> None:
    live = site["live"]
    receipt_id = site["receipts"][2]["id"]
    assert live.get(f"/run/{receipt_id}/bundle.json").status == 200
    assert live.get(f"/run/{receipt_id[:-1]}0/bundle.json").status in (200, 404)
    logs = live.stdout() + live.stderr()
    assert "bundle.json" in logs  # the access lines are there, with the id cut
    assert receipt_id not in logs
    assert receipt_id.replace("-", "") not in logs


# --- the page: JSON-LD and commands ---------------------------------------------------------


@pytest.mark.live
def test_the_page_carries_its_facts_as_json_ld(site: dict[str, Any]) -> None:
    receipt = site["receipts"][0]
    answer = site["live"].get(f"/run/{receipt['id']}")
    assert answer.status == 200
    csp = answer.headers["Content-Security-Policy"]
    script_src = re.search(r"script-src ([^;]*)", csp)
    assert script_src is not None and "unsafe-inline" not in csp
    assert script_src[1].split() == ["'self'"]
    [block] = page_parts(answer.text).json_ld
    facts = json.loads(block)
    assert facts["@context"] == "https://schema.org"
    assert facts["@type"] == "DigitalDocument"
    assert facts["@id"] == receipt["url"] == facts["url"]
    assert facts["identifier"] == receipt["id"]
    assert facts["dateCreated"] == receipt["recorded_at"]
    assert facts["encodingFormat"] == "application/json"
    assert facts["additionalProperty"] == {
        "@type": "PropertyValue",
        "propertyID": "sha256",
        "name": "SHA-256 of the receipt's canonical bytes (RFC 8785)",
        "value": receipt["output_hash"],
    }
    assert facts["publisher"] == {"@type": "Organization", "name": "Acme Corp"}


@pytest.mark.live
def test_the_linux_command_prints_the_hash(site: dict[str, Any]) -> None:
    receipt = site["receipts"][0]
    commands = page_parts(site["live"].get(f"/run/{receipt['id']}").text).commands
    assert set(commands) == {"linux", "macos", "windows"}
    linux = commands["linux"]
    assert linux == (
        f"curl -s {receipt['verify_url']} | jq -r .canonical_bytes | base64 -d | sha256sum"
    )
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", linux], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{receipt['output_hash']}  -\n"


@pytest.mark.live
def test_the_macos_command_prints_the_hash_with_the_tools_here(site: dict[str, Any]) -> None:
    """macOS has `shasum -a 256` (Perl's, which Debian has too) and `base64 -D`, which GNU's
    base64 lacks: where this machine's base64 refuses -D, its -d stands in for that part."""
    if shutil.which("shasum") is None:
        pytest.skip("shasum is not installed (Debian: it comes with perl)")
    receipt = site["receipts"][0]
    macos = page_parts(site["live"].get(f"/run/{receipt['id']}").text).commands["macos"]
    assert macos == (
        f"curl -s {receipt['verify_url']} | jq -r .canonical_bytes | base64 -D | shasum -a 256"
    )
    here = subprocess.run(["base64", "-D"], input="", capture_output=True, text=True, timeout=10)
    runnable = macos if here.returncode == 0 else macos.replace("base64 -D", "base64 -d")
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", runnable], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{receipt['output_hash']}  -\n"


POWERSHELL = re.compile(
    r"\$r = Invoke-RestMethod '(?P<url>[^']+)'; "
    r"\(Get-FileHash -Algorithm SHA256 -InputStream \(\[IO\.MemoryStream\]::new\("
    r"\[Convert\]::FromBase64String\(\$r\.canonical_bytes\)\)\)\)\.Hash\.ToLower\(\)"
)


def _balanced(text: str) -> bool:
    """Brackets nest and close, outside single-quoted strings (PowerShell's literal ones)."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    quoted = False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack and not quoted


@pytest.mark.live
def test_the_powershell_command_is_well_formed(site: dict[str, Any]) -> None:
    """PowerShell (pwsh) is not installed here, so the Windows command is not run: its text is
    held to the one form that Windows PowerShell 5.1 and PowerShell 7 both run (the URL in a
    literal single-quoted string, every bracket closed, the hash printed in lowercase as the
    page shows it). Where pwsh exists, it is run as well."""
    receipt = site["receipts"][0]
    windows = page_parts(site["live"].get(f"/run/{receipt['id']}").text).commands["windows"]
    match = POWERSHELL.fullmatch(windows)
    assert match is not None, windows
    assert match["url"] == receipt["verify_url"]
    assert _balanced(windows)
    pwsh = shutil.which("pwsh")
    if pwsh is not None:
        done = subprocess.run(
            [pwsh, "-NoProfile", "-Command", windows], capture_output=True, text=True, timeout=60
        )
        assert done.stdout.strip() == receipt["output_hash"], done.stderr


# --- through Django's test client: rate limit, library check --------------------------------




""""Check it yourself", as a reviewer does it: every command copied exactly as the receipt page
shows it and run with bash (curl, jq, openssl, sha256sum, base64, and receipt-verify from the
repository's virtual environment on PATH) against a live gunicorn. Each prints what the page
says it prints; for a receipt changed behind the site's back, the same commands fail; and the
410 page of a withdrawn receipt gives the commands that check a copy someone kept.

The site signs with a key whose base64url `x` begins with "-" (one key in 64 does): given as
`--key <x>` a command line would read it as an option, so the page gives it as `--key=<x>`."""

from __future__ import annotations

import base64
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from receiptsite.integrity.encoding import b64url
from receiptsite.integrity.keys import generate_private_key_pem, load_private_key_pem, public_raw
from tests.conftest import example_body
from tests.livesite import REPO, VENV_BIN, LiveSite, is_postgres

pytestmark = [pytest.mark.live, pytest.mark.any_database]

TOOLS = ("bash", "curl", "jq", "openssl", "sha256sum", "base64")


# --- changing a live site's rows behind its back (the guard lifted, as tests do) ---------------


def change_live_row(site: LiveSite, receipt_id: str, column: str, value: Any) -> None:
    """Set one column of a stored receipt in the live site's database, its append-only
    trigger dropped first (the documented maintenance path of the tests)."""
    if is_postgres(site.database_url):
        import psycopg

        url = site.database_url.replace("postgres://", "postgresql://")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER IF EXISTS receipts_receipt_append_only ON receipts_receipt")
            conn.execute(f"UPDATE receipts_receipt SET {column} = %s WHERE public_id = %s",
                         [value, receipt_id])
        return
    db = sqlite3.connect(site.database_url[len("sqlite:///"):])
    try:
        db.execute("DROP TRIGGER IF EXISTS receipts_receipt_no_update")
        db.execute(f"UPDATE receipts_receipt SET {column} = ? WHERE public_id = ?",
                   [value, receipt_id.replace("-", "")])
        db.commit()
    finally:
        db.close()


def stored_bytes(site: LiveSite, receipt_id: str) -> bytes:
    answer = site.get(f"/api/receipt/{receipt_id}/verify")
    assert answer.status == 200, answer
    return base64.b64decode(answer.json()["canonical_bytes"])


def change_live_bytes(site: LiveSite, receipt_id: str, old: bytes, new: bytes) -> None:
    data = stored_bytes(site, receipt_id)
    assert old in data
    change_live_row(site, receipt_id, "canonical_bytes", data.replace(old, new))


# --- reading and running what the page shows --------------------------------------------------


def shown_commands(html: str) -> dict[str, str]:
    """Each command block of a page, by its `data-command` (and `data-system`), as shown."""
    block = r'<pre class="command"[^>]*data-(?:command|system)="([^"]+)"[^>]*>(.*?)</pre>'
    found = re.findall(block, html, re.S)
    return {name: unescape(text) for name, text in found}


def run(command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """A command as a reader pastes it into bash, in `folder`, with receipt-verify on PATH."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)


def key_beginning_with_a_dash(folder: Path) -> Path:
    while True:
        pem = generate_private_key_pem()
        if b64url(public_raw(load_private_key_pem(pem))).startswith("-"):
            path = folder / "dash-key.pem"
            path.write_bytes(pem)
            path.chmod(0o600)
            return path


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    assert missing == [], f"the commands need {missing} (Debian: apt-get install {missing})"
    key = key_beginning_with_a_dash(tmp_path_factory.mktemp("keys"))
    with LiveSite(workers=2, env={"SIGNING_KEY_FILE": str(key)}) as live:

        def publish(name: str) -> dict[str, Any]:
            answer = live.post("/api/receipts", example_body(idempotency_key=name))
            assert answer.status == 201, answer
            result: dict[str, Any] = answer.json()
            return result

        valid, kept, tampered = publish("valid"), publish("kept"), publish("tampered")
        kept_bytes = stored_bytes(live, kept["id"])
        withdrawn = live.post(f"/api/receipts/{kept['id']}/withdrawal", {"reason": "legal"})
        assert withdrawn.status == 201, withdrawn
        change_live_bytes(live, tampered["id"], b"12 findings", b"13 findings")
        x = live.get("/.well-known/receipt-keys.json").json()["keys"][0]["x"]
        yield {"live": live, "valid": valid, "tampered": tampered, "kept": kept,
               "kept_bytes": kept_bytes, "x": x}


def page_of(site: dict[str, Any], which: str) -> tuple[int, str]:
    answer = site["live"].get(f"/run/{site[which]['id']}")
    return answer.status, answer.text


# --- the receipt page's commands --------------------------------------------------------------


def test_the_key_named_begins_with_a_dash_and_is_given_with_an_equals_sign(
    site: dict[str, Any]
) -> None:
    status, html = page_of(site, "valid")
    assert status == 200
    commands = shown_commands(html)
    assert site["x"].startswith("-")
    assert commands["receipt-verify"] == f"receipt-verify {site['valid']['url']} --key={site['x']}"
    bundle = f"receipt-{site['valid']['id']}.bundle.json"
    assert commands["bundle"] == f"receipt-verify {bundle} --key={site['x']}"


def test_the_hash_command_prints_the_hash_the_page_states(
    site: dict[str, Any], tmp_path: Path
) -> None:
    _, html = page_of(site, "valid")
    done = run(shown_commands(html)["linux"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{site['valid']['output_hash']}  -\n"
    assert f'<pre class="mono" tabindex="0">{site["valid"]["output_hash"]}</pre>' in html


def test_the_signature_command_prints_what_the_page_says(
    site: dict[str, Any], tmp_path: Path
) -> None:
    _, html = page_of(site, "valid")
    command = shown_commands(html)["signature"]
    done = run(command, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "Signature Verified Successfully\n"
    assert "It prints “Signature Verified Successfully”" in unescape(html)
    # The key is taken from the keys document by the id the page names: the one that signed.
    kid = site["live"].get(f"/api/receipt/{site['valid']['id']}/verify").json()["signature"][
        "key_id"]
    assert f'select(.kid == "{kid}")' in command
    assert (tmp_path / "key.pem").read_text().startswith("-----BEGIN PUBLIC KEY-----")


def test_receipt_verify_prints_what_the_page_says_and_exits_0(
    site: dict[str, Any], tmp_path: Path
) -> None:
    _, html = page_of(site, "valid")
    done = run(shown_commands(html)["receipt-verify"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "Verdict: VALID. Every check passed."
    assert "ends with “Verdict: VALID. Every check passed.” (exit status 0" in unescape(html)


def test_the_offline_command_checks_the_bundle_the_page_offers(
    site: dict[str, Any], tmp_path: Path
) -> None:
    _, html = page_of(site, "valid")
    download = re.search(
        r'<a class="button" id="bundle-download" href="([^"]+)" download="([^"]+)"', html)
    assert download is not None
    (tmp_path / download[2]).write_bytes(site["live"].get(download[1]).body)
    done = run(shown_commands(html)["bundle"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "Verdict: VALID. Every check passed."


@pytest.mark.any_database
def test_the_install_command_installs_a_receipt_verify_that_checks_the_receipt(
    site: dict[str, Any], tmp_path: Path
) -> None:
    """The install line run as shown, in a copy of the source code, into a new virtual
    environment that holds nothing else (pip fetches what the client needs from its
    configured package index); then the page's receipt-verify command with that one."""
    _, html = page_of(site, "valid")
    assert "whose folder clients/python holds it" in unescape(html)
    commands = shown_commands(html)
    venv = tmp_path / "reader-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    # A copy of the source code's client folder (pip may write build files beside it).
    source = tmp_path / "receiptsite"
    shutil.copytree(REPO / "clients" / "python", source / "clients" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run(["bash", "-c", commands["install"]], cwd=source, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (venv / "bin" / "receipt-verify").exists()
    done = subprocess.run(["bash", "-c", commands["receipt-verify"]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "Verdict: VALID. Every check passed."


def test_the_page_says_why_these_commands_are_independent_and_the_browser_check_is_not(
    site: dict[str, Any]
) -> None:
    _, html = page_of(site, "valid")
    assert ("These commands run on your own computer, with your own tools and a key you can "
            "keep, so they do not depend on this site; “Verify in this browser” runs code this "
            "site sends, so a dishonest site could make it say anything.") in unescape(html)


def test_for_a_receipt_whose_bytes_changed_the_same_commands_fail(
    site: dict[str, Any], tmp_path: Path
) -> None:
    status, html = page_of(site, "tampered")
    assert status == 200
    commands = shown_commands(html)
    signature = run(commands["signature"], tmp_path)
    assert signature.returncode != 0
    assert "Signature Verification Failure" in signature.stdout + signature.stderr
    verify = run(commands["receipt-verify"], tmp_path)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert verify.stdout.splitlines()[-1].startswith("Verdict: INVALID")
    hashed = run(commands["linux"], tmp_path)
    assert hashed.stdout != f"{site['tampered']['output_hash']}  -\n"


# --- the withdrawn page's commands, for a copy someone kept ------------------------------------


def test_a_kept_copy_of_a_withdrawn_receipt_checks_with_the_commands_of_its_410_page(
    site: dict[str, Any], tmp_path: Path
) -> None:
    live, kept = site["live"], site["kept"]
    answer = live.get(f"/run/{kept['id']}")
    assert answer.status == 410
    html = unescape(answer.text)
    assert kept["id"] in html
    assert kept["output_hash"] in html
    (tmp_path / "receipt.json").write_bytes(site["kept_bytes"])
    commands = shown_commands(answer.text)
    assert len(commands) == 3
    kept_answer = live.get(f"/api/receipt/{kept['id']}/verify").json()
    fingerprint, signature, leaf = (run(commands[f"copy-{n}"], tmp_path) for n in (1, 2, 3))
    assert fingerprint.stdout == f"{kept['output_hash']}  receipt.json\n", fingerprint.stderr
    assert "this prints the kept output hash" in html
    assert signature.stdout == "Signature Verified Successfully\n", signature.stderr
    assert leaf.stdout == kept_answer["leaf_hash"] + "\n", leaf.stderr
    assert f"<code>{kept_answer['leaf_hash']}</code>" in html


def test_a_changed_copy_of_a_withdrawn_receipt_fails_them(
    site: dict[str, Any], tmp_path: Path
) -> None:
    live, kept = site["live"], site["kept"]
    commands = shown_commands(live.get(f"/run/{kept['id']}").text)
    (tmp_path / "receipt.json").write_bytes(
        site["kept_bytes"].replace(b"12 findings", b"13 findings"))
    assert run(commands["copy-1"], tmp_path).stdout != f"{kept['output_hash']}  receipt.json\n"
    assert run(commands["copy-2"], tmp_path).returncode != 0

"""The README's producer examples, run as a reader would run them: each code block of the
section "Publishing from an agent" in a fresh Python (or bash) process, against a live site,
with RECEIPTSITE_URL and RECEIPTSITE_API_KEY set as the README says. No hosted model can be
reached here; the examples use each framework's own local fake model, as the README says."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.livesite import REPO, VENV_BIN, LiveSite

pytestmark = [pytest.mark.live, pytest.mark.any_database]

SECTION = "## Publishing from an agent"
OFFLINE = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
}


def blocks(language: str) -> list[str]:
    text = (REPO / "README.md").read_text()
    start = text.index(SECTION)
    section = text[start : text.index("\n## ", start + len(SECTION))]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def run(site: LiveSite, command: list[str], cwd: Path, **extra: str) -> str:
    env = {
        **os.environ,
        **OFFLINE,
        "RECEIPTSITE_URL": site.url,
        "RECEIPTSITE_API_KEY": site.api_key,
        "CREWAI_STORAGE_DIR": str(cwd / "crewai"),
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
        **extra,
    }
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def site() -> Iterator[LiveSite]:
    with LiveSite(workers=2) as live:
        yield live


def test_the_section_has_an_example_for_the_client_each_framework_and_receipt_verify() -> None:
    python = blocks("python")
    assert len(python) == 4
    for name in ("Client(", "receiptsite_client.langchain", "receiptsite_client.crewai",
                 "receiptsite_client.openai_agents"):
        assert any(name in block for block in python), name
    assert any("receipt-verify" in block for block in blocks("sh"))


@pytest.mark.parametrize("index", range(4))
def test_each_python_example_runs_and_publishes_receipts(
    site: LiveSite, tmp_path: Path, index: int
) -> None:
    script = tmp_path / "example.py"
    script.write_text(blocks("python")[index])
    before = receipts(site)
    output = run(site, [str(VENV_BIN / "python"), str(script)], tmp_path)
    after = receipts(site)
    assert len(after) > len(before), output
    assert f"{site.url}/run/" in output  # a receipt URL, printed as the README shows


def receipts(site: LiveSite) -> list[str]:
    answer = site.get("/api/receipts?limit=200",
                      headers={"Authorization": f"Bearer {site.api_key}"})
    return [r["id"] for r in answer.json()["receipts"]]


def test_the_shell_examples_run_with_their_documented_exit_codes(
    site: LiveSite, tmp_path: Path
) -> None:
    outbox, verify = blocks("sh")[1], blocks("sh")[2]
    # The outbox example flushes the outbox the client example wrote.
    (tmp_path / "example.py").write_text(blocks("python")[0])
    run(site, [str(VENV_BIN / "python"), "example.py"], tmp_path)
    run(site, ["bash", "-c", outbox], tmp_path)
    receipt_id = receipts(site)[0]
    script = verify.replace("<id>", receipt_id).replace("vectors/", f"{REPO}/vectors/")
    lines = [line for line in script.splitlines() if line.strip()]
    # Each line alone, so each exit code is seen: the last one must be 1 (a corrupted vector).
    for line in lines[:-1]:
        run(site, ["bash", "-c", "\n".join([lines[0], line])], tmp_path)
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", lines[-1]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    keys = json.loads((tmp_path / "keys.json").read_text())
    assert keys["keys"] and keys["keys"][0]["kty"] == "OKP"

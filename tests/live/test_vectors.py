"""The conformance vectors (vectors/) against the site's own integrity functions.

Every vector, checked with receiptsite.integrity alone (canonical.is_canonical, sha256_hex,
keys.verify_signature and jwk_thumbprint, merkle.verify_inclusion, note.verify_note and
parse_checkpoint), fails exactly the checks that vectors/manifest.json names, so the site,
receipt-verify (clients/python/tests/test_verify.py) and the page's own verifier
(tests/test_browser_vectors.py) are held to one set of answers. The manifest must also be
complete: every file in vectors/ listed, every listed file present.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_vectors import VECTORS, manifest, site_failures

# The vectors a fresh site makes are the same whichever database it stores them in.
pytestmark = [pytest.mark.live, pytest.mark.any_database]


@pytest.mark.live
def test_the_generator_writes_the_same_vectors_from_a_fresh_site(tmp_path: Path) -> None:
    """vectors/generate.py, run again against a new live site, produces the same list of
    vectors with the same verdicts and failing checks (the bytes differ: new ids, new keys)."""
    from tests.livesite import PYTHON, REPO

    done = subprocess.run(
        [str(PYTHON), str(VECTORS / "generate.py"), "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    fresh = json.loads((tmp_path / "manifest.json").read_text("utf-8"))

    def shape(m: dict[str, Any]) -> list[tuple[str, str, str, list[str]]]:
        return [(e["name"], e["keys"], e["expected"], e["fails"]) for e in m["vectors"]]

    assert shape(fresh) == shape(manifest())
    assert [(e["name"], e["fails"]) for e in fresh["bundles"]] == [
        (e["name"], e["fails"]) for e in manifest()["bundles"]
    ]
    for entry in fresh["vectors"]:
        verification = json.loads((tmp_path / entry["file"]).read_text("utf-8"))
        document = json.loads((tmp_path / entry["keys"]).read_text("utf-8"))
        assert site_failures(verification, document) == set(entry["fails"])

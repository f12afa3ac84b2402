"""`manage.py quickstart` on a fresh checkout: no configuration at all, demo receipts that
verify, links printed."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.livesite import PYTHON, REPO, SITE_VARIABLES

pytestmark = [pytest.mark.live, pytest.mark.any_database]


def test_quickstart_sets_up_everything_from_nothing(tmp_path: Path) -> None:
    # The suite's own settings variables are removed: quickstart must need none of them.
    env = {k: v for k, v in os.environ.items() if k not in SITE_VARIABLES}
    env["VAR_DIR"] = str(tmp_path / "var")
    done = subprocess.run(
        [str(PYTHON), "manage.py", "quickstart", "--no-serve"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    links = re.findall(r"http://127\.0\.0\.1:8000/run/([0-9a-f-]{36})", out)
    assert len(set(links)) == 5
    key = re.search(r"Demo API key \(tenant demo\), for curl: (rk_\S+)", out)
    assert key is not None
    var = tmp_path / "var"
    assert (var / "receiptsite.sqlite3").exists()
    assert (var / "signing-key.pem").stat().st_mode & 0o077 == 0
    assert (var / "secret-key").stat().st_mode & 0o077 == 0
    assert (var / "demo-api-key").read_text().strip() == key.group(1)

    # Every demo receipt verifies, as the site itself answers it.
    script = (
        "import json, sys\n"
        "from receiptsite.receipts.models import Receipt\n"
        "from receiptsite.ledger.verification import verification_json\n"
        "print(json.dumps([verification_json(r) for r in Receipt.objects.for_verification()"
        ".order_by('pk')]))\n"
    )
    # manage.py finds what quickstart made in var/: nothing is exported by hand.
    shell = subprocess.run([str(PYTHON), "manage.py", "shell", "-c", script], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=120)
    assert shell.returncode == 0, shell.stderr
    results = json.loads(shell.stdout.strip().splitlines()[-1])
    assert [r["status"] for r in results] == ["valid"] * 5
    assert [r["receipt_id"] for r in results] == list(dict.fromkeys(links))
    documents = [json.loads(base64.b64decode(r["canonical_bytes"])) for r in results]
    assert [d["phase"] for d in documents] == ["start", "end", "end", "end", "completion"]
    assert documents[2]["attempt"]["number"] == 2  # a retried attempt
    assert documents[3]["outcome"] == "failed"
    assert len(documents[4]["links"]["child_receipt_ids"]) == 2
    assert documents[2]["redactions"][0]["reason"] == "secret"

    # An operator's next step, in one command each: an auditor, in the Auditors group.
    made = subprocess.run(
        [str(PYTHON), "manage.py", "createauditor", "ada", "--noinput"], cwd=REPO,
        env={**env, "DJANGO_AUDITOR_PASSWORD": "a-long-test-password-1"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    check = (
        "from django.contrib.auth.models import User; u = User.objects.get(username='ada'); "
        "print(u.is_staff, list(u.groups.values_list('name', flat=True)), "
        "u.check_password('a-long-test-password-1'), u.has_perm('receipts.add_reviewdecision'))"
    )
    shell = subprocess.run([str(PYTHON), "manage.py", "shell", "-c", check], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=120)
    assert shell.stdout.strip().splitlines()[-1] == "True ['Auditors'] True True", shell.stderr

    # A second run reuses what the first made.
    again = subprocess.run(
        [str(PYTHON), "manage.py", "quickstart", "--no-serve"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert sorted(set(re.findall(r"/run/([0-9a-f-]{36})", again.stdout))) == sorted(set(links))
    assert key.group(1) in again.stdout


def test_the_site_refuses_to_start_in_production_without_its_secrets(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in SITE_VARIABLES}
    env["VAR_DIR"] = str(tmp_path)
    done = subprocess.run([str(PYTHON), "manage.py", "check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "SECRET_KEY and SIGNING_KEY_FILE must be set when DEBUG is off" in done.stderr


def test_var_is_read_only_on_the_embedded_default(tmp_path: Path) -> None:
    """With a DATABASE_URL the site is not the embedded default: quickstart's files in var/
    are not taken for its secrets, and a missing SECRET_KEY still stops it."""
    from receiptsite.integrity.keys import generate_private_key_pem

    (tmp_path / "secret-key").write_text("made-by-quickstart")
    (tmp_path / "signing-key.pem").write_bytes(generate_private_key_pem())
    env = {k: v for k, v in os.environ.items() if k not in SITE_VARIABLES}
    env.update(VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    done = subprocess.run([str(PYTHON), "manage.py", "check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "SECRET_KEY and SIGNING_KEY_FILE must be set when DEBUG is off" in done.stderr
    # The same folder on the embedded default: found, and the site starts.
    del env["DATABASE_URL"]
    done = subprocess.run([str(PYTHON), "manage.py", "check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

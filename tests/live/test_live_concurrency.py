"""Concurrency against a real gunicorn with several worker processes (idempotency, the log's
integrity, headers; see docs/).

Each site here has a fresh database of its own (tests/livesite.py): an SQLite file, or a new
PostgreSQL database when the suite runs with DATABASE_URL=postgres://... Everything is checked
over HTTP, and the Merkle roots and signatures with code written here, independently of the
site's own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from receiptsite.integrity.merkle import verify_consistency
from tests.conftest import example_body
from tests.livesite import LiveSite, Response

pytestmark = pytest.mark.live

WORKERS = 4
CONCURRENCY = 32  # requests in flight at once (more than the workers: they queue in the backlog)
N_DISTINCT = 40


def all_at_once[T](calls: list[Callable[[], T]]) -> list[T]:
    """Run the calls in threads that all start together (a barrier), in order of the list."""
    barrier = threading.Barrier(len(calls), timeout=30)

    def run(call: Callable[[], T]) -> T:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(run, call) for call in calls]
        return [future.result(timeout=120) for future in futures]


# --- RFC 9162 and C2SP, written here on purpose (not the site's code) ----------------------


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1 Merkle Tree Hash of the leaves' data."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaf_hash(leaves[0])
    k = 1 << ((n - 1).bit_length() - 1)  # the largest power of two smaller than n
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def verify_inclusion(index: int, size: int, data: bytes, proof: list[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf_hash(data)
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def note_key_id(name: str, raw_public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + b"\x01" + raw_public).digest()[:4]


def verify_checkpoint(note: str, origin: str, raw_public: bytes) -> tuple[int, bytes]:
    """Check a C2SP signed checkpoint note; return (tree size, root). Fails the test if the
    note is malformed or its signature does not verify."""
    body, blank, signatures = note.partition("\n\n")
    assert blank, f"no blank line in the note: {note!r}"
    body += "\n"  # the text runs up to and including the line before the blank line
    lines = body.split("\n")
    assert lines[0] == origin, (lines[0], origin)
    size, root = int(lines[1]), base64.b64decode(lines[2], validate=True)
    assert str(size) == lines[1] and len(root) == 32
    signature_lines = signatures.split("\n")
    assert signature_lines[-1] == "", "the note must end with a newline"
    ours = [line for line in signature_lines[:-1] if line.startswith(f"\u2014 {origin} ")]
    assert len(ours) == 1, signature_lines
    blob = base64.b64decode(ours[0].split(" ")[2], validate=True)
    assert len(blob) == 4 + 64
    assert blob[:4] == note_key_id(origin, raw_public)
    try:
        Ed25519PublicKey.from_public_bytes(raw_public).verify(blob[4:], body.encode())
    except InvalidSignature:
        pytest.fail(f"the checkpoint signature does not verify: {note!r}")
    return size, root


# --- sites ------------------------------------------------------------------------------------


@pytest.fixture
def live_site() -> Iterator[LiveSite]:
    with LiveSite(workers=WORKERS) as site:
        yield site


@pytest.fixture(scope="module")
def module_site() -> Iterator[LiveSite]:
    with LiveSite(workers=WORKERS) as site:
        yield site


def wait_for_access_lines(site: LiveSite, marker: str, count: int) -> str:
    """Gunicorn writes an access line just after the answer: wait (bounded) until `count`
    lines carrying `marker` (a User-Agent) are out, then return both logs."""
    deadline = time.monotonic() + 15
    while True:
        stdout = site.stdout()
        if stdout.count(marker) >= count or time.monotonic() > deadline:
            assert stdout.count(marker) >= count, (
                f"expected {count} access lines with {marker!r} on gunicorn's stdout:\n"
                f"{site.logs()}"
            )
            return site.stdout() + "\n" + site.stderr()
        time.sleep(0.1)


def assert_no_full_ids(logs: str, ids: list[str]) -> None:
    lowered = logs.lower()
    for receipt_id in ids:
        for form in (receipt_id.lower(), receipt_id.replace("-", "").lower()):
            assert form not in lowered, f"receipt id {receipt_id} is in the logs in full"


def touch_capability_urls(site: LiveSite, ids: list[str], marker: str) -> int:
    """Request every kind of path that holds a receipt id (pages, texts, JSON, a 404 for an
    unknown id, a query string, a Referer), so that the logs have every chance to hold one.
    Returns the number of requests made."""
    unknown = "3f0f8a1c-5b7e-4d2a-9c4e-1a2b3c4d5e6f"
    made = 0
    for receipt_id in [*ids, unknown]:
        headers = {"User-Agent": marker, "Referer": f"{site.url}/run/{receipt_id}"}
        for path in (
            f"/run/{receipt_id}",
            f"/run/{receipt_id}/handoff.txt",
            f"/api/receipt/{receipt_id}/verify",
            f"/api/receipts/{receipt_id}",
            f"/api/receipts?workflow_id={receipt_id}",
        ):
            answer = site.get(path, key=site.api_key, headers=headers, timeout=30)
            made += 1
            assert answer.status < 500, (path, answer, site.logs())
            if receipt_id == unknown and "?" not in path:
                assert answer.status == 404, (path, answer)
    return made


# --- one idempotency key, many requests at once -------------------------------------------------


def test_concurrent_posts_with_one_idempotency_key_store_exactly_one_receipt(
    live_site: LiveSite,
) -> None:
    site = live_site
    body = example_body(idempotency_key=f"live/{secrets.token_hex(4)}/end/1")
    started = time.monotonic()
    answers = all_at_once([partial(site.post, "/api/receipts", body)] * CONCURRENCY)
    elapsed = time.monotonic() - started

    assert not [a for a in answers if a.status >= 500], (answers, site.logs())
    assert [a.status for a in answers] == [201] * CONCURRENCY, (answers, site.logs())
    ids = {a.json()["id"] for a in answers}
    assert len(ids) == 1, ids
    (receipt_id,) = ids
    replayed = [a.headers.get("Idempotent-Replayed") for a in answers]
    assert replayed.count(None) == 1, replayed
    assert replayed.count("true") == CONCURRENCY - 1, replayed
    # The replayed answers are the first answer, byte for byte.
    assert len({a.body for a in answers}) == 1
    assert answers[0].json()["log_index"] == 0

    listing = site.get("/api/receipts?limit=200", key=site.api_key)
    assert listing.status == 200, listing
    assert [r["id"] for r in listing.json()["receipts"]] == [receipt_id]
    assert listing.json()["next_cursor"] is None
    checkpoint = site.get("/api/log/checkpoint")
    assert checkpoint.status == 200, checkpoint
    assert checkpoint.text.split("\n")[1] == "1", checkpoint.text  # one leaf in the log
    verdict = site.get(f"/api/receipt/{receipt_id}/verify")
    assert verdict.status == 200 and verdict.json()["status"] == "valid", verdict

    marker = f"live-log-check-{secrets.token_hex(4)}"
    made = touch_capability_urls(site, [receipt_id], marker)
    logs = wait_for_access_lines(site, marker, made)
    assert_no_full_ids(logs, [receipt_id])
    print(f"{CONCURRENCY} concurrent POSTs with one key: {elapsed:.2f} s")


# --- many distinct receipts at once, then the log ------------------------------------------------


@pytest.fixture(scope="module")
def published(module_site: LiveSite) -> dict[str, Any]:
    """N_DISTINCT receipts posted all at once, half with idempotency keys; their answers and
    verification JSONs (fetched concurrently too)."""
    site = module_site
    run = secrets.token_hex(4)
    bodies = []
    for i in range(N_DISTINCT):
        body = example_body(workflow_id=f"live-{run}-{i}", result=f"{i} findings")
        if i % 2:
            body.pop("idempotency_key")
        else:
            body["idempotency_key"] = f"live/{run}/{i}/end/1"
        bodies.append(body)
    started = time.monotonic()
    answers = all_at_once([partial(site.post, "/api/receipts", b) for b in bodies])
    elapsed = time.monotonic() - started
    assert not [a for a in answers if a.status >= 500], (answers, site.logs())
    assert [a.status for a in answers] == [201] * N_DISTINCT, (answers, site.logs())
    assert [a.headers.get("Idempotent-Replayed") for a in answers] == [None] * N_DISTINCT
    posted = [a.json() for a in answers]
    verdicts: list[Response] = all_at_once(
        [partial(site.get, f"/api/receipt/{p['id']}/verify") for p in posted]
    )
    assert [v.status for v in verdicts] == [200] * N_DISTINCT, verdicts
    print(f"{N_DISTINCT} concurrent distinct POSTs: {elapsed:.2f} s")
    return {
        "site": site,
        "bodies": bodies,
        "posted": posted,
        "verdicts": [v.json() for v in verdicts],
    }


def test_concurrent_distinct_posts_get_dense_unique_log_indexes(published: dict[str, Any]) -> None:
    posted = published["posted"]
    assert len({p["id"] for p in posted}) == N_DISTINCT
    assert sorted(p["log_index"] for p in posted) == list(range(N_DISTINCT))
    listing = published["site"].get("/api/receipts?limit=200", key=published["site"].api_key)
    assert listing.status == 200, listing
    assert {r["id"] for r in listing.json()["receipts"]} == {p["id"] for p in posted}
    assert {r["id"]: r["log_index"] for r in listing.json()["receipts"]} == {
        p["id"]: p["log_index"] for p in posted
    }


def leaves_in_log_order(published: dict[str, Any]) -> list[bytes]:
    by_index = {
        v["log"]["index"]: base64.b64decode(v["canonical_bytes"]) for v in published["verdicts"]
    }
    assert sorted(by_index) == list(range(N_DISTINCT))
    return [by_index[i] for i in range(N_DISTINCT)]


@pytest.fixture(scope="module")
def published_key(published: dict[str, Any]) -> dict[str, Any]:
    """The active key and log origin from /.well-known/receipt-keys.json."""
    answer = published["site"].get("/.well-known/receipt-keys.json")
    assert answer.status == 200, answer
    keys = answer.json()
    active = [k for k in keys["keys"] if k["status"] == "active"]
    assert len(active) == 1, keys
    raw = b64url_decode(active[0]["x"])
    assert len(raw) == 32
    origin = keys["log"]["origin"]
    # The published verifier key says the same: <name>+<key id hex>+base64(0x01 || key).
    assert keys["log"]["verifier_key"] == (
        f"{origin}+{note_key_id(origin, raw).hex()}+{base64.b64encode(b'\x01' + raw).decode()}"
    )
    return {"raw": raw, "kid": active[0]["kid"], "origin": origin}


def test_every_receipt_verifies_against_one_tree(
    published: dict[str, Any], published_key: dict[str, Any]
) -> None:
    raw, origin = published_key["raw"], published_key["origin"]
    public = Ed25519PublicKey.from_public_bytes(raw)
    leaves = leaves_in_log_order(published)
    root = mth(leaves)
    for answer, body, verdict in zip(
        published["posted"], published["bodies"], published["verdicts"], strict=True
    ):
        assert verdict["status"] == "valid", verdict
        assert {c["name"]: c["result"] for c in verdict["checks"]} == {
            "canonical_form": "pass",
            "hash": "pass",
            "record_matches": "pass",
            "signature": "pass",
            "log_inclusion": "pass",
        }, verdict["checks"]
        data = base64.b64decode(verdict["canonical_bytes"])
        document = json.loads(data)
        assert document["id"] == answer["id"] == verdict["receipt_id"]
        assert document["workflow_id"] == body["workflow_id"]
        assert hashlib.sha256(data).hexdigest() == answer["output_hash"] == verdict["output_hash"]
        assert verdict["signature"]["key_id"] == published_key["kid"]
        public.verify(base64.b64decode(verdict["signature"]["value"]), data)  # raises if bad
        log = verdict["log"]
        assert log["index"] == answer["log_index"]
        # Every receipt was answered before any verification was asked for: all see one tree.
        assert log["tree_size"] == N_DISTINCT, log
        assert base64.b64decode(log["root_hash"]) == root
        proof = [base64.b64decode(p) for p in log["inclusion_proof"]]
        assert verify_inclusion(log["index"], N_DISTINCT, data, proof, root)
        assert verify_checkpoint(log["checkpoint"], origin, raw) == (N_DISTINCT, root)


def test_the_checkpoint_is_signed_and_its_root_is_the_independent_mth(
    published: dict[str, Any], published_key: dict[str, Any]
) -> None:
    answer = published["site"].get("/api/log/checkpoint")
    assert answer.status == 200, answer
    assert answer.content_type == "text/plain; charset=utf-8"
    size, root = verify_checkpoint(answer.text, published_key["origin"], published_key["raw"])
    assert size == N_DISTINCT
    assert root == mth(leaves_in_log_order(published))
    assert published_key["origin"] == f"127.0.0.1:{published['site'].port}/receipts"


def test_consistency_proofs_verify(published: dict[str, Any]) -> None:
    site, n = published["site"], N_DISTINCT
    leaves = leaves_in_log_order(published)
    root = mth(leaves)
    for first in sorted({1, 2, 3, 7, 8, 16, 17, n // 2, n - 1, n}):
        answer = site.get(f"/api/log/consistency?first={first}&second={n}")
        assert answer.status == 200, answer
        body = answer.json()
        assert (body["first"], body["second"]) == (first, n)
        proof = [base64.b64decode(p) for p in body["proof"]]
        assert verify_consistency(first, n, proof, mth(leaves[:first]), root), (first, body)
        if first < n:
            # The verifier is not vacuous: the same proof fails for another old tree.
            wrong = mth(leaves[1 : first + 1]) if first > 1 else leaf_hash(b"not a leaf")
            assert not verify_consistency(first, n, proof, wrong, root)
    assert site.get(f"/api/log/consistency?first=0&second={n}").status == 400
    assert site.get(f"/api/log/consistency?first=1&second={n + 1}").status == 400


def test_no_receipt_id_reaches_the_logs_in_full(published: dict[str, Any]) -> None:
    site = published["site"]
    ids = [p["id"] for p in published["posted"]]
    marker = f"live-log-check-{secrets.token_hex(4)}"
    made = touch_capability_urls(site, ids[:5], marker)
    logs = wait_for_access_lines(site, marker, made)
    assert_no_full_ids(logs, ids)
    # Not vacuous: the access log is on stdout and shows the masked paths.
    assert f"GET /run/{ids[0][:8]}-\u2026" in site.stdout(), site.stdout()[-3000:]
    assert "POST /api/receipts" in site.stdout()

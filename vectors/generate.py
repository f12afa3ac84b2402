"""Write the conformance vectors from a real run of the site.

    .venv/bin/python vectors/generate.py [--out DIR]

Starts a real site (tests/livesite.py: gunicorn, a fresh database, `SITE_URL` set to
https://receipts.example.org so that nothing in the vectors points at a port), publishes five
receipts over HTTP — a plain one, one the site redacts, then (after rotating the signing key)
one linked to the first, a `start` with non-ASCII text, and a fifth so that every proof has
three hashes — and saves the site's own verification JSONs and keys document. The corrupted
vectors are those JSONs edited one way each; `manifest.json` lists every file with its
expected verdict, what was changed and which checks must fail.

Each corrupted vector is checked here against the site's own integrity functions before it is
written (tests/unit/test_vectors.py, `site_failures`), so a corruption that does not break what it
claims to break stops the run instead of shipping.
"""

from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from receiptsite.integrity import keys as site_keys  # noqa: E402
from receiptsite.integrity import note as site_note  # noqa: E402
from receiptsite.integrity import tlogproof as site_tlogproof  # noqa: E402
from tests.examples import EXAMPLE_BODY  # noqa: E402
from tests.livesite import LiveSite  # noqa: E402
from tests.unit.test_vectors import (  # noqa: E402
    BUNDLE_CHECK_NAMES,
    CHECK_NAMES,
    site_bundle_failures,
    site_failures,
)

SITE_URL = "https://receipts.example.org"
FORMAT = "receipt-vectors/v1"

Json = dict[str, Any]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64d(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def flip(data: bytes, at: int, bit: int = 0x01) -> bytes:
    return data[:at] + bytes([data[at] ^ bit]) + data[at + 1 :]


# --- the site run ------------------------------------------------------------------------


@dataclass
class Run:
    ids: dict[str, str]  # vector name -> receipt id
    snapshots: dict[int, dict[str, Json]]  # tree size -> receipt id -> verification JSON
    bundles: dict[int, dict[str, Json]]  # tree size -> receipt id -> offline bundle
    keys: Json  # the final keys document
    first_kid: str
    second_kid: str


def publish(site: LiveSite, body: Json) -> str:
    answer = site.post("/api/receipts", body)
    if answer.status != 201:
        raise RuntimeError(f"publishing failed: {answer!r}")
    receipt_id: str = answer.json()["id"]
    return receipt_id


def body(**changes: Any) -> Json:
    doc = copy.deepcopy(EXAMPLE_BODY)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def run_site() -> Run:
    ids: dict[str, str] = {}
    snapshots: dict[int, dict[str, Json]] = {}
    bundles: dict[int, dict[str, Json]] = {}

    def snapshot(site: LiveSite) -> None:
        taken: dict[str, Json] = {}
        downloaded: dict[str, Json] = {}
        for receipt_id in ids.values():
            answer = site.get(f"/api/receipt/{receipt_id}/verify")
            assert answer.status == 200, answer
            taken[receipt_id] = answer.json()
            answer = site.get(f"/run/{receipt_id}/bundle.json")
            assert answer.status == 200, answer
            downloaded[receipt_id] = answer.json()
        size = next(iter(taken.values()))["log"]["tree_size"]
        snapshots[size] = taken
        bundles[size] = downloaded

    with LiveSite(workers=1, env={"SITE_URL": SITE_URL}) as site:
        ids["plain"] = publish(site, body(idempotency_key="vectors/plain"))
        snapshot(site)
        ids["redacted"] = publish(
            site,
            body(
                idempotency_key="vectors/redacted",
                step_id="call-crm",
                subject={"type": "tool", "name": "crm_lookup"},
                input_summary='{"customer": "C-1182", '
                '"api_key": "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e"}',
                result="Called https://crm.example/api with Authorization: Bearer "
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ2ZWN0b3JzIn0.c2lnbmF0dXJlLXZhbHVl: 200 OK",
                observed=["The CRM answered 200 for customer C-1182."],
                not_observed=[],
                metadata={"ticket": "OPS-119", "retries": 0, "dry_run": False},
            ),
        )
        snapshot(site)
        first = site.get("/.well-known/receipt-keys.json").json()["keys"]
        assert len(first) == 1, first

        # Rotate the signing key as an operator does (README, "Rotating the signing key"):
        # a new key file, the old one as PREVIOUS_SIGNING_KEY_FILE (it signs the handover in
        # the keys' history), a restart; the next write records it and retires the first key.
        fresh = site.tmp / "second-signing-key.pem"
        fresh.write_bytes(site_keys.generate_private_key_pem())
        fresh.chmod(0o600)
        site.base_env["PREVIOUS_SIGNING_KEY_FILE"] = site.base_env["SIGNING_KEY_FILE"]
        site.base_env["SIGNING_KEY_FILE"] = str(fresh)
        site.stop()
        site._serve()

        ids["linked"] = publish(
            site,
            body(
                idempotency_key="vectors/linked",
                step_id="send-report",
                phase="completion",
                subject={"type": "task", "name": "send_report"},
                input_summary="The 12 findings of the audit",
                result="Report queued for the client",
                observed=["The mail tool accepted the report."],
                not_observed=["Whether the client opened it."],
                links={"parent_receipt_id": ids["plain"]},
                metadata={"ticket": "OPS-118", "channel": "email"},
            ),
        )
        snapshot(site)
        ids["unicode-start"] = publish(
            site,
            body(
                idempotency_key="vectors/unicode-start",
                step_id="übersetzung",
                phase="start",
                outcome=None,
                ended_at=None,
                duration_ms=None,
                subject={"type": "model", "name": "translate_de"},
                input_summary='Übersetze: «Grüße aus Zürich» — 日本語も 😀 "quoted" \\ tab\t',
                result=None,
                observed=["Die Übersetzung hat begonnen ✓"],
                not_observed=[],
                metadata={"locale": "de-CH", "emoji": "😀"},
            ),
        )
        snapshot(site)
        ids["filler"] = publish(site, body(idempotency_key="vectors/filler", result="3 findings"))
        snapshot(site)
        keys = site.get("/.well-known/receipt-keys.json").json()

    statuses = [k["status"] for k in keys["keys"]]
    assert statuses == ["retired", "active"], statuses
    return Run(ids, snapshots, bundles, keys, keys["keys"][0]["kid"], keys["keys"][1]["kid"])


# --- corruptions -------------------------------------------------------------------------


@dataclass
class Vector:
    name: str
    verification: Json
    keys_file: str
    expected: str
    changed: str | None
    fails: list[str]


@dataclass
class Context:
    run: Run
    base: str  # the valid vector's name
    verification: Json
    stranger: Ed25519PrivateKey  # a key the keys document does not list

    @property
    def data(self) -> bytes:
        return b64d(self.verification["canonical_bytes"])

    @property
    def size(self) -> int:
        size: int = self.verification["log"]["tree_size"]
        return size

    @property
    def receipt_id(self) -> str:
        receipt_id: str = self.verification["receipt_id"]
        return receipt_id

    def signer_of_checkpoint(self) -> str:
        """The kid of the listed key whose signature the checkpoint carries."""
        origin = self.run.keys["log"]["origin"]
        for key in self.run.keys["keys"]:
            vkey = site_note.verifier_key(origin, base64.urlsafe_b64decode(key["x"] + "="))
            if site_note.verify_note(self.verification["log"]["checkpoint"], [vkey]):
                kid: str = key["kid"]
                return kid
        raise AssertionError("no listed key signed the checkpoint")


Corruption = Callable[[Context, Json], tuple[str, list[str], str]]
# Each edits a deep copy of the valid verification in place and returns (what was changed,
# which checks fail, the keys file to check it with).


def flipped_byte(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    data = ctx.data
    at = data.index(b'"result":"') if b'"result":"' in data else data.index(b'"input_summary":"')
    at = data.index(b':"', at) + 2
    while not chr(data[at]).isalnum():
        at += 1
    v["canonical_bytes"] = b64(flip(data, at))
    return (
        f"canonical_bytes: byte {at} (inside a string value, so the JSON stays in RFC 8785 "
        "form) has its lowest bit flipped; output_hash, signature and proof unchanged",
        ["hash", "signature", "log_inclusion"],
        "keys.json",
    )


def wrong_hash(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    stated = v["output_hash"]
    v["output_hash"] = stated[:-1] + ("0" if stated[-1] != "0" else "1")
    return "output_hash: its last hex digit changed", ["hash"], "keys.json"


def reformatted(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    pretty = json.dumps(json.loads(ctx.data), indent=2, ensure_ascii=False).encode("utf-8")
    v["canonical_bytes"] = b64(pretty)
    v["byte_length"] = len(pretty)
    v["output_hash"] = hashlib.sha256(pretty).hexdigest()
    return (
        "canonical_bytes: the same document re-serialised with indentation (not RFC 8785), "
        "output_hash and byte_length recomputed to match",
        ["canonical_form", "signature", "log_inclusion"],
        "keys.json",
    )


def other_receipt_id(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    other = ctx.run.ids["filler"]
    v["receipt_id"] = other
    v["receipt_url"] = v["receipt_url"].replace(ctx.receipt_id, other)
    return (
        "receipt_id and receipt_url: those of another real receipt of the same site; the "
        "bytes (whose id is this receipt's) unchanged",
        ["receipt_id"],
        "keys.json",
    )


def bad_signature(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    v["signature"]["value"] = b64(flip(b64d(v["signature"]["value"]), 10))
    return "signature.value: the lowest bit of byte 10 flipped", ["signature"], "keys.json"


def unknown_signing_key(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    raw = site_keys.public_raw(ctx.stranger)
    v["signature"]["key_id"] = site_keys.jwk_thumbprint(raw)
    return (
        "signature.key_id: the kid of a key the keys document does not list",
        ["signature"],
        "keys.json",
    )


def signing_key_compromised(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    kid = v["signature"]["key_id"]
    which = "first" if kid == ctx.run.first_kid else "second"
    fails = ["signature"]
    if ctx.signer_of_checkpoint() == kid:
        fails.append("checkpoint_signature")
    return (
        f"the verification unchanged; checked against keys-{which}-key-compromised.json, "
        f"the keys document with the key that signed this receipt ({which}) marked "
        "compromised",
        fails,
        f"keys-{which}-key-compromised.json",
    )


def bad_proof(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    proof = v["log"]["inclusion_proof"]
    proof[0] = b64(flip(b64d(proof[0]), 0))
    return (
        "log.inclusion_proof: the lowest bit of the first byte of its first hash flipped",
        ["log_inclusion"],
        "keys.json",
    )


def truncated_proof(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    v["log"]["inclusion_proof"].pop()
    return "log.inclusion_proof: its last hash removed", ["log_inclusion"], "keys.json"


def proof_other_size(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    sizes = [
        s for s, taken in ctx.run.snapshots.items() if ctx.receipt_id in taken and s != ctx.size
    ]
    smaller = [s for s in sizes if s < ctx.size]
    other = max(smaller) if smaller else max(sizes)
    v["log"]["inclusion_proof"] = ctx.run.snapshots[other][ctx.receipt_id]["log"]["inclusion_proof"]
    return (
        f"log.inclusion_proof: the site's real proof for this leaf in the tree of size "
        f"{other}, with the checkpoint of size {ctx.size} left as it was",
        ["log_inclusion"],
        "keys.json",
    )


def checkpoint_other_key(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    checkpoint = v["log"]["checkpoint"]
    text = checkpoint[: checkpoint.rindex("\n\n") + 1]
    v["log"]["checkpoint"] = site_note.sign_note(text, v["log"]["origin"], ctx.stranger)
    return (
        "log.checkpoint: the same text, signed (under the log's name) by a key the keys "
        "document does not list instead of the site's",
        ["checkpoint_signature"],
        "keys.json",
    )


def checkpoint_bad_signature(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    checkpoint = v["log"]["checkpoint"]
    head, _, line = checkpoint[:-1].rpartition("\n")
    prefix, _, blob = line.rpartition(" ")
    raw = b64d(blob)
    v["log"]["checkpoint"] = f"{head}\n{prefix} {b64(flip(raw, len(raw) - 1))}\n"
    return (
        "log.checkpoint: the lowest bit of the last byte of its signature flipped (the key "
        "id kept)",
        ["checkpoint_signature"],
        "keys.json",
    )


def checkpoint_other_tree(ctx: Context, v: Json) -> tuple[str, list[str], str]:
    other = max(s for s in ctx.run.snapshots if s != ctx.size)
    cp = next(iter(ctx.run.snapshots[other].values()))["log"]["checkpoint"]
    v["log"]["checkpoint"] = cp
    return (
        f"log.checkpoint: the site's real, validly signed checkpoint of the tree of size "
        f"{other}; tree_size, root_hash and the proof left as they were",
        ["checkpoint"],
        "keys.json",
    )


CORRUPTIONS: dict[str, Corruption] = {
    "flipped-byte": flipped_byte,
    "wrong-hash": wrong_hash,
    "reformatted": reformatted,
    "other-receipt-id": other_receipt_id,
    "bad-signature": bad_signature,
    "unknown-signing-key": unknown_signing_key,
    "signing-key-compromised": signing_key_compromised,
    "bad-proof": bad_proof,
    "truncated-proof": truncated_proof,
    "proof-other-size": proof_other_size,
    "checkpoint-other-key": checkpoint_other_key,
    "checkpoint-bad-signature": checkpoint_bad_signature,
    "checkpoint-other-tree": checkpoint_other_tree,
}


# --- offline bundles (GET /run/<id>/bundle.json) --------------------------------------------

BundleCorruption = Callable[[Context, Json], tuple[str, list[str]]]
# Each edits a deep copy of a valid bundle in place and returns (what was changed, which
# checks fail); every bundle is checked against keys.json.


def _proof_of(bundle: Json) -> site_tlogproof.TlogProof:
    return site_tlogproof.parse_proof(bundle["tlog_proof"])


def _reformat(bundle: Json, **changes: Any) -> None:
    parsed = _proof_of(bundle)
    parts = {"index": parsed.index, "hashes": parsed.hashes, "checkpoint": parsed.checkpoint}
    bundle["tlog_proof"] = site_tlogproof.format_proof(**{**parts, **changes})


def tlog_proof_missing(ctx: Context, b: Json) -> tuple[str, list[str]]:
    del b["tlog_proof"]
    return "tlog_proof: removed", ["tlog_proof"]


def tlog_proof_other_version(ctx: Context, b: Json) -> tuple[str, list[str]]:
    b["tlog_proof"] = b["tlog_proof"].replace("tlog-proof@v1\n", "tlog-proof@v2\n", 1)
    return "tlog_proof: its first line names c2sp.org/tlog-proof@v2", ["tlog_proof"]


def tlog_proof_other_index(ctx: Context, b: Json) -> tuple[str, list[str]]:
    _reformat(b, index=_proof_of(b).index + 1)
    return "tlog_proof: its index one more than log.index", ["tlog_proof"]


def tlog_proof_bad_hash(ctx: Context, b: Json) -> tuple[str, list[str]]:
    hashes = _proof_of(b).hashes
    _reformat(b, hashes=[flip(hashes[0], 0), *hashes[1:]])
    return (
        "tlog_proof: the lowest bit of the first byte of its first hash flipped; "
        "log.inclusion_proof unchanged",
        ["tlog_proof"],
    )


def tlog_proof_other_tree(ctx: Context, b: Json) -> tuple[str, list[str]]:
    other = max(s for s in ctx.run.snapshots if s != ctx.size)
    _reformat(b, checkpoint=next(iter(ctx.run.snapshots[other].values()))["log"]["checkpoint"])
    return (
        f"tlog_proof: its checkpoint replaced by the site's real, validly signed checkpoint of "
        f"the tree of size {other}; the verification unchanged",
        ["tlog_proof"],
    )


def tlog_proof_other_key(ctx: Context, b: Json) -> tuple[str, list[str]]:
    checkpoint = _proof_of(b).checkpoint
    text = checkpoint[: checkpoint.rindex("\n\n") + 1]
    origin = b["verification"]["log"]["origin"]
    _reformat(b, checkpoint=site_note.sign_note(text, origin, ctx.stranger))
    return (
        "tlog_proof: its checkpoint's text signed (under the log's name) by a key the keys "
        "document does not list instead of the site's; log.checkpoint unchanged",
        ["tlog_proof"],
    )


def both_proofs_bad(ctx: Context, b: Json) -> tuple[str, list[str]]:
    bad_proof(ctx, b["verification"])
    _reformat(b, hashes=[b64d(h) for h in b["verification"]["log"]["inclusion_proof"]])
    return (
        "log.inclusion_proof and the tlog_proof alike: the lowest bit of the first byte of "
        "the first hash flipped (the two agree, and neither proves)",
        ["log_inclusion", "tlog_proof"],
    )


def bundle_flipped_byte(ctx: Context, b: Json) -> tuple[str, list[str]]:
    changed, fails, _keys = flipped_byte(ctx, b["verification"])
    return f"verification.{changed}", [*fails, "tlog_proof"]


BUNDLE_CORRUPTIONS: dict[str, BundleCorruption] = {
    "tlog-proof-missing": tlog_proof_missing,
    "tlog-proof-other-version": tlog_proof_other_version,
    "tlog-proof-other-index": tlog_proof_other_index,
    "tlog-proof-bad-hash": tlog_proof_bad_hash,
    "tlog-proof-other-tree": tlog_proof_other_tree,
    "tlog-proof-other-key": tlog_proof_other_key,
    "both-proofs-bad": both_proofs_bad,
    "flipped-byte": bundle_flipped_byte,
}


def build_bundles(run: Run, keys: Json) -> list[Vector]:
    """Valid bundles as the site served them, and corrupted copies of each."""
    final = max(run.bundles)
    valid = {
        "plain": run.bundles[final][run.ids["plain"]],
        "linked": run.bundles[final][run.ids["linked"]],
        "plain-at-size-2": run.bundles[2][run.ids["plain"]],
    }
    stranger = Ed25519PrivateKey.generate()
    vectors: list[Vector] = []
    for name, bundle in valid.items():
        vectors.append(Vector(name, bundle, "keys.json", "valid", None, []))
        ctx = Context(run, name, bundle["verification"], stranger)
        for suffix, corrupt in BUNDLE_CORRUPTIONS.items():
            edited = copy.deepcopy(bundle)
            changed, fails = corrupt(ctx, edited)
            vectors.append(Vector(f"{name}--{suffix}", edited, "keys.json", "invalid", changed,
                                  fails))  # fmt: skip
    for vector in vectors:
        found = site_bundle_failures(vector.verification, keys)
        if found != set(vector.fails):
            raise AssertionError(
                f"bundle {vector.name}: the site's functions fail {sorted(found)}, "
                f"not {vector.fails}"
            )
    return vectors


def compromised(keys: Json, kid: str) -> Json:
    edited = copy.deepcopy(keys)
    for key in edited["keys"]:
        if key["kid"] == kid:
            key["status"] = "compromised"
            key["compromised_at"] = key["created_at"]
    return edited


def build(run: Run) -> tuple[list[Vector], dict[str, Json]]:
    final = max(run.snapshots)
    valid = {
        "plain": run.snapshots[final][run.ids["plain"]],
        "redacted": run.snapshots[final][run.ids["redacted"]],
        "linked": run.snapshots[final][run.ids["linked"]],
        "unicode-start": run.snapshots[final][run.ids["unicode-start"]],
        # A verification saved long ago stays valid: its checkpoint, by the retired first
        # key, is for the tree of size 2.
        "plain-at-size-2": run.snapshots[2][run.ids["plain"]],
    }
    redactions = json.loads(b64d(valid["redacted"]["canonical_bytes"]))["redactions"]
    assert redactions, "the site redacted nothing"
    links = json.loads(b64d(valid["linked"]["canonical_bytes"]))["links"]
    assert links == {"parent_receipt_id": run.ids["plain"]}, links

    keys_files = {
        "keys.json": run.keys,
        "keys-first-key-compromised.json": compromised(run.keys, run.first_kid),
        "keys-second-key-compromised.json": compromised(run.keys, run.second_kid),
    }
    stranger = Ed25519PrivateKey.generate()
    vectors: list[Vector] = []
    for name, verification in valid.items():
        vectors.append(Vector(name, verification, "keys.json", "valid", None, []))
        ctx = Context(run, name, verification, stranger)
        for suffix, corrupt in CORRUPTIONS.items():
            edited = copy.deepcopy(verification)
            changed, fails, keys_file = corrupt(ctx, edited)
            vectors.append(
                Vector(f"{name}--{suffix}", edited, keys_file, "invalid", changed, fails)
            )
    for vector in vectors:
        found = site_failures(vector.verification, keys_files[vector.keys_file])
        if found != set(vector.fails):
            raise AssertionError(
                f"{vector.name}: the site's functions fail {sorted(found)}, not {vector.fails}"
            )
    return vectors, keys_files


def write(
    out: Path, vectors: list[Vector], keys_files: dict[str, Json], bundles: list[Vector]
) -> None:
    for folder in ("valid", "invalid", "bundles/valid", "bundles/invalid"):
        (out / folder).mkdir(parents=True, exist_ok=True)
        for old in (out / folder).glob("*.json"):
            old.unlink()

    def dump(path: Path, obj: object) -> None:
        path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    for name, document in keys_files.items():
        dump(out / name, document)
    entries = []
    for vector in vectors:
        file = f"{vector.expected}/{vector.name}.json"
        dump(out / file, vector.verification)
        entries.append(
            {
                "name": vector.name,
                "file": file,
                "keys": vector.keys_file,
                "expected": vector.expected,
                "changed": vector.changed,
                "fails": vector.fails,
            }
        )
    bundle_entries = []
    for vector in bundles:
        file = f"bundles/{vector.expected}/{vector.name}.json"
        dump(out / file, vector.verification)
        bundle_entries.append(
            {
                "name": vector.name,
                "file": file,
                "keys": vector.keys_file,
                "expected": vector.expected,
                "changed": vector.changed,
                "fails": vector.fails,
            }
        )
    dump(
        out / "manifest.json",
        {
            "format": FORMAT,
            "checks": list(CHECK_NAMES),
            "keys_files": sorted(keys_files),
            "vectors": entries,
            "bundle_checks": list(BUNDLE_CHECK_NAMES),
            "bundles": bundle_entries,
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where to write (default: here)")
    args = parser.parse_args(argv)
    run = run_site()
    vectors, keys_files = build(run)
    bundles = build_bundles(run, keys_files["keys.json"])
    write(args.out, vectors, keys_files, bundles)
    print(f"wrote {len(vectors)} vectors and {len(bundles)} bundles to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

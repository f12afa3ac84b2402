"""receipt-verify, the verifier that trusts nothing but the key it is given, with no site.

The installed console script (a subprocess, as a user runs it) and the library function on every
conformance vector in vectors/ with the keys pinned: exit 0 for the valid ones, 1 for each
corrupted one, with exactly the checks the manifest names failing; RFC 8785, thumbprints, a
withdrawn receipt and key compromise. Against a real site: test_verify_live.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from client_helpers import ScriptedServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from receiptsite_client.verify import (
    canonical_form_problem,
    jcs,
    jwk_thumbprint,
    verify_verification,
)
from vector_helpers import EXIT, MANIFEST, PYTHON, VECTORS, WITHOUT_POLICY, fresh_x, load, run

pytestmark = pytest.mark.unit


ENTRIES: list[dict[str, Any]] = MANIFEST["vectors"]


def by_name(name: str) -> dict[str, Any]:
    return next(e for e in ENTRIES if e["name"] == name)


# --- every vector, offline, key pinned ----------------------------------------------------


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_the_command_reaches_each_vector_verdict(entry: dict[str, Any]) -> None:
    done = run(str(VECTORS / entry["file"]), "--key", str(VECTORS / entry["keys"]), "--json")
    assert done.returncode == EXIT[entry["expected"]], done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == entry["expected"]
    failed = [c["name"] for c in answer["checks"] if c["result"] == "fail"]
    assert sorted(failed) == sorted(entry["fails"]), entry["changed"]
    assert all(c["result"] == "pass" for c in answer["checks"] if c["name"] not in failed)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_the_library_reaches_each_vector_verdict(entry: dict[str, Any]) -> None:
    result = verify_verification(load(entry["file"]), load(entry["keys"]), None)
    assert result.status == entry["expected"]
    assert sorted(result.failed()) == sorted(entry["fails"])
    assert [c.name for c in result.checks] == WITHOUT_POLICY


def test_the_site_claims_in_a_corrupted_vector_are_not_believed() -> None:
    """A corrupted vector still says "status": "valid" with five passing checks (the site's
    answer before it was edited): the verifier recomputes instead of reading them."""
    entry = by_name("plain--flipped-byte")
    assert load(entry["file"])["status"] == "valid"
    assert run(str(VECTORS / entry["file"]), "--key", str(VECTORS / "keys.json")).returncode == 1


def test_plain_words_name_each_check_and_the_verdict() -> None:
    done = run(
        str(VECTORS / "invalid/plain--bad-signature.json"), "--key", str(VECTORS / "keys.json")
    )
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    for name in WITHOUT_POLICY:
        [line] = [line for line in lines if f" {name}: " in line]
        word = line.split(f" {name}: ")[0].strip()
        assert word == ("FAIL" if name == "signature" else "pass"), line
    assert lines[-1] == "Verdict: INVALID. Failed: signature."
    assert "not independent" not in done.stdout  # a pinned key needs no such warning

    valid = run(str(VECTORS / "valid/plain.json"), "--key", str(VECTORS / "keys.json"))
    assert valid.returncode == 0
    assert valid.stdout.splitlines()[-1] == "Verdict: VALID. Every check passed."


def test_json_output_has_the_documented_shape() -> None:
    done = run(str(VECTORS / "valid/linked.json"), "--key", str(VECTORS / "keys.json"), "--json")
    answer = json.loads(done.stdout)
    assert set(answer) == {"status", "checks"}
    assert answer["status"] == "valid"
    assert [c["name"] for c in answer["checks"]] == WITHOUT_POLICY
    for check in answer["checks"]:
        assert set(check) == {"name", "result", "detail"}
        assert check["result"] in ("pass", "fail", "could_not_check")
        assert isinstance(check["detail"], str) and check["detail"]


# --- pinning a bare key --------------------------------------------------------------------


def test_a_pinned_base64url_key_checks_what_it_signed_and_nothing_else() -> None:
    """The vectors' site rotated its key: the plain receipt is signed by the first key, every
    checkpoint of the final tree by the second. One pinned key vouches for its own
    signatures only."""
    keys = load("keys.json")["keys"]
    first, second = keys[0]["x"], keys[1]["x"]
    linked = str(VECTORS / "valid/linked.json")  # receipt and checkpoint: the second key
    assert run(linked, f"--key={second}").returncode == 0
    done = run(str(VECTORS / "valid/plain.json"), f"--key={second}", "--json")
    assert done.returncode == 1
    assert [c["name"] for c in json.loads(done.stdout)["checks"] if c["result"] == "fail"] == [
        "signature"
    ]
    done = run(str(VECTORS / "valid/plain.json"), f"--key={first}", "--json")
    assert done.returncode == 1
    assert [c["name"] for c in json.loads(done.stdout)["checks"] if c["result"] == "fail"] == [
        "checkpoint_signature"
    ]
    # The earlier verification's checkpoint was signed by the first key too.
    assert run(str(VECTORS / "valid/plain-at-size-2.json"), f"--key={first}").returncode == 0
    assert run(linked, f"--key={fresh_x()}").returncode == 1


def test_a_pinned_key_marked_compromised_in_the_keys_document_fails() -> None:
    compromised = load("keys-second-key-compromised.json")
    result = verify_verification(
        load("valid/linked.json"), compromised, load("keys.json")["keys"][1]["x"]
    )
    assert result.failed() == ["signature", "checkpoint_signature"]


# --- bundles, missing keys, bad arguments ------------------------------------------------


def test_a_saved_bundle_is_checked_against_a_pinned_key_only(tmp_path: Path) -> None:
    bundle = {
        "bundle": "receipt-bundle/v1",
        "verification": load("valid/plain.json"),
        "keys": load("keys.json"),
        "tlog_proof": load("bundles/valid/plain.json")["tlog_proof"],
    }
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle))
    done = run(str(path))
    assert done.returncode == 2, done.stdout
    assert "The signer was not checked" in done.stdout
    assert "VALID" not in done.stdout
    assert run(str(path), "--key", str(VECTORS / "keys.json")).returncode == 0
    assert run(str(path), "--key", str(VECTORS / "keys-first-key-compromised.json")).returncode == 1
    bundle["verification"] = load("invalid/plain--truncated-proof.json")
    path.write_text(json.dumps(bundle))
    assert run(str(path)).returncode == 1  # what fails without a key still fails
    path.write_text(json.dumps({**bundle, "bundle": "receipt-bundle/v9"}))
    assert run(str(path)).returncode == 2


def test_a_saved_verification_without_a_key_is_not_checked_for_its_signer(
    tmp_path: Path,
) -> None:
    """The keys_url inside a saved file is the file's own claim, whoever made it: it is not
    fetched, and the verdict is "could not check" (never valid) until a key is pinned."""
    keys = json.dumps(load("keys.json")).encode("utf-8")
    with ScriptedServer(then=lambda _: (200, {"Content-Type": "application/json"}, keys)) as site:
        keys_url = f"{site.url}/.well-known/receipt-keys.json"
        with urllib.request.urlopen(keys_url, timeout=10) as served:  # it does answer
            assert served.read() == keys
        site.seen.clear()
        verification = load("valid/plain.json")
        verification["signature"]["keys_url"] = keys_url
        path = tmp_path / "saved.json"
        path.write_text(json.dumps(verification))
        done = run(str(path), "--json")
        assert done.returncode == 2, done.stdout
        answer = json.loads(done.stdout)
        assert answer["status"] == "could_not_check"
        results = {c["name"]: c["result"] for c in answer["checks"]}
        assert results["signature"] == results["checkpoint_signature"] == "could_not_check"
        assert results["hash"] == results["log_inclusion"] == "pass"
        assert "signer was not checked" in done.stderr
        assert "--key" in done.stderr
        assert "from the site" not in done.stderr
        words = run(str(path))
        assert words.returncode == 2
        assert "The signer was not checked" in words.stdout
        assert words.stdout.splitlines()[-1].startswith("Verdict: COULD NOT CHECK")
        assert site.seen == []
        assert run(str(path), "--key", str(VECTORS / "keys.json")).returncode == 0
        # ...and a corrupted receipt is invalid whether or not a key is pinned.
        corrupted = load("invalid/plain--wrong-hash.json")
        corrupted["signature"]["keys_url"] = keys_url
        path.write_text(json.dumps(corrupted))
        assert run(str(path)).returncode == 1


@pytest.mark.parametrize("key", ["not-a-key", "AAAA", "/nonexistent/keys.json"])
def test_an_unusable_key_cannot_check(key: str) -> None:
    done = run(str(VECTORS / "valid/plain.json"), "--key", key)
    assert done.returncode == 2
    assert "could not check" in done.stdout.lower()


def test_a_target_that_is_not_a_receipt_cannot_check(tmp_path: Path) -> None:
    assert run(str(tmp_path / "missing.json"), f"--key={fresh_x()}").returncode == 2
    (tmp_path / "other.json").write_text('{"hello": "world"}')
    assert run(str(tmp_path / "other.json"), f"--key={fresh_x()}").returncode == 2


# --- RFC 8785 --------------------------------------------------------------------------------


def test_rfc8785_numbers_follow_ecmascript() -> None:
    """The examples of RFC 8785 Appendix B and §3.2.2.3."""
    cases = [
        (0.0, "0"),
        (-0.0, "0"),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (9007199254740992.0, "9007199254740992"),
        (295147905179352830000.0, "295147905179352830000"),
        (333333333.3333333, "333333333.3333333"),
        (0.000001, "0.000001"),
        (1e23, "1e+23"),
        (4.5, "4.5"),
        (2e-3, "0.002"),
        (0.000001234, "0.000001234"),
        (1.5e-7, "1.5e-7"),
        (100.0, "100"),
        (-1.5, "-1.5"),
        (123456789012345680000.0, "123456789012345680000"),
    ]
    for value, text in cases:
        assert jcs(value) == text, value
    for bad in (math.nan, math.inf, 2**53):
        with pytest.raises(ValueError):
            jcs(bad)


def test_rfc8785_sorts_keys_by_utf16_code_units_and_escapes_minimally() -> None:
    # RFC 8785 §3.2.3: a code point sort would put U+FB33 before the emoji.
    doc = {"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7}
    assert jcs(doc) == '{"\\r":2,"1":4,"\u0080":6,"\u00f6":7,"\u20ac":1,"\U0001f600":5,"\ufb33":3}'
    assert jcs('a"b\\c\x01\x1f\u007f\u2028/') == '"a\\"b\\\\c\\u0001\\u001f\u007f\u2028/"'
    with pytest.raises(ValueError):
        jcs("\ud800")


def test_rfc8785_agrees_with_the_reference_implementation() -> None:
    """Cross-checked against the `rfc8785` package (the site's dependency, used here only as
    an outside reference; the client does not import it)."""
    rfc8785 = pytest.importorskip("rfc8785")
    import random

    rng = random.Random(8785)

    def value(depth: int) -> Any:
        kind = rng.randrange(8 if depth < 3 else 5)
        if kind == 0:
            return rng.choice([None, True, False])
        if kind == 1:
            return rng.randint(-(2**53) + 1, 2**53 - 1)
        if kind == 2:
            return rng.choice(
                [
                    rng.uniform(-1e6, 1e6),
                    rng.random() * 10 ** rng.randint(-30, 30),
                    float(rng.randint(-(10**6), 10**6)),
                ]
            )
        if kind in (3, 4):
            return "".join(
                chr(
                    rng.choice(
                        [
                            rng.randrange(0x20, 0x7F),
                            rng.randrange(0, 0x20),
                            rng.randrange(0xA0, 0xD7FF),
                            rng.randrange(0x10000, 0x10FFFF),
                        ]
                    )
                )
                for _ in range(rng.randrange(6))
            )
        if kind == 5:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        return {
            str(value(9)) if rng.random() < 0.3 else f"k{rng.randrange(99)}": value(depth + 1)
            for _ in range(rng.randrange(5))
        }

    for _ in range(2000):
        doc = value(0)
        assert jcs(doc).encode("utf-8") == rfc8785.dumps(doc), doc


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1, "b":2}',
        b'{"b":1,"a":2}',
        b'{"a":1,"a":1}',
        b'{"a":1.0}',
        b'{"a":1e3}',
        b'{"a":9007199254740993}',
        b'{"a":NaN}',
        b'\xef\xbb\xbf{"a":1}',
        b'{"a":"\\u0041"}',
        b'{"a":"\xff"}',
        b"[1,2]\n",
        '"\u00e9"'.encode("utf-16-le"),
        b'{"a":"\\ud800"}',
        b'{"a":-0}',
    ],
)
def test_non_canonical_bytes_are_told_apart(data: bytes) -> None:
    assert canonical_form_problem(data) is not None


def test_canonical_bytes_pass() -> None:
    for data in (b'{"a":1,"b":[true,null,"\xc3\xa9"]}', b'{"\\r":2,"1":4}', b"[]", b"0"):
        assert canonical_form_problem(data) is None, data


def test_the_thumbprint_is_rfc7638() -> None:
    # The key and kid of the receipt contract's own example.
    raw = base64.urlsafe_b64decode("lWF9BfGUebsmDsCzDuFQJIwqIQuSOAmkOV0G2yHELyM=")
    assert jwk_thumbprint(raw) == "zTkoJZ-PxYISqNE_rYhLCU8YyKxtdZTnYkZ1V0EVST0"


def test_the_verifier_imports_nothing_but_the_standard_library_and_cryptography() -> None:
    code = (
        "import sys, receiptsite_client.verify; "
        "print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run(
        [str(PYTHON), "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    # (The editable installs' path hooks and cryptography's own OpenSSL binding, `_openssl`,
    # are loaded by the interpreter and by cryptography, not imported by the verifier.)
    loaded = {m for m in done.stdout.split() if not m.startswith("__editable__")}
    outside = (
        loaded
        - set(sys.stdlib_module_names)
        - {"cryptography", "_cffi_backend", "_openssl", "receiptsite_client", "__main__"}
    )
    assert outside == set(), outside
    assert "cryptography" in loaded


def test_a_withdrawn_receipt_is_no_evidence_but_its_place_in_the_log_still_checks() -> None:
    """The 410 answer of a withdrawn receipt: no bytes, only the kept leaf hash and the log."""
    import hashlib

    valid = load("valid/linked.json")
    leaf = hashlib.sha256(b"\x00" + base64.b64decode(valid["canonical_bytes"])).digest()
    withdrawn = {
        "receipt_id": valid["receipt_id"],
        "status": "withdrawn",
        "withdrawn_at": "2026-12-01T10:00:00.000000Z",
        "reason": "personal_data",
        "leaf_hash": base64.b64encode(leaf).decode(),
        "log": valid["log"],
    }
    result = verify_verification(withdrawn, load("keys.json"), None)
    assert result.status == "invalid"
    assert {c.name: c.result for c in result.checks} == {
        "withdrawn": "fail",
        "log_inclusion": "pass",
        "checkpoint": "pass",
        "checkpoint_signature": "pass",
        "withdrawal_statement": "fail",  # an answer without the withdrawal's statement
    }
    withdrawn["leaf_hash"] = base64.b64encode(bytes(32)).decode()
    check = verify_verification(withdrawn, load("keys.json"), None).check("log_inclusion")
    assert check is not None and check.result == "fail"


def test_a_withdrawals_signed_statement_is_checked_against_the_answer() -> None:
    """The 410 answer carries the withdrawal as a statement signed by the site's key."""
    import hashlib

    from receiptsite_client.verify.jcs import jcs

    site = Ed25519PrivateKey.generate()
    x = base64.urlsafe_b64encode(_raw_public(site)).rstrip(b"=").decode()
    kid = jwk_thumbprint(_raw_public(site))
    answer: dict[str, Any] = {
        "receipt_id": "3f0c6a52-6f6e-4b39-9a55-0d4b1a2c9e01",
        "status": "withdrawn",
        "withdrawn_at": "2026-12-01T10:00:00.000000Z",
        "reason": "personal_data",
        "leaf_hash": base64.b64encode(bytes(range(32))).decode(),
        "log": None,
        "output_hash": "ab" * 32,
    }

    def stated(**changes: Any) -> dict[str, Any]:
        doc = {"format": "withdrawal/v1", "withdrawn_by": "publisher", "position": 0,
               "previous_hash": "0" * 64, "stated_by": "site",
               **{k: answer[k] for k in ("receipt_id", "withdrawn_at", "reason", "leaf_hash",
                                         "output_hash")}, **changes}
        data = jcs(doc).encode()
        return {"canonical_bytes": base64.b64encode(data).decode(),
                "hash": hashlib.sha256(data).hexdigest(),
                "signature": {"algorithm": "Ed25519", "key_id": kid,
                              "value": base64.b64encode(site.sign(data)).decode()}}

    def check(statement: dict[str, Any]) -> Any:
        found = verify_verification({**answer, "statement": statement}, None, x)
        return found.check("withdrawal_statement")

    assert check(stated()).result == "pass"
    assert check(stated(reason="other")).result == "fail"  # says another withdrawal
    forged = stated()
    forged["signature"]["value"] = base64.b64encode(bytes(64)).decode()
    assert check(forged).result == "fail"
    rehashed = {**stated(), "hash": "00" * 32}
    assert check(rehashed).result == "fail"


# --- key compromise (README, "Key compromise") -------------------------------------------


def _raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _compromise_first_key_and_sign_again(verification: dict[str, Any]) -> tuple[Any, Any]:
    """What `compromisekey` makes of a receipt logged before the first key leaked: the first
    key marked compromised, a new active key, the receipt's bytes and the current checkpoint
    signed by the new key (the receipt's signature is then the new one)."""
    from receiptsite_client.verify import b64decode, note_key_id

    keys = load("keys-first-key-compromised.json")
    new = Ed25519PrivateKey.generate()
    raw = _raw_public(new)
    x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    for key in keys["keys"]:
        if key["status"] == "active":
            key["status"] = "retired"
    keys["keys"].append({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": jwk_thumbprint(raw),
                         "alg": "EdDSA", "use": "sig", "status": "active"})
    data = b64decode(verification["canonical_bytes"])
    verification = {**verification, "signature": {
        **verification["signature"], "key_id": jwk_thumbprint(raw),
        "value": base64.b64encode(new.sign(data)).decode()}}
    text = verification["log"]["checkpoint"].rpartition("\n\n")[0] + "\n"
    origin = verification["log"]["origin"]
    line = base64.b64encode(note_key_id(origin, raw) + new.sign(text.encode())).decode()
    verification["log"] = {**verification["log"],
                           "checkpoint": f"{text}\n\u2014 {origin} {line}\n"}
    return verification, keys


def test_a_receipt_signed_again_by_the_new_key_is_valid() -> None:
    verification, keys = _compromise_first_key_and_sign_again(load("valid/plain.json"))
    result = verify_verification(verification, keys, None)
    assert result.status == "valid", result.as_json()
    # Its first signature, by the compromised key, no longer counts.
    first = load("valid/plain.json")["signature"]
    assert first["key_id"] == load("keys.json")["keys"][0]["kid"]
    again = verify_verification({**verification, "signature": first}, keys, None)
    assert again.failed() == ["signature"]


def test_a_compromised_key_is_named_with_its_time_and_its_checkpoint_refused() -> None:
    keys = load("keys-first-key-compromised.json")
    [first] = [k for k in keys["keys"] if k["status"] == "compromised"]
    # Signed, and its checkpoint too, by the first key.
    result = verify_verification(load("valid/plain-at-size-2.json"), keys, None)
    signature = result.check("signature")
    checkpoint = result.check("checkpoint_signature")
    assert signature is not None and checkpoint is not None
    assert f"marked compromised as of {first['compromised_at']}" in signature.detail
    assert "cannot be told from a forgery" in signature.detail
    assert "signed only by a key marked compromised" in checkpoint.detail
    assert "cannot be shown to predate the compromise" in checkpoint.detail


# --- a re-signed receipt's evidence (docs/verification.md, "signature.evidence") -----------


def _resigned_with_evidence(
    *, evidence_key: str = "old", signed_at: str = "2026-01-01T00:00:00.000000Z"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A receipt as the site answers once `compromisekey` signed it again: the old key marked
    compromised as of 2026-06-01, the new one active, a log of two leaves (the receipt's
    first), the receipt and the log's checkpoint signed by the new key, and the evidence: the
    checkpoint of the same tree signed by `evidence_key` ("old"; "rotated", a retired key the
    old one had been rotated to before it leaked; "new"; or a stranger's)."""
    from receiptsite_client.verify import b64decode, leaf_hash, note_key_id

    old, rotated, new, stranger = (Ed25519PrivateKey.generate() for _ in range(4))
    origin = "receipts.example.org/receipts"
    data = b64decode(load("valid/plain.json")["canonical_bytes"])
    other = leaf_hash(b"another receipt")
    root = hashlib.sha256(b"\x01" + leaf_hash(data) + other).digest()
    text = f"{origin}\n2\n{base64.b64encode(root).decode()}\n"

    def signed_note(key: Ed25519PrivateKey) -> str:
        raw = _raw_public(key)
        line = base64.b64encode(note_key_id(origin, raw) + key.sign(text.encode())).decode()
        return f"{text}\n\u2014 {origin} {line}\n"

    def jwk(key: Ed25519PrivateKey, status: str, **more: Any) -> dict[str, Any]:
        raw = _raw_public(key)
        x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        return {"kty": "OKP", "crv": "Ed25519", "x": x, "kid": jwk_thumbprint(raw),
                "alg": "EdDSA", "use": "sig", "status": status, **more}

    listed = [jwk(old, "compromised", compromised_at="2026-06-01T00:00:00.000000Z"),
              jwk(rotated, "retired"), jwk(new, "active")]
    keys: dict[str, Any] = {"keys": listed, "log": {"origin": origin}}
    proof = [base64.b64encode(other).decode()]
    by = {"old": old, "rotated": rotated, "new": new, "stranger": stranger}[evidence_key]
    verification = {
        **load("valid/plain.json"),
        "signature": {"algorithm": "Ed25519", "key_id": listed[2]["kid"],
                      "value": base64.b64encode(new.sign(data)).decode(),
                      "evidence": {"checkpoint": signed_note(by), "tree_size": 2,
                                   "leaf_index": 0, "inclusion_proof": proof,
                                   "signed_at": signed_at, "signed_at_source": "site"}},
        "log": {"origin": origin, "index": 0, "tree_size": 2,
                "root_hash": base64.b64encode(root).decode(), "inclusion_proof": proof,
                "checkpoint": signed_note(new)},
    }
    return verification, keys


@pytest.mark.parametrize("by", ["old", "rotated"])
def test_a_re_signed_receipts_evidence_is_checked(by: str) -> None:
    verification, keys = _resigned_with_evidence(evidence_key=by)
    result = verify_verification(verification, keys, None)
    assert result.status == "valid", result.as_json()
    signature = result.check("signature")
    assert signature is not None and "before 2026-06-01T00:00:00.000000Z" in signature.detail


def test_a_tampered_evidence_proof_fails_the_signature() -> None:
    verification, keys = _resigned_with_evidence()
    zeros = base64.b64encode(bytes(32)).decode()
    verification["signature"]["evidence"]["inclusion_proof"] = [zeros]
    result = verify_verification(verification, keys, None)
    assert result.failed() == ["signature"]
    signature = result.check("signature")
    assert signature is not None and "does not put the receipt's leaf 0" in signature.detail


@pytest.mark.parametrize("by", ["new", "stranger"])
def test_an_evidence_checkpoint_by_another_key_fails_the_signature(by: str) -> None:
    verification, keys = _resigned_with_evidence(evidence_key=by)
    result = verify_verification(verification, keys, None)
    assert result.failed() == ["signature"]
    signature = result.check("signature")
    assert signature is not None and "is not signed, under the log's name, by a listed key" in (
        signature.detail
    )


@pytest.mark.parametrize("signed_at", ["2026-06-01T00:00:00.000000Z", "2026-07-01T00:00:00Z"])
def test_an_evidence_checkpoint_signed_after_the_compromise_fails(signed_at: str) -> None:
    verification, keys = _resigned_with_evidence(signed_at=signed_at)
    result = verify_verification(verification, keys, None)
    assert result.failed() == ["signature"]
    signature = result.check("signature")
    assert signature is not None and "not before key" in signature.detail

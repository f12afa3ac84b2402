"""receipt-verify: check a receipt without trusting the site that serves it.

    receipt-verify TARGET [--key KEY] [--json]

TARGET is a receipt link (`https://…/run/<id>`), its verification URL
(`…/api/receipt/<id>/verify`), a saved verification JSON, or an offline bundle
(`{"bundle": "receipt-bundle/v1", "verification": …, "keys": …}`). KEY is a keys document
(a file, as `/.well-known/receipt-keys.json` serves it) or a base64url Ed25519 public key (the
`x` of a key). Exit status: 0 valid, 1 invalid, 2 could not check (the site cannot be reached,
no key to check against, a TARGET that is not a receipt).

Every check is recomputed here, from the bytes; the `status` and `checks` that the site puts
in the verification JSON are its own claims and are never read. This module shares no code
with the site: it has its own RFC 8785 serialiser, RFC 9162 inclusion proof, C2SP signed-note
reader and RFC 7638 thumbprint, and needs only the standard library and `cryptography`.

Canonical form is checked with a full RFC 8785 serialiser (keys sorted by UTF-16 code units,
ECMAScript number formatting, minimal string escaping), not with `json.dumps(sort_keys=True)`:
receipts hold no floats today, but sorting by code point differs from RFC 8785 for keys outside
the Basic Multilingual Plane, and a verifier should not depend on what a document may hold.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import math
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

PASS = "pass"
FAIL = "fail"
UNCHECKED = "could_not_check"

VALID = "valid"
INVALID = "invalid"
COULD_NOT_CHECK = "could_not_check"

EXIT_CODES = {VALID: 0, INVALID: 1, COULD_NOT_CHECK: 2}

CHECK_NAMES = (
    "canonical_form",
    "hash",
    "receipt_id",
    "signature",
    "log_inclusion",
    "checkpoint",
    "checkpoint_signature",
)

BUNDLE_FORMAT = "receipt-bundle/v1"
DEFAULT_TIMEOUT = 15.0  # seconds, for one HTTP request
MAX_NOTE_SIGNATURES = 100  # c2sp.org/signed-note asks verifiers to cap them
MAX_SAFE_INTEGER = 2**53 - 1
HASH_SIZE = 32
PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64
NOTE_SIGNATURE_PREFIX = "\u2014 "  # EM DASH, space
ED25519_NOTE_TYPE = b"\x01"

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_RUN_PATH = re.compile(rf"^(?P<prefix>.*)/run/(?P<id>{_UUID})/?$")
_BUNDLE_PATH = re.compile(rf"^(?P<prefix>.*)/run/(?P<id>{_UUID})/bundle\.json$")
_VERIFY_PATH = re.compile(rf"^(?P<prefix>.*)/api/receipt/(?P<id>{_UUID})/verify/?$")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")  # every ASCII control but the newline
_DECIMAL = re.compile(r"0|[1-9][0-9]*")

TRUST_NOTE = (
    "The key was taken from the site itself ({source}): this check is not independent of "
    "the site. Pin a key you got elsewhere with --key (a keys document file or its base64url "
    "x) to check without trusting it."
)


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    name: str
    result: str  # PASS, FAIL or UNCHECKED
    detail: str

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "result": self.result, "detail": self.detail}


@dataclass
class Result:
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    receipt_id: str | None = None

    @property
    def status(self) -> str:
        results = {check.result for check in self.checks}
        if FAIL in results:
            return INVALID
        if UNCHECKED in results or not self.checks:
            return COULD_NOT_CHECK
        return VALID

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.result == FAIL]

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "checks": [c.as_json() for c in self.checks]}


class CouldNotCheck(Exception):
    """The target or the key could not be read or fetched: nothing was decided."""


# --- encodings -------------------------------------------------------------------------------


def b64decode(text: object) -> bytes:
    """Padded standard base64, strictly (no stray characters)."""
    if not isinstance(text, str):
        raise ValueError("not a base64 string")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise ValueError(f"not valid base64 ({error})") from None


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: object) -> bytes:
    """Unpadded base64url (RFC 4648 §5), as JWK uses it."""
    if not isinstance(text, str) or not _BASE64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not valid unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- RFC 8785 --------------------------------------------------------------------------------


def _jcs_number(value: float) -> str:
    """ECMAScript Number::toString (ECMA-262 §6.1.6.1.20), which RFC 8785 §3.2.2.3 uses."""
    if math.isnan(value) or math.isinf(value):
        raise ValueError("NaN and Infinity are not JSON")
    if value == 0:
        return "0"  # -0 too
    if value < 0:
        return "-" + _jcs_number(-value)
    # repr gives the shortest digit string that round-trips, as ECMAScript requires.
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    power = (int(exponent) if exponent else 0) - len(fraction)
    stripped = digits.rstrip("0")
    power += len(digits) - len(stripped)
    digits = stripped
    k = len(digits)
    n = power + k  # value = 0.<digits> * 10**n
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    head = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{head}e{sign}{abs(e)}"


_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _jcs_string(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif "\ud800" <= ch <= "\udfff":
            raise ValueError("a lone surrogate is not Unicode text")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _utf16_key(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare exactly as the sequences of UTF-16 code units do.
    return key.encode("utf-16-be")


def jcs(value: object) -> str:
    """The RFC 8785 serialisation of a JSON value (as json.loads returns it)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        # RFC 8785 numbers are IEEE 754 doubles: outside the safe range an integer does not
        # survive the round trip, and is refused rather than silently rounded.
        if abs(value) > MAX_SAFE_INTEGER:
            raise ValueError("an integer outside ±(2**53 - 1)")
        return str(value)
    if isinstance(value, float):
        return _jcs_number(value)
    if isinstance(value, str):
        return _jcs_string(value)
    if isinstance(value, list):
        return "[" + ",".join(jcs(item) for item in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=_utf16_key)
        return "{" + ",".join(f"{_jcs_string(k)}:{jcs(value[k])}" for k in keys) + "}"
    raise ValueError(f"{type(value).__name__} is not a JSON value")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate object key")
    return obj


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def parse_strict_json(data: bytes) -> Any:
    """UTF-8 JSON with no duplicate keys and no NaN/Infinity; ValueError otherwise."""
    text = data.decode("utf-8")  # explicitly: json.loads(bytes) would take UTF-16 too
    return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def canonical_form_problem(data: bytes) -> str | None:
    """None when `data` is in RFC 8785 form, else why not."""
    try:
        parsed = parse_strict_json(data)
    except UnicodeDecodeError:
        return "the bytes are not UTF-8"
    except (ValueError, RecursionError) as error:
        return f"the bytes are not JSON ({error})"
    try:
        again = jcs(parsed).encode("utf-8")
    except (ValueError, RecursionError) as error:
        return f"the JSON has no RFC 8785 form ({error})"
    if again != data:
        return "RFC 8785 serialises the document to different bytes"
    return None


# --- keys ------------------------------------------------------------------------------------


def jwk_thumbprint(raw: bytes) -> str:
    """RFC 7638: SHA-256 of the required members, sorted, no whitespace; base64url."""
    members = {"crv": "Ed25519", "kty": "OKP", "x": b64url(raw)}
    return b64url(hashlib.sha256(jcs(members).encode("utf-8")).digest())


def note_key_id(name: str, raw: bytes) -> bytes:
    """c2sp.org/signed-note: SHA-256(name || 0x0A || 0x01 || public key)[:4]."""
    return hashlib.sha256(name.encode("utf-8") + b"\n" + ED25519_NOTE_TYPE + raw).digest()[:4]


def ed25519_verify(raw: bytes, signature: bytes, data: bytes) -> bool:
    if len(raw) != PUBLIC_KEY_SIZE or len(signature) != SIGNATURE_SIZE:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True)
class TrustedKey:
    raw: bytes
    kid: str
    status: str  # "active", "retired", "compromised", or "pinned"
    compromised_at: str | None = None  # as the keys document states it, for the words only

    def compromised_words(self) -> str:
        when = f" as of {self.compromised_at}" if self.compromised_at else ""
        return f"marked compromised{when}"


def _listed_keys(keys: dict[str, Any] | None) -> tuple[list[TrustedKey], list[str]]:
    """The usable keys of a keys document, and what was wrong with the others."""
    found: list[TrustedKey] = []
    problems: list[str] = []
    entries = keys.get("keys") if isinstance(keys, dict) else None
    if not isinstance(entries, list):
        return found, ["the keys document has no list of keys"] if keys is not None else []
    for number, entry in enumerate(entries):
        if (
            not isinstance(entry, dict)
            or entry.get("kty") != "OKP"
            or entry.get("crv") != "Ed25519"
        ):
            problems.append(f"key {number} is not an Ed25519 JWK")
            continue
        try:
            raw = b64url_decode(entry.get("x"))
        except ValueError:
            raw = b""
        if len(raw) != PUBLIC_KEY_SIZE:
            problems.append(f"key {number} has no 32-byte x")
            continue
        kid = jwk_thumbprint(raw)
        if entry.get("kid") != kid:
            # A kid that is not the key's thumbprint cannot name it: leave the key out.
            problems.append(f"key {number}'s kid is not its RFC 7638 thumbprint")
            continue
        status = entry.get("status")
        since = entry.get("compromised_at")
        found.append(
            TrustedKey(
                raw,
                kid,
                status if isinstance(status, str) else "unknown",
                since if isinstance(since, str) else None,
            )
        )
    return found, problems


def trusted_keys(keys: dict[str, Any] | None, pinned_x: str | None) -> list[TrustedKey]:
    """The keys to check against: the pinned one alone if given, else the document's.

    A document's `compromised` mark is honoured even for a pinned key: it can only make a
    check stricter, never make a forgery pass.
    """
    listed, _problems = _listed_keys(keys)
    if pinned_x is None:
        return listed
    raw = b64url_decode(pinned_x)
    if len(raw) != PUBLIC_KEY_SIZE:
        raise ValueError("an Ed25519 public key is 32 bytes")
    kid = jwk_thumbprint(raw)
    marked = next((k for k in listed if k.kid == kid and k.status == "compromised"), None)
    if marked is not None:
        return [marked]
    return [TrustedKey(raw, kid, "pinned")]


# --- RFC 9162 inclusion proofs ---------------------------------------------------------------


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 §2.1.3.2; `leaf` is the leaf hash."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _node(p, r)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = _node(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


# --- C2SP signed notes -----------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    text: str  # up to and including the newline before the LAST blank line
    signatures: list[tuple[str, bytes, bytes]]  # (key name, key id, signature)


def parse_note(note: object) -> Note:
    """A signed note read as the site reads it: the text ends at the last blank line, every
    line after it is a signature line. ValueError if it is not a well-formed note."""
    if not isinstance(note, str):
        raise ValueError("the checkpoint is not text")
    note.encode("utf-8")  # lone surrogates raise UnicodeEncodeError, a ValueError
    if not note.endswith("\n") or _CONTROL.search(note):
        raise ValueError("a note ends in a newline and holds no control characters")
    split = note.rfind("\n\n")
    if split < 0:
        raise ValueError("the note has no blank line before its signatures")
    text, lines = note[: split + 1], note[split + 2 :].split("\n")[:-1]
    if not lines or len(lines) > MAX_NOTE_SIGNATURES:
        raise ValueError(f"a note carries 1 to {MAX_NOTE_SIGNATURES} signature lines")
    signatures = []
    for line in lines:
        if not line.startswith(NOTE_SIGNATURE_PREFIX):
            raise ValueError("a signature line starts with an em dash and a space")
        name, space, encoded = line[len(NOTE_SIGNATURE_PREFIX) :].partition(" ")
        if not space or not name or "+" in name or any(ch.isspace() for ch in name):
            raise ValueError("a signature line is '— <key name> <base64>'")
        blob = b64decode(encoded)
        if len(blob) <= 4:
            raise ValueError("a note signature is a 4-byte key id and a signature")
        signatures.append((name, blob[:4], blob[4:]))
    return Note(text, signatures)


def parse_checkpoint(text: str) -> tuple[str, int, bytes]:
    """(origin, tree size, root hash) of a checkpoint's text (c2sp.org/tlog-checkpoint)."""
    lines = text[:-1].split("\n") if text.endswith("\n") else []
    if len(lines) < 3 or not all(lines):
        raise ValueError("a checkpoint is at least three non-empty lines")
    origin, size, root_text = lines[:3]
    if not _DECIMAL.fullmatch(size):
        raise ValueError("the tree size is not a decimal number")
    root = b64decode(root_text)
    if len(root) != HASH_SIZE:
        raise ValueError("the root hash is not 32 bytes")
    return origin, int(size), root


# --- the checks ------------------------------------------------------------------------------


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _log_fields(log: object) -> tuple[int, int, bytes, list[bytes]]:
    if not isinstance(log, dict):
        raise ValueError("the verification gives no log proof")
    index, size = log.get("index"), log.get("tree_size")
    if not (_is_count(index) and _is_count(size)):
        raise ValueError("log.index and log.tree_size must be counts")
    assert isinstance(index, int) and isinstance(size, int)
    root = b64decode(log.get("root_hash"))
    proof_items = log.get("inclusion_proof")
    if not isinstance(proof_items, list):
        raise ValueError("log.inclusion_proof is not a list")
    proof = [b64decode(item) for item in proof_items]
    if len(root) != HASH_SIZE or any(len(p) != HASH_SIZE for p in proof):
        raise ValueError("the root and every proof hash are 32 bytes")
    return index, size, root, proof


def _check_signature(
    data: bytes, verification: dict[str, Any], trusted: list[TrustedKey] | None, pinned: bool
) -> Check:
    name = "signature"
    if trusted is None:
        return Check(
            name,
            UNCHECKED,
            "No key to check the signature against: give one with "
            "--key (a keys document or a base64url Ed25519 key).",
        )
    signature = verification.get("signature")
    if not isinstance(signature, dict):
        return Check(name, FAIL, "The verification carries no signature.")
    if signature.get("algorithm") != "Ed25519":
        return Check(
            name, FAIL, f"The signature algorithm is {signature.get('algorithm')!r}, not Ed25519."
        )
    kid = signature.get("key_id")
    try:
        value = b64decode(signature.get("value"))
    except ValueError as error:
        return Check(name, FAIL, f"The signature value is {error}.")
    key = next((k for k in trusted if k.kid == kid), None)
    if key is None:
        where = "the pinned key" if pinned else "a key the keys document lists"
        known = ", ".join(k.kid for k in trusted) or "none"
        return Check(
            name,
            FAIL,
            f"The receipt was signed by key {kid}, which is not {where} (known: {known}).",
        )
    if key.status == "compromised":
        # The site shows the newest signature that counts (a receipt logged before the
        # compromise is signed again by the new key): this one could be a forgery.
        return Check(
            name,
            FAIL,
            f"The signing key {kid} is {key.compromised_words()}, and this signature is not "
            "one the site could show was made before then: it cannot be told from a forgery.",
        )
    if not ed25519_verify(key.raw, value, data):
        return Check(name, FAIL, f"The Ed25519 signature does not verify under key {kid}.")
    how = "the pinned key" if pinned else f"the listed key ({key.status})"
    return Check(name, PASS, f"The Ed25519 signature verifies under {how} {kid}.")


def _check_note(
    note_text: object,
    log: dict[str, Any],
    keys: dict[str, Any] | None,
    trusted: list[TrustedKey] | None,
) -> tuple[Check, Check]:
    """The `checkpoint` (content) and `checkpoint_signature` checks."""
    try:
        note = parse_note(note_text)
    except ValueError as error:
        bad = f"The checkpoint is not a signed note ({error})."
        return Check("checkpoint", FAIL, bad), Check("checkpoint_signature", FAIL, bad)

    # The content: a checkpoint for this log, of the tree the proof is for.
    claimed_origin = log.get("origin")
    keys_log = keys.get("log") if isinstance(keys, dict) else None
    keys_origin = keys_log.get("origin") if isinstance(keys_log, dict) else None
    try:
        origin, size, root = parse_checkpoint(note.text)
        problems = []
        if origin != claimed_origin:
            problems.append(f"its origin is {origin!r}, not log.origin {claimed_origin!r}")
        if isinstance(keys_origin, str) and origin != keys_origin:
            problems.append(
                f"its origin is {origin!r}, not the keys document's log {keys_origin!r}"
            )
        if size != log.get("tree_size"):
            problems.append(f"its size is {size}, not log.tree_size {log.get('tree_size')}")
        if base64.b64encode(root).decode("ascii") != log.get("root_hash"):
            problems.append("its root hash is not log.root_hash")
        content = (
            Check(
                "checkpoint",
                FAIL,
                "The checkpoint does not match the proof: " + "; ".join(problems) + ".",
            )
            if problems
            else Check(
                "checkpoint",
                PASS,
                f"The checkpoint is for log {origin}, tree size "
                f"{size}, with the proof's root hash.",
            )
        )
    except ValueError as error:
        content = Check("checkpoint", FAIL, f"The checkpoint text does not parse ({error}).")

    # The signature: by a trusted key, under the log's name.
    if trusted is None:
        return content, Check(
            "checkpoint_signature", UNCHECKED, "No key to check the checkpoint's signature against."
        )
    name = keys_origin if isinstance(keys_origin, str) else claimed_origin
    if not isinstance(name, str):
        return content, Check(
            "checkpoint_signature", FAIL, "The log has no origin to name its key."
        )
    counted = {note_key_id(name, k.raw): k for k in trusted if k.status != "compromised"}
    compromised = {note_key_id(name, k.raw): k for k in trusted if k.status == "compromised"}
    message = note.text.encode("utf-8")
    verified: list[str] = []
    by_compromised: TrustedKey | None = None
    for sig_name, key_id, signature in note.signatures:
        if sig_name != name:
            continue  # another signer's signature (a witness, say): not ours to judge
        if key_id in counted:
            key = counted[key_id]
            if not ed25519_verify(key.raw, signature, message):
                return content, Check(
                    "checkpoint_signature",
                    FAIL,
                    f"The checkpoint's signature by key {key.kid} does not verify.",
                )
            verified.append(key.kid)
        elif key_id in compromised and ed25519_verify(compromised[key_id].raw, signature, message):
            by_compromised = compromised[key_id]
    if verified:
        return content, Check(
            "checkpoint_signature",
            PASS,
            f"The checkpoint is signed by key {verified[0]} under the log's name {name}.",
        )
    if by_compromised is not None:
        return content, Check(
            "checkpoint_signature",
            FAIL,
            f"The checkpoint is signed only by a key marked compromised ({by_compromised.kid}, "
            f"{by_compromised.compromised_words()}). A checkpoint carries no time, so it "
            "cannot be shown to predate the compromise.",
        )
    return content, Check(
        "checkpoint_signature",
        FAIL,
        f"The checkpoint carries no signature by a trusted key under the log's name {name}.",
    )


def verify_verification(
    verification: dict[str, Any],
    keys: dict[str, Any] | None,
    pinned_x: str | None,
    *,
    expected_id: str | None = None,
) -> Result:
    """Check a verification JSON (as `/api/receipt/<id>/verify` serves it) from its bytes.

    `keys`: a keys document or None; `pinned_x`: a base64url Ed25519 public key to trust
    alone (then `keys` only contributes `compromised` marks and the log's name). With
    neither, the signature checks are "could not check". `expected_id`: the id the caller
    asked for (from a URL), which the document's id must equal too.
    """
    result = Result()
    if not isinstance(verification, dict):
        result.checks.append(
            Check("canonical_form", FAIL, "The verification is not a JSON object.")
        )
        return result
    receipt_id = verification.get("receipt_id")
    result.receipt_id = receipt_id if isinstance(receipt_id, str) else None
    try:
        trusted: list[TrustedKey] | None = (
            trusted_keys(keys, pinned_x) if keys is not None or pinned_x is not None else None
        )
    except ValueError as error:
        trusted = None
        result.notes.append(f"The pinned key is not usable ({error}).")
    if trusted is not None and keys is not None:
        result.notes.extend(f"Ignored: {p}." for p in _listed_keys(keys)[1])

    if verification.get("status") == "withdrawn":
        return _verify_withdrawn(verification, keys, trusted, result)

    # canonical_form
    data: bytes | None
    try:
        data = b64decode(verification.get("canonical_bytes"))
    except ValueError as error:
        data = None
        result.checks.append(Check("canonical_form", FAIL, f"canonical_bytes is {error}."))
    document: Any = None
    if data is not None:
        problem = canonical_form_problem(data)
        result.checks.append(
            Check("canonical_form", FAIL, f"The bytes are not in RFC 8785 form: {problem}.")
            if problem
            else Check("canonical_form", PASS, "The bytes are UTF-8 JSON in RFC 8785 form.")
        )
        try:
            document = parse_strict_json(data)
        except (ValueError, RecursionError):
            document = None

    no_bytes = "There are no bytes to check."
    if data is None:
        for name in ("hash", "receipt_id", "signature", "log_inclusion"):
            result.checks.append(Check(name, UNCHECKED, no_bytes))
    else:
        # hash
        digest = hashlib.sha256(data).hexdigest()
        stated = verification.get("output_hash")
        result.checks.append(
            Check("hash", PASS, f"SHA-256 of the bytes is {digest}, the stated output hash.")
            if digest == stated
            else Check(
                "hash",
                FAIL,
                f"SHA-256 of the bytes is {digest}, not the stated output hash {stated}.",
            )
        )
        # receipt_id
        doc_id = document.get("id") if isinstance(document, dict) else None
        if not isinstance(document, dict):
            result.checks.append(Check("receipt_id", FAIL, "The bytes hold no document, so no id."))
        elif doc_id != receipt_id:
            result.checks.append(
                Check(
                    "receipt_id",
                    FAIL,
                    f"The document's id is {doc_id}, not the receipt_id {receipt_id}.",
                )
            )
        elif expected_id is not None and doc_id != expected_id.lower():
            result.checks.append(
                Check(
                    "receipt_id",
                    FAIL,
                    f"The document's id is {doc_id}, not the {expected_id} that was asked for.",
                )
            )
        else:
            result.checks.append(Check("receipt_id", PASS, f"The document's id is {doc_id}."))
        # signature
        result.checks.append(
            _check_signature(data, verification, trusted, pinned=pinned_x is not None)
        )
        # log_inclusion
        result.checks.append(_check_inclusion(leaf_hash(data), verification.get("log")))

    log = verification.get("log")
    if isinstance(log, dict):
        result.checks.extend(_check_note(log.get("checkpoint"), log, keys, trusted))
    else:
        for name in ("checkpoint", "checkpoint_signature"):
            result.checks.append(
                Check(name, FAIL, "The verification gives no log proof, so no checkpoint.")
            )
    return result


def _check_inclusion(leaf: bytes, log: object) -> Check:
    try:
        index, size, root, proof = _log_fields(log)
    except ValueError as error:
        return Check("log_inclusion", FAIL, f"No usable log proof: {error}.")
    if verify_inclusion(leaf, index, size, proof, root):
        return Check(
            "log_inclusion",
            PASS,
            f"Leaf {index} is in the tree of size {size} whose root is log.root_hash.",
        )
    return Check(
        "log_inclusion",
        FAIL,
        f"The inclusion proof for leaf {index} in a tree of "
        f"size {size} does not lead to log.root_hash.",
    )


def _verify_withdrawn(
    verification: dict[str, Any],
    keys: dict[str, Any] | None,
    trusted: list[TrustedKey] | None,
    result: Result,
) -> Result:
    """A withdrawn receipt: its content is erased; only its place in the log can be shown."""
    result.checks.append(
        Check(
            "withdrawn",
            FAIL,
            f"The receipt was withdrawn at {verification.get('withdrawn_at')} (reason: "
            f"{verification.get('reason')}); its content is erased, so it is no evidence now.",
        )
    )
    try:
        leaf = b64decode(verification.get("leaf_hash"))
        if len(leaf) != HASH_SIZE:
            raise ValueError("not 32 bytes")
    except ValueError as error:
        result.checks.append(Check("log_inclusion", FAIL, f"The leaf hash is {error}."))
    else:
        result.checks.append(_check_inclusion(leaf, verification.get("log")))
    log = verification.get("log")
    if isinstance(log, dict):
        result.checks.extend(_check_note(log.get("checkpoint"), log, keys, trusted))
    return result


# --- targets and keys ------------------------------------------------------------------------


def fetch_json(url: str, timeout: float = DEFAULT_TIMEOUT) -> Any:
    """GET a JSON document; CouldNotCheck for anything but a JSON answer (a 410 withdrawal
    answer counts: it is the receipt's verification)."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise CouldNotCheck(f"{url} is not an http(s) URL")
    request = urllib.request.Request(
        url, headers={"Accept": "application/json", "User-Agent": "receipt-verify/1"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body = answer.read()
    except urllib.error.HTTPError as error:
        with error:
            if error.code != 410:
                raise CouldNotCheck(f"{url} answered {error.code} {error.reason}") from None
            body = error.read()
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        raise CouldNotCheck(f"cannot reach {url} ({reason})") from None
    try:
        return json.loads(body)
    except ValueError:
        raise CouldNotCheck(f"{url} did not answer JSON") from None


@dataclass
class Target:
    verification: dict[str, Any]
    keys: dict[str, Any] | None = None  # a bundle's keys document
    expected_id: str | None = None
    source: str = ""
    bundle: dict[str, Any] | None = None  # the whole bundle, when TARGET is one


def _as_target(obj: Any, source: str, expected_id: str | None = None) -> Target:
    if not isinstance(obj, dict):
        raise CouldNotCheck(f"{source} is not a JSON object")
    if "bundle" in obj:
        if obj["bundle"] != BUNDLE_FORMAT:
            raise CouldNotCheck(f"{source} is a bundle of an unknown format {obj['bundle']!r}")
        verification, keys = obj.get("verification"), obj.get("keys")
        if not isinstance(verification, dict):
            raise CouldNotCheck(f"the bundle {source} holds no verification")
        return Target(
            verification, keys if isinstance(keys, dict) else None, expected_id, source, obj
        )
    if "receipt_id" not in obj:
        raise CouldNotCheck(f"{source} is neither a verification JSON nor a bundle")
    return Target(obj, None, expected_id, source)


def load_target(target: str, timeout: float = DEFAULT_TIMEOUT) -> Target:
    """The verification (and a bundle's keys) that TARGET names; CouldNotCheck if it cannot
    be had."""
    parts = urllib.parse.urlsplit(target)
    if parts.scheme in ("http", "https"):
        expected_id = None
        url = target
        for pattern in (_BUNDLE_PATH, _VERIFY_PATH):
            match = pattern.match(parts.path)
            if match:
                expected_id = match["id"]
                break
        else:
            match = _RUN_PATH.match(parts.path)
            if match:
                # The receipt page's verification lives on the same origin.
                expected_id = match["id"]
                path = f"{match['prefix']}/api/receipt/{match['id']}/verify"
                url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        return _as_target(fetch_json(url, timeout), url, expected_id)
    file = Path(target)
    try:
        obj = json.loads(file.read_bytes())
    except OSError as error:
        raise CouldNotCheck(f"cannot read {target} ({error.strerror or error})") from None
    except ValueError:
        raise CouldNotCheck(f"{target} is not JSON") from None
    return _as_target(obj, target)


def load_key(key: str) -> tuple[dict[str, Any] | None, str | None]:
    """(keys document, pinned x) of a --key value; CouldNotCheck if it is neither."""
    path = Path(key)
    if path.is_file():
        try:
            document = json.loads(path.read_bytes())
        except (OSError, ValueError):
            raise CouldNotCheck(f"the key file {key} is not a JSON keys document") from None
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise CouldNotCheck(f'the key file {key} is not a keys document ({{"keys": [...]}})')
        return document, None
    try:
        raw = b64url_decode(key.strip())
    except ValueError:
        raw = b""
    if len(raw) != PUBLIC_KEY_SIZE:
        raise CouldNotCheck(
            f"--key {key!r} is neither a keys document file nor a base64url "
            "Ed25519 public key (43 characters)"
        )
    return None, key.strip()


def verify_target(target: str, key: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> Result:
    """What receipt-verify does: load TARGET and KEY, fetch what is missing, check."""
    try:
        pinned_keys, pinned_x = load_key(key) if key is not None else (None, None)
        loaded = load_target(target, timeout)
    except CouldNotCheck as error:
        return Result(checks=[Check("target", UNCHECKED, f"Could not check: {error}.")])

    notes: list[str] = []
    keys: dict[str, Any] | None
    if key is not None:
        # The pinned key decides; a bundle's keys can still mark it compromised.
        keys = pinned_keys if pinned_keys is not None else loaded.keys
    elif loaded.keys is not None:
        keys = loaded.keys
        notes.append(TRUST_NOTE.format(source=f"the keys document inside {loaded.source}"))
    else:
        signature = loaded.verification.get("signature")
        keys_url = signature.get("keys_url") if isinstance(signature, dict) else None
        keys = None
        if not isinstance(keys_url, str):
            notes.append("The verification names no keys document, and no key was pinned.")
        else:
            try:
                fetched = fetch_json(keys_url, timeout)
                keys = fetched if isinstance(fetched, dict) else None
                notes.append(TRUST_NOTE.format(source=keys_url))
            except CouldNotCheck as error:
                notes.append(f"No key: {error}; pin one with --key.")
    if loaded.bundle is not None:
        # A bundle also carries its log proof as a c2sp.org/tlog-proof text (bundle.py, which
        # builds on this module).
        from receiptsite_client.bundle import verify_bundle

        result = verify_bundle(loaded.bundle, keys, pinned_x, expected_id=loaded.expected_id)
    else:
        result = verify_verification(
            loaded.verification, keys, pinned_x, expected_id=loaded.expected_id
        )
    result.notes[:0] = notes
    return result


# --- the command -----------------------------------------------------------------------------

_WORDS = {PASS: "pass", FAIL: "FAIL", UNCHECKED: "could not check"}


def render(result: Result) -> str:
    lines = []
    if result.receipt_id:
        lines.append(f"Receipt {result.receipt_id}")
    for check in result.checks:
        lines.append(f"{_WORDS[check.result]:>15}  {check.name}: {check.detail}")
    lines.extend(f"Note: {note}" for note in result.notes)
    status = result.status
    if status == VALID:
        lines.append("Verdict: VALID. Every check passed.")
    elif status == INVALID:
        lines.append(f"Verdict: INVALID. Failed: {', '.join(result.failed())}.")
    else:
        unchecked = [c.name for c in result.checks if c.result == UNCHECKED]
        lines.append(
            f"Verdict: COULD NOT CHECK ({', '.join(unchecked) or 'nothing'}); "
            "nothing failed, but not everything could be checked."
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="receipt-verify",
        description="Check a receipt (its bytes, hash, signature, inclusion proof and signed "
        "checkpoint) without trusting the site. Exit 0 valid, 1 invalid, 2 could "
        "not check.",
    )
    parser.add_argument(
        "target",
        metavar="TARGET",
        help="a /run/<id> URL, a verify URL, a saved verification JSON or a bundle",
    )
    parser.add_argument(
        "--key",
        metavar="KEY",
        help="a keys document file or a base64url Ed25519 public key to trust "
        "(default: the key the site publishes, which is not independent)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds per HTTP request (default %(default)s)",
    )
    args = parser.parse_args(argv)
    result = verify_target(args.target, args.key, args.timeout)
    if args.json:
        print(json.dumps(result.as_json(), ensure_ascii=False, indent=2))
        for note in result.notes:
            print(f"Note: {note}", file=sys.stderr)
    else:
        print(render(result))
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())

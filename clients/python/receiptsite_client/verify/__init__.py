"""receipt-verify: check a receipt without trusting the site that serves it.

    receipt-verify TARGET [--key KEY] [--json]

TARGET is a receipt link (`https://…/run/<id>`), its verification URL
(`…/api/receipt/<id>/verify`), a saved verification JSON, or an offline bundle
(`{"bundle": "receipt-bundle/v1", "verification": …, "keys": …}`). KEY is a keys document
(a file, as `/.well-known/receipt-keys.json` serves it) or a base64url Ed25519 public key (the
`x` of a key). Exit status: 0 valid, 1 invalid, 2 could not check (the site cannot be reached,
no key to check against, a TARGET that is not a receipt). A saved file (verification or bundle)
checked without KEY is never 0: it cannot say who signed it, whatever keys it carries, so its
signer is not checked (exit 2, or 1 if something else fails).

Every check is recomputed here, from the bytes. This package shares no code with the site and
needs only the standard library and `cryptography`. One module per concept:

    encoding   base64 and base64url, read strictly
    jcs        RFC 8785 canonical form and strict JSON reading
    merkle     RFC 9162 leaf hash and inclusion proof
    note       C2SP signed notes and checkpoints
    tlogproof  C2SP tlog-proof texts
    keys       Ed25519, RFC 7638 thumbprints, which keys are trusted (compromise policy)
    result     Check, Result and the verdicts
    checks     checking a verification JSON
    bundle     checking an offline bundle (adds `tlog_proof`)
    targets    what TARGET and KEY are, fetching them over HTTP, verify_target
    cli        the receipt-verify command and its plain-words output

The names below are re-exported so that `from receiptsite_client.verify import X` works.
"""

from __future__ import annotations

from receiptsite_client.verify.bundle import (
    BUNDLE_CHECK_NAMES,
    BUNDLE_FORMAT,
    check_tlog_proof,
    verify_bundle,
)
from receiptsite_client.verify.checks import CHECK_NAMES, check_checkpoint, verify_verification
from receiptsite_client.verify.cli import main, render
from receiptsite_client.verify.encoding import b64decode, b64url, b64url_decode
from receiptsite_client.verify.jcs import (
    MAX_SAFE_INTEGER,
    canonical_form_problem,
    jcs,
    parse_strict_json,
)
from receiptsite_client.verify.keys import (
    PUBLIC_KEY_SIZE,
    SIGNATURE_SIZE,
    TrustedKey,
    ed25519_verify,
    jwk_thumbprint,
    keys_to_check_against,
    listed_keys,
    trusted_keys,
)
from receiptsite_client.verify.merkle import HASH_SIZE, leaf_hash, verify_inclusion
from receiptsite_client.verify.note import (
    ED25519_NOTE_TYPE,
    MAX_NOTE_SIGNATURES,
    NOTE_SIGNATURE_PREFIX,
    Note,
    note_key_id,
    parse_checkpoint,
    parse_note,
)
from receiptsite_client.verify.result import (
    COULD_NOT_CHECK,
    EXIT_CODES,
    FAIL,
    INVALID,
    PASS,
    UNCHECKED,
    VALID,
    Check,
    Result,
)
from receiptsite_client.verify.targets import (
    DEFAULT_TIMEOUT,
    SAVED_FILE_NOTE,
    TRUST_NOTE,
    CouldNotCheck,
    Target,
    fetch_json,
    load_key,
    load_target,
    verify_target,
)
from receiptsite_client.verify.tlogproof import TlogProof, parse_tlog_proof

__all__ = [
    "BUNDLE_CHECK_NAMES",
    "BUNDLE_FORMAT",
    "CHECK_NAMES",
    "COULD_NOT_CHECK",
    "DEFAULT_TIMEOUT",
    "ED25519_NOTE_TYPE",
    "EXIT_CODES",
    "FAIL",
    "HASH_SIZE",
    "INVALID",
    "MAX_NOTE_SIGNATURES",
    "MAX_SAFE_INTEGER",
    "NOTE_SIGNATURE_PREFIX",
    "PASS",
    "PUBLIC_KEY_SIZE",
    "SAVED_FILE_NOTE",
    "SIGNATURE_SIZE",
    "TRUST_NOTE",
    "UNCHECKED",
    "VALID",
    "Check",
    "CouldNotCheck",
    "Note",
    "Result",
    "Target",
    "TlogProof",
    "TrustedKey",
    "b64decode",
    "b64url",
    "b64url_decode",
    "canonical_form_problem",
    "check_checkpoint",
    "check_tlog_proof",
    "ed25519_verify",
    "fetch_json",
    "jcs",
    "jwk_thumbprint",
    "keys_to_check_against",
    "leaf_hash",
    "listed_keys",
    "load_key",
    "load_target",
    "main",
    "note_key_id",
    "parse_checkpoint",
    "parse_note",
    "parse_strict_json",
    "parse_tlog_proof",
    "render",
    "trusted_keys",
    "verify_bundle",
    "verify_inclusion",
    "verify_target",
    "verify_verification",
]

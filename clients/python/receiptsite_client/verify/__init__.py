"""receipt-verify: check a receipt without trusting the site that serves it.

    receipt-verify TARGET [--key KEY] [--policy FILE] [--json]
    receipt-checklog URL [--key KEY] [--policy FILE] [--against CHECKPOINT_FILE] [--json]

TARGET is a receipt link (`https://…/run/<id>`), its verification URL
(`…/api/receipt/<id>/verify`), a saved verification JSON, or an offline bundle
(`{"bundle": "receipt-bundle/v1", "verification": …, "keys": …}`). KEY is a keys document
(a file, as `/.well-known/receipt-keys.json` serves it) or a base64url Ed25519 public key (the
`x` of a key). FILE is a c2sp.org/tlog-policy file (the keys document's `log.witness_policy`
is the site's): its `log` keys are trusted as a pinned key is (so a policy alone pins the site),
and its quorum of witnesses must have cosigned a checkpoint that includes the receipt (the
`witnesses` check); given KEY too, only keys both trust count. Exit status: 0 valid, 1 invalid,
2 could not check (the site cannot be reached, no key to check against, a TARGET that is not a
receipt, a receipt not witnessed yet). A saved file (verification or bundle) checked without
KEY or a policy's log keys is never 0: it cannot say who signed it, whatever keys it carries,
so its signer is not checked (exit 2, or 1 if something else fails). Without a policy, the
witnesses the site names are reported, not checked.

receipt-checklog is a monitor: it checks a whole log from its static tiles (c2sp.org/tlog-tiles,
URL their prefix, e.g. `https://host/log`) and, with --against, that the log only grew since a
checkpoint kept from before. Exit 0 sound, 1 not, 2 could not check.

Every check is recomputed here, from the bytes. This package shares no code with the site and
needs only the standard library and `cryptography`. One module per concept:

    encoding     base64 and base64url, read strictly
    jcs          RFC 8785 canonical form and strict JSON reading
    merkle       RFC 9162 leaf hash, inclusion proof and the root of a tree of leaves
    note         C2SP signed notes, checkpoints and verifier keys (vkeys)
    cosignature  C2SP tlog-cosignature: witnesses' cosignature/v1 keys and lines (Ed25519)
    policy       C2SP tlog-policy files: logs, witnesses, groups and the quorum
    tlogproof    C2SP tlog-proof texts
    tiles        C2SP tlog-tiles: which tiles a tree has, their paths, one tree from them
    keys         Ed25519, RFC 7638 thumbprints, which keys are trusted (compromise policy)
    keychain     the keys document's signed history of key statuses
    result       Check, Result and the verdicts
    witnesses    the witnesses check, and key-compromise evidence the witnesses vouch for
    checks       checking a verification JSON; whom to trust (key, policy, both)
    bundle       checking an offline bundle (adds `tlog_proof`)
    targets      what TARGET, KEY and FILE are, fetching them over HTTP, verify_target
    cli          the receipt-verify command and its plain-words output
    checklog     the receipt-checklog command: a log checked from its tiles

The names below are re-exported so that `from receiptsite_client.verify import X` works.
"""

from __future__ import annotations

from receiptsite_client.verify.bundle import (
    BUNDLE_CHECK_NAMES,
    BUNDLE_FORMAT,
    check_tlog_proof,
    verify_bundle,
)
from receiptsite_client.verify.checklog import LogCheck, check_log
from receiptsite_client.verify.checks import (
    CHECK_NAMES,
    Trust,
    check_checkpoint,
    choose_trust,
    verify_verification,
)
from receiptsite_client.verify.cli import main, render
from receiptsite_client.verify.cosignature import (
    COSIGNATURE_TYPE,
    MAX_TIMESTAMP,
    WitnessKey,
    cosignature_key_id,
    cosignature_timestamp,
    cosigned_message,
    parse_witness_vkey,
    verify_cosignature_line,
)
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
from receiptsite_client.verify.merkle import HASH_SIZE, leaf_hash, tree_root, verify_inclusion
from receiptsite_client.verify.note import (
    ED25519_NOTE_TYPE,
    MAX_NOTE_SIGNATURES,
    NOTE_SIGNATURE_PREFIX,
    Note,
    VerifierKey,
    note_key_id,
    parse_checkpoint,
    parse_ed25519_vkey,
    parse_note,
    parse_vkey,
)
from receiptsite_client.verify.policy import (
    Policy,
    PolicyLog,
    PolicyWitness,
    parse_policy,
    trusted_log_keys,
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
    load_policy,
    load_target,
    verify_target,
)
from receiptsite_client.verify.tiles import Tile, tile_path, tiles_of
from receiptsite_client.verify.tlogproof import TlogProof, parse_tlog_proof
from receiptsite_client.verify.witnesses import (
    NOT_WITNESSED,
    check_witnesses,
    read_cosignatures,
)

__all__ = [
    "BUNDLE_CHECK_NAMES",
    "BUNDLE_FORMAT",
    "CHECK_NAMES",
    "COSIGNATURE_TYPE",
    "COULD_NOT_CHECK",
    "DEFAULT_TIMEOUT",
    "ED25519_NOTE_TYPE",
    "EXIT_CODES",
    "FAIL",
    "HASH_SIZE",
    "INVALID",
    "MAX_NOTE_SIGNATURES",
    "MAX_SAFE_INTEGER",
    "MAX_TIMESTAMP",
    "NOTE_SIGNATURE_PREFIX",
    "NOT_WITNESSED",
    "PASS",
    "PUBLIC_KEY_SIZE",
    "SAVED_FILE_NOTE",
    "SIGNATURE_SIZE",
    "TRUST_NOTE",
    "UNCHECKED",
    "VALID",
    "Check",
    "CouldNotCheck",
    "LogCheck",
    "Note",
    "Policy",
    "PolicyLog",
    "PolicyWitness",
    "Result",
    "Target",
    "Tile",
    "TlogProof",
    "Trust",
    "TrustedKey",
    "VerifierKey",
    "WitnessKey",
    "b64decode",
    "b64url",
    "b64url_decode",
    "canonical_form_problem",
    "check_checkpoint",
    "check_log",
    "check_tlog_proof",
    "check_witnesses",
    "choose_trust",
    "cosignature_key_id",
    "cosignature_timestamp",
    "cosigned_message",
    "ed25519_verify",
    "fetch_json",
    "jcs",
    "jwk_thumbprint",
    "keys_to_check_against",
    "leaf_hash",
    "listed_keys",
    "load_key",
    "load_policy",
    "load_target",
    "main",
    "note_key_id",
    "parse_checkpoint",
    "parse_ed25519_vkey",
    "parse_note",
    "parse_policy",
    "parse_strict_json",
    "parse_tlog_proof",
    "parse_vkey",
    "parse_witness_vkey",
    "read_cosignatures",
    "render",
    "tile_path",
    "tiles_of",
    "tree_root",
    "trusted_keys",
    "trusted_log_keys",
    "verify_bundle",
    "verify_cosignature_line",
    "verify_inclusion",
    "verify_target",
    "verify_verification",
]

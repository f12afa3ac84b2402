"""Checking the keys' history: the chain of key-status/v1 statements (key_statement_v1.py), as
the keys document publishes it. Pure: no Django, no database; `checklog` (key_history.check)
and the tests call it.

A chain checks out when, statement by statement, in order:
- its bytes are the RFC 8785 form of a key-status/v1 statement, its hash is their SHA-256, its
  position is its place and its `previous_hash` the hash of the one before (GENESIS first);
- every key its `signed_by` names signed it (a signature that does not verify, or a signer
  without a signature, fails); the first signer is the key that takes over: the stated key
  itself when it is activated, else a key the chain holds active and not compromised; the
  outgoing key, when it signs too, is one the chain knows and does not hold compromised;
- a key never changes its public key (kid and x agree with the first statement of it, and the
  kid is the RFC 7638 thumbprint of x), nothing follows its compromise, and a retired key is
  never made active again;
- when `anchor` is given (a key id the verifier trusts: given to it, or the first one it saw),
  the first statement activates that key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from receiptsite.integrity import keys
from receiptsite.integrity.canonical import canonical_bytes
from receiptsite.ledger import key_statement_v1 as v1


@dataclass
class Chain:
    """What a chain states: each key's newest statement (kid -> statement), and the problems
    found (none: the chain checks out)."""

    keys: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    # The key migration 0016 signed the keys it found with (the first statement's), while
    # the history is still in that prefix; None once a statement of the site's follows.
    migration_key: str | None = None
    # An active key that did not sign its successor's activation -> that successor: allowed
    # only when the very next statements mark it compromised (`compromisekey`).
    owed: dict[str, str] = field(default_factory=dict)


def _b64(text: object) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _b64url(text: object) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


def check(history: Iterable[Mapping[str, Any]], anchor: str | None = None) -> Chain:
    """Check the keys document's `history`: each item {"statement": base64 bytes, "hash",
    "signatures": [{"kid", "signature"}]}. Stops at the first statement that fails."""
    chain = Chain()
    previous = v1.GENESIS
    for position, item in enumerate(history):
        problem = _check_one(chain, position, previous, item, anchor)
        if problem is not None:
            chain.problems.append(f"key statement {position}: {problem}")
            break
        previous = str(item["hash"])
    else:
        if chain.owed:
            chain.problems.append(_owed(chain))
    if chain.owed:
        for successor in set(chain.owed.values()):  # activated without its predecessor's word
            chain.keys.pop(successor, None)
    if anchor is not None and not chain.keys:
        chain.problems.append("the keys' history is empty: nothing vouches for any key")
    return chain


def _owed(chain: Chain) -> str:
    outgoing, successor = next(iter(chain.owed.items()))
    return (f"the key {successor} was activated without the signature of the outgoing key "
            f"{outgoing}, and {outgoing} was not marked compromised")


def _check_one(
    chain: Chain, position: int, previous: str, item: Mapping[str, Any], anchor: str | None
) -> str | None:
    data = _b64(item.get("statement"))
    if data is None:
        return "its bytes are not base64"
    try:
        doc = json.loads(data)
    except ValueError:
        return "its bytes are not JSON"
    if not isinstance(doc, dict) or set(doc) != set(v1.MEMBERS) or doc["format"] != v1.FORMAT:
        return f"it is not a {v1.FORMAT} statement"
    if canonical_bytes(doc) != data:
        return "its bytes are not in RFC 8785 form"
    if hashlib.sha256(data).hexdigest() != item.get("hash"):
        return "its hash is not the SHA-256 of its bytes"
    if doc["position"] != position or doc["previous_hash"] != previous:
        return "it does not follow the statement before it"
    kid, status = doc["kid"], doc["status"]
    if chain.owed and not (status == "compromised" and kid in chain.owed):
        return _owed(chain)
    public = _b64url(doc["x"])
    if status not in v1.STATUSES or public is None or len(public) != 32:
        return "its key or status is not valid"
    if keys.jwk_thumbprint(public) != kid:
        return f"the kid {kid} is not the thumbprint of its key"
    if position == 0 and anchor is not None and (kid != anchor or status != "active"):
        return f"the history does not begin with the key trusted ({anchor})"
    before = chain.keys.get(kid)
    if before is not None and before["x"] != doc["x"]:
        return f"it changes the public key of {kid}"
    if before is not None and before["status"] == "compromised":
        return f"it follows the compromise of {kid}: a compromised key stays compromised"
    if before is not None and before["status"] == "retired" and status == "active":
        return f"it makes the retired key {kid} active again: a rotation only goes forward"
    if (status == "compromised") != (doc["compromised_at"] is not None):
        return "compromised_at is there for a compromised key only"
    signers = doc["signed_by"]
    if not isinstance(signers, list) or not signers or len(set(signers)) != len(signers):
        return "it names no signer"
    if doc["made_by"] not in v1.MADE_BY:
        return "it is made by no one the format knows"
    signatures = item.get("signatures")
    given = (
        {s.get("kid"): _b64(s.get("signature")) for s in signatures if isinstance(s, dict)}
        if isinstance(signatures, list)
        else {}
    )
    publics = {k: _b64url(stated["x"]) or b"" for k, stated in chain.keys.items()}
    publics[kid] = public
    if doc["made_by"] == "migration":
        # Migration 0016 stated the keys it found, each as it stood, its own key first: a
        # prefix of the history, signed by that key alone.
        if position == 0:
            chain.migration_key = kid
        if signers != [chain.migration_key] or kid == chain.migration_key and position:
            return "a statement of migration 0016 outside its prefix, or not signed by its key"
    else:
        chain.migration_key = None
    for index, signer in enumerate(signers):
        stated = doc if signer == kid else chain.keys.get(signer)
        if stated is None:
            return f"it is signed by {signer}, a key the history has not stated"
        if stated["status"] == "compromised":
            return f"it is signed by {signer}, a compromised key"
        if index == 0 and stated["status"] != "active" and doc["made_by"] != "migration":
            return f"its first signer {signer} is not an active key"
        signature = given.get(signer)
        if signature is None or not keys.verify_signature(publics[signer], data, signature):
            return f"the signature of {signer} does not verify"
    if doc["made_by"] == "site":
        problem = _takes_over(chain, doc, signers)
        if problem is not None:
            return problem
    chain.keys[kid] = doc
    return None


def _takes_over(chain: Chain, doc: dict[str, Any], signers: list[str]) -> str | None:
    """Who must sign a statement of the site's: an activation, the key itself first and every
    key active until then (or they are compromised next); a retirement or compromise, an active
    key first, and the retired key too, never the compromised one."""
    kid, status = doc["kid"], doc["status"]
    if status == "active":
        if signers[0] != kid:
            return "an activated key does not sign its own activation first"
        for other, stated in chain.keys.items():
            if other != kid and stated["status"] == "active" and other not in signers:
                chain.owed[other] = kid
        return None
    if signers[0] == kid:
        return f"the key {kid} signs its own {status} first, not the key that takes over"
    if status == "retired" and kid not in signers:
        return f"the outgoing key {kid} did not sign its retirement"
    if status == "compromised":
        if kid in signers:
            return f"the compromised key {kid} signs its own compromise"
        chain.owed.pop(kid, None)
    return None


def disagreements(chain: Chain, rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """How the keys listed (each {"kid", "x", "status", "retired_at", "compromised_at"}, the
    times as the statements write them) disagree with their newest statements."""
    problems = []
    listed = set()
    for row in rows:
        kid = row["kid"]
        listed.add(kid)
        stated = chain.keys.get(kid)
        if stated is None:
            problems.append(f"the key {kid} is listed, and no statement of the history vouches "
                            "for it")
            continue
        for name in ("x", "status", "retired_at", "compromised_at"):
            if row.get(name) != stated[name]:
                problems.append(f"the key {kid} is listed with {name} {row.get(name)!r}, its "
                                f"newest statement says {stated[name]!r}")
    problems += [f"the key {kid} is stated and not listed" for kid in chain.keys
                 if kid not in listed]
    return problems

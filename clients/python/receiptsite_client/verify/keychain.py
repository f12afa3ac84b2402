"""The keys' history of a keys document (its `history`: the signed key-status/v1 statements of
every change of a key's status, oldest first), checked statement by statement, and which listed
keys it vouches for. The site's own checker (receiptsite/ledger/key_chain.py) applies the same
rules; docs/verification.md, "The keys' history", states them.

A chain checks out when each statement's bytes are RFC 8785, its hash theirs, its position its
place and its previous_hash the hash of the one before; the kid is the thumbprint of x and a
key's x never changes; every key `signed_by` names signed it, none compromised, the first
being the key activated (or, for a retirement or compromise, a key active until then); a
retired key signs its retirement, a compromised one never its compromise; a key activated while
another was active carries that one's signature, unless the next statement marks it
compromised; nothing follows a compromise, and a retired key is never made active again.
Statements `made_by` "migration" are the prefix a site wrote when it began its history: each
key as it stood, signed by the first one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from receiptsite_client.verify import keys as ed25519
from receiptsite_client.verify.encoding import b64decode, b64url_decode
from receiptsite_client.verify.jcs import jcs

FORMAT = "key-status/v1"
GENESIS = "0" * 64
STATUSES = ("active", "retired", "compromised")
MADE_BY = ("site", "migration")
MEMBERS = {
    "format", "position", "kid", "x", "status", "at", "retired_at", "compromised_at",
    "previous_hash", "made_by", "signed_by",
}


@dataclass
class Chain:
    """Each key's newest statement (kid -> statement), the order keys were first stated in,
    and the problems found (none: the chain checks out)."""

    keys: dict[str, dict[str, Any]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    migration_key: str | None = None
    owed: dict[str, str] = field(default_factory=dict)


def check(history: Iterable[Any]) -> Chain:
    """Check a keys document's `history`; stops at the first statement that fails."""
    chain = Chain()
    previous = GENESIS
    for position, item in enumerate(history):
        problem = (
            _check_one(chain, position, previous, item)
            if isinstance(item, Mapping)
            else "it is not an object"
        )
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
            if successor in chain.order:
                chain.order.remove(successor)
    if not chain.keys:
        chain.problems.append("the keys' history is empty: nothing vouches for any key")
    return chain


def _owed(chain: Chain) -> str:
    outgoing, successor = next(iter(chain.owed.items()))
    return (f"the key {successor} was activated without the signature of the outgoing key "
            f"{outgoing}, and {outgoing} was not marked compromised")


def _decode(text: object, how: Any) -> bytes | None:
    try:
        decoded: bytes = how(text)
    except ValueError:
        return None
    return decoded


def _check_one(chain: Chain, position: int, previous: str, item: Mapping[str, Any]) -> str | None:
    data = _decode(item.get("statement"), b64decode)
    if data is None:
        return "its bytes are not base64"
    try:
        doc = json.loads(data)
    except ValueError:
        return "its bytes are not JSON"
    if not isinstance(doc, dict) or set(doc) != MEMBERS or doc["format"] != FORMAT:
        return f"it is not a {FORMAT} statement"
    if jcs(doc).encode("utf-8") != data:
        return "its bytes are not in RFC 8785 form"
    if hashlib.sha256(data).hexdigest() != item.get("hash"):
        return "its hash is not the SHA-256 of its bytes"
    if doc["position"] != position or doc["previous_hash"] != previous:
        return "it does not follow the statement before it"
    kid, status = doc["kid"], doc["status"]
    if chain.owed and not (status == "compromised" and kid in chain.owed):
        return _owed(chain)
    public = _decode(doc["x"], b64url_decode)
    if status not in STATUSES or public is None or len(public) != 32:
        return "its key or status is not valid"
    if ed25519.jwk_thumbprint(public) != kid:
        return f"the kid {kid} is not the thumbprint of its key"
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
    if doc["made_by"] not in MADE_BY:
        return "it is made by no one the format knows"
    if doc["made_by"] == "migration":
        if position == 0:
            chain.migration_key = kid
        if signers != [chain.migration_key] or (kid == chain.migration_key and position):
            return "a statement of a migration outside its prefix, or not signed by its key"
    else:
        chain.migration_key = None
    signatures = item.get("signatures")
    given = {
        s.get("kid"): _decode(s.get("signature"), b64decode)
        for s in (signatures if isinstance(signatures, list) else [])
        if isinstance(s, dict)
    }
    for index, signer in enumerate(signers):
        stated = doc if signer == kid else chain.keys.get(signer)
        if stated is None:
            return f"it is signed by {signer}, a key the history has not stated"
        if stated["status"] == "compromised":
            return f"it is signed by {signer}, a compromised key"
        if index == 0 and stated["status"] != "active" and doc["made_by"] != "migration":
            return f"its first signer {signer} is not an active key"
        raw = public if signer == kid else _decode(stated["x"], b64url_decode)
        signature = given.get(signer)
        if raw is None or signature is None or not ed25519.ed25519_verify(raw, signature, data):
            return f"the signature of {signer} does not verify"
    if doc["made_by"] == "site":
        problem = _takes_over(chain, doc, signers)
        if problem is not None:
            return problem
    if kid not in chain.keys:
        chain.order.append(kid)
    chain.keys[kid] = doc
    return None


def _takes_over(chain: Chain, doc: dict[str, Any], signers: list[str]) -> str | None:
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


def vouched(chain: Chain, entry: Mapping[str, Any]) -> str | None:
    """Why the chain does not vouch for a listed key `entry` as listed (None: it does)."""
    kid = entry.get("kid")
    stated = chain.keys.get(kid) if isinstance(kid, str) else None
    if stated is None:
        return f"the key {kid} is listed, and no statement of the keys' history vouches for it"
    for name in ("x", "status", "retired_at", "compromised_at"):
        if entry.get(name) != stated[name]:
            return (f"the key {kid} is listed with {name} {entry.get(name)!r}, and its newest "
                    f"statement in the keys' history says {stated[name]!r}")
    return None

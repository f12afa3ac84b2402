"""Who vouches for what: the verification JSON's `assurance` (docs/verification.md).

A receipt makes claims of two sorts. Some are words: what ran, what came back, the outcome,
when it ran (the publisher's, as its agent runtime reported them), when it was recorded, who
published it, what was redacted (the site's, set when it stored the receipt). Others anyone can
check without trusting the site: that the bytes are unchanged since they were signed (their
SHA-256 and Ed25519 signature), that they are in the public log (the inclusion proof and the
signed checkpoint), that the log is witnessed (the witnesses' cosignatures).

Whose word a claim is comes from the receipt/v1 declaration (evidence/declaration.py): a field
the site sets (SITE_FIELDS) is the site's word, a field of the producer's document the
publisher's. Nothing here lists that a second time: a claim names the fields it reads, and the
declaration says who wrote them. A claim whose fields the document does not hold is "not
recorded". Computed from the verification's own parts, with no query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, TypedDict

from receiptsite.evidence.declaration import DOCUMENT, SITE_FIELDS

CHECKABLE: Final = "checkable"  # by the reader: the bytes, the signature, the log, the witnesses
PUBLISHER: Final = "publisher"  # the publisher's word
SITE: Final = "site"  # the site's word
NOT_RECORDED: Final = "not_recorded"
BASES: Final = (CHECKABLE, PUBLISHER, SITE, NOT_RECORDED)


class Assurance(TypedDict):
    claim: str
    basis: str  # one of BASES
    fields: list[str]  # JSON Pointers of the document's members the claim reads
    evidence: list[str]  # for a checkable claim: bytes, signature, log, witnesses
    checks: list[str]  # the verification's checks that vouch for it
    result: str | None  # those checks' result (pass, fail, pending); None for a word claim
    detail: str


@dataclass(frozen=True)
class Claim:
    name: str
    fields: tuple[str, ...] = ()  # top-level members of receipt/v1
    checks: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()


# In the order the page shows them.
CLAIMS: Final = (
    Claim("what_ran", fields=("subject", "framework", "workflow_id", "step_id", "attempt")),
    Claim("what_came_back", fields=("result",)),
    Claim("outcome", fields=("outcome",)),
    Claim("when_it_ran", fields=("started_at", "ended_at", "duration_ms")),
    Claim("when_recorded", fields=("recorded_at",)),
    Claim("who_published", fields=("tenant", "publisher")),
    Claim("redactions", fields=("redactions",)),
    Claim("links", fields=("links",)),
    Claim("bytes_unchanged", checks=("canonical_form", "hash", "signature"),
          evidence=("bytes", "signature")),
    Claim("logged", checks=("log_inclusion",), evidence=("log",)),
    Claim("witnessed", evidence=("witnesses",)),
)


def written_by(field: str) -> str:
    """PUBLISHER or SITE: who writes the top-level member `field`, as the declaration says."""
    if field in SITE_FIELDS:
        return SITE
    DOCUMENT.member(field)  # KeyError for a name the declaration does not know
    return PUBLISHER


def _word_basis(claim: Claim) -> str:
    writers = {written_by(field) for field in claim.fields}
    assert len(writers) == 1, f"{claim.name} mixes the site's and the publisher's fields"
    return writers.pop()


# Checked once, as the module loads: a claim never mixes whose word it is.
_WORD_BASES: Final = {claim.name: _word_basis(claim) for claim in CLAIMS if claim.fields}


def _combined(results: list[str]) -> str | None:
    if not results:
        return None
    return "fail" if "fail" in results else "pending" if "pending" in results else "pass"


_WORD_DETAILS: Final = {
    PUBLISHER: "The publisher's word: its agent runtime reported this to the site, which "
    "stored it as sent. The signature shows it is unchanged since, not that it is true.",
    SITE: "The site's word: the site set this when it stored the receipt.",
}


def _word(claim: Claim, doc: dict[str, Any]) -> Assurance:
    present = [f for f in claim.fields if doc.get(f) not in (None, "", [], {})]
    # The site always writes its own fields (an empty list of redactions says "none").
    basis = _WORD_BASES[claim.name]
    if basis == SITE:
        present = [f for f in claim.fields if f in doc]
    if not present:
        basis = NOT_RECORDED
        detail = "Not recorded: the receipt holds no " + ", ".join(claim.fields) + "."
    else:
        detail = _WORD_DETAILS[basis]
    return {
        "claim": claim.name,
        "basis": basis,
        "fields": ["/" + f for f in claim.fields],
        "evidence": [],
        "checks": [],
        "result": None,
        "detail": detail,
    }


def _checkable(claim: Claim, results: dict[str, str], log: dict[str, Any] | None) -> Assurance:
    found = [results[name] for name in claim.checks if name in results]
    basis, detail = CHECKABLE, ""
    if claim.name == "bytes_unchanged":
        detail = ("Checkable by anyone: the SHA-256 of the bytes, and their Ed25519 signature "
                  "under the key the site publishes (keep that key to check against it later).")
    elif claim.name == "logged":
        detail = ("Checkable by anyone: the inclusion proof leads from the receipt's leaf to "
                  "the root of the log's signed checkpoint.")
        if log is None and not found:
            basis = NOT_RECORDED
    else:  # witnessed
        witnessed = (log or {}).get("witnessed")
        if witnessed:
            names = ", ".join(c["name"] for c in witnessed["cosigners"])
            detail = (f"Checkable by anyone with the witness policy: the cosignatures of {names} "
                      "on a checkpoint that includes the receipt.")
            found = [results.get("log_inclusion", "fail")]
        else:
            basis = NOT_RECORDED
            detail = ("Not recorded: no witness has cosigned a checkpoint that includes this "
                      "receipt, so only the site's own signature vouches for the log.")
    return {
        "claim": claim.name,
        "basis": basis,
        "fields": [],
        "evidence": list(claim.evidence),
        "checks": list(claim.checks) if basis == CHECKABLE else [],
        "result": _combined(found) if basis == CHECKABLE else None,
        "detail": detail,
    }


def assurance(
    doc: dict[str, Any] | None, checks: list[Any], log: dict[str, Any] | None
) -> list[Assurance]:
    """Each claim of the receipt whose document is `doc` (None: unreadable bytes, whose claims
    are then all unrecorded), with the verification's `checks` and `log` part."""
    results = {check["name"]: check["result"] for check in checks}
    return [
        _word(claim, doc or {}) if claim.fields else _checkable(claim, results, log)
        for claim in CLAIMS
    ]

"""What a reviewer reads, in plain words, built from the evidence document alone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet, Subquery
from django.urls import reverse
from django.utils import dateformat
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language, gettext_lazy, ngettext, pgettext, pgettext_lazy
from django.utils.translation import gettext as _
from receiptsite_client.handoff import Words, handoff_block

from receiptsite.evidence.declaration import BOUNDARY, page_rows
from receiptsite.evidence.otel import telemetry_origin
from receiptsite.integrity.encoding import b64url
from receiptsite.ledger.verification import linked_status, read_bytes
from receiptsite.lib import memo
from receiptsite.pages import bundle, check_commands, jsonld
from receiptsite.receipts import rowsecurity
from receiptsite.receipts.models import (
    LogNode,
    Receipt,
    ReviewDecision,
    SigningKey,
    Withdrawal,
    format_timestamp,
)
from receiptsite.withdrawal.withdrawals import is_erased

SUBJECT_WORDS = {
    "tool": pgettext_lazy("subject", "the tool"),
    "task": pgettext_lazy("subject", "the task"),
    "chain": pgettext_lazy("subject", "the chain"),
    "agent_run": pgettext_lazy("subject", "the agent run"),
    "model": pgettext_lazy("subject", "the model"),
    "external": pgettext_lazy("subject", "the external step"),
}

OUTCOME_WORDS = {
    # (label, icon, tone): the icon and the words carry the meaning, never the colour alone.
    "succeeded": (gettext_lazy("Succeeded"), "✓", "good"),
    "failed": (gettext_lazy("Failed"), "✗", "bad"),
    "timed_out": (gettext_lazy("Timed out"), "⧖", "bad"),
    "uncertain": (gettext_lazy("Uncertain"), "?", "unsure"),
    None: (gettext_lazy("Started (no result recorded)"), "▶", "neutral"),
}

# The headline, one whole sentence per phase and outcome, so that each reads well (and
# translates whole): "{agent} recorded that {subject} {name} …".
PHASE_SENTENCES: dict[tuple[Any, Any], Any] = {
    ("start", None): gettext_lazy("{agent} recorded that {subject} {name} was started."),
    ("end", "succeeded"): gettext_lazy(
        "{agent} recorded that {subject} {name} finished: succeeded."),
    ("end", "failed"): gettext_lazy("{agent} recorded that {subject} {name} failed."),
    ("end", "timed_out"): gettext_lazy("{agent} recorded that {subject} {name} timed out."),
    ("end", "uncertain"): gettext_lazy(
        "{agent} recorded that {subject} {name} finished, but not whether it succeeded."),
    ("completion", "succeeded"): gettext_lazy(
        "{agent} recorded that {subject} {name} was completed."),
    ("completion", "failed"): gettext_lazy(
        "{agent} recorded that {subject} {name} was not completed: it failed."),
    ("completion", "timed_out"): gettext_lazy(
        "{agent} recorded that {subject} {name} ran out of time before it was completed."),
    ("completion", "uncertain"): gettext_lazy(
        "{agent} recorded that {subject} {name} ended, but not whether it was completed."),
    ("confirmation", "succeeded"): gettext_lazy(
        "{agent} recorded a confirmation that {subject} {name} succeeded."),
    ("confirmation", "failed"): gettext_lazy(
        "{agent} recorded a confirmation that {subject} {name} failed."),
    ("confirmation", "timed_out"): gettext_lazy(
        "{agent} recorded that the confirmation for {subject} {name} did not come in time."),
    ("confirmation", "uncertain"): gettext_lazy(
        "{agent} recorded a confirmation for {subject} {name} that leaves its result "
        "uncertain."),
    ("handoff", "succeeded"): gettext_lazy(
        "{agent} recorded that {subject} {name} was handed over."),
    ("handoff", "failed"): gettext_lazy(
        "{agent} recorded that the hand-off of {subject} {name} failed."),
    ("handoff", "timed_out"): gettext_lazy(
        "{agent} recorded that the hand-off of {subject} {name} timed out."),
    ("handoff", "uncertain"): gettext_lazy(
        "{agent} recorded a hand-off of {subject} {name}, but not whether it was received."),
}
# The record types, as the page names them (English: the contract's own words).
PHASE_WORDS = {
    "start": pgettext_lazy("record type", "start"),
    "end": pgettext_lazy("record type", "end"),
    "completion": pgettext_lazy("record type", "completion"),
    "confirmation": pgettext_lazy("record type", "confirmation"),
    "handoff": pgettext_lazy("record type", "handoff"),
}
# A document changed behind the site's back may pair anything: the nearest sentence.
FALLBACK_SENTENCE = gettext_lazy("{agent} recorded {subject} {name}.")

# The site's own boundary statements, so that a page in another language can show a
# translation beside the stored English text (labelled as a translation).
BOUNDARY_TRANSLATIONS = {
    BOUNDARY["start"]: gettext_lazy(
        "A start record shows that the step was invoked. It cannot show its result."
    ),
    BOUNDARY["end"]: gettext_lazy(
        "This records what the agent runtime reported to this site. It does not show that "
        "any effect outside that report happened (an email received, a payment settled, a "
        "write accepted)."
    ),
    BOUNDARY["confirmation"]: gettext_lazy(
        "This records the confirmation the runtime observed from the provider; it does not "
        "show anything the provider did not confirm."
    ),
    BOUNDARY["handoff"]: gettext_lazy(
        "This records what was handed over and when. It does not show that the recipient "
        "reviewed or accepted it."
    ),
}


# The checks' plain names and sentences: what a reviewer reads. The verification's own
# names (canonical_form, hash, …) and English details are kept beside them, as data.
CHECK_NAMES = {
    "canonical_form": gettext_lazy("Format"),
    "hash": gettext_lazy("Fingerprint"),
    "record_matches": gettext_lazy("Listed details"),
    "signature": gettext_lazy("Signature"),
    "log_inclusion": gettext_lazy("Public log"),
}

CHECK_SENTENCES = {
    ("canonical_form", "pass"): gettext_lazy(
        "The record is well-formed data, exactly as it was stored."),
    ("canonical_form", "fail"): gettext_lazy(
        "The record is no longer in the exact form it was stored in: it was altered."),
    ("hash", "pass"): gettext_lazy(
        "The record's fingerprint (its SHA-256) is the one taken when it was stored: not a "
        "byte of it has changed."),
    ("hash", "fail"): gettext_lazy(
        "The record's fingerprint (its SHA-256) is not the one taken when it was stored: its "
        "bytes were changed."),
    ("record_matches", "pass"): gettext_lazy(
        "The details the site keeps beside the record, for its lists and searches, agree with "
        "it."),
    ("record_matches", "fail"): gettext_lazy(
        "The details the site keeps beside the record, for its lists and searches, were "
        "changed: they no longer agree with it."),
    ("signature", "pass"): gettext_lazy(
        "The site's signature matches the record, under a key the site publishes."),
    ("signature", "fail"): gettext_lazy(
        "The signature does not match the record as it is stored: the record, or the "
        "signature stored with it, was changed after it was signed."),
    ("log_inclusion", "pass"): gettext_lazy(
        "The record is in the site's public log, which anyone can check only ever grows."),
    ("log_inclusion", "fail"): gettext_lazy(
        "The record as it is stored is not the one in the site's public log."),
    ("log_inclusion", "pending"): gettext_lazy(
        "The record is not in the public log yet: check again in a few seconds."),
}
# The signature fails and the fingerprint too: the bytes changed (never the key's fault).
BYTES_CHANGED_SIGNATURE = gettext_lazy(
    "The signature does not match the record as it is stored, because the record's bytes "
    "were changed after they were signed.")


def failed_names(checks: list[dict[str, Any]]) -> list[str]:
    """The failed checks' plain names, as the hand-off's warning lists them."""
    return [str(c["label"]).lower() for c in checks if c["result"] == "fail"]


def page_checks(verification: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks in the reader's language; the JSON's own English detail comes along."""
    results = {check["name"]: check["result"] for check in verification["checks"]}
    checks = []
    for check in verification["checks"]:
        sentence = CHECK_SENTENCES.get((check["name"], check["result"]), check["detail"])
        if check["name"] == "signature" and check["result"] == "fail" and (
            results.get("hash") == "fail"
        ):
            sentence = BYTES_CHANGED_SIGNATURE
        checks.append({
            **check,
            "label": CHECK_NAMES.get(check["name"], check["name"]),
            "sentence": sentence,
        })
    return checks


# --- times: one form on every page, UTC, with the reader's own time beside it (receipt.js) -----


def _as_datetime(value: datetime | str) -> datetime:
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when.astimezone(UTC)


def when_text(value: datetime | str) -> str:
    """A time as every page writes it, in the page's language: "1 December 2026, 14:31:07
    UTC", "2026年12月1日 14:31:07 UTC"."""
    form = pgettext("date and time on a page, UTC", "j F Y, H:i:s")
    return f"{dateformat.format(_as_datetime(value), form)} UTC"


def when_html(value: datetime | str, *, local: bool = True) -> SafeString:
    """when_text in a <time> element; `local`: receipt.js adds the reader's own time."""
    when = _as_datetime(value)
    return format_html(
        '<time datetime="{}"{}>{}</time>',
        format_timestamp(when),
        mark_safe(" data-local-time") if local else "",
        when_text(when),
    )


def compromised_since(receipt: Receipt, checks: list[dict[str, Any]]) -> str | None:
    """When the signature check fails because the key that signed the receipt is compromised
    (and the receipt was not provably logged before): from when on, for the page to say why
    in plain words, and that check's sentence in the reader's language. No query: the key
    comes with the receipt."""
    key = receipt.signing_key
    failed = any(c["name"] == "signature" and c["result"] == "fail" for c in checks)
    if not failed or key.status != SigningKey.COMPROMISED:
        return None
    since = (
        when_text(key.compromised_at) if key.compromised_at else _("an unrecorded time")
    )
    for check in checks:
        if check["name"] == "signature":
            check["sentence"] = _(
                "The key that made this signature was reported compromised (it may have "
                "leaked) as of %(time)s, and the site cannot show that this receipt was logged "
                "before then, so the signature could be forged."
            ) % {"time": since}
    return since


def readable_document(receipt: Receipt) -> dict[str, Any]:
    """The evidence document, or nothing when the stored bytes are no JSON object any more
    (changed behind the site's back): the page then shows its warning with what it has,
    never an error page. Shared by every reader of the same bytes: read it, never change it."""
    return read_bytes(receipt.raw_bytes()).document or {}


# --- the hand-off block (receiptsite_client/handoff.py: one template) ------------------------


def handoff_words() -> Words:
    """The hand-off block's words in the current language (English: the template's own)."""
    return Words(
        work_item=pgettext("hand-off", "Work item:"),
        workflow=pgettext("hand-off", "Workflow / attempt:"),
        status=pgettext("hand-off", "Observed status:"),
        receipt=pgettext("hand-off", "Receipt:"),
        recorded_at=pgettext("hand-off", "Recorded at:"),
        shows=pgettext("hand-off", "What it shows:"),
        does_not_show=pgettext("hand-off", "What it does not show:"),
        follow_up=pgettext("hand-off", "Follow-up:"),
        started=pgettext("hand-off", "started"),
        nothing_stated=pgettext("hand-off", "nothing stated by the producer"),
        warning=pgettext(
            "hand-off", "WARNING: this receipt does not verify ({checks}); do not rely on it."
        ),
        separator=pgettext("between the items of a list", ", "),
        outcomes={
            "succeeded": pgettext("hand-off", "succeeded"),
            "failed": pgettext("hand-off", "failed"),
            "timed_out": pgettext("hand-off", "timed_out"),
            "uncertain": pgettext("hand-off", "uncertain"),
        },
    )


def follow_up_line(receipt: Receipt, *, show_follow_up: bool) -> str:
    """The hand-off's follow-up: the latest decision's note, for auditors only. Decisions are
    internal: everyone else learns only whether a follow-up exists."""
    latest = ReviewDecision.objects.latest_follow_up(receipt.pk)
    if latest is None:
        return pgettext("hand-off", "none recorded")
    return latest if show_follow_up else pgettext(
        "hand-off", "recorded by the auditors (not shown publicly)"
    )


def receipt_handoff(
    receipt: Receipt, verification: dict[str, Any] | None, *, show_follow_up: bool
) -> str:
    """The hand-off block of `receipt` as handoff.txt serves it: with its warning first when
    `verification` does not say valid or pending."""
    checks = page_checks(verification) if verification else []
    return handoff_block(
        readable_document(receipt),
        receipt.url,
        follow_up_line(receipt, show_follow_up=show_follow_up),
        failed=failed_names(checks),
        words=handoff_words(),
    )


# --- the receipts this one links to, each with its own verdict --------------------------------


def linked_rows(receipt: Receipt, ids: list[str]) -> QuerySet[Receipt]:
    """The receipts of `receipt`'s tenant with these ids, as _linked reads them."""
    leaf = LogNode.objects.filter(key=OuterRef("log_entry__index")).values("hash")[:1]
    return (
        Receipt.objects.for_verification()
        .named(receipt.tenant_id, ids=ids)
        .annotate(leaf=Subquery(leaf), was_withdrawn=Exists(
            Withdrawal.objects.filter(receipt_id=OuterRef("pk"))
        ))
    )  # fmt: skip


def _linked(
    receipt: Receipt, links: dict[str, Any], tree_size: int | None
) -> tuple[Any, list[dict[str, Any]]]:
    """The parent and children named by `links`, each with what its own record says and its
    own verdict (verification.linked_status), in one query: the receipts with their tenant,
    key and log entry, their leaf hash and whether they were withdrawn (links are to the same
    tenant by construction)."""
    parent_id = links.get("parent_receipt_id")
    child_ids = links.get("child_receipt_ids", [])
    ids = [*([parent_id] if parent_id else []), *child_ids]
    if not isinstance(parent_id, str | None) or not all(isinstance(i, str) for i in ids):
        return None, []  # a document changed behind the site's back: nothing to look up
    rowsecurity.reveal(ids)  # on a public page, the linked receipts are read by id too
    found = {str(row.public_id): row for row in (linked_rows(receipt, ids) if ids else [])}

    def describe(receipt_id: str) -> dict[str, Any]:
        row = found.get(receipt_id)
        if row is None:
            return {"id": receipt_id, "verdict": "missing"}
        if is_erased(row) and getattr(row, "was_withdrawn", False):
            return {"id": receipt_id, "verdict": "withdrawn"}
        leaf_hash = getattr(row, "leaf", None)
        verdict = linked_status(row, bytes(leaf_hash) if leaf_hash is not None else None,
                                tree_size)
        doc = read_bytes(row.raw_bytes()).document or {}
        named = doc.get("subject")
        subject: dict[str, Any] = named if isinstance(named, dict) else {}
        outcome = doc.get("outcome")
        phase = doc.get("phase", "")
        words = OUTCOME_WORDS.get(outcome, OUTCOME_WORDS["uncertain"])[0] if phase else ""
        return {"id": receipt_id, "verdict": verdict, "subject": subject.get("name", ""),
                "phase": PHASE_WORDS.get(phase, phase), "outcome": words}

    return (describe(parent_id) if parent_id else None), [describe(i) for i in child_ids]


# --- who vouches for what (ledger/assurance.py), in words --------------------------------------

# Each claim as it stands in a list ("what ran, what came back and the outcome").
CLAIM_NAMES = {
    "what_ran": gettext_lazy("what ran"),
    "what_came_back": gettext_lazy("what came back"),
    "outcome": gettext_lazy("the outcome"),
    "when_it_ran": gettext_lazy("when it ran"),
    "when_recorded": gettext_lazy("when it was recorded"),
    "who_published": gettext_lazy("who published it"),
    "redactions": gettext_lazy("what the site removed"),
    "links": gettext_lazy("which receipts it links to"),
    "bytes_unchanged": gettext_lazy("that the record is unchanged"),
    "logged": gettext_lazy("that it is in the public log"),
    "witnessed": gettext_lazy("that independent witnesses saw the log"),
}
BASIS_NAMES = {
    "checkable": gettext_lazy("Checkable by you"),
    "publisher": gettext_lazy("The publisher's word"),
    "site": gettext_lazy("This site's word"),
    "not_recorded": gettext_lazy("Not recorded"),
}
# The site's own check of a checkable claim, just now, beside it.
RESULT_WORDS = {
    "pass": gettext_lazy("checks out"),
    "fail": gettext_lazy("does not check out"),
    "pending": gettext_lazy("not complete yet"),
}
NOT_RECORDED_WHY = {
    "logged": gettext_lazy("it has no place in the public log"),
    "witnessed": gettext_lazy("no independent witness has confirmed the log yet"),
}


def _basis_sentence(basis: str, publisher: str) -> str:
    if basis == "checkable":
        return _("Anyone can check these without trusting this site, with the commands under "
                 "“Check it yourself”. In brackets: the site's own check, just now.")
    if basis == "publisher":
        return _("%(publisher)s reported these. The signature shows they are unchanged since; "
                 "nothing shows they are true.") % {"publisher": publisher or _("The publisher")}
    if basis == "site":
        return _("This site set these when it stored the record.")
    return _("The record does not show these.")


def assurance_groups(
    verification: dict[str, Any] | None, publisher: str
) -> list[dict[str, Any]]:
    """The verification's `assurance` in words: one group per basis (checkable by the reader,
    the publisher's word, the site's word, not recorded), each with its claims in order."""
    items = (verification or {}).get("assurance", [])
    groups = []
    for basis in ("checkable", "publisher", "site", "not_recorded"):
        claims = []
        for item in items:
            if item["basis"] != basis:
                continue
            why = (RESULT_WORDS.get(item["result"] or "") if basis == "checkable"
                   else NOT_RECORDED_WHY.get(item["claim"]) if basis == "not_recorded" else None)
            note = pgettext("a note in brackets", "(%(note)s)") % {"note": why} if why else None
            claims.append({"claim": item["claim"], "result": item["result"] or "",
                           "label": CLAIM_NAMES.get(item["claim"], item["claim"]),
                           "note": note})
        if claims:
            groups.append({"basis": basis, "label": BASIS_NAMES[basis], "claims": claims,
                           "sentence": _basis_sentence(basis, publisher)})
    return groups


def _in_words(items: list[SafeString]) -> SafeString:
    """Items as a list in words, in the reader's language: "A", "A and B", "A, B and C"."""
    if len(items) < 2:
        return mark_safe("".join(items))  # each item is escaped already
    separator = conditional_escape(pgettext("between the items of a list", ", "))
    return format_html(
        _("{items} and {last}"), items=mark_safe(separator.join(items[:-1])), last=items[-1]
    )


def _utc_time(text: str) -> SafeString:
    """A cosignature's time (whole seconds, UTC) in a sentence, in the page's date form."""
    when = _as_datetime(text)
    return format_html(
        '<time datetime="{}">{}</time>', when.strftime("%Y-%m-%dT%H:%M:%SZ"), when_text(when)
    )


def witness_summary(verification: dict[str, Any] | None) -> dict[str, Any]:
    """Who witnessed the log and when, or that nobody has yet, in plain words (SPEC,
    "Witnesses"): from the verification JSON's `log.witnessed` and the policy the site works
    to, with no query. This is what the site holds, not a check: the browser's verifier checks
    the cosignatures themselves. `state`: alone (no policy), pending (nothing witnessed that
    includes the receipt yet) or witnessed; `paragraphs`: what the page says."""
    rules = settings.WITNESS_POLICY
    log = (verification or {}).get("log") or {}
    witnessed = log.get("witnessed")
    if witnessed:
        cosigners = witnessed["cosigners"]
        count = len(cosigners)
        who = _in_words([
            format_html(_("{name} at {time}"), name=c["name"], time=_utc_time(c["time"]))
            for c in cosigners
        ])
        size = witnessed["tree_size"]
        record = ngettext(
            "the log's record of %(size)s receipt", "the log's record of %(size)s receipts", size
        ) % {"size": size}
        paragraphs = [
            format_html(
                ngettext(
                    "An independent witness confirmed this log: {who}. It saw {record}, which "
                    "includes this receipt, and checked that this record extends every earlier "
                    "record of the log it had seen.",
                    "{count} independent witnesses each confirmed this log: {who}. Each saw "
                    "{record}, which includes this receipt, and checked that this record "
                    "extends every earlier record of the log it had seen.",
                    count,
                ),
                count=count, who=who, record=record,
            ),
            _(
                "This does not show that what the receipt says happened. It shows that the "
                "site could not show anyone a different version of its log, one without this "
                "receipt or with it changed, without being caught."
            ),
        ]
        checks = {c["name"]: c["result"] for c in (verification or {}).get("checks", [])}
        if checks.get("log_inclusion") != "pass":
            paragraphs.append(_(
                "But the receipt as stored now does not match what was logged in its place "
                "(see the checks above), so the witnesses' confirmation does not vouch for it."
            ))
        return {"state": "witnessed", "paragraphs": paragraphs, "cosigned": True}
    if rules is None:
        return {
            "state": "alone",
            "paragraphs": [
                _(
                    "The log's checkpoints, its signed records of every receipt logged so far, "
                    "are signed by this site alone: nobody else has vouched that everyone who "
                    "checks this receipt sees the same log."
                ),
                _(
                    "The site could show different people different versions of its log, and "
                    "nobody independent would be there to notice."
                ),
            ],
            "cosigned": False,
        }
    names = [conditional_escape(w.key.name) for w in rules.witnesses.values()]
    count, seconds = len(names), settings.WITNESS_INTERVAL
    return {
        "state": "pending",
        "paragraphs": [
            format_html(
                ngettext(
                    "This site asks an independent witness ({names}) to confirm its log, so "
                    "that it cannot show different people different versions of it.",
                    "This site asks {count} independent witnesses ({names}) to confirm its "
                    "log, so that it cannot show different people different versions of it.",
                    count,
                ),
                count=count, names=_in_words(names),
            ),
            ngettext(
                "The witness has not yet confirmed a record of the log that includes this "
                "receipt.",
                "The witnesses have not yet confirmed a record of the log that includes this "
                "receipt.",
                count,
            ),
            ngettext(
                "That usually happens within %(seconds)s second of a receipt being recorded; "
                "until then, only the site's own signature vouches for the log.",
                "That usually happens within %(seconds)s seconds of a receipt being recorded; "
                "until then, only the site's own signature vouches for the log.",
                seconds,
            ) % {"seconds": seconds},
        ],
        "cosigned": False,
    }


def _timing(row: dict[str, Any]) -> dict[str, Any]:
    """A producer's time (RFC 3339, any offset, stored as sent) in the page's one form, UTC;
    the stored text stays in the document, for whoever reads it as data."""
    if isinstance(row["value"], str):
        try:
            return {**row, "value": when_text(row["value"]), "code": False}
        except ValueError:
            pass
    return row


@memo.of_bytes(maxsize=512)
def _reading(data: bytes, language: str | None) -> dict[str, Any]:
    """What the page shows of the document itself, in `language`: derived from the bytes
    alone, so worked out once per distinct bytes and language (shared: never change it)."""
    doc = read_bytes(data).document or {}
    subject = doc.get("subject", {})
    outcome = doc.get("outcome")
    label, icon, tone = OUTCOME_WORDS.get(outcome, OUTCOME_WORDS["uncertain"])
    framework = doc.get("framework", {})
    agent = (
        _("The agent runtime ({name})").format(name=framework["name"])
        if framework.get("name")
        else _("The agent runtime")
    )
    phase_sentence = PHASE_SENTENCES.get((doc.get("phase"), outcome), FALLBACK_SENTENCE)
    sentence = str(phase_sentence).format(
        agent=agent,
        subject=SUBJECT_WORDS.get(subject.get("type", ""), _("the step")),
        name=f"“{subject.get('name', '')}”",
    )
    translating = language not in (None, "en")
    not_observed = [
        (line, BOUNDARY_TRANSLATIONS.get(line) if translating else None)
        for line in doc.get("not_observed", [])
    ]
    return {
        "doc": doc,
        "sentence": sentence,
        "outcome_label": label,
        "outcome_icon": icon,
        "outcome_tone": tone,
        "subject": subject,
        "phase_label": PHASE_WORDS.get(doc.get("phase", ""), doc.get("phase", "")),
        "attempt": doc.get("attempt", {"number": 1}),
        "framework": framework,
        "not_observed": not_observed,
        "redactions": doc.get("redactions", []),
        # A receipt made from an OpenTelemetry span says so (templates/_telemetry.html).
        "telemetry": telemetry_origin(doc),
        "metadata": sorted(doc.get("metadata", {}).items()),
        # The labelled fields of each section, as the declaration labels them.
        "texts": page_rows(doc, "text"),
        "workflow_rows": page_rows(doc, "workflow"),
        "timing_rows": [_timing(row) for row in page_rows(doc, "timing")],
        "technical_rows": page_rows(doc, "technical"),
    }


def page_context(
    receipt: Receipt,
    verification: dict[str, Any] | None,
    *,
    show_follow_up: bool = False,
    key: SigningKey | None = None,
) -> dict[str, Any]:
    """Everything the receipt page shows. `key`: the key of the signature the verification
    shows (verification_and_key), whose `x` the "check it yourself" commands name; the
    receipt's own key when not given."""
    data = receipt.raw_bytes()
    language = get_language()
    reading = _reading(data, language)
    doc = reading["doc"]
    log = (verification or {}).get("log") or {}
    links = doc.get("links") if isinstance(doc.get("links"), dict) else {}
    parent, children = _linked(receipt, links, log.get("tree_size"))
    checks = page_checks(verification) if verification else []
    compromised = compromised_since(receipt, checks)
    status = verification["status"] if verification else None
    compromise_only = compromised is not None and [
        c["name"] for c in checks if c["result"] == "fail"
    ] == ["signature"]
    shown_key = key or receipt.signing_key
    tenant = doc.get("tenant") if isinstance(doc.get("tenant"), dict) else {}
    keys_url = settings.SITE_URL + reverse("receipt-keys")
    x = b64url(bytes(shown_key.public_key))
    groups = assurance_groups(verification, str(tenant.get("name", "")))
    return {
        **reading,
        "receipt": receipt,
        # The fragments of the page drawn from the document, the language, these columns and
        # the verdict (an unverified record's parts say so) alone are rendered once per
        # distinct key (templatetags/receipt_fragments.py).
        "fragment_key": (
            data, language, receipt.public_id, receipt.recorded_at, receipt.output_hash,
            status, compromise_only,
        ),
        "links_parent": parent,
        "links_children": children,
        "verification": verification,
        "status": status,
        # Not verified: every part of the record is shown as what it now says, never as fact.
        "unverified": status == "invalid",
        "checks": checks,
        "checks_key": (
            language, status,
            tuple((c["name"], c["result"], "" if c["result"] == "pass" else c["detail"])
                  for c in checks),
        ),
        "failed_checks": [c for c in checks if c["result"] == "fail"],
        # Who vouches for each claim (ledger/assurance.py), in words; and, as the fragment's
        # key, every word and result the list shows (most receipts share one).
        "assurance": groups,
        "assurance_key": (
            language,
            tuple((g["basis"], str(g["label"]), str(g["sentence"]),
                   tuple((c["claim"], c["result"], str(c["label"]), str(c["note"] or ""))
                         for c in g["claims"]))
                  for g in groups),
        ),
        # Who witnessed the log and when, or that nobody has yet (templates/_witnessed.html).
        "witness": witness_summary(verification),
        # The signature fails only because its key was compromised: the page says so.
        "compromised_since": compromised,
        "compromise_only": compromise_only,
        "handoff": handoff_block(
            doc,
            receipt.url,
            follow_up_line(receipt, show_follow_up=show_follow_up),
            failed=failed_names(checks),
            words=handoff_words(),
        ),
        "site_url": settings.SITE_URL,
        # The "check it yourself" commands (pages/check_commands.py): the hash on Linux,
        # macOS and Windows, the signature with OpenSSL, receipt-verify with the key named,
        # the offline bundle's; and the page's JSON-LD facts (pages/jsonld.py).
        "verify_commands": check_commands.hash_commands(receipt.verify_url),
        "signature_command": check_commands.signature_command(
            receipt.verify_url, keys_url, shown_key.kid
        ),
        "signature_prints": check_commands.SIGNATURE_PRINTS,
        "install_command": check_commands.INSTALL_COMMAND,
        "receipt_verify_command": check_commands.receipt_verify_command(receipt.url, x),
        "receipt_verify_prints": check_commands.RECEIPT_VERIFY_PRINTS,
        "key_x": x,
        "key_id": shown_key.kid,
        "bundle_file": bundle.filename(receipt),
        "bundle_command": check_commands.bundle_command(bundle.filename(receipt), x),
        "json_ld": jsonld.script_text(jsonld.receipt_facts(receipt, doc)),
    }

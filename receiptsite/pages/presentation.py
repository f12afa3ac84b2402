"""What a reviewer reads, in plain words, built from the evidence document alone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils import dateformat
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language, gettext_lazy, ngettext, pgettext, pgettext_lazy
from django.utils.translation import gettext as _
from receiptsite_client.handoff import handoff_block

from receiptsite.evidence.declaration import BOUNDARY, page_rows
from receiptsite.ledger.verification import read_bytes
from receiptsite.lib import memo
from receiptsite.pages import bundle, jsonld
from receiptsite.pages.check_commands import bundle_command, hash_commands
from receiptsite.receipts import rowsecurity
from receiptsite.receipts.models import Receipt, ReviewDecision, SigningKey

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

PHASE_SENTENCES = {
    "start": gettext_lazy("{agent} recorded that {subject} {name} was started."),
    "end": gettext_lazy("{agent} recorded that {subject} {name} finished: {outcome}."),
    "completion": gettext_lazy(
        "{agent} recorded that {subject} {name} was completed: {outcome}."
    ),
    "confirmation": gettext_lazy(
        "{agent} recorded a confirmation for {subject} {name}: {outcome}."
    ),
    "handoff": gettext_lazy("{agent} recorded a hand-off of {subject} {name}: {outcome}."),
}

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


CHECK_NAMES = {
    "canonical_form": gettext_lazy("Canonical form"),
    "hash": gettext_lazy("Hash"),
    "record_matches": gettext_lazy("Stored record"),
    "signature": gettext_lazy("Signature"),
    "log_inclusion": gettext_lazy("Public log"),
}

CHECK_SENTENCES = {
    ("canonical_form", "pass"): gettext_lazy(
        "The stored bytes are well-formed canonical JSON (RFC 8785)."),
    ("canonical_form", "fail"): gettext_lazy(
        "The stored bytes are not in the canonical form they were stored in."),
    ("hash", "pass"): gettext_lazy("The SHA-256 of the stored bytes equals the stored hash."),
    ("hash", "fail"): gettext_lazy("The SHA-256 of the stored bytes differs from the stored hash."),
    ("record_matches", "pass"): gettext_lazy("The database record agrees with the document."),
    ("record_matches", "fail"): gettext_lazy(
        "The database record disagrees with the document."),
    ("signature", "pass"): gettext_lazy(
        "The site's Ed25519 signature over the bytes verifies under a published key."),
    ("signature", "fail"): gettext_lazy(
        "The signature does not verify under a trustworthy published key."),
    ("log_inclusion", "pass"): gettext_lazy(
        "The receipt is in the site's public append-only log, under its latest signed "
        "checkpoint."),
    ("log_inclusion", "fail"): gettext_lazy(
        "The receipt cannot be shown to be in the site's public log as stored."),
    ("log_inclusion", "pending"): gettext_lazy("The receipt is not in the public log yet."),
}


def page_checks(verification: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks in the reader's language; the JSON's own English detail comes along."""
    return [
        {
            **check,
            "label": CHECK_NAMES.get(check["name"], check["name"]),
            "sentence": CHECK_SENTENCES.get((check["name"], check["result"]), check["detail"]),
        }
        for check in verification["checks"]
    ]


def compromised_since(receipt: Receipt, checks: list[dict[str, Any]]) -> str | None:
    """When the signature check fails because the key that signed the receipt is compromised
    (and the receipt was not provably logged before): from when on, for the page to say why
    in plain words, and that check's sentence in the reader's language. No query: the key
    comes with the receipt."""
    key = receipt.signing_key
    failed = any(c["name"] == "signature" and c["result"] == "fail" for c in checks)
    if not failed or key.status != SigningKey.COMPROMISED:
        return None
    since = key.compromised_as_of(_("an unrecorded time"))
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


def follow_up_line(receipt: Receipt, *, show_follow_up: bool) -> str:
    """The hand-off's follow-up: the latest decision's note, for auditors only. Decisions are
    internal: everyone else learns only whether a follow-up exists."""
    latest = ReviewDecision.objects.latest_follow_up(receipt.pk)
    if latest is None:
        return "none recorded"
    return latest if show_follow_up else "recorded by the auditors (not shown publicly)"


def receipt_handoff(receipt: Receipt, *, show_follow_up: bool) -> str:
    return handoff_block(
        readable_document(receipt),
        receipt.url,
        follow_up_line(receipt, show_follow_up=show_follow_up),
    )


def _linked(receipt: Receipt, links: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """The parent and children named by `links`, each with what ran and how it ended, in one
    query (links are to the same tenant by construction)."""
    parent_id = links.get("parent_receipt_id")
    child_ids = links.get("child_receipt_ids", [])
    ids = [*([parent_id] if parent_id else []), *child_ids]
    rowsecurity.reveal(ids)  # on a public page, the linked receipts are read by id too
    rows = (
        Receipt.objects.filter(tenant_id=receipt.tenant_id, public_id__in=ids).values_list(
            "public_id", "subject_name", "phase", "outcome"
        )
        if ids
        else []
    )
    named = {str(public_id): (name, phase, outcome) for public_id, name, phase, outcome in rows}

    def describe(receipt_id: str) -> dict[str, Any]:
        name, phase, outcome = named.get(receipt_id, ("", "", None))
        words = OUTCOME_WORDS.get(outcome, OUTCOME_WORDS["uncertain"])[0] if phase else ""
        return {"id": receipt_id, "subject": name, "phase": phase, "outcome": words}

    return (describe(parent_id) if parent_id else None), [describe(i) for i in child_ids]


def _in_words(items: list[SafeString]) -> SafeString:
    """Items as a list in words, in the reader's language: "A", "A and B", "A, B and C"."""
    if len(items) < 2:
        return mark_safe("".join(items))  # each item is escaped already
    separator = conditional_escape(pgettext("between the items of a list", ", "))
    return format_html(
        _("{items} and {last}"), items=mark_safe(separator.join(items[:-1])), last=items[-1]
    )


def _utc_time(text: str) -> SafeString:
    """A time of the verification JSON (RFC 3339, UTC) in the page's date form."""
    when = datetime.fromisoformat(text).astimezone(UTC)
    return format_html(
        '<time datetime="{}">{} UTC</time>',
        when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        dateformat.format(when, "j F Y, H:i:s"),
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
    sentence = str(PHASE_SENTENCES.get(doc.get("phase", ""), PHASE_SENTENCES["end"])).format(
        agent=agent,
        subject=SUBJECT_WORDS.get(subject.get("type", ""), _("the step")),
        name=f"“{subject.get('name', '')}”",
        outcome=str(label).lower(),
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
        "attempt": doc.get("attempt", {"number": 1}),
        "framework": framework,
        "not_observed": not_observed,
        "redactions": doc.get("redactions", []),
        "metadata": sorted(doc.get("metadata", {}).items()),
        # The labelled fields of each section, as the declaration labels them.
        "texts": page_rows(doc, "text"),
        "workflow_rows": page_rows(doc, "workflow"),
        "timing_rows": page_rows(doc, "timing"),
        "technical_rows": page_rows(doc, "technical"),
    }


def page_context(
    receipt: Receipt, verification: dict[str, Any] | None, *, show_follow_up: bool = False
) -> dict[str, Any]:
    data = receipt.raw_bytes()
    language = get_language()
    reading = _reading(data, language)
    doc = reading["doc"]
    parent, children = _linked(receipt, doc.get("links", {}))
    checks = page_checks(verification) if verification else []
    compromised = compromised_since(receipt, checks)
    status = verification["status"] if verification else None
    return {
        **reading,
        "receipt": receipt,
        # The fragments of the page drawn from the document, the language and these columns
        # alone are rendered once per distinct key (templatetags/receipt_fragments.py).
        "fragment_key": (
            data, language, receipt.public_id, receipt.recorded_at, receipt.output_hash
        ),
        "links_parent": parent,
        "links_children": children,
        "verification": verification,
        "status": status,
        "checks": checks,
        "checks_key": (
            language, status,
            tuple((c["name"], c["result"], "" if c["result"] == "pass" else c["detail"])
                  for c in checks),
        ),
        "failed_checks": [c for c in checks if c["result"] == "fail"],
        # Who witnessed the log and when, or that nobody has yet (templates/_witnessed.html).
        "witness": witness_summary(verification),
        # The signature fails only because its key was compromised: the page says so.
        "compromised_since": compromised,
        "compromise_only": compromised is not None
        and [c["name"] for c in checks if c["result"] == "fail"] == ["signature"],
        "handoff": handoff_block(
            doc, receipt.url, follow_up_line(receipt, show_follow_up=show_follow_up)
        ),
        "site_url": settings.SITE_URL,
        # The "check it yourself" commands for Linux, macOS and Windows (pages/check_commands.py),
        # the offline bundle's, and the page's JSON-LD facts (pages/jsonld.py).
        "verify_commands": hash_commands(receipt.verify_url),
        "bundle_file": bundle.filename(receipt),
        "bundle_command": bundle_command(bundle.filename(receipt)),
        "json_ld": jsonld.script_text(jsonld.receipt_facts(receipt, doc)),
    }

"""The receipt page's verdict and what a receipt that does not verify looks like, through
Django's test client: `data-verdict` for each state (pending included, which a live site shows
only between a write and its checkpoint), the hand-off's warning line in the page, in
handoff.txt and in Chinese, the headlines of each phase and outcome (the quickstart's demo
receipts among them), and the words of the checks."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from django.test import Client
from receiptsite_client.handoff import handoff_block, width

from receiptsite.ledger import verification
from receiptsite.pages import presentation
from receiptsite.receipts.demo import demo_receipts
from tests.conftest import Producer, tamper

pytestmark = pytest.mark.db

VERDICT = re.compile(r'id="verdict" data-verdict="(\w+)"')


def html_of(client: Client, receipt_id: str, **params: str) -> str:
    response = client.get(f"/run/{receipt_id}", params)
    assert response.status_code in (200, 410)
    return response.content.decode()


def verdict_of(html: str) -> str:
    found = VERDICT.findall(html)
    assert len(found) == 1, found
    return found[0]


def test_the_verdict_says_valid_invalid_or_withdrawn(producer: Producer, client: Client) -> None:
    valid = producer.publish(idempotency_key="valid")
    altered = producer.publish(idempotency_key="altered", outcome="failed")
    gone = producer.publish(idempotency_key="gone")
    tamper(altered["id"], outcome="succeeded")
    assert producer.post({"reason": "other"}, path=f"/api/receipts/{gone['id']}/withdrawal"
                         ).status_code == 201
    assert verdict_of(html_of(client, valid["id"])) == "valid"
    assert verdict_of(html_of(client, altered["id"])) == "invalid"
    assert verdict_of(html_of(client, gone["id"])) == "withdrawn"


def test_a_pending_receipt_says_so_first(
    producer: Producer, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pending happens only while a receipt's checkpoint is being signed: made here by
    answering the log's part as the verification does then."""
    answer = producer.publish()
    real = verification._log_part

    def not_signed_yet(*args: Any) -> Any:
        log_json, check, proof = real(*args)
        return None, {**check, "result": "pending", "detail": "being signed"}, proof

    monkeypatch.setattr(verification, "_log_part", not_signed_yet)
    html = html_of(client, answer["id"])
    assert verdict_of(html) == "pending"
    assert "Not every check could be completed yet." in html
    assert "✓" not in html.split('id="verdict"')[1].split("</div>")[0]
    assert client.get(f"/run/{answer['id']}/handoff.txt").content.startswith(b"Work item:")


def test_an_altered_receipt_is_shown_as_what_it_now_says(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish(outcome="failed")
    tamper(answer["id"], outcome="succeeded")
    html = html_of(client, answer["id"])
    assert "What the altered record now says:" in html
    assert "(as the record now says: not verified)" in html
    assert "✓" not in html and "outcome-good" not in html
    assert 'class="outcome outcome-unverified"' in html


def test_the_handoff_of_a_receipt_that_does_not_verify_begins_with_the_warning(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    tamper(answer["id"], workflow_id="wf-forged")
    text = client.get(f"/run/{answer['id']}/handoff.txt").content.decode()
    warning = "WARNING: this receipt does not verify (listed details); do not rely on it.\n"
    assert text.startswith(warning + "Work item:          tool website_audit\n")
    assert text.replace("&", "&amp;").replace("'", "&#x27;") in html_of(client, answer["id"])


def test_the_handoff_in_chinese_is_translated_and_aligned(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    tamper(answer["id"], workflow_id="wf-forged")
    text = client.get(f"/run/{answer['id']}/handoff.txt", {"lang": "zh-hans"}).content.decode()
    lines = text.splitlines()
    assert lines[0] == "警告：这份收据未通过验证（列表详情）；请不要依赖它。"
    assert lines[1].startswith("工作项：") and lines[1].endswith("tool website_audit")
    assert lines[3].endswith("成功")  # the outcome in words, the producer's own text as sent
    # The values start in one column, wide characters counting two.
    for line, value in zip(lines[1:4], ["tool website_audit", "wf-7f3a / 2", "成功"], strict=True):
        assert width(line[: line.index(value)]) == 20, line


def test_the_clients_handoff_is_the_template_of_the_spec() -> None:
    doc = {"subject": {"type": "tool", "name": "t"}, "workflow_id": "wf", "outcome": "failed",
           "recorded_at": "2026-11-30T14:31:07.123456Z", "observed": ["A."],
           "not_observed": ["B."]}
    assert handoff_block(doc, "https://x/run/1", "none recorded") == (
        "Work item:          tool t\n"
        "Workflow / attempt: wf / 1\n"
        "Observed status:    failed\n"
        "Receipt:            https://x/run/1\n"
        "Recorded at:        2026-11-30T14:31:07.123456Z\n"
        "What it shows:      A.\n"
        "What it does not show: B.\n"
        "Follow-up:          none recorded\n"
    )
    warned = handoff_block(doc, "u", "none recorded", failed=["signature", "public log"])
    assert warned.splitlines()[0] == (
        "WARNING: this receipt does not verify (signature, public log); do not rely on it.")


# --- headlines ---------------------------------------------------------------------------------


def test_every_headline_reads_as_a_sentence() -> None:
    for (phase, outcome), sentence in presentation.PHASE_SENTENCES.items():
        text = str(sentence).format(agent="The agent runtime", subject="the tool", name="“x”")
        assert text.endswith("."), text
        # Never "…: uncertain." or "…: timed_out.": an outcome word tacked onto the end.
        assert not re.search(r": (uncertain|timed out|failed|started)\.$", text), (phase, text)
        assert (outcome is None) == (phase == "start")


def test_the_quickstarts_first_receipt_has_a_headline_that_reads_well(
    producer: Producer, client: Client
) -> None:
    stored = []
    for body in demo_receipts():
        response = producer.post(body)
        assert response.status_code == 201, response.content
        stored.append(response.json())
    # quickstart says "Open this one first" of the last one: the task's completion.
    html = html_of(client, stored[-1]["id"])
    headline = re.search(r'<h1 id="summary-title">(.*?)</h1>', html, re.S)
    assert headline is not None
    assert headline.group(1) == (
        "The agent runtime (crewai) recorded that the task “Audit example.org and report to "
        "the client” ended, but not whether it was completed."
    )
    assert "completed: uncertain" not in html


def test_a_failed_tool_call_says_it_failed(producer: Producer, client: Client) -> None:
    html = html_of(client, producer.publish(outcome="failed")["id"])
    assert "recorded that the tool “website_audit” failed." in html


# --- the checks' words ---------------------------------------------------------------------------


def test_the_checks_have_plain_names_and_keep_their_english_detail_as_data(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    tamper(answer["id"], workflow_id="wf-forged")
    html = html_of(client, answer["id"])
    for name in ("Format", "Fingerprint", "Listed details", "Signature", "Public log"):
        assert f"<strong>{name}</strong>" in html
    for jargon in ("Canonical form", "Stored record"):
        assert jargon not in html
    assert 'data-check="record_matches"' in html
    assert "(record_matches: The stored columns disagree with the document: workflow_id.)" in (
        html)


def test_a_signature_that_fails_with_the_bytes_blames_the_bytes(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    data = base64.b64decode(client.get(f"/api/receipt/{answer['id']}/verify").json()[
        "canonical_bytes"])
    tamper(answer["id"], canonical_bytes=data.replace(b"12 findings", b"13 findings"))
    checks = {c["name"]: c for c in client.get(f"/api/receipt/{answer['id']}/verify").json()[
        "checks"]}
    assert checks["signature"]["detail"].endswith(
        "the stored bytes, or the signature, are not the ones that were signed.")
    html = html_of(client, answer["id"])
    assert str(presentation.BYTES_CHANGED_SIGNATURE) in html.replace("&#x27;", "'")
    assert "trustworthy" not in html


def test_each_linked_receipt_shows_its_own_verdict(producer: Producer, client: Client) -> None:
    producer.publish(idempotency_key="ok")
    bad = producer.publish(idempotency_key="bad", outcome="failed")
    gone = producer.publish(idempotency_key="gone")
    parent = producer.publish(idempotency_key="parent", phase="completion",
                              links={"child_idempotency_keys": ["ok", "bad", "gone"]})
    assert producer.post({"reason": "other"}, path=f"/api/receipts/{gone['id']}/withdrawal"
                         ).status_code == 201
    tamper(bad["id"], outcome="succeeded")
    html = html_of(client, parent["id"])
    assert verdict_of(html) == "valid"  # the parent itself verifies
    assert re.findall(r'data-link-verdict="(\w+)"', html) == ["valid", "invalid", "withdrawn"]
    altered = html[html.index(f'href="/run/{bad["id"]}"'):]
    altered = altered[: altered.index("</li>")]
    # What the altered child's record now says (its bytes say failed), never as fact.
    assert "as the altered record now says: end, failed" in altered
    assert "✓" not in altered and "succeeded" not in altered

"""GET /run/<id> and /run/<id>/handoff.txt: what a reviewer reads."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client

from receiptsite.receipts.models import Receipt
from tests.conftest import Producer, row_security_statements, tamper

pytestmark = pytest.mark.db


def page(client: Client, receipt_id: str) -> str:
    response = client.get(f"/run/{receipt_id}")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    return response.content.decode()


def test_it_says_what_ran_the_outcome_and_when(producer: Producer, client: Client) -> None:
    answer = producer.publish()
    html = page(client, answer["id"])
    assert "recorded that the tool “website_audit” finished: succeeded." in html
    assert "Succeeded" in html
    assert " UTC" in html
    assert f'datetime="{answer["recorded_at"]}"' in html
    assert "What this receipt shows" in html
    assert "The audit tool returned 12 findings." in html
    assert "What it does not show" in html
    assert "Whether the findings were sent to the client." in html
    assert "It does not show that any effect outside that report happened" in html
    assert "wf-7f3a" in html and "audit-site" in html
    assert "wf-7f3a/audit-site/1" in html and "timeout" in html  # the attempt chain
    assert answer["output_hash"] in html
    command = f"curl -s {answer['verify_url']} | jq -r .canonical_bytes | base64 -d | sha256sum"
    assert command in html
    assert "every check passed" in html
    assert "Warning: this receipt does not verify" not in html


def test_plain_language_comes_before_the_technical_details(
    producer: Producer, client: Client
) -> None:
    html = page(client, producer.publish()["id"])
    assert html.index("What this receipt shows") < html.index("Checking this receipt")
    assert html.index("Checking this receipt") < html.index("Technical details")


def test_a_start_says_it_started_and_has_no_result(producer: Producer, client: Client) -> None:
    html = page(client, producer.publish(phase="start", outcome=None)["id"])
    assert "was started." in html
    assert "Started (no result recorded)" in html
    assert "A start record shows that the step was invoked" in html


def test_redactions_are_stated_plainly(producer: Producer, client: Client) -> None:
    html = page(client, producer.publish(result="key sk-abcdefghijklmnopqrstuvwx1234")["id"])
    assert "This record was redacted before it was stored" in html
    assert "A secret of 31 characters was removed from <code>/result</code>." in html


def test_linked_receipts_are_links(producer: Producer, client: Client) -> None:
    child = producer.publish(idempotency_key="child")
    parent = producer.publish(
        idempotency_key="parent", phase="completion",
        links={"child_idempotency_keys": ["child"]},
    )
    html = page(client, parent["id"])
    assert f'href="/run/{child["id"]}">website_audit (end, succeeded)</a>' in html


def test_a_tampered_receipt_shows_a_warning_in_plain_words(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    tamper(answer["id"], workflow_id="wf-forged")
    html = page(client, answer["id"])
    assert 'role="alert"' in html
    assert "Warning: this receipt does not verify" in html
    assert "Do not rely on it" in html
    assert "record_matches" in html
    assert "every check passed" not in html
    assert html.index("Warning: this receipt does not verify") < html.index("What this receipt")


def test_text_from_the_producer_is_escaped(producer: Producer, client: Client) -> None:
    html = page(client, producer.publish(result="<script>alert(1)</script>")["id"])
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_page_sends_the_capability_headers_and_a_strict_csp(
    producer: Producer, client: Client
) -> None:
    response = client.get(f"/run/{producer.publish()['id']}")
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Robots-Tag"] == "noindex"
    assert response["Cache-Control"] == "no-store"
    assert response["X-Content-Type-Options"] == "nosniff"
    csp = response["Content-Security-Policy"]
    script_src = next(d for d in csp.split(";") if d.strip().startswith("script-src"))
    assert "unsafe-inline" not in script_src and "unsafe-eval" not in script_src
    assert "default-src 'self'" in csp
    html = response.content.decode()
    assert "<script>" not in html and " style=" not in html  # nothing inline
    assert "http://" not in html.replace("http://www.w3.org", "")  # nothing from elsewhere


def test_the_page_needs_few_queries(
    producer: Producer, client: Client, django_assert_max_num_queries: Any
) -> None:
    ids = [producer.publish(idempotency_key=f"k{i}")["id"] for i in range(10)]
    with django_assert_max_num_queries(6 + row_security_statements("receipt")):
        client.get(f"/run/{ids[2]}")


@pytest.mark.parametrize(
    "path",
    ["/run/00000000-0000-4000-8000-000000000000", "/run/not-an-id", "/run/1",
     "/run/00000000-0000-4000-8000-000000000000/extra"],
)
def test_an_unknown_or_malformed_id_gets_a_friendly_404(client: Client, db: None,
                                                        path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    html = response.content.decode()
    assert "There is no receipt at this address" in html
    assert response["Cache-Control"] == "no-store"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Robots-Tag"] == "noindex"


def test_no_receipt_id_is_logged_in_full(
    producer: Producer, client: Client, caplog: Any
) -> None:
    answer = producer.publish()
    missing = "0f0e0d0c-0000-4000-8000-000000000000"
    caplog.set_level(logging.INFO)
    handler = logging.getLogger().handlers[0]
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(handler.format(record))

    keep = Keep()
    for f in handler.filters:
        keep.addFilter(f)
    logging.getLogger().addHandler(keep)
    logging.getLogger("django").addHandler(keep)
    try:
        client.get(f"/run/{missing}")
        client.get(f"/api/receipt/{missing}/verify")
        client.get(f"/run/{missing}/handoff.txt")
        producer.post({"workflow_id": 1}, path="/api/receipts")
        client.post(f"/api/receipt/{answer['id']}/verify")
    finally:
        logging.getLogger().removeHandler(keep)
        logging.getLogger("django").removeHandler(keep)
    text = "\n".join(lines)
    assert "Not Found" in text  # Django's own warning is there...
    assert "0f0e0d0c-…" in text  # ...with the id cut short
    assert missing not in text
    assert answer["id"] not in text


# --- the hand-off block -------------------------------------------------------------------


def test_handoff_txt_is_the_specs_block(producer: Producer, client: Client) -> None:
    answer = producer.publish()
    response = client.get(f"/run/{answer['id']}/handoff.txt")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Cache-Control"] == "no-store"
    doc = Receipt.objects.get(public_id=answer["id"]).document()
    assert response.content.decode() == (
        "Work item:          tool website_audit\n"
        "Workflow / attempt: wf-7f3a / 2\n"
        "Observed status:    succeeded\n"
        f"Receipt:            {answer['url']}\n"
        f"Recorded at:        {answer['recorded_at']}\n"
        "What it shows:      The audit tool returned 12 findings.\n"
        f"What it does not show: {' '.join(doc['not_observed'])}\n"
        "Follow-up:          none recorded\n"
    )


def test_the_page_shows_the_same_handoff_block(producer: Producer, client: Client) -> None:
    answer = producer.publish()
    text = client.get(f"/run/{answer['id']}/handoff.txt").content.decode()
    html = page(client, answer["id"])
    assert text.replace("&", "&amp;") in html.replace("&#x27;", "'")


def test_a_start_handoff_says_started(producer: Producer, client: Client) -> None:
    answer = producer.publish(phase="start", outcome=None)
    text = client.get(f"/run/{answer['id']}/handoff.txt").content.decode()
    assert "Observed status:    started\n" in text


def test_handoff_of_an_unknown_id_is_a_404(client: Client, db: None) -> None:
    response = client.get("/run/00000000-0000-4000-8000-000000000000/handoff.txt")
    assert response.status_code == 404
    assert response["Cache-Control"] == "no-store"

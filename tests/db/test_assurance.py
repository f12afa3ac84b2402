"""Who vouches for what: the verification JSON's `assurance` (docs/verification.md), one entry
per claim the page shows, each checkable by the reader, the publisher's word, the site's word
or not recorded; whose word a claim is comes from the receipt/v1 declaration."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest
from django.test import Client

from receiptsite.evidence.declaration import DOCUMENT, SITE_FIELDS
from receiptsite.ledger import assurance
from receiptsite.pages.templatetags import receipt_fragments
from tests.conftest import Producer, tamper

pytestmark = pytest.mark.db


def assured(client: Client, receipt_id: str) -> dict[str, dict[str, Any]]:
    answer = client.get(f"/api/receipt/{receipt_id}/verify").json()
    return {item["claim"]: item for item in answer["assurance"]}


def bases(client: Client, receipt_id: str) -> dict[str, str]:
    return {claim: item["basis"] for claim, item in assured(client, receipt_id).items()}


def test_each_claim_of_a_receipt_says_who_vouches_for_it(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    assert bases(client, answer["id"]) == {
        "what_ran": "publisher",
        "what_came_back": "publisher",
        "outcome": "publisher",
        "when_it_ran": "publisher",
        "when_recorded": "site",
        "who_published": "site",
        "redactions": "site",
        "links": "not_recorded",
        "bytes_unchanged": "checkable",
        "logged": "checkable",
        "witnessed": "not_recorded",
    }


def test_an_entry_has_its_fields_evidence_checks_and_result(
    producer: Producer, client: Client
) -> None:
    claims = assured(client, producer.publish()["id"])
    assert claims["outcome"] == {
        "claim": "outcome", "basis": "publisher", "fields": ["/outcome"], "evidence": [],
        "checks": [], "result": None,
        "detail": "The publisher's word: its agent runtime reported this to the site, which "
                  "stored it as sent. The signature shows it is unchanged since, not that it is "
                  "true.",
    }
    unchanged = claims["bytes_unchanged"]
    assert unchanged["evidence"] == ["bytes", "signature"]
    assert unchanged["checks"] == ["canonical_form", "hash", "signature"]
    assert unchanged["result"] == "pass"
    assert claims["logged"]["evidence"] == ["log"] and claims["logged"]["result"] == "pass"
    assert claims["when_recorded"]["fields"] == ["/recorded_at"]
    assert all(set(item) == set(assurance.Assurance.__annotations__) for item in claims.values())


def test_what_a_start_does_not_record_is_not_recorded(producer: Producer, client: Client) -> None:
    answer = producer.publish(phase="start", outcome=None, result=None, started_at=None,
                              ended_at=None, duration_ms=None)
    found = bases(client, answer["id"])
    assert found["outcome"] == found["what_came_back"] == found["when_it_ran"] == "not_recorded"
    assert assured(client, answer["id"])["outcome"]["detail"] == (
        "Not recorded: the receipt holds no outcome.")


def test_links_are_the_publishers_word(producer: Producer, client: Client) -> None:
    producer.publish(idempotency_key="child")
    parent = producer.publish(idempotency_key="parent", phase="completion",
                              links={"child_idempotency_keys": ["child"]})
    assert bases(client, parent["id"])["links"] == "publisher"


def test_a_tampered_receipts_checkable_claims_do_not_check_out(
    producer: Producer, client: Client
) -> None:
    answer = producer.publish()
    tamper(answer["id"], canonical_bytes=client.get(
        f"/api/receipt/{answer['id']}/verify").json()["canonical_bytes"].encode())
    claims = assured(client, answer["id"])
    assert claims["bytes_unchanged"]["result"] == "fail"
    # Unreadable bytes record nothing anyone could vouch for.
    assert claims["outcome"]["basis"] == "not_recorded"


def test_whose_word_a_claim_is_follows_the_declaration() -> None:
    for claim in assurance.CLAIMS:
        for field in claim.fields:
            expected = "site" if field in SITE_FIELDS else "publisher"
            assert assurance.written_by(field) == expected
            if expected == "publisher":
                DOCUMENT.member(field)  # a producer's field of receipt/v1
    with pytest.raises(KeyError):
        assurance.written_by("not_a_field")


def test_the_page_says_the_same_as_the_json(producer: Producer, client: Client) -> None:
    answer = producer.publish()
    html = client.get(f"/run/{answer['id']}").content.decode()
    assert "Who vouches for what" in html
    for claim, item in assured(client, answer["id"]).items():
        assert f'data-claim="{claim}"' in html
        start = html.index(f'data-claim="{claim}"')
        group = html.rindex("<li class=", 0, start)
        assert f'data-basis="{item["basis"]}"' in html[group:start]


def test_the_pages_list_is_rendered_once_for_the_receipts_that_share_it(
    producer: Producer, other_producer: Producer, client: Client, monkeypatch: Any
) -> None:
    """The list is a fragment kept per distinct words and results (assurance_key): receipts
    whose list reads the same share one rendering, and one whose list differs (another
    publisher's name, a check that failed) is shown its own."""

    def kept() -> int:
        return sum(1 for key in receipt_fragments._rendered if key[0] == "assurance")

    def assurance_list(receipt_id: str) -> str:
        html = client.get(f"/run/{receipt_id}").content.decode()
        start = html.index('<ul class="assurance">')
        return html[start : html.index("</ul>", start)]

    monkeypatch.setattr(receipt_fragments, "_rendered", OrderedDict())  # none kept yet
    first, second = producer.publish(), producer.publish()
    before = kept()
    shown = assurance_list(first["id"])
    assert kept() == before + 1
    assert assurance_list(second["id"]) == shown
    assert kept() == before + 1  # the same words: the first one's rendering

    other = assurance_list(other_producer.publish()["id"])
    assert "Globex reported these." in other and "Globex" not in shown
    assert kept() == before + 2

    tampered = producer.publish()
    tamper(tampered["id"], canonical_bytes=b"{}")
    failed = assurance_list(tampered["id"])
    assert 'data-claim="bytes_unchanged" data-result="fail"' in failed
    assert 'data-claim="bytes_unchanged" data-result="pass"' in shown
    assert kept() == before + 3

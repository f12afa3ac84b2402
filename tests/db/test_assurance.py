"""Who vouches for what: the verification JSON's `assurance` (docs/verification.md), one entry
per claim the page shows, each checkable by the reader, the publisher's word, the site's word
or not recorded; whose word a claim is comes from the receipt/v1 declaration."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from receiptsite.evidence.declaration import DOCUMENT, SITE_FIELDS
from receiptsite.ledger import assurance
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

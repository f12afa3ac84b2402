"""The receipt page's plain sentence of who witnessed the log and when, or that nobody has yet
(SPEC, "The reviewer's page", "Witnesses"), in English and in Chinese: with no policy, the
log is signed by the site alone; with a policy and nothing witnessed that includes the
receipt, who is asked and that none of it is confirmed yet; witnessed, who confirmed it and
when, and what that does not show.

The cosignatures are made here with keys of the test's own, as tests/db/test_witnesses.py
makes them (the witnesses themselves, over HTTP, are tests/browser/test_witnesses_browser.py).
"""

from __future__ import annotations

import re
import time
from html import unescape
from typing import Any

import pytest
from django.test import Client

from receiptsite.receipts.models import Receipt
from tests.conftest import Producer, tamper
from tests.db.test_query_counts import PUBLIC, pinned, queries_of
from tests.db.test_translations import assert_said_once, both_languages
from tests.db.test_witnesses import cosign, key_name, two_of_two

pytestmark = pytest.mark.db

# 2025-06-01 12:00:00 UTC and five seconds later: the times the witnesses cosign at.
FIRST, SECOND = 1748779200, 1748779205


def witness_block(html: str) -> str:
    """The text of the page's witness paragraphs (#witnesses), tags removed, spaces joined."""
    found = re.search(r'<div class="witnesses" id="witnesses"[^>]*>(.*?)</div>', html, re.S)
    assert found is not None, "the page has no witness sentence"
    return " ".join(unescape(re.sub(r"<[^>]+>", "", found.group(1))).split())


def state_of(html: str) -> str:
    found = re.search(r'id="witnesses" data-witnessed="(\w+)"', html)
    assert found is not None
    return found.group(1)


def page(client: Client, receipt_id: str, lang: str = "en") -> str:
    response = client.get(f"/run/{receipt_id}", {"lang": lang})
    assert response.status_code == 200
    return response.content.decode()


# --- no policy ------------------------------------------------------------------------------


def test_without_a_policy_the_page_says_the_log_is_signed_by_the_site_alone(
    client: Client, producer: Producer
) -> None:
    stored = producer.publish()
    english = page(client, stored["id"])
    assert state_of(english) == "alone"
    assert witness_block(english) == (
        "Witnesses: The log's checkpoints, its signed records of every receipt logged so far, "
        "are signed by this site alone: nobody else has vouched that everyone who checks this "
        "receipt sees the same log. The site could show different people different versions "
        "of its log, and nobody independent would be there to notice."
    )
    chinese = page(client, stored["id"], "zh-hans")
    assert witness_block(chinese) == (
        "见证方：日志的检查点（即对迄今记入日志的每份收据所作的已签名记录）仅由本站自己签名："
        "没有任何其他人担保过每个核查这份收据的人看到的都是同一份日志。"
        " 本站可以向不同的人展示不同版本的日志，而没有任何独立的一方会察觉。"
    )
    # The sentence is where the integrity section begins, before the checks one can run.
    assert english.index("Checking this receipt") < english.index('id="witnesses"')
    assert english.index('id="witnesses"') < english.index("Verify in this browser")


# --- a policy, nothing witnessed yet ---------------------------------------------------------


def test_with_a_policy_and_no_cosignature_the_page_names_the_witnesses_asked(
    client: Client, producer: Producer, settings: Any
) -> None:
    two_of_two(settings)
    settings.WITNESS_INTERVAL = 7
    stored = producer.publish()
    english = page(client, stored["id"])
    assert state_of(english) == "pending"
    w1, w2 = key_name("w1"), key_name("w2")
    assert witness_block(english) == (
        f"Witnesses: This site asks 2 independent witnesses ({w1} and {w2}) to confirm its "
        "log, so that it cannot show different people different versions of it. The "
        "witnesses have not yet confirmed a record of the log that includes this receipt. "
        "That usually happens within 7 seconds of a receipt being recorded; until then, only "
        "the site's own signature vouches for the log."
    )
    chinese = page(client, stored["id"], "zh-hans")
    assert witness_block(chinese) == (
        f"见证方：本站请 2 个独立见证方（{w1}和{w2}）确认其日志，"
        "使本站无法向不同的人展示不同版本的日志。"
        " 见证方尚未确认包含这份收据的日志记录。"
        " 这通常在收据记录后 7 秒内完成；在此之前，只有本站自己的签名为这份日志作保。"
    )
    assert "confirmed this log" not in english


def test_one_cosignature_of_two_needed_is_not_called_witnessed(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    stored = producer.publish()
    assert cosign(rules, "w1", at=FIRST) == []
    html = page(client, stored["id"])
    assert state_of(html) == "pending"
    assert "have not yet confirmed" in witness_block(html)
    assert "12:00:00" not in witness_block(html)


def test_a_receipt_newer_than_the_witnessed_checkpoint_is_not_witnessed_yet(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    older = producer.publish(idempotency_key="older")
    assert cosign(rules, "w1", "w2", at=FIRST) == []
    newer = producer.publish(idempotency_key="newer")
    assert state_of(page(client, older["id"])) == "witnessed"
    assert state_of(page(client, newer["id"])) == "pending"


# --- witnessed ----------------------------------------------------------------------------------


def test_a_witnessed_receipt_names_each_witness_and_when_it_confirmed(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    producer.publish(idempotency_key="first")
    stored = producer.publish(idempotency_key="second")
    assert cosign(rules, "w2", at=SECOND) == []
    assert cosign(rules, "w1", at=FIRST) == []
    english = page(client, stored["id"])
    assert state_of(english) == "witnessed"
    w1, w2 = key_name("w1"), key_name("w2")
    # Earliest first, each with its own time, UTC, in the page's date form.
    assert witness_block(english) == (
        f"Witnesses: 2 independent witnesses each confirmed this log: {w1} at 1 June 2025, "
        f"12:00:00 UTC and {w2} at 1 June 2025, 12:00:05 UTC. Each saw the log's record of "
        "2 receipts, which includes this receipt, and checked that this record extends every "
        "earlier record of the log it had seen. This does not show that what the receipt says "
        "happened. It shows that the site could not show anyone a different version of its "
        "log, one without this receipt or with it changed, without being caught. This is what "
        "the site reports of the witnesses' signed confirmations: “Verify in this browser” "
        "below checks their signatures."
    )
    assert '<time datetime="2025-06-01T12:00:00Z">1 June 2025, 12:00:00 UTC</time>' in english
    chinese = page(client, stored["id"], "zh-hans")
    assert witness_block(chinese) == (
        f"见证方：已有 2 个独立见证方确认了此日志：{w1}（于 2025年6月1日 12:00:00 UTC）和"
        f"{w2}（于 2025年6月1日 12:00:05 UTC）。每个见证方都看到了该日志包含 2 份收据的记录"
        "（其中包括这份收据），并核实了这份记录是它此前见过的该日志所有记录的延续。"
        " 这并不能表明收据所述的事情确实发生过。它表明的是：本站若向任何人展示另一个版本的日志"
        "（比如没有这份收据，或这份收据被改动过），就会被发现。"
        " 以上是本站对见证方已签名确认的陈述：下方的“在此浏览器中验证”会核验它们的签名。"
    )
    # Honest words: no success mark, and nothing called verified that the reader did not check.
    block = witness_block(english)
    assert "✓" not in block and "verified" not in block.lower()


def test_a_single_witness_is_named_in_the_singular(
    client: Client, producer: Producer, settings: Any
) -> None:
    from tests.db.test_witnesses import one_of_two

    rules = one_of_two(settings)
    stored = producer.publish()
    assert cosign(rules, "w2", at=SECOND) == []
    block = witness_block(page(client, stored["id"]))
    assert block.startswith(
        f"Witnesses: An independent witness confirmed this log: {key_name('w2')} at "
        "1 June 2025, 12:00:05 UTC. It saw the log's record of 1 receipt, which includes "
        "this receipt,"
    )


def test_a_witnessed_receipt_whose_bytes_no_longer_match_its_log_entry_says_so(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    stored = producer.publish(idempotency_key="changed")
    intact = producer.publish(idempotency_key="intact")
    assert cosign(rules, "w1", "w2", at=FIRST) == []
    data = Receipt.objects.get(public_id=stored["id"]).raw_bytes()
    tamper(stored["id"], canonical_bytes=data.replace(b"wf-7f3a", b"wf-7f3b"))
    mismatch = (
        "But the receipt as stored now does not match what was logged in its place (see the "
        "checks above), so the witnesses' confirmation does not vouch for it."
    )
    html = page(client, stored["id"])
    assert "Warning: this receipt does not verify" in html
    assert state_of(html) == "witnessed"
    assert mismatch in witness_block(html)
    assert mismatch not in witness_block(page(client, intact["id"]))


def test_the_witnessed_page_says_each_sentence_once_in_both_languages(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    stored = producer.publish()
    assert cosign(rules, "w1", "w2", at=FIRST) == []
    english, chinese = both_languages(client, f"/run/{stored['id']}")
    assert state_of(english) == state_of(chinese) == "witnessed"
    assert_said_once(english, chinese)


def test_the_sentence_costs_no_query_beyond_the_witnessed_verification(
    client: Client, producer: Producer, settings: Any
) -> None:
    rules = two_of_two(settings)
    producer.publish(idempotency_key="first")  # so that the proof has a node to read
    stored = producer.publish(idempotency_key="second")
    assert cosign(rules, "w1", "w2", at=int(time.time())) == []
    client.get(f"/run/{stored['id']}")  # the first answer may fill per-process caches
    response, sql = queries_of(lambda: client.get(f"/run/{stored['id']}"))
    assert state_of(response.content.decode()) == "witnessed"
    # The page's pinned queries, and the one the verification spends on the witnesses.
    assert len(sql) == pinned(PUBLIC, "page") + 1, "\n".join(sql)

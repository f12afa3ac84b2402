"""Redaction of secrets and truncation of long texts (no database)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from receiptsite_client import redaction
from receiptsite_client.redaction import find_secrets, redact_text, truncate

from receiptsite.evidence.redaction import redact

pytestmark = pytest.mark.unit

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n"
    "aFDrBz9vFqU4yQ==\n"
    "-----END RSA PRIVATE KEY-----"
)


def base(**fields: Any) -> dict[str, Any]:
    return {
        "workflow_id": "wf-1",
        "attempt": {"number": 1},
        "phase": "end",
        "subject": {"type": "tool", "name": "search"},
        "outcome": "succeeded",
        "not_observed": [],
        **fields,
    }


# Texts with secrets in them, as redacted, and the length of each secret removed.
REPLACED = [
    pytest.param(
        "Authorization: Bearer abc123def456",
        "Authorization: Bearer [REDACTED]",
        [12],
        id="bearer token keeps the word",
    ),
    pytest.param("bearer 9f8e7d", "bearer [REDACTED]", [6], id="bearer in lower case"),
    pytest.param(f"Bearer {JWT}.", "Bearer [REDACTED].", [len(JWT)], id="bearer jwt"),
    pytest.param(
        "key sk-proj-Ab3dEf6hIj9kLmNoPq12 used",
        "key [REDACTED] used",
        [len("sk-proj-Ab3dEf6hIj9kLmNoPq12")],
        id="sk-proj key",
    ),
    pytest.param(
        "OPENAI_API_KEY=sk-abcdefghij1234567890",
        "OPENAI_API_KEY=[REDACTED]",
        [len("sk-abcdefghij1234567890")],
        id="sk key after a name",
    ),
    pytest.param(
        "stripe sk_live_51H8abcDEF0123456789xyz",
        "stripe [REDACTED]",
        [len("sk_live_51H8abcDEF0123456789xyz")],
        id="sk_live key",
    ),
    pytest.param(
        "restricted rk_live_0123456789abcdef", "restricted [REDACTED]", [24], id="rk_ key"
    ),
    pytest.param("id AKIAIOSFODNN7EXAMPLE.", "id [REDACTED].", [20], id="AWS AKIA key id"),
    pytest.param("ASIAY34FZKBOKMUTVV7A", "[REDACTED]", [20], id="AWS ASIA key id"),
    pytest.param(
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "aws_secret_access_key = [REDACTED]",
        [40],
        id="AWS secret named as one",
    ),
    pytest.param(f"key:\n{PEM}\nend", "key:\n[REDACTED]\nend", [len(PEM)], id="PEM block"),
    pytest.param(
        '{"pem": "-----BEGIN PRIVATE KEY-----\\nMIIE+/a=\\n-----END PRIVATE KEY-----"}',
        '{"pem": "[REDACTED]"}',
        [len("-----BEGIN PRIVATE KEY-----\\nMIIE+/a=\\n-----END PRIVATE KEY-----")],
        id="PEM block inside escaped JSON",
    ),
    pytest.param(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=; cut off",
        "[REDACTED]; cut off",
        [len("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=")],
        id="unterminated PEM block",
    ),
    pytest.param(
        "db postgres://admin:hunter2@db.internal:5432/app",
        "db postgres://admin:[REDACTED]@db.internal:5432/app",
        [7],
        id="password in a URL",
    ),
    pytest.param(
        "redis://:s3cr:et@cache:6379", "redis://:[REDACTED]@cache:6379", [7], id="no user"
    ),
    pytest.param(f"token {JWT} end", "token [REDACTED] end", [len(JWT)], id="JWT"),
    pytest.param(
        "gh ghp_1234567890abcdefghijABCDEFGHIJ123456",
        "gh [REDACTED]",
        [40],
        id="GitHub token",
    ),
    pytest.param(
        "github_pat_11ABCDEFG0123456789_abcdefghij",
        "[REDACTED]",
        [len("github_pat_11ABCDEFG0123456789_abcdefghij")],
        id="GitHub fine-grained token",
    ),
    pytest.param(
        "slack xoxb-123456789012-abcdefGHIJ",
        "slack [REDACTED]",
        [len("xoxb-123456789012-abcdefGHIJ")],
        id="Slack token",
    ),
    pytest.param(
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "[REDACTED]",
        [39],
        id="Google API key",
    ),
    pytest.param("password=hunter22&x=1", "password=[REDACTED]&x=1", [8], id="password="),
    pytest.param(
        'Authorization: Basic dXNlcjpwYXNz"',
        'Authorization: Basic [REDACTED]"',
        [12],
        id="basic credentials",
    ),
    pytest.param(
        "a AKIAIOSFODNN7EXAMPLE then Bearer tok_12345678 and sk-abc1234567890",
        "a [REDACTED] then Bearer [REDACTED] and [REDACTED]",
        [20, 12, 16],
        id="several secrets in position order",
    ),
    pytest.param(
        "Bearer sk-abcdef1234567890", "Bearer [REDACTED]", [19], id="overlapping finds once"
    ),
    pytest.param(
        "https://u:sk-abcdef1234567890@host",
        "https://u:[REDACTED]@host",
        [19],
        id="key used as a URL password once",
    ),
    pytest.param(
        "\U0001f600\U0001f600 Bearer abc123",
        "\U0001f600\U0001f600 Bearer [REDACTED]",
        [6],
        id="positions after astral characters",
    ),
    pytest.param(
        "https://u:p\u00e4ss\U0001f600w0rd@h",
        "https://u:[REDACTED]@h",
        [9],
        id="lengths in code points",
    ),
]


@pytest.mark.parametrize(("text", "expected", "removed"), REPLACED)
def test_it_replaces_each_secret_and_counts_its_code_points(
    text: str, expected: str, removed: list[int]
) -> None:
    assert redact_text(text) == (expected, removed)


@pytest.mark.parametrize(
    "text",
    [
        "The audit tool returned 12 findings.",
        '{"url": "https://example.org"}',
        "the bearer of bad news",
        "uses sk-learn for the model",
        "a desk-lamp1234567890 and work_item",
        "https://example.org:8443/path?q=1#top",
        "mailto:someone@example.org",
        "password: ********",
        "password reset requested",
        "AKIA is how AWS keys start",
        "eyJ alone is not a token",
        "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----",
        "wf-7f3a/audit-site/end/2",
    ],
)
def test_it_leaves_ordinary_text_alone(text: str) -> None:
    assert redact_text(text) == (text, [])


@pytest.mark.parametrize(
    "text",
    [
        "[REDACTED]",
        "Authorization: Bearer [REDACTED]",
        "postgres://admin:[REDACTED]@db/app",
        "password=[REDACTED]",
        "key: sk-[REDACTED]",
        "-----BEGIN PRIVATE KEY-----\n[REDACTED]\n-----END PRIVATE KEY-----",
    ],
)
def test_it_leaves_text_that_already_reads_redacted_alone(text: str) -> None:
    assert redact_text(text) == (text, [])


def test_it_reports_secret_spans_in_position_order() -> None:
    text = "x Bearer abc123 y AKIAIOSFODNN7EXAMPLE"
    assert find_secrets(text) == [(9, 15), (18, 38)]


def test_it_scans_the_free_text_fields_in_the_documented_order() -> None:
    secret = "Bearer tok12345"
    producer = base(
        metadata={"zeta": f"{secret}", "alpha": f"{secret}", "count": 3, "flag": None},
        not_observed=[f"n {secret}"],
        observed=["clean", f"o {secret}"],
        attempt={"number": 2, "retry_reason": f"r {secret}"},
        result=f"res {secret}",
        input_summary=f"in {secret} and {secret}",
    )
    redacted, redactions = redact(producer)
    entry = {"reason": "secret", "removed_chars": 8}
    assert redactions == [
        {"field": "/input_summary", **entry},
        {"field": "/input_summary", **entry},
        {"field": "/result", **entry},
        {"field": "/observed/1", **entry},
        {"field": "/not_observed/0", **entry},
        {"field": "/attempt/retry_reason", **entry},
        {"field": "/metadata/alpha", **entry},
        {"field": "/metadata/zeta", **entry},
    ]
    assert redacted["input_summary"] == "in Bearer [REDACTED] and Bearer [REDACTED]"
    assert redacted["observed"] == ["clean", "o Bearer [REDACTED]"]
    assert redacted["metadata"] == {
        "zeta": "Bearer [REDACTED]",
        "alpha": "Bearer [REDACTED]",
        "count": 3,
        "flag": None,
    }


def test_it_never_touches_the_idempotency_key_operation_ref_ids_or_links() -> None:
    secret = "sk-abcdef1234567890"
    producer = base(
        workflow_id=secret,
        step_id=secret,
        idempotency_key=secret,
        operation_ref=secret,
        trace_id=secret,
        framework={"run_id": secret},
        subject={"type": "tool", "name": secret},
        links={"parent_receipt_id": "f5245d22-e650-49ae-8876-f1a335f309bc"},
    )
    assert redact(producer) == (producer, [])


def test_it_does_not_change_the_producer_it_was_given() -> None:
    producer = base(result="Bearer abc123def", observed=["Bearer abc123def"])
    before = copy.deepcopy(producer)
    redacted, _ = redact(producer, limit=20)
    assert producer == before
    assert redacted is not producer


def test_it_returns_an_empty_list_when_nothing_was_removed() -> None:
    producer = base(input_summary="x" * 4000, result="fine")
    assert redact(producer) == (producer, [])


def test_it_cuts_a_long_input_summary_to_the_default_limit_marker_included() -> None:
    redacted, redactions = redact(base(input_summary="x" * 5000))
    text = redacted["input_summary"]
    assert len(text) == 4000
    assert text == "x" * 3977 + "…[truncated 1023 chars]"
    assert redactions == [{"field": "/input_summary", "reason": "truncated", "removed_chars": 1023}]


def test_it_cuts_a_text_one_over_the_limit() -> None:
    redacted, redactions = redact(base(result="y" * 4001))
    assert redacted["result"] == "y" * 3979 + "…[truncated 22 chars]"
    assert redactions == [{"field": "/result", "reason": "truncated", "removed_chars": 22}]


@pytest.mark.parametrize(
    ("length", "kept", "removed"),
    [
        (101, 79, 22),  # a cut always removes more than the marker adds: two digits at least
        (178, 79, 99),  # 99 and 100 would both fit exactly: remove the least
        (179, 78, 101),  # a two-digit count would be 100: the marker grows by one
        (1077, 78, 999),
        (1078, 77, 1001),  # three digits would report 1000, which has four
    ],
)
def test_it_sizes_the_marker_for_the_count_it_reports(length: int, kept: int, removed: int) -> None:
    text, cut = truncate("z" * length, 100)
    assert (text, cut) == ("z" * kept + f"…[truncated {removed} chars]", removed)
    assert len(text) == 100


def test_it_leaves_a_text_at_the_limit_untouched() -> None:
    assert truncate("a" * 100, 100) == ("a" * 100, 0)


def test_it_counts_code_points_when_cutting() -> None:
    text, cut = truncate("\U0001f600" * 150, 100)
    assert (text, cut) == ("\U0001f600" * 79 + "…[truncated 71 chars]", 71)


def test_it_cuts_again_a_text_that_already_carries_a_marker() -> None:
    first, _ = truncate("a" * 500, 200)
    again, cut = truncate(first + "b" * 50, 100)
    assert (again, cut) == ("a" * 78 + "…[truncated 172 chars]", 172)


def test_it_leaves_a_marked_text_within_the_limit_alone() -> None:
    marked, _ = truncate("a" * 500, 100)
    assert redact(base(result=marked), limit=100) == (base(result=marked), [])


def test_it_refuses_a_limit_too_small_for_the_marker() -> None:
    with pytest.raises(ValueError):
        truncate("a" * 100, 20)


def test_it_redacts_first_and_cuts_what_is_left() -> None:
    token = "abc123def456" * 10  # 120 code points
    producer = base(input_summary=f"Bearer {token} " + "t" * 93, result="short")
    redacted, redactions = redact(producer, limit=100)
    # After redaction: "Bearer [REDACTED] " + 93 t = 111 code points; 11 over the limit.
    assert redacted["input_summary"] == "Bearer [REDACTED] " + "t" * 61 + "…[truncated 32 chars]"
    assert redactions == [
        {"field": "/input_summary", "reason": "secret", "removed_chars": 120},
        {"field": "/input_summary", "reason": "truncated", "removed_chars": 32},
    ]


def test_it_cuts_only_input_summary_and_result() -> None:
    long_text = "w" * 300
    producer = base(
        input_summary=long_text,
        result=long_text,
        observed=[long_text],
        not_observed=[long_text],
        attempt={"number": 1, "retry_reason": long_text},
        metadata={"note": long_text},
    )
    redacted, redactions = redact(producer, limit=100)
    assert [entry["field"] for entry in redactions] == ["/input_summary", "/result"]
    assert redacted["observed"] == [long_text]
    assert redacted["not_observed"] == [long_text]
    assert redacted["attempt"]["retry_reason"] == long_text
    assert redacted["metadata"] == {"note": long_text}


def test_it_puts_each_cut_right_after_that_fields_secrets() -> None:
    producer = base(
        input_summary="Bearer abc123def " + "i" * 200,
        result="AKIAIOSFODNN7EXAMPLE " + "r" * 200,
        observed=["Bearer zzz999yyy"],
    )
    _, redactions = redact(producer, limit=100)
    assert [(entry["field"], entry["reason"]) for entry in redactions] == [
        ("/input_summary", "secret"),
        ("/input_summary", "truncated"),
        ("/result", "secret"),
        ("/result", "truncated"),
        ("/observed/0", "secret"),
    ]


def test_it_scans_a_large_adversarial_text_quickly() -> None:
    # A lazy BEGIN...END regex would take seconds on this; the limit leaves ample slack. The
    # scan's own CPU time, not the wall clock: a loaded machine (the suite's other workers, a
    # neighbour's steal) made a 0.06 s scan take 3 s of wall time once.
    import time

    text = "-----BEGIN PRIVATE KEY-----;" * 9000 + "a://" * 10000 + "Bearer " * 10000
    started = time.process_time()
    redact_text(text)
    assert time.process_time() - started < 2.0


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(f"Authorization: Bearer\n  {JWT}", id="bearer then a line break"),
        pytest.param("Authorization: Bearer\r\nabc123def456", id="bearer then CRLF"),
        pytest.param(f"token {JWT[:30]}\n{JWT[30:]}", id="jwt wrapped inside a segment"),
        pytest.param(f"token {JWT[:36]}\n    {JWT[36:]}", id="jwt wrapped at a dot, indented"),
        pytest.param(f"token {JWT.replace('.', chr(10) + '.')}", id="jwt wrapped before dots"),
    ],
)
def test_a_token_split_across_a_line_break_is_still_redacted(text: str) -> None:
    redacted, removed = redact_text(text)
    assert redacted.count("[REDACTED]") == 1
    assert "eyJ" not in redacted
    assert "abc123def456" not in redacted
    assert len(removed) == 1


def test_a_line_break_after_the_word_bearer_in_prose_is_left_alone() -> None:
    assert redact_text("the bearer\nof bad news")[0] == "the bearer\nof bad news"


# Pieces of the texts above (the secrets, the words before them, their parts) and of ordinary
# text, to be strung together in any order.
_TEXTS = [str(case.values[0]) for case in REPLACED]
_PIECES = sorted({
    piece for text in _TEXTS for piece in (text, *text.split(), *text.split(":"))
} | {" ", "\n", ":", "=", "@", ".", "-", "_", "word", "1234567890abcdef"})


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=8))
def test_a_text_is_scanned_by_every_rule_whenever_one_could_match(pieces: list[str]) -> None:
    # find_secrets looks for the rules' triggers first and scans no further without one: each
    # rule's trigger is in every text the rule matches, so the answer is the full scan's.
    text = "".join(pieces)
    assert find_secrets(text) == redaction._scan(text)


@pytest.mark.parametrize(("text", "expected", "removed"), REPLACED)
def test_every_secret_holds_a_trigger(text: str, expected: str, removed: list[int]) -> None:
    assert redaction.triggered(text), text
    assert find_secrets(text) == redaction._scan(text) != []


# The look for a trigger: the triggers' words as one trie-shaped regex, over the lower-cased
# text.
_WORDS = ["aws", "aiza", "akia", "api_key", "apikey", "xox", "xoxb", "sk-", "s", "://"]


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6, unique=True),
    st.text(alphabet="aAksSwWxXoOpPiIyY_-:/ kz", max_size=30),
)
def test_the_words_regex_finds_a_text_exactly_when_it_holds_one_of_the_words(
    words: list[str], text: str
) -> None:
    import re

    found = re.search(redaction.words_regex(words), text) is not None
    assert found == any(word in text for word in words)


@pytest.mark.parametrize(("text", "expected", "removed"), REPLACED)
def test_a_secret_spelt_in_other_letter_cases_still_holds_a_trigger(
    text: str, expected: str, removed: list[int]
) -> None:
    # The rules that ignore case (Bearer, Authorization, password=...) match BEARER and
    # bEaReR too; a trigger looked for in the lower-cased text finds them all.
    for spelt in (text.upper(), text.swapcase()):
        if redaction._scan(spelt):
            assert redaction.triggered(spelt), spelt
            assert find_secrets(spelt) == redaction._scan(spelt)

"""Transparency log policies (receiptsite_client/verify/policy.py, c2sp.org/tlog-policy): the
specification's example read and its quorum evaluated, every rule of the format refused when
broken (with the line named), and the log keys a policy makes trusted."""

from __future__ import annotations

import itertools

import pytest
from receiptsite_client.verify import parse_policy
from receiptsite_client.verify.policy import NONE, trusted_log_keys
from witness_helpers import (
    ORIGIN,
    b64,
    jwk,
    key_id,
    log_vkey,
    new_key,
    raw,
    vkey,
    witness_vkey,
)

pytestmark = pytest.mark.unit

LOG = new_key()
KEYS = {name: new_key() for name in ("X1", "X2", "X3", "Y1", "Y2", "Y3", "Z")}


def w(name: str) -> str:
    """A witness vkey, named after the witness."""
    return witness_vkey(f"{name.lower()}.example/witness", KEYS[name])


# The specification's example, with keys of our own.
EXAMPLE = f"""log {log_vkey(LOG)}

witness X1 {w("X1")}
witness X2 {w("X2")}
witness X3 {w("X3")}
group X-witnesses 2 X1 X2 X3

witness Y1 {w("Y1")}
witness Y2 {w("Y2")}
witness Y3 {w("Y3")}
group Y-witnesses any Y1 Y2 Y3

group X-and-Y all X-witnesses Y-witnesses
quorum X-and-Y
"""


def test_it_reads_the_specifications_example() -> None:
    policy = parse_policy(EXAMPLE)
    assert policy.log_keys == [(ORIGIN, raw(LOG))]
    assert list(policy.witnesses) == ["X1", "X2", "X3", "Y1", "Y2", "Y3"]
    assert policy.witnesses["Y2"].key.raw == raw(KEYS["Y2"])
    assert policy.witnesses["Y2"].key.name == "y2.example/witness"
    assert policy.groups["X-witnesses"].threshold == 2
    assert policy.groups["Y-witnesses"].threshold == 1
    assert policy.groups["X-and-Y"].threshold == 2
    assert policy.quorum == "X-and-Y"


def test_its_quorum_needs_two_xs_and_one_y() -> None:
    policy = parse_policy(EXAMPLE)
    names = list(policy.witnesses)
    for count in range(len(names) + 1):
        for cosigned in itertools.combinations(names, count):
            xs = sum(name.startswith("X") for name in cosigned)
            ys = sum(name.startswith("Y") for name in cosigned)
            assert policy.met(cosigned) == (xs >= 2 and ys >= 1), cosigned


def test_a_quorum_short_by_one_is_not_met() -> None:
    policy = parse_policy(EXAMPLE)
    assert policy.met({"X1", "X2", "Y3"})
    assert not policy.met({"X1", "Y3"})
    assert not policy.met({"X1", "X2"})
    assert not policy.met({"X1", "X2", "Y3-not-a-witness"})


def test_it_describes_its_quorum_in_words() -> None:
    assert parse_policy(EXAMPLE).describe() == (
        "X-and-Y (all of: X-witnesses (2 of: X1, X2, X3), Y-witnesses (any of: Y1, Y2, Y3))"
    )


def test_quorum_none_is_predefined_and_needs_nobody() -> None:
    policy = parse_policy("quorum none\n")
    assert policy.quorum == NONE
    assert policy.met(set())
    assert policy.logs == () and dict(policy.witnesses) == {}


def test_a_single_witness_can_be_the_quorum() -> None:
    policy = parse_policy(f"witness Z {w('Z')}\nquorum Z\n")
    assert policy.met({"Z"})
    assert not policy.met(set())


def test_spaces_tabs_comments_blank_lines_and_urls_are_read_as_the_spec_says() -> None:
    text = (
        "# a comment\n"
        "   \t  \n"
        f"\t log \t{log_vkey(LOG)}   https://receipts.example.org/log  \n"
        "  # an indented comment\n"
        f"witness\tZ\t{w('Z')}\thttps://z.example/witness\n"
        "\n"
        "quorum Z"  # the last line may lack its newline
    )
    policy = parse_policy(text)
    assert policy.logs[0].url == "https://receipts.example.org/log"
    assert policy.witnesses["Z"].url == "https://z.example/witness"
    assert policy.quorum == "Z"


def test_numeric_thresholds_are_decimal_from_one_to_n() -> None:
    head = "".join(f"witness {n} {w(n)}\n" for n in ("X1", "X2", "X3"))
    for k, met_by_two in (("1", True), ("2", True), ("3", False), ("02", True)):
        policy = parse_policy(f"{head}group G {k} X1 X2 X3\nquorum G\n")
        assert policy.met({"X1", "X3"}) is met_by_two, k


def test_names_are_opaque_octets() -> None:
    """The name 0x4B ("K") is not the Kelvin sign U+212A, and non-UTF-8 octets are names."""
    text = (
        f"witness K {w('X1')}\n".encode()
        + f"witness \u212a {w('X2')}\n".encode()
        + b"witness \xff\xfe "
        + w("X3").encode()
        + b"\n"
        + b"group G all K "
        + "\u212a".encode()
        + b" \xff\xfe\n"
        + b"quorum G\n"
    )
    policy = parse_policy(text)
    assert len(policy.witnesses) == 3
    assert policy.met({"K", "\u212a", b"\xff\xfe".decode("utf-8", "surrogateescape")})
    assert not policy.met({"K", "\u212a"})


def test_its_log_keys_are_trusted_as_pinned_keys_for_their_origin_only() -> None:
    other = new_key()
    policy = parse_policy(
        f"log {log_vkey(LOG)}\nlog {log_vkey(other, 'other.example/log')}\nquorum none\n"
    )
    assert [k.raw for k in trusted_log_keys(policy, None, ORIGIN)] == [raw(LOG)]
    assert [k.status for k in trusted_log_keys(policy, None, ORIGIN)] == ["policy"]
    assert len(trusted_log_keys(policy, None, None)) == 2
    assert trusted_log_keys(policy, None, "elsewhere.example/log") == []
    # A keys document that marks the key compromised makes it so: stricter, never laxer.
    marked = {"keys": [jwk(LOG, "compromised", compromised_at="2026-06-01T00:00:00.000000Z")]}
    [key] = trusted_log_keys(policy, marked, ORIGIN)
    assert key.status == "compromised"


def _bad_policies() -> dict[str, tuple[bytes | str, int]]:
    """Each broken policy and the line its error must name."""
    x1, x2, x3 = (f"witness {n} {w(n)}\n" for n in ("X1", "X2", "X3"))
    same_key = f"witness X1b {witness_vkey('other.example/name', KEYS['X1'])}\n"
    mldsa = raw(KEYS["Z"]) * 41
    mldsa_vkey = f"z.example+{key_id('z.example', b'\x06', mldsa).hex()}+{b64(b'\x06' + mldsa)}"
    return {
        "an unknown keyword": (f"{x1}witnesses X2 {w('X2')}\nquorum X1\n", 2),
        "a keyword in capitals": (f"Witness X1 {w('X1')}\nquorum X1\n", 1),
        "a carriage return": (f"{x1}quorum X1\r\n", 2),
        "a NUL octet": (f"{x1}quorum\x00X1\n", 2),
        "a DEL octet": (f"{x1}# comment \x7f\nquorum X1\n", 2),
        "a vertical tab as whitespace": (f"{x1}quorum\x0bX1\n", 2),
        "a no-break space as whitespace": (f"{x1}quorum\u00a0X1\n", 2),
        "a quorum naming what is not defined": (f"{x1}quorum X2\n", 2),
        "a quorum naming what is defined after it": (f"quorum X1\n{x1}", 1),
        "a group naming what is defined after it": (f"{x1}group G any X1 X2\n{x2}quorum G\n", 2),
        "two quorum lines": (f"{x1}quorum X1\nquorum X1\n", 3),
        "no quorum line": (f"{x1}{x2}", 0),
        "a witness named none": (f"witness none {w('X1')}\nquorum none\n", 1),
        "a group named none": (f"{x1}group none any X1\nquorum X1\n", 2),
        "none as a group member": (f"{x1}group G any X1 none\nquorum G\n", 2),
        "a name defined twice": (f"{x1}witness X1 {w('X2')}\nquorum X1\n", 2),
        "a group named as a witness": (f"{x1}{x2}group X1 any X2\nquorum X1\n", 3),
        "a member listed twice in a group": (f"{x1}{x2}group G 2 X1 X1\nquorum G\n", 3),
        "a member listed in two groups": (
            f"{x1}{x2}{x3}group G any X1 X2\ngroup H any X1 X3\nquorum G\n",
            5,
        ),
        "a threshold of zero": (f"{x1}{x2}group G 0 X1 X2\nquorum G\n", 3),
        "a threshold above n": (f"{x1}{x2}group G 3 X1 X2\nquorum G\n", 3),
        "a signed threshold": (f"{x1}{x2}group G +1 X1 X2\nquorum G\n", 3),
        "a threshold with a fraction": (f"{x1}{x2}group G 1.0 X1 X2\nquorum G\n", 3),
        "a threshold in capitals": (f"{x1}{x2}group G ALL X1 X2\nquorum G\n", 3),
        "a group without members": (f"{x1}group G any\nquorum X1\n", 2),
        "two logs of one key": (
            f"log {log_vkey(LOG)}\nlog {log_vkey(LOG, 'b.example')}\nquorum none\n",
            2,
        ),  # fmt: skip
        "two witnesses of one key": (f"{x1}{same_key}quorum X1\n", 2),
        "an ML-DSA-44 witness key": (f"witness Z {mldsa_vkey}\nquorum Z\n", 1),
        "a log key of the cosignature type": (
            f"log {vkey(ORIGIN, LOG, b'\x04')}\nquorum none\n",
            1,
        ),  # fmt: skip
        "a witness key of the note type": (
            f"witness Z {vkey('z.example', KEYS['Z'], b'\x01')}\nquorum Z\n",
            1,
        ),  # fmt: skip
        "a log vkey whose key id is not its key's": (
            f"log {ORIGIN}+00000000+{b64(b'\x01' + raw(LOG))}\nquorum none\n",
            1,
        ),
        "a log line with two URLs": (f"log {log_vkey(LOG)} https://a https://b\nquorum none\n", 1),
        "a witness line with a trailing comment": (
            f"witness X1 {w('X1')} url # c\nquorum X1\n",
            1,
        ),  # fmt: skip
        "a witness line without a key": ("witness X1\nquorum none\n", 1),
        "a quorum line with two names": (f"{x1}{x2}quorum X1 X2\n", 3),
        "a vkey that is not UTF-8": (b"witness X1 \xff" + w("X1").encode() + b"\nquorum X1\n", 1),
        "a policy that is not UTF-8 text given as a string": ("quorum \ud800\n", 0),
    }


BAD = _bad_policies()


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_it_refuses_a_policy_that_breaks_a_rule_naming_the_line(
    case: tuple[bytes | str, int],
) -> None:
    text, line = case
    with pytest.raises(ValueError) as refused:
        parse_policy(text)
    if line:
        assert str(refused.value).startswith(f"line {line}: "), refused.value


def test_it_refuses_a_policy_line_with_an_unknown_keyword() -> None:
    with pytest.raises(ValueError, match=r"line 1: 'logs' is not a keyword"):
        parse_policy(f"logs {log_vkey(LOG)}\nquorum none\n")


def test_the_ml_dsa_refusal_says_why() -> None:
    text, _line = BAD["an ML-DSA-44 witness key"]
    with pytest.raises(ValueError, match="ML-DSA-44.*not support"):
        parse_policy(text)


def test_every_broken_policy_is_a_valid_one_but_for_its_fault() -> None:
    """The corrupted variants above come from valid policies: these are them, and they read."""
    x1, x2, x3 = (f"witness {n} {w(n)}\n" for n in ("X1", "X2", "X3"))
    for text in (
        f"{x1}{x2}quorum X1\n",
        f"{x1}{x2}group G 2 X1 X2\nquorum G\n",
        f"{x1}{x2}{x3}group G any X1 X2\ngroup H any G X3\nquorum H\n",
        f"log {log_vkey(LOG)}\nlog {log_vkey(new_key(), 'b.example')}\nquorum none\n",
        f"witness X1 {w('X1')} url\nquorum X1\n",
        f"log {log_vkey(LOG)} https://a\nquorum none\n",
    ):
        parse_policy(text)

"""Trust policies (c2sp.org/tlog-policy): parsing by the spec's rules, and the quorum."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from receiptsite.integrity import cosignature, note, policy
from receiptsite.integrity.keys import public_raw

pytestmark = pytest.mark.unit


def _vkey(seed: int, name: str) -> str:
    raw = public_raw(Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32))
    return cosignature.witness_vkey(name, raw)


LOG = note.verifier_key(
    "log.example/receipts", public_raw(Ed25519PrivateKey.from_private_bytes(bytes([9]) * 32))
)
X1, X2, X3 = (_vkey(i, f"x{i}.example/w") for i in (1, 2, 3))
Y1, Y2, Y3 = (_vkey(i, f"y{i}.example/w") for i in (4, 5, 6))

# The example of the specification, with real keys.
EXAMPLE = f"""# the spec's example
log {LOG}

witness X1 {X1}
witness X2 {X2} https://x2.example/
witness X3 {X3}
group X-witnesses 2 X1 X2 X3

\twitness Y1 {Y1}\t
witness Y2 {Y2}
witness Y3 {Y3}
group Y-witnesses any Y1 Y2 Y3

group X-and-Y all X-witnesses Y-witnesses
quorum X-and-Y
"""


def test_the_specifications_example_reads_as_it_says() -> None:
    read = policy.parse(EXAMPLE.encode())
    assert [log.origin for log in read.logs] == ["log.example/receipts"]
    assert set(read.witnesses) == {"X1", "X2", "X3", "Y1", "Y2", "Y3"}
    assert read.witnesses["X2"].url == "https://x2.example/"
    assert read.groups["X-witnesses"].threshold == 2
    assert read.groups["Y-witnesses"].threshold == 1
    assert read.groups["X-and-Y"].threshold == 2
    assert read.quorum == "X-and-Y"


@pytest.mark.parametrize(
    ("cosigned", "met"),
    [
        ({"X1", "X2", "Y3"}, True),
        ({"X1", "X3", "Y1", "Y2"}, True),
        ({"X1", "Y1", "Y2", "Y3"}, False),  # one X short
        ({"X1", "X2", "X3"}, False),  # no Y
        (set(), False),
    ],
)
def test_the_quorum_needs_two_xs_and_a_y(cosigned: set[str], met: bool) -> None:
    assert policy.parse(EXAMPLE.encode()).satisfied(cosigned) is met


def test_a_threshold_is_any_decimal_from_1_to_n() -> None:
    read = policy.parse(f"witness A {X1}\nwitness B {X2}\ngroup G 02 A B\nquorum G\n".encode())
    assert read.groups["G"].threshold == 2


def test_quorum_none_needs_nobody_and_a_single_witness_needs_itself() -> None:
    assert policy.parse(b"quorum none\n").satisfied(set())
    single = policy.parse(f"witness A {X1}\nquorum A\n".encode())
    assert single.satisfied({"A"}) and not single.satisfied(set())


def test_the_normalised_text_reads_back_as_the_same_policy_with_other_logs() -> None:
    read = policy.parse(EXAMPLE.encode())
    other_log = note.verifier_key("other.example/log", bytes(32))
    text = read.text([other_log])
    assert "#" not in text and "https://" not in text
    again = policy.parse(text.encode())
    assert [log.vkey for log in again.logs] == [other_log]
    assert again.groups == read.groups and again.quorum == read.quorum
    assert {n: w.key for n, w in again.witnesses.items()} == {
        n: w.key for n, w in read.witnesses.items()
    }


def test_a_policy_finds_the_witness_a_cosignature_line_names() -> None:
    key = Ed25519PrivateKey.from_private_bytes(bytes([2]) * 32)
    line = cosignature.parse_line(
        cosignature.cosign("o\n1\n" + "A" * 43 + "=\n", "x2.example/w", key, 5)
    )
    assert line is not None
    witness = policy.parse(EXAMPLE.encode()).witness_for(line)
    assert witness is not None and witness.name == "X2"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the policy has no quorum line"),
        (f"witness A {X1}\n", "the policy has no quorum line"),
        ("quorum A\n", "line 1: 'A' is not defined"),
        ("quorum none\nquorum none\n", "line 2: a policy has exactly one quorum line"),
        (f"witness A {X1}\nwitness A {X2}\nquorum A\n", "line 2: 'A' is defined twice"),
        (f"witness A {X1}\nwitness B {X1}\nquorum A\n", "line 2: this witness key is listed twice"),
        (f"log {LOG}\nlog {LOG}\nquorum none\n", "line 2: this log key is listed twice"),
        (f"witness none {X1}\nquorum none\n", "line 1: 'none' is predefined"),
        (f"witness A {X1}\ngroup G any A none\nquorum G\n", "line 2: 'none' cannot be a group"),
        (f"witness A {X1}\ngroup G any A A\nquorum G\n", "line 2: 'A' is a group member twice"),
        (
            f"witness A {X1}\nwitness B {X2}\ngroup G any A\ngroup H any A B\nquorum H\n",
            "line 4: 'A' is a group member twice",
        ),
        (f"group G any A\nwitness A {X1}\nquorum G\n", "line 1: 'A' is not defined"),
        (f"witness A {X1}\ngroup G 2 A\nquorum G\n", "line 2: the threshold of group 'G'"),
        (f"witness A {X1}\ngroup G 0 A\nquorum G\n", "line 2: the threshold of group 'G'"),
        (f"witness A {X1}\ngroup G 1.0 A\nquorum G\n", "line 2: the threshold of group 'G'"),
        (f"witness A {X1}\ngroup G any\nquorum G\n", "line 2: a group line is"),
        ("witness A\nquorum A\n", "line 1: a witness line is"),
        (f"witness A {LOG}\nquorum A\n", "line 1: the key of witness 'A' is not usable"),
        (f"log {X1}\nquorum none\n", "line 1: the log key is not usable"),
        ("frobnicate\nquorum none\n", "line 1: unknown keyword 'frobnicate'"),
        ("quorum none\r\n", "line 1: holds a control character"),
        ("# ok\nquorum\x00none\n", "line 2: holds a control character"),
    ],
)
def test_a_bad_policy_names_its_first_bad_line(text: str, problem: str) -> None:
    with pytest.raises(policy.PolicyError) as raised:
        policy.parse(text.encode())
    assert str(raised.value).startswith(problem), str(raised.value)


def test_a_name_is_opaque_bytes_in_any_encoding() -> None:
    read = policy.parse(
        f"witness \u212a {X1}\nwitness K {X2}\ngroup G all K \u212a\nquorum G\n".encode()
    )
    assert set(read.witnesses) == {"\u212a", "K"}
    assert not read.satisfied({"K"})

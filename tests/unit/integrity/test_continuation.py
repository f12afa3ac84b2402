"""log-continuation/v1 (integrity/continuation.py): the statement the site signs and the one
the client reads (receiptsite_client/verify/continuation.py) are the same text, every malformed
variant is refused by both, and the client follows a kept checkpoint only where the statement
says the tree was kept."""

from __future__ import annotations

import pytest
from receiptsite_client.verify.continuation import Statement, follow, parse_statement

from receiptsite.integrity.continuation import HEADER, Continuation

pytestmark = pytest.mark.unit

ONE = Continuation(
    ended="h.example/receipts", signed_size=9, signed_root=b"\x01" * 32, kept_size=6,
    kept_root=b"\x02" * 32, continues_as="h.example/receipts/2",
)  # fmt: skip


def test_the_site_and_the_client_read_one_statement_alike() -> None:
    body = ONE.body()
    assert body.startswith(f"{HEADER}\nended h.example/receipts\nsigned 9 ")
    assert Continuation.parse(body) == ONE
    read = parse_statement(body)
    assert (read.ended, read.signed_size, read.signed_root, read.kept_size, read.kept_root,
            read.continues_as) == (ONE.ended, 9, ONE.signed_root, 6, ONE.kept_root,
                                   ONE.continues_as)  # fmt: skip
    assert ONE.lost == 3


@pytest.mark.parametrize(
    "change",
    [
        lambda body: body.replace(HEADER, "receiptsite log-continuation/v2"),
        lambda body: body.replace("signed 9", "signed 09"),
        lambda body: body.replace("kept 6", "kept -6"),
        lambda body: body.replace("ended ", "ended  "),
        lambda body: body + "extra\n",
        lambda body: body[:-1],
        lambda body: body.replace("continues-as", "continued-as"),
        lambda body: body.replace("AQEB", "AQE"),  # a root that is not 32 bytes
    ],
)
def test_a_malformed_statement_is_refused_by_both(change: object) -> None:
    body = change(ONE.body())  # type: ignore[operator]
    with pytest.raises(ValueError):
        Continuation.parse(body)
    with pytest.raises(ValueError):
        parse_statement(body)


def test_a_log_cannot_continue_as_itself_nor_under_a_name_with_spaces() -> None:
    with pytest.raises(ValueError):
        Continuation(**{**ONE.__dict__, "continues_as": ONE.ended})
    with pytest.raises(ValueError):
        Continuation(**{**ONE.__dict__, "continues_as": "a b"})


def test_the_client_follows_a_kept_tree_and_refuses_a_lost_one() -> None:
    chain = {ONE.ended: parse_statement(ONE.body())}
    second = Statement("h.example/receipts/2", 20, b"\x03" * 32, 4, b"\x04" * 32, "h/3")
    chain[second.ended] = second
    assert follow(ONE.ended, 6, chain, ONE.continues_as)[0]
    assert follow(ONE.ended, 3, chain, "h/3")[0]  # kept by both
    same, said = follow(ONE.ended, 5, chain, "h/3")  # kept by the first, lost by the second
    assert not same and "which the site says it lost" in said
    same, said = follow(ONE.ended, 7, chain, ONE.continues_as)
    assert not same and "which the site says it lost" in said
    same, said = follow(ONE.ended, 10, chain, ONE.continues_as)
    assert not same and "more than the site says it signed" in said
    same, said = follow("elsewhere/receipts", 1, chain, ONE.continues_as)
    assert not same and "says of no log" in said

"""c2sp.org/tlog-proof texts (receiptsite.integrity.tlogproof), against the published examples
of the format's Go implementation (filippo.io/torchwood, FormatProof) as its TypeScript port
states them, and against corrupted variants of each."""

from __future__ import annotations

import hashlib

import pytest

from receiptsite.integrity import tlogproof
from receiptsite.integrity.encoding import b64

pytestmark = pytest.mark.unit

H1 = hashlib.sha256(b"hash1").digest()
H2 = hashlib.sha256(b"hash2").digest()
EXTRA = b"extra information"

# (index, hashes, checkpoint, extra, text)
PUBLISHED = [
    (5, [H1, H2], "test checkpoint\n", None,
     f"c2sp.org/tlog-proof@v1\nindex 5\n{b64(H1)}\n{b64(H2)}\n\ntest checkpoint\n"),
    (10, [H1], "checkpoint data\n", EXTRA,
     f"c2sp.org/tlog-proof@v1\nextra {b64(EXTRA)}\nindex 10\n{b64(H1)}\n\ncheckpoint data\n"),
    (0, [], "checkpoint\n", None, "c2sp.org/tlog-proof@v1\nindex 0\n\ncheckpoint\n"),
]  # fmt: skip


@pytest.mark.parametrize(("index", "hashes", "checkpoint", "extra", "text"), PUBLISHED)
def test_the_published_examples_format_and_parse(
    index: int, hashes: list[bytes], checkpoint: str, extra: bytes | None, text: str
) -> None:
    assert tlogproof.format_proof(index, hashes, checkpoint, extra) == text
    assert tlogproof.parse_proof(text) == tlogproof.TlogProof(index, hashes, checkpoint, extra)


def test_a_signed_checkpoint_with_its_own_blank_line_is_kept_verbatim() -> None:
    checkpoint = "example.com/log\n3\n" + b64(H1) + "\n\n\u2014 example.com/log AAAA\n"
    text = tlogproof.format_proof(2, [H1, H2], checkpoint)
    assert tlogproof.parse_proof(text).checkpoint == checkpoint


VALID = PUBLISHED[0][4]

CORRUPTED = {
    "not a proof": "not a proof at all",
    "the header alone": "c2sp.org/tlog-proof@v1\n",
    "another version": VALID.replace("@v1", "@v2"),
    "an index that is no number": VALID.replace("index 5", "index notanumber"),
    "an index with a leading zero": VALID.replace("index 5", "index 05"),
    "a negative index": VALID.replace("index 5", "index -5"),
    "no index line": VALID.replace("index 5\n", ""),
    "extra that is no base64": VALID.replace("index 5", "extra !!notbase64!!\nindex 5"),
    "a short hash": VALID.replace(b64(H1), b64(H1[:31])),
    "a hash that is no base64": VALID.replace(b64(H1), b64(H1)[:-2] + "*="),
    "no blank line before the checkpoint": VALID.replace("\n\n", "\n"),
    "no checkpoint": VALID.split("\n\n")[0] + "\n\n",
    "too many hashes": VALID.replace(f"{b64(H1)}\n", f"{b64(H1)}\n" * 65),
}


@pytest.mark.parametrize("text", CORRUPTED.values(), ids=CORRUPTED.keys())
def test_a_corrupted_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        tlogproof.parse_proof(text)


def test_a_proof_is_not_formatted_from_bad_parts() -> None:
    for index, hashes, checkpoint in ((-1, [H1], "c\n"), (0, [H1[:31]], "c\n"), (0, [], "")):
        with pytest.raises(ValueError):
            tlogproof.format_proof(index, hashes, checkpoint)

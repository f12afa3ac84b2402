"""Secrets out, long texts cut: the patterns a receiptsite recognises, and its truncation.

One source for the site and for this client: the site redacts free text and refuses
identifiers that look like secrets with these very patterns, and a producer redacts with them
before anything is written to its outbox or sent. Standard library only.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

REDACTED: Final = "[REDACTED]"

# A token wrapped onto the next line (a log line cut at 76 columns, a pasted header): one line
# break, with the next line's indentation, may stand inside a JWT or after "Bearer".
_BREAK: Final = r"(?:\r?\n[ \t]*)"
_WRAPPED: Final = rf"[A-Za-z0-9_-]+(?:{_BREAK}[A-Za-z0-9_-]+)?"
_DOT: Final = rf"{_BREAK}?\.{_BREAK}?"


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    # Words one of which every match of `pattern` holds, in lower case (a match may spell
    # them in any case): a text holding no rule's trigger holds no secret, and is looked at
    # once (find_secrets) instead of scanned by every rule.
    trigger: tuple[str, ...]
    # The named group "secret" is what gets replaced; without it, the whole match is.
    accept: Callable[[str], bool] | None = None

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        for match in self.pattern.finditer(text):
            group = "secret" if "secret" in self.pattern.groupindex else 0
            start, end = match.span(group)
            if self.accept is None or self.accept(text[start:end]):
                yield start, end


def _looks_random(token: str) -> bool:
    # Real tokens are long or mix in digits and punctuation; "bearer of bad news" is prose.
    return len(token) >= 8 or not token.isalpha()


def _has_digit_or_is_long(token: str) -> bool:
    # "sk-learn-tutorial" is prose; random keys carry digits or are long.
    return len(token) >= 20 or any(c.isdigit() for c in token)


def _not_a_placeholder(value: str) -> bool:
    # "********" is a mask someone already applied, not a secret.
    return len(set(value)) > 1


_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# What an unterminated block (cut off by the producer) can hold: base64, headers, and the line
# breaks written out as \n when the key sits inside an escaped JSON string.
_PEM_BODY = re.compile(r"[A-Za-z0-9+/=\s\\:,.-]*")


def _pem_blocks(text: str) -> Iterator[tuple[int, int]]:
    """Private-key PEM blocks, BEGIN to END, whole.

    Done by hand rather than with one regex: a lazy "BEGIN.*?END" rescans the rest of the
    text for every BEGIN, which a body full of BEGINs turns into seconds of work.
    """
    ends = [(match.start(), match.end()) for match in _PEM_END.finditer(text)]
    end_starts = [start for start, _ in ends]
    covered = 0
    for begin in _PEM_BEGIN.finditer(text):
        if begin.start() < covered:
            continue  # inside the block found before: one secret, not two
        i = bisect.bisect_left(end_starts, begin.end())
        if i < len(ends):
            stop = ends[i][1]
        else:
            body = _PEM_BODY.match(text, begin.end())
            stop = body.end() if body else begin.end()
        covered = stop
        if text.find(REDACTED, begin.start(), stop) == -1:
            yield begin.start(), stop


# Lookbehinds such as (?<![A-Za-z0-9_]) keep a pattern from starting inside a longer word,
# and keep the scan linear: a pattern is only tried where a word starts.
_RULES: Final = (
    # Bearer tokens (RFC 6750 b64token); the word "Bearer " stays.
    _Rule(
        re.compile(
            r"(?<![A-Za-z0-9_])(?i:bearer)(?:[ \t]+|[ \t]*\r?\n[ \t]*)"
            r"(?P<secret>[A-Za-z0-9\-._~+/]*[A-Za-z0-9\-_~+/]=*)"
        ),
        trigger=("bearer",),
        accept=_looks_random,
    ),
    # Basic credentials in an Authorization header.
    _Rule(
        re.compile(
            r"(?i:authorization)[\"']?[ \t]*[:=][ \t]*[\"']?(?i:basic)[ \t]+"
            r"(?P<secret>[A-Za-z0-9+/]+=*)"
        ),
        trigger=("authorization",),
    ),
    # OpenAI/Anthropic/Stripe-style keys: sk-..., sk-proj-..., sk_live_..., rk_live_...
    _Rule(
        re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk)[-_][A-Za-z0-9_-]{10,}"),
        trigger=("sk-", "sk_", "rk-", "rk_"),
        accept=lambda key: _has_digit_or_is_long(key[3:]),
    ),
    # AWS access key ids, and a secret access key where it is named as one.
    _Rule(
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"), ("akia", "asia")
    ),
    _Rule(
        re.compile(
            r"(?i:aws_?secret(?:_?access_?key)?)[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        trigger=("aws",),
    ),
    # The password in scheme://user:password@host.
    _Rule(
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://"
            r"[^\s:/?#@\[\]]*:(?P<secret>[^\s/?#@\[\]]+)@"
        ),
        trigger=("://",),
    ),
    # JWTs: three base64url segments, the first a JSON header ("eyJ" is base64 of '{"').
    _Rule(
        re.compile(rf"(?<![A-Za-z0-9_-])eyJ{_WRAPPED}{_DOT}{_WRAPPED}{_DOT}{_WRAPPED}"), ("eyj",)
    ),
    # GitHub tokens.
    _Rule(
        re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,})"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    # Slack tokens.
    _Rule(re.compile(r"(?<![A-Za-z0-9_])(?:xox[abposre]|xapp)-[A-Za-z0-9-]{10,}"), ("xox", "xapp")),
    # Google API keys.
    _Rule(re.compile(r"(?<![A-Za-z0-9_])AIza[0-9A-Za-z_-]{35}"), ("aiza",)),
    # The value of an assignment whose name says it is secret: password=..., api_key: ...
    _Rule(
        re.compile(
            r"(?<![A-Za-z0-9])(?i:password|passwd|client_secret|secret_key"
            r"|api[_-]?key|api[_-]?token|access[_-]?token|auth[_-]?token|refresh[_-]?token)"
            r"[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?P<secret>[^\s\"'\[\]<>,;&]{6,})"
        ),
        trigger=("passw", "secret", "api_key", "api-key", "apikey", "token"),
        accept=_not_a_placeholder,
    ),
)


_FINDERS: Final[tuple[Callable[[str], Iterator[tuple[int, int]]], ...]] = (
    _pem_blocks,
    *(rule.spans for rule in _RULES),
)


def words_regex(words: Iterable[str]) -> str:
    """A regex matching any of `words`, written as the trie of their letters
    (`a(?:iza|kia|ws)` for aiza, akia and aws): the regex engine tries the alternatives of a
    plain `aiza|akia|aws` one by one at every position of the text, a trie's once per letter
    (over the free texts of a receipt, about 80 µs of scan became 18)."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for letter in word:
            node = node.setdefault(letter, {})
        node[""] = {}  # a word ends here

    def pattern(node: dict[str, Any]) -> str:
        branches = [
            re.escape(letter) + pattern(rest) for letter, rest in sorted(node.items()) if letter
        ]
        if not branches:
            return ""
        if "" in node:  # a word ends here and a longer one goes on
            return f"(?:{'|'.join(branches)})?"
        return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"

    return pattern(trie)


# Any finder's trigger (a PEM block's is its BEGIN line), looked for in the lower-cased text.
_TRIGGER_WORDS: Final = ("-----begin ", *(word for rule in _RULES for word in rule.trigger))
_TRIGGERS: Final = re.compile(words_regex(_TRIGGER_WORDS))


def triggered(text: str) -> bool:
    """Whether `text` holds a trigger: the one cheap look find_secrets takes at every text."""
    return _TRIGGERS.search(text.lower()) is not None


def find_secrets(text: str) -> list[tuple[int, int]]:
    """Spans of the secrets in `text`, in order; overlapping finds count as one secret."""
    if not triggered(text):
        return []  # most texts: one look, not one scan per rule
    return _scan(text)


def _scan(text: str) -> list[tuple[int, int]]:
    """find_secrets without its first look for a trigger: every finder over the whole text."""
    found = sorted(span for find in _FINDERS for span in find(text) if span[0] < span[1])
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    # Text a client already redacted is left alone.
    return [(start, end) for start, end in merged if text[start:end] != REDACTED]


def redact_text(text: str) -> tuple[str, list[int]]:
    """`text` with each secret replaced by [REDACTED], and each secret's length."""
    pieces: list[str] = []
    removed: list[int] = []
    position = 0
    for start, end in find_secrets(text):
        pieces += [text[position:start], REDACTED]
        removed.append(end - start)
        position = end
    pieces.append(text[position:])
    return "".join(pieces), removed


DEFAULT_LIMIT: Final = 4000


def truncation_marker(removed: int) -> str:
    return f"…[truncated {removed} chars]"


def truncate(text: str, limit: int) -> tuple[str, int]:
    """Cut `text` to `limit` code points, marker included; returns it and the count removed.

    The marker's own length depends on the count it reports, so try each digit count until
    the two agree (one always does: each extra digit removes one more code point).
    """
    if len(text) <= limit:
        return text, 0
    for digits in range(1, len(str(len(text))) + 1):
        keep = limit - len(truncation_marker(10 ** (digits - 1)))
        if keep < 0:
            break
        removed = len(text) - keep
        if len(str(removed)) == digits:
            return text[:keep] + truncation_marker(removed), removed
    raise ValueError(f"a limit of {limit} leaves no room for the truncation marker")

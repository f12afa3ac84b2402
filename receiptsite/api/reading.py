"""Reading a request to a JSON route: the body (checked in the contract's order: 415, 413,
400) and the query parameters every tenant list reads alike (a bad one is a 400 naming it):
whole numbers, no U+0000, and the keyset page (`since`, `until`, `limit`, `cursor`). The
receipts list and the audit log (receiptsite/audit/views.py) both read theirs here; OTLP
ingest (api/otlp.py) reads its body's bytes, bounded alike."""

from __future__ import annotations

from typing import Any

from django.core import signing as django_signing
from django.core.exceptions import RequestDataTooBig
from django.db.models import F, QuerySet
from django.http import HttpRequest, QueryDict

from receiptsite.api.strictjson import BadJSON, parse_json
from receiptsite.lib.rfc3339 import parse_rfc3339
from receiptsite.problems import Problem


def too_big(limit: int) -> Problem:
    return Problem(
        413,
        "payload-too-large",
        "The body is too large",
        f"The body is over the limit of {limit} bytes.",
    )


def read_json(request: HttpRequest, limit: int) -> object:
    """The parsed body, checked in the contract's order: 415, 413, 400 (each a Problem)."""
    charset = request.content_params.get("charset") if request.content_params else None
    if request.content_type != "application/json" or (
        charset is not None and charset.lower() not in ("utf-8", "utf8")
    ):
        raise Problem(
            415,
            "unsupported-media-type",
            "The body must be JSON",
            "Send the body as `Content-Type: application/json` (UTF-8).",
        )
    body = read_body(request, limit)
    try:
        return parse_json(body)
    except BadJSON as error:
        raise Problem(400, "malformed-json", "The body is not valid JSON", error.message) from None


def read_body(request: HttpRequest, limit: int) -> bytes:
    """The body's bytes, at most `limit` of them: a larger body is Problem 413, whether it says
    so in Content-Length, trips Django's own limit (RequestDataTooBig) or, chunked, just goes
    on. JSON routes read it through read_json; POST /v1/traces (api/otlp.py) reads its
    protobuf or JSON, perhaps gzipped, here."""
    if not request.META.get("CONTENT_LENGTH") and request.META.get("wsgi.input_terminated"):
        # A body without Content-Length (`Transfer-Encoding: chunked`): Django reads
        # CONTENT_LENGTH bytes only, so it would see none. The server (gunicorn) ends the
        # stream where the body ends; read at most one byte past the limit, so that an
        # oversize body is refused without being read whole.
        body = _read_to_end(request.META["wsgi.input"], limit + 1)
    else:
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            raise too_big(limit)
        try:
            body = request.body
        except RequestDataTooBig:
            raise too_big(limit) from None
    if len(body) > limit:
        raise too_big(limit)
    return body


def _read_to_end(stream: Any, most: int) -> bytes:
    """Up to `most` bytes of a WSGI input stream that the server terminates."""
    chunks: list[bytes] = []
    left = most
    while left > 0:
        chunk = stream.read(min(left, 64 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- query parameters ------------------------------------------------------------------


def bad_parameter(name: str, message: str) -> Problem:
    return Problem(
        400,
        "bad-query-parameter",
        "A query parameter is not valid",
        f"`{name}` {message}.",
        errors=[{"field": name, "message": message}],
    )


def whole_number(text: str) -> int | None:
    """A query parameter of ASCII digits as an int, else None. str.isdigit() alone also takes
    "²" and "٣" (int() then fails or reads a non-ASCII digit), and int() refuses over 4,300
    digits: either was a 500."""
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        return None
    return int(text)


def refuse_nul(params: QueryDict) -> None:
    """A tenant list's parameters never hold U+0000 (the databases cannot compare it)."""
    for name, values in params.lists():
        if any("\x00" in value for value in values):
            raise bad_parameter(name, "must not contain U+0000")


def keyset_page(
    query: QuerySet[Any], params: QueryDict, *, at: str, salt: str
) -> tuple[list[Any], str | None]:
    """The rest of a tenant list, as every one reads it: `since` (inclusive) and `until`
    (exclusive) on the timestamp field `at`, `limit` 1..200 (default 50), and a `cursor`
    signed with `salt`; the page, newest first by primary key, and the next page's cursor."""
    windowed = False
    for name, lookup in (("since", f"{at}__gte"), ("until", f"{at}__lt")):
        text = params.get(name)
        if text:
            windowed = True
            try:
                # An unencoded "+" in a query string arrives as a space: take it back.
                when = parse_rfc3339(text.replace(" ", "+"))
            except ValueError:
                raise bad_parameter(name, "must be an RFC 3339 date-time with an offset") from None
            query = query.filter(**{lookup: when})
    limit = whole_number(params.get("limit") or "50")
    if limit is None or not 1 <= limit <= 200:
        raise bad_parameter("limit", "must be a whole number from 1 to 200")
    cursor = params.get("cursor")
    if cursor:
        try:
            after = int(django_signing.loads(cursor, salt=salt))
        except (django_signing.BadSignature, ValueError, TypeError):
            raise bad_parameter("cursor", "is not a cursor this site handed out") from None
        query = query.filter(pk__lt=after)
    if windowed:
        # The page's keys first, newest first by `pk + 0`: the same order, but one the primary
        # key's index cannot give, so that PostgreSQL finds the window's rows by the
        # `(tenant, at)` index and sorts only their keys, instead of walking the primary key
        # back from the newest row and filtering on `at` (a window far in the past read nearly
        # every row: 8 s at 10^6 receipts, bench/README.md). Then those rows, whole.
        keys = query.order_by((F("pk") + 0).desc()).values("pk")[: limit + 1]
        query = query.filter(pk__in=keys)
    rows = list(query.order_by("-pk")[: limit + 1])
    page = rows[:limit]
    next_cursor = django_signing.dumps(page[-1].pk, salt=salt) if len(rows) > limit else None
    return page, next_cursor

"""One HTTP request to a receiptsite, and the retry policy around it. Standard library only.

Retried: no answer at all (refused, reset, timed out), 5xx, 429 and 408, with exponential
backoff and jitter, never sooner than the site's `Retry-After`, and never past the caller's
deadline. Anything else is final. Redirects are not followed: a POST turned into a GET by a
301 would lose its body, so a redirect is reported as a problem to fix in the site's URL.
"""

from __future__ import annotations

import http.client
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.message import Message
from email.utils import parsedate_to_datetime
from typing import Any, Final

RETRY_STATUSES: Final = frozenset({408, 429})
BACKOFF_FIRST: Final = 0.2  # seconds before the first retry
BACKOFF_CAP: Final = 5.0  # the longest wait between two retries, Retry-After aside
MIN_ATTEMPT_TIME: Final = 0.05  # seconds: less left than this and no new attempt starts


@dataclass(frozen=True)
class Answer:
    """What one request got: an HTTP answer (status, headers, parsed JSON body if any), or
    none (`status` None, `network_error` saying why)."""

    status: int | None
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    network_error: str | None = None

    @property
    def retryable(self) -> bool:
        if self.status is None:
            return True
        return self.status >= 500 or self.status in RETRY_STATUSES

    @property
    def replayed(self) -> bool:
        return self.headers.get("idempotent-replayed", "").strip().lower() == "true"

    def retry_after(self) -> float | None:
        """The site's Retry-After in seconds (delta-seconds or an HTTP date), if any."""
        value = self.headers.get("retry-after", "").strip()
        if not value:
            return None
        if value.isdigit():
            return float(value)
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, when.timestamp() - time.time())

    def describe(self) -> str:
        """The problem in one line: `network: ...`, or `<status> <slug>: <detail>` followed by
        each of the site's `errors` (`/field: message`)."""
        if self.status is None:
            return f"network: {self.network_error}"
        body = self.body if isinstance(self.body, dict) else {}
        slug = str(body.get("type", "")).rsplit("/", 1)[-1]
        text = f"{self.status} {slug}".rstrip() if slug else f"{self.status}"
        detail = body.get("detail") or body.get("title")
        if 300 <= self.status < 400:
            detail = (
                f"the site redirected to {self.headers.get('location', '?')}; give the "
                f"address that serves the API as site_url"
            )
        elif self.status == 429 and self.retry_after() is not None:
            detail = f"{detail or 'too many requests'} (Retry-After: {self.retry_after():g} s)"
        if detail:
            text += f": {detail}"
        errors = body.get("errors")
        if isinstance(errors, list) and errors:
            text += "; " + "; ".join(
                f"{e.get('field', '')}: {e.get('message', '')}" if isinstance(e, dict) else str(e)
                for e in errors
            )
        if body.get("id") and body.get("url"):
            text += f" (the key's receipt: {body['url']})"
        if not body and self.status >= 400:
            text += " (no problem document in the answer)"
        return text


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER: Final = urllib.request.build_opener(_NoRedirect)


def request(
    method: str,
    url: str,
    *,
    api_key: str | None,
    body: bytes | None,
    timeout: float,
    user_agent: str,
) -> Answer:
    """One HTTP request; never raises for the network or an HTTP status."""
    headers = {"Accept": "application/json", "User-Agent": user_agent}
    if body is not None:
        headers["Content-Type"] = "application/json"
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    prepared = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with _OPENER.open(prepared, timeout=timeout) as answer:
            return _answer(answer.status, answer.headers, answer.read())
    except urllib.error.HTTPError as error:
        with error:
            try:
                raw = error.read()
            except OSError:
                raw = b""
            return _answer(error.code, error.headers, raw)
    except urllib.error.URLError as error:
        return Answer(None, network_error=str(error.reason))
    except (OSError, ValueError) as error:  # timeouts and resets while reading
        return Answer(None, network_error=str(error) or type(error).__name__)
    except http.client.HTTPException as error:  # a broken or half-read answer: retried
        return Answer(None, network_error=f"{type(error).__name__}: {error}")


def _answer(status: int, headers: Message, raw: bytes) -> Answer:
    lowered = {name.lower(): value for name, value in headers.items()}
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    return Answer(status, lowered, body)


def backoff(retry: int, retry_after: float | None) -> float:
    """Seconds to wait before retry number `retry` (1, 2, ...): exponential with jitter,
    and never less than the site's Retry-After."""
    wait = min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (retry - 1)) * random.uniform(0.5, 1.0)
    return max(wait, retry_after or 0.0)

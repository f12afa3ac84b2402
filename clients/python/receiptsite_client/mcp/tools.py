"""What each receipt-mcp tool does, without the protocol: plain functions over the producers'
Client and the tenant API, each returning an Answer (a JSON object, and whether it is a tool
error). server.py turns them into MCP tools.

Errors are problem objects (RFC 9457: `type`, `title`, `status`, `detail`, and `errors`, a
list of `{field, message}`, where there is one): the site's own, as it answered it, whenever
the site answered one; otherwise one of this server's, whose `type` is `urn:receipt-mcp:<slug>`
and whose `status` is null (no HTTP answer said it):

    site-unreachable        no answer from the site (refused, reset, timed out)
    unexpected-answer       an answer that is not the JSON the API promises
    invalid-arguments       arguments the tool cannot take (each in `errors`)
    not-sent                the client refused to send the document (a secret in an identifier)
    idempotency-key-reused  the outbox holds another document under this idempotency key
    could-not-check         verify_receipt could not load its target (a file, a bad answer)
    no-receipts             handoff: the outbox holds no receipt of this workflow
    unknown-tool            a tool this server does not have (server.py)
    tool-failed             anything else that went wrong in the server (a bug to report)
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

from receiptsite_client import transport
from receiptsite_client.client import USER_AGENT, Client
from receiptsite_client.outbox import FAILED, PENDING, PUBLISHED, Entry, IdempotencyKeyReused
from receiptsite_client.verify.result import UNCHECKED, Result
from receiptsite_client.verify.targets import verify_target

PROBLEM_TYPE: Final = "urn:receipt-mcp:"
MCP_USER_AGENT: Final = f"{USER_AGENT} receipt-mcp"

READ_TIMEOUT: Final = 10.0  # seconds, for one GET of the tenant API
VERIFY_TIMEOUT: Final = 10.0  # seconds, for each request verify_receipt makes
FLUSH_DEADLINE: Final = 2.0  # seconds: the flush before each tool call, every retry included
START_FLUSH_DEADLINE: Final = 10.0  # seconds: the flush when the server starts

# The filters of GET /api/receipts that list_receipts passes on, in the site's order.
LIST_FILTERS: Final = (
    "workflow_id",
    "session_id",
    "subject_name",
    "phase",
    "outcome",
    "since",
    "until",
    "limit",
    "cursor",
)

PENDING_NOTE: Final = (
    "Not published yet: {why}. The receipt is kept in the outbox and published from it at this "
    "server's next tool call (or by `receipt-outbox flush`); do not publish it again. Its "
    "idempotency key names it until then."
)

_UUID: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_LINK: Final = re.compile(rf"/run/(?P<id>{_UUID.pattern})/?$")


@dataclass(frozen=True)
class Answer:
    """A tool's answer: the JSON object it says, whether that is a tool error, and whether
    the site answered an HTTP request meanwhile (so it is up)."""

    body: dict[str, Any]
    is_error: bool = False
    reached_site: bool = False


def problem(slug: str, title: str, detail: str, **members: Any) -> dict[str, Any]:
    """One of this server's own problem objects (`status` null: no HTTP answer said it,
    unless `status` is given)."""
    return {"type": PROBLEM_TYPE + slug, "title": title, "status": None, "detail": detail,
            **members}


def unreachable(site_url: str, what: str, why: str | None) -> dict[str, Any]:
    return problem(
        "site-unreachable",
        "The site cannot be reached",
        f"The site at {site_url} cannot be reached ({what}: {why or 'no answer'}). "
        "Nothing was read; try again once it is up.",
        site=site_url,
    )


def entry_json(entry: Entry) -> dict[str, Any]:
    """An outbox entry as a tool answers it."""
    return {
        "receipt_status": entry.receipt_status,
        "receipt_id": entry.receipt_id,
        "url": entry.url,
        "verify_url": entry.verify_url,
        "idempotency_key": entry.idempotency_key,
        "workflow_id": entry.workflow_id,
        "step_id": entry.step_id,
        "attempt": entry.attempt,
        "phase": entry.phase,
        "output_hash": entry.output_hash,
        "recorded_at": entry.recorded_at,
        "replayed": entry.replayed,
        "publish_attempts": entry.publish_attempts,
        "created_at": entry.created_at,
        "error": entry.error,
    }


def receipt_id_of(value: str) -> str:
    """A receipt id as the tenant API takes it: the id itself, or the one in a /run/<id> link."""
    value = value.strip()
    if urlsplit(value).scheme in ("http", "https"):
        match = _LINK.search(urlsplit(value).path)
        if match:
            return match["id"].lower()
    return value


class Tools:
    """The five tools over one outbox and one site. Safe to call from several threads."""

    def __init__(self, site_url: str, api_key: str, outbox: Any) -> None:
        self.client = Client(site_url, api_key, outbox, user_agent=MCP_USER_AGENT)
        self.site_url = self.client.site_url
        self._api_key = api_key
        self._flushing = threading.Lock()  # one flush at a time

    # --- the outbox ------------------------------------------------------------------------

    def flush_pending(self, deadline: float = FLUSH_DEADLINE) -> bool:
        """Publish what the outbox holds pending (within `deadline`); True if the site took
        any of it (so it is up). A flush already under way (the one at start, another tool
        call's) is left to do it: a tool call never waits for another's flush."""
        if not self._flushing.acquire(blocking=False):
            return False
        try:
            tried = self.client.flush(deadline=deadline)
        finally:
            self._flushing.release()
        return any(entry.receipt_status == PUBLISHED for entry in tried)

    def publish_receipt(self, document: Any) -> Answer:
        """Record the document through the outbox."""
        if not isinstance(document, dict):
            return Answer(_not_an_object(document), is_error=True)
        try:
            entry = self.client.record(document)
        except IdempotencyKeyReused as error:
            return Answer(
                problem(
                    "idempotency-key-reused",
                    "The idempotency key names another receipt",
                    str(error),
                    errors=[{"field": "/idempotency_key", "message": str(error)}],
                ),
                is_error=True,
            )
        except TypeError as error:  # not JSON (prepare): the arguments, not the site
            return Answer(_not_an_object(document, str(error)), is_error=True)
        body = entry_json(entry)
        reached = entry.receipt_status == PUBLISHED or entry.problem is not None
        if entry.receipt_status == FAILED:
            failure = dict(entry.problem) if entry.problem is not None else _failure(entry)
            return Answer({**failure, "entry": body}, is_error=True, reached_site=reached)
        if entry.receipt_status == PENDING:
            body["note"] = PENDING_NOTE.format(why=entry.error or "the site did not answer")
        return Answer(body, reached_site=reached)

    def handoff(self, workflow_id: str) -> Answer:
        """The hand-off block of each of the workflow's receipts in the outbox."""
        entries = self.client.entries(workflow_id)
        if not entries:
            return Answer(
                problem(
                    "no-receipts",
                    "No receipt of this workflow in the outbox",
                    f"This server's outbox holds no receipt of the workflow {workflow_id!r}: "
                    "a hand-off is made of the receipts published through it "
                    "(publish_receipt).",
                ),
                is_error=True,
            )
        return Answer(
            {
                "workflow_id": workflow_id,
                "handoff": self.client.handoff(workflow_id),
                "receipts": [
                    {
                        "idempotency_key": entry.idempotency_key,
                        "phase": entry.phase,
                        "receipt_status": entry.receipt_status,
                        "url": entry.url,
                    }
                    for entry in entries
                ],
            }
        )

    # --- the tenant API --------------------------------------------------------------------

    def get_receipt(self, receipt_id: str) -> Answer:
        """GET /api/receipts/<id>."""
        wanted = receipt_id_of(receipt_id)
        if not wanted:
            return Answer(_invalid(("/id", "must be a receipt id")), is_error=True)
        return self._read(f"/api/receipts/{quote(wanted, safe='')}")

    def list_receipts(self, **filters: Any) -> Answer:
        """GET /api/receipts with the filters given (None or empty: left out)."""
        unknown = sorted(set(filters) - set(LIST_FILTERS))
        if unknown:
            return Answer(
                _invalid(*((f"/{name}", "is not a filter of list_receipts") for name in unknown)),
                is_error=True,
            )
        query = {
            name: str(filters[name])
            for name in LIST_FILTERS
            if filters.get(name) is not None and filters[name] != ""
        }
        return self._read("/api/receipts" + (f"?{urlencode(query)}" if query else ""))

    def _read(self, path: str) -> Answer:
        answer = transport.request(
            "GET",
            self.site_url + path,
            api_key=self._api_key,
            body=None,
            timeout=READ_TIMEOUT,
            user_agent=MCP_USER_AGENT,
        )
        route = f"GET {path.split('?', 1)[0]}"
        if answer.status is None:
            return Answer(unreachable(self.site_url, route, answer.network_error), is_error=True)
        if answer.status == 200 and isinstance(answer.body, dict):
            return Answer(answer.body, reached_site=True)
        return Answer(_site_problem(answer, route), is_error=True, reached_site=True)

    # --- verification ----------------------------------------------------------------------

    def verify_receipt(
        self, target: str, key: str | None = None, policy: str | None = None
    ) -> Answer:
        """receipt-verify's checks, on a receipt id, a link, a verify URL or a saved
        file."""
        target = target.strip()
        if _UUID.fullmatch(target):
            # A receipt id, as publish_receipt answers it: this site's verification of it.
            target = f"{self.site_url}/api/receipt/{target.lower()}/verify"
        result = verify_target(target, key or None, VERIFY_TIMEOUT, policy or None)
        verification = verification_json(result)
        loading = result.check("target")
        if loading is None or loading.result != UNCHECKED:
            return Answer(verification, reached_site=_is_url(target))
        # Nothing was checked: the target, the key or the policy could not be had.
        if not _is_url(target):
            found = problem("could-not-check", "The target could not be checked", loading.detail)
            return Answer({**found, "verification": verification}, is_error=True)
        again = transport.request(
            "GET", target, api_key=None, body=None, timeout=VERIFY_TIMEOUT,
            user_agent=MCP_USER_AGENT,
        )
        host = urlsplit(target)
        site = f"{host.scheme}://{host.netloc}"
        if again.status is None:
            failure = unreachable(site, f"GET {host.path}", again.network_error)
            return Answer({**failure, "verification": verification}, is_error=True)
        if again.status >= 400 and _is_problem(again.body):
            failure = dict(again.body)
        else:
            failure = problem("could-not-check", "The target could not be checked",
                              loading.detail, status=again.status)
        return Answer({**failure, "verification": verification}, is_error=True, reached_site=True)


def verification_json(result: Result) -> dict[str, Any]:
    """What `receipt-verify --json` prints (`status` and `checks`), with the receipt's id and
    the notes it prints beside them (whom the check trusted, what it could not check)."""
    return {**result.as_json(), "receipt_id": result.receipt_id, "notes": list(result.notes)}


def _is_url(target: str) -> bool:
    return urlsplit(target).scheme in ("http", "https")


def _is_problem(body: Any) -> bool:
    return isinstance(body, dict) and isinstance(body.get("type"), str) and "status" in body


def _site_problem(answer: transport.Answer, route: str) -> dict[str, Any]:
    """The site's problem object as it answered it; or, for an answer that is none, one of
    ours saying what came."""
    if _is_problem(answer.body):
        return dict(answer.body)
    return problem(
        "unexpected-answer",
        "The site's answer is not the one its API promises",
        f"{route} answered {answer.describe()}",
        status=answer.status,
    )


def _failure(entry: Entry) -> dict[str, Any]:
    """Why a failed entry failed, when the site gave no problem object for it."""
    if entry.publish_attempts == 0:
        return problem("not-sent", "The client did not send the document", entry.error or "")
    return problem(
        "unexpected-answer",
        "The site refused the document without a problem object",
        entry.error or "",
    )


def _invalid(*errors: tuple[str, str]) -> dict[str, Any]:
    detail = "; ".join(f"{field}: {message}" for field, message in errors)
    return problem(
        "invalid-arguments",
        "The arguments are not valid",
        detail,
        errors=[{"field": field, "message": message} for field, message in errors],
    )


def _not_an_object(document: Any, why: str | None = None) -> dict[str, Any]:
    return _invalid(
        ("/document", why or f"must be a JSON object (a receipt/v1 document), not "
         f"{type(document).__name__}")
    )

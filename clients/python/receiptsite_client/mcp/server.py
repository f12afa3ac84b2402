"""The MCP server itself: the official SDK's FastMCP on stdio, with the five tools of tools.py.

What FastMCP does not do on its own, and this adds:

- publish_receipt's `document` is described by the site's receipt/v1 schema, and
  list_receipts' filters by the site's parameter schemas (schema.py), read from the site when
  the tools are listed. While the site cannot be reached they are described as a plain object
  and plain strings, and each later listing tries again; once a tool call finds the site up,
  the server fetches them and tells the client that its tool list changed.
- Before each tool call it publishes what the outbox holds pending (tools.FLUSH_DEADLINE at
  most; none when another flush is under way), and once when it starts, in the background, so
  that a receipt recorded while the site was down is published at the first call after it is
  back, or at the next start.
- Every answer is JSON text (and the same object as structured content); every error is a tool
  error (`isError`) whose text is a problem object, the SDK's own argument checks included.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Annotated, Any, Final

import anyio
import anyio.to_thread
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.lowlevel import NotificationOptions
from mcp.server.stdio import stdio_server
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from mcp.types import Tool as MCPTool
from pydantic import Field, ValidationError

from receiptsite_client.mcp import schema
from receiptsite_client.mcp.schema import SchemaUnavailable, SiteSchemas
from receiptsite_client.mcp.tools import (
    MCP_USER_AGENT,
    START_FLUSH_DEADLINE,
    Answer,
    Tools,
    problem,
)

log = logging.getLogger("receiptsite_client.mcp")

SCHEMA_TIMEOUT: Final = 5.0  # seconds, for the GET of the site's OpenAPI description

INSTRUCTIONS: Final = """\
Execution receipts on the receiptsite at {site}: signed, logged records of what an agent's \
steps did, that a person who was not there can check. After a step worth proving (a tool \
call, a task, a hand-over), call publish_receipt with its receipt/v1 document, and hand the \
receipt's `url` on. Publishing goes through a durable outbox: when the site cannot be \
reached, publish_receipt answers receipt_status "pending" and the receipt is published at a \
later tool call; never publish it again. verify_receipt checks a receipt without trusting the \
site; get_receipt and list_receipts read this tenant's receipts; handoff gives the lines to \
paste into a ticket. Every answer is JSON; an error is a problem object (type, title, status, \
detail, and errors: a list of {{field, message}}).\
"""

PUBLISH: Final = """\
Publish one execution receipt: a receipt/v1 document saying what one step of a workflow did \
(workflow_id, phase, subject, and for an end its outcome, result, what was and was not \
observed). The document is redacted (secrets in free text become [REDACTED]) and written to \
this server's durable outbox before any network call, then published to the site, for a few \
seconds at most. Answers the outbox entry as JSON: receipt_status "published" with \
receipt_id, url (the receipt's link, to hand on) and verify_url; or "pending" when the site \
cannot be reached: the receipt is kept and published at a later tool call of this server, so \
do not publish it again. Give an idempotency_key (e.g. "<workflow>/<step>/<phase>/<attempt>") \
to make retrying this call safe: the same key and document are the same receipt. A document \
the site refuses is a tool error whose JSON is the site's problem (type, title, status, \
detail, and errors: one {field, message} per fault, the field a JSON Pointer into the \
document), with the outbox entry as `entry`; correct the document and publish it under a new \
idempotency key.\
"""

SCHEMA_FROM_SITE: Final = """ The schema of `document` is the site's own receipt/v1 schema, \
read from {source} (components.schemas.ReceiptIn) when the tools were listed; its description \
lists the rules the site enforces that a schema cannot express."""

SCHEMA_MISSING: Final = """ The site could not be reached when the tools were listed ({why}), \
so `document` is described here only as an object: its schema is the site's receipt/v1 \
schema ({site}/api/openapi.json, components.schemas.ReceiptIn), which the server reads again \
at each listing and once a tool call finds the site up (it then tells the client that the tool \
list changed). A receipt published meanwhile is kept in the outbox and checked by the site \
when it is published."""

DOCUMENT: Final = "The receipt/v1 evidence document, a JSON object."

VERIFY: Final = """\
Check a receipt without trusting the site that serves it, as `receipt-verify --json` does: \
recompute its canonical bytes and hash, its Ed25519 signature, its Merkle inclusion proof and \
its signed checkpoint (and, with a policy, the witnesses' cosignatures). Answers \
{status: "valid" | "invalid" | "could_not_check", checks: [{name, result: "pass" | "fail" | \
"could_not_check", detail}], receipt_id, notes}. "invalid" means a check failed: the receipt \
was changed, or is not what the site signed. A target that cannot be loaded at all is a tool \
error: the site cannot be reached, or the site's problem (e.g. 404 for an unknown receipt).\
"""

TARGET: Final = (
    "What to check: a receipt id (publish_receipt's receipt_id: this site's verification of it), "
    "a receipt link (…/run/<id>), its verify URL (…/api/receipt/<id>/verify), or the path of a "
    "saved verification JSON or offline bundle file."
)
KEY: Final = (
    "A key to trust instead of the one the site publishes: a keys document file (as "
    "/.well-known/receipt-keys.json serves it) or a base64url Ed25519 public key. Without one, a "
    "link is checked against the site's own key (a note says so: not independent of the site), "
    "and a saved file cannot say who signed it (could_not_check)."
)
POLICY: Final = (
    "A c2sp.org/tlog-policy file: its log keys are trusted as a pinned key is, and its quorum "
    "of witnesses must have cosigned a checkpoint that includes the receipt."
)

GET: Final = """\
One of this tenant's receipts, from the site (GET /api/receipts/<id>): its summary (id, url, \
verify_url, output_hash, recorded_at, log_index, workflow_id, phase, subject, outcome) and \
`document`, the evidence document as the site stored it (redacted, with the site's own \
boundary statement in not_observed). A withdrawn receipt has withdrawn_at and no document. An \
unknown id (or another tenant's) is a tool error with the site's 404 problem.\
"""
RECEIPT_ID: Final = "The receipt's id (publish_receipt's receipt_id), or its /run/<id> link."

LIST: Final = """\
This tenant's receipts on the site, newest first (GET /api/receipts), with exact-match \
filters (all optional; leave one out to not filter on it). Answers {receipts: [summary, ...], \
next_cursor}: a summary is id, url, verify_url, output_hash, recorded_at, log_index, \
workflow_id, phase, subject, outcome. When next_cursor is not null, call again with it as \
`cursor` (and the same filters) for the next page. A filter the site refuses is a tool error \
with its problem (400, the parameter in errors).\
"""
LIST_ARGUMENTS: Final = {
    "workflow_id": "Only this workflow's receipts.",
    "session_id": "Only this session's receipts.",
    "subject_name": "Only receipts whose subject has this name (a tool's or task's name).",
    "phase": "Only receipts of this phase.",
    "outcome": "Only receipts with this outcome.",
    "since": "Only receipts recorded at or after this RFC 3339 date-time (with an offset).",
    "until": "Only receipts recorded before this RFC 3339 date-time (with an offset).",
    "limit": "How many receipts per page (the site's default when left out).",
    "cursor": "The next_cursor of the previous page, for the next one.",
}

HANDOFF: Final = """\
The hand-off block of each of a workflow's receipts published through this server, oldest \
first: the few lines a person pastes into a ticket or an e-mail to hand the work on (work \
item, workflow and attempt, observed status, the receipt's link, when it was recorded, what it \
shows and does not show). A receipt not published yet says "pending" (or "failed" and why) \
in place of its link. Read from this server's outbox, after it publishes what is pending. \
Answers {workflow_id, handoff: the text, receipts: [{idempotency_key, phase, receipt_status, \
url}]}.\
"""
WORKFLOW_ID: Final = "The workflow whose receipts to hand off (their workflow_id)."

PUBLISH_HINTS: Final = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=True
)
READ_HINTS: Final = ToolAnnotations(readOnlyHint=True, openWorldHint=True)


def tool_result(body: dict[str, Any], is_error: bool = False) -> CallToolResult:
    """A tool's answer: the JSON object as text, and as structured content."""
    text = json.dumps(body, ensure_ascii=False)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structuredContent=body, isError=is_error
    )


class ReceiptServer(FastMCP[Any]):
    """FastMCP with the five receipt tools over one Tools."""

    def __init__(self, tools: Tools) -> None:
        super().__init__(
            name="receiptsite",
            instructions=INSTRUCTIONS.format(site=tools.site_url),
            log_level="WARNING",
        )
        self.tools = tools
        self.schemas: SiteSchemas | None = None
        self.schema_problem = "not read yet"
        self._register()

    # --- the tools -------------------------------------------------------------------------

    def _register(self) -> None:
        tools = self.tools

        async def publish_receipt(
            document: Annotated[dict[str, Any], Field(description=DOCUMENT)],
        ) -> CallToolResult:
            return await self._run(partial(tools.publish_receipt, document))

        async def verify_receipt(
            target: Annotated[str, Field(description=TARGET)],
            key: Annotated[str | None, Field(description=KEY)] = None,
            policy: Annotated[str | None, Field(description=POLICY)] = None,
        ) -> CallToolResult:
            return await self._run(partial(tools.verify_receipt, target, key, policy))

        async def get_receipt(
            id: Annotated[str, Field(description=RECEIPT_ID)],
        ) -> CallToolResult:
            return await self._run(partial(tools.get_receipt, id))

        async def list_receipts(
            workflow_id: Annotated[str | None, Field(description=LIST_ARGUMENTS["workflow_id"])]
            = None,
            session_id: Annotated[str | None, Field(description=LIST_ARGUMENTS["session_id"])]
            = None,
            subject_name: Annotated[
                str | None, Field(description=LIST_ARGUMENTS["subject_name"])
            ] = None,
            phase: Annotated[str | None, Field(description=LIST_ARGUMENTS["phase"])] = None,
            outcome: Annotated[str | None, Field(description=LIST_ARGUMENTS["outcome"])] = None,
            since: Annotated[str | None, Field(description=LIST_ARGUMENTS["since"])] = None,
            until: Annotated[str | None, Field(description=LIST_ARGUMENTS["until"])] = None,
            limit: Annotated[int | None, Field(description=LIST_ARGUMENTS["limit"])] = None,
            cursor: Annotated[str | None, Field(description=LIST_ARGUMENTS["cursor"])] = None,
        ) -> CallToolResult:
            return await self._run(
                partial(
                    tools.list_receipts,
                    workflow_id=workflow_id,
                    session_id=session_id,
                    subject_name=subject_name,
                    phase=phase,
                    outcome=outcome,
                    since=since,
                    until=until,
                    limit=limit,
                    cursor=cursor,
                )
            )

        async def handoff(
            workflow_id: Annotated[str, Field(description=WORKFLOW_ID)],
        ) -> CallToolResult:
            return await self._run(partial(tools.handoff, workflow_id))

        self.add_tool(publish_receipt, title="Publish a receipt", description=PUBLISH,
                      annotations=PUBLISH_HINTS)
        self.add_tool(verify_receipt, title="Verify a receipt", description=VERIFY,
                      annotations=READ_HINTS)
        self.add_tool(get_receipt, title="Get a receipt", description=GET,
                      annotations=READ_HINTS)
        self.add_tool(list_receipts, title="List receipts", description=LIST,
                      annotations=READ_HINTS)
        self.add_tool(handoff, title="Hand a workflow off", description=HANDOFF,
                      annotations=READ_HINTS)

    async def _run(self, work: Callable[[], Answer]) -> CallToolResult:
        """One tool call: publish what is pending, do the work (in a worker thread: the
        client blocks), and read the site's schemas if they are still missing and the site
        turned out to be up."""

        def job() -> Answer:
            flushed = self.tools.flush_pending()
            answer = work()
            return replace(answer, reached_site=True) if flushed else answer

        answer = await anyio.to_thread.run_sync(job)
        if answer.reached_site and self.schemas is None and await self.fetch_schemas():
            await self.get_context().session.send_tool_list_changed()
        return tool_result(answer.body, answer.is_error)

    async def call_tool(  # type: ignore[override]  # a CallToolResult is what the SDK sends
        self, name: str, arguments: dict[str, Any]
    ) -> Any:
        """FastMCP's call, with its own errors (arguments it refuses, an unknown tool, a fault
        of the server's) made problem objects like every other error."""
        try:
            return await super().call_tool(name, arguments)
        except ToolError as error:
            return tool_result(_tool_error(name, error), is_error=True)

    # --- the site's schemas ----------------------------------------------------------------

    async def fetch_schemas(self) -> bool:
        """Read the site's schemas; True once they are had."""
        try:
            self.schemas = await anyio.to_thread.run_sync(
                partial(
                    schema.fetch,
                    self.tools.site_url,
                    timeout=SCHEMA_TIMEOUT,
                    user_agent=MCP_USER_AGENT,
                )
            )
        except SchemaUnavailable as error:
            self.schema_problem = str(error)
            return False
        return True

    async def list_tools(self) -> list[MCPTool]:
        if self.schemas is None:
            await self.fetch_schemas()
        return [self._described(tool) for tool in await super().list_tools()]

    def _described(self, tool: MCPTool) -> MCPTool:
        """A tool as listed, with the site's schemas where they belong."""
        inputs = copy.deepcopy(tool.inputSchema)
        properties = inputs.get("properties", {})
        description = tool.description
        if tool.name == "publish_receipt":
            if self.schemas is not None:
                properties["document"] = copy.deepcopy(self.schemas.receipt)
                description = PUBLISH + SCHEMA_FROM_SITE.format(source=self.schemas.source)
            else:
                description = PUBLISH + SCHEMA_MISSING.format(
                    why=self.schema_problem, site=self.tools.site_url
                )
        elif tool.name == "list_receipts" and self.schemas is not None:
            for name, given in self.schemas.list_parameters.items():
                ours = properties.get(name)
                if ours is not None:
                    properties[name] = {
                        "anyOf": [copy.deepcopy(given), {"type": "null"}],
                        "default": None,
                        "description": ours.get("description", ""),
                    }
        return tool.model_copy(update={"inputSchema": inputs, "description": description})

    # --- stdio ------------------------------------------------------------------------------

    async def run_stdio_async(self) -> None:
        """FastMCP's stdio run, declaring `tools.listChanged` (the server says when the site's
        schemas arrive). FastMCP keeps its low-level server private and declares no change
        notifications itself; this is the SDK's own run with that one option."""
        server = self._mcp_server
        options = server.create_initialization_options(NotificationOptions(tools_changed=True))
        async with stdio_server() as (read, write):
            await server.run(read, write, options)


def _tool_error(name: str, error: ToolError) -> dict[str, Any]:
    cause = error.__cause__
    if isinstance(cause, ValidationError):
        errors = [
            {"field": "/" + "/".join(str(part) for part in fault["loc"]), "message": fault["msg"]}
            for fault in cause.errors()
        ]
        return problem(
            "invalid-arguments",
            "The arguments are not valid",
            "; ".join(f"{e['field']}: {e['message']}" for e in errors),
            errors=errors,
        )
    if cause is None and str(error).startswith("Unknown tool"):
        return problem("unknown-tool", "There is no such tool", f"{name!r} is not a tool of "
                       "this server: publish_receipt, verify_receipt, get_receipt, "
                       "list_receipts, handoff.")
    log.error("the tool %s failed", name, exc_info=cause or error)
    return problem("tool-failed", "The tool failed in the server", str(cause or error))


def start_flush(tools: Tools) -> threading.Thread:
    """Publish, in the background, what an earlier run left pending in the outbox."""

    def flush() -> None:
        try:
            tools.flush_pending(START_FLUSH_DEADLINE)
        except Exception:
            log.exception("the flush at start failed; each tool call flushes again")

    thread = threading.Thread(target=flush, name="receipt-mcp-start-flush", daemon=True)
    thread.start()
    return thread


def serve(tools: Tools) -> None:
    """Serve on stdin/stdout until the client closes them."""
    start_flush(tools)
    anyio.run(ReceiptServer(tools).run_stdio_async)

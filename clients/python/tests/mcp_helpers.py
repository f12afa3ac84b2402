"""Helpers for receipt-mcp's tests: the installed command run as an MCP client runs it, a real
subprocess spoken to through the official SDK's own stdio client and ClientSession, and
reading its answers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

MCP_COMMAND = shutil.which("receipt-mcp", path=str(Path(sys.executable).parent))
VARIABLES = ("RECEIPTSITE_URL", "RECEIPTSITE_API_KEY", "RECEIPTSITE_OUTBOX")
TOOLS = ["publish_receipt", "verify_receipt", "get_receipt", "list_receipts", "handoff"]
UNREACHABLE = "urn:receipt-mcp:site-unreachable"


def command() -> str:
    assert MCP_COMMAND, "receipt-mcp is not installed beside this python"
    return MCP_COMMAND


def run_mcp(env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """receipt-mcp with exactly these variables of ours (the others removed)."""
    base = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    return subprocess.run(
        [command()], input=stdin, capture_output=True, text=True, env={**base, **env},
        timeout=60,
    )


@dataclass
class Session:
    """An initialized ClientSession with the server, and what the server said on the side."""

    session: ClientSession
    stderr: Path
    notifications: list[Any] = field(default_factory=list)

    async def call(self, tool: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        """(isError, the JSON object of the answer's text), checking that the text is JSON
        and that the structured content is the same object."""
        result = await self.session.call_tool(tool, arguments)
        assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
        body = json.loads(result.content[0].text)
        assert isinstance(body, dict)
        assert result.structuredContent == body
        return result.isError, body

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        failed, body = await self.call(tool, **arguments)
        assert not failed, body
        return body

    async def error(self, tool: str, **arguments: Any) -> dict[str, Any]:
        failed, body = await self.call(tool, **arguments)
        assert failed, body
        # A problem object, whoever made it.
        assert {"type", "title", "status", "detail"} <= set(body), body
        return body

    async def tools(self) -> dict[str, types.Tool]:
        return {tool.name: tool for tool in (await self.session.list_tools()).tools}

    def list_changes(self) -> int:
        return sum(isinstance(n, types.ToolListChangedNotification) for n in self.notifications)


@asynccontextmanager
async def mcp_session(
    site_url: str,
    api_key: str,
    outbox: Path,
    stderr: Path,
    *,
    command_line: list[str] | None = None,
) -> AsyncIterator[Session]:
    """receipt-mcp as a subprocess (or `command_line`), configured as an MCP client's
    `mcpServers` entry configures it, over the SDK's stdio client."""
    argv = command_line or [command()]
    params = StdioServerParameters(
        command=argv[0],
        args=argv[1:],
        env={
            "RECEIPTSITE_URL": site_url,
            "RECEIPTSITE_API_KEY": api_key,
            "RECEIPTSITE_OUTBOX": str(outbox),
        },
    )
    with stderr.open("a") as errlog:
        holder: list[Session] = []

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ServerNotification) and holder:
                holder[0].notifications.append(message.root)

        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(
                read, write, read_timeout_seconds=timedelta(seconds=90),
                message_handler=on_message,
            ) as session,
        ):
            init = await session.initialize()
            assert init.capabilities.tools is not None and init.capabilities.tools.listChanged
            held = Session(session, stderr)
            holder.append(held)
            yield held

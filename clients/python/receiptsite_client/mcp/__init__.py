"""receipt-mcp: a Model Context Protocol server (stdio, the official `mcp` SDK) over the
producers' Client, so that any MCP-speaking agent can publish and check receipts.

    RECEIPTSITE_URL=https://receipts.example.org RECEIPTSITE_API_KEY=rk_... \\
    RECEIPTSITE_OUTBOX=/home/me/.local/state/receipts.sqlite3 receipt-mcp

Tools, each answering JSON text (and the same object as structured content):

    publish_receipt(document)          through the durable outbox: the outbox entry
    verify_receipt(target, key, policy) receipt-verify's verdict and checks
    get_receipt(id)                     GET /api/receipts/<id>
    list_receipts(workflow_id, ...)     GET /api/receipts with its filters, limit and cursor
    handoff(workflow_id)                the client's hand-off block of the workflow's receipts

A missing variable stops the server at start: one line on stderr naming it, exit status 2.
Needs the `mcp` extra (`pip install 'receiptsite-client[mcp]'`); the rest of the client does
not import this package.

    config   the three variables
    schema   the site's receipt/v1 schema and list parameters, from its OpenAPI description
    tools    what each tool does, without the protocol; the problem objects of its errors
    server   FastMCP: the tools' descriptions and schemas, flushing, stdio
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Sequence

from receiptsite_client.mcp.config import VARIABLES, ConfigError, read_config

PROG = "receipt-mcp"


def main(argv: Sequence[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog=PROG,
        description="An MCP server on stdio that publishes and checks receipts of a "
        "receiptsite. Configured by the environment: "
        + "; ".join(f"{name}: {what}" for name, what in VARIABLES.items())
        + ". An MCP client starts it; it speaks JSON-RPC on stdin and stdout.",
    ).parse_args(argv)
    try:
        config = read_config(os.environ)
    except ConfigError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 2
    try:
        from receiptsite_client.mcp.server import serve
        from receiptsite_client.mcp.tools import Tools
    except ImportError as error:
        if (error.name or "").split(".")[0] not in ("mcp", "anyio", "pydantic"):
            raise
        print(f"{PROG}: the MCP SDK is not installed: pip install "
              "'receiptsite-client[mcp]'", file=sys.stderr)
        return 2
    try:
        tools = Tools(config.site_url, config.api_key, config.outbox)
    except (OSError, sqlite3.Error, RuntimeError) as error:
        print(f"{PROG}: RECEIPTSITE_OUTBOX: cannot open {config.outbox} ({error})",
              file=sys.stderr)
        return 2
    serve(tools)
    return 0

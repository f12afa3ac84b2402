"""`python -m receiptsite_client.mcp`: receipt-mcp, for an MCP client that names a Python."""

from __future__ import annotations

import sys

from receiptsite_client.mcp import main

sys.exit(main())

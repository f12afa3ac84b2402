"""`python -m receiptsite_client.verify`, the same as receipt-verify."""

from __future__ import annotations

import sys

from receiptsite_client.verify.cli import main

sys.exit(main())

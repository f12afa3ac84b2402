"""The query plans of bench/run.py: every SELECT of one verify, one page and one request of each
list route at the largest size, under EXPLAIN (PostgreSQL) or EXPLAIN QUERY PLAN (SQLite).

The SQL is captured in-process with the test Client and CaptureQueriesContext, on the same
database and settings as the site, so the plans are those of the SQL the site runs; a
statement that two routes share is explained once.
"""

from __future__ import annotations

import random

from _common import fail

from siteload.dataset import Shape, public_id
from siteload.routes import list_path, list_routes


def print_plans(shape: Shape, size: int, rng: random.Random, key: str) -> None:
    """The plans at `size` receipts; `key` is the first tenant's API key, for the lists."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    receipt = str(public_id(shape.seed, rng.randrange(size)))
    requests: list[tuple[str, str, dict[str, str]]] = [
        ("verify", f"/api/receipt/{receipt}/verify", {}),
        ("page", f"/run/{receipt}", {}),
    ]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    for route in list_routes(shape, size, rng):
        requests.append((route.label, list_path(route.queries[0]), auth))
    word = "EXPLAIN" if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN"
    print(f"\nquery plans at {size:,} receipts ({word} of each SELECT of one request):")
    seen: dict[str, str] = {}
    for label, path, headers in requests:
        with CaptureQueriesContext(connection) as captured:
            answer = client.get(path, **headers)  # type: ignore[arg-type]
        if answer.status_code != 200:
            fail(f"{label} in-process answered {answer.status_code}")
        # The reads (set_config() of the row-level-security settings plans nothing).
        selects = [q["sql"] for q in captured.captured_queries
                   if q["sql"].lstrip().upper().startswith(("SELECT", "WITH"))
                   and not q["sql"].lstrip().startswith("SELECT set_config(")]  # fmt: skip
        print(f"  {label} ({path[:60]}{'...' if len(path) > 60 else ''}): "
              f"{len(captured.captured_queries)} queries, {len(selects)} SELECTs")  # fmt: skip
        for sql in selects:
            shown = sql if len(sql) <= 300 else sql[:297] + "..."
            if sql in seen:
                print(f"    - {shown[:120]}... (as for {seen[sql]})")
                continue
            seen[sql] = label
            print(f"    - {shown}")
            with connection.cursor() as cursor:
                cursor.execute(f"{word} {sql}")
                rows = cursor.fetchall()
            for row in rows:
                print(f"        {row[0] if connection.vendor == 'postgresql' else row[-1]}")

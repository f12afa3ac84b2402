"""The test vector of one receipt end to end: real values that verify. Pure data, shared by
the tests (and the benchmarks) so that one copy is the reference."""

from __future__ import annotations

from typing import Any

# The request body.
EXAMPLE_BODY: dict[str, Any] = {
    "workflow_id": "wf-7f3a",
    "step_id": "audit-site",
    "attempt": {
        "number": 2,
        "prior_attempt_id": "wf-7f3a/audit-site/1",
        "retry_reason": "timeout",
    },
    "phase": "end",
    "subject": {"type": "tool", "name": "website_audit"},
    "framework": {"name": "langchain", "run_id": "9b1d6c2e", "parent_run_id": "44aa01f3"},
    "outcome": "succeeded",
    "started_at": "2026-11-30T14:30:00Z",
    "ended_at": "2026-11-30T14:31:07Z",
    "duration_ms": 67000,
    "input_summary": '{"url": "https://example.org"}',
    "result": "12 findings",
    "observed": ["The audit tool returned 12 findings."],
    "not_observed": ["Whether the findings were sent to the client."],
    "idempotency_key": "wf-7f3a/audit-site/end/2",
    "metadata": {"ticket": "OPS-118"},
}

# The verification JSON's `canonical_bytes`.
EXAMPLE_CANONICAL_B64 = (
    "eyJhdHRlbXB0Ijp7Im51bWJlciI6MiwicHJpb3JfYXR0ZW1wdF9pZCI6IndmLTdmM2EvYXVkaXQtc2l0ZS8xIiwi"
    "cmV0cnlfcmVhc29uIjoidGltZW91dCJ9LCJkdXJhdGlvbl9tcyI6NjcwMDAsImVuZGVkX2F0IjoiMjAyNi0xMS0z"
    "MFQxNDozMTowN1oiLCJmcmFtZXdvcmsiOnsibmFtZSI6ImxhbmdjaGFpbiIsInBhcmVudF9ydW5faWQiOiI0NGFh"
    "MDFmMyIsInJ1bl9pZCI6IjliMWQ2YzJlIn0sImlkIjoiZjUyNDVkMjItZTY1MC00OWFlLTg4NzYtZjFhMzM1ZjMw"
    "OWJjIiwiaWRlbXBvdGVuY3lfa2V5Ijoid2YtN2YzYS9hdWRpdC1zaXRlL2VuZC8yIiwiaW5wdXRfc3VtbWFyeSI6"
    "IntcInVybFwiOiBcImh0dHBzOi8vZXhhbXBsZS5vcmdcIn0iLCJtZXRhZGF0YSI6eyJ0aWNrZXQiOiJPUFMtMTE4"
    "In0sIm5vdF9vYnNlcnZlZCI6WyJXaGV0aGVyIHRoZSBmaW5kaW5ncyB3ZXJlIHNlbnQgdG8gdGhlIGNsaWVudC4i"
    "LCJUaGlzIHJlY29yZHMgd2hhdCB0aGUgYWdlbnQgcnVudGltZSByZXBvcnRlZCB0byB0aGlzIHNpdGUuIEl0IGRv"
    "ZXMgbm90IHNob3cgdGhhdCBhbnkgZWZmZWN0IG91dHNpZGUgdGhhdCByZXBvcnQgaGFwcGVuZWQgKGFuIGVtYWls"
    "IHJlY2VpdmVkLCBhIHBheW1lbnQgc2V0dGxlZCwgYSB3cml0ZSBhY2NlcHRlZCkuIl0sIm9ic2VydmVkIjpbIlRo"
    "ZSBhdWRpdCB0b29sIHJldHVybmVkIDEyIGZpbmRpbmdzLiJdLCJvdXRjb21lIjoic3VjY2VlZGVkIiwicGhhc2Ui"
    "OiJlbmQiLCJwdWJsaXNoZXIiOnsia2V5X3ByZWZpeCI6InJrXzZkYWM4YTY2OTgxMCJ9LCJyZWNvcmRlZF9hdCI6"
    "IjIwMjYtMTEtMzBUMDk6MzE6NDIuMDYyNzk3WiIsInJlZGFjdGlvbnMiOltdLCJyZXN1bHQiOiIxMiBmaW5kaW5n"
    "cyIsInNjaGVtYSI6InJlY2VpcHQvdjEiLCJzdGFydGVkX2F0IjoiMjAyNi0xMS0zMFQxNDozMDowMFoiLCJzdGVw"
    "X2lkIjoiYXVkaXQtc2l0ZSIsInN1YmplY3QiOnsibmFtZSI6IndlYnNpdGVfYXVkaXQiLCJ0eXBlIjoidG9vbCJ9"
    "LCJ0ZW5hbnQiOnsibmFtZSI6IkFjbWUgQ29ycCIsInNsdWciOiJhY21lIn0sIndvcmtmbG93X2lkIjoid2YtN2Yz"
    "YSJ9"
)
EXAMPLE_HASH = "9b987c45764fb26a9fee427046344c07176d05d7e8f36d7ff1196794c8a54534"

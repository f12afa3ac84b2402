"""Realistic demo receipts for quickstart: one small agent run, as a producer would send it."""

from __future__ import annotations

from typing import Any


def demo_receipts() -> list[dict[str, Any]]:
    wf = "wf-demo-site-audit"
    return [
        {
            "workflow_id": wf,
            "step_id": "audit-site",
            "phase": "start",
            "subject": {"type": "tool", "name": "website_audit", "version": "2.4"},
            "framework": {"name": "langchain", "run_id": "9b1d6c2e", "parent_run_id": "44aa01f3"},
            "started_at": "2026-11-30T14:30:00Z",
            "input_summary": '{"url": "https://example.org"}',
            "observed": ["The agent called the audit tool for https://example.org."],
            "idempotency_key": f"{wf}/audit-site/start/1",
        },
        {
            "workflow_id": wf,
            "step_id": "audit-site",
            "attempt": {"number": 1},
            "phase": "end",
            "subject": {"type": "tool", "name": "website_audit", "version": "2.4"},
            "framework": {"name": "langchain", "run_id": "9b1d6c2e", "parent_run_id": "44aa01f3"},
            "outcome": "timed_out",
            "started_at": "2026-11-30T14:30:00Z",
            "ended_at": "2026-11-30T14:30:30Z",
            "duration_ms": 30000,
            "result": "The audit service did not answer within 30 seconds.",
            "observed": ["The audit tool gave no answer before its 30 second timeout."],
            "idempotency_key": f"{wf}/audit-site/end/1",
        },
        {
            "workflow_id": wf,
            "step_id": "audit-site",
            "attempt": {
                "number": 2,
                "prior_attempt_id": f"{wf}/audit-site/1",
                "retry_reason": "timeout",
            },
            "phase": "end",
            "subject": {"type": "tool", "name": "website_audit", "version": "2.4"},
            "framework": {"name": "langchain", "run_id": "0c2e7d31", "parent_run_id": "44aa01f3"},
            "outcome": "succeeded",
            "started_at": "2026-11-30T14:30:31Z",
            "ended_at": "2026-11-30T14:31:38Z",
            "duration_ms": 67000,
            "input_summary": (
                '{"url": "https://example.org", "headers": {"Authorization": '
                '"Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZW1vIn0.c2lnbmF0dXJlLWRlbW8"}}'
            ),
            "result": "12 findings: 3 broken links, 9 images without alt text.",
            "observed": ["The audit tool returned 12 findings."],
            "not_observed": ["Whether the findings are correct."],
            "idempotency_key": f"{wf}/audit-site/end/2",
            "metadata": {"ticket": "OPS-118"},
        },
        {
            "workflow_id": wf,
            "step_id": "email-report",
            "phase": "end",
            "subject": {"type": "tool", "name": "send_email"},
            "framework": {"name": "langchain", "run_id": "5f0a9e12", "parent_run_id": "44aa01f3"},
            "outcome": "failed",
            "duration_ms": 840,
            "input_summary": '{"to": "client@example.org", "subject": "Your site audit"}',
            "result": "SMTP 550: mailbox unavailable",
            "observed": ["The mail server refused the message with code 550."],
            "not_observed": ["Whether the client received the report some other way."],
            "operation_ref": "msg-20261130-0042",
            "idempotency_key": f"{wf}/email-report/end/1",
        },
        {
            "workflow_id": wf,
            "step_id": "complete",
            "phase": "completion",
            "subject": {"type": "task", "name": "Audit example.org and report to the client"},
            "framework": {"name": "crewai", "version": "1.15"},
            "actor": "ops@demo-agency.example",
            "outcome": "uncertain",
            "result": "Audit done (12 findings); the report e-mail failed and needs a person.",
            "observed": [
                "The audit finished on its second attempt with 12 findings.",
                "Sending the report by e-mail failed.",
            ],
            "not_observed": ["That the client has the report."],
            "links": {
                "child_idempotency_keys": [
                    f"{wf}/audit-site/end/2",
                    f"{wf}/email-report/end/1",
                ]
            },
            "idempotency_key": f"{wf}/complete/1",
        },
    ]

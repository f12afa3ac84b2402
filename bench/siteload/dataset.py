"""The data set of bench/run.py: what its receipts hold, derived from their index and a seed.

Every process of the fill, and the load afterwards, makes the same receipt from the same index
without a look-up: `public_id(seed, index)` is its id, `payload(shape, index)` the body a
producer would have sent, and `workflow_of`, `session_of` and `tenant_of` the values the list
filters select. The contents vary as a real tenant's do: workflows of a dozen receipts (tool
starts and ends, retries, a completion linking its children, a confirmation or hand-off naming
its parent), sessions of four workflows, two dozen subjects of unequal popularity, every phase
and outcome, one receipt in ten of a second tenant, now and then a secret the site redacts.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

TENANTS = (("acme", "Acme Corp"), ("globex", "Globex Logistics"))
OUTCOMES = ("succeeded", "failed", "timed_out", "uncertain")
# (type, name) with Zipf-like popularity: the first is about ten times as common as the last.
SUBJECTS = (
    ("tool", "web_search"), ("tool", "website_audit"), ("tool", "sql_query"),
    ("tool", "send_email"), ("tool", "fetch_url"), ("tool", "crm_update"),
    ("tool", "create_invoice"), ("tool", "refund_payment"), ("tool", "read_file"),
    ("tool", "write_file"), ("tool", "calendar_lookup"), ("tool", "slack_post"),
    ("tool", "geocode"), ("tool", "translate"), ("tool", "summarise_pdf"),
    ("model", "gpt-4o"), ("model", "claude-sonnet"), ("external", "stripe_webhook"),
    ("external", "github_pull_request"), ("tool", "ticket_lookup"),
)  # fmt: skip
TASKS = (("task", "research"), ("task", "write_report"), ("agent_run", "support_agent"),
         ("task", "triage_ticket"), ("chain", "rag_pipeline"))  # fmt: skip
SUBJECT_WEIGHTS = list(itertools.accumulate(1 / (k + 1) for k in range(len(SUBJECTS))))
OUTCOME_WEIGHTS = list(itertools.accumulate((85, 8, 4, 3)))
FRAMEWORKS = ("langchain", "crewai", "openai-agents", "custom")
SENTENCES = (
    "The tool returned a complete answer within its time limit.",
    "The request was sent to the production endpoint of the service.",
    "Three records matched the query and were returned in full.",
    "The response carried a status code of 200 and a JSON body.",
    "The agent passed the customer's order number as the only argument.",
    "No retry was needed; the first attempt succeeded.",
    "The answer was summarised before it was handed back to the model.",
    "The call used the read-only credentials of the support team.",
    "A draft was written but not sent; a person has to approve it first.",
    "The page was fetched over HTTPS and parsed as HTML.",
    "The invoice total was computed from the line items shown.",
    "The run was started by a scheduled job, not by a person.",
)
NOT_OBSERVED = (
    "Whether the customer read the message.",
    "Whether the refund reached the bank account.",
    "Whether the numbers in the report are correct.",
    "What the external service did with the request after answering.",
    "Whether a person reviewed the draft before it was sent.",
)
WORDS = (
    "order", "shipment", "invoice", "customer", "refund", "ticket", "report", "summary", "audit",
    "page", "query", "record", "account", "payment", "region", "warehouse", "schedule",
    "contract", "review", "finding", "status", "update", "draft",
)  # fmt: skip
SLOTS = 12  # receipts per workflow: 5 tool calls (start + end), a completion, a confirmation
WORKFLOWS_PER_SESSION = 4
DAYS = 90  # the data set's receipts are spread over this many days before the run


def tenant_of(index: int) -> int:
    """Receipt `index` belongs to tenant 0 (acme) or, one block in ten, 1 (globex)."""
    return 1 if (index // (SLOTS * 10)) % 10 == 9 else 0


def public_id(seed: int, index: int) -> uuid.UUID:
    """Receipt `index`'s id, derived from the index: links and the load need no look-up."""
    digest = hashlib.sha256(b"bench-run %d %d" % (seed, index)).digest()
    return uuid.UUID(bytes=digest[:16], version=4)


def workflow_of(index: int) -> str:
    return f"{TENANTS[tenant_of(index)][0]}-wf-{index // SLOTS:07d}"


def session_of(index: int) -> str:
    return f"sess-{index // (SLOTS * WORKFLOWS_PER_SESSION):06d}"


@dataclass(frozen=True)
class Shape:
    """What every process must agree on to make the same data set."""

    seed: int
    total: int  # the largest size: recorded_at spreads the whole data set over DAYS
    epoch: datetime  # recorded_at of receipt 0

    def recorded_at(self, index: int) -> datetime:
        step = timedelta(days=DAYS) / max(self.total, 1)
        return self.epoch + step * index


def stamp(moment: datetime) -> str:
    """A producer's timestamp (RFC 3339, UTC, microseconds)."""
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, k=n))


def payload(shape: Shape, index: int) -> dict[str, Any]:
    """The producer's body of receipt `index`, as an agent runtime would send it."""
    rng = random.Random(shape.seed * 1_000_003 + index)
    slot = index % SLOTS
    workflow = workflow_of(index)
    recorded = shape.recorded_at(index)
    links: dict[str, Any] | None = None
    if slot < 10:
        call = slot // 2
        phase = "start" if slot % 2 == 0 else "end"
        kind, name = rng.choices(SUBJECTS, cum_weights=SUBJECT_WEIGHTS)[0]
        step = f"call-{call}-{name}"
        attempt: dict[str, Any] = {"number": 1}
        if phase == "end" and rng.random() < 0.1:
            attempt = {
                "number": 2,
                "prior_attempt_id": f"{workflow}/{step}/1",
                "retry_reason": "the first attempt timed out after 30 s",
            }
    else:
        kind, name = TASKS[(index // SLOTS) % len(TASKS)]
        step = "finish"
        attempt = {"number": 1}
        base = index - slot
        if slot == 10:
            phase = "completion"
            children = [str(public_id(shape.seed, base + k)) for k in (1, 3, 5, 7, 9)]
            links = {"child_receipt_ids": children}
        else:
            phase = "confirmation" if (index // SLOTS) % 2 else "handoff"
            links = {"parent_receipt_id": str(public_id(shape.seed, base + 10))}
    started = recorded - timedelta(milliseconds=rng.randint(200, 90_000))
    body: dict[str, Any] = {
        "workflow_id": workflow,
        "step_id": step,
        "attempt": attempt,
        "phase": phase,
        "subject": {"type": kind, "name": name, "version": f"{rng.randint(1, 4)}.0"},
        "framework": {
            "name": FRAMEWORKS[(index // SLOTS) % len(FRAMEWORKS)],
            "version": "1.2.3",
            "run_id": hashlib.md5(b"%d" % index).hexdigest()[:16],
            "parent_run_id": hashlib.md5(b"w%d" % (index // SLOTS)).hexdigest()[:16],
        },
        "session_id": session_of(index),
        "actor": f"agent-{(index // SLOTS) % 7}",
        "trace_id": hashlib.sha256(b"trace %d" % (index // SLOTS)).hexdigest()[:32],
        "request_id": f"req-{index:08d}",
        "started_at": stamp(started),
        "input_summary": json.dumps(
            {"query": words(rng, rng.randint(8, 30)), "order": f"ORD-{rng.randint(1000, 99999)}"}
        ),
        "observed": rng.sample(SENTENCES, rng.randint(2, 4)),
        "not_observed": rng.sample(NOT_OBSERVED, rng.randint(1, 2)),
        "idempotency_key": f"{workflow}/{step}/{phase}/{attempt['number']}",
        "metadata": {
            "ticket": f"OPS-{rng.randint(100, 99999)}",
            "region": rng.choice(("eu-west", "us-east", "ap-south")),
            "cost_cents": rng.randint(0, 5000),
        },
    }
    if phase != "start":
        body["outcome"] = rng.choices(OUTCOMES, cum_weights=OUTCOME_WEIGHTS)[0]
        body["ended_at"] = stamp(recorded)
        body["duration_ms"] = int((recorded - started).total_seconds() * 1000)
        result = " ".join(rng.sample(SENTENCES, rng.randint(3, 7))) + " " + words(rng, 40)
        if rng.random() < 0.01:
            result += " token sk-proj-" + hashlib.sha256(b"%d" % index).hexdigest()[:24]
        body["result"] = result
    if links is not None:
        body["links"] = links
    return body


def ingest_bodies(shape: Shape, size: int, rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Bodies like the first tenant's stored ones (links to its stored receipts included),
    with "@KEY@" for the idempotency key."""
    bodies: list[dict[str, Any]] = []
    while len(bodies) < count:
        index = rng.randrange(size)
        if tenant_of(index) != 0 or index - index % SLOTS + SLOTS > size:
            continue
        body = payload(shape, index)
        body["idempotency_key"] = "@KEY@"
        bodies.append(body)
    return bodies

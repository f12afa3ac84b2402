"""The receipt documents a LangChain run yields: a tool run's start and end, the outermost
run's completion (which links the tool receipts already published), and the readable text of
LangChain's values."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import langchain_core

from receiptsite_client._adapters import (
    MAX_ID,
    attempt_field,
    cut,
    elapsed_ms,
    framework_field,
    published_id,
    receipt_document,
    safe_id,
)
from receiptsite_client.langchain.runs import Attempt, ChainRun, ToolRun

FRAMEWORK_NAME = "langchain"
MAX_CHILD_LINKS = 100  # receipt/v1: links.child_receipt_ids holds at most 100 ids


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def text_of(value: Any) -> str:
    """The readable text of a LangChain value: a message's content, a string, else repr."""
    content = getattr(value, "content", None)
    if content is not None and not isinstance(value, (str, bytes)):
        value = content
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content blocks
        parts = []
        for block in value:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                parts.append(repr(block))
        return "\n".join(parts)
    if isinstance(value, dict) and len(value) == 1:
        return text_of(next(iter(value.values())))
    return repr(value)


class Documents:
    """Builds the documents; mixed into ReceiptCallbackHandler, whose options these are (read
    at each event, so a change to one counts from the next receipt on)."""

    workflow_id: str
    key_prefix: str
    include_inputs: bool
    include_results: bool
    completion_subject_type: str

    def _start_document(
        self, run: ToolRun, run_id: UUID, prior: Attempt | None, input_str: str
    ) -> dict[str, Any]:
        attempt = attempt_field(
            run.attempt,
            str(prior.run_id) if prior is not None else None,
            prior.error if prior is not None else None,
        )
        return self._tool_document(
            run,
            run_id,
            "start",
            attempt,
            started_at=run.started_at,
            input_summary=input_str if self.include_inputs else None,
            observed=[
                f"LangChain's callback manager reported that tool {run.name!r} started"
                + (f" for the model's tool call {run.tool_call_id}" if run.tool_call_id else "")
                + (f" (attempt {run.attempt})." if run.attempt > 1 else ".")
            ],
        )

    def _end_document(
        self, run: ToolRun, run_id: UUID, outcome: str, result: str
    ) -> dict[str, Any]:
        return self._tool_document(
            run,
            run_id,
            "end",
            attempt_field(run.attempt),
            outcome=outcome,
            started_at=run.started_at or None,
            duration_ms=elapsed_ms(run.started) if run.started_at else None,
            ended_at=now(),
            result=self._result(result, outcome),
            observed=[
                f"LangChain's callback manager reported that tool {run.name!r} "
                + ("returned." if outcome == "succeeded" else f"ended with outcome {outcome}.")
            ],
        )

    def _tool_document(
        self, run: ToolRun, run_id: UUID, phase: str, attempt: dict[str, Any], **fields: Any
    ) -> dict[str, Any]:
        return receipt_document(
            workflow_id=self.workflow_id,
            step_id=safe_id(f"{run.name}/{run.identity}"[:MAX_ID]) or f"tool/{run_id}",
            attempt=attempt,
            phase=phase,
            subject_type="tool",
            subject_name=safe_id(run.name[:MAX_ID]) or "tool",
            framework=framework_field(
                FRAMEWORK_NAME,
                langchain_core.__version__,
                str(run_id),
                parent_run_id=str(run.parent_run_id) if run.parent_run_id is not None else None,
                tool_call_id=safe_id(run.tool_call_id),
            ),
            idempotency_key=self._key(run_id, phase, attempt["number"]),
            metadata={"langchain.root_run_id": str(run.root)},
            **fields,
        )

    def _completion_document(
        self, run_id: UUID, chain: ChainRun, number: int, outcome: str, result: str
    ) -> dict[str, Any]:
        linked: list[str] = []
        unlinked: list[str] = []
        for _, entry in chain.children:
            receipt_id = published_id(entry)
            if receipt_id and len(linked) < MAX_CHILD_LINKS:
                linked.append(receipt_id)
            else:
                unlinked.append(entry.idempotency_key)
        not_observed = (
            [
                cut(
                    f"{len(unlinked)} tool receipt(s) of this run were not published when "
                    "this completion was recorded, so it does not link them (idempotency "
                    "keys: " + ", ".join(unlinked) + ")."
                )
            ]
            if unlinked
            else None
        )
        return receipt_document(
            workflow_id=self.workflow_id,
            step_id=f"run/{run_id}",
            attempt=attempt_field(number),
            phase="completion",
            subject_type=self.completion_subject_type,
            subject_name=safe_id(chain.name[:MAX_ID]) or "langchain run",
            framework=framework_field(FRAMEWORK_NAME, langchain_core.__version__, str(run_id)),
            outcome=outcome,
            ended_at=now(),
            started_at=chain.started_at or None,
            duration_ms=elapsed_ms(chain.started) if chain.started_at else None,
            input_summary=chain.input_summary,
            result=self._result(result, outcome),
            observed=[
                f"LangChain's callback manager reported that the outermost run "
                f"{'returned' if outcome == 'succeeded' else 'ended with outcome ' + outcome}, "
                f"after {chain.tool_calls} tool call(s), {chain.tool_failures} of which did not "
                "succeed."
            ],
            links={"child_receipt_ids": linked} if linked else None,
            not_observed=not_observed,
            idempotency_key=self._key(run_id, "completion", number),
            metadata={
                "langchain.root_run_id": str(run_id),
                "tool_calls": chain.tool_calls,
                "tool_failures": chain.tool_failures,
            },
        )

    def _result(self, result: str, outcome: str) -> str | None:
        """The result text sent: all of it, or with include_results off only a failure's
        error text, cut (it is what the failure receipt shows)."""
        if self.include_results or outcome != "succeeded":
            return result if self.include_results else cut(result)
        return None

    def _key(self, run_id: UUID, phase: str, attempt: int) -> str:
        return f"{self.key_prefix}/{run_id}/{phase}/{attempt}"

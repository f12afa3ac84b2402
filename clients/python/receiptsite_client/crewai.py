"""CrewAI adapter: one `completion` receipt per finished task.

    from crewai import Crew
    from receiptsite_client import Client
    from receiptsite_client.crewai import receipt_task_callback

    client = Client("https://receipts.example.org", api_key, "outbox.sqlite3")
    on_task = receipt_task_callback(client, "wf-7f3a", tasks=["research", "write"])
    crew = Crew(agents=[...], tasks=[...], task_callback=on_task)
    result = crew.kickoff()
    on_task.urls   # {(workflow, task, "completion", attempt): "https://…/run/<id>"}

`receipt_task_callback` returns a plain callable for `Crew(task_callback=...)` or
`Task(callback=...)`: CrewAI calls it with the task's `TaskOutput` once the task has finished,
and it records one receipt through `client.record` (which redacts, keeps the entry in the
outbox and publishes it). Constructing it subscribes to nothing: no listener is put on
CrewAI's global event bus, at import or ever; only a crew or task that is handed the callback
produces receipts.

The callback never raises into CrewAI (CrewAI would fail the task) and never touches the
`TaskOutput`: whatever goes wrong with a receipt is kept in `.errors` (and logged), and the
task's result stays exactly what the agent produced. Every receipt is kept, per workflow, task,
phase and attempt, in `.entries` and `.urls`; a task that completes again in the same workflow
(a second kickoff) is its next attempt, with the previous attempt's idempotency key as
`attempt.prior_attempt_id`.

What the receipt holds: `subject` {type `task`, name: the task's `name`, else a short form of
its description}, `step_id` the same, `framework` {name `crewai`, the installed version,
`run_id`: the task's id, `parent_run_id`: the kickoff's execution id}, `outcome` `succeeded`,
`input_summary` the task's description, `result` the task's raw output, the task's timing
when CrewAI kept it, and `metadata` with the crew id, agent role and output format.
CrewAI passes the callback only the `TaskOutput`; the task's ids come from CrewAI's own
context variables (`crewai.context.get_current_task_id`,
`crewai.execution.get_execution_uuid`) and, for the crew id and timing, from the `Task` that
called the callback (the calling frame's `self`, accepted only when its `output` is the very
object received).
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType
from typing import Any, NamedTuple

import crewai
from crewai import Task
from crewai.tasks.task_output import TaskOutput

from receiptsite_client._adapters import (
    MAX_ID,
    MAX_LIST_TEXT,
    attempt_field,
    framework_field,
    receipt_document,
)
from receiptsite_client.redaction import redact_text

__all__ = ["ReceiptError", "ReceiptKey", "ReceiptTaskCallback", "receipt_task_callback"]

logger = logging.getLogger(__name__)

FRAMEWORK_NAME = "crewai"
PHASE = "completion"
NAME_LIMIT = 80  # code points of a description used as a task's name
KEY_LIMIT = 200  # an idempotency key's maximum length (receipt/v1)


class ReceiptKey(NamedTuple):
    """Where a receipt sits in a run: one per workflow, task, phase and attempt."""

    workflow_id: str
    task: str
    phase: str
    attempt: int


@dataclass(frozen=True)
class ReceiptError:
    """A receipt that could not be recorded or was refused; the task itself went on."""

    key: ReceiptKey | None  # None when the failure came before the key was known
    task: str
    message: str
    exception: BaseException | None = None


def _short(text: str, limit: int) -> str:
    """One line of at most `limit` code points."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _clean_identifier(text: str) -> str:
    """An identifier the site accepts: secrets replaced (the site refuses identifiers that
    look like one), one line, at most 200 code points, never empty."""
    redacted, _ = redact_text(text)
    return _short(redacted, MAX_ID) or "task"


def _idempotency_key(workflow_id: str, task: str, phase: str, attempt: int) -> str:
    """`<workflow>/<task>/<phase>/<attempt>`, in visible ASCII and at most 200 characters; a
    part that had to be changed carries a short hash of its original, so that two tasks whose
    names differ only in what was changed never share a key."""

    def part(value: str, limit: int) -> str:
        safe = re.sub(r"[^\x21-\x7e]+", "-", value).strip("-") or "x"
        if safe == value and len(safe) <= limit:
            return safe
        digest = hashlib.sha256(value.encode("utf-8")).hexdigest()[:10]
        return f"{safe[: limit - 11]}~{digest}"

    tail = f"/{phase}/{attempt}"
    room = KEY_LIMIT - len(tail) - 1  # the "/" between workflow and task
    workflow = part(workflow_id, room // 2)
    return f"{workflow}/{part(task, room - len(workflow))}{tail}"


def _aware(moment: Any) -> str | None:
    """An RFC 3339 timestamp of a datetime CrewAI kept (naive local time), or None."""
    if not isinstance(moment, datetime):
        return None
    return moment.astimezone().isoformat()


def _calling_task(output: TaskOutput) -> Task | None:
    """The Task whose execution called the callback with `output`, if it can be seen.

    CrewAI calls `self.callback(self.output)` / `crew.task_callback(self.output)` from
    `Task._execute_core` (or its async twin); that frame's `self` is the Task. It is accepted
    only when its `output` is the very object received, so a callback called any other way
    simply gets None.
    """
    try:
        frame: FrameType | None = sys._getframe(2)  # 0: here, 1: __call__, 2: CrewAI
    except ValueError:
        return None
    try:
        for _ in range(3):  # a wrapper or two in between is fine
            if frame is None:
                return None
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, Task) and getattr(candidate, "output", None) is output:
                return candidate
            frame = frame.f_back
        return None
    finally:
        del frame  # no reference cycle through the frames


class ReceiptTaskCallback:
    """The callable `receipt_task_callback` returns; see the module's docstring."""

    def __init__(
        self,
        client: Any,
        workflow_id: str,
        *,
        tasks: Iterable[Task | str] | None = None,
        parent_idempotency_key: str | None = None,
        metadata: Mapping[str, str | int | bool | None] | None = None,
    ) -> None:
        if not isinstance(workflow_id, str) or not workflow_id:
            raise ValueError("workflow_id must be a non-empty string")
        self.client = client
        self.workflow_id = workflow_id
        self.parent_idempotency_key = parent_idempotency_key
        self.metadata = dict(metadata or {})
        self.errors: list[ReceiptError] = []
        self._tasks: list[Task] | None = None
        self._names: set[str] = set()
        if tasks is not None:
            self._tasks = []
            for task in tasks:
                if isinstance(task, Task):
                    self._tasks.append(task)
                elif isinstance(task, str):
                    self._names.add(task)
                else:
                    raise TypeError(f"tasks: expected crewai Task objects or names, not {task!r}")
        self._lock = threading.Lock()
        self._attempts: dict[tuple[str, str], int] = {}  # (workflow, task) -> last attempt
        self._keys: dict[ReceiptKey, str] = {}  # receipt -> its idempotency key
        self._entries: dict[ReceiptKey, Any] = {}  # receipt -> Entry as last seen

    # --- CrewAI calls this ------------------------------------------------------------------

    def __call__(self, output: TaskOutput) -> None:
        """Record one completion receipt for `output`. Never raises an Exception, never
        changes `output`, returns None (CrewAI would await anything awaitable)."""
        name = "task"
        key: ReceiptKey | None = None
        try:
            task = _calling_task(output)
            if not self._chosen(output, task):
                return
            name = self._task_name(output, task)
            with self._lock:
                attempt = self._next_attempt(name)
                key = ReceiptKey(self.workflow_id, name, PHASE, attempt)
                prior = (
                    _idempotency_key(self.workflow_id, name, PHASE, attempt - 1)
                    if attempt > 1
                    else None
                )
                idempotency_key = _idempotency_key(self.workflow_id, name, PHASE, attempt)
                self._keys[key] = idempotency_key
            document = self._document(output, task, name, attempt, idempotency_key, prior)
            entry = self.client.record(document)
            with self._lock:
                self._entries[key] = entry
            if getattr(entry, "receipt_status", None) == "failed":
                self._error(key, name, f"the site refused the receipt: {entry.error}", None)
        except Exception as error:  # a receipt must never break the crew
            self._error(key, name, f"{type(error).__name__}: {error}", error)

    # --- what was recorded ------------------------------------------------------------------

    @property
    def entries(self) -> dict[ReceiptKey, Any]:
        """Every receipt recorded, as the outbox knows it now (a `flush()` that published a
        pending entry shows here), keyed by (workflow, task, phase, attempt)."""
        with self._lock:
            known = dict(self._entries)
            keys: dict[Any, ReceiptKey] = {value: receipt for receipt, value in self._keys.items()}
        try:
            for entry in self.client.entries(self.workflow_id):
                receipt = keys.get(getattr(entry, "idempotency_key", None))
                if receipt is not None:
                    known[receipt] = entry
        except Exception as error:  # the outbox unreadable: what was last seen stands
            logger.warning("receiptsite: could not read the outbox: %s", error)
        with self._lock:
            self._entries.update(known)
        return known

    @property
    def urls(self) -> dict[ReceiptKey, str]:
        """The page of every published receipt, keyed by (workflow, task, phase, attempt)."""
        return {
            key: entry.url for key, entry in self.entries.items() if getattr(entry, "url", None)
        }

    # --- the pieces ---------------------------------------------------------------------------

    def _error(
        self, key: ReceiptKey | None, task: str, message: str, error: BaseException | None
    ) -> None:
        try:
            logger.warning("receiptsite: receipt for CrewAI task %r: %s", task, message)
            with self._lock:
                self.errors.append(ReceiptError(key, task, message, error))
        except Exception:  # noqa: S110 - recording the error must not raise either
            pass

    def _chosen(self, output: TaskOutput, task: Task | None) -> bool:
        if self._tasks is None:
            return True
        from crewai.context import get_current_task_id

        task_id = get_current_task_id() or (str(task.id) if task is not None else None)
        for wanted in self._tasks:
            if task is not None and wanted is task:
                return True
            if task_id is not None and str(wanted.id) == task_id:
                return True
            if task is None and task_id is None and wanted.output is output:
                return True
        names = {output.name, output.description, task_id}
        if task is not None:
            names |= {task.name, task.description, task._original_description}
        return bool(self._names & {n for n in names if n})

    @staticmethod
    def _task_name(output: TaskOutput, task: Task | None) -> str:
        """The task's own name, else a short form of its description."""
        if task is not None and task.name:
            return _clean_identifier(task.name)
        if output.name and output.name != output.description:
            return _clean_identifier(output.name)
        return _clean_identifier(_short(output.description, NAME_LIMIT))

    def _next_attempt(self, name: str) -> int:
        """1 for a task's first completion in the workflow, then 2, 3, …; numbering goes on
        after the attempts this outbox already holds (another process, an earlier run)."""
        slot = (self.workflow_id, name)
        last = self._attempts.get(slot)
        if last is None:
            last = 0
            try:
                for entry in self.client.entries(self.workflow_id):
                    number = int(entry.attempt or 0)
                    if entry.idempotency_key == _idempotency_key(
                        self.workflow_id, name, PHASE, number
                    ):
                        last = max(last, number)
            except Exception as error:
                logger.warning("receiptsite: could not read the outbox: %s", error)
        self._attempts[slot] = last + 1
        return last + 1

    def _document(
        self,
        output: TaskOutput,
        task: Task | None,
        name: str,
        attempt: int,
        idempotency_key: str,
        prior: str | None,
    ) -> dict[str, Any]:
        from crewai.context import get_current_task_id
        from crewai.execution import get_execution_uuid

        task_id = get_current_task_id() or (str(task.id) if task is not None else None)
        execution_id = get_execution_uuid()
        crew = getattr(getattr(task, "agent", None), "crew", None) if task else None
        crew_id = str(crew.id) if crew is not None and not isinstance(crew, str) else None
        agent_role = output.agent or ""

        metadata: dict[str, Any] = {
            "crewai.crew_id": crew_id,
            "crewai.execution_id": execution_id,
            "crewai.agent_role": _short(agent_role, MAX_LIST_TEXT) if agent_role else None,
            "crewai.output_format": str(getattr(output.output_format, "value", "")) or None,
        }
        observed = [
            _short(
                f"CrewAI reported that the task {name!r} completed"
                + (f", run by the agent {agent_role!r}." if agent_role else "."),
                MAX_LIST_TEXT,
            )
        ]
        failures = list(output.tool_failures or [])
        if failures:
            metadata["crewai.tool_failures"] = len(failures)
            tools = ", ".join(sorted({failure.tool_name for failure in failures}))
            observed.append(
                _short(
                    f"{len(failures)} tool call(s) reported a failure during the task ({tools});"
                    " its output may be incomplete.",
                    MAX_LIST_TEXT,
                )
            )
        for field, value in self.metadata.items():
            metadata.setdefault(field, value)

        started = getattr(task, "start_time", None)
        ended = getattr(task, "end_time", None)
        duration_ms = None  # CrewAI kept no timing, or a clock that went back
        if isinstance(started, datetime) and isinstance(ended, datetime) and ended >= started:
            duration_ms = int((ended - started).total_seconds() * 1000)
        return receipt_document(
            workflow_id=self.workflow_id,
            step_id=name,
            attempt=attempt_field(attempt, prior),
            phase=PHASE,
            subject_type="task",
            subject_name=name,
            framework=framework_field(
                FRAMEWORK_NAME,
                crewai.__version__,
                task_id,
                parent_run_id=execution_id or crew_id,
            ),
            outcome="succeeded",
            started_at=_aware(started) if duration_ms is not None else None,
            ended_at=_aware(ended) or datetime.now(UTC).isoformat(),
            duration_ms=duration_ms,
            input_summary=output.description,
            result=output.raw if output.raw else str(output),
            observed=observed,
            not_observed=["Whether the task's output is correct, or was used afterwards."],
            links=(
                {"parent_idempotency_key": self.parent_idempotency_key}
                if self.parent_idempotency_key
                else None
            ),
            idempotency_key=idempotency_key,
            metadata={k: v for k, v in metadata.items() if v is not None},
        )


def receipt_task_callback(
    client: Any,
    workflow_id: str,
    *,
    tasks: Iterable[Task | str] | None = None,
    parent_idempotency_key: str | None = None,
    metadata: Mapping[str, str | int | bool | None] | None = None,
) -> ReceiptTaskCallback:
    """A task callback for CrewAI (`Crew(task_callback=...)` or `Task(callback=...)`) that
    records one `completion` receipt per chosen task through `client.record`.

    `tasks`: None for every task, else the tasks to record, as `Task` objects or names (a
    task's `name`, its description, or its id). `parent_idempotency_key`: the key of a receipt
    already recorded (a receipt of the whole run, say), linked as every task receipt's parent.
    `metadata`: extra flat metadata for every receipt (the adapter's own `crewai.*` keys win).
    Constructing it registers nothing anywhere.
    """
    return ReceiptTaskCallback(
        client,
        workflow_id,
        tasks=tasks,
        parent_idempotency_key=parent_idempotency_key,
        metadata=metadata,
    )

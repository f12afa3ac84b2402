"""The LangChain runs a ReceiptCallbackHandler has seen: which outermost run each run belongs
to, the tool runs under way, the outermost runs and what their tools did, and each tool call's
attempts (a tool call seen again in the same outermost run, or a run under RunnableRetry's
``retry:attempt:N`` tag, is a retry). Bounded, and forgotten when the outermost run ends. Not
thread-safe: the handler serialises its hooks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple
from uuid import UUID

from receiptsite_client._adapters import trim

if TYPE_CHECKING:
    from receiptsite_client import Entry

_RETRY_TAG = "retry:attempt:"


class ReceiptKey(NamedTuple):
    """Where a receipt sits in a LangChain run: the key of ``handler.urls``.

    ``run_id`` is the outermost run's id, ``call_id`` the tool run's id (for the completion,
    the outermost run's id again), ``phase`` the receipt's phase, ``attempt`` its number.
    All ids are LangChain's UUIDs as strings.
    """

    run_id: str
    call_id: str
    phase: str
    attempt: int


@dataclass
class ToolRun:
    root: UUID
    name: str
    identity: str  # what stays the same across attempts: the tool call id, else a run id
    attempt: int
    started_at: str
    started: float  # time.monotonic()
    parent_run_id: UUID | None
    tool_call_id: str | None


@dataclass
class ChainRun:
    name: str
    started_at: str
    started: float
    input_summary: str | None
    children: list[tuple[ReceiptKey, Entry]] = field(default_factory=list)
    tool_calls: int = 0
    tool_failures: int = 0
    run_ids: list[UUID] = field(default_factory=list)  # runs registered under this root


@dataclass
class Attempt:
    number: int
    run_id: UUID
    error: str | None = None


class Runs:
    def __init__(self) -> None:
        self.chains: dict[UUID, ChainRun] = {}  # the outermost runs under way
        self._parents: dict[UUID, UUID | None] = {}
        self._tools: dict[UUID, ToolRun] = {}
        # (root, identity) -> the attempts seen; (parent run, tool name) -> identity, for
        # RunnableRetry's attempts of a tool called without a tool call id.
        self._attempts: dict[tuple[UUID, str], list[Attempt]] = {}
        self._retry_parents: dict[tuple[UUID | None, str], str] = {}
        self._completions: dict[UUID, int] = {}

    def register(self, run_id: UUID, parent_run_id: UUID | None) -> UUID:
        """Remember the run's parent; the outermost run known above it."""
        self._parents[run_id] = parent_run_id
        root = run_id
        for _ in range(10_000):  # a tree, but never loop forever on a malformed one
            parent = self._parents.get(root)
            if parent is None:
                break
            root = parent
        return root

    def chain_started(self, run_id: UUID, parent_run_id: UUID | None) -> UUID:
        """Register a chain run; its root (the run itself when it is the outermost)."""
        root = self.register(run_id, parent_run_id)
        if parent_run_id is not None and root in self.chains:
            self.chains[root].run_ids.append(run_id)
        return root

    def tool_started(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        tool_call_id: object,
        tags: Sequence[str] | None,
        started: tuple[str, float],
    ) -> tuple[ToolRun, Attempt | None, ChainRun | None]:
        """The new tool run, the attempt before it (None for a first attempt), its chain."""
        root = self.register(run_id, parent_run_id)
        chain = self.chains.get(root)
        if chain is not None:
            chain.run_ids.append(run_id)
        identity = str(tool_call_id) if tool_call_id else f"run:{run_id}"
        retry_number = _retry_number(tags)
        if not tool_call_id and retry_number > 1:
            identity = self._retry_parents.get((parent_run_id, name), identity)
        if parent_run_id is not None:
            self._retry_parents[(parent_run_id, name)] = identity
        history = self._attempts.setdefault((root, identity), [])
        number = max(len(history) + 1, retry_number)
        prior = history[-1] if history else None
        history.append(Attempt(number=number, run_id=run_id))
        self.forget_old()
        run = ToolRun(
            root=root,
            name=name,
            identity=identity,
            attempt=number,
            started_at=started[0],
            started=started[1],
            parent_run_id=parent_run_id,
            tool_call_id=str(tool_call_id) if tool_call_id else None,
        )
        self._tools[run_id] = run
        return run, prior, chain

    def tool_ended(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        *,
        succeeded: bool,
        error: str | None,
        name: object,
        tool_call_id: object,
    ) -> tuple[ToolRun, ChainRun | None]:
        """The tool run that ended (one made up when its start was not seen) and its chain,
        which counts it; its attempt keeps `error` for the next attempt's retry reason."""
        run = self._tools.pop(run_id, None)
        if run is None:  # the start was not seen (the handler came in late): record the end
            root = self.register(run_id, parent_run_id)
            run = ToolRun(
                root=root,
                name=str(name or "tool"),
                identity=str(tool_call_id) if tool_call_id else f"run:{run_id}",
                attempt=1,
                started_at="",
                started=0.0,
                parent_run_id=parent_run_id,
                tool_call_id=str(tool_call_id) if tool_call_id else None,
            )
        for attempt in reversed(self._attempts.get((run.root, run.identity), [])):
            if attempt.run_id == run_id:
                attempt.error = error
                break
        chain = self.chains.get(run.root)
        if chain is not None:
            chain.tool_calls += 1
            chain.tool_failures += not succeeded
        return run, chain

    def tool_recorded(self, run: ToolRun, run_id: UUID) -> None:
        if run.root == run_id:  # a tool called outside any chain: nothing else will end
            self._parents.pop(run_id, None)

    def completion_number(self, run_id: UUID) -> int:
        number = self._completions.get(run_id, 0) + 1
        self._completions[run_id] = number
        self.forget_old()
        return number

    def forget_run(self, root: UUID, chain: ChainRun | None) -> None:
        for run_id in chain.run_ids if chain else [root]:
            self._parents.pop(run_id, None)
            self._tools.pop(run_id, None)
        for attempt_key in [k for k in self._attempts if k[0] == root]:
            del self._attempts[attempt_key]
        live = set(self._parents)
        for retry_key in [k for k in self._retry_parents if k[0] is not None and k[0] not in live]:
            del self._retry_parents[retry_key]

    def forget_old(self) -> None:
        trim(self._attempts)
        trim(self._retry_parents)
        trim(self._completions)


def _retry_number(tags: Sequence[str] | None) -> int:
    """N from RunnableRetry's ``retry:attempt:N`` tag, else 0."""
    for tag in tags or ():
        if isinstance(tag, str) and tag.startswith(_RETRY_TAG):
            try:
                return int(tag[len(_RETRY_TAG) :])
            except ValueError:
                return 0
    return 0

"""Which run a tool call belongs to, and its trace: the SDK has no run id, so one is made per
`Runner.run` (the same for the hooks and the wrapper), and the SDK's trace id is read when
tracing is on."""

from __future__ import annotations

import contextlib
import threading
import uuid
import weakref
from typing import Any

from agents import RunContextWrapper
from agents.tracing import get_current_trace

from receiptsite_client._adapters import safe_id

# The SDK has no run id. Each Runner.run makes one RunContextWrapper, and every ToolContext it
# derives for a tool call shares that wrapper's `usage` object (a public field, kept for the
# whole run): that object tells one run from another. Keyed by id() with a weak reference
# (Usage is an unhashable dataclass); an entry goes when its run's Usage is collected.
_RUNS: dict[int, tuple[weakref.ref[Any], str]] = {}
_RUNS_LOCK = threading.Lock()


def run_id_of(context: RunContextWrapper[Any]) -> str:
    usage = getattr(context, "usage", None)
    if usage is None:
        usage = context
    key = id(usage)
    with _RUNS_LOCK:
        known = _RUNS.get(key)
        if known is not None and known[0]() is usage:
            return known[1]
        run_id = uuid.uuid4().hex

        def forget(ref: weakref.ref[Any], key: int = key) -> None:
            current = _RUNS.get(key)
            if current is not None and current[0] is ref:
                _RUNS.pop(key, None)

        # Not weakly referenceable: no memory, one id per call of this function.
        with contextlib.suppress(TypeError):
            _RUNS[key] = (weakref.ref(usage, forget), run_id)
        return run_id


def current_trace_id() -> str | None:
    """The SDK's trace id when tracing is on (a disabled trace's id is "no-op")."""
    try:
        trace = get_current_trace()
        trace_id = getattr(trace, "trace_id", None) if trace is not None else None
    except Exception:
        return None
    if not isinstance(trace_id, str) or trace_id == "no-op":
        return None
    return safe_id(trace_id)

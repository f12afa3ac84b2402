"""What checking a receipt yields: each named check's result (pass, fail, could not check)
with its detail in plain words, and the verdict over them (valid, invalid, could not check)
with its exit status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PASS = "pass"
FAIL = "fail"
UNCHECKED = "could_not_check"

VALID = "valid"
INVALID = "invalid"
COULD_NOT_CHECK = "could_not_check"

EXIT_CODES = {VALID: 0, INVALID: 1, COULD_NOT_CHECK: 2}


@dataclass(frozen=True)
class Check:
    name: str
    result: str  # PASS, FAIL or UNCHECKED
    detail: str

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "result": self.result, "detail": self.detail}


@dataclass
class Result:
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    receipt_id: str | None = None

    @property
    def status(self) -> str:
        results = {check.result for check in self.checks}
        if FAIL in results:
            return INVALID
        if UNCHECKED in results or not self.checks:
            return COULD_NOT_CHECK
        return VALID

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.result == FAIL]

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "checks": [c.as_json() for c in self.checks]}

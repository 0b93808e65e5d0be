"""A finding: the result of every check in dswiz (hardware hazards, config linter, launch preflight).

Each finding says what is wrong, why it matters and the exact fix, so every front door (table, JSON, TUI) can
show it the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any


class Severity(str, Enum):
    ERROR = "error"  # will fail or silently do the wrong thing: stop
    WARNING = "warning"  # works, but not as the user probably meant
    INFO = "info"  # worth knowing

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str  # stable identifier, e.g. "batch-arithmetic", "arch-list-unparsable"
    what: str  # what is wrong, in one sentence
    why: str  # why it matters
    fix: str  # the exact fix
    location: str | None = None  # key path ("zero_optimization.stage"), "file:line", or an env var name

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["severity"] = self.severity.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            severity=Severity(d["severity"]),
            code=str(d["code"]),
            what=str(d["what"]),
            why=str(d["why"]),
            fix=str(d["fix"]),
            location=d.get("location"),
        )


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; stable within a severity."""
    return sorted(findings, key=lambda f: f.severity.rank)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)

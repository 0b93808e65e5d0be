"""How a consumer's own rejection joins dswiz's findings: its fix points at dswiz's findings "above" only when there
are some (it once did so under a lone raw TypeError)."""

from __future__ import annotations

from wizard.consumer.check import merge_with_own
from wizard.findings import Finding, Severity

REJECTS = Finding(
    Severity.ERROR,
    "accelerate-rejects",
    "accelerate 1.15.0 rejects this config: TypeError: '>' not supported between instances of 'str' and 'int'",
    "this is accelerate's own validation: the job would stop the same way",
    "fix what the message names (dswiz's findings above give the fix for the known cases)",
    "x.yaml",
)
OWN_ERROR = Finding(
    Severity.ERROR, "accelerate-num-processes", "num_processes is 'two'", "why", "fix", "x.yaml"
)
OWN_NOTE = Finding(Severity.INFO, "accelerate-default-stage", "zero_stage is not set", "why", "fix", "x.yaml")


def test_a_lone_rejection_does_not_point_at_findings_that_are_not_there() -> None:
    (_, merged) = merge_with_own([OWN_NOTE], [REJECTS])
    assert merged.fix == "fix what the message names"


def test_beside_dswiz_errors_the_rejection_points_at_them() -> None:
    merged = merge_with_own([OWN_ERROR], [REJECTS])
    assert merged[-1].fix == REJECTS.fix and merged[0] == OWN_ERROR

"""Findings (hazards, linter results) as the user reads them: severity, what, why, and the exact fix."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text

from wizard.findings import Finding, Severity, sort_findings

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "bold yellow", Severity.INFO: "bold cyan"}


def findings_text(findings: Iterable[Finding], *, empty: str = "No problems found.") -> Text:
    items = sort_findings(findings)
    if not items:
        return Text(empty, style="green")
    text = Text()
    for n, f in enumerate(items):
        if n:
            text.append("\n")
        text.append(f"{f.severity.value:<8}", style=_STYLE[f.severity])
        text.append(f.what)
        if f.location:
            text.append(f"  [{f.location}]", style="dim")
        text.append(f"\n        why: {f.why}", style="dim")
        text.append("\n        fix: ", style="dim")
        text.append(f.fix, style="green")
    return text

"""The consumers' own validation, as findings: runs ``probe.py`` in a subprocess of a given Python (the training
environment's), so dswiz never imports torch/DeepSpeed itself and need not share their environment.

An edge module (it starts processes): the pure linter never imports it; `dswiz check` and the launch preflight do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from wizard.config.schema import Consumer
from wizard.findings import Finding, Severity

PROBE = Path(__file__).with_name("probe.py")
MARKER = "DSWIZ_PROBE_RESULT "
DEFAULT_TIMEOUT_S = 120.0
_NAMES = {"deepspeed": "DeepSpeed", "accelerate": "accelerate"}


def consumer_findings(
    path: Path | str,
    *,
    kind: str,
    python: str | None = None,
    consumer: Consumer | None = None,
    world_size: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cwd: Path | str | None = None,
) -> list[Finding]:
    """Findings from DeepSpeed's (``kind="deepspeed"``, a JSON) or accelerate's (``kind="accelerate"``, a YAML
    and its JSON) own checks, run by ``python`` (default: this interpreter). ``cwd`` is where the job would be
    launched from (accelerate resolves relative paths there)."""
    python = python or sys.executable
    location = str(path)
    request = {
        "kind": kind,
        "path": os.path.abspath(path),
        "world_size": world_size,
        "consumer": consumer,
    }
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": ""}
    try:
        proc = subprocess.run(
            [python, str(PROBE)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=cwd,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        return [
            _finding(
                Severity.WARNING,
                "consumer-check-failed",
                f"cannot run {python} to check the config with {_NAMES.get(kind, kind)}",
                "the consumers' own validation did not run",
                "pass --python with the training environment's interpreter, or --no-consumer-check",
                location,
            )
        ]
    except subprocess.TimeoutExpired:
        return [
            _finding(
                Severity.WARNING,
                "consumer-check-timeout",
                f"{_NAMES.get(kind, kind)}'s own check did not finish in {timeout_s:.0f} s",
                "importing torch and DeepSpeed can be slow on a cold or busy machine; nothing was checked",
                "run again, or pass --no-consumer-check",
                location,
            )
        ]
    result = _result(proc.stdout)
    if result is None:
        tail = " / ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return [
            _finding(
                Severity.WARNING,
                "consumer-check-failed",
                f"the {_NAMES.get(kind, kind)} check crashed in {python} (exit {proc.returncode})",
                f"the consumers' own validation did not run: {tail[:300]}",
                "check that this Python has torch and DeepSpeed installed (`python -c 'import deepspeed'`)",
                location,
            )
        ]
    return findings_from_result(result, kind=kind, python=python, location=location)


def _result(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                value = json.loads(line[len(MARKER) :])
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


def findings_from_result(result: dict[str, Any], *, kind: str, python: str, location: str) -> list[Finding]:
    versions = result.get("versions", {})
    out: list[Finding] = []
    for module in result.get("missing", []):
        out.append(
            _finding(
                Severity.WARNING,
                "consumer-not-installed",
                f"{module} is not installed for {python}: its own checks did not run",
                "dswiz's rules still apply, but the consumer's validation (its exact messages) was skipped",
                "pass --python with the training environment's interpreter, or --no-consumer-check",
                location,
            )
        )
    for item in result.get("errors", []):
        source = str(item.get("source", kind))
        name = _NAMES.get(source, source)
        version = versions.get(source)
        message = " ".join(str(item.get("message", "")).split())
        out.append(
            _finding(
                Severity.ERROR,
                f"{source}-rejects",
                f"{name}{' ' + version if version else ''} rejects this config: {message[:600]}",
                f"this is {name}'s own validation, run in {python}: the job would stop the same way",
                "fix what the message names (dswiz's findings above give the fix for the known cases)",
                location,
            )
        )
    for item in _unique_messages(result.get("warnings", [])):
        source = str(item.get("source", kind))
        name = _NAMES.get(source, source)
        out.append(
            _finding(
                Severity.WARNING,
                f"{source}-warns",
                f"{name} warns: {item['message'][:400]}",
                f"{name}'s own validation logged this while reading the config",
                "read the warning; it usually names the setting to change",
                location,
            )
        )
    return out


def _unique_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for item in items:
        message = " ".join(str(item.get("message", "")).split())
        if message and message not in seen:
            seen.add(message)
            out.append({**item, "message": message})
    return out


def _finding(severity: Severity, code: str, what: str, why: str, fix: str, location: str) -> Finding:
    return Finding(severity=severity, code=code, what=what, why=why, fix=fix, location=location)

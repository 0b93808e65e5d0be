"""The consumers' own validation, as findings: runs ``probe.py`` in a subprocess of a given Python (the training
environment's), so dswiz never imports torch/DeepSpeed itself and need not share their environment.

An edge module (it starts processes): the pure linter never imports it; `dswiz check` and the launch preflight do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
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
    target = ProbeTarget(Path(path), kind, consumer, world_size)
    return consumer_findings_many([target], python=python, timeout_s=timeout_s, cwd=cwd)[0]


@dataclass(frozen=True)
class ProbeTarget:
    path: Path
    kind: str  # "deepspeed" (a JSON) or "accelerate" (a YAML)
    consumer: Consumer | None = None
    world_size: int | None = None


def consumer_findings_many(
    targets: list[ProbeTarget],
    *,
    python: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cwd: Path | str | None = None,
) -> list[list[Finding]]:
    """``consumer_findings`` for several files in one subprocess (importing torch is the slow part)."""
    if not targets:
        return []
    python = python or sys.executable
    requests = [
        {"kind": t.kind, "path": os.path.abspath(t.path), "world_size": t.world_size, "consumer": t.consumer}
        for t in targets
    ]
    name = " and ".join(sorted({_NAMES.get(t.kind, t.kind) for t in targets}))
    # PYTHONPATH cleared: the probe is standalone and must see the training environment, not dswiz's checkout.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": ""}

    def failed(finding: Finding) -> list[list[Finding]]:
        return [[replace(finding, location=str(t.path))] for t in targets]

    try:
        proc = subprocess.run(
            [python, str(PROBE)],
            input=json.dumps({"requests": requests}),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=cwd,
            env=env,
            check=False,
        )
    except (FileNotFoundError, PermissionError):
        return failed(
            _finding(
                Severity.WARNING,
                "consumer-check-failed",
                f"cannot run {python} to check the config with {name}",
                "the consumers' own validation did not run",
                "pass --python with the training environment's interpreter, or --no-consumer-check",
                "",
            )
        )
    except subprocess.TimeoutExpired:
        return failed(
            _finding(
                Severity.WARNING,
                "consumer-check-timeout",
                f"{name}'s own check did not finish in {timeout_s:.0f} s",
                "importing torch and DeepSpeed can be slow on a cold or busy machine; nothing was checked",
                "run again, or pass --no-consumer-check",
                "",
            )
        )
    result = _result(proc.stdout)
    results = result.get("results") if result is not None else None
    if not isinstance(results, list) or len(results) != len(targets):
        tail = " / ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return failed(
            _finding(
                Severity.WARNING,
                "consumer-check-failed",
                f"the {name} check crashed in {python} (exit {proc.returncode})",
                f"the consumers' own validation did not run: {tail[:300]}",
                "check that this Python has torch and DeepSpeed installed (`python -c 'import deepspeed'`)",
                "",
            )
        )
    return [
        findings_from_result(r, kind=t.kind, python=python, location=str(t.path))
        for t, r in zip(targets, results, strict=True)
    ]


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
                "fix what the message names" + _SEE_ABOVE,
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


# One cause, one finding: a consumer's own message (a fragment of it) -> dswiz's codes that already report that cause
# with a fix. When dswiz found one of them, the consumer's finding is folded into it.
SAME_CAUSE: tuple[tuple[str, frozenset[str]], ...] = (
    ("has been removed", frozenset({"removed-key"})),
    ("train_batch_size is not equal", frozenset({"batch-arithmetic"})),
    ("has to be greater than 0", frozenset({"batch-arithmetic"})),
    ("Either train_batch_size or train_micro_batch_size_per_gpu", frozenset({"batch-missing"})),
    ("cannot be simultaneously enabled", frozenset({"fp16-and-bf16"})),
    ("Extra inputs are not permitted", frozenset({"unknown-section-key"})),
    ("Duplicate keys", frozenset({"duplicate-key"})),
    ("Please specify the ZeRO optimization config", frozenset({"no-zero-optimization"})),
    ("max_grad_norm", frozenset({"max-grad-norm-in-optimizer"})),
    ("cannot be None if remote device is nvme", frozenset({"nvme-path-missing"})),
    ("Input should be a valid", frozenset({"string-number", "string-bool", "wrong-type"})),
    ("Input should be greater than", frozenset({"out-of-range"})),
    ("had unknown keys", frozenset({"accelerate-unknown-key"})),
    ("When using `deepspeed_config_file`", frozenset({"accelerate-config-file-conflict"})),
    ("is not a supported DeepSpeed Optimizer", frozenset({"optimizer-unsupported"})),
    ("cannot read the file", frozenset({"not-json", "template-placeholders", "duplicate-key"})),
    ("is deprecated", frozenset({"deprecated-key"})),
)


_SEE_ABOVE = " (dswiz's findings above give the fix for the known cases)"


def merge_with_own(own: list[Finding], from_consumer: list[Finding]) -> list[Finding]:
    """dswiz's findings plus the consumers' own, one finding per cause: a consumer's error or warning that one of
    dswiz's findings already explains (``SAME_CAUSE``) is dropped, and that finding says the consumer agrees."""
    codes = {f.code for f in own}
    out = list(own)
    if "template-placeholders" in codes:
        # What a consumer makes of unfilled placeholders (hjson reads bare words as strings) is the template's
        # consequence, not another cause.
        return out + [f for f in from_consumer if f.severity is Severity.INFO]
    own_errors = any(f.severity is Severity.ERROR for f in own)
    for found in from_consumer:
        explained = next(
            (covered for fragment, covered in SAME_CAUSE if fragment in found.what and covered & codes), None
        )
        if explained is None or found.severity is Severity.INFO:
            if not own_errors:  # no finding of dswiz's "above" to point at
                found = replace(found, fix=found.fix.replace(_SEE_ABOVE, ""))
            out.append(found)
            continue
        name = found.what.split(" rejects")[0].split(" warns")[0]
        for i, f in enumerate(out):
            if f.code in explained and "own check" not in f.why:
                out[i] = replace(f, why=f"{f.why} ({name}'s own check says the same)")
    return out


def _finding(severity: Severity, code: str, what: str, why: str, fix: str, location: str) -> Finding:
    return Finding(severity=severity, code=code, what=what, why=why, fix=fix, location=location)

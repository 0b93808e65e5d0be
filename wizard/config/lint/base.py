"""What every linter rule shares: the context it judges in and small helpers to read a raw config dict."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from wizard.config.schema import AUTO, Consumer
from wizard.findings import Finding, Severity
from wizard.hardware.report import HardwareReport

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


@dataclass(frozen=True)
class LintContext:
    """Who will read the config and where it will run. Unknown (None) means "do not guess": rules that need it
    are skipped or say what they could not check."""

    consumer: Consumer | None = None
    world_size: int | None = None  # data-parallel ranks; falls back to the hardware's GPU count
    hardware: HardwareReport | None = None
    gpus_per_node: int | None = None
    # Paths (nvme_path) are checked on this machine's filesystem only when the config is for this machine.
    check_local_paths: bool = True
    # Linted for `dswiz launch`: it adds steps_per_print and log_level to the copy it launches and checks the NVMe
    # folder and libaio on this machine itself (wizard.config.nvme.launch_nvme_findings), so those rules stay quiet.
    at_launch: bool = False

    @property
    def effective_world_size(self) -> int | None:
        if self.world_size is not None:
            return self.world_size if self.world_size >= 1 else None
        if self.hardware is not None and self.hardware.total_gpus > 0:
            return self.hardware.total_gpus
        return None

    @property
    def effective_gpus_per_node(self) -> int | None:
        if self.gpus_per_node is not None:
            return self.gpus_per_node
        if self.hardware is not None and self.hardware.gpus_per_node > 0:
            return self.hardware.gpus_per_node
        return None


def finding(
    severity: Severity, code: str, what: str, why: str, fix: str, location: str | None = None
) -> Finding:
    return Finding(severity=severity, code=code, what=what, why=why, fix=fix, location=location)


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(word, sorted(candidates), n=1, cutoff=0.75)
    return matches[0] if matches else None


def is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == AUTO


def as_int(value: Any) -> int | None:
    """An integer the way DeepSpeed reads one (5e8 counts), else None (strings, bools and "auto" are not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def section(cfg: dict[str, Any], *path: str) -> dict[str, Any]:
    """The dict at ``path`` or {} (missing or not a dict: other rules report that)."""
    node: Any = cfg
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def stage_of(cfg: dict[str, Any]) -> int | None:
    """The ZeRO stage as DeepSpeed sees it (0 when unset), None when it is not a readable number."""
    zero = cfg.get("zero_optimization")
    if zero is None or (isinstance(zero, dict) and "stage" not in zero):
        return 0
    if not isinstance(zero, dict):
        return None
    stage = as_int(zero.get("stage"))
    return stage if stage in (0, 1, 2, 3) else None


def enabled(cfg: dict[str, Any], name: str) -> bool:
    """Whether fp16/bf16 is explicitly enabled (``true``; "auto" is judged by the auto rules)."""
    return section(cfg, name).get("enabled") is True


def walk(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (key path, value) below ``node``, depth first, list items as ``path[i]``."""
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path, value
            yield from walk(value, path)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            path = f"{prefix}[{i}]"
            yield path, value
            yield from walk(value, path)

"""accelerate's multi-node launcher (``deepspeed_config.deepspeed_multinode_launcher``) and what it requires
(accelerate 1.15.0 accelerate/utils/launch.py ``prepare_deepspeed_cmd_env``; DeepSpeed 0.19.8
deepspeed/launcher/multinode_runner.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wizard.config.launchers import (
    DEFAULT_LAUNCHER,
    MPI_LAUNCHERS,
    MULTINODE_LAUNCHERS,
    launcher_problems,
)
from wizard.config.lint.base import ERROR, LintContext, as_int, did_you_mean, finding
from wizard.findings import Finding


def yaml_launcher(raw: Any) -> str | None:
    """The multi-node launcher an accelerate YAML dict names (accelerate's default pdsh when it names none), or
    None when the YAML is for one machine or is not a mapping."""
    if not isinstance(raw, dict) or (as_int(raw.get("num_machines", 1)) or 1) <= 1:
        return None
    ds = raw.get("deepspeed_config")
    value = ds.get("deepspeed_multinode_launcher") if isinstance(ds, dict) else None
    return value if isinstance(value, str) else DEFAULT_LAUNCHER


def lint_accelerate_launcher(
    raw: dict[str, Any], ds: dict[str, Any], at: Callable[[str], str], ctx: LintContext
) -> list[Finding]:
    launcher = yaml_launcher(raw)
    if launcher is None:
        return []
    where = at("deepspeed_config.deepspeed_multinode_launcher")
    out: list[Finding] = []
    if launcher not in MULTINODE_LAUNCHERS:
        guess = did_you_mean(launcher, MULTINODE_LAUNCHERS)
        return [
            finding(
                ERROR,
                "launcher-unknown",
                f"deepspeed_multinode_launcher {launcher!r} is not a launcher"
                + (f': did you mean "{guess}"?' if guess else ""),
                f'accelerate passes it to DeepSpeed as --launcher, which stops: "Unknown launcher {launcher}"',
                f"use one of: {', '.join(MULTINODE_LAUNCHERS)}",
                where,
            )
        ]
    software = ctx.hardware.software if ctx.hardware is not None else None
    for problem in launcher_problems(launcher, deepspeed_version=software.deepspeed if software else None):
        out.append(
            finding(
                ERROR,
                "launcher-version",
                problem,
                'accelerate refuses: "nossh launcher requires DeepSpeed >= 0.14.5"',
                "upgrade DeepSpeed on every node, or use the pdsh or standard launcher",
                where,
            )
        )
    if launcher != "standard" and not ds.get("deepspeed_hostfile"):
        out.append(
            finding(
                ERROR,
                "launcher-no-hostfile",
                f"{raw.get('num_machines')} machines with the {launcher} launcher but no deepspeed_hostfile",
                "accelerate runs `deepspeed --hostfile None`: DeepSpeed finds no hostfile and trains on this "
                'machine only ("Unable to find hostfile, will proceed with training with local resources only")',
                "set deepspeed_config.deepspeed_hostfile to the hostfile's absolute path (one `host slots=N` per node)",
                at("deepspeed_config"),
            )
        )
    if launcher == "standard" and not raw.get("main_process_ip"):
        out.append(
            finding(
                ERROR,
                "launcher-no-master",
                "the standard launcher (torchrun on every node) without main_process_ip",
                "torchrun on each node connects to main_process_ip:main_process_port; without it the nodes never "
                "meet",
                "set main_process_ip to the address of machine rank 0",
                at("main_process_ip") if "main_process_ip" in raw else at("num_machines"),
            )
        )
    filters = [k for k in ("deepspeed_inclusion_filter", "deepspeed_exclusion_filter") if ds.get(k)]
    if launcher in MPI_LAUNCHERS and filters:
        out.append(
            finding(
                ERROR,
                "launcher-filter",
                f"{', '.join(filters)} with the {launcher} launcher",
                f'DeepSpeed stops: "{launcher} backend does not support worker include/exclusion"',
                "delete the filter and list exactly the hosts to use in the hostfile (or use pdsh)",
                at(f"deepspeed_config.{filters[0]}"),
            )
        )
    return out

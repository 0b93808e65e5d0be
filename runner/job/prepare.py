"""The run directory before the start: the launched copies of the configs (made observable: csv monitor, progress
lines), the deepspeed_env file for other nodes, and the commands that will start the job.

The originals are never touched; the directory itself and how files in it are written belong to ``runner.rundir``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner import rundir
from wizard import launch_command as launch
from wizard.config.hostfile import launch_hosts
from wizard.errors import DswizError
from wizard.launch_command import LaunchCommand, LaunchSpec


@dataclass(frozen=True)
class PreparedRun:
    """A run directory ready to launch: the copies written, the commands built."""

    run_id: str
    run_dir: Path
    specs: tuple[LaunchSpec, ...]  # one per launcher started on this machine (several: simulated nodes)
    commands: tuple[LaunchCommand, ...]
    configs: dict[str, str]  # original -> copy
    config_changes: tuple[str, ...]
    ds_config: dict[str, Any] | None  # the config as launched (the observable copy)
    cwd: str
    plan: dict[str, Any] | None = None  # run.json's "plan" section (predictions for the monitor)
    hosts: tuple[str, ...] = ()  # the job's nodes, node 0 first (from the hostfile); () on one machine
    scheduler_job: str | None = None  # "slurm 4242" inside a Slurm allocation


def prepare_run(
    specs: Sequence[LaunchSpec],
    *,
    ds_config: Mapping[str, Any] | None,
    accelerate_yaml: str | None = None,
    deepspeed_env_texts: Sequence[str] = (),
    steps_per_print: int = launch.DEFAULT_STEPS_PER_PRINT,
    cwd: str | None = None,
    plan: Mapping[str, Any] | None = None,
) -> PreparedRun:
    """Create the run directory (0700) and the launched copies of the configs; the originals are not touched.

    All specs share one run directory (``specs[0].run_dir``). Raises DswizError when it cannot be created.
    """
    first = specs[0]
    run_dir = rundir.make_run_dir(first.run_dir)
    configs: dict[str, str] = {}
    changes: list[str] = []
    launched: dict[str, Any] | None = None
    if first.ds_config is not None and ds_config is not None:
        launched, ds_changes = launch.observable_ds_config(
            dict(ds_config), csv_output_path=launch.csv_dir(first), steps_per_print=steps_per_print
        )
        copy = launch.config_copy_path(first, first.ds_config)
        rundir.write_private_file(copy, json.dumps(launched, indent=2, sort_keys=True) + "\n")
        configs[first.ds_config] = copy
        changes += [f"{Path(copy).name}: {c}" for c in ds_changes]
    if first.accelerate_config is not None and accelerate_yaml is not None:
        text, yaml_changes = launch.launched_accelerate_yaml(
            accelerate_yaml, ds_config_copy=launch.launched_ds_config(first)
        )
        copy = launch.config_copy_path(first, first.accelerate_config)
        rundir.write_private_file(copy, text)
        configs[first.accelerate_config] = copy
        changes += [f"{Path(copy).name}: {c}" for c in yaml_changes]
    commands = tuple(launch.build_command(s) for s in specs)
    env_file = commands[0].env.get("DS_ENV_FILE")
    if env_file:
        extra = {k: v for k, v in first.env if v is not None}
        rundir.write_private_file(env_file, launch.deepspeed_env_text(list(deepspeed_env_texts), extra))
        changes.append(f"deepspeed_env: {', '.join(sorted(extra))} exported to every node")
    return PreparedRun(
        run_id=run_dir.name,
        run_dir=run_dir,
        specs=tuple(specs),
        commands=commands,
        configs=configs,
        config_changes=tuple(changes),
        ds_config=launched,
        cwd=cwd or os.getcwd(),
        plan=dict(plan) if plan else None,
        hosts=_hosts(first.hostfile),
        scheduler_job=f"slurm {os.environ['SLURM_JOB_ID']}" if os.environ.get("SLURM_JOB_ID") else None,
    )


def _hosts(hostfile: str | None) -> tuple[str, ...]:
    """The hostfile's hosts in order (the preflight has read it already; unreadable now: none recorded)."""
    if hostfile is None:
        return ()
    try:
        return tuple(host for host, _ in launch_hosts(Path(hostfile).read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, DswizError):
        return ()

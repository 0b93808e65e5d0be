"""What the monitor watches: a ``JobTarget`` (files, processes, plan, what it can and cannot see), built from a run
directory (``dswiz launch``'s layout, runner/rundir.py) or a PID (runner/metrics/attach.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner import rundir
from runner.metrics.plan import PlanInfo
from wizard.errors import DswizError

PidsProvider = Callable[[], Iterable[int]]


@dataclass(frozen=True)
class JobTarget:
    source: str  # in words: "run 20261130-014135", "pid 4242 (deepspeed launcher)"
    logs: tuple[Path, ...] = ()
    rank_log_dirs: tuple[Path, ...] = ()
    rank_logs: tuple[tuple[Path, int], ...] = ()  # (file, rank) for logs known one by one (attach by PID)
    csv_dir: Path | None = None
    nvme_path: Path | None = None
    run_dir: Path | None = None  # metrics.jsonl lives here (None: history is not kept)
    plan: PlanInfo = field(default_factory=PlanInfo)
    pids: tuple[int, ...] = ()  # the job's root processes when known at resolve time
    notes: tuple[str, ...] = ()


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """run.json as a dict ({} when absent or unreadable: a run dir being created has none yet)."""
    try:
        data = json.loads((run_dir / rundir.RUN_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # absent, torn, a 4,300+-digit number, nested too deep
        return {}
    return data if isinstance(data, dict) else {}


def run_pids(run: Mapping[str, Any]) -> list[int]:
    """The launchers' and ranks' pids that run.json names (the launcher writes them as ranks appear)."""
    launchers = run.get("launchers")
    ranks = run.get("rank_pids")
    found = [p.get("pid") for p in launchers if isinstance(p, Mapping)] if isinstance(launchers, list) else []
    found += list(ranks.values()) if isinstance(ranks, Mapping) else []
    # a hand-edited run.json may say anything: only what can be a pid (Linux's pid_max is at most 2**22)
    return sorted({p for p in found if type(p) is int and 0 < p < 2**31})


def ds_config_facts(config: Mapping[str, Any]) -> tuple[Path | None, Path | None, list[str]]:
    """(csv monitor job dir, NVMe offload path, notes on what this config lets the monitor see)."""
    notes = []
    if config.get("steps_per_print") in (None, 0):
        notes.append(
            "the DeepSpeed config sets no steps_per_print: DeepSpeed prints no step or throughput lines"
        )
    if str(config.get("log_level", "")).lower() not in ("info", "debug"):
        notes.append(
            'the DeepSpeed config lacks "log_level": "info": DeepSpeed >= 0.17.6 hides its step lines'
        )
    csv_dir = None
    csv = config.get("csv_monitor")
    if isinstance(csv, Mapping) and csv.get("enabled") and isinstance(csv.get("output_path"), str):
        csv_dir = Path(csv["output_path"]) / str(csv.get("job_name") or "DeepSpeedJobName")
    nvme = None
    zero = config.get("zero_optimization")
    if isinstance(zero, Mapping):
        for key in ("offload_optimizer", "offload_param"):
            off = zero.get(key)
            if (
                isinstance(off, Mapping)
                and off.get("device") == "nvme"
                and isinstance(off.get("nvme_path"), str)
            ):
                nvme = Path(off["nvme_path"])
                break
    return csv_dir, nvme, notes


def load_json_config(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def target_from_run_dir(run_dir: Path) -> JobTarget:
    run = read_run_json(run_dir)
    run_id = run.get("run_id") if isinstance(run.get("run_id"), str) else run_dir.name
    csv_dir = run_dir / rundir.CSV_DIR / rundir.CSV_JOB_NAME
    nvme = None
    notes: list[str] = []
    config_dir = run_dir / rundir.CONFIG_DIR
    for cfg_path in sorted(config_dir.glob("*.json")) if config_dir.is_dir() else []:
        cfg = load_json_config(cfg_path)
        if cfg is None:
            continue
        cfg_csv, cfg_nvme, cfg_notes = ds_config_facts(cfg)
        nvme = nvme or cfg_nvme
        notes += cfg_notes
        if cfg_csv is not None and not str(cfg_csv).startswith(str(run_dir)):
            written = run.get("cwd")
            cwd = written if isinstance(written, str) and written else os.getcwd()
            csv_dir = cfg_csv if cfg_csv.is_absolute() else Path(cwd) / cfg_csv
    placement = _placement(run)
    return JobTarget(
        source=f"run {run_id}" + (f", {placement}" if placement else ""),
        logs=(run_dir / rundir.COMBINED_LOG,),
        rank_log_dirs=(run_dir / rundir.RANK_LOGS_DIR,),
        csv_dir=csv_dir,
        nvme_path=nvme,
        run_dir=run_dir,
        plan=PlanInfo.from_run_json(run),
        pids=tuple(run_pids(run)),
        notes=tuple(notes),
    )


def _placement(run: Mapping[str, Any]) -> str:
    """run.json's nodes and scheduler job in words (rundir.placement_words); "" when it cannot be read."""
    try:
        return rundir.placement_words(rundir.RunRecord.from_dict(run))
    except DswizError:
        return ""

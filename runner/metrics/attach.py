"""Find what to watch from what the user typed: a run directory, a run id, a PID, or nothing (the latest run).

By PID the job need not have been started by dswiz: the process tree comes from psutil, the logs from where the
launcher's and ranks' stdout/stderr point (/proc/PID/fd/1 and 2: a file, not a terminal or a pipe), the DeepSpeed
config from the ranks' ``--deepspeed_config`` argument, the csv monitor directory and NVMe path from that config,
and total steps / sequence length from the script's arguments. What cannot be seen is said in ``notes``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

import psutil

from runner import rundir
from runner.metrics.host import is_launcher, process_local_rank
from runner.metrics.plan import PlanInfo
from runner.metrics.tail import rank_of_log_file
from runner.metrics.target import (
    JobTarget,
    ds_config_facts,
    load_json_config,
    read_run_json,
    target_from_run_dir,
)
from wizard.errors import DswizError

_CONFIG_FLAGS = ("--deepspeed_config", "--deepspeed-config", "--deepspeed")


def resolve_target(arg: str | None, runs_root: Path | None = None) -> JobTarget:
    """RUN_DIR | RUN_ID | PID | None (the latest run) -> JobTarget; a bad argument is a DswizError."""
    root = runs_root or rundir.runs_root()
    if arg is None:
        return _run_dir_target(latest_run_dir(root))
    path = Path(arg).expanduser()
    if path.is_dir():
        if not _looks_like_run_dir(path):
            raise DswizError(
                f"{arg} is not a dswiz run directory (no run.json, logs/ or metrics.jsonl in it)",
                "pass the directory `dswiz launch` printed, a run id from `ls "
                + str(root)
                + "`, or a job's PID",
            )
        return _run_dir_target(path)
    if rundir.is_run_id(arg):
        candidate = root / arg
        if not candidate.is_dir():
            raise DswizError(f"no run {arg} under {root}", f"list the runs with `ls {root}`")
        return _run_dir_target(candidate)
    if arg.isdigit():
        return target_from_pid(int(arg))
    raise DswizError(
        f"{arg!r} is neither a run directory, a run id (like 20261130-014135) nor a PID",
        "run `dswiz monitor` for the latest run, or pass a run directory, a run id or the job's PID",
    )


def _run_dir_target(run_dir: Path) -> JobTarget:
    """A run directory's target. A run.json there that says no status -- unreadable, not a JSON object, or without
    the status `dswiz launch` writes first -- is refused before anything is written into the folder: the monitor
    could never tell that job's end. (No run.json yet is fine: `dswiz launch` is creating it. A record with a value
    of the wrong type is read as far as it goes, as everywhere in the monitor.)"""
    if (run_dir / rundir.RUN_JSON).exists() and not isinstance(read_run_json(run_dir).get("status"), str):
        rundir.read_run_record(run_dir)  # raises a DswizError that names what is wrong with it
        raise DswizError(f"{run_dir / rundir.RUN_JSON} says no status", rundir.RUN_JSON_FIX)
    return target_from_run_dir(run_dir)


def _looks_like_run_dir(path: Path) -> bool:
    return any((path / name).exists() for name in (rundir.RUN_JSON, rundir.LOGS_DIR, rundir.METRICS_JSONL))


def latest_run_dir(root: Path) -> Path:
    """The run started last: under ``root``, or made with --run-dir elsewhere (``rundir.run_dirs_elsewhere``)."""
    try:
        here = [p for p in root.iterdir() if p.is_dir() and _looks_like_run_dir(p)]
    except OSError:
        here = []
    # Under the root, run ids sort by their start (``rundir.new_run_id``): the last by name is the newest there, and
    # only it and the runs made elsewhere have their run.json read.
    runs = sorted(here)[-1:] + [p for p in rundir.run_dirs_elsewhere(root) if _looks_like_run_dir(p)]
    if not runs:
        raise DswizError(
            f"no runs under {root} to monitor",
            "start one with `dswiz launch …`, or pass a run directory or the PID of a running job",
        )
    # A run whose run.json cannot be read (a crash while it was written, a stray folder) is passed over for the
    # newest one that can; it is chosen only when no run can be read (and then says why).
    return max(runs, key=_started_at)


def _started_at(run_dir: Path) -> tuple[bool, float, str]:
    """Whether run.json reads, when the run started (run.json), else when its folder was made; the name breaks ties
    (run ids sort by time)."""
    try:
        return True, rundir.read_run_record(run_dir).started_at, run_dir.name
    except (DswizError, OSError):
        try:
            when = run_dir.stat().st_mtime
        except OSError:
            when = 0.0
    return False, when, run_dir.name


def _stdout_files(proc: psutil.Process) -> list[Path]:
    """The regular files this process writes its stdout/stderr to (none for a terminal, pipe or socket)."""
    out = []
    for fd in (1, 2):
        try:
            target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
        except OSError:
            continue
        path = Path(target)
        if target.startswith("/") and not target.startswith("/dev/") and path.is_file():
            out.append(path)
    return sorted(set(out))


def _config_path(cmdline: Sequence[str], cwd: str | None) -> Path | None:
    for i, arg in enumerate(cmdline):
        for flag in _CONFIG_FLAGS:
            value = None
            if arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            elif arg == flag and i + 1 < len(cmdline) and not cmdline[i + 1].startswith("-"):
                value = cmdline[i + 1]
            if value and value.endswith(".json"):
                path = Path(value)
                return path if path.is_absolute() or cwd is None else Path(cwd) / path
    return None


_RankProcess = tuple[int, psutil.Process, list[str]]  # (local rank, process, its cmdline)


def target_from_pid(pid: int) -> JobTarget:
    """A job dswiz did not start, from the PID of its launcher or of one of its ranks."""
    proc, cmd = _open_process(pid)
    root = _outermost_launcher(proc)
    notes: list[str] = []
    try:
        tree = [root, *root.children(recursive=True)]
        root_cmd = root.cmdline()
    except psutil.Error:
        tree, root_cmd = [root], cmd
    if not is_launcher(root_cmd) and process_local_rank(root) is None:
        notes.append(
            f"PID {root.pid} does not look like a DeepSpeed/torchrun/accelerate job; watching its processes"
        )
    ranks = _rank_processes(tree)
    logs, rank_logs = _log_files(root, ranks)
    if logs or rank_logs:
        notes.append("logs: " + ", ".join(str(f) for f in [*logs, *(f for f, _ in rank_logs)]))
    else:
        notes.append(
            "the job writes its output to a terminal or a pipe, not a file: no step, loss or throughput; "
            "only processes, host and GPUs are visible (redirect its output to a file, or start it with dswiz launch)"
        )
    # The first rank's argv names the config and the script's arguments; before the ranks are spawned (or for
    # a job without a DeepSpeed launcher) the launcher's own argv carries them.
    args_proc, script_args = (ranks[0][1], ranks[0][2]) if ranks else (root, root_cmd)
    config_path = _config_path(script_args, _cwd_of(args_proc))
    csv_dir = nvme = None
    config = load_json_config(config_path) if config_path else None
    if config is not None and config_path is not None:
        csv_dir, nvme, cfg_notes = ds_config_facts(config)
        notes.append(f"DeepSpeed config: {config_path}")
        notes += cfg_notes
        if csv_dir is not None and not csv_dir.is_absolute() and ranks:
            with contextlib.suppress(psutil.Error):
                csv_dir = Path(ranks[0][1].cwd()) / csv_dir
    else:
        notes.append("no readable DeepSpeed config on the command line (--deepspeed_config FILE)")
    notes.append("history is not kept for a job dswiz did not start (no run directory)")
    return JobTarget(
        source=f"pid {root.pid} ({_short(root_cmd)})",
        logs=tuple(logs),
        rank_logs=tuple(rank_logs),
        csv_dir=csv_dir,
        nvme_path=nvme,
        run_dir=None,
        plan=PlanInfo(num_gpus=len(ranks) or None).filled_from_args(script_args),
        pids=(root.pid,),
        notes=tuple(notes),
    )


def _open_process(pid: int) -> tuple[psutil.Process, list[str]]:
    try:
        proc = psutil.Process(pid)
        return proc, proc.cmdline()
    except psutil.NoSuchProcess:
        raise DswizError(
            f"no process with PID {pid}",
            "find the job with `pgrep -af deepspeed` and pass the launcher's or a rank's PID",
        ) from None
    except psutil.AccessDenied:
        raise DswizError(
            f"not allowed to read process {pid} (another user's process?)",
            "run `dswiz monitor` as the user who started the job",
        ) from None


def _outermost_launcher(proc: psutil.Process) -> psutil.Process:
    root = proc
    try:
        for ancestor in proc.parents():
            if is_launcher(ancestor.cmdline()):
                root = ancestor  # keep climbing: the outermost launcher owns the whole job
    except psutil.Error:
        pass
    return root


def _rank_processes(tree: list[psutil.Process]) -> list[_RankProcess]:
    """The processes of the tree that are ranks (``host.local_rank_of``), by local rank; a process whose parent
    has the same local rank (a data loader worker) is part of that rank, not another."""
    local_ranks = {p.pid: process_local_rank(p) for p in tree}
    ranks: list[_RankProcess] = []
    for p in tree:
        lr = local_ranks[p.pid]
        try:
            pc = p.cmdline()
            parent = p.ppid()
        except psutil.Error:
            continue
        if lr is not None and local_ranks.get(parent) != lr:
            ranks.append((lr, p, pc))
    return sorted(ranks, key=lambda r: r[0])


def _log_files(root: psutil.Process, ranks: list[_RankProcess]) -> tuple[list[Path], list[tuple[Path, int]]]:
    """The launcher's log files, and each rank's own (its rank from the file name, else its local rank)."""
    logs: list[Path] = []
    with contextlib.suppress(psutil.Error):
        logs = _stdout_files(root)
    rank_logs: list[tuple[Path, int]] = []
    for lr, p, _ in ranks:
        for f in _stdout_files(p):
            if f in logs:
                continue
            from_name = rank_of_log_file(f)
            rank_logs.append((f, from_name if from_name is not None else lr))
    return logs, rank_logs


def _cwd_of(proc: psutil.Process) -> str | None:
    try:
        return proc.cwd()
    except psutil.Error:
        return None


def _short(cmdline: Sequence[str], limit: int = 60) -> str:
    text = shlex.join(cmdline) if cmdline else "?"
    return text if len(text) <= limit else text[: limit - 1] + "…"

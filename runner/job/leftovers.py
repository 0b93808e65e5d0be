"""Runs whose supervisor died: found later (by `dswiz monitor RUN` and the next `dswiz launch`), their leftover
processes listed and, when asked, stopped.

A run is "supervisor lost" when run.json says so (its reaper wrote it: runner/reaper.py) or says "running"
while the dswiz it names is gone (its pid and process start time, ``runner.rundir.supervisor_alive``: a reused pid
does not count as alive). Its leftovers are the processes that carry the run's job token in their environment:
a session id alone could belong to an unrelated process by now.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from runner import reaper, rundir
from runner.rundir import RunRecord
from wizard.errors import DswizError

_NEWEST_RUNS = 50  # runs looked at per folder by `dswiz launch` (newest first): the check must stay instant


@dataclass(frozen=True)
class LostRun:
    run_dir: Path
    record: RunRecord
    leftover_pids: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"run {self.record.run_id} ({self.run_dir})"

    def describe(self) -> str:
        who = f"its dswiz (pid {self.record.supervisor_pid})" if self.record.supervisor_pid else "its dswiz"
        if not self.leftover_pids:
            return f"{self.label}: supervisor lost ({who} is gone); no process of its job is left"
        pids = ", ".join(str(p) for p in self.leftover_pids[:12])
        more = f" and {len(self.leftover_pids) - 12} more" if len(self.leftover_pids) > 12 else ""
        return (
            f"{self.label}: supervisor lost ({who} is gone) and {len(self.leftover_pids)} process(es) of its job "
            f"still run: pid {pids}{more}"
        )


def leftover_pids(record: RunRecord) -> tuple[int, ...]:
    """The processes still carrying the run's job token (none for a record written before tokens existed)."""
    if not record.job_token:
        return ()
    return tuple(reaper.job_processes((), record.job_token))


def lost_run(run_dir: Path) -> LostRun | None:
    """The run in ``run_dir`` when its supervisor is lost, else None (running, ended, or not a run)."""
    try:
        record = rundir.read_run_record(run_dir)
    except DswizError:
        return None
    if rundir.effective_status(record) != rundir.STATUS_SUPERVISOR_LOST:
        return None
    return LostRun(run_dir, record, leftover_pids(record))


def find_lost_runs(folders: list[Path]) -> list[LostRun]:
    """Lost runs among the newest runs of each folder, newest first, each run once."""
    seen: set[Path] = set()
    found = []
    for folder in folders:
        try:
            runs = sorted((p for p in folder.iterdir() if (p / rundir.RUN_JSON).is_file()), reverse=True)
        except OSError:
            continue
        for run_dir in itertools.islice(runs, _NEWEST_RUNS):
            key = run_dir.resolve()
            if key in seen:
                continue
            seen.add(key)
            lost = lost_run(run_dir)
            if lost is not None:
                found.append(lost)
    return found


def stop_leftovers(lost: LostRun, grace_s: float) -> str:
    """Stop what is left of a lost run (SIGTERM, SIGKILL after ``grace_s``; the reaper's code) and write its
    verdict when none is written. Returns what was done, in words."""
    found, sigkilled, took = reaper.stop_job((), lost.record.job_token, grace_s)
    pid = lost.record.supervisor_pid or 0
    reaper.mark_supervisor_lost(
        str(lost.run_dir), reaper.lost_verdict(pid, found, sigkilled, took, by="dswiz --stop-leftovers")
    )
    if not found:
        return f"{lost.label}: no process of its job was left"
    how = "SIGTERM, then SIGKILL" if sigkilled else "SIGTERM"
    return f"{lost.label}: stopped {found} leftover process(es) in {took:.1f} s ({how})"


def stop_command(lost: LostRun) -> str:
    return f"dswiz monitor {lost.run_dir} --stop-leftovers"

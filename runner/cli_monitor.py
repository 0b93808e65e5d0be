"""`dswiz monitor [RUN_DIR | RUN_ID | PID] [--json] [--interval S]`: the live dashboard, or a JSON stream."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wizard.cli_options import no_history_option
from wizard.errors import DswizError

if TYPE_CHECKING:  # imported when a job is watched, not when `--help` is drawn
    from runner.metrics.snapshot import Snapshot
    from runner.run_history import WatchedJob


@click.command()
@click.argument("target", required=False, metavar="[RUN_DIR | RUN_ID | PID]")
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object per interval, then a summary; no TUI."
)
@click.option(
    "--interval",
    type=float,
    default=1.0,
    show_default=True,
    metavar="S",
    help="Seconds between samples.",
)
@click.option(
    "--stop-leftovers",
    is_flag=True,
    help="For a run whose dswiz was killed (supervisor lost): stop the processes of its job still running, "
    "write its verdict, and exit.",
)
@no_history_option(
    "Leave the run history out: do not record a job watched from its start to its end (`dswiz history`; "
    "jobs `dswiz launch` started record themselves)."
)
def monitor(
    target: str | None, as_json: bool, interval: float, stop_leftovers: bool, no_history: bool
) -> int:
    """Watch a running job: GPU memory and utilisation, throughput, loss, alerts.

    \b
    TARGET is a run directory, a run id, or the PID of a job's launcher or rank
    (also a job started without dswiz; its output must go to a file for step,
    loss and throughput). Without TARGET: the run dswiz launch started last
    (also one made with --run-dir elsewhere). `q` leaves the dashboard; the
    job keeps running.
    """
    if not (0.05 <= interval <= 3600):
        raise DswizError(
            f"--interval {interval} is out of range", "pass seconds between 0.05 and 3600, e.g. --interval 2"
        )
    from runner.metrics.attach import resolve_target

    job = resolve_target(target)
    if stop_leftovers:
        return stop_lost_run(job.run_dir)
    watched = _watched_job() if job.run_dir is None and not no_history else None
    observer = watched.observe if watched is not None else None
    if as_json:
        code = stream_json(job, interval, observer=observer)
    else:
        from runner.monitor.factory import build_live_app

        app = build_live_app(job, interval=interval, observer=observer)
        app.run()
        code = app.return_code or 0  # non-zero: the app ended on an error it has printed
    if not as_json:  # the JSON stream says it before its summary
        say_if_lost(job.run_dir, as_json=False)
    if watched is not None:
        _record_watched(watched)
    return code


def _watched_job() -> WatchedJob:
    """A job dswiz did not start (attached by PID): what the monitor sees of it goes into the run history."""
    from runner.run_history import WatchedJob
    from wizard.hardware import get_hardware
    from wizard.history.record import hardware_fingerprint

    return WatchedJob(lambda: hardware_fingerprint(get_hardware(None)))


def _record_watched(watched: WatchedJob) -> None:
    from runner.run_history import record

    entry = watched.measurement()
    warning = record(entry) if entry is not None else None
    if warning:
        click.echo(warning, err=True)


def stop_lost_run(run_dir: Path | None) -> int:
    """--stop-leftovers: stop what is left of a run whose dswiz died; refuse for any other run."""
    from runner.job.leftovers import lost_run, stop_leftovers

    lost = lost_run(run_dir) if run_dir is not None else None
    if lost is None:
        raise DswizError(
            "--stop-leftovers is for a run whose dswiz was killed (supervisor lost); this one is not",
            "a running dswiz launch stops its job itself (Ctrl-C in its terminal, or SIGTERM to it)",
        )
    click.echo(lost.describe())
    click.echo(stop_leftovers(lost, grace_s=5.0))
    return 0


def say_if_lost(run_dir: Path | None, *, as_json: bool) -> None:
    """After watching: a run whose dswiz died is said, with its leftover processes and how to stop them."""
    if run_dir is None:
        return
    from runner.job.leftovers import lost_run, stop_command

    lost = lost_run(run_dir)
    if lost is None:
        return
    fix = stop_command(lost) if lost.leftover_pids else None
    if as_json:
        event = {"event": "supervisor_lost", "run_dir": str(run_dir), "message": lost.describe()}
        _emit({**event, "leftover_pids": list(lost.leftover_pids), "fix": fix})
    else:
        click.echo(lost.describe(), err=True)
        if fix:
            click.echo(f"  fix: `{fix}`", err=True)


def stream_json(job: object, interval: float, *, observer: Callable[[Snapshot], None] | None = None) -> int:
    """One JSON object per interval on stdout until the job ends, then the summary. Exit 0: a failed job is news,
    not an error of the monitor."""
    from runner.metrics.collector import TERMINAL_STATES, Collector
    from runner.metrics.summary import Summary
    from runner.metrics.target import JobTarget

    assert isinstance(job, JobTarget)
    collector = Collector(target=job, interval=interval, observer=observer)
    summary = Summary()
    try:
        while True:
            started = time.monotonic()
            snap = collector.poll_once()
            summary.add(snap)
            _emit({"event": "snapshot", **snap.to_json()})
            if snap.job_state in TERMINAL_STATES:
                break
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        collector.stop()
    say_if_lost(job.run_dir, as_json=True)
    _emit(summary.to_json())
    return 0


def _emit(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()

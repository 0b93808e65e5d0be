"""`dswiz monitor [RUN_DIR | RUN_ID | PID] [--json] [--interval S]`: the live dashboard, or a JSON stream."""

from __future__ import annotations

import json
import sys
import time

import click

from wizard.errors import DswizError


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
def monitor(target: str | None, as_json: bool, interval: float) -> int:
    """Watch a running job: GPU memory and utilisation, throughput, loss, alerts.

    \b
    TARGET is a run directory, a run id, or the PID of a job's launcher or rank
    (also a job started without dswiz; its output must go to a file for step,
    loss and throughput). Without TARGET: the latest run. `q` leaves the
    dashboard; the job keeps running.
    """
    if not (0.05 <= interval <= 3600):
        raise DswizError(
            f"--interval {interval} is out of range", "pass seconds between 0.05 and 3600, e.g. --interval 2"
        )
    from runner.metrics.attach import resolve_target

    job = resolve_target(target)
    if as_json:
        return stream_json(job, interval)
    from runner.monitor.factory import build_live_app

    app = build_live_app(job, interval=interval)
    app.run()
    return 0


def stream_json(job: object, interval: float) -> int:
    """One JSON object per interval on stdout until the job ends, then the summary. Exit 0: a failed job is news,
    not an error of the monitor."""
    from runner.metrics.collector import TERMINAL_STATES, Collector
    from runner.metrics.summary import Summary
    from runner.metrics.target import JobTarget

    assert isinstance(job, JobTarget)
    collector = Collector(target=job, interval=interval)
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
    _emit(summary.to_json())
    return 0


def _emit(obj: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()

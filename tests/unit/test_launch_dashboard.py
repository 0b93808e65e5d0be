"""`dswiz launch` with the dashboard: the job is supervised in a thread while the monitor's app runs (headless
here); the app closes by itself when the job ends, and its stop choice stops the job."""

from __future__ import annotations

import io
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from runner import launch_ui, rundir
from runner.job.prepare import PreparedRun
from runner.job.session import session_processes
from runner.job.supervisor import Job
from runner.job.terminal import TerminalSink
from wizard.launch_command import LaunchCommand, LaunchSpec

FAKE = textwrap.dedent(
    """
    import sys, time
    print("[2026-11-30 01:00:00,000] [INFO] [launch.py:170:main] dist_world_size=1", flush=True)
    for step in range(1, 1000):
        print({"loss": 5.0 - step / 100, "learning_rate": 0.001, "step": step}, flush=True)
        time.sleep(0.1)
        if sys.argv[1] == "short" and step == 10:
            break
    """
)


def make(tmp_path: Path, mode: str) -> tuple[Job, TerminalSink, io.StringIO]:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    run = rundir.make_run_dir(tmp_path / "run")
    prepared = PreparedRun(
        run_id=run.name,
        run_dir=run,
        specs=(LaunchSpec(script=str(fake), run_dir=str(run), config_arg=""),),
        commands=(LaunchCommand((sys.executable, "-u", str(fake), mode), {}),),
        configs={},
        config_changes=(),
        ds_config=None,
        cwd=str(tmp_path),
    )
    out = io.StringIO()
    sink = TerminalSink(out)
    return Job(prepared, sink, grace_s=0.5, term_grace_s=0.5, status_every_s=60), sink, out


def headless(app: Any) -> object:
    return app.run(headless=True, size=(100, 32))


def test_the_dashboard_closes_when_the_job_ends_and_the_verdict_follows(tmp_path: Path) -> None:
    job, sink, out = make(tmp_path, "short")
    job.start()
    collector = launch_ui.start_collector(job.prepared.run_dir, sink, interval=0.2)
    assert collector is not None
    try:
        outcome = launch_ui.run_with_dashboard(job, collector, sink, run_app=headless, linger_s=0.3)
    finally:
        launch_ui.stop_collector(collector)
    assert outcome.verdict.kind == "success" and outcome.exit_code == 0
    printed = out.getvalue()
    assert "{'loss'" not in printed  # nothing streamed while the dashboard owned the terminal
    assert "[dswiz] verdict: success: 10 steps" in printed  # the verdict once it closed
    assert (job.prepared.run_dir / rundir.METRICS_JSONL).stat().st_size > 0


def test_stopping_from_the_dashboard_stops_the_job(tmp_path: Path) -> None:
    job, sink, _ = make(tmp_path, "long")
    job.start()
    collector = launch_ui.start_collector(job.prepared.run_dir, sink, interval=0.2)

    def stop_then_run(app: Any) -> object:
        # once the job has logged a step (a loaded machine may take seconds to start Python), as a user would
        log = job.prepared.run_dir / rundir.COMBINED_LOG
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "'step': 2" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.05)
        app.stop_job()  # what the quit dialog's "stop" choice calls
        return headless(app)

    try:
        outcome = launch_ui.run_with_dashboard(job, collector, sink, run_app=stop_then_run, linger_s=0.3)
    finally:
        launch_ui.stop_collector(collector)
    assert session_processes(job.sids) == []
    assert outcome.verdict.kind == "interrupted" and outcome.exit_code == 130
    assert outcome.verdict.summary.startswith("stopped from the dashboard at step")

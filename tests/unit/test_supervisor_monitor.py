"""What `dswiz monitor` says about how a job ended, with real processes: attached by PID to a process that is not
its child, it cannot know the exit code ("ended", never "finished, exit 0"); a run stopped by dswiz is
"interrupted", not "failed"; a run whose dswiz died is "supervisor lost", with its leftover processes listed and
stoppable (--stop-leftovers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from runner import reaper, rundir
from runner.metrics.attach import target_from_pid
from runner.metrics.collector import END_RECORD_GRACE_S, TERMINAL_STATES, Collector
from runner.metrics.history import iter_metrics

ROOT = Path(__file__).resolve().parents[2]


def dead_supervisor() -> tuple[int, int]:
    """The pid and start time of a process that has ended (a dswiz that was killed)."""
    proc = subprocess.Popen(["sleep", "30"])
    ticks = rundir.process_start_ticks(proc.pid)
    assert ticks is not None
    proc.kill()
    proc.wait()
    return proc.pid, ticks


def write_run(run_dir: Path, **fields: object) -> None:
    rundir.make_run_dir(run_dir)
    record = rundir.RunRecord(
        run_id=run_dir.name, run_dir=str(run_dir), status="running", started_at=time.time(), command=("x",),
        command_line="x", hostname=os.uname().nodename, boot_id=rundir.boot_id(),
    )  # fmt: skip
    data = {**record.to_dict(), **fields}
    rundir.write_run_record(run_dir, rundir.RunRecord.from_dict(data))


def test_attached_by_pid_a_process_that_ends_has_no_known_exit_code() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        collector = Collector(target=target_from_pid(proc.pid), persist=False, interval=0.1)
        assert collector.poll_once().job_state in ("starting", "running")
        proc.terminate()
        proc.wait()
        snap = collector.poll_once()
    finally:
        proc.kill()
    assert snap.job_state == "ended" and snap.exit_code is None  # not "finished", not exit 0
    collector.stop()


def recorded_states(run_dir: Path) -> list[str]:
    return [s.job_state for s in iter_metrics(run_dir / rundir.METRICS_JSONL)]


def record_end(run_dir: Path, status: str, exit_code: int) -> None:
    """What `dswiz launch` writes once its launcher has returned."""
    record = rundir.read_run_record(run_dir)
    rundir.write_run_record(run_dir, replace(record, status=status, exit_code=exit_code))


def test_a_launched_job_is_recorded_as_its_dswiz_says_it_ended_not_as_merely_ended(tmp_path: Path) -> None:
    """The ranks are gone a moment before `dswiz launch` writes their exit code into run.json. While that dswiz
    lives, the collector waits for it (up to END_RECORD_GRACE_S) instead of ending the history on "ended"."""
    run_dir = tmp_path / "run"
    me = os.getpid()
    write_run(run_dir, supervisor_pid=me, supervisor_start=rundir.process_start_ticks(me))
    job = subprocess.Popen(["sleep", "30"])
    try:
        collector = Collector(run_dir, pids_provider=lambda: [job.pid], interval=0.1)
        assert collector.poll_once().job_state in ("starting", "running")
        job.kill()
        job.wait()
        assert collector.poll_once().job_state not in TERMINAL_STATES  # its dswiz records the end next
        record_end(run_dir, "finished", 0)
        snap = collector.poll_once()
        assert snap.job_state == "finished" and snap.exit_code == 0
        collector.poll_once()
        collector.stop()
    finally:
        job.kill()
        job.wait()
    states = recorded_states(run_dir)
    assert states[-1] == "finished" and states.count("finished") == 1 and "ended" not in states


def test_an_end_recorded_after_ended_corrects_the_history_once(tmp_path: Path) -> None:
    """A dswiz that is silent past the grace (or not known to be alive) gets "ended"; when it does write the exit
    code, the history's last word is corrected to it, once."""
    run_dir = tmp_path / "run"
    me = os.getpid()
    write_run(run_dir, supervisor_pid=me, supervisor_start=rundir.process_start_ticks(me))
    clock = [1000.0]
    job = subprocess.Popen(["sleep", "30"])
    try:
        collector = Collector(run_dir, pids_provider=lambda: [job.pid], clock=lambda: clock[0])
        collector.poll_once()
        job.kill()
        job.wait()
        assert collector.poll_once().job_state not in TERMINAL_STATES
        clock[0] += END_RECORD_GRACE_S
        assert collector.poll_once().job_state == "ended"
        assert collector.poll_once().job_state == "ended"
        record_end(run_dir, "finished", 0)
        assert collector.poll_once().job_state == "finished"
        collector.stop()
    finally:
        job.kill()
        job.wait()
    assert recorded_states(run_dir)[-2:] == ["ended", "finished"]
    assert recorded_states(run_dir).count("ended") == 1 and recorded_states(run_dir).count("finished") == 1


FAILED_RANK_LOG = ROOT / "tests" / "fixtures" / "logs" / "cpu_fail_rank1" / "combined.log"


def test_a_failure_seen_in_the_logs_is_recorded_again_with_the_exit_code_run_json_gives(
    tmp_path: Path,
) -> None:
    """Rank 1's traceback, the ranks gone before the launcher's exit line: "failed", exit code unknown; then the
    launch writes exit code 1, and the history's last word says so."""
    run_dir = tmp_path / "run"
    write_run(run_dir)  # no supervisor pid: nothing to wait for
    lines = FAILED_RANK_LOG.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "exits with return code" in line)
    (run_dir / rundir.COMBINED_LOG).write_text("".join(lines[:cut]))
    job = subprocess.Popen(["sleep", "30"])
    try:
        collector = Collector(run_dir, pids_provider=lambda: [job.pid], interval=0.1)
        collector.poll_once()
        job.kill()
        job.wait()
        first = collector.poll_once()
        assert (first.job_state, first.exit_code) == ("failed", None)
        collector.poll_once()
        record_end(run_dir, "finished", 1)
        last = collector.poll_once()
        assert (last.job_state, last.exit_code) == ("failed", 1)
        collector.stop()
    finally:
        job.kill()
        job.wait()
    ends = [
        (s.job_state, s.exit_code)
        for s in iter_metrics(run_dir / rundir.METRICS_JSONL)
        if s.job_state == "failed"
    ]
    assert ends == [("failed", None), ("failed", 1)]


def test_a_run_stopped_by_dswiz_is_interrupted_not_failed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir, status="interrupted", exit_code=143, interrupted_by="SIGTERM")
    snap = Collector(run_dir, persist=False).poll_once()
    assert snap.job_state == "interrupted" and snap.exit_code == 143
    assert not [a for a in snap.alerts if a.code in ("exit", "host_oom_kill")]


def test_a_run_whose_dswiz_died_is_supervisor_lost_and_its_leftovers_can_be_stopped(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    pid, ticks = dead_supervisor()
    token = "test-token-" + str(os.getpid())
    leftover = subprocess.Popen(["sleep", "60"], env={**os.environ, reaper.TOKEN_ENV: token})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")}
    try:
        write_run(run_dir, supervisor_pid=pid, supervisor_start=ticks, job_token=token)
        record = rundir.read_run_record(run_dir)
        assert (
            rundir.supervisor_alive(record) is False
        )  # its pid may be reused by now: the start time decides
        assert Collector(run_dir, persist=False).poll_once().job_state == "supervisor_lost"

        watched = subprocess.run(
            [sys.executable, "-m", "wizard", "monitor", str(run_dir), "--json", "--interval", "0.2"],
            capture_output=True, text=True, timeout=60, env=env, check=False,
        )  # fmt: skip
        events = [json.loads(line) for line in watched.stdout.splitlines()]
        assert watched.returncode == 0, watched.stderr
        lost = next(e for e in events if e["event"] == "supervisor_lost")
        assert lost["leftover_pids"] == [leftover.pid]
        assert lost["fix"] == f"dswiz monitor {run_dir} --stop-leftovers"
        assert events[-1]["event"] == "summary" and events[-1]["job_state"] == "supervisor_lost"

        stopped = subprocess.run(
            [sys.executable, "-m", "wizard", "monitor", str(run_dir), "--stop-leftovers"],
            capture_output=True, text=True, timeout=60, env=env, check=False,
        )  # fmt: skip
        assert stopped.returncode == 0, stopped.stderr
        assert "stopped 1 leftover process(es)" in stopped.stdout
        leftover.wait(timeout=5)
    finally:
        leftover.kill()
    final = rundir.read_run_record(run_dir)
    assert final.status == "supervisor_lost" and final.verdict is not None
    assert (
        final.verdict.kind == "supervisor_lost" and "dswiz --stop-leftovers stopped" in final.verdict.summary
    )
    assert (
        not psutil.pid_exists(leftover.pid) or psutil.Process(leftover.pid).status() == psutil.STATUS_ZOMBIE
    )


def test_stop_leftovers_refuses_a_run_that_is_not_lost(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_run(run_dir, status="finished", exit_code=0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "monitor", str(run_dir), "--stop-leftovers"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "supervisor lost" in proc.stderr


def test_the_next_launch_names_a_lost_run_and_stops_its_leftovers_when_asked(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runner.cli_launch import check_lost_runs

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the default runs folder is looked at too

    runs = tmp_path / "runs"
    pid, ticks = dead_supervisor()
    token = "test-token-launch-" + str(os.getpid())
    leftover = subprocess.Popen(["sleep", "60"], env={**os.environ, reaper.TOKEN_ENV: token})
    try:
        write_run(runs / "20261201-010000", supervisor_pid=pid, supervisor_start=ticks, job_token=token)
        write_run(runs / "20261201-020000", status="finished", exit_code=0)  # not lost: not named
        check_lost_runs(runs, stop=False, grace_s=1.0)  # not a terminal: says what to run, stops nothing
        err = capsys.readouterr().err
        assert f"run 20261201-010000 ({runs / '20261201-010000'}): supervisor lost" in err
        assert f"still run: pid {leftover.pid}" in err and "20261201-020000" not in err
        assert f"fix: `dswiz monitor {runs / '20261201-010000'} --stop-leftovers`" in err
        assert leftover.poll() is None
        check_lost_runs(runs, stop=True, grace_s=1.0)  # --stop-leftovers
        assert "stopped 1 leftover process(es)" in capsys.readouterr().err
        leftover.wait(timeout=5)
    finally:
        leftover.kill()
    assert rundir.read_run_record(runs / "20261201-010000").status == "supervisor_lost"
    check_lost_runs(runs, stop=False, grace_s=1.0)  # once it has its verdict, it is not named again
    assert capsys.readouterr().err == ""

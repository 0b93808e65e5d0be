"""Process control without DeepSpeed: a fake launcher (a real process tree) that behaves like the bad cases —
ranks that ignore SIGINT, one that ignores SIGTERM too, a double-forked process that leaves the launcher's tree,
a launcher that exits while its children keep running. Fast, so it runs with the unit tests."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
from pathlib import Path

from runner import rundir
from runner.job.prepare import PreparedRun
from runner.job.session import forwarded_signals, session_processes
from runner.job.sink import RunOutcome
from runner.job.stopping import StopEscalation, StopReason, StopStage
from runner.job.supervisor import Job
from runner.phases import Phase
from runner.verdict import Status
from tests.unit.process_support import living
from wizard.launch_command import LaunchCommand, LaunchSpec

FAKE_LAUNCHER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    child = '''
    import os, signal, sys, time
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.argv[1] == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.write(1, f"{sys.argv[1]} {os.getpid()} ready\\\\n".encode())  # one write: lines of two processes never mix
    while True:
        time.sleep(0.05)
    '''
    for rank, kind in enumerate(["polite", "stubborn"]):
        p = subprocess.Popen([sys.executable, "-c", child, kind], env=dict(os.environ, RANK=str(rank)))
        print(f"[2026-11-30 01:00:00,000] [INFO] [launch.py:245:main] process {p.pid} spawned with command: "
              f"['python', '-u', 'x.py', '--local_rank={rank}']", flush=True)
    if os.fork() == 0:  # a process that leaves the launcher's tree (re-parented when its parent exits)
        if os.fork() == 0:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            os.write(1, f"orphan {os.getpid()} ready\\n".encode())
            while True:
                time.sleep(0.05)
        os._exit(0)
    if sys.argv[1] in ("exit", "fail"):
        time.sleep(1.0)
        print("launcher done", flush=True)
        sys.exit(0 if sys.argv[1] == "exit" else 1)
    time.sleep(3600)
    """
)


class RecordingSink:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.notices: list[str] = []
        self.outcome: RunOutcome | None = None
        self.on_ready: threading.Event = threading.Event()

    def on_line(self, text: str, rank: int | None) -> None:
        self.lines.append(text)
        if sum(" ready" in x for x in self.lines) == 3:
            self.on_ready.set()

    def on_status(self, status: Status) -> None:
        pass

    def on_phase(self, phase: Phase) -> None:
        pass

    def on_notice(self, text: str) -> None:
        self.notices.append(text)

    def on_end(self, outcome: RunOutcome) -> None:
        self.outcome = outcome


def make_job(tmp_path: Path, mode: str, sink: RecordingSink) -> Job:
    fake = tmp_path / "fake_launcher.py"
    fake.write_text(FAKE_LAUNCHER)
    run = rundir.make_run_dir(tmp_path / "run")
    spec = LaunchSpec(script=str(fake), run_dir=str(run), config_arg="")
    prepared = PreparedRun(
        run_id=run.name,
        run_dir=run,
        specs=(spec,),
        commands=(LaunchCommand((sys.executable, "-u", str(fake), mode), {"DSWIZ_TEST": "1"}),),
        configs={},
        config_changes=(),
        ds_config=None,
        cwd=str(tmp_path),
    )
    return Job(prepared, sink, grace_s=0.5, term_grace_s=0.5, status_every_s=60)


def kill_leftovers(job: Job) -> None:
    """Whatever happens in the test, no process of it outlives it."""
    for proc in session_processes(job.sids):
        proc.kill()


def run_to_end(tmp_path: Path, mode: str) -> tuple[Job, RecordingSink, RunOutcome]:
    """The fake launcher in ``mode`` run to its end through Job.run (no process of it outlives the test):
    (the job, what it printed, its outcome)."""
    sink = RecordingSink()
    job = make_job(tmp_path, mode, sink)
    try:
        outcome = job.run()
    finally:
        kill_leftovers(job)
    return job, sink, outcome


def pids_of(sink: RecordingSink) -> list[int]:
    return [int(x.split()[1]) for x in sink.lines if x.endswith(" ready")]


def test_stop_escalates_and_leaves_no_process_behind(tmp_path: Path) -> None:
    sink = RecordingSink()
    job = make_job(tmp_path, "stay", sink)
    job.start()
    threading.Thread(
        target=lambda: sink.on_ready.wait(30) and job.request_stop(StopReason.SIGINT), daemon=True
    ).start()
    outcome = job.run()
    assert sink.on_ready.is_set()
    pids = pids_of(sink)
    assert len(pids) == 3
    assert living(pids) == []
    assert session_processes(job.sids) == []
    # SIGINT was ignored by all three, SIGTERM by the stubborn one: the escalation went all the way
    assert any(n.startswith("SIGINT: stopping the job") for n in sink.notices)
    assert "still running: SIGTERM" in sink.notices and "still running: SIGKILL" in sink.notices
    assert outcome.exit_code == 130 and outcome.verdict.kind == "interrupted"
    record = json.loads((outcome.run_dir / "run.json").read_text())
    assert record["status"] == "interrupted" and record["interrupted_by"] == "SIGINT"
    assert record["rank_pids"] == {"0": pids[0], "1": pids[1]} or set(record["rank_pids"].values()) <= set(
        pids
    )
    assert record["env_changes"] == {"DSWIZ_TEST": "1"} and record["ended_at"] >= record["started_at"]
    assert oct(os.stat(outcome.run_dir).st_mode & 0o777) == "0o700"
    assert oct(os.stat(outcome.run_dir / "run.json").st_mode & 0o777) == "0o600"
    log = (outcome.run_dir / "logs" / "combined.log").read_text()
    assert "spawned with command" in log and " ready" in log


def test_processes_that_outlive_the_launcher_are_stopped(tmp_path: Path) -> None:
    job, sink, outcome = run_to_end(tmp_path, "exit")
    assert "launcher done" in sink.lines
    assert session_processes(job.sids) == []
    assert any("outlived the launcher" in n for n in sink.notices)
    assert outcome.verdict.kind == "success"
    assert any("3 process(es) of the job outlived the launcher" in a for a in outcome.verdict.advice)
    assert rundir.read_run_record(outcome.run_dir).launcher_exit_codes == (0,)


def test_ranks_dswiz_stops_after_a_failed_launcher_are_not_called_killed(tmp_path: Path) -> None:
    """The launcher exits 1 and leaves its ranks running: dswiz stops them (SIGTERM, then SIGKILL for the one that
    ignores SIGTERM). Their deaths are dswiz's doing, not the job's cause: the verdict is the launcher's exit code,
    never "rank 1 was killed with SIGKILL" (the death watch may read that SIGKILL from the rank's zombie)."""
    job, sink, outcome = run_to_end(tmp_path, "fail")
    assert session_processes(job.sids) == []
    assert any("outlived the launcher" in n for n in sink.notices)
    assert outcome.verdict.kind == "failed" and "exit code 1" in outcome.verdict.summary, (
        outcome.verdict.summary
    )
    assert any("3 process(es) of the job outlived the launcher" in a for a in outcome.verdict.advice)


def test_sighup_to_dswiz_stops_the_job_like_ctrl_c(tmp_path: Path) -> None:
    """A closed terminal (SIGHUP) must not leave the job running: dswiz's handler starts the same stop."""
    sink = RecordingSink()
    job = make_job(tmp_path, "stay", sink)

    def hang_up_when_ready() -> None:
        sink.on_ready.wait(30)
        os.kill(os.getpid(), signal.SIGHUP)  # to this process, where forwarded_signals installed the handler

    try:
        with forwarded_signals(job):
            job.start()
            threading.Thread(target=hang_up_when_ready, daemon=True).start()
            outcome = job.run()
    finally:
        kill_leftovers(job)
    assert session_processes(job.sids) == []
    assert outcome.verdict.kind == "interrupted" and outcome.exit_code == 129
    assert rundir.read_run_record(outcome.run_dir).interrupted_by == "SIGHUP"
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL  # the handler is gone again


def test_the_stop_escalates_on_time_and_a_second_request_hurries_it() -> None:
    """The stop as a state machine, without processes: SIGINT at once, SIGTERM after the grace, SIGKILL after the
    second grace, then SIGKILL again every second; a second request skips the wait."""
    stop = StopEscalation(grace_s=5.0, term_grace_s=3.0)
    assert stop.tick(0.0) is None and stop.stage is StopStage.NOT_STOPPING
    stop.request(StopReason.SIGTERM)
    first = stop.tick(1.0)
    assert first is not None and first.sig is signal.SIGINT and not first.only_if_alive
    assert first.notice is not None and first.notice.startswith("SIGTERM: stopping the job")
    assert "Ctrl-C again to hurry" in first.notice
    assert stop.tick(5.9) is None
    term = stop.tick(6.0)
    assert term is not None and term.sig is signal.SIGTERM and term.only_if_alive
    stop.request(StopReason.SIGINT)  # hurry: the reason stays the first one
    kill = stop.tick(6.1)
    assert kill is not None and kill.sig is signal.SIGKILL and stop.stage is StopStage.SIGKILL_SENT
    assert stop.reason is StopReason.SIGTERM
    assert stop.tick(6.5) is None
    again = stop.tick(7.1)
    assert again is not None and again.sig is signal.SIGKILL and again.notice is None


def test_what_each_stop_reason_records() -> None:
    assert StopReason.ORPHANS.interrupted_by is None and StopReason.ORPHANS.exit_signal is None
    assert StopReason.DASHBOARD.interrupted_by == "dashboard"
    assert StopReason.DASHBOARD.exit_signal is signal.SIGINT  # the dashboard's stop counts as Ctrl-C
    assert StopReason.SIGHUP.exit_signal is signal.SIGHUP
    orphans = StopEscalation(grace_s=1.0, term_grace_s=1.0)
    orphans.request(StopReason.ORPHANS)
    step = orphans.tick(0.0)
    assert (
        step is not None and step.sig is signal.SIGTERM and step.notice is None
    )  # leftovers: SIGTERM at once

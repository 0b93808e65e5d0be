"""The supervisor's faults with real DeepSpeed 0.19.8 on CPU (gloo, 2 ranks, the real launcher): dswiz itself
SIGKILLed mid-training (three times), a rank printing a 5,000-digit rank number, two launches 1 s apart on default
settings, and a hung rank stopped by --stall-timeout. The job is runner/examples/train_tiny.py, through
tests/integration/faulty_train.py where a fault is needed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner import reaper, rundir
from tests.integration.test_launch_deepspeed import (  # the launch helpers and the workdir fixture
    TRAIN,
    env,
    run,
    shm_left,
    start,
    wait_for_training,
    workdir,  # noqa: F401 - a fixture
)

pytestmark = pytest.mark.integration

FAULTY = Path(__file__).resolve().parent / "faulty_train.py"


def job_left(record: rundir.RunRecord) -> list[int]:
    return reaper.job_processes({p.pgid for p in record.launchers}, record.job_token)


def history(tmp: Path) -> list[dict[str, object]]:
    """`dswiz history --json`'s runs (the test's own history file: DSWIZ_HISTORY, tests/conftest.py)."""
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "history", "--json"],
        cwd=tmp, env=env(tmp), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads(proc.stdout)["runs"]
    assert isinstance(runs, list)
    return runs


def monitor_summary(tmp: Path, run_dir: Path) -> list[dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "wizard", "monitor", str(run_dir), "--json", "--interval", "0.5"],
        cwd=tmp, env=env(tmp), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


# Three launches; on a busy 2-core machine a rank can wait minutes for DeepSpeed's JIT-built CPU op (its build lock
# is shared with every other DeepSpeed run of this user).
@pytest.mark.timeout(1500)
def test_sigkill_of_dswiz_mid_training_leaves_no_job_process(workdir: Path) -> None:  # noqa: F811
    for attempt in range(3):
        run_dir = workdir / f"run{attempt}"
        dswiz = start(
            workdir, "--nproc", "2", "--config", "ds_config.json", "--run-dir", str(run_dir),
            str(TRAIN), "--steps", "100000", "--sleep-per-step", "0.05",
        )  # fmt: skip
        try:
            record = wait_for_training(run_dir, timeout=420)
            assert len(job_left(record)) >= 4  # runner, launch.py, two ranks
            dswiz.send_signal(signal.SIGKILL)
            dswiz.wait(timeout=10)
            t0 = time.monotonic()
            while job_left(record) and time.monotonic() - t0 < 10:
                time.sleep(0.1)
            took = time.monotonic() - t0
            print(f"attempt {attempt}: no job process left {took:.1f} s after SIGKILL of dswiz")
            assert not job_left(record), f"left after 10 s: {job_left(record)}"
            deadline = time.monotonic() + 5  # the reaper removes the ranks' /dev/shm files once they are gone
            while shm_left(record) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert shm_left(record) == []
        finally:
            if dswiz.poll() is None:
                dswiz.kill()
        deadline = time.monotonic() + 10
        while rundir.read_run_record(run_dir).status == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
        final = rundir.read_run_record(run_dir)
        assert final.status == "supervisor_lost" and final.verdict is not None
        assert final.verdict.kind == "supervisor_lost"
        events = monitor_summary(workdir, run_dir)
        assert events[-1]["event"] == "summary" and events[-1]["job_state"] == "supervisor_lost"
        lost = next(e for e in events if e["event"] == "supervisor_lost")
        assert lost["leftover_pids"] == [] and "supervisor lost" in str(lost["message"])
    # The run history kept the three entries the launches wrote at their start, ended now as "lost".
    entries = history(workdir)
    assert sorted(e["run_dir"] for e in entries) == [str(workdir / f"run{i}") for i in range(3)]
    assert {e["outcome"] for e in entries} == {"lost"}


def test_a_rank_printing_a_5000_digit_rank_number_still_succeeds(workdir: Path) -> None:  # noqa: F811
    run_dir = workdir / "run"
    proc = run(
        workdir, "--nproc", "2", "--config", "ds_config.json", "--run-dir", str(run_dir),
        str(FAULTY), "--print-digits", "--steps", "6",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "[dswiz] verdict: success: 6 steps in" in out and "Traceback" not in proc.stderr
    assert rundir.read_run_record(run_dir).verdict.kind == "success"  # type: ignore[union-attr]


@pytest.mark.timeout(600)
def test_two_launches_one_second_apart_on_default_settings_both_succeed(workdir: Path) -> None:  # noqa: F811
    dirs = [workdir / "first", workdir / "second"]
    # the first job's shell turns PyTorch's expandable segments on (harmless on CPU): its history entry says so
    shells = [{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, {}]
    procs = []
    for run_dir, shell in zip(dirs, shells, strict=True):
        args = (
            "--nproc",
            "2",
            "--config",
            "ds_config.json",
            "--run-dir",
            str(run_dir),
            str(TRAIN),
            "--steps",
            "6",
        )
        procs.append(start(workdir, *args, extra_env=shell))
        time.sleep(1.0)
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
        assert "[dswiz] verdict: success: 6 steps in" in out
    ports = [rundir.read_run_record(d).command for d in dirs]
    first, second = (c[c.index("--master_port") + 1] for c in ports)
    assert first != second
    assert all(c[c.index("--master_addr") + 1] == "127.0.0.1" for c in ports)  # single node: loopback
    # Both concurrent launches are in the run history, each with what it measured.
    entries = {e["run_dir"]: e for e in history(workdir)}
    assert set(entries) == {str(d) for d in dirs}
    assert all(e["outcome"] == "success" and e["measured"].get("steps") for e in entries.values()), entries
    assert [entries[str(d)].get("expandable_segments", False) for d in dirs] == [True, False]


def test_a_hung_rank_is_stopped_by_stall_timeout(workdir: Path) -> None:  # noqa: F811
    run_dir = workdir / "run"
    t0 = time.monotonic()
    proc = run(
        workdir, "--nproc", "2", "--config", "ds_config.json", "--run-dir", str(run_dir), "--grace", "2",
        "--stall-timeout", "5", str(FAULTY), "--hang-at-step", "3", "--steps", "1000", "--log-every", "1",
    )  # fmt: skip
    print(f"hung rank: dswiz ended {time.monotonic() - t0:.1f} s after its start")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 124, out[-3000:]
    assert "[dswiz] no step for 5 s (last step 2): stopping the job (--stall-timeout 5)" in out
    assert "[dswiz] verdict: stalled: no step for 5 s (last step 2); stopped by --stall-timeout 5" in out
    record = rundir.read_run_record(run_dir)
    assert record.verdict is not None and record.verdict.kind == "stalled"
    assert job_left(record) == []

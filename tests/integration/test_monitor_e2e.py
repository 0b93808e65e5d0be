"""End to end: a real 2-rank DeepSpeed CPU job (plain `deepspeed` launcher, output to a file) while
`dswiz monitor PID --json` is attached to it: steps increase, a throughput appears, and the stream ends with the
summary when the job ends (exit 0: a finished job is not an error of the monitor)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner import reaper
from tests.integration.launch_support import free_port
from wizard.history.store import HistoryStore

ROOT = Path(__file__).resolve().parents[2]
DEEPSPEED = Path(sys.executable).parent / "deepspeed"


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_monitor_json_attached_to_a_plain_deepspeed_job(tmp_path: Path) -> None:
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 5,
        "log_level": "info",
        "zero_optimization": {"stage": 2},
        "csv_monitor": {"enabled": True, "output_path": "csv", "job_name": "e2e"},
    }
    (tmp_path / "ds.json").write_text(json.dumps(config))
    argv = [
        str(DEEPSPEED), "--num_gpus", "2", "--master_port", str(port := free_port()),
        str(ROOT / "runner/examples/train_tiny.py"), "--deepspeed_config", "ds.json",
        "--steps", "40", "--sleep-per-step", "0.25",
    ]  # fmt: skip
    log = tmp_path / "train.log"
    with log.open("w") as out:
        job = subprocess.Popen(
            argv, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        monitor = subprocess.run(
            [sys.executable, "-m", "wizard", "monitor", str(job.pid), "--json", "--interval", "0.5"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=360,
            check=False,
        )
        assert job.wait(timeout=60) == 0, log.read_text()[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
            job.wait(timeout=60)
        reaper.remove_shm_buffers(
            [port]
        )  # a plain deepspeed job leaves them (tests/integration/launch_support.py)
    assert monitor.returncode == 0, monitor.stderr
    objects = [json.loads(line) for line in monitor.stdout.splitlines() if line.strip()]
    snapshots, summary = objects[:-1], objects[-1]
    assert all(o["event"] == "snapshot" for o in snapshots) and summary["event"] == "summary"
    for o in snapshots:  # the documented keys, null where unknown
        assert {
            "time",
            "step",
            "samples_per_sec",
            "tokens_per_sec",
            "loss",
            "lr",
            "gpus",
            "host_ram_used_bytes",
            "alerts",
        } <= set(o)
    steps = [o["step"] for o in snapshots if o["step"] is not None]
    assert len(set(steps)) >= 3 and steps == sorted(steps) and steps[-1] == 40
    assert any(o["samples_per_sec"] and o["samples_per_sec"] > 0 for o in snapshots)
    assert any(o["loss"] is not None for o in snapshots) and snapshots[-1]["lr"] == 0.001
    assert snapshots[-1]["gpus"] == [] and "no NVIDIA GPU" in snapshots[-1]["gpu_note"]
    assert snapshots[-1]["total_steps"] == 40  # from the script's --steps
    assert summary["job_state"] == "finished" and summary["exit_code"] == 0 and summary["last_step"] == 40
    assert summary["mean_samples_per_sec"] > 0 and summary["alerts"] == []
    assert any(n.startswith("logs: ") and str(log) in n for n in snapshots[0]["notes"])
    # watched from its start to its end: the run history has it (source "monitor"), measured as it ran
    [entry] = HistoryStore(os.environ["DSWIZ_HISTORY"]).runs()
    assert entry.source == "monitor" and entry.outcome == "success" and entry.measured.steps == 40
    assert entry.measured.step_time_s is not None and entry.measured.step_time_s > 0
    assert entry.hardware.interconnect == "cpu"


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_monitor_json_attached_to_a_dswiz_launch_job(tmp_path: Path) -> None:
    """The issue's path: `dswiz launch --no-tui` runs the job, `dswiz monitor RUN_DIR --json` attaches to its run
    directory while it trains, and ends with the summary when the job ends."""
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 2},
    }
    (tmp_path / "ds_config.json").write_text(json.dumps(config))
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")}
    launch_argv = [
        sys.executable, "-m", "wizard", "launch", "--no-tui", "--nproc", "2", "--config", "ds_config.json",
        "--steps-per-print", "5", "--master-port", str(free_port()), "--run-dir", str(run_dir),
        str(ROOT / "runner/examples/train_tiny.py"), "--steps", "40", "--sleep-per-step", "0.25",
    ]  # fmt: skip
    with (tmp_path / "launch.out").open("w") as out:
        launch = subprocess.Popen(launch_argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "run.json").exists() and launch.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (run_dir / "run.json").exists(), (tmp_path / "launch.out").read_text()[-3000:]
        monitor = subprocess.run(
            [sys.executable, "-m", "wizard", "monitor", str(run_dir), "--json", "--interval", "0.5"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=360,
            check=False,
        )
        launch_rc = launch.wait(timeout=120)
    finally:
        if launch.poll() is None:
            launch.send_signal(signal.SIGINT)
            launch.wait(timeout=60)
    launch_out = (tmp_path / "launch.out").read_text()
    aborted_at_exit = (
        "aborted in native code" in launch_out
    )  # DeepSpeed's CPU exit abort, see test_launch_deepspeed
    assert launch_rc == 0 or aborted_at_exit, launch_out[-3000:]
    assert monitor.returncode == 0, monitor.stderr
    objects = [json.loads(line) for line in monitor.stdout.splitlines() if line.strip()]
    snapshots, summary = objects[:-1], objects[-1]
    assert summary["event"] == "summary" and all(o["event"] == "snapshot" for o in snapshots)
    steps = [o["step"] for o in snapshots if o["step"] is not None]
    assert len(set(steps)) >= 3 and steps == sorted(steps) and steps[-1] == 40
    assert any(o["samples_per_sec"] and o["samples_per_sec"] > 0 for o in snapshots)
    assert any(o["loss"] is not None for o in snapshots)
    assert summary["last_step"] == 40 and summary["mean_samples_per_sec"] > 0
    if not aborted_at_exit:
        assert summary["job_state"] == "finished" and summary["exit_code"] == 0

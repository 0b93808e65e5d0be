"""ZeRO-3 inference end to end: `dswiz config --yes --mode inference` writes the config, `dswiz launch --no-tui` runs
runner/examples/train_tiny.py --eval-only on it with real DeepSpeed 0.19.8 on CPU (gloo), 2 ranks: the engine is
built without an optimizer (DeepSpeedZeRoOffload, parameters offloaded to the CPU), in eval mode, forward passes
only, and the verdict does not expect training steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import rundir
from runner.job.session import session_processes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "runner" / "examples" / "train_tiny.py"


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for run_json in tmp_path.glob("**/run.json"):  # whatever a failed test left running, stop it
        sids = {p["pgid"] for p in json.loads(run_json.read_text()).get("launchers", [])}
        for proc in session_processes(sids):
            proc.kill()


def dswiz(tmp: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XDG_STATE_HOME": str(tmp / "state"),
        "CUDA_VISIBLE_DEVICES": "",
    }
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_a_written_inference_config_runs_forward_passes_on_two_ranks(workdir: Path) -> None:
    cfg_dir = workdir / "configs"
    written = dswiz(
        workdir, "config", "--yes", "--mode", "inference", "--gpus-per-node", "2", "--micro-batch", "4",
        "--offload-param", "cpu", "--out", str(cfg_dir),
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    cfg = json.loads((cfg_dir / "ds_config.json").read_text())
    assert "optimizer" not in cfg and cfg["zero_optimization"]["stage"] == 3

    for attempt in range(2):
        run_dir = workdir / f"run{attempt}"
        proc = dswiz(
            workdir, "launch", "--no-tui", "--status-every", "5", "--config", str(cfg_dir), "--run-dir",
            str(run_dir), str(TRAIN), "--eval-only", "--steps", "6", "--log-every", "2",
        )  # fmt: skip
        verdict = rundir.read_run_record(run_dir).verdict
        # DeepSpeed 0.19.8 on CPU sometimes aborts a rank at interpreter exit (see test_launch_deepspeed.py);
        # dswiz names it, and only that verdict earns a second attempt.
        if proc.returncode == 0 or verdict is None or "aborted in native code" not in verdict.summary:
            break
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    record = rundir.read_run_record(run_dir)
    assert record.world_size == 2 and sorted(record.rank_pids) == [0, 1]
    assert record.verdict is not None and record.verdict.kind == "success"
    assert "last eval loss" in record.verdict.summary
    assert "[dswiz] evaluating" in out and "[dswiz] training" not in out

    rank0 = next((run_dir / rundir.RANK_LOGS_DIR).glob("*_rank0.log")).read_text()
    assert "Creating ZeRO Offload" in rank0  # stage 3 without an optimizer
    assert "inference: DeepSpeedZeRoOffload, module.training=False" in rank0
    assert rank0.count("'eval_loss'") == 3
    launched = json.loads((run_dir / "config" / "ds_config.json").read_text())
    assert launched["zero_optimization"]["offload_param"]["device"] == "cpu"

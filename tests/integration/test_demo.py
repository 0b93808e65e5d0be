"""The README's main command: `dswiz demo` on a machine without a GPU detects, plans, writes configs and trains the
example model for real with 2 CPU ranks through `dswiz launch`, ending with the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner import rundir

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def run_demo(tmp: Path, attempt: int) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    out, run_dir = tmp / f"configs-{attempt}", tmp / f"run-{attempt}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "wizard",
            "demo",
            "--no-tui",
            "--steps",
            "20",
            "--out",
            str(out),
            "--run-dir",
            str(run_dir),
        ],
        cwd=tmp,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "XDG_STATE_HOME": str(tmp / "state"),
            "CUDA_VISIBLE_DEVICES": "",
        },
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return proc, out, run_dir


def test_demo_trains_for_real_and_ends_with_a_success_verdict(tmp_path: Path) -> None:
    for attempt in range(2):
        proc, out, run_dir = run_demo(tmp_path, attempt)
        record = rundir.read_run_record(run_dir)
        verdict = record.verdict
        # DeepSpeed 0.19.8 on CPU sometimes aborts a rank at interpreter exit after training (see
        # test_launch_deepspeed.py); dswiz names it, and only that verdict earns a second attempt.
        if proc.returncode == 0 or verdict is None or "aborted in native code" not in verdict.summary:
            break
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for heading in ("== 1/4", "== 2/4", "== 3/4", "== 4/4"):
        assert heading in proc.stdout
    # The plan shown is the real planner's (for a described card, since this machine has no GPU).
    assert "Recommended: ZeRO-" in proc.stdout
    # The configs it wrote are what the job ran with: 2 CPU ranks, ZeRO-2, fp32.
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == 2
    assert (
        ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 2 == ds["train_batch_size"]
    )
    assert (out / "accelerate.yaml").is_file() and (out / "launch.sh").is_file()
    assert record.status == "finished" and verdict is not None and verdict.kind == "success"
    assert "verdict: success: 20 steps" in proc.stdout
    # The job was observable: the monitor's history and DeepSpeed's csv monitor were written into the run dir.
    assert (run_dir / rundir.METRICS_JSONL).stat().st_size > 0
    assert list((run_dir / rundir.CSV_DIR).rglob("*.csv"))

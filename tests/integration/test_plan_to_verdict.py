"""One product from config to verdict: `dswiz config --yes --model …` writes the configs and the plan sidecar,
`dswiz launch --config DIR` runs real DeepSpeed (CPU, gloo, 2 ranks) with the plan in run.json, folds DeepSpeed's
config dump on the terminal, and the verdict says where the checkpoint is and how to consolidate it. One launch
(repeated only for DeepSpeed's known abort at exit on CPU, which dswiz names)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner import rundir
from wizard.config.sidecar import read_sidecar

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "runner" / "examples" / "train_tiny.py"
TINY = "layers=2,hidden=128,heads=4,vocab=512"  # what train_tiny.py builds by default


def dswiz(tmp: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp / "state")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_config_launch_verdict(tmp_path: Path) -> None:
    written = dswiz(
        tmp_path, "config", "--yes", "--model", TINY, "--hardware", "2xA100-80GB", "--seq-len", "64",
        "--stage", "2", "--offload-optimizer", "none", "--offload-param", "none", "--precision", "fp32",
        "--micro-batch", "4", "--grad-accum", "1", "--no-activation-checkpointing", "--no-zeropp",
        "--steps-per-print", "5", "--out", "cfg",
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    sidecar = read_sidecar(tmp_path / "cfg")
    assert sidecar is not None and sidecar.strategy.world_size == 2

    for attempt in range(3):
        run_dir = tmp_path / f"run{attempt}"
        proc = dswiz(
            tmp_path, "launch", "--no-tui", "--nproc", "2", "--config", "cfg", "--run-dir", str(run_dir),
            str(TRAIN), "--steps", "10", "--save-dir", "ckpt",
        )  # fmt: skip
        verdict = rundir.read_run_record(run_dir).verdict
        if proc.returncode == 0 or verdict is None or "aborted in native code" not in verdict.summary:
            break
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]

    # The plan: predictions are for 2 A100s, not this CPU, so only the model's figures reach the monitor.
    assert "[dswiz] plan: " in out and "this machine has no GPU" in out
    record = rundir.read_run_record(run_dir)
    assert record.plan == {"flops_per_token": sidecar.flops_per_token, "seq_len": 64}

    # DeepSpeed's config dump: one line on the terminal, every line still in rank 0's log.
    [rank0] = sorted((run_dir / rundir.RANK_LOGS_DIR).glob("*_rank0.log"))
    dumped = sum(1 for ln in rank0.read_text().splitlines() if "[config.py:" in ln)
    assert dumped > 50
    assert "[config.py:" not in proc.stdout
    [notice] = [ln for ln in proc.stdout.splitlines() if "DeepSpeed printed its config" in ln]
    assert notice.endswith(f"lines): {rank0}")

    # The verdict: where the checkpoint is and the command that consolidates it.
    assert record.verdict is not None and record.verdict.kind == "success"
    ckpt = tmp_path / "ckpt"
    assert f"checkpoint {ckpt / 'final'} (ZeRO-1/2, 2 shard(s)" in "\n".join(record.verdict.advice)
    assert f"full fp32 weights: dswiz consolidate {ckpt} {tmp_path / 'ckpt-fp32'}" in proc.stdout
    assert json.loads((tmp_path / "cfg" / "ds_config.json").read_text())["zero_optimization"]["stage"] == 2

"""The attention-rate benchmark: its FLOP counts are the planner's, and its smoke run writes a result per head dim."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from wizard.planner.throughput import attention_flops_per_token

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import attention_rate  # noqa: E402
from plan_accuracy import bench_spec  # noqa: E402


def test_the_bench_counts_attention_as_the_planner_does() -> None:
    # One layer of 16 heads of 128 at seq 2048: the planner's training count per token, times the tokens of a call.
    model = replace(bench_spec("pythia-1.4b"), layers=1, hidden=2048, heads=16, head_dim=128)
    per_token = attention_flops_per_token(model, 2048)
    batch = 4
    assert attention_rate.palm_attention_flops(batch, 16, 2048, 128) == per_token * batch * 2048


def test_smoke_writes_a_share_per_head_dim(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "bench/attention_rate.py", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (result,) = tmp_path.glob("attention_rate-*-smoke.json")
    doc = json.loads(result.read_text())
    assert [r["head_dim"] for r in doc["rows"]] == [32, 64]
    assert all(r["share_of_matmul"] > 0 and r["seconds"] > 0 for r in doc["rows"])
    assert "share of the matmul rate" in result.with_suffix(".md").read_text()

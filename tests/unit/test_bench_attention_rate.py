"""The attention-rate benchmark: its FLOP counts are the planner's, and its smoke run writes a result per head dim."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from wizard.planner.throughput import attention_flops_per_token


def test_the_bench_counts_attention_as_the_planner_does(bench_script: Callable[[str], ModuleType]) -> None:
    # One layer of 16 heads of 128 at seq 2048: the planner's training count per token, times the tokens of a call.
    attention_rate, pa = bench_script("attention_rate"), bench_script("plan_accuracy")
    model = replace(pa.bench_spec("pythia-1.4b"), layers=1, hidden=2048, heads=16, head_dim=128)
    per_token = attention_flops_per_token(model, 2048)
    batch = 4
    assert attention_rate.palm_attention_flops(batch, 16, 2048, 128) == per_token * batch * 2048


def test_smoke_writes_a_share_per_head_dim(tmp_path: Path, bench_smoke: Callable[..., Any]) -> None:
    bench_smoke("attention_rate", tmp_path)
    (result,) = tmp_path.glob("attention_rate-*-smoke.json")
    doc = json.loads(result.read_text())
    assert [r["head_dim"] for r in doc["rows"]] == [32, 64]
    assert all(r["share_of_matmul"] > 0 and r["seconds"] > 0 for r in doc["rows"])
    assert "share of the matmul rate" in result.with_suffix(".md").read_text()

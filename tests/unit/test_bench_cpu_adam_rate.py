"""bench/cpu_adam_rate.py on this machine's CPU: DeepSpeed's real CPU Adam op (JIT-built on first use), one child
process per thread count."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


def test_thread_counts_double_up_to_the_cores(bench_script: Callable[[str], ModuleType]) -> None:
    rate = bench_script("cpu_adam_rate")
    assert rate.thread_counts(16) == (1, 2, 4, 8, 16)
    assert rate.thread_counts(12) == (1, 2, 4, 8, 12)
    assert rate.thread_counts(1) == (1,)


def test_smoke_steps_deepspeeds_cpu_adam_at_each_thread_count(
    tmp_path: Path, bench_smoke: Callable[..., Any]
) -> None:
    bench_smoke("cpu_adam_rate", tmp_path, timeout=900)  # the first run builds the op
    (result,) = tmp_path.glob("cpu_adam_rate-*-smoke.json")
    doc = json.loads(result.read_text())
    rows = doc["rows"]
    assert [r["threads"] for r in rows] == sorted({1, min(2, doc["cores"])})
    for r in rows:
        assert "error" not in r, r
        # the op changed the parameters, and each threads' own process read its OMP_NUM_THREADS
        assert r["adam_updated"] is True
        assert r["adam_params_per_s"] == doc["params"] / r["adam_s"] > 0
        assert r["triad_gbs"] > 0 and r["convert_bf16_gbs"] > 0
        # the step's host passes together take longer than Adam alone
        passes = r["norm_s"] + r["unscale_s"] + r["adam_s"] + r["convert_s"]
        assert r["step_params_per_s"] == pytest.approx(doc["params"] / passes)
        assert r["step_params_per_s"] < r["adam_params_per_s"]
    page = result.with_suffix(".md").read_text()
    assert (
        "speed-up over 1 thread" in page
        and "host passes" in page
        and f"{doc['params']:,} fp32 parameters" in page
    )


def test_a_child_that_prints_no_reading_is_a_row_with_its_error(
    bench_script: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    rate = bench_script("cpu_adam_rate")
    for stdout in ("", "building the op...\nnot json", "[1, 2]"):
        done = subprocess.CompletedProcess([], 0, stdout=stdout, stderr="")
        monkeypatch.setattr(rate, "run_in_group", lambda *a, _done=done, **k: _done)
        row = rate.run_child(4, 1024, 1)
        assert row["threads"] == 4 and "error" in row, row

"""bench/trainer_loop.py --smoke: one config (ZeRO-2, checkpointing, 2 micro-steps a step) on CPU in each of the
three loops -- plan_accuracy's, a DeepSpeed script's and the HF Trainer's, each with real DeepSpeed in a process of
its own -- and the report that sets them beside the planner; --analyze writes the same report again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_smoke_reads_one_config_in_each_loop_and_reports_it(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "bench/trainer_loop.py", "--smoke", "--indices", "1", "--out", str(tmp_path),
         "--master-port", "29583"],
        cwd=ROOT, capture_output=True, text=True, timeout=290, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (raw,) = tmp_path.glob("trainer_loop-*-smoke.json")
    doc = json.loads(raw.read_text())
    assert doc["smoke"] is True and (doc["warmup"], doc["timed"]) == (1, 2)
    readings = {r["loop"]: r for r in doc["readings"]}
    assert sorted(readings) == ["bench", "script", "trainer"]
    for r in readings.values():
        assert r["status"] == "ok", r
        c = r["config"]
        assert (c["zero_stage"], c["checkpointing"], c["grad_accum"], c["micro_batch"]) == (2, True, 2, 2)
        # tokens/s is the step's samples over its seconds: 2 micro-steps of 2 sequences
        assert r["tokens_per_sec"] == pytest.approx(4 * r["seq_len"] / r["step_s"], rel=1e-3)
    # the script and the Trainer time each optimizer step at its end on the host: one delta per timed step
    assert (
        len(readings["script"]["host_step_ends_s"]) == 2 and len(readings["trainer"]["host_step_ends_s"]) == 2
    )
    assert len(readings["bench"]["step_readings_s"]) == 2
    report = raw.with_suffix(".md").read_text()
    assert "| tiny z2+ckpt mbs2 seq64 ga2 |" in report and "trainer/bench" in report
    again = subprocess.run(
        [sys.executable, "bench/trainer_loop.py", "--analyze", str(raw)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert raw.with_suffix(".md").read_text() == report

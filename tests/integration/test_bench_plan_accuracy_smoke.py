"""bench/plan_accuracy.py --smoke: the real DeepSpeed launcher, 2 gloo ranks on CPU, a tiny GPT-2, two configs run
in one process per rank -- the same code path the GPU run takes, proven before it goes to the GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_smoke_runs_two_ranks_and_writes_raw_rows_and_the_report(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "bench/plan_accuracy.py",
            "--smoke",
            "--out",
            str(tmp_path),
            "--master-port",
            "29561",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (raw,) = tmp_path.glob("plan_accuracy-*-smoke.json")
    doc = json.loads(raw.read_text())
    assert doc["world"] == 2 and doc["smoke"] is True
    rows = doc["rows"]
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
    for r in rows:
        assert len(r["step_s"]) == 2 and r["tokens_per_sec"] > 0
        assert r["predicted"]["allocated"] > 0 and r["predicted"]["tokens_per_sec"] > 0
        # every timed step split at its forward / backward / step boundaries, the three adding up to the step
        assert set(r["phase_s"]) == {"forward", "backward", "step"} and r["warmup_steps"] == 1
        # how fast the host was when the config started (on CPU there is no launch to time)
        assert set(r["host_us"]) == {"python_call", "torch_cpu_op", "autograd_tiny"}
        assert all(0 < v < 1e5 for v in r["host_us"].values())
        for i, whole in enumerate(r["step_s"]):
            parts = sum(r["phase_s"][k][i] for k in r["phase_s"])
            assert 0 < parts <= whole * 1.01 + 1e-4
    assert rows[1]["config"]["zero_stage"] == 2 and rows[1]["config"]["checkpointing"] is True
    # the second config accumulates 2 micro-steps per optimizer step: its tokens are both micro-steps'
    assert [r["config"]["grad_accum"] for r in rows] == [1, 2]
    for r in rows:
        ga, steps = r["config"]["grad_accum"], sorted(r["step_s"])
        median = (steps[0] + steps[1]) / 2
        assert r["tokens_per_sec"] == pytest.approx(ga * 2 * r["seq_len"] * 2 / median, rel=1e-3)
    report = (tmp_path / raw.name.replace(".json", ".md")).read_text()
    assert "Targets (issue 3)" in report and "tiny z2+ckpt mbs2 ga2" in report
    assert "Steps split at the forward / backward / optimizer-step boundaries" in report
    assert "Families within issue 19's targets" in report


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_smoke_verify_mode_records_the_allocator_and_merges_with_the_full_run(tmp_path: Path) -> None:
    """--tiers 0 (the recommendations + one boundary check each) writes its own ...-verify.json with the ranks'
    PYTORCH_CUDA_ALLOC_CONF in it; --analyze takes it together with a full run of the same allocator settings and
    merges the rows (each reading of a config kept), and keeps a run with other settings apart."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "bench/plan_accuracy.py", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=230,
            check=False,
            env=env,
        )

    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    proc = run("--smoke", "--tiers", "0", "--out", str(tmp_path), "--master-port", "29563", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (raw,) = tmp_path.glob("plan_accuracy-*-smoke-verify.json")
    doc = json.loads(raw.read_text())
    assert doc["tiers"] == [0] and doc["alloc_conf"] == "expandable_segments:True"
    assert [r["config"]["tags"] for r in doc["rows"]] == [["rec:full"], ["next:full"]]
    assert all(r["status"] == "ok" and r["finished_at"] for r in doc["rows"])
    full = dict(
        doc, tiers=[0, 1, 2, 3], started_at="2000-01-01T00:00:00+00:00"
    )  # the same allocator settings
    full["rows"] = [dict(r, finished_at=1.0, tokens_per_sec=1.0) for r in doc["rows"][:1]]
    older = tmp_path / "plan_accuracy-2000-01-01-smoke.json"
    older.write_text(json.dumps(full))
    proc = run("--analyze", str(older), str(raw))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "plan_accuracy-2000-01-01-smoke-merged-summary.json").read_text())
    (merged,) = summary["per_run"]
    assert merged["rows"] == 3  # the older file's reading of the same config kept beside the newer one
    report = (tmp_path / "plan_accuracy-2000-01-01-smoke-merged.md").read_text()
    assert "PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True" in report and "Merged from" in report
    assert f"{doc['rows'][0]['tokens_per_sec']:,.0f}" in report
    # a reading with the default allocator is a run of its own, never replaced by one with expandable segments
    default = tmp_path / "plan_accuracy-2000-01-02-smoke.json"
    default.write_text(json.dumps(dict(full, alloc_conf=None)))
    proc = run("--analyze", str(default), str(raw))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "plan_accuracy-2000-01-02-smoke-merged-summary.json").read_text())
    assert sorted(r["rows"] for r in summary["per_run"]) == [1, 2]

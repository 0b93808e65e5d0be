"""The parsers and the verdict on output recorded on a real NVIDIA H200 (tests/fixtures/logs/README.md: made by
bench/gpu_launch_session.sh through `dswiz config --yes` + `dswiz launch --no-tui`)."""

from __future__ import annotations

import json
from pathlib import Path

from runner.metrics.parse import LogEvent, parse_line
from runner.verdict import JobObserver, decide

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
GiB = 1024**3


def rank0_log(name: str) -> Path:
    (path,) = sorted((LOGS / name).glob("*_rank0.log"))
    return path


def events(path: Path, rank: int | None = None) -> list[LogEvent]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        event = parse_line(line, default_rank=rank)
        if event is not None:
            out.append(event)
    return out


def test_h200_run_throughput_lines_carry_real_gpu_memory() -> None:
    evs = events(rank0_log("gpu_h200_zero1_ok"), rank=0)
    tp = [e for e in evs if e.kind == "throughput"]
    config = json.loads((LOGS / "gpu_h200_zero1_ok" / "ds_config.json").read_text())
    every = config["steps_per_print"]
    assert [e.values["global_step"] for e in tp] == list(range(every, 301, every))
    # A 185M model at micro-batch 32, seq 1024 in bf16 on one H200: 2.48 GiB of model states between steps,
    # a 23.35 GiB peak inside the step (activations + fp32 logits) -- the numbers the planner is measured against.
    assert {e.values["mem_allocated_bytes"] for e in tp} == {int(2.48 * GiB)}
    assert {e.values["max_mem_allocated_bytes"] for e in tp} == {int(23.35 * GiB)}
    assert all(e.values["curr_samples_per_sec"] > 100 for e in tp[1:])
    losses = [e.values["loss"] for e in evs if e.kind == "loss"]
    assert len(losses) >= 10 and losses[-1] < losses[0]


def test_h200_cuda_oom_is_parsed_with_size_and_rank() -> None:
    ooms = [e for e in events(rank0_log("gpu_h200_cuda_oom"), rank=0) if e.kind == "oom"]
    assert ooms, "the recorded OOM must parse"
    assert ooms[0].values["tried_bytes"] == 16 * GiB and ooms[0].rank == 0


def test_h200_cuda_oom_verdict_from_the_recorded_logs() -> None:
    obs = JobObserver(started=0.0)
    for i, line in enumerate((LOGS / "gpu_h200_cuda_oom" / "combined.log").read_text().splitlines()):
        obs.feed(line, float(i), stream="launcher")
    for i, line in enumerate(rank0_log("gpu_h200_cuda_oom").read_text().splitlines()):
        obs.feed(line, float(i), rank=0, stream="rank0")
    config = json.loads((LOGS / "gpu_h200_cuda_oom" / "ds_config.json").read_text())
    verdict = decide(obs, launcher_returncodes=[1], ds_config=config)
    assert verdict.kind == "cuda_oom" and verdict.rank == 0
    assert "tried to allocate 16.0 GiB" in verdict.summary
    assert verdict.advice and "2048 -> 1024" in verdict.advice[0]
    # dswiz said the same on the GPU machine (run.json written by that launch)
    recorded = json.loads((LOGS / "gpu_h200_cuda_oom" / "run.json").read_text())["verdict"]
    assert recorded["kind"] == "cuda_oom" and recorded["summary"] == verdict.summary

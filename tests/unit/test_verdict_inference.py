"""An inference job under `dswiz launch`: no optimizer steps, no throughput lines. Recorded for real
(tests/fixtures/runs/inference_eval_only: a config written by `dswiz config --yes --mode inference`, train_tiny.py
--eval-only, 2 CPU ranks); nothing in the verdict or the phases may assume training steps."""

from __future__ import annotations

import json
from pathlib import Path

from runner.verdict import JobObserver, decide, exit_code

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "inference_eval_only"


def _replay(keep: object = lambda line: True) -> JobObserver:
    obs = JobObserver(started=0.0)
    rank_paths = sorted((RUN / "ranks").glob("*.log"))
    for i, line in enumerate((RUN / "stream.log").read_text().splitlines()):
        obs.feed(line, float(i), stream="launcher")
    for path in rank_paths:
        rank = int(path.stem.rsplit("rank", 1)[1])
        for i, line in enumerate(path.read_text().splitlines()):
            if keep(line):  # type: ignore[operator]
                obs.feed(line, 100.0 + i, rank=rank, stream=path.name)
    return obs


def _codes() -> list[int | None]:
    codes: list[int | None] = json.loads((RUN / "facts.json").read_text())["launcher_exit_codes"]
    return codes


def test_an_eval_only_job_succeeds_with_its_eval_loss() -> None:
    obs = _replay()
    v = decide(obs, launcher_returncodes=_codes(), elapsed=18.0)
    assert v.kind == "success"
    assert v.summary == "success: 6 steps in 0:18, 16.0 samples/s (script prints), last eval loss 6.279"
    assert exit_code(v, _codes(), None) == 0
    assert obs.samples_per_sec is None  # no optimizer step: DeepSpeed printed no throughput line
    names = [p.name for p in obs.phases.history]
    assert "evaluating" in names and "training" not in names


def test_a_job_that_prints_no_steps_at_all_still_succeeds() -> None:
    obs = _replay(lambda line: "eval_loss" not in line)
    v = decide(obs, launcher_returncodes=_codes(), elapsed=18.0)
    assert v.kind == "success" and v.summary == "success: finished in 0:18"
    assert obs.step is None and not obs.phases.training


def test_an_evaluation_during_training_stays_training() -> None:
    obs = JobObserver(started=0.0)
    obs.feed("{'loss': 3.2, 'learning_rate': 0.001, 'epoch': 0.1, 'step': 10}", 1.0, rank=0)
    obs.feed("{'eval_loss': 3.1, 'step': 10}", 2.0, rank=0)
    assert obs.phases.current.name == "training"
    assert obs.loss == 3.2

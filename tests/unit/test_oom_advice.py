"""After a CUDA out-of-memory error, the verdict re-plans the same model and hardware (wizard.replan.oom_advice)
and names the exact `dswiz config` command that writes a config that fits.

The OOM is a real one: tests/fixtures/logs/gpu_h200_cuda_oom, recorded on an H200 by bench/gpu_launch_session.sh
(train_tiny.py at hidden 1024, 12 layers, seq 1024, vocab 32000; ZeRO-2, bf16, micro-batch 2048), with the H200's
own `dswiz detect` report (tests/fixtures/hardware/h200-detected.json). The advice is the real planner's; the test
checks it against the planner rather than against numbers copied from it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli_launch import oom_advisor as launch_oom_advisor
from runner.verdict import JobObserver, decide, default_oom_advice
from wizard import planner
from wizard.cli import cli
from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.render import ds_config_dict
from wizard.config.sidecar import PlanSidecar, read_sidecar, strategy_of_config
from wizard.hardware import get_hardware
from wizard.hardware.report import HardwareReport
from wizard.model import load_model_spec
from wizard.replan import make_sidecar, oom_advice, oom_advisor, predict
from wizard.strategy import Strategy
from wizard.units import fmt_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
OOM_RUN = FIXTURES / "logs" / "gpu_h200_cuda_oom"
H200 = HardwareReport.from_dict(json.loads((FIXTURES / "hardware" / "h200-detected.json").read_text()))
MODEL = "layers=12,hidden=1024,heads=16,vocab=32000"  # what train_tiny.py built in the recording


def sidecar_for(
    model: str, hardware: str, strategy: Strategy | None = None, **request: object
) -> PlanSidecar:
    hw, spec = get_hardware(hardware), load_model_spec(model)
    req = planner.PlanRequest(**request)  # type: ignore[arg-type]
    plan = planner.plan(hw, spec, req)
    if strategy is None:
        assert plan.best is not None
        strategy = plan.best.strategy
    return make_sidecar(
        model_arg=model,
        model=spec,
        hardware_arg=hardware,
        hardware=hw,
        request=req,
        candidate=predict(hw, spec, strategy, req),
    )


def written_config(strategy: Strategy) -> dict[str, object]:
    return ds_config_dict(config_set_from_strategy(strategy, WriteOptions()).deepspeed)


def observed_oom() -> JobObserver:
    """The recorded job as dswiz read it: the launcher's lines, then rank 0's log."""
    obs = JobObserver(started=0.0)
    for i, line in enumerate((OOM_RUN / "combined.log").read_text().splitlines()):
        obs.feed(line, float(i), stream="launcher")
    [rank0] = OOM_RUN.glob("*_rank0.log")
    for i, line in enumerate(rank0.read_text().splitlines()):
        obs.feed(line, float(i), rank=0, stream=rank0.name)
    return obs


def test_the_verdict_names_the_config_that_fits_and_its_command_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The recorded config, as `dswiz config --yes --model MODEL --seq-len 1024 --stage 2 --micro-batch 2048` on
    # that H200 would have planned it (this machine has no GPU: its detection is the recorded report).
    launched = json.loads((OOM_RUN / "ds_config.json").read_text())
    spec = load_model_spec(MODEL)
    request = planner.PlanRequest(seq_len=1024)
    recorded = make_sidecar(
        model_arg=MODEL,
        model=spec,
        hardware_arg=None,
        hardware=H200,
        request=request,
        candidate=predict(H200, spec, Strategy(), request),
    )
    failed = strategy_of_config(recorded, launched)
    assert (failed.zero_stage, failed.micro_batch_size, failed.global_batch_size) == (2, 2048, 2048)
    sidecar = make_sidecar(
        model_arg=MODEL,
        model=spec,
        hardware_arg=None,
        hardware=H200,
        request=request,
        candidate=predict(H200, spec, failed, request),
    )
    out_dir = str(tmp_path / "cfg-oom")
    verdict = decide(
        observed_oom(),
        launcher_returncodes=[1],
        ds_config=launched,
        oom_advisor=oom_advisor(sidecar, out_dir, fallback=default_oom_advice),
    )
    assert verdict.kind == "cuda_oom" and verdict.rank == 0
    assert "tried to allocate 16.0 GiB; 315.1 MiB free of 139.8 GiB" in verdict.summary
    advice = verdict.advice[0]
    assert advice.startswith("micro-batch ") and "keeps the global batch 2048" in advice
    assert f"of {fmt_bytes(H200.min_gpu_memory_bytes)} per GPU (predicted)" in advice
    command = shlex.split(advice.split(": ", 1)[1])
    assert command[:3] == ["dswiz", "config", "--yes"] and command[-3:] == ["--out", out_dir, "--force"]
    assert "--hardware" not in command  # planned for the machine it ran on: the command is run there

    # The command, run as printed on that machine, writes the advised config: a smaller micro-batch, the same
    # global batch, and a micro-batch the planner says fits this strategy on this GPU.
    real_get_hardware = get_hardware
    monkeypatch.setattr(
        "wizard.hardware.get_hardware", lambda spec: H200 if spec is None else real_get_hardware(spec)
    )
    result = CliRunner().invoke(cli, command[1:])
    assert result.exit_code == 0, result.output
    rewritten = read_sidecar(out_dir)
    assert rewritten is not None
    s = rewritten.strategy
    assert s.micro_batch_size < failed.micro_batch_size
    assert s.global_batch_size == failed.global_batch_size
    assert (s.zero_stage, s.offload_optimizer, s.precision) == (2, "none", "bf16")
    fits = planner.max_micro_batch(H200, spec, s, 1024)
    assert s.micro_batch_size <= fits
    # The advice names what the card must hold for the config it writes (the sidecar keeps the roomy card's figure).
    needed = predict(H200, spec, s, request).predicted.gpu_needed_bytes
    assert rewritten.predicted is not None and f"fits {fmt_bytes(needed)}" in advice
    ds = json.loads((Path(out_dir) / "ds_config.json").read_text())
    assert ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] == 2048


def test_at_micro_batch_one_another_strategy_is_advised() -> None:
    base = sidecar_for("gpt2-medium", "1xA100-80GB", seq_len=1024)
    failed = base.strategy.with_(zero_stage=0, micro_batch_size=1, gradient_accumulation_steps=1)
    sidecar = sidecar_for("gpt2-medium", "1xA100-80GB", strategy=failed, seq_len=1024)
    lines = oom_advice(sidecar, written_config(failed), config_dir="run1")
    assert lines and lines[0].startswith("what fits instead: ")
    command = shlex.split(lines[0].split("): ", 1)[1])

    def flag(name: str) -> str:
        return command[command.index(name) + 1]

    advised = failed.with_(
        zero_stage=int(flag("--stage")),
        offload_optimizer=flag("--offload-optimizer"),  # type: ignore[arg-type]
        offload_param=flag("--offload-param"),  # type: ignore[arg-type]
        micro_batch_size=int(flag("--micro-batch")),
        gradient_accumulation_steps=int(flag("--grad-accum")),
        activation_checkpointing="--activation-checkpointing" in command,
    )
    assert advised != failed and advised.micro_batch_size == 1  # the upper bound: the failed micro-batch
    # Predicted to need less than the config that failed (on one GPU, ZeRO-1 alone would need just as much).
    request = planner.PlanRequest(seq_len=1024)
    after = predict(sidecar.hardware, sidecar.model, advised, request)
    before = predict(sidecar.hardware, sidecar.model, failed, request)
    assert after is not None and before is not None
    assert after.predicted.gpu_needed_bytes < before.predicted.gpu_needed_bytes
    assert f"the planner had predicted {fmt_bytes(before.predicted.gpu_needed_bytes)} per GPU" in lines[-1]


def test_when_nothing_fits_the_generic_advice_stays() -> None:
    failed = Strategy(zero_stage=3, micro_batch_size=4, gpus_per_node=1)
    sidecar = sidecar_for("llama2-70b", "1xT4", strategy=failed, seq_len=4096)
    cfg = written_config(failed)
    assert oom_advice(sidecar, cfg, config_dir="run1") == []
    assert list(oom_advisor(sidecar, "run1", fallback=default_oom_advice)(cfg)) == default_oom_advice(cfg)


def test_without_a_plan_the_launch_keeps_the_generic_advice() -> None:
    assert launch_oom_advisor(None, Path("run1")) is None
    cfg = written_config(Strategy(zero_stage=1, micro_batch_size=8))
    verdict = decide(observed_oom(), launcher_returncodes=[1], ds_config=cfg)
    assert verdict.kind == "cuda_oom" and list(verdict.advice) == default_oom_advice(cfg)

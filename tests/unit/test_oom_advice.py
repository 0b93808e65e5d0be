"""After a CUDA out-of-memory error, the verdict re-plans the same model and hardware (wizard.replan.oom_advice)
and names the exact `dswiz config` command that writes a config that fits.

The log is tests/fixtures/logs/cpu_cuda_oom_rank1: a real 2-rank DeepSpeed run on CPU where rank 1 raised
torch.OutOfMemoryError with PyTorch's CUDA message (injected; see that folder's README). The advice is the real
planner's; the test checks it against the planner rather than against numbers copied from it."""

from __future__ import annotations

import shlex
from pathlib import Path

from click.testing import CliRunner

from runner.cli_launch import oom_advisor as launch_oom_advisor
from runner.verdict import JobObserver, decide, default_oom_advice
from wizard import planner
from wizard.cli import cli
from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.render import ds_config_dict
from wizard.config.sidecar import PlanSidecar, read_sidecar
from wizard.hardware import get_hardware
from wizard.model import load_model_spec
from wizard.replan import make_sidecar, oom_advice, oom_advisor, predict
from wizard.strategy import Strategy

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "cpu_cuda_oom_rank1" / "combined.log"


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
        strategy=strategy,
        plan=plan,
    )


def written_config(strategy: Strategy) -> dict[str, object]:
    return ds_config_dict(config_set_from_strategy(strategy, WriteOptions()).deepspeed)


def observed_oom() -> JobObserver:
    obs = JobObserver(started=0.0)
    for i, line in enumerate(LOG.read_text().splitlines()):
        obs.feed(line, float(i))
    return obs


def test_the_verdict_names_the_config_that_fits_and_its_command_writes_it(tmp_path: Path) -> None:
    sidecar = sidecar_for("gpt2-medium", "1xA100-80GB", seq_len=1024, global_batch=64)
    failed = sidecar.strategy
    assert failed.micro_batch_size > 1
    out_dir = str(tmp_path / "run1")
    verdict = decide(
        observed_oom(),
        launcher_returncodes=[1],
        ds_config=written_config(failed),
        oom_advisor=oom_advisor(sidecar, out_dir, fallback=default_oom_advice),
    )
    assert verdict.kind == "cuda_oom" and verdict.rank == 1
    assert "tried to allocate 13.6 GiB; 65.9 GiB free of 139.8 GiB" in verdict.summary
    advice = verdict.advice[0]
    assert advice.startswith("micro-batch ") and "keeps the global batch 64" in advice
    assert "of 80.0 GiB per GPU (predicted)" in advice
    command = shlex.split(advice.split(": ", 1)[1])
    assert command[:3] == ["dswiz", "config", "--yes"] and command[-3:] == ["--out", out_dir, "--force"]

    # The command, run as printed, writes the advised config: a smaller micro-batch, the same global batch, and a
    # micro-batch the planner says fits this strategy on this GPU.
    result = CliRunner().invoke(cli, command[1:])
    assert result.exit_code == 0, result.output
    rewritten = read_sidecar(out_dir)
    assert rewritten is not None
    s = rewritten.strategy
    assert s.micro_batch_size < failed.micro_batch_size
    assert s.global_batch_size == failed.global_batch_size == 64
    assert (s.zero_stage, s.offload_optimizer, s.precision) == (
        failed.zero_stage,
        failed.offload_optimizer,
        failed.precision,
    )
    fits = planner.max_micro_batch(sidecar.hardware, sidecar.model, s, sidecar.seq_len)
    assert s.micro_batch_size <= fits
    assert rewritten.predicted is not None and f"fits {_gib(rewritten.predicted.peak_gpu_bytes)}" in advice


def _gib(n: int) -> str:
    from wizard.units import fmt_bytes

    return fmt_bytes(n)


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
    assert after.predicted.gpu_bytes < before.predicted.gpu_bytes
    assert f"the planner had predicted {_gib(before.predicted.gpu_bytes)} per GPU" in lines[-1]


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

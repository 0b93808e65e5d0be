"""dswiz-plan.json: the record of the plan behind a config folder (wizard.config.sidecar), written from the real
planner (wizard.replan.make_sidecar) and read back by `dswiz launch`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.metrics.plan import PlanInfo
from wizard import planner
from wizard.config.sidecar import (
    SIDECAR_NAME,
    dump_sidecar,
    load_sidecar,
    offload_needs,
    plan_applies,
    read_sidecar,
    run_plan_section,
    strategy_of_config,
)
from wizard.errors import DswizError
from wizard.hardware import get_hardware
from wizard.model import load_model_spec
from wizard.planner.throughput import flops_per_token
from wizard.replan import make_sidecar


def planned(model: str = "gpt2-medium", hardware: str = "1xA100-80GB", **request: object):  # type: ignore[no-untyped-def]
    hw = get_hardware(hardware)
    spec = load_model_spec(model)
    req = planner.PlanRequest(**request)  # type: ignore[arg-type]
    plan = planner.plan(hw, spec, req)
    assert plan.best is not None
    sidecar = make_sidecar(
        model_arg=model,
        model=spec,
        hardware_arg=hardware,
        hardware=hw,
        request=req,
        candidate=plan.best,
        config_args=("--for", "accelerate"),
    )
    return sidecar, plan


def test_round_trip_is_exact_and_the_text_deterministic(tmp_path: Path) -> None:
    sidecar, _plan = planned(seq_len=1024)
    text = dump_sidecar(sidecar)
    assert load_sidecar(text) == sidecar
    assert dump_sidecar(load_sidecar(text)) == text
    (tmp_path / SIDECAR_NAME).write_text(text)
    assert read_sidecar(tmp_path) == sidecar
    assert read_sidecar(tmp_path / "elsewhere") is None


def test_the_file_holds_the_documented_summary(tmp_path: Path) -> None:
    sidecar, plan = planned(seq_len=1024)
    best = plan.best
    assert best is not None
    data = json.loads(dump_sidecar(sidecar))
    assert (data["format"], data["version"]) == ("dswiz-plan", 1)
    model = data["model"]
    assert (model["name"], model["params"], model["layers"], model["hidden"], model["seq_len"]) == (
        "gpt2-medium",
        sidecar.model.total_params,
        24,
        1024,
        1024,
    )
    assert model["flops_per_token"] == flops_per_token(sidecar.model, 1024)
    hw = data["hardware"]
    assert hw["arg"] == "1xA100-80GB" and hw["gpus_per_node"] == 1 and "A100" in hw["gpu_name"]
    assert (
        hw["summary"].startswith("1 x ") and hw["gpu_memory_bytes"] == sidecar.hardware.min_gpu_memory_bytes
    )
    assert data["strategy"] == best.strategy.to_dict()
    # the prediction is the planner's for the strategy written
    assert data["predicted"]["peak_gpu_bytes"] == best.predicted.gpu_bytes
    assert data["predicted"]["tokens_per_sec"] == round(best.predicted.tokens_per_sec, 1)
    assert data["peak_tflops_per_gpu"] == sidecar.hardware.gpus[0].peak_tflops_bf16
    assert data["config_args"] == ["--for", "accelerate"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('{"format": "other"}', "is not a dswiz plan file"),
        ('{"format": "dswiz-plan", "version": 7}', "is version 7; this dswiz reads version 1"),
        ('{"format": "dswiz-plan", "version": 1, "model": {}}', "is incomplete or damaged"),
    ],
)
def test_a_bad_file_is_named_with_a_fix(text: str, problem: str) -> None:
    with pytest.raises(DswizError, match=problem) as err:
        load_sidecar(text, source="cfg/dswiz-plan.json")
    assert "cfg/dswiz-plan.json" in err.value.problem and err.value.fix


def test_predictions_reach_the_monitor_only_for_the_planned_gpus() -> None:
    sidecar, _plan = planned(seq_len=1024)
    gpu = sidecar.hardware.gpus[0].name
    assert plan_applies(sidecar, gpu_name=gpu, world_size=1) is None
    assert "this machine has no GPU" in (plan_applies(sidecar, gpu_name=None, world_size=2) or "")
    assert "starts 4" in (plan_applies(sidecar, gpu_name=gpu, world_size=4) or "")

    info = PlanInfo.from_mapping(run_plan_section(sidecar, applies=True))
    assert sidecar.predicted is not None
    assert info.predicted_peak_gpu_bytes == sidecar.predicted.peak_gpu_bytes
    assert info.predicted_tokens_per_sec == sidecar.predicted.tokens_per_sec
    assert info.flops_per_token == sidecar.flops_per_token and info.seq_len == 1024
    assert info.global_batch_size == sidecar.strategy.global_batch_size and info.num_gpus == 1
    assert info.peak_tflops_per_gpu == sidecar.peak_tflops_per_gpu

    other = PlanInfo.from_mapping(run_plan_section(sidecar, applies=False, peak_tflops_here=989.0))
    assert other.predicted_peak_gpu_bytes is None and other.predicted_tokens_per_sec is None
    assert other.flops_per_token == sidecar.flops_per_token and other.peak_tflops_per_gpu == 989.0


def test_offload_needs_come_from_the_prediction() -> None:
    sidecar, plan = planned(seq_len=1024)
    assert offload_needs(sidecar) == (None, None)  # nothing offloaded
    offloaded = next(c for c in plan.candidates if c.strategy.offload_optimizer == "cpu")
    with_offload = make_sidecar(
        model_arg="gpt2-medium",
        model=sidecar.model,
        hardware_arg="1xA100-80GB",
        hardware=sidecar.hardware,
        request=planner.PlanRequest(seq_len=1024),
        candidate=offloaded,
    )
    assert with_offload.predicted is not None
    host, nvme = offload_needs(with_offload)
    assert host == offloaded.predicted.cpu_bytes and host > 0 and nvme is None
    assert run_plan_section(with_offload, applies=True)["pinned_host_bytes"] == host


def test_the_launched_config_overrides_the_recorded_batch() -> None:
    sidecar, _ = planned(seq_len=1024)
    edited = strategy_of_config(
        sidecar,
        {
            "train_micro_batch_size_per_gpu": 3,
            "gradient_accumulation_steps": 5,
            "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
        },
    )
    assert (edited.micro_batch_size, edited.gradient_accumulation_steps, edited.zero_stage) == (3, 5, 3)
    assert edited.offload_optimizer == "cpu" and edited.offload_param == "none"
    assert strategy_of_config(sidecar, {"train_micro_batch_size_per_gpu": "auto"}) == sidecar.strategy


def test_the_memory_planned_against_is_kept_and_a_damaged_value_named() -> None:
    """--gpu-memory and --margin are written only where given (an older file reads as the card and the default), read
    back exactly, and a value no flag can give is the file's damage, not a silent default."""
    plain, _ = planned(seq_len=1024)
    assert plain.gpu_memory_bytes is None and plain.safety_margin is None
    assert not {"gpu_memory_bytes", "safety_margin"} & set(json.loads(dump_sidecar(plain))["request"])
    tight, plan = planned(seq_len=1024, gpu_memory_bytes=24 << 30, safety_margin=0.08)
    assert (tight.gpu_memory_bytes, tight.safety_margin) == (24 << 30, 0.08)
    assert load_sidecar(dump_sidecar(tight)) == tight
    assert plan.gpu_capacity_bytes == 24 << 30
    data = json.loads(dump_sidecar(tight))
    for key, bad in (
        ("gpu_memory_bytes", 0),
        ("gpu_memory_bytes", "24GiB"),
        ("safety_margin", 0.9),
        ("safety_margin", True),
    ):
        broken = json.dumps({**data, "request": {**data["request"], key: bad}})
        with pytest.raises(DswizError, match="incomplete or damaged"):
            load_sidecar(broken)

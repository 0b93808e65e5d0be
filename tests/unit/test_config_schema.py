"""The typed settings and their construction from a Strategy: strict where a wrong type is a bug, "auto" exactly
where the chosen consumer fills it (wizard.config.lint.auto), numbers for plain DeepSpeed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from wizard.config.build import (
    WriteOptions,
    config_set_from_strategy,
    settings_from_strategy,
    supports_log_level,
)
from wizard.config.check import lint_config
from wizard.config.lint.auto import ACCELERATE_FILLS, TRAINER_FILLS, auto_paths
from wizard.config.render import ds_config_dict
from wizard.config.schema import DeepSpeedSettings, ZeroOptimization
from wizard.errors import DswizError
from wizard.strategy import Strategy

OFFLOAD = Strategy(
    zero_stage=3, offload_optimizer="cpu", micro_batch_size=4, gradient_accumulation_steps=2, gpus_per_node=8
)


@pytest.mark.parametrize(
    "raw",
    [
        {"train_micro_batch_size_per_gpu": "8"},
        {"train_micro_batch_size_per_gpu": True},
        {"train_micro_batch_size_per_gpu": 0},
        {"train_micro_batch_size_per_gpu": 2.5},
        {"gradient_clipping": "1.0"},
        {"wall_clock_breakdown": "false"},
        {"log_level": "verbose"},
        {"unexpected_field": 1},
    ],
)
def test_wrong_types_are_refused(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        DeepSpeedSettings(**raw)


def test_deepspeed_number_forms_are_accepted() -> None:
    zero = ZeroOptimization(stage=3, reduce_bucket_size=5e8, stage3_prefetch_bucket_size="auto")  # type: ignore[arg-type]
    assert zero.reduce_bucket_size == 500_000_000 and isinstance(zero.reduce_bucket_size, int)
    with pytest.raises(ValidationError):
        ZeroOptimization(stage=3, overlap_comm="auto")  # type: ignore[arg-type]  # not a key anyone fills
    with pytest.raises(ValidationError):
        ZeroOptimization(stage=True)  # type: ignore[arg-type]


def test_plain_deepspeed_gets_numbers_only() -> None:
    cfg = ds_config_dict(settings_from_strategy(OFFLOAD, WriteOptions(consumer="deepspeed")))
    assert auto_paths(cfg) == []
    assert (
        cfg["train_batch_size"],
        cfg["train_micro_batch_size_per_gpu"],
        cfg["gradient_accumulation_steps"],
    ) == (64, 4, 2)
    assert cfg["optimizer"]["params"]["lr"] == 1e-4


@pytest.mark.parametrize(
    ("consumer", "fills"), [("trainer", TRAINER_FILLS), ("accelerate", ACCELERATE_FILLS)]
)
def test_auto_only_where_the_consumer_fills_it(consumer: str, fills: frozenset[str]) -> None:
    options = WriteOptions(consumer=consumer, scheduler="deepspeed")  # type: ignore[arg-type]
    cfg = ds_config_dict(settings_from_strategy(OFFLOAD, options))
    autos = set(auto_paths(cfg))
    assert autos and autos <= fills
    # What the plan decided stays a number, so a disagreeing Trainer/accelerate run fails loudly.
    assert cfg["train_micro_batch_size_per_gpu"] == 4 and cfg["gradient_accumulation_steps"] == 2
    assert cfg["bf16"] == {"enabled": True}


def test_accelerate_config_leaves_train_batch_size_to_deepspeed() -> None:
    cfg = ds_config_dict(settings_from_strategy(OFFLOAD, WriteOptions(consumer="accelerate")))
    assert "train_batch_size" not in cfg  # accelerate's own count is wrong on CPU (docs/cpu-testing.md)
    assert cfg["optimizer"]["params"]["betas"] == [0.9, 0.999]  # accelerate does not fill betas/eps


def test_optimizer_is_deepspeeds_when_offloading_else_the_scripts() -> None:
    assert settings_from_strategy(OFFLOAD).optimizer is not None
    assert settings_from_strategy(OFFLOAD.with_(offload_optimizer="none")).optimizer is None
    script = settings_from_strategy(OFFLOAD, WriteOptions(optimizer="script"))
    assert script.optimizer is None
    codes = {f.code for f in lint_config(ds_config_dict(script), consumer="deepspeed")}
    assert "offload-client-optimizer" in codes  # the linter says what that choice costs


def test_log_level_only_for_deepspeed_that_reads_it() -> None:
    assert supports_log_level("0.19.3") and supports_log_level("0.19.8+cu130") and supports_log_level(None)
    assert not supports_log_level("0.19.2") and not supports_log_level("0.17.6")
    old = settings_from_strategy(Strategy(), WriteOptions(deepspeed_version="0.18.0"))
    assert old.log_level is None and old.steps_per_print == 10
    assert settings_from_strategy(Strategy()).log_level == "info"


def test_inference_has_no_optimizer_or_clipping() -> None:
    s = settings_from_strategy(Strategy(zero_stage=3, offload_param="cpu", mode="inference"))
    assert s.optimizer is None and s.gradient_clipping is None and s.stage == 3


def test_fp16_writes_dynamic_loss_scaling() -> None:
    s = settings_from_strategy(Strategy(precision="fp16"))
    assert s.fp16 is not None and s.fp16.loss_scale == 0 and s.fp16.initial_scale_power == 16
    assert s.bf16 is None and s.precision == "fp16"


@pytest.mark.parametrize(
    ("strategy", "options", "message"),
    [
        (
            Strategy(zero_stage=2, offload_param="cpu"),
            WriteOptions(),
            "parameter offload only works at ZeRO stage 3",
        ),
        (Strategy(zero_stage=3, offload_optimizer="nvme"), WriteOptions(), "nvme_path cannot be None"),
        (Strategy(nodes=2, gpus_per_node=8), WriteOptions(hosts=("a", "b", "c")), "3 host names"),
        (Strategy(nodes=2, gpus_per_node=8), WriteOptions(hosts=("a", "a")), "named twice"),
        (Strategy(), WriteOptions(hosts=("a", "b")), "one-node plan"),
    ],
)
def test_impossible_requests_are_clear_errors(
    strategy: Strategy, options: WriteOptions, message: str
) -> None:
    with pytest.raises(DswizError) as info:
        config_set_from_strategy(strategy, options)
    assert message in info.value.problem and info.value.fix


def test_config_set_and_settings_from_a_strategy() -> None:
    strategy = Strategy(zero_stage=1, nodes=2, gpus_per_node=4)
    config = config_set_from_strategy(strategy, WriteOptions(consumer="trainer"))
    assert config.consumer == "trainer" and config.topology.world_size == 8
    assert config.topology.hosts == ("worker-0", "worker-1") and config.node_env == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID"
    }
    assert settings_from_strategy(strategy) == config_set_from_strategy(strategy).deepspeed


def test_bounds_deepspeed_enforces_are_their_own_finding() -> None:
    """DeepSpeed 0.19.8 (runtime/zero/config.py): reduce_bucket_size gt=0, allgather_bucket_size ge=0. A value out
    of those bounds is named as out of range, with the bound, not as a wrong type."""
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "steps_per_print": 10,
        "zero_optimization": {"stage": 2, "reduce_bucket_size": 0, "allgather_bucket_size": -5},
    }
    found = {f.location: f for f in lint_config(cfg, consumer="deepspeed") if f.severity.name == "ERROR"}
    reduce, gather = (
        found["zero_optimization.reduce_bucket_size"],
        found["zero_optimization.allgather_bucket_size"],
    )
    assert reduce.code == gather.code == "out-of-range"
    assert "at least 1" in reduce.fix and "0 or more" in gather.fix and "different type" not in reduce.why
    ok = {**cfg, "zero_optimization": {"stage": 2, "reduce_bucket_size": 1, "allgather_bucket_size": 0}}
    assert not [f for f in lint_config(ok, consumer="deepspeed") if f.code in ("out-of-range", "wrong-type")]

"""Importing a config and writing it back preserves it: managed keys keep their values, everything dswiz does not
manage (unknown sections, DeepSpeed keys it does not model, accelerate fields) comes back unchanged."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.load import load_path, settings_from_dict
from wizard.config.render import accelerate_yaml_dict, ds_config_dict, render_accelerate_yaml, render_ds_json
from wizard.strategy import OFFLOAD_DEVICES, PRECISIONS, Strategy

from .test_config_golden import CASES

# A DeepSpeed config as people write them: HF-style "auto"s, numbers as 5e8, keys DeepSpeed knows but dswiz does
# not model, sections dswiz does not know at all, an explicit null.
HAND_WRITTEN: dict[str, Any] = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16, "auto_cast": False},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True, "ratio": 0.5},
        "offload_param": {"device": "none"},
        "overlap_comm": True,
        "contiguous_gradients": True,
        "sub_group_size": 1e9,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
        "stage3_max_live_parameters": 1e9,
        "stage3_max_reuse_distance": 1e9,
        "stage3_gather_16bit_weights_on_model_save": True,
        "memory_efficient_linear": False,
    },
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "torch_adam": True},
    },
    "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto", "warmup_num_steps": "auto"}},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "steps_per_print": 2000,
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": False,
    "tensorboard": {"enabled": True, "output_path": "tb/", "job_name": "x"},
    "my_team_notes": ["kept", {"as": "is"}],
    "comms_logger": {"enabled": False},
    "dump_state": None,
}


def test_hand_written_config_round_trips_exactly(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(HAND_WRITTEN, indent=4))
    loaded = load_path(path)
    assert loaded.kind == "deepspeed"
    assert ds_config_dict(loaded.config.deepspeed) == HAND_WRITTEN
    # Written back and read again: the same text (stable order, nothing drifts).
    text = render_ds_json(loaded.config.deepspeed)
    again = tmp_path / "again.json"
    again.write_text(text)
    assert render_ds_json(load_path(again).config.deepspeed) == text


def test_managed_keys_are_typed_and_unknown_ones_kept_aside() -> None:
    s = settings_from_dict(HAND_WRITTEN, source="x")
    assert s.stage == 3 and s.zero_optimization is not None
    assert s.zero_optimization.offload_optimizer is not None
    assert s.zero_optimization.offload_optimizer.device == "cpu"
    assert s.zero_optimization.offload_optimizer.unmanaged == {"ratio": 0.5}
    assert s.zero_optimization.sub_group_size == 1_000_000_000  # 1e9 read as DeepSpeed does
    assert list(s.unmanaged) == ["tensorboard", "my_team_notes", "comms_logger", "dump_state"]
    assert s.precision == "auto"


def test_every_golden_config_round_trips(tmp_path: Path) -> None:
    for name, (strategy, options) in CASES.items():
        built = config_set_from_strategy(strategy, options).deepspeed
        path = tmp_path / f"{name}.json"
        path.write_text(render_ds_json(built))
        assert load_path(path).config.deepspeed == built, name


ACCELERATE_CONFIG_QUESTIONNAIRE = {  # what `accelerate config` writes for DeepSpeed (plugin mode)
    "compute_environment": "LOCAL_MACHINE",
    "debug": False,
    "deepspeed_config": {
        "gradient_accumulation_steps": 4,
        "gradient_clipping": 1.0,
        "offload_optimizer_device": "cpu",
        "offload_param_device": "none",
        "zero3_init_flag": True,
        "zero3_save_16bit_model": True,
        "zero_stage": 3,
    },
    "distributed_type": "DEEPSPEED",
    "downcast_bf16": "no",
    "enable_cpu_affinity": False,
    "machine_rank": 0,
    "main_training_function": "main",
    "mixed_precision": "bf16",
    "num_machines": 1,
    "num_processes": 8,
    "rdzv_backend": "static",
    "same_network": True,
    "tpu_env": [],
    "tpu_use_cluster": False,
    "tpu_use_sudo": False,
    "use_cpu": False,
}


def test_accelerate_plugin_yaml_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump(ACCELERATE_CONFIG_QUESTIONNAIRE))
    loaded = load_path(path)
    cfg = loaded.config
    assert loaded.kind == "accelerate" and cfg.accelerate_mode == "plugin" and cfg.consumer == "accelerate"
    # The plugin fields are read into DeepSpeed terms ...
    assert cfg.deepspeed.stage == 3 and cfg.deepspeed.precision == "bf16"
    assert cfg.deepspeed.gradient_accumulation_steps == 4
    assert cfg.topology.world_size == 8 and cfg.zero3_init is True
    # ... and written back as they were.
    assert accelerate_yaml_dict(cfg) == ACCELERATE_CONFIG_QUESTIONNAIRE
    assert yaml.safe_load(render_accelerate_yaml(cfg)) == ACCELERATE_CONFIG_QUESTIONNAIRE


def test_accelerate_plugin_yaml_with_mixed_precision_no_round_trips(tmp_path: Path) -> None:
    raw = {**ACCELERATE_CONFIG_QUESTIONNAIRE, "mixed_precision": "no"}
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump(raw))
    cfg = load_path(path).config
    assert cfg.deepspeed.precision == "fp32"
    assert accelerate_yaml_dict(cfg) == raw


def test_accelerate_config_file_yaml_and_its_json_round_trip(tmp_path: Path) -> None:
    json_path = tmp_path / "zero3.json"
    json_path.write_text(json.dumps(HAND_WRITTEN))
    raw = {
        "compute_environment": "LOCAL_MACHINE",
        "deepspeed_config": {
            "deepspeed_config_file": str(json_path),
            "zero3_init_flag": True,
            "deepspeed_moe_layer_cls_names": "MixtralSparseMoeBlock",
        },
        "distributed_type": "DEEPSPEED",
        "gpu_ids": "0,1",
        "machine_rank": 0,
        "num_machines": 1,
        "num_processes": 2,
        "dynamo_config": {"dynamo_backend": "INDUCTOR"},
        "use_cpu": False,
    }
    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump(raw))
    loaded = load_path(path)
    assert loaded.config.accelerate_mode == "config_file"
    assert loaded.ds_config_path == json_path
    assert ds_config_dict(loaded.config.deepspeed) == HAND_WRITTEN
    assert accelerate_yaml_dict(loaded.config) == dict(sorted(raw.items())) | {
        "deepspeed_config": dict(sorted(raw["deepspeed_config"].items()))
    }


def test_written_accelerate_yaml_loads_back_to_the_same_set(tmp_path: Path) -> None:
    for name in ("accelerate_multinode_config_file", "accelerate_plugin"):
        strategy, options = CASES[name]
        options = replace(options, config_dir=str(tmp_path))
        built = config_set_from_strategy(strategy, options)
        (tmp_path / "ds_config.json").write_text(render_ds_json(built.deepspeed))
        (tmp_path / "accelerate.yaml").write_text(render_accelerate_yaml(built))
        loaded = load_path(tmp_path / "accelerate.yaml").config
        assert accelerate_yaml_dict(loaded) == accelerate_yaml_dict(built), name
        if built.accelerate_mode == "config_file":
            assert loaded.deepspeed == built.deepspeed


@st.composite
def valid_strategies(draw: st.DrawFn) -> Strategy:
    stage = draw(st.integers(0, 3))
    s = Strategy(
        zero_stage=stage,
        offload_optimizer=draw(st.sampled_from(OFFLOAD_DEVICES)) if stage else "none",
        offload_param=draw(st.sampled_from(OFFLOAD_DEVICES)) if stage == 3 else "none",
        precision=draw(st.sampled_from(PRECISIONS)),
        micro_batch_size=draw(st.integers(1, 64)),
        gradient_accumulation_steps=draw(st.integers(1, 16)),
        activation_checkpointing=draw(st.booleans()),
        zero_quantized_weights=stage == 3 and draw(st.booleans()),
        nodes=draw(st.integers(1, 4)),
        gpus_per_node=draw(st.sampled_from((1, 2, 4, 8))),
    )
    if s.problems():
        s = s.with_(
            offload_param="none", offload_optimizer="cpu" if s.offload_optimizer == "nvme" else "none"
        )
    return s


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(
    strategy=valid_strategies(),
    consumer=st.sampled_from(("deepspeed", "accelerate", "trainer")),
    extra=st.dictionaries(st.from_regex(r"x_[a-z]{1,8}", fullmatch=True), _json, max_size=3),
)
def test_any_written_config_round_trips(strategy: Strategy, consumer: str, extra: dict[str, Any]) -> None:
    options = WriteOptions(consumer=consumer, nvme_path="/nvme")  # type: ignore[arg-type]
    built = config_set_from_strategy(strategy, options).deepspeed
    raw = {**ds_config_dict(built), **extra}
    back = settings_from_dict(json.loads(json.dumps(raw)), source="generated")
    assert ds_config_dict(back) == raw

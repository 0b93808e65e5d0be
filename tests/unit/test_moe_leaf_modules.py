"""Mixture-of-experts at ZeRO-3: the block named by the model spec becomes a ZeRO-3 leaf through what dswiz writes --
zero_optimization.leaf_module in the JSON (read by the installed DeepSpeed's own config and applied by its own
apply_zero_leaf_module_config), or deepspeed_moe_layer_cls_names in accelerate's plugin-mode YAML (applied by
accelerate's own DeepSpeedPlugin.set_moe_leaf_modules) -- checked on real tiny HF MoE models."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import yaml

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.render import ds_config_dict, render_accelerate_yaml
from wizard.model import spec_from_config
from wizard.strategy import Strategy

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TINY = {
    "mixtral": {
        "model_type": "mixtral",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": 128,
    },
    "qwen2_moe": {
        "model_type": "qwen2_moe",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": 128,
    },
}
STAGE3 = Strategy(zero_stage=3, micro_batch_size=1, gpus_per_node=2)


def _model(model_type: str) -> tuple[Any, Any]:
    cfg = dict(TINY[model_type])
    spec = spec_from_config(cfg, name=model_type, source="numbers")
    config = transformers.CONFIG_MAPPING[cfg.pop("model_type")](**cfg)
    return spec, transformers.AutoModelForCausalLM.from_config(config)


def _options(spec: Any, **changes: Any) -> WriteOptions:
    return replace(WriteOptions(moe_leaf_modules=(spec.moe_layer_cls_name,)), **changes)


def _leaves(model: Any, cls_name: str) -> tuple[int, int]:
    blocks = [m for m in model.modules() if type(m).__name__ == cls_name]
    return sum(bool(getattr(m, "_z3_leaf", False)) for m in blocks), len(blocks)


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_the_json_leaf_module_makes_the_moe_blocks_leaves(model_type: str) -> None:
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.utils.z3_leaf_module import apply_zero_leaf_module_config

    spec, model = _model(model_type)
    for consumer in ("deepspeed", "trainer", "accelerate"):
        cfg = ds_config_dict(config_set_from_strategy(STAGE3, _options(spec, consumer=consumer)).deepspeed)
        zero = DeepSpeedZeroConfig(**cfg["zero_optimization"])  # the installed DeepSpeed accepts the key
        assert zero.leaf_module.classes == [spec.moe_layer_cls_name]
        apply_zero_leaf_module_config(model, zero.leaf_module)
        leaves, blocks = _leaves(model, spec.moe_layer_cls_name)
        assert blocks == 2 and leaves == blocks


def test_accelerate_plugin_mode_names_the_block_in_the_yaml() -> None:
    from accelerate.utils import DeepSpeedPlugin

    spec, model = _model("mixtral")
    config = config_set_from_strategy(STAGE3, _options(spec, consumer="accelerate", accelerate_mode="plugin"))
    assert "leaf_module" not in ds_config_dict(config.deepspeed)["zero_optimization"]
    ds = yaml.safe_load(render_accelerate_yaml(config))["deepspeed_config"]
    assert ds["deepspeed_moe_layer_cls_names"] == "MixtralSparseMoeBlock"
    plugin = DeepSpeedPlugin(zero_stage=3, transformer_moe_cls_names=ds["deepspeed_moe_layer_cls_names"])
    plugin.set_moe_leaf_modules(model)
    assert _leaves(model, "MixtralSparseMoeBlock") == (2, 2)


def test_below_stage_3_nothing_is_written() -> None:
    spec, _ = _model("mixtral")
    for stage in (0, 1, 2):
        config = config_set_from_strategy(
            replace(STAGE3, zero_stage=stage), _options(spec, consumer="accelerate", accelerate_mode="plugin")
        )
        assert "leaf_module" not in ds_config_dict(config.deepspeed).get("zero_optimization", {})
        assert "deepspeed_moe_layer_cls_names" not in config.accelerate_ds_fields


def test_a_deepspeed_before_0_18_gets_the_yaml_key_or_a_script_note() -> None:
    spec, _ = _model("mixtral")
    old = "0.17.6"
    acc = config_set_from_strategy(STAGE3, _options(spec, consumer="accelerate", deepspeed_version=old))
    assert "leaf_module" not in ds_config_dict(acc.deepspeed)["zero_optimization"]
    assert acc.accelerate_ds_fields["deepspeed_moe_layer_cls_names"] == "MixtralSparseMoeBlock"
    plain = config_set_from_strategy(STAGE3, _options(spec, consumer="deepspeed", deepspeed_version=old))
    assert "leaf_module" not in ds_config_dict(plain.deepspeed)["zero_optimization"]
    assert any("set_z3_leaf_modules(model, [MixtralSparseMoeBlock])" in n for n in plain.script_notes)

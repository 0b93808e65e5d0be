"""Golden files for every writer: the exact text of ds_config.json, accelerate.yaml (both modes), hostfile,
.deepspeed_env and launch.sh for representative strategies. Regenerate after an intended change with
``DSWIZ_UPDATE_GOLDEN=1 pytest tests/unit/test_config_golden.py`` and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.check import lint_config
from wizard.config.render import ds_config_dict, render_all
from wizard.findings import Severity
from wizard.strategy import Strategy

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden" / "config"
UPDATE = os.environ.get("DSWIZ_UPDATE_GOLDEN") == "1"

CASES: dict[str, tuple[Strategy, WriteOptions]] = {
    "deepspeed_stage2_bf16": (
        Strategy(zero_stage=2, micro_batch_size=4, gradient_accumulation_steps=2, gpus_per_node=8),
        WriteOptions(consumer="deepspeed"),
    ),
    "trainer_stage3_nvme_fp16": (
        Strategy(
            zero_stage=3,
            offload_optimizer="nvme",
            offload_param="nvme",
            precision="fp16",
            micro_batch_size=2,
            gradient_accumulation_steps=8,
            activation_checkpointing=True,
            gpus_per_node=4,
        ),
        WriteOptions(consumer="trainer", nvme_path="/local_nvme/dswiz", scheduler="deepspeed"),
    ),
    "accelerate_multinode_config_file": (
        Strategy(
            zero_stage=3,
            offload_optimizer="cpu",
            micro_batch_size=8,
            zero_quantized_weights=True,
            zero_hpz_partition_size=8,
            nodes=2,
            gpus_per_node=8,
        ),
        WriteOptions(consumer="accelerate", hosts=("node-a", "node-b"), scheduler="deepspeed"),
    ),
    "accelerate_plugin": (
        Strategy(zero_stage=2, offload_optimizer="cpu", micro_batch_size=4, gpus_per_node=4),
        WriteOptions(consumer="accelerate", accelerate_mode="plugin"),
    ),
    "deepspeed_multinode_placeholders": (
        Strategy(zero_stage=1, precision="fp32", micro_batch_size=16, nodes=2, gpus_per_node=4),
        WriteOptions(
            consumer="deepspeed", lr=3e-4, torch_adam=True, optimizer="deepspeed", master_port=29600
        ),
    ),
    "deepspeed_inference_stage3": (
        Strategy(zero_stage=3, offload_param="cpu", mode="inference", micro_batch_size=8, gpus_per_node=2),
        WriteOptions(consumer="deepspeed", csv_monitor=False, deepspeed_version="0.18.0"),
    ),
    # A Mixtral plan at stage 3: accelerate's plugin mode names the MoE block in the YAML
    # (deepspeed_moe_layer_cls_names); the JSON carries it as zero_optimization.leaf_module for everyone else.
    "accelerate_plugin_mixtral_stage3": (
        Strategy(zero_stage=3, offload_optimizer="cpu", micro_batch_size=2, gpus_per_node=8),
        WriteOptions(
            consumer="accelerate",
            accelerate_mode="plugin",
            moe_leaf_modules=("MixtralSparseMoeBlock",),
            deepspeed_version="0.19.8",
        ),
    ),
    "deepspeed_mixtral_stage3": (
        Strategy(zero_stage=3, micro_batch_size=2, gradient_accumulation_steps=4, gpus_per_node=8),
        WriteOptions(
            consumer="deepspeed", moe_leaf_modules=("MixtralSparseMoeBlock",), deepspeed_version="0.19.8"
        ),
    ),
}


def _render(name: str) -> dict[str, str]:
    strategy, options = CASES[name]
    from dataclasses import replace

    options = replace(options, config_dir=f"/path/to/{name}")
    return render_all(config_set_from_strategy(strategy, options))


@pytest.mark.parametrize("name", sorted(CASES))
def test_writers_match_golden_files(name: str) -> None:
    files = _render(name)
    directory = GOLDEN / name
    if UPDATE:
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            old.unlink()
        for file_name, text in files.items():
            (directory / file_name).write_text(text, encoding="utf-8")
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in sorted(directory.iterdir())}
    assert sorted(on_disk) == sorted(files), "the set of files written changed"
    for file_name, text in files.items():
        assert text == on_disk[file_name], f"{name}/{file_name} differs from the golden file"


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendering_is_deterministic(name: str) -> None:
    assert _render(name) == _render(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_written_configs_lint_without_errors(name: str) -> None:
    strategy, options = CASES[name]
    settings = config_set_from_strategy(strategy, options).deepspeed
    findings = lint_config(
        ds_config_dict(settings),
        consumer=options.consumer,
        world_size=strategy.world_size,
        gpus_per_node=strategy.gpus_per_node,
        check_local_paths=False,  # the nvme path is for the training machine
    )
    errors = [f for f in findings if f.severity is Severity.ERROR]
    assert errors == []


def test_multi_node_sets_have_a_hostfile_and_node_env_single_node_ones_do_not() -> None:
    multi = _render("accelerate_multinode_config_file")
    single = _render("deepspeed_stage2_bf16")
    assert {"hostfile", ".deepspeed_env"} <= set(multi)
    assert not {"hostfile", ".deepspeed_env"} & set(single)
    assert multi["hostfile"].splitlines()[-2:] == ["node-a slots=8", "node-b slots=8"]

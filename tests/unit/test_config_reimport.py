"""Editing an imported config: its decisions read back as a Strategy, and written back changed only where the
choices changed (unknown sections, unmanaged keys, key order and number spelling survive)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import yaml

from wizard.config.build import WriteOptions, config_set_from_strategy
from wizard.config.load import load_path
from wizard.config.reimport import (
    config_set_from_import,
    ds_json_like,
    merge3,
    options_from_config,
    strategy_from_config,
)
from wizard.config.render import render_accelerate_yaml, render_ds_json
from wizard.strategy import Strategy

VALID = Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "valid"

FOREIGN = """{
    "zero_optimization": {
        "stage": 3,
        "stage3_max_live_parameters": 1000000000.0,
        "my_tuning_note": "kept"
    },
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
    "train_batch_size": 64,
    "bf16": {
        "enabled": true
    },
    "comms_logger": {
        "enabled": true,
        "verbose": false
    },
    "my_team_section": {
        "owner": "ml-infra",
        "ticket": 1234
    }
}
"""


def load(tmp: Path, text: str, name: str = "ds.json"):  # type: ignore[no-untyped-def]
    path = tmp / name
    path.write_text(text)
    return load_path(path).config


def write_back(imported, strategy: Strategy, **options) -> str:  # type: ignore[no-untyped-def]
    merged = config_set_from_import(imported, strategy, options_from_config(imported, **options))
    return merged.deepspeed


def changed_lines(old: str, new: str) -> list[str]:
    return [
        ln
        for ln in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]


def test_strategy_from_config_reads_the_decisions(tmp_path: Path) -> None:
    s = strategy_from_config(load(tmp_path, FOREIGN))
    assert (s.zero_stage, s.precision, s.micro_batch_size, s.gradient_accumulation_steps) == (3, "bf16", 2, 4)
    trainer = strategy_from_config(load_path(VALID / "hf_trainer_zero3.json").config)
    assert (trainer.offload_optimizer, trainer.offload_param, trainer.precision) == ("cpu", "cpu", "fp16")
    assert trainer.micro_batch_size == 1  # "auto": the Trainer's, dswiz's default here
    plugin = strategy_from_config(load_path(VALID / "accelerate_plugin.yaml").config)
    assert (plugin.zero_stage, plugin.gpus_per_node, plugin.gradient_accumulation_steps) == (3, 8, 4)
    derived = load(tmp_path, '{"train_batch_size": 48, "train_micro_batch_size_per_gpu": 3}', "d.json")
    assert strategy_from_config(derived).gradient_accumulation_steps == 16  # 48 / (3 x world 1)


def test_unchanged_import_is_written_back_byte_for_byte(tmp_path: Path) -> None:
    imported = load(tmp_path, FOREIGN)
    strategy = strategy_from_config(imported).with_(gpus_per_node=8)  # planned on an 8-GPU machine
    settings = write_back(imported, strategy)
    assert ds_json_like(settings, FOREIGN) == FOREIGN


def test_a_change_touches_only_its_keys_and_unknown_sections_survive(tmp_path: Path) -> None:
    imported = load(tmp_path, FOREIGN)
    strategy = strategy_from_config(imported).with_(gpus_per_node=8, micro_batch_size=4)
    text = ds_json_like(write_back(imported, strategy), FOREIGN)
    written = json.loads(text)
    assert written["my_team_section"] == {"owner": "ml-infra", "ticket": 1234}
    assert written["comms_logger"] == {"enabled": True, "verbose": False}
    assert written["zero_optimization"]["my_tuning_note"] == "kept"
    assert changed_lines(FOREIGN, text) == [
        '-    "train_micro_batch_size_per_gpu": 2,',
        '+    "train_micro_batch_size_per_gpu": 4,',
        '-    "train_batch_size": 64,',
        '+    "train_batch_size": 128,',
    ]
    assert '"stage3_max_live_parameters": 1000000000.0,' in text  # not rewritten as the int it is read as


def test_stage_and_offload_changes_follow_the_choices(tmp_path: Path) -> None:
    imported = load(tmp_path, FOREIGN)
    base = strategy_from_config(imported)
    stage2 = write_back(imported, base.with_(zero_stage=2, offload_optimizer="cpu"))
    zero = render_and_parse(stage2)["zero_optimization"]
    assert zero["stage"] == 2 and zero["offload_optimizer"]["device"] == "cpu"
    assert zero["my_tuning_note"] == "kept" and "stage3_gather_16bit_weights_on_model_save" not in zero
    assert render_and_parse(stage2)["optimizer"]["type"] == "AdamW"  # offload: DeepSpeed's optimizer (dswiz)


def test_the_files_own_optimizer_is_kept_when_offload_is_switched_off() -> None:
    imported = load_path(VALID / "offload_ds_optimizer.json").config
    s = strategy_from_config(imported)
    written = render_and_parse(write_back(imported, s.with_(offload_optimizer="none")))
    assert written["optimizer"] == {"type": "AdamW", "params": {"lr": 0.0001, "torch_adam": True}}
    assert "offload_optimizer" not in written["zero_optimization"]


def test_trainer_autos_stay_auto_unless_changed() -> None:
    imported = load_path(VALID / "hf_trainer_zero3.json").config
    original = (VALID / "hf_trainer_zero3.json").read_text()
    s = strategy_from_config(imported).with_(gpus_per_node=8)
    assert ds_json_like(write_back(imported, s), original) == original
    clip = render_and_parse(write_back(imported, s, gradient_clipping=0.5))
    assert clip["gradient_clipping"] == 0.5 and clip["train_batch_size"] == "auto"


def test_accelerate_yaml_keeps_its_fields_and_points_at_the_written_json(tmp_path: Path) -> None:
    imported = load_path(VALID / "accelerate_plugin.yaml").config
    s = strategy_from_config(imported)
    merged = config_set_from_import(imported, s, options_from_config(imported, config_dir="/cfg"))
    written = yaml.safe_load(render_accelerate_yaml(merged))
    assert written["tpu_env"] == [] and written["tpu_use_sudo"] is False  # fields dswiz never writes
    assert written["deepspeed_config"]["zero_stage"] == 3
    assert written["num_processes"] == 8
    more = config_set_from_import(
        imported, s.with_(nodes=2), options_from_config(imported, config_dir="/cfg", hosts=("a", "b"))
    )
    acc = yaml.safe_load(render_accelerate_yaml(more))
    assert (acc["num_machines"], acc["num_processes"]) == (2, 16)
    assert acc["deepspeed_config"]["deepspeed_hostfile"] == "/cfg/hostfile"


def test_an_invalid_import_is_rewritten_from_the_choices_keeping_unknown_keys(tmp_path: Path) -> None:
    bad = '{"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}, "x_custom": 1}'
    imported = load(tmp_path, bad)
    assert strategy_from_config(imported).problems()  # parameter offload below stage 3
    fixed = render_and_parse(write_back(imported, Strategy(zero_stage=2)))
    assert fixed["zero_optimization"]["stage"] == 2 and "offload_param" not in fixed["zero_optimization"]
    assert fixed["x_custom"] == 1 and fixed["train_batch_size"] == 1


def test_merge3_rules() -> None:
    imported = {"a": 1, "keep": "x", "s": {"k": 1, "extra": True}}
    base = {"a": 1, "s": {"k": 1}, "gone": 5}
    new = {"a": 2, "s": {"k": 1}, "added": 3}
    assert merge3(imported, base, new) == {"a": 2, "keep": "x", "s": {"k": 1, "extra": True}, "added": 3}
    assert merge3(imported, None, new) == {"a": 2, "keep": "x", "s": {"k": 1, "extra": True}, "added": 3}


def render_and_parse(settings) -> dict:  # type: ignore[no-untyped-def]
    return json.loads(render_ds_json(settings))


def test_dswiz_written_configs_round_trip_through_import(tmp_path: Path) -> None:
    s = Strategy(zero_stage=3, offload_optimizer="cpu", micro_batch_size=4, gradient_accumulation_steps=2)
    options = WriteOptions(config_dir=str(tmp_path))
    text = render_ds_json(config_set_from_strategy(s, options).deepspeed)
    imported = load(tmp_path, text)
    again = config_set_from_import(imported, strategy_from_config(imported), options_from_config(imported))
    assert ds_json_like(again.deepspeed, text) == text

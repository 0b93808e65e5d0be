"""The line prompts for inference, the stage-3 16-bit save and the consumer (with its script change), end to end on
the real planner and config writers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from test_prompts import ScriptedPrompter

from wizard.prompts import run_prompts


def test_inference_plans_stage_3_and_writes_no_training_keys(service: Any, tmp_path: Path) -> None:
    said: list[str] = []
    p = ScriptedPrompter({"model-preset": "llama-7b", "mode": "inference"})
    assert run_prompts(prompter=p, hardware_spec="8xA100-80GB", service=service, say=said.append) == 0
    assert all(title.lstrip("★ ").startswith("ZeRO-3") for title in p.titles["candidate"].values())
    assert not {"gas", "clip", "ckpt", "save-16bit"} & set(p.asked)  # training-only questions are not asked
    ds = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == 3
    assert not {"optimizer", "scheduler", "gradient_accumulation_steps", "gradient_clipping"} & set(ds)
    assert any(line.startswith("script (deepspeed): inference:") for line in said)


def test_stage_3_training_asks_about_the_16bit_save_with_its_cost(service: Any, tmp_path: Path) -> None:
    p = ScriptedPrompter(
        {
            "model-preset": "llama-7b",
            "by-hand": True,
            "stage": 3,
            "offload-optimizer": "none",
            "offload-param": "none",
            "save-16bit": False,
            "consumer": "accelerate",
        }
    )
    assert run_prompts(prompter=p, hardware_spec="8xA100-80GB", service=service, say=lambda s: None) == 0
    assert "save-16bit" in p.asked
    ds = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is False
    acc = yaml.safe_load((tmp_path / "dswiz-config" / "accelerate.yaml").read_text())
    assert acc["deepspeed_config"]["deepspeed_config_file"].endswith("ds_config.json")


def test_the_16bit_cost_is_the_models_16bit_size() -> None:
    from wizard.model import load_model_spec
    from wizard.service import WizardService

    text = WizardService.save_16bit_cost(load_model_spec("llama-7b"))
    assert "12.6 GiB of 16-bit weights in host RAM" in text and "one module at a time" in text


def test_the_chosen_consumer_gets_its_script_change(service: Any, tmp_path: Path) -> None:
    said: list[str] = []
    p = ScriptedPrompter(
        {
            "model-preset": "llama-7b",
            "by-hand": True,
            "stage": 2,
            "offload-optimizer": "cpu",
            "offload-param": "none",
            "consumer": "accelerate",
        }
    )
    assert run_prompts(prompter=p, hardware_spec="8xA100-80GB", service=service, say=said.append) == 0
    # Optimizer offload puts DeepSpeed's optimizer in the config: accelerate's script needs DummyOptim.
    assert any(line.startswith("script (accelerate):") for line in said)
    assert any(line.startswith("+") and "DummyOptim" in line for line in said)

"""The Model step asks full / LoRA / QLoRA with the rank; the Strategy step plans for it and the written files carry
the script change and the sidecar the fine-tuning mode -- walked like a user, on the real planner and writers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SIZE
from helpers import click_visible, next_step, settle, status, type_into
from test_wizard_paths import write

from wizard.tui.factory import build_app
from wizard.tui.screens.review import ReviewStep

pytestmark = pytest.mark.anyio


async def test_qlora_from_the_model_step_to_the_files(service: Any, tmp_path: Path) -> None:
    app = build_app(hardware_spec="1xL40S", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "llama-70b")
        await click_visible(pilot, "#finetune-qlora")
        await type_into(pilot, "#lora-rank", "16")
        await next_step(pilot)  # -> strategy
        assert app.model is not None and app.model.finetune.mode == "qlora", status(pilot)
        assert app.model.finetune.lora_rank == 16
        assert app.plan is not None and app.plan.best is not None  # 70B in 4 bit fits one 48 GB card
        assert all(c.strategy.offload_optimizer == "none" for c in app.plan.candidates)
        for _ in range(3):
            await next_step(pilot)
        assert isinstance(app.screen, ReviewStep), status(pilot)
        await write(pilot)
    out = tmp_path / "dswiz-config"
    sidecar = json.loads((out / "dswiz-plan.json").read_text())
    assert sidecar["model"]["spec"]["finetune"]["mode"] == "qlora"
    assert "BitsAndBytesConfig(load_in_4bit=True" in (out / "launch.sh").read_text()


async def test_a_bad_rank_is_refused_with_the_fix(service: Any) -> None:
    app = build_app(hardware_spec="1xL40S", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "llama-7b")
        await click_visible(pilot, "#finetune-lora")
        await type_into(pilot, "#lora-rank", "0")
        await next_step(pilot)
        assert "LoRA rank must be at least 1" in status(pilot)


def test_line_prompts_ask_the_fine_tuning_mode_again_until_it_fits_the_model(
    service: Any, tmp_path: Path
) -> None:
    from test_prompts import ScriptedPrompter

    from wizard.prompts import run_prompts

    said: list[str] = []
    answers = {"model-preset": "gpt2", "finetune": "lora", "lora-rank": ["0", "16"], "candidate": 0}
    p = ScriptedPrompter(answers)
    assert run_prompts(prompter=p, hardware_spec="1xL40S", service=service, say=said.append) == 0
    assert any("LoRA r=16 (c_attn)" in line for line in said)
    sidecar = json.loads((tmp_path / "dswiz-config" / "dswiz-plan.json").read_text())
    assert sidecar["model"]["spec"]["finetune"] == {
        "mode": "lora", "lora_rank": 16, "lora_alpha": 8, "lora_targets": ["c_attn"], "double_quant": True
    }  # fmt: skip
    assert "get_peft_model(model, LoraConfig(r=16" in (tmp_path / "dswiz-config" / "launch.sh").read_text()

"""The full-screen wizard for inference (Model step -> planner -> writers), the stage-3 16-bit save switch with its
cost, and the Review step's consumer choice with the script change it needs -- walked like a user, on the real
planner and config writers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SIZE
from helpers import click_visible, next_step, settle, status, type_into
from test_wizard_paths import write
from textual.widgets import Input, Switch

from wizard.tui.factory import build_app
from wizard.tui.screens.review import ReviewStep

pytestmark = pytest.mark.anyio


async def test_inference_drives_the_planner_and_the_writers(service: Any, tmp_path: Path) -> None:
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "llama-7b")
        await click_visible(pilot, "#mode-inference")
        await next_step(pilot)  # -> strategy
        assert app.choices.mode == "inference"
        assert app.plan.candidates and all(c.strategy.zero_stage == 3 for c in app.plan.candidates)
        await next_step(pilot)  # -> precision & batch
        screen = app.screen
        assert screen.query_one("#gas", Input).disabled and screen.query_one("#clip", Input).disabled
        assert screen.query_one("#ckpt", Switch).disabled and screen.query_one("#save16", Switch).disabled
        assert "checkpointing only saves memory for a backward pass" in str(
            screen.query_one("#zeropp-why").render()
        )
        await next_step(pilot)
        await next_step(pilot)  # -> review
        assert isinstance(app.screen, ReviewStep), status(pilot)
        assert "inference:" in str(app.screen.query_one("#hints").render())
        await write(pilot)
    ds = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == 3
    assert not {"optimizer", "scheduler", "gradient_accumulation_steps", "gradient_clipping"} & set(ds)


async def test_the_16bit_save_switch_shows_its_cost_and_reaches_the_file(
    service: Any, tmp_path: Path
) -> None:
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "llama-7b")
        await next_step(pilot)  # -> strategy
        await click_visible(pilot, "#stage-3")
        await next_step(pilot)  # -> precision & batch
        screen = app.screen
        switch = screen.query_one("#save16", Switch)
        assert not switch.disabled and switch.value
        assert "12.6 GiB of 16-bit weights in host RAM" in str(screen.query_one("#save16-cost").render())
        await click_visible(pilot, "#save16")
        assert not switch.value
        await next_step(pilot)
        await next_step(pilot)  # -> review
        await write(pilot)
    ds = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is False


async def test_review_consumer_choice_changes_the_files_and_the_script_change(
    service: Any, tmp_path: Path
) -> None:
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "llama-7b")
        await next_step(pilot)  # -> strategy
        await click_visible(pilot, "#stage-2")
        await click_visible(pilot, "#opt-cpu")  # optimizer offload: DeepSpeed's optimizer in the config
        for _ in range(3):
            await next_step(pilot)
        assert isinstance(app.screen, ReviewStep), status(pilot)
        hints = app.screen.query_one("#hints")
        assert "script (deepspeed)" in str(hints.render()) and "deepspeed.initialize" in str(hints.render())
        await click_visible(pilot, "#consumer-accelerate")
        assert app.choices.consumer == "accelerate"
        text = str(hints.render())
        assert "script (accelerate)" in text and "DummyOptim" in text
        assert '"lr": "auto"' in app.screen.files["ds_config.json"]  # accelerate's DummyOptim fills lr
        await write(pilot)
    assert '"lr": "auto"' in (tmp_path / "dswiz-config" / "ds_config.json").read_text()

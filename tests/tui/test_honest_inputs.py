"""Inputs stay honest (issue 13): what the wizard shows and keeps is what the planner would say, radio sets never
land on an option that is not offered, the no-fit advice is on the Strategy step."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SIZE
from helpers import next_step, settle, type_into
from textual.widgets import Input

from wizard.tui.factory import build_app
from wizard.tui.screens.model import ModelStep
from wizard.tui.screens.precision import PrecisionStep
from wizard.tui.screens.strategy import StrategyStep
from wizard.tui.widgets.fields import ChoiceSet

pytestmark = pytest.mark.anyio


async def test_sequence_from_the_model_and_no_planner_answer_written_back(service: Any) -> None:
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "gpt2-xl")
        await next_step(pilot)
        assert isinstance(app.screen, StrategyStep)
        assert app.plan.seq_len == 1024  # gpt2-xl has 1,024 learned positions: not 2048
        await pilot.press("ctrl+p")  # back to Model
        await settle(pilot)
        assert isinstance(app.screen, ModelStep)
        # "empty: planner picks" stays empty: the plan's batch is not the user's target
        assert app.screen.query_one("#global-batch", Input).value == ""
        assert app.screen.query_one("#seq-len", Input).value == ""
        assert "planned at sequence length 1024" in str(app.screen.query_one("#model-summary").render())
        assert app.choices.global_batch is None and app.choices.seq_len is None


async def test_radio_sets_skip_disabled_options_and_show_one_choice(service: Any) -> None:
    app = build_app(hardware_spec="2xV100-32GB", model_text="gpt2-xl", service=service, skip_answered=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, StrategyStep)
        for set_id in (
            "stage",
            "opt",
            "param",
        ):  # the cursor is on the chosen option, never on a disabled one
            choice = app.screen.query_one(f"#{set_id}", ChoiceSet)
            assert choice._selected == choice.pressed_index
        await pilot.press("enter")  # the recommendation, on to Precision
        await settle(pilot)
        assert isinstance(app.screen, PrecisionStep) and app.focused.id == "precision"
        assert app.choices.strategy.precision == "fp16"  # V100: bf16 is disabled
        await pilot.press("up")  # bf16 above is disabled: the cursor stays (no wrap round to fp32)
        await pilot.press("enter")
        await settle(pilot)
    assert app.choices.strategy.precision == "fp16"


async def test_no_fit_advice_on_the_strategy_step(service: Any) -> None:
    app = build_app(
        hardware_spec="1xT4,ram=16GiB", model_text="llama-13b", service=service, skip_answered=True
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, StrategyStep)
        advice = str(app.screen.query_one("#advice").render())
        assert "Nothing fits as asked. What would:" in advice
        assert (
            all(line in advice for line in app.plan.advice) and "nodes x 1 GPUs" in advice
        )  # the planner's own words


async def test_zeropp_notes_only_with_a_zeropp_switch_on(service: Any) -> None:
    app = build_app(hardware_spec="8xA100-80GB", model_text="llama-7b", service=service, skip_answered=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, PrecisionStep) and app.choices.strategy.zero_stage == 1
        notes = str(app.screen.query_one("#zeropp-why").render())
        assert "qwz" not in notes and "hpz" not in notes  # ZeRO-1, every ZeRO++ switch off
        assert app.screen.query_one("#qwz").disabled  # still not offered, the reason in its tooltip
        assert "stage 3" in str(app.screen.query_one("#qwz").tooltip)


async def test_a_model_that_does_not_load_is_said_on_the_model_step(service: Any) -> None:
    """`dswiz --model nosuch --hardware 1xH200`: the wizard opens on the Model step with the problem and its fix
    (it used to crash: the step was not on screen yet when the status was set)."""
    app = build_app(hardware_spec="1xH200", model_text="nosuch", service=service, skip_answered=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, ModelStep)
        status = str(app.screen.query_one("#status").render())
        assert "unknown model 'nosuch'" in status and "use a preset" in status

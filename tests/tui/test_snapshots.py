"""SVG snapshots of every step (and the dialogs) at a fixed size. Update with `pytest --snapshot-update` after a
deliberate change, and look at the new SVGs before committing them."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SIZE
from fake_core import StandInCore
from helpers import next_step, no_blink, settle, type_into
from textual.pilot import Pilot

from wizard.tui.factory import build_app


@pytest.fixture
def core() -> Any:
    return StandInCore()


def goto(step: int, spec: str = "8xA100-80GB", model: str = "llama-7b") -> Any:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        if step >= 1:
            await next_step(pilot)
            if step >= 2:
                await type_into(pilot, "#model", model)
        for _ in range(max(0, step - 1)):
            await next_step(pilot)
        pilot.app.screen.query_one("#next").focus()
        no_blink(pilot)
        await pilot.pause()

    return run_before


def test_hardware_described(snap_compare: Any, core: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec="8xA100-80GB", core=core), terminal_size=SIZE, run_before=goto(0)
    )


def test_hardware_no_gpu(snap_compare: Any, core: Any) -> None:
    assert snap_compare(build_app(core=core), terminal_size=SIZE, run_before=goto(0))


def test_model(snap_compare: Any, core: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec="8xA100-80GB", core=core), terminal_size=SIZE, run_before=goto(1)
    )


def test_strategy(snap_compare: Any, core: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec="8xA100-80GB", core=core), terminal_size=SIZE, run_before=goto(2)
    )


def test_strategy_max_batch(snap_compare: Any, core: Any) -> None:
    """The max-batch table opened with m (stand-in numbers: the layout, not the planner's calibration)."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await goto(2)(pilot)
        await pilot.press("m")
        await pilot.pause()

    assert snap_compare(
        build_app(hardware_spec="8xA100-80GB", core=core), terminal_size=SIZE, run_before=run_before
    )


def test_precision_and_batch(snap_compare: Any, core: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec="8xA100-80GB", core=core), terminal_size=SIZE, run_before=goto(3)
    )


def test_multi_node(snap_compare: Any, core: Any) -> None:
    app = build_app(hardware_spec="2x8xA100-80GB", core=core)
    assert snap_compare(app, terminal_size=SIZE, run_before=goto(4, spec="2x8xA100-80GB"))


def test_review(snap_compare: Any, core: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec="8xA100-80GB", core=core), terminal_size=SIZE, run_before=goto(5)
    )


def test_help_dialog(snap_compare: Any, core: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await goto(2)(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(
        build_app(hardware_spec="8xA100-80GB", core=core), terminal_size=SIZE, run_before=run_before
    )


def test_quit_confirmation(snap_compare: Any, core: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await goto(1)(pilot)
        await pilot.press("q")
        await pilot.pause()

    assert snap_compare(
        build_app(hardware_spec="8xA100-80GB", core=core), terminal_size=SIZE, run_before=run_before
    )

"""SVG snapshots of every step (and the dialogs) at a fixed size, drawn by the real core (planner, config writers,
linter) on fixed hardware: the real H200 report, the described 8xA100 node, described specs. They change when the
planner is recalibrated or the writers change: update with `pytest --snapshot-update`, then look at the new SVGs
(cairosvg to PNG) before committing them."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import SIZE
from fake_core import A100X8, H200
from helpers import click_visible, next_step, no_blink, settle, type_into
from textual.pilot import Pilot

from wizard.tui.factory import build_app

# The hardware step shows the spec as typed: a file name relative to the fixed directory below, so the
# snapshots do not depend on where the repository is checked out.
A100 = A100X8.name
H200_SPEC = H200.name
NVME_NODE = "8xA100-80GB,nvme=3.5TB,libaio=true"


@pytest.fixture(autouse=True)
def _fixed_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    # Review shows what the linter says about the files, which name their absolute paths (accelerate opens them
    # from the launch directory): the same empty directory on every run keeps the snapshots stable.
    fixed = Path(tempfile.gettempdir()) / "dswiz-snapshots"
    shutil.rmtree(fixed, ignore_errors=True)
    fixed.mkdir()
    for fixture in (H200, A100X8):
        shutil.copy(fixture, fixed / fixture.name)
    monkeypatch.chdir(fixed)


def goto(step: int, model: str = "llama-7b") -> Any:
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


def test_hardware_h200(snap_compare: Any, service: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec=H200_SPEC, service=service), terminal_size=SIZE, run_before=goto(0)
    )


def test_hardware_described(snap_compare: Any, service: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SIZE, run_before=goto(0)
    )


def test_hardware_no_gpu(snap_compare: Any, service: Any) -> None:
    assert snap_compare(build_app(service=service), terminal_size=SIZE, run_before=goto(0))


def test_model(snap_compare: Any, service: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SIZE, run_before=goto(1)
    )


def test_strategy(snap_compare: Any, service: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SIZE, run_before=goto(2)
    )


def test_strategy_h200(snap_compare: Any, service: Any) -> None:
    app = build_app(hardware_spec=H200_SPEC, service=service)
    assert snap_compare(app, terminal_size=SIZE, run_before=goto(2, model="mistral-7b"))


def test_strategy_max_batch(snap_compare: Any, service: Any) -> None:
    """The max-batch table opened with m."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await goto(2)(pilot)
        await pilot.press("m")
        await pilot.pause()

    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SIZE, run_before=run_before
    )


def test_strategy_nvme_directory(snap_compare: Any, service: Any) -> None:
    """Stage 3 with the optimizer on NVMe: the directory field, its default on the NVMe drive and its check."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await goto(2, model="llama-70b")(pilot)
        await click_visible(pilot, "#stage-3")
        await click_visible(pilot, "#opt-nvme")
        pilot.app.screen.query_one("#nvme").scroll_visible(animate=False)
        pilot.app.screen.query_one("#next").focus()
        no_blink(pilot)
        await pilot.pause()

    app = build_app(hardware_spec=NVME_NODE, service=service)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_precision_and_batch(snap_compare: Any, service: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SIZE, run_before=goto(3)
    )


def test_multi_node(snap_compare: Any, service: Any) -> None:
    app = build_app(hardware_spec="2x8xA100-80GB", service=service)
    assert snap_compare(app, terminal_size=SIZE, run_before=goto(4))


def test_review(snap_compare: Any, service: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SIZE, run_before=goto(5)
    )


def test_help_dialog(snap_compare: Any, service: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await goto(2)(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SIZE, run_before=run_before
    )


def test_quit_confirmation(snap_compare: Any, service: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await goto(1)(pilot)
        await pilot.press("q")
        await pilot.pause()

    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SIZE, run_before=run_before
    )


SMALL = (80, 24)  # the smallest terminal the wizard is laid out for: the whole stepper and table must show


def test_strategy_80x24(snap_compare: Any, service: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SMALL, run_before=goto(2)
    )


def test_strategy_no_fit_80x24(snap_compare: Any, service: Any) -> None:
    """Nothing fits (llama-13b on one T4): the planner's "what would fit" advice above the table."""
    assert snap_compare(
        build_app(hardware_spec="1xT4", service=service), terminal_size=SMALL, run_before=goto(2, "llama-13b")
    )


def test_review_80x24(snap_compare: Any, service: Any) -> None:
    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SMALL, run_before=goto(5)
    )


def test_help_dialog_80x24(snap_compare: Any, service: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await goto(2)(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(
        build_app(hardware_spec=A100, service=service), terminal_size=SMALL, run_before=run_before
    )

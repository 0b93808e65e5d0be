"""Driving the wizard from a test like a user would: keys and clicks through the Pilot."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input, TextArea


async def settle(pilot: Pilot[Any]) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def no_blink(pilot: Pilot[Any]) -> None:
    for screen in (pilot.app.screen,):
        for w in screen.query(Input):
            w.cursor_blink = False
        for t in screen.query(TextArea):
            t.cursor_blink = False


async def type_into(pilot: Pilot[Any], selector: str, text: str) -> None:
    widget = pilot.app.screen.query_one(selector, Input)
    widget.focus()
    widget.value = ""
    await pilot.press(*text)
    await pilot.pause()


async def next_step(pilot: Pilot[Any]) -> None:
    # The keyboard path (ctrl+n works from any field); a Button ignores a second click within its 0.2 s
    # press animation, which a test would otherwise hit.
    await pilot.press("ctrl+n")
    await settle(pilot)


async def to_strategy_step(pilot: Pilot[Any], model: str) -> None:
    """From the first step to the Strategy step, planning ``model``: where most walks through the wizard begin."""
    await settle(pilot)
    await next_step(pilot)
    await type_into(pilot, "#model", model)
    await next_step(pilot)


async def to_nodes_step(pilot: Pilot[Any], model: str) -> None:
    """From the first step to the Multi-node step (the hostfile), planning ``model``."""
    await to_strategy_step(pilot, model)
    for _ in range(2):  # strategy -> precision -> multi-node
        await next_step(pilot)


def status(pilot: Pilot[Any]) -> str:
    return str(pilot.app.screen.query_one("#status").render())


async def click_visible(pilot: Pilot[Any], selector: str) -> None:
    """Scroll the widget into view first, as a user would, then click it."""
    pilot.app.screen.query_one(selector).scroll_visible(animate=False)
    await pilot.pause()
    await pilot.click(selector)
    await pilot.pause()

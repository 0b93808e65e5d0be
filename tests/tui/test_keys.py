"""The wizard as quick as a form: keys counted from the command line to the files written, and the files compared
with what `dswiz config --yes` writes for the same choices (the same service, so they must be equal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import SIZE
from helpers import settle

from wizard.cli import cli
from wizard.tui.factory import build_app
from wizard.tui.screens.model import ModelStep
from wizard.tui.screens.strategy import StrategyStep

pytestmark = pytest.mark.anyio


class Keys:
    """Presses keys one at a time, waiting for the app after each, and counts them."""

    def __init__(self, pilot: Any) -> None:
        self.pilot = pilot
        self.count = 0

    async def __call__(self, *keys: str) -> None:
        for key in keys:
            await self.pilot.press(key)
            await settle(self.pilot)
            self.count += 1


# accelerate's DeepSpeed guide, "custom config", as `dswiz config --yes` flags
GUIDE_FLAGS = (
    *("--hardware", "2xRTX3090", "--stage", "3", "--offload-optimizer", "cpu", "--offload-param", "cpu"),
    *("--precision", "fp16", "--save-16bit", "--for", "accelerate"),
)


def config_yes(out: Path, *args: str) -> dict[str, str]:
    """`dswiz config --yes ARGS --out OUT`, in process; the files it wrote, by name."""
    rc = cli.main(
        args=["config", "--yes", *args, "--out", str(out)], prog_name="dswiz", standalone_mode=False
    )
    assert rc == 0
    return files_in(out)


def files_in(folder: Path) -> dict[str, str]:
    # The accelerate YAML names the JSON by its absolute path: compare with the folder's own path taken out.
    return {
        p.name: p.read_text(encoding="utf-8").replace(str(folder.resolve()), "OUT")
        for p in sorted(folder.iterdir())
    }


async def test_recommended_config_is_written_in_five_keys(service: Any, tmp_path: Path) -> None:
    app = build_app(hardware_spec="8xA100-80GB", model_text="llama-7b", service=service, skip_answered=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, StrategyStep)  # opened on Strategy, the recommendation under the cursor
        assert app.choices.strategy == app.plan.best.strategy
        keys = Keys(pilot)
        await keys("enter", "enter", "enter", "enter")  # choose the row, precision, multi-node, write
        assert app.choices.written
        await keys("enter")  # Done
    assert keys.count <= 5
    assert app.return_value
    assert files_in(tmp_path / "dswiz-config") == config_yes(
        tmp_path / "cli", "--model", "llama-7b", "--hardware", "8xA100-80GB"
    )


async def test_accelerate_guide_config_in_twelve_keys(service: Any, tmp_path: Path) -> None:
    """accelerate's DeepSpeed guide, "custom config": ZeRO-3, optimizer and parameters offloaded to the CPU, fp16,
    the 16-bit weights gathered on save, 2 GPUs, for accelerate (no model: nothing to predict)."""
    app = build_app(hardware_spec="2xRTX3090", service=service, skip_answered=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, ModelStep)  # the hardware was given: open on Model
        keys = Keys(pilot)
        await keys("enter")  # no model
        await keys("3", "c", "c", "enter")  # stage 3, optimizer cpu, params cpu, go on
        await keys("f", "enter")  # fp16 (the 16-bit save is on at stage 3), go on
        await keys("enter")  # one node
        await keys("tab", "a", "enter")  # for accelerate, write
        assert app.choices.written, str(app.screen.query_one("#status").render())
    assert keys.count <= 12
    s = app.choices.strategy
    assert (s.zero_stage, s.offload_optimizer, s.offload_param, s.precision, s.world_size) == (
        3,
        "cpu",
        "cpu",
        "fp16",
        2,
    )
    assert files_in(tmp_path / "dswiz-config") == config_yes(tmp_path / "cli", *GUIDE_FLAGS)


class CountingPrompter:
    """The line prompts answered by a script, counting the keys a person would press in questionary: a select
    is the moves between offered options from the default plus Enter; a text is Enter when the default is kept,
    else deleting the default, typing the answer and Enter; a confirm is one key."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.keys = 0
        self.prompts = 0

    def text(self, key: str, message: str, default: str = "") -> str:
        answer = str(self.answers.get(key, default))
        self.prompts += 1
        self.keys += 1 if answer == default else len(default) + len(answer) + 1
        return answer

    def select(self, key: str, message: str, options: Any, default: Any = None) -> Any:
        offered = [value for _, value, why in options if why is None]
        answer = self.answers.get(key, default if default in offered else offered[0])
        start = offered.index(default) if default in offered else 0
        self.prompts += 1
        self.keys += abs(offered.index(answer) - start) + 1
        return answer

    def confirm(self, key: str, message: str, default: bool = True) -> bool:
        self.prompts += 1
        self.keys += 1
        return bool(self.answers.get(key, default))


def test_accelerate_guide_config_in_plain_prompts(service: Any, tmp_path: Path) -> None:
    from wizard.prompts import run_prompts

    p = CountingPrompter(
        {
            "model-preset": None,  # none: the strategy by hand
            "stage": 3,
            "offload-optimizer": "cpu",
            "offload-param": "cpu",
            "precision": "fp16",
            "consumer": "accelerate",
        }
    )
    assert run_prompts(prompter=p, hardware_spec="2xRTX3090", service=service, say=lambda _: None) == 0
    print(f"plain: {p.prompts} prompts, {p.keys} keys")
    assert p.keys <= 20
    assert files_in(tmp_path / "dswiz-config") == config_yes(tmp_path / "cli", *GUIDE_FLAGS)


def test_recommended_config_in_plain_prompts(service: Any, tmp_path: Path) -> None:
    from wizard.prompts import run_prompts

    p = CountingPrompter({})
    rc = run_prompts(
        prompter=p, hardware_spec="8xA100-80GB", model_text="llama-7b", service=service, say=lambda _: None
    )
    assert rc == 0
    print(f"plain recommended: {p.prompts} prompts, {p.keys} keys")
    assert files_in(tmp_path / "dswiz-config") == config_yes(
        tmp_path / "cli", "--model", "llama-7b", "--hardware", "8xA100-80GB"
    )

"""Walk the wizard end to end like a user (Pilot: keys and clicks) and check the files it writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import SIZE
from fake_core import A100X8, H200
from helpers import click_visible, next_step, settle, status, to_nodes_step, to_strategy_step, type_into
from rich.console import Console
from textual.widgets import DataTable, Input, RadioButton

from wizard.tui.factory import build_app
from wizard.tui.screens.dialogs import ConfirmScreen
from wizard.tui.screens.hardware import HardwareStep
from wizard.tui.screens.precision import PrecisionStep
from wizard.tui.screens.review import ReviewStep, unified_diff

pytestmark = pytest.mark.anyio


async def walk_to_review(pilot: Any, model: str = "gpt2-medium") -> None:
    await settle(pilot)
    await next_step(pilot)  # hardware -> model
    await type_into(pilot, "#model", model)
    for _ in range(4):  # model -> strategy -> precision -> multi-node -> review
        await next_step(pilot)
    assert isinstance(pilot.app.screen, ReviewStep), status(pilot)


async def write(pilot: Any) -> None:
    await pilot.click("#write")
    await settle(pilot)


@pytest.mark.parametrize(("spec", "world"), [("1xA100-80GB", 1), ("8xA100-80GB", 8)])
async def test_single_node_path_writes_a_consistent_config(
    service: Any, tmp_path: Path, spec: str, world: int
) -> None:
    app = build_app(hardware_spec=spec, service=service)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_review(pilot)
        await write(pilot)
        written = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())
        s = app.choices.strategy
        assert written["train_batch_size"] == s.micro_batch_size * s.gradient_accumulation_steps * world
        assert "dswiz launch --config dswiz-config train.py" in str(app.screen.query_one("#written").render())
        await pilot.click("#next")  # Done
    assert Path("dswiz-config/ds_config.json") in app.return_value


async def test_going_back_keeps_what_was_typed_on_the_precision_step(service: Any) -> None:
    """Back, then Next without touching anything: the micro-batch, accumulation and clipping typed are still
    there (they were thrown away: only Next stored them), also one the planner predicts not to fit."""
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_strategy_step(pilot, "llama-7b")
        await next_step(pilot)
        assert isinstance(app.screen, PrecisionStep)
        await type_into(pilot, "#micro", "3")
        await type_into(pilot, "#gas", "5")
        await type_into(pilot, "#clip", "0.5")
        await pilot.press("ctrl+p")  # back to the Strategy step, and on again untouched
        await settle(pilot)
        await next_step(pilot)
        assert isinstance(app.screen, PrecisionStep)
        shown = [app.screen.query_one(f"#{k}", Input).value for k in ("micro", "gas", "clip")]
        assert shown == ["3", "5", "0.5"]
        assert app.choices.gradient_clipping == 0.5
        await type_into(pilot, "#gas", "6")
        await type_into(
            pilot, "#micro", ""
        )  # what does not parse keeps the last good value; the rest is kept
        await pilot.press("ctrl+p")
        await settle(pilot)
        kept = app.choices.strategy
        assert (kept.micro_batch_size, kept.gradient_accumulation_steps) == (3, 6)


async def test_choosing_a_row_and_editing_batch_reach_the_file(service: Any, tmp_path: Path) -> None:
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_strategy_step(pilot, "llama-7b")
        target = app.plan.candidates[2].strategy
        table = app.screen.query_one("#candidates", DataTable)
        table.focus()
        await pilot.press("down", "down", "enter")  # choose the third candidate: Enter also moves on
        await settle(pilot)
        assert app.choices.strategy == target
        assert isinstance(app.screen, PrecisionStep)
        await type_into(pilot, "#micro", "3")
        await type_into(pilot, "#gas", "5")
        assert "global batch 120 = micro-batch 3 × accumulation 5 × world 8" in str(
            app.screen.query_one("#batch").render()
        )
        await next_step(pilot)
        await next_step(pilot)
        await write(pilot)
    written = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())
    assert written["zero_optimization"]["stage"] == target.zero_stage
    assert (written["train_micro_batch_size_per_gpu"], written["gradient_accumulation_steps"]) == (3, 5)
    assert written["train_batch_size"] == 120


async def test_manual_stage_updates_bars_and_disables_invalid_offload(service: Any) -> None:
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_strategy_step(pilot, "llama-7b")
        screen = app.screen

        def bars_show_current() -> bool:
            current = screen.current
            return screen.query_one("#bar-gpu").used == (
                current.predicted.gpu_needed_bytes if current else None
            )

        await click_visible(pilot, "#stage-2")
        assert app.choices.strategy.zero_stage == 2 and bars_show_current()
        # the chosen option's mark differs by shape, not colour alone (NO_COLOR, a copy of the screen's text)
        marks = {v: str(screen.query_one(f"#stage-{v}").render())[1] for v in (1, 2, 3)}
        assert marks == {1: "○", 2: "●", 3: "○"}
        assert screen.query_one("#param-cpu", RadioButton).disabled  # below stage 3: no parameter offload
        not_offered = str(screen.query_one("#not-offered").render())
        assert "parameter offload only works at ZeRO stage 3" in not_offered
        await click_visible(pilot, "#stage-3")
        assert app.choices.strategy.zero_stage == 3 and bars_show_current()
        assert not screen.query_one("#param-cpu", RadioButton).disabled
        await click_visible(pilot, "#param-cpu")
        assert app.choices.strategy.offload_param == "cpu"
        await click_visible(pilot, "#stage-2")  # parameter offload cannot stay below stage 3: it is dropped
        assert (app.choices.strategy.zero_stage, app.choices.strategy.offload_param) == (2, "none")


async def test_a_stage_that_drops_the_offload_leaves_one_option_chosen_per_group(service: Any) -> None:
    """From a recommendation with both offloads, stage 0 drops them: each offload group shows "none" alone chosen
    (the dropped option was left marked too), and choosing an offload again at stage 3 switches "none" off."""
    app = build_app(hardware_spec="1xRTX4090", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_strategy_step(pilot, "params=13e9")
        screen = app.screen
        s = app.choices.strategy
        assert (s.offload_optimizer, s.offload_param) == ("cpu", "cpu")

        def chosen(group: str) -> list[str]:
            return [
                v for v in ("none", "cpu", "nvme") if screen.query_one(f"#{group}-{v}", RadioButton).value
            ]

        await click_visible(pilot, "#stage-0")
        assert app.choices.strategy.zero_stage == 0
        assert chosen("opt") == ["none"] and chosen("param") == ["none"]
        await click_visible(pilot, "#stage-3")
        await click_visible(pilot, "#opt-cpu")
        assert app.choices.strategy.offload_optimizer == "cpu" and chosen("opt") == ["cpu"]


async def test_back_to_one_node_the_placeholder_hostfile_goes_and_a_typed_one_stays(service: Any) -> None:
    """The hostfile lines the step fills in for a node count are its own: back at one node they go (they stayed,
    greyed, beside "Single node: no hostfile is written"); lines the user typed stay for the next multi-node try."""
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_nodes_step(pilot, "llama-7b")
        hostfile = app.screen.query_one("#hostfile")
        await type_into(pilot, "#nodes", "16")  # "1", then "16": a placeholder per count
        assert len([ln for ln in hostfile.text.splitlines() if "slots=8" in ln]) == 16
        await type_into(pilot, "#nodes", "1")
        assert hostfile.text == "" and hostfile.disabled
        await type_into(pilot, "#nodes", "2")
        hostfile.text = "gpu-a slots=8\ngpu-b slots=8\n"
        await pilot.pause()
        await type_into(pilot, "#nodes", "1")
        assert hostfile.text == "gpu-a slots=8\ngpu-b slots=8\n"


async def test_multi_node_path_writes_the_hostfile(service: Any, tmp_path: Path) -> None:
    app = build_app(hardware_spec="2x8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_nodes_step(pilot, "llama-7b")
        hostfile = app.screen.query_one("#hostfile")
        hostfile.text = "gpu-a slots=8\n"  # one host for two nodes: refused
        await pilot.pause()
        assert "names 1 host for 2 nodes" in str(app.screen.query_one("#hostfile-findings").render())
        await next_step(pilot)
        assert app.step == 4
        said = status(pilot)
        assert "1 host for 2 nodes" in said and "write 2 lines, one per node" in said
        assert "--" not in said  # no command-line flag inside the wizard
        hostfile.text = "gpu-a slots=8\ngpu-b slots=4\n"  # not what the plan has per node: refused
        await pilot.pause()
        await next_step(pilot)
        assert app.step == 4 and "gpu-b slots=4" in status(pilot)
        await pilot.press("ctrl+p")  # Back keeps the hostfile as typed, refused or not
        await settle(pilot)
        await next_step(pilot)
        hostfile = app.screen.query_one("#hostfile")
        assert app.step == 4 and hostfile.text == "gpu-a slots=8\ngpu-b slots=4\n"
        hostfile.text = "gpu-a slots=8\ngpu-b slots=8\n"
        await pilot.pause()
        await next_step(pilot)
        assert app.step == 5, status(pilot)
        await write(pilot)
    hostfile_lines = (tmp_path / "dswiz-config" / "hostfile").read_text().splitlines()
    assert [ln for ln in hostfile_lines if ln and not ln.startswith("#")] == [
        "gpu-a slots=8",
        "gpu-b slots=8",
    ]
    assert (
        json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())["train_batch_size"] % 16 == 0
    )


async def test_no_gpu_says_so_and_plans_for_described_hardware(service: Any) -> None:
    app = build_app(service=service)  # this machine: the fake detection finds no GPU
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        banner = str(app.screen.query_one("#hw-nogpu").render())
        assert "No GPU on this machine (NVML: driver library not found)" in banner
        await next_step(pilot)
        assert isinstance(app.screen, HardwareStep)
        assert "no GPU to plan for" in status(pilot)
        await type_into(pilot, "#hw-spec", "8xA100-80GB")
        await pilot.press("enter")  # reads the spec, then moves on
        await settle(pilot)
        assert app.choices.hardware.gpus_per_node == 8
        assert app.step == 1


async def test_a_spec_that_does_not_read_leaves_the_hardware_in_use_on_screen(service: Any) -> None:
    """An ambiguous spec: the problem and its fix below, the hardware still in use above ("Reading 8xA100…"
    stayed there)."""
    app = build_app(hardware_spec="1xH200", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await type_into(pilot, "#hw-spec", "8xA100")
        await pilot.press("enter")
        await settle(pilot)
        source = str(app.screen.query_one("#hw-source").render())
        assert "Reading" not in source and "H200" in source
        assert "'A100' is ambiguous" in status(pilot) and app.choices.hardware.gpus_per_node == 1


async def test_import_existing_file_shows_diff_and_keeps_backup(service: Any, tmp_path: Path) -> None:
    existing = tmp_path / "run1" / "ds_config.json"
    existing.parent.mkdir()
    original = (
        json.dumps(
            # 16 cannot be kept on 8 GPUs at micro-batch 3 (16 = 3 x ? x 8): the Review shows the change.
            {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 3}}
        )
        + "\n"
    )
    existing.write_text(original)
    app = build_app(hardware_spec="8xA100-80GB", from_file=existing, service=service)
    assert app.choices.strategy.zero_stage == 3  # imported before the first frame
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_review(pilot)
        assert app.choices.strategy.zero_stage == 3  # the planner did not override the imported choice
        assert "changes the file on disk" in str(app.screen.query_one(".file-title").render())
        assert app.screen.query(".diff")
        await write(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.click("#yes")
        await settle(pilot)
    backups = list(existing.parent.glob("ds_config.json.bak-*"))
    assert len(backups) == 1 and backups[0].read_text() == original
    assert json.loads(existing.read_text())["zero_optimization"]["stage"] == 3


async def test_quit_asks_before_discarding_choices(service: Any) -> None:
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        app.screen.query_one("#next").focus()
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # stay
        await pilot.pause()
        assert app.step == 1 and app.is_running
        await pilot.press("ctrl+p")  # Back to the first step: what was chosen past it is still there to lose
        await settle(pilot)
        assert app.step == 0
        app.screen.query_one("#next").focus()
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await pilot.pause()
    assert app.return_value == []


@pytest.mark.parametrize("answer", ["y", "ctrl+c"])
async def test_ctrl_c_quits_from_a_text_field_asking_first(service: Any, answer: str) -> None:
    """Ctrl+C did nothing (Textual binds it to a hint, and to copy inside a field): users expect it to leave. It asks
    first when there are choices to lose; "y", or a second Ctrl+C (which once stacked a second dialog), leaves."""
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "llama-7b")
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press(answer)
        await pilot.pause()
    assert not app.is_running and app.return_value == []


async def test_back_keeps_answers_and_help_opens(service: Any) -> None:
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_strategy_step(pilot, "llama-7b")
        await pilot.click("#back")
        await pilot.pause()
        assert app.step == 1
        assert app.screen.query_one("#model").value == "llama-7b"
        app.screen.query_one("#next").focus()
        await pilot.press("question_mark")
        await pilot.pause()
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        await pilot.pause()
        assert app.step == 1


async def test_going_back_from_the_model_step_keeps_what_was_typed(service: Any) -> None:
    """Back from the Model step and on again: the model, sequence length and global batch typed (not yet loaded)
    are still there; Next then loads and plans them."""
    app = build_app(hardware_spec="8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)  # hardware -> model
        await type_into(pilot, "#model", "gpt2-xl")
        await type_into(pilot, "#seq-len", "512")
        await type_into(pilot, "#global-batch", "64")
        await pilot.press("ctrl+p")  # Back to the Hardware step, then on again untouched
        await settle(pilot)
        assert app.step == 0 and app.choices.model_text == ""  # nothing loaded or stored
        await next_step(pilot)
        shown = [app.screen.query_one(f"#{k}", Input).value for k in ("model", "seq-len", "global-batch")]
        assert shown == ["gpt2-xl", "512", "64"]
        await next_step(pilot)  # Next loads and plans what is shown
        assert app.choices.model_text == "gpt2-xl" and app.choices.seq_len == 512
        assert app.plan is not None and app.choices.global_batch == 64


async def test_strategy_screen_max_batch_table_and_machine_limits(service: Any) -> None:
    """The real planner behind the screen: m opens the max-batch table (stage 0 = DDP next to ZeRO-1/2/3), and
    NVMe offload is disabled with the planner's own reason (hardware_problems: no NVMe disk described)."""
    from wizard.tui.widgets.max_batch_view import MaxBatchView, max_batch_renderable

    app = build_app(hardware_spec="2xA100-80GB,ram=256GiB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_strategy_step(pilot, "gpt2-xl")
        screen = app.screen
        box = screen.query_one("#max-batch-box")
        assert box.collapsed
        await pilot.press("m")
        assert not box.collapsed
        lines = service.max_batch_table(app.choices, app.model)
        assert {line.strategy.zero_stage for line in lines} == {0, 1, 2, 3}
        shown = screen.query_one("#max-batch", MaxBatchView)
        assert shown.lines == lines
        console = Console(width=120, record=True)
        console.print(max_batch_renderable(shown.lines))
        text = console.export_text()
        assert "0 (DDP)" in text and "opt cpu" in text
        z2 = next(x for x in lines if x.strategy.zero_stage == 2 and x.strategy.offload_optimizer == "none")
        assert f"{z2.tokens_per_sec:,.0f}" in text
        await click_visible(pilot, "#stage-3")
        assert screen.query_one("#opt-nvme", RadioButton).disabled
        assert "no NVMe disk found" in str(screen.query_one("#not-offered").render())


@pytest.mark.parametrize(
    ("launcher", "in_launch_sh"),
    [
        ("openmpi", "--launcher openmpi"),
        ("nossh", "--no_ssh --node_rank"),
        ("standard", "torch.distributed.run"),
    ],
)
async def test_the_chosen_launcher_reaches_the_files(
    service: Any, tmp_path: Path, launcher: str, in_launch_sh: str
) -> None:
    app = build_app(hardware_spec="2x8xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "llama-7b")
        for _ in range(3):
            await next_step(pilot)
        assert not app.screen.query_one("#launcher").disabled  # two nodes: the launcher matters
        await click_visible(pilot, f"#launcher-{launcher}")
        note = str(app.screen.query_one("#launcher-note").render())
        assert note.startswith(service.LAUNCHER_NOTES[launcher][:20])
        app.screen.query_one("#hostfile").text = "gpu-a slots=8\ngpu-b slots=8\n"
        await pilot.pause()
        await next_step(pilot)
        assert app.step == 5, status(pilot)
        await write(pilot)
        next_command = str(app.screen.query_one("#written").render())
        assert ("--node-rank K" in next_command) == (launcher in ("nossh", "standard"))
    out = tmp_path / "dswiz-config"
    accelerate = yaml.safe_load((out / "accelerate.yaml").read_text())
    assert accelerate["deepspeed_config"]["deepspeed_multinode_launcher"] == launcher
    assert in_launch_sh in (out / "launch.sh").read_text()


async def test_one_node_has_no_launcher_to_choose(service: Any) -> None:
    app = build_app(hardware_spec=str(A100X8), service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "llama-7b")
        for _ in range(3):
            await next_step(pilot)
        assert app.screen.query_one("#launcher").disabled
        assert "started locally" in str(app.screen.query_one("#launcher-note").render())


async def test_nvme_offload_asks_where_and_checks_it(service: Any, tmp_path: Path) -> None:
    app = build_app(hardware_spec="8xA100-80GB,nvme=3.5TB,libaio=true,ram=4TiB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_strategy_step(pilot, "llama-70b")
        screen = app.screen
        await click_visible(pilot, "#stage-3")
        await click_visible(pilot, "#opt-cpu")
        await click_visible(pilot, "#param-none")
        s = app.choices.strategy
        assert (s.zero_stage, s.offload_optimizer, s.offload_param) == (3, "cpu", "none"), s
        assert not screen.query_one("#nvme").display  # nothing on NVMe: no directory asked
        await click_visible(pilot, "#opt-nvme")
        assert app.choices.strategy.offload_optimizer == "nvme"
        field = screen.query_one("#nvme-path")
        assert screen.query_one("#nvme").display
        assert field.value == "/local_nvme/dswiz-offload"  # on the described NVMe drive
        assert "The directory is fine." in str(screen.query_one("#nvme-check").render())
        await type_into(pilot, "#nvme-path", "offload")
        assert "is relative" in str(screen.query_one("#nvme-check").render())
        await next_step(pilot)
        assert app.step == 2 and "NVMe directory: nvme_path offload is relative" in status(pilot)
        await type_into(pilot, "#nvme-path", "/local_nvme/run7")
        await next_step(pilot)
        assert app.step == 3, status(pilot)
        await next_step(pilot)
        await next_step(pilot)
        await write(pilot)
    zero = json.loads((tmp_path / "dswiz-config" / "ds_config.json").read_text())["zero_optimization"]
    assert zero["offload_optimizer"]["device"] == "nvme"
    assert zero["offload_optimizer"]["nvme_path"] == "/local_nvme/run7"


async def test_nvme_is_not_offered_on_the_real_h200(service: Any) -> None:
    """The H200's own report: no NVMe drive, no libaio -- NVMe offload is disabled with the planner's reason."""
    app = build_app(hardware_spec=str(H200), service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_strategy_step(pilot, "mistral-7b")
        await click_visible(pilot, "#stage-3")
        assert app.screen.query_one("#opt-nvme", RadioButton).disabled
        assert "no NVMe disk found" in str(app.screen.query_one("#not-offered").render())
        assert not app.screen.query_one("#nvme").display


FOREIGN = """{
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
    "train_batch_size": 64,
    "zero_optimization": {
        "stage": 3,
        "stage3_max_live_parameters": 1000000000,
        "team_note": "tuned for the 8xA100 box"
    },
    "bf16": {
        "enabled": true
    },
    "comms_logger": {
        "enabled": true,
        "verbose": false
    },
    "flops_profiler": {
        "enabled": false,
        "profile_step": 5
    }
}
"""


async def test_import_keeps_unknown_sections_and_changes_only_what_the_user_changed(
    service: Any, tmp_path: Path
) -> None:
    existing = tmp_path / "run1" / "ds_config.json"
    existing.parent.mkdir()
    existing.write_text(FOREIGN)
    app = build_app(hardware_spec=str(A100X8), from_file=existing, service=service)
    async with app.run_test(size=SIZE) as pilot:
        await walk_to_review(pilot)
        title = str(app.screen.query_one(".file-title").render())
        assert "ds_config.json" in title and "unchanged" in title  # nothing changed yet: the file as it was
        assert app.screen.files["ds_config.json"] == FOREIGN
        for _ in range(2):
            await pilot.press("ctrl+p")
            await settle(pilot)
        assert app.step == 3
        await type_into(pilot, "#micro", "3")  # the one change
        await next_step(pilot)
        await next_step(pilot)
        diff = unified_diff("ds_config.json", FOREIGN, app.screen.files["ds_config.json"])
        changed = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        assert changed == [
            '-    "train_micro_batch_size_per_gpu": 2,',
            '+    "train_micro_batch_size_per_gpu": 3,',
            '-    "train_batch_size": 64,',
            '+    "train_batch_size": 96,',
        ]
        await write(pilot)
        # "team_note" inside zero_optimization is an error (DeepSpeed's sections forbid unknown keys): asked first
        assert isinstance(app.screen, ConfirmScreen) and "1 error" in app.screen.question
        await pilot.click("#yes")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and "Overwrite?" in app.screen.question
        await pilot.click("#yes")
        await settle(pilot)
    written = json.loads(existing.read_text())
    assert written["comms_logger"] == {"enabled": True, "verbose": False}
    assert written["flops_profiler"] == {"enabled": False, "profile_step": 5}
    assert written["zero_optimization"]["team_note"] == "tuned for the 8xA100 box"
    assert written["train_batch_size"] == 3 * 4 * 8


async def test_a_batch_predicted_not_to_fit_is_said_once_and_can_be_kept(
    service: Any, tmp_path: Path
) -> None:
    """The Strategy step says it once and lets the user go on; the Review lists it as an error (as `dswiz config`
    refuses it and `dswiz check --model` reports it) and asks before it writes."""
    app = build_app(hardware_spec=str(H200), service=service)
    async with app.run_test(size=SIZE) as pilot:
        await to_strategy_step(pilot, "mistral-7b")
        await next_step(pilot)
        await type_into(pilot, "#micro", "200")
        await next_step(pilot)
        assert app.step == 3
        said = status(pilot)
        assert (
            said.startswith("predicted not to fit (GPU ")
            and "of 140.4 GiB, 133.4 GiB with 5 % kept free" in said
        )
        assert (
            "— lower the micro-batch; Next again" in said
        )  # checkpointing is on, accumulation 1: nothing else
        await next_step(pilot)  # the user insists
        assert app.step == 4 and app.choices.strategy.micro_batch_size == 200
        await next_step(pilot)
        assert isinstance(app.screen, ReviewStep)
        findings = str(app.screen.query_one("#findings").render())
        assert "at micro-batch 200: does not fit" in findings and app.screen.error_count >= 1
        await type_into(pilot, "#out-dir", str(tmp_path / "out"))
        await write(pilot)
        assert isinstance(app.screen, ConfirmScreen) and "error" in app.screen.question
        await pilot.click("#no")
        await settle(pilot)
        assert not (tmp_path / "out").exists()


async def test_more_nodes_fill_the_hostfile_with_placeholders_to_edit(service: Any) -> None:
    app = build_app(hardware_spec=str(H200), service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await next_step(pilot)
        await type_into(pilot, "#model", "gpt2-medium")
        for _ in range(3):
            await next_step(pilot)
        hostfile = app.screen.query_one("#hostfile")
        assert hostfile.disabled and hostfile.text == ""
        await type_into(pilot, "#nodes", "2")
        assert not hostfile.disabled
        assert hostfile.text == "worker-0 slots=1\nworker-1 slots=1\n"
        assert "Hostfile is valid." in str(app.screen.query_one("#hostfile-findings").render())
        await type_into(pilot, "#nodes", "3")  # still the placeholder: it follows
        assert hostfile.text.count("slots=1") == 3


async def test_the_memory_per_gpu_and_the_share_kept_free_reach_the_plan_and_the_files(
    service: Any, tmp_path: Path
) -> None:
    """The Hardware step's two fields are `dswiz config --gpu-memory / --margin`: refused as the flags are, planned
    for once given (a change re-plans), and kept in dswiz-plan.json for every re-plan of the folder."""
    app = build_app(hardware_spec="1xA100-80GB", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for typed, said in (
            ("24", "24 has no unit, so it is 24 bytes"),
            ("200GiB", "memory per GPU 200.0 GiB is more than the NVIDIA A100-SXM4-80GB holds"),
        ):
            await type_into(pilot, "#hw-gpu-memory", typed)
            await next_step(pilot)
            assert isinstance(app.screen, HardwareStep) and said in status(pilot)
        await type_into(pilot, "#hw-gpu-memory", "24GiB")
        await type_into(pilot, "#hw-margin", "60")
        await next_step(pilot)
        assert "kept free must be a percent from 0 to 50, not '60'" in status(pilot)
        await type_into(pilot, "#hw-margin", "8")
        await next_step(pilot)
        await type_into(pilot, "#model", "llama-7b")
        await next_step(pilot)  # the Strategy step: planned for 24 GiB with 8 % kept free
        chosen = app.service.chosen_candidate(app.choices, app.model, app.plan)
        assert chosen.fits and chosen.predicted.gpu_needed_bytes <= 0.92 * 24 * 2**30
        bar = app.screen.query_one("#bar-gpu")
        assert bar.capacity == 24 * 2**30 and bar.budget == int(
            24 * 2**30 * (1 - 0.08)
        )  # judged as the planner does
        planned_24 = chosen.strategy
        await pilot.press("ctrl+p", "ctrl+p")  # back to the Hardware step: the whole card again
        await type_into(pilot, "#hw-gpu-memory", "")
        await next_step(pilot)
        await next_step(pilot)
        assert app.choices.gpu_memory_bytes is None and app.choices.strategy != planned_24  # planned again
        await pilot.press("ctrl+p", "ctrl+p")
        await type_into(pilot, "#hw-gpu-memory", "24GiB")
        for _ in range(5):  # hardware -> ... -> review
            await next_step(pilot)
        await write(pilot)
    sidecar = json.loads((tmp_path / "dswiz-config" / "dswiz-plan.json").read_text())
    assert (
        sidecar["request"]["gpu_memory_bytes"] == 24 * 2**30 and sidecar["request"]["safety_margin"] == 0.08
    )


async def test_the_command_lines_memory_per_gpu_fills_the_hardware_step(service: Any) -> None:
    app = build_app(
        hardware_spec="1xA100-80GB",
        service=service,
        prefill={"gpu_memory_bytes": 40 * 2**30, "safety_margin": 0.1},
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.screen.query_one("#hw-gpu-memory").value == "40.0 GiB"
        assert app.screen.query_one("#hw-margin").value == "10"
        await next_step(pilot)
        assert app.choices.gpu_memory_bytes == 40 * 2**30 and app.choices.safety_margin == 0.1


async def test_a_memory_per_gpu_above_the_card_from_the_command_line_stays_on_the_hardware_step(
    service: Any,
) -> None:
    """`dswiz --hardware 1xA100-80GB --model gpt2-medium --gpu-memory 200GiB` once crashed the wizard on opening."""
    app = build_app(
        hardware_spec="1xA100-80GB",
        model_text="gpt2-medium",
        skip_answered=True,
        service=service,
        prefill={"gpu_memory_bytes": 200 * 2**30},
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.step == 0 and isinstance(app.screen, HardwareStep)
        assert "memory per GPU 200.0 GiB is more than the NVIDIA A100-SXM4-80GB holds" in status(pilot)
        assert "describe the card you mean in the Plan for field" in status(pilot)
        await type_into(pilot, "#hw-gpu-memory", "24GiB")
        await next_step(pilot)
        assert app.step == 1 and app.choices.gpu_memory_bytes == 24 * 2**30


async def test_an_untouched_memory_field_keeps_the_exact_value_it_shows_rounded(service: Any) -> None:
    """24 GB (decimal) shows as 22.4 GiB; Next on the untouched field keeps 24e9 bytes, not 22.4 GiB read back."""
    app = build_app(
        hardware_spec="1xA100-80GB",
        service=service,
        prefill={"gpu_memory_bytes": 24 * 10**9, "safety_margin": 0.0725},
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert app.screen.query_one("#hw-gpu-memory").value == "22.4 GiB"
        await next_step(pilot)
        assert app.step == 1
        assert (app.choices.gpu_memory_bytes, app.choices.safety_margin) == (24 * 10**9, 0.0725)


async def test_editing_a_folder_planned_for_part_of_each_card_plans_for_the_same(
    service: Any, tmp_path: Path
) -> None:
    """`dswiz --from DIR/ds_config.json` of a folder `dswiz config --gpu-memory 24GiB --margin 8` wrote: the wizard
    plans for the same model and hardware, 24 GiB with 8 % kept free, again."""
    from click.testing import CliRunner

    from wizard.cli import cli

    folder = tmp_path / "run1"
    result = CliRunner().invoke(
        cli,
        [
            *("config", "--yes", "--model", "gpt2-medium", "--hardware", "1xA100-80GB"),
            *("--gpu-memory", "24GiB", "--margin", "8", "--out", str(folder)),
        ],
    )
    assert result.exit_code == 0, result.output
    app = build_app(from_file=folder / "ds_config.json", service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # the model and the described hardware it was planned for come back too
        assert (app.choices.model_text, app.choices.hardware_spec) == ("gpt2-medium", "1xA100-80GB")
        assert app.choices.hardware is not None and app.choices.hardware.gpus_per_node == 1
        assert app.screen.query_one("#hw-gpu-memory").value == "24.0 GiB"
        assert app.screen.query_one("#hw-margin").value == "8"
        assert (app.choices.gpu_memory_bytes, app.choices.safety_margin) == (24 * 2**30, 0.08)

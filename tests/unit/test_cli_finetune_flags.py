"""--finetune/--lora-* are planning flags: `dswiz plan` and `dswiz config` take them from the shared
``planning_options``, `config --yes` writes what they ask, and without --yes they are the line prompts' defaults."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from wizard.cli import cli
from wizard.cli_options import planning_options
from wizard.commands import config as config_cmd
from wizard.commands.config import config
from wizard.commands.plan import plan
from wizard.errors import DswizError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tui"))
from test_prompts import ScriptedPrompter  # noqa: E402  (the wizard's own scripted prompter)

FINETUNE_FLAGS = {"finetune", "lora_rank", "lora_alpha", "lora_targets"}


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_the_finetune_flags_are_shared_planning_flags() -> None:
    @planning_options(model_required=False)
    def probe(**_: object) -> None: ...

    shared = {p.name: p for p in probe.__click_params__}  # type: ignore[attr-defined]
    assert set(shared) >= FINETUNE_FLAGS
    for command in (plan, config):
        params = {p.name: p for p in command.params}
        for name in FINETUNE_FLAGS:  # the same flag, the same choices and default, on both commands
            assert params[name].opts == shared[name].opts and params[name].default == shared[name].default


def test_config_yes_writes_the_lora_it_is_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = invoke(
        "config", "--yes", "-m", "gpt2-medium", "--hardware", "1xA100-80GB",
        "--finetune", "lora", "--lora-rank", "16", "--lora-alpha", "32", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    spec = json.loads((out / "dswiz-plan.json").read_text())["model"]["spec"]
    assert spec["finetune"] == {
        "mode": "lora", "lora_rank": 16, "lora_alpha": 32, "lora_targets": ["c_attn"], "double_quant": True
    }  # fmt: skip
    assert "LoraConfig(r=16" in (out / "launch.sh").read_text()


@pytest.mark.parametrize("command", ["plan", "config"])
def test_adapters_for_inference_are_refused_by_both_commands(command: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    extra = ("--yes", "--out", str(out)) if command == "config" else ()
    result = invoke(
        command, *extra, "-m", "gpt2-medium", "--hardware", "1xA100-80GB", "--finetune", "qlora",
        "--mode", "inference",
    )  # fmt: skip
    error = result.exception
    assert isinstance(error, DswizError), result.output
    assert error.problem == "--finetune qlora trains adapters, --mode inference trains nothing"
    assert error.fix == "drop one of them"
    assert not out.exists()


def test_without_yes_the_flags_are_the_prompts_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    prompter = ScriptedPrompter({"model-preset": "llama-7b"})  # fine-tuning and rank: Enter (the defaults)
    monkeypatch.setattr(config_cmd, "is_interactive", lambda: True)  # the terminal is the one thing not here
    monkeypatch.setattr("wizard.prompts.QuestionaryPrompter", lambda: prompter)
    result = invoke(
        "config", "--hardware", "1xA100-80GB", "--finetune", "qlora", "--lora-rank", "32",
        "--lora-targets", "q_proj,k_proj", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "used with --yes only" not in result.output  # the flags were taken, not ignored
    assert "finetune" in prompter.asked and "lora-rank" in prompter.asked
    spec = json.loads((out / "dswiz-plan.json").read_text())["model"]["spec"]
    assert (spec["finetune"]["mode"], spec["finetune"]["lora_rank"]) == ("qlora", 32)
    assert spec["finetune"]["lora_targets"] == ["q_proj", "k_proj"]


def test_prompts_drop_targets_the_model_lacks_and_ask_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    prompter = ScriptedPrompter({"model-preset": "gpt2-medium"})
    monkeypatch.setattr(config_cmd, "is_interactive", lambda: True)
    monkeypatch.setattr("wizard.prompts.QuestionaryPrompter", lambda: prompter)
    result = invoke(
        "config", "--hardware", "1xA100-80GB", "--finetune", "lora", "--lora-targets", "q_proj",
        "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "LoRA target module(s) q_proj not found in gpt2-medium" in result.output
    assert "asking again with PEFT's default targets" in result.output
    assert prompter.asked.count("finetune") == 2
    spec = json.loads((out / "dswiz-plan.json").read_text())["model"]["spec"]
    assert spec["finetune"]["lora_targets"] == ["c_attn"]  # GPT-2's own, from PEFT


def test_probe_hands_the_finetune_flags_to_config() -> None:
    from wizard.commands.probe import _planning_flags, probe

    argv = [
        "--model",
        "gpt2",
        "--finetune",
        "qlora",
        "--lora-rank",
        "16",
        "--lora-targets",
        "c_attn",
        "train.py",
    ]
    ctx = probe.make_context("probe", argv)
    flags = _planning_flags(ctx, dict(ctx.params))
    assert flags[flags.index("--finetune") + 1] == "qlora" and flags[flags.index("--lora-rank") + 1] == "16"
    assert "--lora-alpha" not in flags  # left at its default
    cctx = config.make_context("config", [*flags, "--yes"])
    assert (cctx.params["finetune"], cctx.params["lora_rank"], cctx.params["lora_targets"]) == (
        "qlora",
        16,
        "c_attn",
    )

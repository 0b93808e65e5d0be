"""The wizard's service answers with the planner's own rules and types: capacities, precisions, the chosen candidate;
and `dswiz config` plans once (the chosen candidate carries its prediction to the sidecar)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_core import H200

from wizard import planner
from wizard.cli import cli
from wizard.model import load_model_spec
from wizard.service import Choices, WizardService


def test_capacity_is_the_planners_available_ram_on_a_detected_machine(service: WizardService) -> None:
    hw = service.get_hardware(str(H200))
    assert hw.source == "detected" and hw.host.ram_available_bytes
    choices = Choices(hardware=hw)
    cap = service.capacity(choices)
    assert cap == planner.capacities(hw, service.request(choices))
    assert cap.cpu == hw.host.ram_available_bytes


def test_precisions_follow_the_planners_rule(service: WizardService) -> None:
    hw = service.get_hardware("1xV100-32GB")
    supported = service.precisions_supported(hw)
    assert supported == {p: planner.precision_problem(hw, p) for p in ("bf16", "fp16", "fp32")}
    assert supported["bf16"] and supported["fp16"] is None and supported["fp32"] is None


def test_the_chosen_candidate_is_the_plans_own(service: WizardService) -> None:
    choices = Choices(hardware=service.get_hardware("1xA100-80GB"), seq_len=1024)
    model = load_model_spec("gpt2-medium")
    plan = service.plan(choices, model)
    assert plan.best is not None
    choices.strategy = plan.best.strategy
    assert service.chosen_candidate(choices, model, plan) is plan.best


def test_dswiz_config_plans_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_second_evaluation(*args: object, **kwargs: object) -> planner.Candidate:
        raise AssertionError("the plan's candidate should carry the prediction")

    monkeypatch.setattr(planner, "evaluate", no_second_evaluation)
    out = tmp_path / "cfg"
    args = ["config", "--yes", "--model", "gpt2-medium", "--hardware", "1xH200", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    sidecar = json.loads((out / "dswiz-plan.json").read_text())
    assert sidecar["predicted"]["peak_gpu_bytes"] > 0


@pytest.mark.parametrize(
    ("consumer", "says"),
    [
        ("deepspeed", "deepspeed.initialize("),
        ("accelerate", "script (accelerate): no change"),
        ("trainer", "TrainingArguments("),
    ],
)
def test_after_the_wizard_the_terminal_says_what_review_said(
    service: WizardService, tmp_path: Path, consumer: str, says: str
) -> None:
    # The lines printed after the full-screen wizard writes are the Review step's code hints for the chosen
    # consumer (the service's code_hint_lines), then the next command.
    from wizard.commands.wizard import written_summary

    choices = Choices(hardware=service.get_hardware("1xA100-80GB"), seq_len=1024, out_dir=tmp_path)
    model = load_model_spec("gpt2-medium")
    plan = service.plan(choices, model)
    assert plan.best is not None
    choices.strategy, choices.consumer = plan.best.strategy, consumer
    files = service.render_files(choices, model, plan)
    results = service.write_files(tmp_path, files, force=False)
    paths = [r.path for r in results]
    lines = written_summary(service, choices, paths)
    assert lines[0] == "Wrote:" and all(f"  {p}" in lines for p in paths)
    hints = service.code_hint_lines(choices, {p.name: p.read_text() for p in paths if p.suffix == ".json"})
    assert hints and lines[1 + len(paths) : -1] == hints
    assert hints[0].startswith(f"script ({consumer}):") and says in "\n".join(hints)
    assert lines[-1] == f"Next: {service.launch_command(choices)}"

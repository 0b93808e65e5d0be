"""``dswiz --plain --from FILE``: the imported train_batch_size is kept on the planned world size, and a change
that cannot be avoided is said and asked about."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from wizard.prompts import run_prompts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_prompts import ScriptedPrompter  # the wizard's own scripted prompter


def _run(service: Any, existing: Path, answers: dict[str, Any]) -> tuple[ScriptedPrompter, list[str]]:
    said: list[str] = []
    p = ScriptedPrompter({"model-preset": "llama-7b", **answers})
    code = run_prompts(
        prompter=p, hardware_spec="8xA100-80GB", from_file=existing, service=service, say=said.append
    )
    assert code == 0
    return p, said


def test_enter_everywhere_keeps_train_batch_size_on_8_gpus(service: Any, tmp_path: Path) -> None:
    existing = tmp_path / "old.json"
    existing.write_text(
        json.dumps(
            {"train_batch_size": 24, "train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 3}}
        )
        + "\n"
    )
    p, said = _run(service, existing, {})
    assert any("train_batch_size 24 kept on 8 GPU(s): micro-batch 3 x accumulation 1" in s for s in said)
    assert "batch-change" not in p.asked
    assert (tmp_path / "ds_config.json").read_text() == existing.read_text()  # byte for byte


def test_a_batch_that_cannot_be_kept_is_said_and_asked(service: Any, tmp_path: Path) -> None:
    existing = tmp_path / "old.json"
    existing.write_text(
        json.dumps(
            {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": 3}}
        )
        + "\n"
    )
    p, said = _run(service, existing, {"batch-change": True})
    assert "batch-change" in p.asked
    assert any("train_batch_size 16 cannot be kept on 8 GPU(s)" in s for s in said)
    assert (
        json.loads((tmp_path / "ds_config.json").read_text())["train_batch_size"] == 24
    )  # 3 x 1 x 8, accepted

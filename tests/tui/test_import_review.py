"""`dswiz --from acc.yaml` where the YAML sets deepspeed_config_file and also keys accelerate refuses beside it:
Review shows the key-level diff against the imported files and offers to drop those keys before writing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import SIZE
from helpers import settle

from wizard.config.check import lint_path
from wizard.findings import has_errors
from wizard.tui.factory import build_app
from wizard.tui.screens.dialogs import ConfirmScreen
from wizard.tui.screens.review import ReviewStep

pytestmark = pytest.mark.anyio

DS = '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}\n'


def accelerate_yaml(ds: Path) -> str:
    return (
        "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
        f"  deepspeed_config_file: {ds}\n  zero_stage: 2\n  offload_optimizer_device: none\n"
        "  offload_param_device: none\n  gradient_accumulation_steps: 4\nmixed_precision: bf16\n"
        "num_machines: 1\nnum_processes: 8\nmachine_rank: 0\nmain_training_function: main\nuse_cpu: false\n"
    )


async def test_refused_keys_are_offered_for_removal_and_the_diff_is_by_key(
    service: Any, tmp_path: Path
) -> None:
    ds = tmp_path / "run" / "ds.json"
    ds.parent.mkdir()
    ds.write_text(DS)
    acc = ds.parent / "acc.yaml"
    acc.write_text(accelerate_yaml(ds))
    app = build_app(hardware_spec="8xA100-80GB", from_file=acc, service=service, skip_answered=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for _ in range(4):  # no model (the file's strategy), Strategy, Precision, Multi-node
            await pilot.press("enter")
            await settle(pilot)
        assert isinstance(app.screen, ReviewStep)
        diffs = [str(w.render()) for w in app.screen.query(".import-diff")]
        assert any(f"Against the imported {ds}" in d and "keys kept" in d for d in diffs)
        assert any(f"Against the imported {acc}" in d for d in diffs)
        await pilot.press("enter")  # write: first the question about the refused keys
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and "deepspeed_config.zero_stage" in app.screen.question
        await pilot.press("y")
        await settle(pilot)
        assert app.choices.written
    written = yaml.safe_load((ds.parent / "accelerate.yaml").read_text())
    assert "mixed_precision" not in written and set(written["deepspeed_config"]) == {"deepspeed_config_file"}
    assert not has_errors(lint_path(ds.parent / "accelerate.yaml", world_size=8))

"""`dswiz config --yes --from FILE` with strategy flags: the file's train_batch_size is kept where one batch flag
leaves the other number free, a change is said, and --model plans the result as `dswiz config --yes --model` does
(a strategy predicted not to fit is not written; one that fits gets its plan sidecar)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from wizard.cli import cli
from wizard.config.schema import DS_CONFIG_NAME
from wizard.errors import DswizError

# 8 GPUs x micro-batch 4 x accumulation 1 = 32
CONFIG = {
    "train_batch_size": 32,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
}


def _config(tmp_path: Path, *flags: str) -> tuple[Result, Path]:
    source, out = tmp_path / "ds.json", tmp_path / "out"
    source.write_text(json.dumps(CONFIG))
    args = ["config", "--yes", "--from", str(source), "--hardware", "1xRTX4090", "--out", str(out), *flags]
    return CliRunner().invoke(cli, args), out


def _batch(out: Path) -> tuple[int, int, int]:
    ds = json.loads((out / DS_CONFIG_NAME).read_text())
    return ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]


def test_one_batch_flag_keeps_the_file_s_global_batch(tmp_path: Path) -> None:
    result, out = _config(tmp_path, "--micro-batch", "8")
    assert result.exit_code == 0, result.output
    assert _batch(out) == (32, 8, 4)
    assert "train_batch_size 32 kept on 1 GPU(s): micro-batch 8 x accumulation 4" in result.output
    result, out = _config(tmp_path, "--grad-accum", "2", "--force")
    assert result.exit_code == 0, result.output
    assert _batch(out) == (32, 16, 2)


def test_a_micro_batch_that_cannot_keep_it_is_refused_with_the_ways_out(tmp_path: Path) -> None:
    result, out = _config(tmp_path, "--micro-batch", "5")
    assert isinstance(result.exception, DswizError)
    assert "the file's train_batch_size 32 is not a multiple of --micro-batch x GPUs = 5 x 1" in str(
        result.exception
    )
    assert "--grad-accum" in result.exception.fix and "--global-batch" in result.exception.fix
    assert not out.exists()


def test_both_batch_flags_change_it_and_say_so(tmp_path: Path) -> None:
    result, out = _config(tmp_path, "--micro-batch", "8", "--grad-accum", "8")
    assert result.exit_code == 0, result.output
    assert _batch(out) == (64, 8, 8)
    assert "train_batch_size 32 becomes 64 on 1 GPU(s)" in result.output


def test_with_model_a_strategy_that_does_not_fit_is_not_written(tmp_path: Path) -> None:
    result, out = _config(tmp_path, "--model", "llama3-70b", "--stage", "3", "--micro-batch", "8")
    assert isinstance(result.exception, DswizError)
    assert result.exception.exit_code == 1
    assert "does not fit" in str(result.exception) and "nothing was written" in str(result.exception)
    assert not out.exists()
    forced, out = _config(
        tmp_path, "--model", "llama3-70b", "--stage", "3", "--micro-batch", "8", "--force-errors"
    )
    assert forced.exit_code == 0, forced.output
    assert "warning:" in forced.output and (out / "dswiz-plan.json").exists()


def test_with_model_a_strategy_that_fits_gets_its_plan_sidecar(tmp_path: Path) -> None:
    result, out = _config(tmp_path, "--model", "gpt2")
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "dswiz-plan.json").read_text())
    assert plan["model"]["arg"] == "gpt2"
    assert (plan["strategy"]["micro_batch_size"], plan["strategy"]["gradient_accumulation_steps"]) == (4, 8)
    assert _batch(out) == (32, 4, 8)  # the file's strategy, checked, not replaced by the planner's

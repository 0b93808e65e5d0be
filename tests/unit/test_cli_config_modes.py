"""`dswiz config --yes` for inference (--mode inference), the stage-3 16-bit save (--save-16bit/--no-save-16bit) and
a mixture-of-experts model (the leaf module from --model), as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def dswiz(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_inference_config_has_no_training_keys(tmp_path: Path) -> None:
    proc = dswiz(
        "config",
        "--yes",
        "--mode",
        "inference",
        "--gpus-per-node",
        "2",
        "--offload-param",
        "cpu",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads((tmp_path / "ds_config.json").read_text())
    assert cfg["zero_optimization"]["stage"] == 3
    assert cfg["zero_optimization"]["offload_param"]["device"] == "cpu"
    absent = (
        "optimizer",
        "scheduler",
        "gradient_clipping",
        "gradient_accumulation_steps",
        "train_batch_size",
    )
    assert not set(absent) & set(cfg)
    assert not {"contiguous_gradients", "stage3_gather_16bit_weights_on_model_save"} & set(
        cfg["zero_optimization"]
    )
    assert cfg["train_micro_batch_size_per_gpu"] >= 1  # DeepSpeed still needs a batch key
    assert "inference, micro-batch" in proc.stdout and "no optimizer" in proc.stdout
    assert (
        "warning" not in proc.stdout.lower() and "error" not in proc.stdout.lower()
    )  # the linter is content


def test_inference_refuses_training_only_choices(tmp_path: Path) -> None:
    for extra, words in (
        (("--stage", "2"), "ZeRO inference only uses stage 3"),
        (("--offload-optimizer", "cpu"), "no optimizer to offload"),
        (("--save-16bit",), "inference saves no model"),
    ):
        proc = dswiz("config", "--yes", "--mode", "inference", "--out", str(tmp_path / "x"), *extra)
        assert proc.returncode == 2 and words in proc.stderr and "fix:" in proc.stderr, proc.stderr
        assert not (tmp_path / "x").exists()


def test_no_save_16bit_at_stage_3_reaches_json_and_accelerate(tmp_path: Path) -> None:
    args = (
        "config",
        "--yes",
        "--stage",
        "3",
        "--gpus-per-node",
        "2",
        "--no-save-16bit",
        "--for",
        "accelerate",
    )
    proc = dswiz(*args, "--accelerate-mode", "plugin", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    ds = yaml.safe_load((tmp_path / "accelerate.yaml").read_text().split("\n", 3)[3])["deepspeed_config"]
    assert ds["zero3_save_16bit_model"] is False
    proc = dswiz("config", "--yes", "--stage", "3", "--save-16bit", "--out", str(tmp_path / "json"))
    cfg = json.loads((tmp_path / "json" / "ds_config.json").read_text())
    assert cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    below = dswiz("config", "--yes", "--stage", "2", "--no-save-16bit", "--out", str(tmp_path / "two"))
    assert below.returncode == 2 and "only apply to stage 3" in below.stderr


def test_a_mixtral_plan_names_its_moe_block(tmp_path: Path) -> None:
    proc = dswiz(
        "config", "--yes", "--model", "mixtral-8x7b", "--hardware", "8xH100,ram=2TiB", "--stage", "3",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads((tmp_path / "ds_config.json").read_text())
    assert cfg["zero_optimization"]["leaf_module"] == {"classes": ["MixtralSparseMoeBlock"]}


def test_plan_mode_inference_lists_only_stage_3_parameter_offload() -> None:
    proc = dswiz(
        "plan", "--model", "llama-70b", "--hardware", "A100-40GB,ram=512GiB", "--mode", "inference",
        "--nvme", "4TiB", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    kinds = {(c["zero_stage"], c["offload_optimizer"], c["offload_param"]) for c in doc["candidates"]}
    assert kinds == {(3, "none", "none"), (3, "none", "cpu"), (3, "none", "nvme")}
    assert doc["request"]["mode"] == "inference" and doc["candidates"][0]["offload_param"] in ("cpu", "nvme")
    text = dswiz("plan", "--model", "llama-70b", "--hardware", "A100-40GB,ram=512GiB", "--mode", "inference")
    words = " ".join(text.stdout.split())  # rich wraps at the terminal width
    assert "per forward (inference: no optimizer, no gradients)" in words and "ckpt" not in words


def test_planning_flags_without_a_model_are_named_as_ignored(tmp_path: Path) -> None:
    """Without --model there is no plan: flags only the planner reads are said to be ignored, not dropped silently."""
    proc = dswiz(
        "config",
        "--yes",
        "--hardware",
        "1xH100-80GB",
        "--margin",
        "10",
        "--seq-len",
        "512",
        "--stage",
        "3",
        "--out",
        str(tmp_path / "a"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "note: --seq-len, --margin: used to plan, which needs --model; ignored here" in proc.stderr
    # and the config written is said to be a starting point no model's memory was checked against
    assert "note: no --model, so nothing was planned" in proc.stderr and "--model NAME" in proc.stderr
    assert json.loads((tmp_path / "a" / "ds_config.json").read_text())["zero_optimization"]["stage"] == 3
    quiet = dswiz(
        "config", "--yes", "--hardware", "1xH100-80GB", "--stage", "3", "--out", str(tmp_path / "b")
    )
    assert quiet.returncode == 0 and "ignored" not in quiet.stderr


def test_fixed_strategy_parts_are_sized_as_dswiz_plan_sizes_them(tmp_path: Path) -> None:
    """`config --stage 1 --no-activation-checkpointing` writes the micro-batch `plan` gives that strategy (not
    the one the recommendation had with checkpointing); a fixed micro-batch that cannot fit is refused with the fix
    (exit code 1, nothing written: `dswiz check --model` calls it an error), and written as asked with
    --force-errors, with a warning and the fix."""
    hw = ("--model", "llama-7b", "--hardware", "8xA100-80GB", "--stage", "1", "--no-activation-checkpointing")
    planned = dswiz("plan", *hw, "--json")
    assert planned.returncode == 0, planned.stderr
    want = json.loads(planned.stdout)["candidates"][0]["micro_batch_size"]
    proc = dswiz("config", "--yes", *hw, "--out", str(tmp_path / "a"))
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    ds = json.loads((tmp_path / "a" / "ds_config.json").read_text())
    assert ds["train_micro_batch_size_per_gpu"] == want and ds["zero_optimization"]["stage"] == 1
    refused = dswiz("config", "--yes", *hw, "--micro-batch", "64", "--out", str(tmp_path / "b"))
    assert refused.returncode == 1 and not (tmp_path / "b").exists()
    assert (
        "ZeRO-1 at micro-batch 64: does not fit" in refused.stderr and "nothing was written" in refused.stderr
    )
    assert f"lower the micro-batch to {want}" in refused.stderr and "--force-errors" in refused.stderr
    checked = dswiz(
        "check", "--model", "llama-7b", "--hardware", "8xA100-80GB", str(tmp_path / "a" / "ds_config.json")
    )
    assert checked.returncode == 0  # the config it did write passes the same check
    big = dswiz("config", "--yes", *hw, "--micro-batch", "64", "--force-errors", "--out", str(tmp_path / "b"))
    assert big.returncode == 0
    assert "warning: ZeRO-1 at micro-batch 64: does not fit" in big.stderr
    assert f"lower the micro-batch to {want}" in big.stderr
    assert json.loads((tmp_path / "b" / "ds_config.json").read_text())["train_micro_batch_size_per_gpu"] == 64
    again = dswiz(
        "check", "--model", "llama-7b", "--hardware", "8xA100-80GB", str(tmp_path / "b" / "ds_config.json")
    )
    assert (
        again.returncode == 1 and "plan-does-not-fit" in again.stdout
    )  # what config refused without the flag

"""`dswiz plan` for one exact strategy, and `dswiz check CONFIG --model`: the real CLI, --json."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_cli_plan import dswiz

A100 = ("--hardware", "1xA100-80GB,ram=512GiB")


def plan_json(*args: str) -> tuple[int, dict[str, Any]]:
    proc = dswiz("plan", *args, "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_exact_strategy_is_evaluated_as_given_with_the_candidate_contract() -> None:
    rc, doc = plan_json(
        "--model", "llama-7b", *A100, "--stage", "2", "--offload-optimizer", "cpu", "--micro-batch", "4",
        "--grad-accum", "2", "--activation-checkpointing",
    )  # fmt: skip
    assert rc == 0 and doc["exact_strategy"] is True
    (c,) = doc["candidates"]
    assert (c["zero_stage"], c["offload_optimizer"], c["offload_param"]) == (2, "cpu", "none")
    assert (c["micro_batch_size"], c["gradient_accumulation_steps"], c["activation_checkpointing"]) == (
        4,
        2,
        True,
    )
    assert c["fits"] is True and c["predicted"]["tokens_per_sec"] > 0
    # The same keys as a ranked candidate of the plain plan.
    _, ranked = plan_json("--model", "llama-7b", *A100)
    assert set(c) == set(ranked["candidates"][0]) and set(c["predicted"]) == set(
        ranked["candidates"][0]["predicted"]
    )
    assert sum(c["predicted"]["breakdown"].values()) >= c["predicted"]["gpu_allocated_bytes"]


def test_exact_strategy_that_does_not_fit_says_what_to_change() -> None:
    rc, doc = plan_json("--model", "llama-7b", *A100, "--stage", "3", "--offload-optimizer", "none",
                        "--no-activation-checkpointing", "--micro-batch", "64")  # fmt: skip
    (c,) = doc["candidates"]
    assert rc == 1 and c["fits"] is False and "gpu" in c["limits"]
    assert c["max_micro_batch"] < 64
    (line,) = [a for a in doc["advice"] if "GiB card allows with the 5 % margin" in a]
    assert f"lower the micro-batch to {c['max_micro_batch']}" in line or c["max_micro_batch"] == 0
    assert "use ZeRO-" in line  # the fitting recommendation, named


def test_a_combination_deepspeed_does_not_run_is_not_called_a_fit_nor_tuned() -> None:
    """Optimizer offload at stage 0 fits the card's memory but DeepSpeed does not run it: no "fits" reason, no
    advice on how to make it faster, and what to run instead (the planner's pick)."""
    rc, doc = plan_json("--model", "llama-7b", *A100, "--stage", "0", "--offload-optimizer", "cpu")
    (c,) = doc["candidates"]
    assert rc == 1 and c["fits"] is False and c["limits"] == ["unsupported"]
    assert c["reasons"][0].startswith("not possible here: optimizer offload needs ZeRO stage 1, 2 or 3")
    assert not any(r.startswith("fits") for r in c["reasons"])
    assert any(r.startswith("memory as written:") and "not one DeepSpeed runs" in r for r in c["reasons"])
    assert not any("accumulating" in r for r in c["reasons"])
    (line,) = doc["advice"]
    assert line.startswith("DeepSpeed does not run this combination") and "the planner's pick" in line
    _, plain = plan_json("--model", "llama-7b", *A100)
    pick = plain["candidates"][0]
    assert f"micro-batch {pick['micro_batch_size']}, " in line and line.count("ZeRO-") == 1


def test_advice_under_gpu_memory_names_the_share_planned_for_not_a_smaller_card() -> None:
    """24 GiB planned of an 80 GiB card is not "a 24.0 GiB card": the advice says what was planned for, of which
    card."""
    rc, doc = plan_json(
        "--model", "llama-7b", *A100, "--gpu-memory", "24GiB", "--stage", "0", "--micro-batch", "8"
    )
    assert rc == 1
    (line,) = [a for a in doc["advice"] if a.startswith("this config needs ")]
    # the figure the margin leaves, beside the need: "needs 23 GiB" next to "24 GiB" alone reads as a fit
    assert (
        "per GPU, more than the 22.8 GiB the 24.0 GiB planned for (of the 80.0 GiB card) allows with the 5 % "
        "margin: use ZeRO-" in line
    )
    # the whole card asked for by size is the card
    _, doc = plan_json(
        "--model", "llama-7b", *A100, "--gpu-memory", "80GiB", "--stage", "0", "--micro-batch", "8"
    )
    assert any("per GPU, more than the 76.0 GiB an 80.0 GiB card allows" in a for a in doc["advice"])
    _, doc = plan_json("--model", "llama-7b", *A100, "--margin", "0", "--stage", "0", "--micro-batch", "8")
    assert any("per GPU, more than an 80.0 GiB card holds: " in a for a in doc["advice"])


def test_exact_strategy_whose_stage_fits_at_no_micro_batch_is_told_which_stage_does() -> None:
    """Stage 0 of a 7B model holds 16 bytes a parameter on every GPU: no micro-batch fits an 80 GiB card. The
    exact strategy is judged against the planner's pick over every stage -- not a plan of stage 0 alone, whose "what
    would fit" (1024x the GPUs would not; a larger card would) tells a user with this card nothing to do."""
    rc, doc = plan_json("--model", "llama-7b", *A100, "--stage", "0", "--micro-batch", "1")
    (c,) = doc["candidates"]
    assert rc == 1 and c["zero_stage"] == 0 and c["fits"] is False and c["max_micro_batch"] == 0
    (line,) = doc["advice"]
    assert line.startswith("this config needs ")
    assert "per GPU, more than the 76.0 GiB an 80.0 GiB card allows with the 5 % margin: use ZeRO-" in line
    assert "nothing the planner tried fits" not in line
    assert doc["best"] is None  # the one candidate shown is not the planner's pick
    rc, doc = plan_json("--model", "llama-7b", *A100, "--stage", "2", "--offload-optimizer", "cpu")
    assert rc == 0 and doc["best"] in (0, None)


def test_an_exact_inference_strategy_at_another_stage_is_refused_as_before() -> None:
    proc = dswiz("plan", "--model", "gpt2", "--hardware", "1xA100-80GB", "--mode", "inference", "--stage", "0",
                 "--micro-batch", "4")  # fmt: skip
    assert proc.returncode == 2 and "stage 3" in proc.stderr and "Traceback" not in proc.stderr


def test_a_plan_of_some_stages_that_nothing_fits_names_the_stage_that_does() -> None:
    """`plan --stage 0` ranks stage 0 only; when none of it fits, the first thing to change is the stage."""
    rc, doc = plan_json("--model", "llama-7b", *A100, "--stage", "0")
    assert rc == 1 and all(c["zero_stage"] == 0 and not c["fits"] for c in doc["candidates"])
    first = doc["advice"][0]
    assert (
        first.startswith("another ZeRO stage fits these GPUs: ZeRO-")
        and "(only stage 0 was asked for)" in first
    )
    # what the rest says is said of stage 0, not of the model
    assert "even 1024x the GPUs would not fit this model at stage 0 at this sequence length" in doc["advice"]
    _, two = plan_json(
        "--model", "llama-70b", "--hardware", "8xA100-80GB,ram=2TiB", "--stage", "0", "--stage", "1"
    )
    assert "ZeRO-3" in two["advice"][0] and "(only stages 0 and 1 were asked for)" in two["advice"][0]
    _, every = plan_json("--model", "llama-7b", *A100)
    best = every["candidates"][0]
    assert f"at micro-batch {best['micro_batch_size']}," in first and best["fits"]
    # every stage asked for (the default): nothing to add
    rc, doc = plan_json("--model", "llama-7b", "--hardware", "1xT4,ram=16GiB", "--seq-len", "2048")
    assert not any(a.startswith("another ZeRO stage") for a in doc.get("advice", []))


def test_unfixed_parts_are_the_planners_choice() -> None:
    rc, doc = plan_json("--model", "gpt2-xl", "--hardware", "1xA100-80GB", "--offload-optimizer", "none")
    (c,) = doc["candidates"]
    assert rc == 0 and c["offload_optimizer"] == "none" and c["fits"]
    assert c["micro_batch_size"] == c["max_micro_batch"]  # sized by the planner: the largest that fits


def test_exact_inference_strategy() -> None:
    rc, doc = plan_json("--model", "llama-7b", "--hardware", "1xA100-80GB", "--mode", "inference",
                        "--offload-param", "cpu", "--micro-batch", "2")  # fmt: skip
    (c,) = doc["candidates"]
    assert rc == 0 and c["strategy"]["mode"] == "inference"
    assert (c["zero_stage"], c["offload_param"], c["micro_batch_size"]) == (3, "cpu", 2)


def test_exact_strategy_with_two_stages_is_a_clear_error() -> None:
    proc = dswiz("plan", "--model", "gpt2", "--hardware", "H200", "--stage", "1", "--stage", "2",
                 "--micro-batch", "4")  # fmt: skip
    assert proc.returncode == 2 and "give one --stage" in proc.stderr and "Traceback" not in proc.stderr


def test_exact_strategy_flags_are_the_same_as_config_s() -> None:
    def flags(cmd: str) -> dict[str, str]:
        out = dswiz(cmd, "--help").stdout
        names = ("--offload-optimizer", "--offload-param", "--micro-batch", "--grad-accum", "--activation-")
        return {
            n: next(line.split()[0] for line in out.splitlines() if line.strip().startswith(n)) for n in names
        }

    assert flags("plan") == flags("config")


def test_check_with_model_predicts_the_config(tmp_path: Path) -> None:
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2}, "steps_per_print": 10,
    }))  # fmt: skip
    proc = dswiz("check", str(cfg), "--model", "llama-7b", *A100, "--no-consumer-check", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["ok"] is False
    (f,) = [f for f in doc["findings"] if f["code"] == "plan-does-not-fit"]
    assert "per GPU, more than the 76.0 GiB an 80.0 GiB card allows" in f["fix"] and "use ZeRO-" in f["fix"]
    p = doc["prediction"]
    assert (p["zero_stage"], p["micro_batch_size"], p["fits"]) == (2, 8, False)
    # The same config for a small model fits: an info finding, exit 0.
    proc = dswiz("check", str(cfg), "--model", "gpt2", *A100, "--no-consumer-check", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["prediction"]["fits"] is True
    assert any(f["code"] == "plan-fits" for f in doc["findings"])


LLAMA_1B = "type=llama,name=llama-1b,layers=22,hidden=2048,heads=32,kv_heads=4,ffn=5632,vocab=32000,seq=2048"


def test_check_predicts_stage_0s_step_by_the_optimizer_the_config_has_deepspeed_build(tmp_path: Path) -> None:
    """ZeRO-0 in bf16 steps through DeepSpeed's FP16_Optimizer when the config has DeepSpeed build its FusedAdam (an
    AdamW section without torch_adam): 4 bytes a parameter more at the step than with a torch optimizer (torch_adam,
    or none in the config: the script's own)."""
    peaks = {}
    for name, section in (
        ("fused", {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}),
        ("torch_adam", {"optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}),
        ("script", {}),
    ):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps({
            **section, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "bf16": {"enabled": True}, "zero_optimization": {"stage": 0},
        }))  # fmt: skip
        proc = dswiz(
            "check", str(cfg), "--model", LLAMA_1B, "--hardware", "1xH200", "--no-consumer-check", "--json"
        )
        p = json.loads(proc.stdout)["prediction"]["predicted"]
        assert p["peak_phase"] == "optimizer step"
        peaks[name] = p["gpu_allocated_bytes"]
    params = 1_100_048_384  # llama-1b's parameters (embeddings untied)
    assert peaks["torch_adam"] == peaks["script"]
    assert peaks["fused"] - peaks["script"] == pytest.approx(4 * params, rel=0.01)


def test_fp32_stage_0_has_no_16_bit_wrapper_whatever_the_config_builds(tmp_path: Path) -> None:
    """In 32 bits DeepSpeed wraps no stage-0 optimizer: its step and cache are the same with or without an AdamW
    section."""
    got = []
    for section in ({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}, {}):
        cfg = tmp_path / "fp32.json"
        cfg.write_text(json.dumps({
            **section, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": 0},
        }))  # fmt: skip
        proc = dswiz(
            "check", str(cfg), "--model", LLAMA_1B, "--hardware", "1xH200", "--no-consumer-check", "--json"
        )
        p = json.loads(proc.stdout)["prediction"]["predicted"]
        got.append((p["gpu_allocated_bytes"], p["gpu_needed_bytes"]))
    assert got[0] == got[1]


def test_exact_inference_strategy_keeps_the_candidate_contract_and_refuses_training_flags() -> None:
    """`plan --mode inference` with exact-strategy flags: the same JSON keys as a ranked inference candidate, no
    optimizer or gradient memory, and the training-only flags said to be impossible (exit 1), not ignored."""
    model = ("--model", "llama-7b", "--hardware", "1xA10,ram=64GiB", "--mode", "inference")
    rc, doc = plan_json(*model, "--offload-param", "cpu", "--micro-batch", "8")
    (c,) = doc["candidates"]
    assert rc == 0 and doc["exact_strategy"] is True and c["fits"]
    assert (c["zero_stage"], c["offload_optimizer"], c["micro_batch_size"]) == (3, "none", 8)
    parts = c["predicted"]["breakdown"]
    assert not [k for k in parts if "optimizer" in k or "gradient" in k] and "parameters" not in parts
    _, ranked = plan_json(*model)
    assert set(c) == set(ranked["candidates"][0]) and set(c["predicted"]) == set(
        ranked["candidates"][0]["predicted"]
    )
    for flags, why in (
        (("--offload-optimizer", "cpu"), "no optimizer"),
        (("--grad-accum", "4"), "gradient accumulation"),
        (("--activation-checkpointing",), "activation checkpointing"),
    ):
        rc, doc = plan_json(*model, "--offload-param", "cpu", "--micro-batch", "8", *flags)
        (c,) = doc["candidates"]
        assert rc == 1 and not c["fits"] and "unsupported" in c["limits"], flags
        assert c["reasons"][0].startswith("not possible here:") and why in c["reasons"][0], flags


def test_flags_that_contradict_each_other_are_refused_by_plan_and_config(tmp_path: Path) -> None:
    """--no-offload with an offload device, --no-checkpointing with --activation-checkpointing: one message naming
    both flags, exit 2, nothing planned or written (both were once taken silently, the later flag winning)."""
    cases = [
        (("--no-offload", "--offload-optimizer", "cpu"), "--no-offload and --offload-optimizer cpu"),
        (
            ("--no-offload", "--stage", "3", "--offload-param", "nvme"),
            "--no-offload and --offload-param nvme",
        ),
        (
            ("--no-checkpointing", "--activation-checkpointing"),
            "--no-checkpointing and --activation-checkpointing",
        ),
    ]
    for flags, said in cases:
        for command in (("plan", "--json"), ("config", "--yes", "--out", str(tmp_path / "out"))):
            proc = dswiz(*command, "--model", "gpt2", *A100, *flags)
            assert proc.returncode == 2, (command, flags, proc.stderr)
            assert f"error: {said} contradict each other" in proc.stderr and "fix:" in proc.stderr
            assert not (tmp_path / "out").exists()
            # --json: the error as an object on stdout, nothing else there
            assert proc.stdout == "" if "--json" not in command else json.loads(proc.stdout)["exit_code"] == 2
    # an offload device of "none" says the same as --no-offload: no contradiction
    assert (
        dswiz("plan", "--model", "gpt2", *A100, "--no-offload", "--offload-optimizer", "none").returncode == 0
    )


def _z2_config(tmp_path: Path, micro_batch: int) -> Path:
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2}, "steps_per_print": 10,
    }))  # fmt: skip
    return cfg


def check_json(cfg: Path, *args: str) -> tuple[int, dict[str, Any]]:
    proc = dswiz("check", str(cfg), *args, "--no-consumer-check", "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_check_predicts_at_the_sequence_and_fine_tuning_plan_is_told_for_the_same_strategy(
    tmp_path: Path,
) -> None:
    """`dswiz check --model` takes plan's --seq-len, --finetune/--lora-*, --gpu-memory and --margin, and predicts
    exactly what `dswiz plan` does for that strategy with those flags."""
    cfg = _z2_config(tmp_path, 2)
    exact = ("--stage", "2", "--offload-optimizer", "none", "--offload-param", "none", "--micro-batch", "2")
    exact += ("--grad-accum", "1", "--no-activation-checkpointing", "--precision", "bf16")
    cases = [
        (),
        ("--seq-len", "4096"),
        ("--finetune", "lora", "--lora-rank", "16"),
        ("--seq-len", "1024", "--gpu-memory", "40GiB", "--margin", "10"),
    ]
    predicted = []
    for flags in cases:
        _, checked = check_json(cfg, "--model", "llama-7b", *A100, *flags)
        _, planned = plan_json("--model", "llama-7b", *A100, *exact, *flags)
        (candidate,) = [c for c in planned["candidates"] if c["zero_stage"] == 2]
        assert checked["prediction"]["predicted"] == candidate["predicted"], flags
        assert checked["prediction"]["fits"] == candidate["fits"], flags
        predicted.append(checked["prediction"]["predicted"]["gpu_needed_bytes"])
    default, longer, lora, _ = predicted
    assert (
        longer > default > lora
    )  # twice the tokens hold more activations; LoRA keeps no full optimizer state
    _, doc = check_json(cfg, "--model", "llama-7b", *A100, "--seq-len", "4096")
    (f,) = [f for f in doc["findings"] if f["code"].startswith("plan-")]
    assert "4,096 tokens a sample (--seq-len)" in f["what"]


def test_check_refuses_prediction_flags_without_a_model_and_a_card_it_does_not_have(tmp_path: Path) -> None:
    cfg = _z2_config(tmp_path, 2)
    proc = dswiz("check", str(cfg), "--seq-len", "4096", "--finetune", "lora", "--no-consumer-check")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--seq-len, --finetune shape the prediction, and no --model asks for one" in proc.stderr
    assert "add --model NAME" in proc.stderr
    proc = dswiz("check", str(cfg), "--model", "gpt2", *A100, "--gpu-memory", "1TiB", "--no-consumer-check")
    assert proc.returncode == 2 and "more than the NVIDIA A100-SXM4-80GB holds" in proc.stderr, proc.stderr
    # An emulated 24 GiB card: the same config no longer fits, and the finding says what would.
    code, doc = check_json(cfg, "--model", "llama-7b", *A100, "--gpu-memory", "24GiB")
    assert code == 1 and doc["prediction"]["fits"] is False


@pytest.mark.parametrize(
    ("model", "written_with", "other", "said"),
    [
        (
            "gpt2",
            ("--seq-len", "512"),
            ("--seq-len", "1024"),
            "512 tokens a sample (as dswiz-plan.json planned",
        ),
        (
            "llama-7b",
            ("--finetune", "lora"),
            ("--finetune", "full"),
            "LoRA r=8 (q_proj,v_proj) as dswiz-plan.json planned",
        ),
    ],
)
def test_check_predicts_for_what_the_folders_plan_was_made_for_unless_told_otherwise(
    tmp_path: Path, model: str, written_with: tuple[str, ...], other: tuple[str, ...], said: str
) -> None:
    """The sequence length and the fine-tuning are not in a DeepSpeed config: `dswiz check --model` takes them
    from the dswiz-plan.json that `dswiz config` wrote beside it (a LoRA folder checked as full fine-tuning was an
    error), and the flags win."""
    out = tmp_path / "cfg"
    written = dswiz("config", "--yes", "--model", model, *A100, *written_with, "--out", str(out))
    assert written.returncode == 0, written.stderr
    _, planned = check_json(out, "--model", model, *A100)
    _, told = check_json(out, "--model", model, *A100, *written_with)
    _, otherwise = check_json(out, "--model", model, *A100, *other)
    assert planned["prediction"]["predicted"] == told["prediction"]["predicted"]
    needed = "gpu_needed_bytes"
    assert otherwise["prediction"]["predicted"][needed] > planned["prediction"]["predicted"][needed]
    (f,) = [f for f in planned["findings"] if f["code"].startswith("plan-")]
    assert said in f["what"]


def test_check_lora_flags_refine_the_folders_lora_plan_and_need_lora(tmp_path: Path) -> None:
    out = tmp_path / "lora"
    written = dswiz("config", "--yes", "--model", "llama-7b", *A100, "--finetune", "lora", "--out", str(out))
    assert written.returncode == 0, written.stderr
    # --lora-rank alone keeps the plan's LoRA, at that rank (it once switched to full fine-tuning, silently)
    code, doc = check_json(out, "--model", "llama-7b", *A100, "--lora-rank", "16")
    _, told = check_json(out, "--model", "llama-7b", *A100, "--finetune", "lora", "--lora-rank", "16")
    assert code == 0 and doc["prediction"]["predicted"] == told["prediction"]["predicted"]
    (f,) = [f for f in doc["findings"] if f["code"] == "plan-fits"]
    assert "LoRA r=16 (q_proj,v_proj) (--lora-rank)" in f["what"]
    for argv, said in [
        (("--finetune", "full", "--lora-rank", "16"), "--lora-rank shapes LoRA adapters"),
        (("--lora-alpha", "32"), "--lora-alpha shapes the prediction, and no --model asks for one"),
    ]:
        with_model = ("--model", "llama-7b", *A100) if argv[0] == "--finetune" else ()
        proc = dswiz("check", str(out), *with_model, *argv, "--no-consumer-check")
        assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_check_of_an_inference_folder_predicts_inference(tmp_path: Path) -> None:
    out = tmp_path / "inf"
    written = dswiz("config", "--yes", "--model", "llama-7b", *A100, "--mode", "inference", "--out", str(out))
    assert written.returncode == 0, written.stderr
    code, doc = check_json(out, "--model", "llama-7b", *A100)
    _, planned = plan_json("--model", "llama-7b", *A100, "--mode", "inference", "--stage", "3")
    assert code == 0 and doc["prediction"]["fits"] is True  # it had been predicted as training: 470 GiB
    best = planned["candidates"][0]
    assert doc["prediction"]["micro_batch_size"] == best["micro_batch_size"]
    assert doc["prediction"]["predicted"]["gpu_needed_bytes"] == best["predicted"]["gpu_needed_bytes"]
    proc = dswiz(
        "check", str(out), "--model", "llama-7b", *A100, "--finetune", "qlora", "--no-consumer-check"
    )
    assert proc.returncode == 2 and "the config runs inference" in proc.stderr


def test_check_takes_the_plans_sequence_for_its_own_model_only_and_refuses_one_past_learned_positions(
    tmp_path: Path,
) -> None:
    out = tmp_path / "cfg"
    written = dswiz("config", "--yes", "--model", "llama-7b", *A100, "--seq-len", "4096", "--out", str(out))
    assert written.returncode == 0, written.stderr
    _, other = check_json(out, "--model", "gpt2", *A100)
    (f,) = [f for f in other["findings"] if f["code"].startswith("plan-")]
    assert "gpt2 at 1,024 tokens a sample (the model's context" in f["what"]
    proc = dswiz("check", str(out), "--model", "gpt2", *A100, "--seq-len", "4096", "--no-consumer-check")
    assert proc.returncode == 2 and "longer than gpt2's 1024 learned positions" in proc.stderr


def test_check_says_when_the_folders_plan_does_not_read(tmp_path: Path) -> None:
    out = tmp_path / "lora"
    written = dswiz("config", "--yes", "--model", "llama-7b", *A100, "--finetune", "lora", "--out", str(out))
    assert written.returncode == 0, written.stderr
    (out / "dswiz-plan.json").write_text("not json")
    _, doc = check_json(out, "--model", "llama-7b", *A100)
    (f,) = [f for f in doc["findings"] if f["code"] == "plan-file-unreadable"]
    assert f["severity"] == "warning" and "not valid JSON" in f["what"] and "full fine-tuning" in f["why"]


def test_a_fix_that_is_the_planners_own_pick_is_said_once(tmp_path: Path) -> None:
    """ZeRO-1 + CPU offload + checkpointing at micro-batch 22 for llama-7b at 8,192 tokens: the planner's pick is
    the same strategy at the micro-batch that fits, so the fix names it once (it said "lower the micro-batch to 11,
    or use <the same strategy> (micro-batch 11 ...)")."""
    out = tmp_path / "cfg"
    written = dswiz("config", "--yes", "--model", "llama-7b", *A100, "--seq-len", "4096", "--out", str(out))
    assert written.returncode == 0, written.stderr
    code, doc = check_json(out, "--model", "llama-7b", *A100, "--seq-len", "8192")
    (f,) = [f for f in doc["findings"] if f["code"] == "plan-does-not-fit"]
    want = doc["prediction"]["max_micro_batch"]
    assert (
        code == 1 and f"lower the micro-batch to {want} (~" in f["fix"] and "the planner's pick" in f["fix"]
    )
    assert ", or use" not in f["fix"]


def test_check_model_on_a_file_that_is_no_config_says_which_to_check(tmp_path: Path) -> None:
    """A hostfile names no strategy (the prediction had said "an accelerate config is a YAML mapping, not str"),
    and a pipe is read once, by the check (a second read for the prediction would wait for ever)."""
    hosts = tmp_path / "hostfile"
    hosts.write_text("node-a slots=8\nnode-b slots=8\n")
    _, doc = check_json(hosts, "--model", "gpt2", *A100)
    (f,) = [f for f in doc["findings"] if f["code"] == "plan-not-predicted"]
    assert (
        f["what"].startswith("no prediction for a hostfile")
        and f"dswiz check {tmp_path} --model gpt2" in f["fix"]
    )
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat {_z2_config(tmp_path, 2)} > {fifo}"])
    try:
        _, doc = check_json(fifo, "--model", "gpt2", *A100)
    finally:
        writer.kill()
        writer.wait()
    (f,) = [f for f in doc["findings"] if f["code"] == "plan-not-predicted"]
    assert "a pipe or a device is read once" in f["what"]


def test_advice_keeps_the_global_batch_a_config_fixes(tmp_path: Path) -> None:
    """A config whose micro-batch is too large names the split that keeps its train_batch_size (micro-batch x
    accumulation), evaluated by the planner, beside "lower the micro-batch", which changes the global batch."""
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps({
        "train_batch_size": 32, "train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 2,
        "bf16": {"enabled": True}, "zero_optimization": {
            "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}},
        "activation_checkpointing": {"partition_activations": False}, "steps_per_print": 10,
    }))  # fmt: skip
    args = ("--model", "llama-7b", *A100, "--gpu-memory", "24GiB")
    proc = dswiz("check", str(cfg), *args, "--no-consumer-check", "--json")
    doc = json.loads(proc.stdout)
    (f,) = [f for f in doc["findings"] if f["code"] == "plan-does-not-fit"]
    said = re.search(r"keep the global batch 32 with micro-batch (\d+) x accumulation (\d+)", f["fix"])
    assert said is not None, f["fix"]
    micro, accumulation = int(said[1]), int(said[2])
    assert micro * accumulation == 32 and micro < 16
    # the split said fits, as `dswiz plan` evaluates it
    rc, plan = plan_json(*args, "--stage", "3", "--offload-optimizer", "cpu", "--offload-param", "cpu",
                         "--micro-batch", str(micro), "--grad-accum", str(accumulation))  # fmt: skip
    assert rc == 0 and plan["candidates"][0]["fits"] is True
    # none for a config that fits
    rc, plan = plan_json(*args, "--stage", "3", "--offload-optimizer", "cpu", "--offload-param", "cpu",
                         "--micro-batch", "4", "--grad-accum", "8")  # fmt: skip
    assert rc == 0 and not any("keep the global batch" in a for a in plan["advice"])


def test_check_counts_the_gradient_reduction_the_config_asks_for(tmp_path: Path) -> None:
    """Stages 1-2 all-reduce whole gradient buckets unless use_multi_rank_bucket_allreduce is off, which reduces each
    slice to its owner: at stage 2 and one micro-step, 3 passes of the model over the ring against 2 (the weights'
    gather after the step is the third)."""
    comm = {}
    for name, zero in (
        ("default", {"stage": 2}),
        ("owners", {"stage": 2, "use_multi_rank_bucket_allreduce": False}),
        ("no_reduce_scatter", {"stage": 2, "use_multi_rank_bucket_allreduce": False, "reduce_scatter": False}),
        ("not_contiguous", {"stage": 2, "use_multi_rank_bucket_allreduce": False, "contiguous_gradients": False}),
        ("not_contiguous_offloaded", {"stage": 2, "use_multi_rank_bucket_allreduce": False,
                                      "contiguous_gradients": False, "offload_optimizer": {"device": "cpu"}}),
    ):  # fmt: skip
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps({
            "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "zero_optimization": zero,
        }))  # fmt: skip
        proc = dswiz("check", str(cfg), "--model", "gpt2-xl", "--hardware", "8xA100-80GB,ram=1TiB",
                     "--no-consumer-check", "--json")  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        comm[name] = json.loads(proc.stdout)["prediction"]["predicted"]["time_seconds"]["communication"]
    assert comm["default"] == pytest.approx(1.5 * comm["owners"], rel=1e-3)
    # reduce_scatter off, or gradients not contiguous (buffered_reduce_fallback), all-reduce whatever the key says;
    # an offloaded optimizer makes them contiguous
    assert comm["no_reduce_scatter"] == comm["not_contiguous"] == comm["default"]
    assert comm["not_contiguous_offloaded"] == pytest.approx(comm["owners"], rel=0.02)


def test_check_reads_zero_3_limits_of_0(tmp_path: Path) -> None:
    """stage3_prefetch_bucket_size 0 turns the prefetch off: only the reuse distance keeps parameters gathered for
    backward, so a 7B model gathers more again than with DeepSpeed's default bucket."""
    comm = {}
    for name, extra in (("default", {}), ("no_prefetch", {"stage3_prefetch_bucket_size": 0})):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps({
            "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "zero_optimization": {"stage": 3, **extra},
        }))  # fmt: skip
        proc = dswiz("check", str(cfg), "--model", "llama-7b", "--hardware", "2x8xA100-80GB,ram=1TiB,net=25",
                     "--no-consumer-check", "--json")  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        comm[name] = json.loads(proc.stdout)["prediction"]["predicted"]["time_seconds"]["communication"]
    assert comm["no_prefetch"] > comm["default"]


def test_zero_3_reasons_say_what_the_backward_gathers_again() -> None:
    """DeepSpeed keeps up to stage3_max_live_parameters (1e9) gathered from the end of the forward: LLaMA-7B's
    backward gathers 85 % of it again, a 1.1B model only a tenth, a 350M model nothing."""
    said = {}
    for model in ("llama-7b", LLAMA_1B, "gpt2-medium"):
        _, doc = plan_json("--model", model, "--hardware", "8xA100-80GB,ram=1TiB", "--stage", "3")
        (reason,) = [r for r in doc["candidates"][0]["reasons"] if r.startswith("stage 3:")]
        said[model] = reason
    assert "85 % of them again in backward" in said["llama-7b"]
    assert "9 % of them again in backward" in said[LLAMA_1B]
    assert "all of them kept gathered for backward" in said["gpt2-medium"]


def test_a_checkpointed_lora_backward_gathers_its_frozen_weights_twice() -> None:
    """With LoRA and checkpointing, DeepSpeed releases the frozen weights a block's recompute gathered when the
    module that started it finishes its backward: the backward gathers most of the model twice; without
    checkpointing, less than the fully trained model (the frozen embedding runs no backward)."""
    said = {}
    for ckpt in ("--activation-checkpointing", "--no-activation-checkpointing"):
        _, doc = plan_json("--model", "llama-7b", "--finetune", "lora", "--hardware", "8xA100-80GB,ram=1TiB",
                           "--stage", "3", ckpt, "--micro-batch", "4")  # fmt: skip
        (reason,) = [r for r in doc["candidates"][0]["reasons"] if r.startswith("stage 3:")]
        said[ckpt] = reason
    assert "1.6 times again in backward (each block's recompute frees" in said["--activation-checkpointing"]
    assert "82 % of them again in backward" in said["--no-activation-checkpointing"]


def test_one_batch_flag_with_global_batch_derives_the_other_and_a_contradiction_is_refused(
    tmp_path: Path,
) -> None:
    """--micro-batch 2 --global-batch 96 on 8 GPUs is 2 x 6 x 8 (it once kept the accumulation of the planner's
    own micro-batch: 2 x 3 x 8 = 48); all three that disagree, or a micro-batch that does not divide the batch,
    are refused by plan and config alike."""
    gpus8 = ("--hardware", "8xA100-80GB,ram=1TiB")
    rc, doc = plan_json(  # fits: exit 0
        "--model", "llama-7b", *gpus8, "--stage", "3", "--micro-batch", "2", "--global-batch", "96"
    )
    (c,) = doc["candidates"]
    assert rc == 0 and (c["micro_batch_size"], c["gradient_accumulation_steps"]) == (2, 6)
    _, doc = plan_json(
        "--model", "llama-7b", *gpus8, "--stage", "3", "--grad-accum", "3", "--global-batch", "96"
    )
    (c,) = doc["candidates"]
    assert (c["micro_batch_size"], c["gradient_accumulation_steps"]) == (4, 3)
    for flags, said in (
        (
            ("--micro-batch", "2", "--grad-accum", "4"),
            "--micro-batch 2 x --grad-accum 4 x 8 GPU(s) = 64, not",
        ),
        (("--micro-batch", "5"), "--global-batch 96 is not a multiple of --micro-batch x GPUs = 5 x 8"),
    ):
        for command in (("plan",), ("config", "--yes", "--out", str(tmp_path / "out"))):
            proc = dswiz(
                *command, "--model", "llama-7b", *gpus8, "--stage", "3", *flags, "--global-batch", "96"
            )
            assert proc.returncode != 0 and said in proc.stderr and "fix:" in proc.stderr, (
                command,
                proc.stderr,
            )
            assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()

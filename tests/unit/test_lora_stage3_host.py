"""ZeRO-3 with LoRA: the fetch/release hooks fire on every submodule call, PEFT's wrappers add calls
(wizard.planner.throughput.module_calls_per_layer), and offloaded parameters are fetched while the host runs them
(the fetch hides behind a micro-step's compute and the host time the GPU waits for)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from wizard.hardware.described import describe
from wizard.model import load_model_spec, spec_from_config
from wizard.planner import calibration as cal
from wizard.planner import finetune as ft
from wizard.planner.throughput import (
    STAGE3_HOOKS_PART,
    estimate_throughput,
    host_micro_step_seconds,
    module_calls_per_layer,
)
from wizard.strategy import Strategy
from wizard.tuning import make_finetune

ROOT = Path(__file__).resolve().parents[2]
TINY: dict[str, dict[str, Any]] = {
    "llama": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 176, "vocab_size": 300},
    "qwen2": {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300},
    "gpt2": {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 300, "n_positions": 64},
    "gpt_neox": {"model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                 "intermediate_size": 256, "vocab_size": 300},
}  # fmt: skip


def _calls_in_one_layer(cfg: dict[str, Any], mode: str, targets: tuple[str, ...]) -> int:
    """Forward calls of the first decoder layer and everything under it, in one forward of the real model (PEFT's
    wrappers around it for LoRA): what fires stage 3's hooks."""
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import AutoConfig, AutoModelForCausalLM

    kw = {k: v for k, v in cfg.items() if k != "model_type"}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg["model_type"], **kw))
    if mode == "lora":
        target_modules: Any = "all-linear" if targets == ("all-linear",) else (list(targets) or None)
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=target_modules))
    layer = next(m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == 2)[0]
    calls = [0]

    def count(*_: Any) -> None:
        calls[0] += 1

    hooks = [m.register_forward_pre_hook(count) for m in layer.modules()]
    model(input_ids=torch.randint(0, 300, (1, 8)))
    for h in hooks:
        h.remove()
    return calls[0]


@pytest.mark.parametrize(
    ("arch", "mode", "targets"),
    [
        ("llama", "full", ()),
        ("llama", "lora", ()),
        ("llama", "lora", ("all-linear",)),
        ("llama", "lora", ("k_proj", "down_proj")),
        ("qwen2", "lora", ()),
        ("gpt2", "full", ()),
        ("gpt2", "lora", ()),
        ("gpt_neox", "full", ()),
        ("gpt_neox", "lora", ("all-linear",)),
    ],
)
def test_module_calls_per_layer_are_what_the_real_model_makes(
    arch: str, mode: str, targets: tuple[str, ...]
) -> None:
    spec = ft.with_finetune(
        spec_from_config(TINY[arch], name=arch, source="test"),
        make_finetune(mode, rank=4, targets=",".join(targets)),
    )
    assert module_calls_per_layer(spec) == _calls_in_one_layer(TINY[arch], mode, targets)


def test_hook_time_scales_with_the_calls_and_nothing_else_does() -> None:
    base = load_model_spec("llama-7b")
    s = Strategy(zero_stage=3, micro_batch_size=1, activation_checkpointing=True)
    full = host_micro_step_seconds(base, s)
    lora = host_micro_step_seconds(ft.with_finetune(base, make_finetune("lora", rank=16)), s)
    every = host_micro_step_seconds(
        ft.with_finetune(base, make_finetune("lora", rank=16, targets="all-linear")), s
    )
    assert lora[STAGE3_HOOKS_PART] == pytest.approx(full[STAGE3_HOOKS_PART] * 21 / 13)
    assert every[STAGE3_HOOKS_PART] == pytest.approx(full[STAGE3_HOOKS_PART] * 41 / 13)
    others = [k for k in full if k != STAGE3_HOOKS_PART]
    assert others and all(lora[k] == full[k] == every[k] for k in others)
    assert module_calls_per_layer(base) == cal.MODULE_CALLS_PER_LAYER_DEFAULT


FETCH = "parameter fetch (PCIe)"


@pytest.mark.parametrize("mbs", [1, 2, 4, 8])
def test_host_time_hides_the_offloaded_fetch_too(mbs: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """More host work a micro-step (LoRA on every linear layer instead of q/v: more hooks) leaves less of the fetch
    exposed, never more; and no step is shorter than its transfers alone."""
    hw = describe("1xH200")
    base = load_model_spec("llama-7b")
    s = Strategy(zero_stage=3, micro_batch_size=mbs, activation_checkpointing=True, offload_param="cpu")
    qv = ft.with_finetune(base, make_finetune("lora", rank=16))
    every = ft.with_finetune(base, make_finetune("lora", rank=16, targets="all-linear"))
    few, many = (dict(estimate_throughput(hw, m, s, 2048).parts) for m in (qv, every))
    assert many[STAGE3_HOOKS_PART] > few[STAGE3_HOOKS_PART]
    assert many.get(FETCH, 0.0) <= few.get(FETCH, 0.0)
    monkeypatch.setattr(cal, "OFFLOAD_FETCH_OVERLAP", 0.0)
    for m, parts in ((qv, few), (every, many)):
        transfers = dict(estimate_throughput(hw, m, s, 2048).parts)[FETCH]
        assert transfers > parts.get(FETCH, 0.0)  # something hides
        assert sum(parts.values()) >= transfers


def test_the_h200_lora_rows_are_predicted_within_their_spread(
    bench_script: Callable[[str], ModuleType],
) -> None:
    """LoRA on a LLaMA-style 7B, ZeRO-3 + checkpointing on one H200 (bench/results/finetune_accuracy-2026-12-06-1gpu-
    param-overlap.json): host-bound at micro-batch 1 without offload (1.14 s a step, predicted 31 % fast before the
    wrappers' hooks were counted), and with the parameters on the CPU a step that hardly moves from micro-batch 1 to
    8 (the fetch behind compute and host time). Within 5 % without offload; within 16 % with it, where the measured
    step at micro-batch 4 (1.83 s) is longer than at 8 (1.78 s)."""
    fa = bench_script("finetune_accuracy")
    doc = json.loads(
        (ROOT / "bench/results/finetune_accuracy-2026-12-06-1gpu-param-overlap.json").read_text()
    )
    hw = describe("1xH200")
    rows = [r for r in doc["rows"] if r.get("status") == "ok" and r.get("strategy")]
    assert len(rows) == 6
    for r in rows:
        s = Strategy.from_dict(r["strategy"])
        predicted = estimate_throughput(hw, fa.Config(**r["config"]).spec(), s, doc["seq_len"]).tokens_per_sec
        error = predicted / r["tokens_per_sec"] - 1
        bound = 0.16 if s.offload_param == "cpu" else 0.05
        assert abs(error) <= bound, (s.offload_param, s.micro_batch_size, error)

"""ZeRO-3's step time by cause (the host's work with stage 3's fetch hooks among it: wizard.planner.throughput.
host_micro_step_seconds / exposed_host_seconds; the gather/partition copies; the stage-3 weight copy-back): the
physics each term claims, the committed H200 rows it is fit to, and bench/fit_zero3.py's contract (calibration.py
holds what it fits; held-out errors per model)."""

from __future__ import annotations

import importlib
import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wizard.hardware.report import HardwareReport
from wizard.model import load_model_spec, spec_from_config
from wizard.planner import calibration as cal
from wizard.planner.throughput import (
    estimate_throughput,
    exposed_host_seconds,
    hbm_bytes_per_s,
    host_micro_step_seconds,
    stage3_copy_seconds,
)
from wizard.strategy import Strategy

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # _common: the bench's model configs
from _common import PYTHIA_1B as PYTHIA_1B_CONFIG  # noqa: E402

# The H200 the committed rows were measured on, as the bench recorded it (16 host cores, PCIe 5, 4.8 TB/s).
ONE_H200 = HardwareReport.from_dict(
    json.loads((ROOT / "bench/results/plan_accuracy-2026-12-01-1gpu-zero3-a.json").read_text())["hardware"]
)
LLAMA_1B = load_model_spec(
    "type=llama,name=llama-1b,layers=22,hidden=2048,heads=32,kv_heads=4,ffn=5632,vocab=32000,seq=2048"
)
MODELS = {
    "gpt2-medium": load_model_spec("gpt2-medium"),
    "llama-1b": LLAMA_1B,
    "llama-7b": load_model_spec("llama-7b"),
}
SEQ = 1024


def _parts(model: Any, s: Strategy) -> dict[str, float]:
    return dict(estimate_throughput(ONE_H200, model, s, SEQ).parts)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(sorted(MODELS)),
    mbs=st.integers(1, 64),
    ckpt=st.booleans(),
    offload=st.sampled_from(["none", "cpu"]),
)
def test_stage3_never_beats_stage2_on_one_gpu(name: str, mbs: int, ckpt: bool, offload: str) -> None:
    """One GPU shards nothing: stage 3 does stage 2's work plus its fetches, so it is never faster."""
    base = Strategy(
        zero_stage=2,
        micro_batch_size=mbs,
        activation_checkpointing=ckpt,
        offload_optimizer=offload,  # type: ignore[arg-type]
    )
    z2 = estimate_throughput(ONE_H200, MODELS[name], base, SEQ)
    z3 = estimate_throughput(ONE_H200, MODELS[name], replace(base, zero_stage=3), SEQ)
    assert z3.tokens_per_sec < z2.tokens_per_sec


def test_host_work_hides_behind_the_gpu_as_the_micro_batch_grows() -> None:
    """The hooks are host time: exposed in full when the GPU has nothing queued, less and less as each micro-step's
    GPU work grows; never more than the host's work itself, never negative."""
    host = host_micro_step_seconds(LLAMA_1B, Strategy(zero_stage=3, micro_batch_size=1))
    total = sum(host.values())
    exposed = [sum(exposed_host_seconds(gpu, host).values()) for gpu in (0.0, 0.01, 0.1, 0.3, 1.0, 3.0)]
    assert exposed[0] == pytest.approx(total)
    assert all(0.0 <= b <= a <= total * (1 + 1e-12) for a, b in itertools.pairwise(exposed))
    assert exposed[-1] < 0.01 * total
    # what is exposed is shared out by cause: the hooks keep their share of the host's work
    split = exposed_host_seconds(0.1, host)
    assert split["ZeRO-3 fetch hooks"] / sum(split.values()) == pytest.approx(
        host["ZeRO-3 fetch hooks"] / total
    )


def test_recompute_fires_the_forward_hooks_again() -> None:
    plain = host_micro_step_seconds(LLAMA_1B, Strategy(zero_stage=3))
    again = host_micro_step_seconds(LLAMA_1B, Strategy(zero_stage=3, activation_checkpointing=True))
    assert again["ZeRO-3 fetch hooks"] == pytest.approx(
        plain["ZeRO-3 fetch hooks"] * (1 + cal.STAGE3_RECOMPUTE_HOOK_SHARE)
    )
    framework = "host-bound (framework Python)"
    assert again[framework] == pytest.approx(plain[framework] * (1 + cal.HOST_RECOMPUTE_SHARE))
    assert "ZeRO-3 fetch hooks" not in host_micro_step_seconds(LLAMA_1B, Strategy(zero_stage=2))


def test_gather_copies_grow_with_parameters_and_shrink_with_bandwidth() -> None:
    s = Strategy(zero_stage=3)
    small = stage3_copy_seconds(LLAMA_1B, s, 4.8e12)
    big = stage3_copy_seconds(MODELS["llama-7b"], s, 4.8e12)
    slow_hbm = stage3_copy_seconds(LLAMA_1B, s, 2.4e12)
    assert big / small == pytest.approx(MODELS["llama-7b"].total_params / LLAMA_1B.total_params, rel=0.05)
    assert slow_hbm == pytest.approx(2 * small)


def test_a_small_micro_batch_of_a_1b_model_is_host_bound() -> None:
    """Micro-batch 1 of llama-1b at seq 2048 on the H200 took 0.157 s a step, micro-batch 2 0.175 s, 4 0.211 s
    (bench/results/plan_accuracy-2026-12-01-1gpu-sweep.json, -12-02-1gpu-heldout.json): the host's Python sets
    the pace below micro-batch ~4, the GPU's work above it."""
    seconds = {
        b: estimate_throughput(
            ONE_H200, LLAMA_1B, Strategy(zero_stage=1, micro_batch_size=b), 2048
        ).step_seconds
        for b in (1, 2, 4, 16)
    }
    for b, measured in ((1, 0.157), (2, 0.175), (4, 0.211), (16, 0.633)):
        assert seconds[b] == pytest.approx(measured, rel=0.10), b
    parts = dict(
        estimate_throughput(ONE_H200, LLAMA_1B, Strategy(zero_stage=1, micro_batch_size=1), 2048).parts
    )
    assert parts["host-bound (framework Python)"] > 0.02


def test_pageable_copy_back_only_with_the_optimizer_offloaded_and_the_weights_on_the_gpu() -> None:
    """Stage 3 writes the updated weights back with a blocking fp32 -> 16-bit copy_: pageable into a GPU partition,
    host-only into offloaded parameters; stages 1-2 go through a pinned buffer (their PCIe copies)."""
    opt = Strategy(zero_stage=3, offload_optimizer="cpu", micro_batch_size=16, activation_checkpointing=True)
    both = replace(opt, offload_param="cpu")
    z2 = replace(opt, zero_stage=2)
    key = "16-bit weights back (pageable)"
    assert _parts(LLAMA_1B, opt)[key] == pytest.approx(
        2 * LLAMA_1B.total_params / cal.STAGE3_PAGEABLE_COPY_BYTES_PER_SECOND
    )
    assert key not in _parts(LLAMA_1B, both)
    assert key not in _parts(LLAMA_1B, z2)
    assert key not in _parts(LLAMA_1B, replace(opt, offload_optimizer="none"))
    # What the H200 rows show: offloading the parameters too makes stage 3 + optimizer offload faster.
    fast = estimate_throughput(ONE_H200, LLAMA_1B, both, SEQ).tokens_per_sec
    assert fast > estimate_throughput(ONE_H200, LLAMA_1B, opt, SEQ).tokens_per_sec


PYTHIA_1B = spec_from_config(PYTHIA_1B_CONFIG, name="pythia-1b", source="test")


@settings(max_examples=30, deadline=None, derandomize=True)
@given(mbs=st.integers(1, 32), ckpt=st.booleans(), stage=st.sampled_from([0, 1, 2, 3]))
def test_zero3_linear_adds_biases_in_a_kernel_of_its_own(mbs: int, ckpt: bool, stage: int) -> None:
    """Only stage 3 (its LinearFunctionForZeroStage3) pays for a biased model's bias adds: a read and a write of each
    biased output per token and forward, again in the recomputed forward; the same model without biases, and every
    stage below 3, pay nothing."""
    s = Strategy(zero_stage=stage, micro_batch_size=mbs, activation_checkpointing=ckpt)
    unbiased = replace(PYTHIA_1B, linear_bias_outputs=0)
    extra = (
        _parts(PYTHIA_1B, s)["element-wise (memory-bound)"]
        - _parts(unbiased, s)["element-wise (memory-bound)"]
    )
    if stage < 3:
        assert extra == 0
        return
    forwards = 2 if ckpt else 1
    bytes_per_token = forwards * 2 * 2 * PYTHIA_1B.layers * PYTHIA_1B.linear_bias_outputs
    assert extra == pytest.approx(mbs * SEQ * bytes_per_token / hbm_bytes_per_s(ONE_H200.gpus[0]))
    assert PYTHIA_1B.linear_bias_outputs == 4 * 2048 + 8192 + 2048  # QKV, dense; MLP in and out


@settings(max_examples=30, deadline=None, derandomize=True)
@given(name=st.sampled_from(sorted(MODELS)), mbs=st.integers(1, 63), ckpt=st.booleans())
def test_stage3_tokens_per_second_never_fall_with_the_micro_batch(name: str, mbs: int, ckpt: bool) -> None:
    s = Strategy(zero_stage=3, micro_batch_size=mbs, activation_checkpointing=ckpt)
    a = estimate_throughput(ONE_H200, MODELS[name], s, SEQ).tokens_per_sec
    b = estimate_throughput(ONE_H200, MODELS[name], replace(s, micro_batch_size=mbs + 1), SEQ).tokens_per_sec
    assert b >= a * (1 - 1e-9)


# ---- the committed H200 rows and bench/fit_zero3.py


@pytest.fixture(scope="module")
def fz() -> ModuleType:
    sys.path.insert(0, str(ROOT / "bench"))  # a script, not a package: imported as bench/ runs it
    return importlib.import_module("fit_zero3")


@pytest.fixture(scope="module")
def refit(fz: ModuleType) -> dict[str, Any]:
    return fz.run()


# Configs the model does not reach within 10 % at the median of their readings (bench/results/zero3_refit-2026-12-06.md):
# gpt2-xl with both offloads (four readings, 7.9k-9.8k tokens/s; +11 %: its fetch counted hidden behind the compute,
# as LoRA on a 7B and llama-1b/3b with both offloads show), and two configs at four micro-steps per optimizer step,
# whose micro-steps ran faster than at one (llama-7b ZeRO-3 + checkpointing: 0.71 s against 0.96 s, -12 %) or
# slower (gpt2-xl ZeRO-3 + optimizer offload, +19 %).
NOT_REACHED = {
    "gpt2-xl z3+opt:cpu+param:cpu+ckpt mbs16",
    "gpt2-xl z3+opt:cpu+ckpt mbs16 seq1024 ga4",
    "llama-7b z3+ckpt mbs4 seq1024 ga4",
}


def test_committed_h200_zero3_rows_within_ten_percent(refit: dict[str, Any]) -> None:
    errs = {k: v["error"] for k, v in refit["rows"].items()}
    assert len(errs) >= 20
    assert {k for k, e in errs.items() if abs(e) > 0.10} <= NOT_REACHED
    assert refit["overall_now"]["median_abs"] <= 0.05  # 2.8 % over 35 configs (6.5 % over 22 before)
    assert refit["overall_now"]["max_abs"] <= 0.20


def test_calibration_holds_what_the_fit_finds(refit: dict[str, Any]) -> None:
    """calibration.py is the fit, rounded: refitting from it moves no constant by more than a few per cent."""
    for name, committed in refit["constants_committed"].items():
        assert refit["constants_fit"][name] == pytest.approx(committed, rel=0.05), name


def test_held_out_fit_per_model_and_stage_0_2_untouched(refit: dict[str, Any]) -> None:
    """Every model is held out once (its rows scored with constants fit on the others), and the stage 3 terms do
    not move a single stage 0-2 prediction."""
    models = {label.split(" ")[0] for label in refit["rows"]}
    assert set(refit["held_out"]) == models
    for h in refit["held_out"].values():
        assert h["errors"] and all(math.isfinite(e) for e in h["errors"].values())
    assert refit["stage0_2_rows"] > 50
    assert refit["stage0_2_max_change"] == 0.0

"""The throughput model: FLOPs per token (PaLM, arXiv:2204.02311), the H200 measurements it is calibrated on, and
properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wizard.hardware.report import GPUInfo, HardwareReport, HostInfo
from wizard.model import load_model_spec
from wizard.planner.buffers import ZeroBuffers
from wizard.planner.throughput import (
    FRAMEWORK_HOST_PART,
    STAGE0_PART,
    STEP_PARTS,
    estimate_throughput,
    flop_params,
    flops_per_token,
    offload_gradient_transfers,
    peak_flops,
)
from wizard.strategy import Strategy

H200 = GPUInfo(
    index=0,
    name="NVIDIA H200",
    memory_total_bytes=143771 * 1024**2,
    compute_capability=(9, 0),
    peak_tflops_bf16=989.4,
    memory_bandwidth_gbs=4800.0,
    nvlink_gbs=900.0,
    pcie_gen=5,
)
ONE_H200 = HardwareReport(source="described", gpus=(H200,), host=HostInfo(logical_cores=16))
GPT2_MEDIUM = load_model_spec("gpt2-medium")

# The earlier readings of docs/measurements.md ("Throughput"; one H200, DeepSpeed's FusedAdam), GPT-2-medium, seq 1024,
# bf16: (stage, optimizer offload, micro-batch, tokens/s). The throughput constants are fit to the bench runs, the
# first of which (below) measured four of these configs slower: stage 0 mbs 8 51,998 (earlier 55,130), stage 1 mbs
# 16 76,555 (77,982), stage 2 mbs 8 54,162 (61,858; stage 1, the same work on one GPU, 57,139), stage 3 mbs 8 25,168
# (35,468). Since the optimizer step is fit to its own timed phase (wizard/planner/calibration.py), stage 1 at
# micro-batch 16 comes within 5 % of its earlier figure again (stages 0 and 2 at 8 within 5.5-6.3 %).
_NOT_REPRODUCED = (
    "bench/results/plan_accuracy-2026-11-30-1gpu.json measured this config slower than the earlier reading"
)
EARLIER_THROUGHPUT = [
    (0, "none", 8, 55_130),
    (1, "none", 16, 77_982),
    (2, "none", 8, 61_858),
    (2, "cpu", 8, 25_775),
    (3, "none", 8, 35_468),
]
_EARLIER_NOT_REPRODUCED = {(0, "none", 8), (2, "none", 8), (3, "none", 8)}
BENCH_RUN = Path(__file__).resolve().parents[2] / "bench" / "results" / "plan_accuracy-2026-11-30-1gpu.json"


@pytest.mark.parametrize(
    ("stage", "offload", "mbs", "measured"),
    [
        pytest.param(*row, marks=pytest.mark.xfail(strict=True, reason=_NOT_REPRODUCED))
        if row[:3] in _EARLIER_NOT_REPRODUCED
        else row
        for row in EARLIER_THROUGHPUT
    ],
)
def test_reproduces_the_h200_tokens_per_second(stage: int, offload: str, mbs: int, measured: float) -> None:
    s = Strategy(zero_stage=stage, offload_optimizer=offload, micro_batch_size=mbs)  # type: ignore[arg-type]
    t = estimate_throughput(ONE_H200, GPT2_MEDIUM, s, 1024)
    assert t.tokens_per_sec == pytest.approx(measured, rel=0.05)


def test_reproduces_the_bench_run() -> None:
    """The 59 ok rows of the H200 bench run the constants were fit to (GPT-2 124M-1.5B, stages 0-3, CPU offload,
    checkpointing, micro-batch 8-128): median error under 3 %, every row within 20 %."""
    doc = json.loads(BENCH_RUN.read_text())
    hw = HardwareReport.from_dict(doc["hardware"])
    errors = []
    for r in doc["rows"]:
        if r["status"] != "ok":
            continue
        c = r["config"]
        s = Strategy(
            zero_stage=c["zero_stage"],
            offload_optimizer=c["offload_optimizer"],
            offload_param=c["offload_param"],
            micro_batch_size=c["micro_batch"],
            activation_checkpointing=c["checkpointing"],
        )
        predicted = estimate_throughput(hw, load_model_spec(c["model"]), s, r["seq_len"]).tokens_per_sec
        errors.append(abs(predicted / r["tokens_per_sec"] - 1))
    assert len(errors) == 59
    assert sorted(errors)[len(errors) // 2] < 0.03
    assert max(errors) < 0.20


def test_the_ranking_of_the_measurements_is_kept() -> None:
    # docs/measurements.md: on one GPU the lowest stage and largest micro-batch that fit win; offload and stage 3
    # cost 2-3x.
    speed = {
        (stage, off, mbs): estimate_throughput(
            ONE_H200,
            GPT2_MEDIUM,
            Strategy(zero_stage=stage, offload_optimizer=off, micro_batch_size=mbs),
            1024,  # type: ignore[arg-type]
        ).tokens_per_sec
        for stage, off, mbs, _ in EARLIER_THROUGHPUT
    }
    measured = {(stage, off, mbs): m for stage, off, mbs, m in EARLIER_THROUGHPUT}
    assert sorted(speed, key=speed.__getitem__) == sorted(measured, key=measured.__getitem__)


def test_flops_per_token_follow_palm() -> None:
    m = GPT2_MEDIUM
    n = m.total_params - 1024 * m.hidden  # position embeddings are a lookup, the tied head is a matmul
    assert flop_params(m) == n
    attn = m.layers * m.hidden * 1024
    assert flops_per_token(m, 1024) == 6 * n + 12 * attn
    assert flops_per_token(m, 1024, recompute=True) == 8 * n + 16 * attn
    assert flops_per_token(m, 1024, mode="inference") == 2 * n + 4 * attn
    moe = load_model_spec("mixtral-8x7b")
    assert flops_per_token(moe, 1) < 6 * moe.total_params / 3  # active, not total, parameters


def test_mfu_is_tokens_times_flops_over_peak() -> None:
    s = Strategy(zero_stage=2, micro_batch_size=8)
    t = estimate_throughput(ONE_H200, GPT2_MEDIUM, s, 1024)
    assert t.mfu == pytest.approx(t.tokens_per_sec * flops_per_token(GPT2_MEDIUM, 1024) / 989.4e12)
    assert t.peak_source == "catalog"


def test_peak_falls_back_to_compute_capability_then_to_an_assumption() -> None:
    gpu = GPUInfo(index=0, name="x", compute_capability=(8, 0))
    assert peak_flops(gpu, "bf16") == (312e12, "compute capability")
    assert peak_flops(GPUInfo(index=0, name="y"), "bf16")[1] == "assumed"


def _cluster(nodes: int, gbps: float | None) -> HardwareReport:
    return HardwareReport(source="described", gpus=(H200,) * 8, nodes=nodes, inter_node_gbps=gbps)


def test_a_slower_network_costs_throughput_and_zeropp_wins_some_back() -> None:
    m = load_model_spec("llama-13b")
    s = Strategy(zero_stage=3, micro_batch_size=2, nodes=4, gpus_per_node=8)
    fast = estimate_throughput(_cluster(4, 400), m, s, 2048).tokens_per_sec
    slow = estimate_throughput(_cluster(4, 25), m, s, 2048).tokens_per_sec
    zpp = s.with_(zero_quantized_weights=True, zero_quantized_gradients=True, zero_hpz_partition_size=8)
    slow_zpp = estimate_throughput(_cluster(4, 25), m, zpp, 2048).tokens_per_sec
    assert slow < fast
    assert slow < slow_zpp <= fast * 1.001


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["gpt2", "gpt2-xl", "llama-7b", "mixtral-8x7b"]),
    st.integers(0, 3),
    st.integers(1, 64),
    st.integers(1, 4),
    st.sampled_from([1, 2, 8]),
    st.integers(1, 4),
)
def test_properties(name: str, stage: int, mbs: int, gas: int, gpn: int, nodes: int) -> None:
    m = load_model_spec(name)
    hw = HardwareReport(source="described", gpus=(H200,) * gpn, nodes=nodes, host=HostInfo(logical_cores=64))
    s = Strategy(
        zero_stage=stage,
        micro_batch_size=mbs,
        gradient_accumulation_steps=gas,
        gpus_per_node=gpn,
        nodes=nodes,
    )
    t = estimate_throughput(hw, m, s, 1024)
    assert t.tokens_per_sec > 0 and 0 < t.mfu < 1
    assert t.step_seconds == pytest.approx(sum(v for _, v in t.parts))
    # A bigger micro-batch amortises the fixed costs: never slower.
    assert (
        estimate_throughput(hw, m, s.with_(micro_batch_size=mbs + 1), 1024).tokens_per_sec >= t.tokens_per_sec
    )
    if stage >= 1:
        # Offloading the optimizer to the CPU never makes a step faster.
        off = estimate_throughput(hw, m, s.with_(offload_optimizer="cpu"), 1024)
        assert off.tokens_per_sec <= t.tokens_per_sec
    # Recomputing activations never makes a step faster.
    assert (
        estimate_throughput(hw, m, s.with_(activation_checkpointing=True), 1024).tokens_per_sec
        <= t.tokens_per_sec
    )


@settings(max_examples=40, deadline=None)
@given(
    stage=st.sampled_from([0, 1, 2, 3]),
    gas=st.integers(2, 16),
    mbs=st.integers(1, 32),
    offload=st.sampled_from(["none", "cpu"]),
)
def test_the_optimizer_step_is_paid_once_per_optimizer_step(
    stage: int, gas: int, mbs: int, offload: str
) -> None:
    """On one GPU an optimizer step of ``gas`` micro-steps is ``gas`` micro-steps plus one optimizer update: what
    DeepSpeed's step does (the update, CPU Adam, the weights written back, stage 0's bf16 wrapper) does not grow with
    accumulation, every other part does (the host's less at stages 0-1, which reduce at the boundary only) -- as the H200 readings at 4-8 micro-steps per step showed (docs/measurements.md)."""
    offload = offload if stage >= 1 else "none"  # DeepSpeed offloads the optimizer at stages 1-3 only
    one = Strategy(zero_stage=stage, micro_batch_size=mbs, offload_optimizer=offload)  # type: ignore[arg-type]
    a = dict(estimate_throughput(ONE_H200, GPT2_MEDIUM, one, 1024).parts)
    b = dict(
        estimate_throughput(ONE_H200, GPT2_MEDIUM, one.with_(gradient_accumulation_steps=gas), 1024).parts
    )
    assert a.keys() == b.keys()
    for name in a:
        if name in STEP_PARTS or name == STAGE0_PART:
            assert b[name] == pytest.approx(a[name]), name
        elif name == FRAMEWORK_HOST_PART and stage <= 1:
            # stages 0-1 reduce at the boundary only: the micro-steps before it do less on the host
            assert a[name] <= b[name] <= gas * a[name] * (1 + 1e-12), name
            if gas > 1 and a[name] > 0:
                assert b[name] < gas * a[name], name
        elif name == "PCIe copies":
            # the weights come back once per step; the gradients go to the host once per step at stage 1 (it reduces
            # only at the boundary), and stages 2-3 carry the running sum in and out every further micro-step
            # (throughput.offload_gradient_transfers; ZeRO-3's behind the compute)
            if stage == 1:
                assert b[name] == pytest.approx(a[name])
            elif stage == 2:
                assert a[name] < b[name] <= offload_gradient_transfers(stage, gas) * a[name] * (1 + 1e-12)
            else:
                assert a[name] <= b[name]
        else:
            assert b[name] == pytest.approx(gas * a[name]), name
    assert a["optimizer step"] > 0


def test_stage_0_pays_its_16_bit_wrapper_once_per_optimizer_step() -> None:
    """DeepSpeed wraps a 16-bit stage-0 optimizer (fp16 and bf16 alike: FP16_UnfusedOptimizer) at a fixed time a step;
    the micro-steps of an accumulating step take what they take at one (llama-1b at micro-batch 4: 0.154 s forward +
    backward at 1 and at 4). fp32 and the ZeRO stages have no such wrapper."""
    bf16 = Strategy(zero_stage=0, micro_batch_size=4, precision="bf16")
    for s in (bf16, bf16.with_(precision="fp16")):
        parts = dict(estimate_throughput(ONE_H200, GPT2_MEDIUM, s, 1024).parts)
        four = dict(
            estimate_throughput(ONE_H200, GPT2_MEDIUM, s.with_(gradient_accumulation_steps=4), 1024).parts
        )
        assert parts[STAGE0_PART] > 0 and four[STAGE0_PART] == parts[STAGE0_PART]
    for other in (bf16.with_(precision="fp32"), bf16.with_(zero_stage=1)):
        assert STAGE0_PART not in dict(estimate_throughput(ONE_H200, GPT2_MEDIUM, other, 1024).parts)


FUSED_RUN = (
    Path(__file__).resolve().parents[2]
    / "bench"
    / "results"
    / "plan_accuracy-2026-12-05-1gpu-phases-fused.json"
)


FUSED_RUN_MODELS = {  # as bench/plan_accuracy.py builds them (BENCH_MODELS)
    "llama-3b": "type=llama,name=llama-3b,layers=26,hidden=3200,heads=32,ffn=8640,vocab=32000,seq=2048",
    "gpt2-xl": "gpt2-xl",
}


def test_deepspeeds_fused_adam_steps_stage_0_by_its_own_figures() -> None:
    """A config that makes DeepSpeed build its FusedAdam steps stage 0 through FP16_Optimizer: casts per tensor,
    the rest over one flat buffer. Its step phase, timed on one H200 (llama-3b 0.088 s, gpt2-xl 0.092 s), is what
    the planner's step parts say; FP16_UnfusedOptimizer's per-tensor figure would say 0.098 s and 0.134 s."""
    doc = json.loads(FUSED_RUN.read_text())
    hw = HardwareReport.from_dict(doc["hardware"])
    rows = [r for r in doc["rows"] if r["status"] == "ok"]
    assert [r["config"]["model"] for r in rows] == ["llama-3b", "gpt2-xl"]
    for r in rows:
        c = r["config"]
        assert c["optimizer"] == "ds-fused" and c["zero_stage"] == 0
        model = load_model_spec(FUSED_RUN_MODELS[c["model"]])
        s = Strategy(zero_stage=0, micro_batch_size=c["micro_batch"])
        fused = dict(
            estimate_throughput(hw, model, s, r["seq_len"], buffers=ZeroBuffers(fused_optimizer=True)).parts
        )
        unfused = dict(estimate_throughput(hw, model, s, r["seq_len"]).parts)
        measured = sorted(r["phase_s"]["step"])[1:3]
        step = sum(fused.get(k, 0.0) for k in STEP_PARTS)
        assert step == pytest.approx(sum(measured) / 2, rel=0.05), c["model"]
        assert sum(unfused.get(k, 0.0) for k in STEP_PARTS) > step


def test_the_fused_optimizer_changes_only_stage_0s_16_bit_step() -> None:
    """FusedAdam is DeepSpeed's optimizer at every stage, but only stage 0 in 16 bits steps through a wrapper
    whose work depends on it; stages 1-3 and fp32 are timed as before."""
    fused = ZeroBuffers(fused_optimizer=True)
    for s in (
        Strategy(zero_stage=1, micro_batch_size=8),
        Strategy(zero_stage=3, micro_batch_size=8),
        Strategy(zero_stage=0, micro_batch_size=8, precision="fp32"),
    ):
        a = estimate_throughput(ONE_H200, GPT2_MEDIUM, s, 1024)
        b = estimate_throughput(ONE_H200, GPT2_MEDIUM, s, 1024, buffers=fused)
        assert a.parts == b.parts, s

"""Gradient accumulation with the optimizer on the CPU: the pinned host buffers ZeRO-2 keeps the running sum in
(host_memory.offload_accumulation_bytes) and the PCIe transfers each stage makes a step
(throughput.offload_gradient_transfers), held to the H200 rows of bench/plan_accuracy.py --family accum."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from wizard.hardware.described import describe
from wizard.hardware.report import HardwareReport
from wizard.model import load_model_spec
from wizard.planner.finetune import trainable_tensors
from wizard.planner.host_memory import host_bytes, offload_accumulation_bytes, pinned_bytes
from wizard.planner.memory import estimate_memory
from wizard.planner.throughput import _optimizer_seconds, estimate_throughput, offload_gradient_transfers
from wizard.strategy import Strategy

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
ACCUM = RESULTS / "plan_accuracy-2026-12-03-1gpu-accum-accum-b.json"


def _offload_rows() -> tuple[dict, dict, HardwareReport]:  # type: ignore[type-arg]
    doc = json.loads(ACCUM.read_text())
    rows = [r for r in doc["rows"] if r["config"]["offload_optimizer"] == "cpu" and r["status"] == "ok"]
    by_gas = {r["config"]["grad_accum"]: r for r in rows}
    return by_gas[1], by_gas[4], HardwareReport.from_dict(doc["hardware"])


def test_pinned_blocks_round_up_to_a_power_of_two() -> None:
    assert [pinned_bytes(n) for n in (0, 1, 2, 3, 1024, 1025)] == [0, 1, 2, 4, 1024, 2048]


def test_the_accumulation_buffers_are_what_the_host_pinned_more(
    bench_script: Callable[[str], ModuleType],
) -> None:
    # llama-1b, ZeRO-2 + CPU optimizer offload + checkpointing, micro-batch 32 under 24 GiB: 4 micro-steps a step
    # pinned 2.70 GiB more than 1 (torch.cuda.host_memory_stats peak), and the process peaked 2.7 GiB higher.
    pa = bench_script("plan_accuracy")
    one, four, _ = _offload_rows()
    spec = pa.bench_spec("llama-1b")
    s1 = pa._cfg(one).strategy(1)
    s4 = pa._cfg(four).strategy(1)
    assert s1.gradient_accumulation_steps == 1 and s4.gradient_accumulation_steps == 4
    measured = four["host_pinned_peak"] - one["host_pinned_peak"]
    predicted = offload_accumulation_bytes(spec, s4)
    assert predicted == pytest.approx(measured, rel=0.02)
    assert offload_accumulation_bytes(spec, s1) == 0
    assert host_bytes(spec, s4)[0] - host_bytes(spec, s1)[0] == predicted
    rss = four["host_rss_peak"] - one["host_rss_peak"]
    assert predicted == pytest.approx(rss, rel=0.05)


def test_held_out_qwen2_pinned_what_the_rule_says(bench_script: Callable[[str], ModuleType]) -> None:
    # Qwen2-1.5B ZeRO-2 + offload + checkpointing, micro-batch 4 under 24 GiB, seq 2048: 20.50 GiB pinned at one
    # micro-step in every earlier run (bench/results/plan_accuracy-2026-12-02-1gpu-heldout-recs.json), 24.12 at 4.
    pa = bench_script("plan_accuracy")
    doc = json.loads((RESULTS / "plan_accuracy-2026-12-04-1gpu-accum-accum-offload.json").read_text())
    four = next(r for r in doc["rows"] if r["config"]["model"] == "qwen2-1.5b")
    base = json.loads((RESULTS / "plan_accuracy-2026-12-02-1gpu-heldout-recs.json").read_text())
    one = next(
        r
        for r in base["rows"]
        if r["config"]["model"] == "qwen2-1.5b"
        and r["config"]["offload_optimizer"] == "cpu"
        and r["config"]["micro_batch"] == 4
    )
    predicted = offload_accumulation_bytes(pa.bench_spec("qwen2-1.5b"), pa._cfg(four).strategy(1))
    assert predicted == pytest.approx(four["host_pinned_peak"] - one["host_pinned_peak"], rel=0.02)


def test_only_zero2_with_the_optimizer_on_the_cpu_keeps_them(
    bench_script: Callable[[str], ModuleType],
) -> None:
    pa = bench_script("plan_accuracy")
    spec = pa.bench_spec("llama-1b")
    base = pa._cfg(_offload_rows()[1]).strategy(1)
    assert offload_accumulation_bytes(spec, base) > 0
    # ZeRO-1 reduces once, at the boundary: Pythia-1.4B pinned 20.25 GiB at 4 micro-steps, 20.3 at 1
    assert offload_accumulation_bytes(spec, replace(base, zero_stage=1)) == 0
    assert offload_accumulation_bytes(spec, replace(base, zero_stage=3)) == 0
    assert offload_accumulation_bytes(spec, replace(base, offload_optimizer="none")) == 0


def test_transfers_per_step_follow_where_each_stage_accumulates() -> None:
    # ZeRO-1 reduces once, at the boundary; ZeRO-2 copies every micro-step out, the sum back in after the first,
    # and the result into the fp32 gradients; ZeRO-3 copies the partitions in and out again after the first.
    gas = (1, 2, 4, 8)
    assert [offload_gradient_transfers(1, g) for g in gas] == [1, 1, 1, 1]
    assert [offload_gradient_transfers(2, g) for g in gas] == [1, 4, 8, 16]
    assert [offload_gradient_transfers(3, g) for g in gas] == [1, 3, 7, 15]


def test_zero3_round_trips_hide_only_behind_what_the_reduce_stream_has_left() -> None:
    # The boundary's copy stays in the step; the 2 x (steps - 1) round trips cost nothing behind enough spare
    # compute, and all of their time behind none (what the collectives of several GPUs may leave).
    spec = load_model_spec("llama-7b")
    one = Strategy(zero_stage=3, offload_optimizer="cpu", micro_batch_size=4)
    four = one.with_(gradient_accumulation_steps=4)
    hw, pcie = describe("1xH200"), 25e9
    pcie_part = {
        (s.gradient_accumulation_steps, hidden): _optimizer_seconds(hw, spec, s, 4.8e12, pcie, hidden)[
            "PCIe copies"
        ]
        for s in (one, four)
        for hidden in (0.0, 100.0)
    }
    transfer = one.weight_bytes * spec.total_params / pcie
    assert pcie_part[(1, 0.0)] == pytest.approx(transfer) == pcie_part[(1, 100.0)]
    assert pcie_part[(4, 100.0)] == pytest.approx(transfer)
    assert pcie_part[(4, 0.0)] == pytest.approx(7 * transfer)


def test_moe_experts_round_up_stack_by_stack() -> None:
    # Mixtral's experts are two 3-D tensors per layer (transformers 5): each rounds up on its own, and nothing of
    # the model is left to round as one block.
    spec = load_model_spec("mixtral-8x7b")
    tensors, rest = trainable_tensors(spec)
    assert rest < 1e-5 * spec.total_params
    assert sum(count for _, count in tensors) > 3 * spec.moe_layers  # experts listed layer by layer
    s = Strategy(zero_stage=2, offload_optimizer="cpu", micro_batch_size=1, gradient_accumulation_steps=4)
    pinned = offload_accumulation_bytes(spec, s)
    assert 2 * spec.total_params < pinned < 1.2 * 2 * spec.total_params


def test_accumulating_with_offload_is_predicted_at_its_measured_speed(
    bench_script: Callable[[str], ModuleType],
) -> None:
    # llama-1b ZeRO-2 (the pair above: 35,189 tokens/s at 4 micro-steps, 25,231 at 1; one transfer per micro-step put
    # the first 8.6 % too fast), and the run of 2026-12-04: ZeRO-1 of Pythia-1.4B and ZeRO-2 of Qwen2-1.5B at 4,
    # ZeRO-3 of llama-1b at 4 and 1. The first cut (every stage round-tripping) put ZeRO-1 19 % and ZeRO-3 16 % slow.
    # Within issue 19's 10 % per config: the stage-3 refit of 2026-12-06 (bench/results/zero3_refit-2026-12-06.md,
    # more hook time per layer and micro-step, a slower copy-back) puts ZeRO-3 at 4 micro-steps 9.4 % slow (6.8 % before).
    pa = bench_script("plan_accuracy")
    one, four, hw = _offload_rows()
    doc = json.loads((RESULTS / "plan_accuracy-2026-12-04-1gpu-accum-accum-offload.json").read_text())
    rows = [one, four, *(r for r in doc["rows"] if r["status"] == "ok")]
    assert len(rows) == 6
    for row in rows:
        s = pa._cfg(row).strategy(1)
        predicted = estimate_throughput(
            hw, pa.bench_spec(row["config"]["model"]), s, row["seq_len"]
        ).tokens_per_sec
        assert predicted == pytest.approx(row["tokens_per_sec"], rel=0.10), pa._label(row)


def test_zero1_keeps_its_reduce_bucket_between_micro_steps(bench_script: Callable[[str], ModuleType]) -> None:
    # Stage 1 frees the bucket its backward allocates only when it reduces, at the boundary: llama-1b at 8
    # micro-steps and Pythia-1.4B (offloaded) at 4 peaked 0.93-1.0 GiB above the prediction without it.
    pa = bench_script("plan_accuracy")
    rows = []
    for name in (
        "plan_accuracy-2026-12-03-1gpu-accum-accum-b.json",
        "plan_accuracy-2026-12-04-1gpu-accum-accum-offload.json",
    ):
        doc = json.loads((RESULTS / name).read_text())
        rows += [r for r in doc["rows"] if r["config"]["zero_stage"] == 1 and r["config"]["grad_accum"] > 1]
    assert len(rows) == 2
    for row in rows:
        s = pa._cfg(row).strategy(1)
        mem = estimate_memory(pa.bench_spec(row["config"]["model"]), s, row["seq_len"])
        assert mem.allocated == pytest.approx(row["max_allocated"], rel=0.01), pa._label(row)
        assert dict(mem.gpu_items)["reduce bucket (kept across micro-steps)"] > 0


def test_an_offload_plan_says_what_accumulating_would_give(bench_script: Callable[[str], ModuleType]) -> None:
    """Qwen2-1.5B ZeRO-2 + CPU offload + checkpointing at micro-batch 4 under 24 GiB ran 7,363 tokens/s at one
    micro-step per optimizer step and 14,113 at four (CPU Adam once per four): a plan that sizes one micro-step says
    so, and prices it with the same model; with a global batch asked for, or without offload, it says nothing."""
    from wizard.planner import PlanRequest, evaluate

    pa = bench_script("plan_accuracy")
    doc = json.loads((RESULTS / "plan_accuracy-2026-12-04-1gpu-accum-accum-offload.json").read_text())
    hw = HardwareReport.from_dict(doc["hardware"])
    (four,) = (r for r in doc["rows"] if r["config"]["model"] == "qwen2-1.5b" and r["status"] == "ok")
    s4 = pa._cfg(four).strategy(1)
    s1 = s4.with_(gradient_accumulation_steps=1)
    spec = pa.bench_spec("qwen2-1.5b")
    request = PlanRequest(seq_len=four["seq_len"])

    def hint(s: Strategy, req: PlanRequest = request) -> list[str]:
        return [r for r in evaluate(hw, spec, s, req).reasons if r.startswith("CPU Adam takes")]

    (text,) = hint(s1)
    one, more = (estimate_throughput(hw, spec, s, four["seq_len"]).tokens_per_sec for s in (s1, s4))
    assert f"(--global-batch 16) would run it once per 4, ~{more:,.0f} tokens/s" in text
    assert more / one == pytest.approx(
        14_113 / 7_363, rel=0.1
    )  # the measured pair, four["tokens_per_sec"] beside it
    assert four["tokens_per_sec"] == pytest.approx(14_112.6)
    assert hint(s4) == [] and hint(s1.with_(offload_optimizer="none")) == []
    assert hint(s1, replace(request, global_batch=4)) == []


def test_no_accumulation_hint_where_accumulating_would_not_fit() -> None:
    """ZeRO-1 keeps its 16-bit gradients between micro-steps: llama-7b with the optimizer offloaded, at the largest
    micro-batch an 80 GiB card holds, needs more at 4 micro-steps than the card gives, so the plan does not suggest
    it (it once did: "--global-batch 180 ... ~3,198 tokens/s")."""
    from wizard.hardware import get_hardware
    from wizard.planner import PlanRequest, plan

    a100 = get_hardware("1xA100-80GB,ram=512GiB")
    llama = load_model_spec("llama-7b")
    ranked = plan(a100, llama, PlanRequest(stages=(1,), seq_len=2048)).candidates
    best = next(c for c in ranked if c.strategy.offload_optimizer == "cpu" and c.fits)
    assert best.strategy.zero_stage == 1 and best.strategy.gradient_accumulation_steps == 1
    assert not [r for r in best.reasons if r.startswith("CPU Adam takes")]
    more = estimate_memory(llama, best.strategy.with_(gradient_accumulation_steps=4), 2048).needed
    assert more > int(80 * 1024**3 * 0.95) >= estimate_memory(llama, best.strategy, 2048).needed


def test_stages_0_1_reduce_only_at_the_boundary(bench_script: Callable[[str], ModuleType]) -> None:
    """llama-1b ZeRO-1 at 8 micro-steps of 2 (host-bound) ran 38.5k and 42.4k tokens/s where every micro-step was
    charged the boundary's reduce (35.3k): the seven before it skip that Python. One micro-step per step, stage 2
    (it reduces in every backward) and a GPU-bound micro-batch keep their figures."""
    from wizard.planner.throughput import FRAMEWORK_HOST_PART, host_before_boundary, host_micro_step_seconds

    pa = bench_script("plan_accuracy")
    doc = json.loads((RESULTS / "plan_accuracy-2026-12-03-1gpu-accum-accum-b.json").read_text())
    hw = HardwareReport.from_dict(doc["hardware"])
    spec = pa.bench_spec("llama-1b")
    s = Strategy(zero_stage=1, precision="bf16", micro_batch_size=2, gradient_accumulation_steps=8)
    host = host_micro_step_seconds(spec, s)
    assert host_before_boundary(spec, s, host)[FRAMEWORK_HOST_PART] == pytest.approx(
        host[FRAMEWORK_HOST_PART] - 0.001 * spec.layers
    )
    stage0 = s.with_(zero_stage=0)  # stage 0 reduces at the boundary too (buffered_allreduce_fallback)
    assert host_before_boundary(spec, stage0, host)[FRAMEWORK_HOST_PART] < host[FRAMEWORK_HOST_PART]
    for other in (s.with_(zero_stage=2), s.with_(mode="inference", gradient_accumulation_steps=1)):
        assert host_before_boundary(spec, other, host) == host
    measured = [
        r["tokens_per_sec"]
        for name in ("accum-accum-b", "accum-accum2")
        for r in json.loads((RESULTS / f"plan_accuracy-2026-12-03-1gpu-{name}.json").read_text())["rows"]
        if r["config"]["model"] == "llama-1b" and r["config"].get("grad_accum") == 8
    ]
    assert sorted(measured) == [38518.0, 42414.6]
    got = estimate_throughput(hw, spec, s, 2048).tokens_per_sec
    assert got == pytest.approx(sum(measured) / 2, rel=0.05)
    # one micro-step per step: every micro-step is the boundary, as fit
    one = s.with_(gradient_accumulation_steps=1)
    parts = dict(estimate_throughput(hw, spec, one, 2048).parts)
    ga8 = dict(estimate_throughput(hw, spec, s, 2048).parts)
    assert ga8[FRAMEWORK_HOST_PART] < 8 * parts[FRAMEWORK_HOST_PART]
    big = s.with_(micro_batch_size=16)  # the GPU's work hides the host's either way
    assert dict(estimate_throughput(hw, spec, big, 2048).parts)[FRAMEWORK_HOST_PART] < 1e-3


def test_stage_0_step_memory_is_one_rule_for_the_peak_and_the_allocator_block() -> None:
    """What stage 0's step holds (memory.stage0_step_bytes) is both the step phase's extra and the block the
    allocator caches from it: 6 bytes a parameter in 16 bits (the fp32 master's gradient copies), 4 in fp32."""
    from wizard.planner.memory import _step_transient_block, stage0_step_bytes, training_phases

    m = load_model_spec("llama-7b")
    for precision, per_param in (("bf16", 6), ("fp16", 6), ("fp32", 4)):
        s = Strategy(zero_stage=0, precision=precision, micro_batch_size=1)  # type: ignore[arg-type]
        step = next(p for p in training_phases(m, s, 2048) if p.name == "optimizer step")
        assert dict(step.fixed)["gradients for the update"] == stage0_step_bytes(
            s.weight_bytes, m.total_params
        )
        assert _step_transient_block(m, s) == per_param * m.total_params


def test_the_optimizer_step_holds_what_it_holds_at_one_micro_step(
    bench_script: Callable[[str], ModuleType],
) -> None:
    """Micro-batch 1 peaks at the optimizer step (Qwen2-1.5B's forward at 8 micro-steps, holding their sum, is as
    high). Pythia-1B ZeRO-0 held 6 bytes a parameter above its states there
    (the 16-bit gradients and the fp32 copy they are added into; 8 were counted), and ZeRO-0/1 at 8 micro-steps held
    at the step what they held at 1 (the boundary hands the summed gradients over; they were added again)."""
    from wizard.planner.memory import training_phases

    pa = bench_script("plan_accuracy")
    doc = json.loads((RESULTS / "plan_accuracy-2026-12-04-1gpu-accum-accum-boundary.json").read_text())
    rows = [r for r in doc["rows"] if r["status"] == "ok"]
    assert len(rows) == 7
    for r in rows:
        s = pa._cfg(r).strategy(1)
        with pa.built_with_cache(pa.row_use_cache(r)):
            spec = pa.bench_spec(r["config"]["model"])
        est = estimate_memory(spec, s, r["seq_len"])  # the step, or Qwen2's forward with 8 micro-steps' sum
        assert est.allocated == pytest.approx(r["max_allocated"], rel=0.01), pa._label(r)
        step = next(p for p in training_phases(spec, s, r["seq_len"]) if p.name == "optimizer step")
        assert "accumulated gradients" not in dict(step.fixed)
        if s.gradient_accumulation_steps > 1:  # held from the first backward to the boundary
            fwd = next(p for p in training_phases(spec, s, r["seq_len"]) if p.name == "forward/loss")
            assert dict(fwd.fixed)["accumulated gradients"] > 0
    z0 = next(r for r in rows if r["config"]["zero_stage"] == 0 and r["config"]["grad_accum"] == 1)
    s0 = pa._cfg(z0).strategy(1)
    step = next(
        p for p in training_phases(pa.bench_spec("pythia-1b"), s0, 2048) if p.name == "optimizer step"
    )
    assert dict(step.fixed)["gradients for the update"] == 6 * pa.bench_spec("pythia-1b").total_params


def test_zero3_round_trips_hide_behind_the_whole_micro_step(
    bench_script: Callable[[str], ModuleType],
) -> None:
    """llama-5b (held out), ZeRO-3 + CPU optimizer offload + checkpointing at micro-batch 8, 1 and 4 micro-steps a
    step in two processes, on each of two H100s: the micro-steps before the boundary each added 0.78 and 0.63 s
    where one micro-step takes 1.26-1.27 s with the boundary's fp32 copy-out, their 2 x 10.4 GB of running-sum
    round trips nowhere to be seen. Hidden behind half the compute alone they showed 0.62 s a step, and 4 micro-steps
    gained 2.44x the tokens/s of one where 2.75x and 2.91x were measured; now 2.61x."""
    pa = bench_script("plan_accuracy")
    ratios = []
    for machine in ("", "-b"):
        readings = {}
        for name in (f"phases-llama5b{machine}", f"accum-llama5b-accum{machine}"):
            doc = json.loads((RESULTS / f"plan_accuracy-2026-12-06-1gpu-{name}.json").read_text())
            hw = HardwareReport.from_dict(doc["hardware"])
            for r in doc["rows"]:
                if r["config"]["micro_batch"] == 8 and r["status"] == "ok":
                    readings[r["config"]["grad_accum"]] = r
        assert set(readings) == {1, 4}
        tp = {
            g: estimate_throughput(hw, pa.bench_spec("llama-5b"), pa._cfg(r).strategy(1), r["seq_len"])
            for g, r in readings.items()
        }
        # every round trip hidden: the step's PCIe copies are the boundary's, as at one micro-step
        assert dict(tp[4].parts)["PCIe copies"] == pytest.approx(dict(tp[1].parts)["PCIe copies"])
        predicted = tp[4].tokens_per_sec / tp[1].tokens_per_sec
        ratios.append((predicted, readings[4]["tokens_per_sec"] / readings[1]["tokens_per_sec"]))
    for predicted, measured in ratios:
        assert predicted == pytest.approx(measured, rel=0.11)  # 2.61 against 2.75 and 2.91 (2.44 before)

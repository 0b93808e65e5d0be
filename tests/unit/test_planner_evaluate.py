"""The planner's per-strategy APIs the wizard needs: evaluate() for a hand-edited strategy, hardware_problems() as
the one source of truth for "this machine cannot run it", and the max-batch table (issue 8)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wizard.hardware import get_hardware
from wizard.hardware.report import DiskInfo, GPUInfo, HardwareReport, HostInfo
from wizard.model import load_model_spec
from wizard.planner import (
    PlanRequest,
    candidate_for,
    evaluate,
    hardware_problems,
    max_batch_table,
    max_batch_to_json,
    max_micro_batch,
    plan,
)
from wizard.planner.memory import estimate_memory
from wizard.strategy import Strategy

GiB = 1024**3
GPT2_MEDIUM = load_model_spec("gpt2-medium")


def _detected(
    cc: tuple[int, int] = (8, 0), memory_gib: int = 40, gpus: int = 1, **host: object
) -> HardwareReport:
    gpu = GPUInfo(index=0, name="Test GPU", memory_total_bytes=memory_gib * GiB, compute_capability=cc)
    return HardwareReport(
        source="detected",
        gpus=tuple(replace(gpu, index=i) for i in range(gpus)),
        host=HostInfo(**{"ram_total_bytes": 64 * GiB, "ram_available_bytes": 60 * GiB, **host}),  # type: ignore[arg-type]
    )


# ------------------------------------------------------------------------------------------- hardware_problems


def test_nvme_needs_a_disk_and_libaio() -> None:
    s = Strategy(zero_stage=3, offload_optimizer="nvme", offload_param="nvme")
    no_disk = _detected(libaio=True)
    assert any("no NVMe disk" in p for p in hardware_problems(no_disk, s))
    disk = DiskInfo(
        device="/dev/nvme0n1",
        mountpoint="/scratch",
        fstype="ext4",
        nvme=True,
        total_bytes=2000 * GiB,
        free_bytes=2000 * GiB,
    )
    no_libaio = _detected(disks=(disk,), libaio=False)
    assert any("libaio is missing" in p for p in hardware_problems(no_libaio, s))
    unknown = _detected(disks=(disk,), libaio=None)
    assert any("libaio" in p for p in hardware_problems(unknown, s))
    assert hardware_problems(_detected(disks=(disk,), libaio=True), s) == []
    # A disk the user describes is trusted; CPU offload never needs one.
    assert hardware_problems(no_disk, s, PlanRequest(nvme_bytes=1000 * GiB)) == []
    assert hardware_problems(no_disk, s.with_(offload_optimizer="cpu", offload_param="cpu")) == []


def test_precision_needs_the_compute_capability() -> None:
    v100, pascal, a100 = _detected(cc=(7, 0)), _detected(cc=(6, 0)), _detected(cc=(8, 0))
    bf16, fp16 = Strategy(precision="bf16"), Strategy(precision="fp16")
    (problem,) = hardware_problems(v100, bf16)
    assert "7.0" in problem and "bf16 needs 8.0" in problem
    assert hardware_problems(v100, fp16) == []
    assert any("fp16 needs 7.0" in p for p in hardware_problems(pascal, fp16))
    assert hardware_problems(a100, bf16) == [] and hardware_problems(pascal, Strategy(precision="fp32")) == []


def test_topology_larger_than_the_hardware() -> None:
    hw = get_hardware("2x4xA100-80GB")
    assert hardware_problems(hw, Strategy(nodes=2, gpus_per_node=4)) == []
    assert any("3 nodes" in p for p in hardware_problems(hw, Strategy(nodes=3, gpus_per_node=4)))
    assert any("8 GPUs per node" in p for p in hardware_problems(hw, Strategy(nodes=1, gpus_per_node=8)))


def test_host_ram_for_the_offload_when_the_model_is_known() -> None:
    hw = get_hardware("8xA100-80GB,ram=64GiB")
    s = Strategy(zero_stage=3, offload_optimizer="cpu", offload_param="cpu", gpus_per_node=8)
    llama = load_model_spec("llama-13b")
    assert hardware_problems(hw, s) == []  # without the model there is nothing to weigh
    (problem,) = hardware_problems(hw, s, model=llama)
    assert "host RAM too small" in problem and "64" in problem
    assert hardware_problems(get_hardware("8xA100-80GB,ram=2TiB"), s, model=llama) == []
    assert hardware_problems(hw, s.with_(offload_optimizer="none", offload_param="none"), model=llama) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["V100-32GB", "T4", "A100-40GB", "H100", "RTX3090"]),
    st.sampled_from([1, 2, 8]),
    st.sampled_from([None, "true", "false"]),
    st.booleans(),
    st.sampled_from(["gpt2", "gpt2-xl", "llama-7b"]),
)
def test_the_planner_never_proposes_what_hardware_problems_rejects(
    gpu: str, n: int, libaio: str | None, nvme: bool, name: str
) -> None:
    spec = f"{n}x{gpu},ram=256GiB" + (f",libaio={libaio}" if libaio else "") + (",nvme=2TB" if nvme else "")
    hw = get_hardware(spec)
    p = plan(hw, load_model_spec(name), PlanRequest(seq_len=512, precisions=("bf16", "fp16", "fp32")))
    assert p.candidates
    for c in p.candidates:
        assert hardware_problems(hw, c.strategy, p.request) == [], c.label


# ------------------------------------------------------------------------------------------- evaluate


def test_evaluate_reproduces_the_planned_candidates() -> None:
    hw = get_hardware("8xA100-80GB,ram=1TiB")
    model = load_model_spec("llama-7b")
    req = PlanRequest(seq_len=2048, global_batch=256)
    for c in plan(hw, model, req).candidates:
        e = evaluate(hw, model, c.strategy, req)
        assert (e.fits, e.limits, e.max_micro_batch, e.headroom_bytes) == (
            c.fits,
            c.limits,
            c.max_micro_batch,
            c.headroom_bytes,
        )
        assert e.predicted == c.predicted
        assert e.reasons[0] == c.reasons[0]  # the same "fits: ..." / "does not fit: ..." first line


def test_candidate_for_is_the_plans_own_else_exactly_that_strategy_evaluated() -> None:
    hw = get_hardware("A100-40GB,ram=128GiB")
    req = PlanRequest(seq_len=1024)
    p = plan(hw, GPT2_MEDIUM, req)
    assert p.best is not None
    assert candidate_for(p, p.best.strategy) is p.best  # the recommendation keeps its comparisons
    hand_made = p.best.strategy.with_(micro_batch_size=1, gradient_accumulation_steps=3)
    assert all(c.strategy != hand_made for c in p.candidates)
    assert candidate_for(p, hand_made) == evaluate(hw, GPT2_MEDIUM, hand_made, req)


def test_evaluate_a_hand_edited_micro_batch() -> None:
    hw = get_hardware("A100-40GB,ram=128GiB")
    best = plan(hw, GPT2_MEDIUM, PlanRequest(seq_len=1024)).best
    assert best is not None
    top = best.max_micro_batch
    smaller = evaluate(
        hw, GPT2_MEDIUM, best.strategy.with_(micro_batch_size=top // 2), PlanRequest(seq_len=1024)
    )
    assert smaller.fits and smaller.max_micro_batch == top
    assert any(f"fits; up to {top} would" in r for r in smaller.reasons)
    assert smaller.predicted.gpu_needed_bytes < best.predicted.gpu_needed_bytes
    bigger = evaluate(
        hw, GPT2_MEDIUM, best.strategy.with_(micro_batch_size=top + 4), PlanRequest(seq_len=1024)
    )
    assert not bigger.fits and bigger.limits == ("gpu",)
    assert bigger.reasons[0].startswith("does not fit")
    assert f"micro-batch {top} would fit" in bigger.reasons


def test_evaluate_accumulation_and_the_batch_target() -> None:
    hw = get_hardware("2xA100-80GB,ram=256GiB")
    s = Strategy(zero_stage=2, micro_batch_size=4, gradient_accumulation_steps=8, gpus_per_node=2)
    e = evaluate(hw, GPT2_MEDIUM, s, PlanRequest(seq_len=1024, global_batch=128))
    assert e.fits
    assert (
        "batch: micro-batch 4 x 8 accumulation steps x 2 GPUs = global batch 64 (the target is 128)"
        in e.reasons
    )
    again = evaluate(hw, GPT2_MEDIUM, s, PlanRequest(seq_len=1024))
    assert any(r.endswith("= global batch 64") for r in again.reasons)


def test_evaluate_what_cannot_run_here_says_why_first() -> None:
    v100 = _detected(cc=(7, 0), memory_gib=32)
    e = evaluate(v100, GPT2_MEDIUM, Strategy(zero_stage=2, precision="bf16", micro_batch_size=2))
    assert not e.fits and "unsupported" in e.limits
    assert e.reasons[0].startswith("not possible here:") and "bf16" in e.reasons[0]
    bad = evaluate(v100, GPT2_MEDIUM, Strategy(zero_stage=1, offload_param="cpu", precision="fp16"))
    assert not bad.fits and "parameter offload only works at ZeRO stage 3" in bad.reasons[0]
    assert bad.predicted.gpu_bytes > 0  # still predicted: the wizard shows the bars


# ------------------------------------------------------------------------------------------- max-batch table


def test_max_batch_table_hf_blog_shape() -> None:
    """The HF blog's example (accelerate + DeepSpeed): a ~900M model (DeBERTa-v2-xlarge) fine-tuned on two 24 GB
    cards in fp16, short sequences. Plain data parallelism (stage 0) keeps all optimizer states on every card and
    fits a much smaller micro-batch than ZeRO-2 (the blog: 8 vs 40). dswiz counts a language-model head on the
    128k vocabulary (the blog's classifier has none), so its batches are smaller than the blog's; and it plans stage 0
    for a script's torch AdamW (DeepSpeed's FP16_UnfusedOptimizer: 6 bytes a parameter at the step, measured), where
    the blog's config stepped DeepSpeed's FusedAdam (FP16_Optimizer, flat fp32 copies); the shape holds."""
    hw = get_hardware("2xRTX3090,ram=64GiB")
    model = load_model_spec("deberta-v2-xlarge")
    assert 0.8e9 < model.total_params < 1.0e9
    rows = {r.label: r for r in max_batch_table(hw, model, PlanRequest(seq_len=128, precisions=("fp16",)))}
    ddp, z2 = rows["ZeRO-0"], rows["ZeRO-2"]
    assert ddp.max_micro_batch >= 1 and ddp.fits
    assert z2.max_micro_batch >= 1.5 * ddp.max_micro_batch
    assert rows["ZeRO-2 optimizer->cpu"].max_micro_batch > z2.max_micro_batch  # offload frees more
    assert rows["ZeRO-2 ckpt"].max_micro_batch >= 2 * z2.max_micro_batch  # so does checkpointing
    assert z2.tokens_per_sec is not None and ddp.tokens_per_sec is not None
    assert z2.tokens_per_sec > ddp.tokens_per_sec  # the bigger batch is faster too


@pytest.mark.parametrize(
    ("spec", "name", "seq"),
    [
        ("2xRTX3090,ram=64GiB", "deberta-v2-xlarge", 128),
        ("8xA100-80GB,ram=1TiB", "llama-7b", 2048),
        ("A10,ram=32GiB", "gpt2-xl", 1024),
        ("2x8xH100,ram=2TiB", "llama-70b", 4096),
    ],
)
def test_max_batch_table_agrees_with_max_micro_batch(spec: str, name: str, seq: int) -> None:
    hw, model = get_hardware(spec), load_model_spec(name)
    req = PlanRequest(seq_len=seq)
    rows = max_batch_table(hw, model, req)
    assert rows
    labels = [r.label for r in rows]
    assert len(set(labels)) == len(labels)
    stages = [r.strategy.zero_stage for r in rows]
    assert stages == sorted(stages) and set(stages) == {0, 1, 2, 3}
    for r in rows:
        s = r.strategy
        assert s.gradient_accumulation_steps == 1
        expected = max_micro_batch(
            hw, model, s, seq, safety_margin=req.safety_margin, limit=req.max_micro_batch, buffers=req.buffers
        )
        assert r.max_micro_batch == expected, r.label
        assert s.micro_batch_size == max(1, expected)
        assert r.gpu_bytes == estimate_memory(model, s, seq).needed
        assert r.fits == (expected >= 1 and not r.limits)
        assert (r.tokens_per_sec is None) == (expected == 0)
        if 0 < expected < req.max_micro_batch:  # the next one up does not fit
            over = estimate_memory(model, s.with_(micro_batch_size=expected + 1), seq).needed
            assert over > hw.min_gpu_memory_bytes * (1 - req.safety_margin)
    doc = max_batch_to_json(rows)
    assert json.loads(json.dumps(doc)) == doc
    assert {d["label"] for d in doc} == set(labels)


def test_max_batch_table_ignores_the_global_batch_and_needs_a_gpu() -> None:
    hw = get_hardware("2xA100-80GB,ram=256GiB")
    a = max_batch_table(hw, GPT2_MEDIUM, PlanRequest(seq_len=1024))
    b = max_batch_table(hw, GPT2_MEDIUM, PlanRequest(seq_len=1024, global_batch=64))
    assert a == b
    assert max_batch_table(HardwareReport(source="detected"), GPT2_MEDIUM) == []

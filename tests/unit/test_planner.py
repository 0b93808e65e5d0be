"""plan(): only valid strategies, consistent batch arithmetic, honest fits, reasons and advice with numbers."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wizard.errors import DswizError
from wizard.hardware import get_hardware
from wizard.hardware.report import DiskInfo, GPUInfo, HardwareReport, HostInfo
from wizard.model import load_model_spec, spec_from_config
from wizard.planner import Plan, PlanRequest, max_micro_batch, plan, plan_to_json
from wizard.planner import calibration as cal
from wizard.planner.memory import estimate_memory

GiB = 1024**3
A100x8 = get_hardware("8xA100-80GB,ram=1TiB")


def _detected(
    gpus: int = 1, memory_gib: int = 24, cc: tuple[int, int] = (8, 6), **host: object
) -> HardwareReport:
    gpu = GPUInfo(index=0, name="Test GPU", memory_total_bytes=memory_gib * GiB, compute_capability=cc)
    return HardwareReport(
        source="detected",
        gpus=tuple(replace(gpu, index=i) for i in range(gpus)),
        host=HostInfo(**{"ram_total_bytes": 64 * GiB, "ram_available_bytes": 60 * GiB, **host}),  # type: ignore[arg-type]
    )


def _check_invariants(p: Plan) -> None:
    """What every plan must satisfy, whatever the input."""
    req = p.request
    for c in p.candidates:
        s = c.strategy
        assert not s.problems(), (s, s.problems())
        assert s.world_size == p.hardware.total_gpus
        if req.global_batch is not None:
            assert s.global_batch_size == req.global_batch
        if c.fits:
            assert p.gpu_capacity_bytes is not None
            assert c.predicted.gpu_needed_bytes <= p.gpu_capacity_bytes * (1 - req.safety_margin)
            if p.cpu_capacity_bytes is not None:
                assert c.predicted.cpu_bytes <= p.cpu_capacity_bytes
            if c.predicted.nvme_bytes:
                assert p.nvme_capacity_bytes is not None and c.predicted.nvme_bytes <= p.nvme_capacity_bytes
            assert s.micro_batch_size <= c.max_micro_batch
            # The prediction is the memory model's, for exactly this strategy.
            assert c.predicted.gpu_bytes == estimate_memory(p.model, s, p.seq_len, req.buffers).device
    fits = [c.fits for c in p.candidates]
    assert fits == sorted(fits, reverse=True)  # everything that fits comes first
    speeds = [c.predicted.tokens_per_sec for c in p.candidates if c.fits]
    # The first is the simplest within RECOMMEND_SIMPLER_WITHIN of the fastest; the rest fastest first.
    if speeds:
        assert speeds[0] >= max(speeds) * (1 - cal.RECOMMEND_SIMPLER_WITHIN)
    assert all(a >= b * 0.995 for a, b in itertools.pairwise(speeds[1:]))
    assert (p.best is None) == (not any(fits))
    if p.best is None and p.hardware.gpus:
        assert p.advice
    json.dumps(plan_to_json(p))


def test_the_best_is_the_fastest_that_fits_and_says_why() -> None:
    p = plan(A100x8, load_model_spec("llama-7b"), PlanRequest(seq_len=2048, global_batch=256))
    _check_invariants(p)
    best = p.best
    assert best is not None
    fastest = max(c.predicted.tokens_per_sec for c in p.candidates if c.fits)
    assert best.predicted.tokens_per_sec >= fastest * (1 - cal.RECOMMEND_SIMPLER_WITHIN)
    text = "\n".join(best.reasons)
    assert "fits:" in text and "GiB" in text
    assert "global batch 256" in text
    assert "throughput" in text  # what the alternatives would cost
    assert "DeepSpeed's own estimator" in text


def test_only_valid_combinations_are_offered() -> None:
    p = plan(A100x8, load_model_spec("llama-13b"), PlanRequest())
    _check_invariants(p)
    assert all(c.strategy.offload_param == "none" for c in p.candidates if c.strategy.zero_stage < 3)
    assert not any(
        c.strategy.offload_optimizer != "none" and c.strategy.zero_stage == 0 for c in p.candidates
    )
    stages = {c.strategy.zero_stage for c in p.candidates}
    assert stages == {0, 1, 2, 3}


def test_global_batch_that_the_gpus_cannot_divide_is_an_error_with_the_fix() -> None:
    with pytest.raises(DswizError) as e:
        plan(A100x8, load_model_spec("gpt2"), PlanRequest(global_batch=100))
    assert "not a multiple of the 8 GPUs" in e.value.problem
    assert e.value.fix == "use 96 or 104"


def test_large_global_batch_uses_accumulation_and_small_micro_batches() -> None:
    p = plan(
        _detected(memory_gib=24), load_model_spec("gpt2-medium"), PlanRequest(seq_len=1024, global_batch=64)
    )
    _check_invariants(p)
    assert p.best is not None
    s = p.best.strategy
    assert s.micro_batch_size * s.gradient_accumulation_steps == 64
    assert s.gradient_accumulation_steps > 1


def test_precision_follows_the_gpu() -> None:
    v100 = _detected(cc=(7, 0), memory_gib=32)
    p = plan(v100, load_model_spec("gpt2"), PlanRequest(seq_len=512))
    assert {c.strategy.precision for c in p.candidates} == {"fp16"}
    assert any("bf16 not offered" in n and "7.0" in n for n in p.notes)
    pascal = _detected(cc=(6, 0), memory_gib=16)
    assert {
        c.strategy.precision for c in plan(pascal, load_model_spec("tiny"), PlanRequest()).candidates
    } == {"fp32"}
    ampere = _detected(cc=(8, 0), memory_gib=80)
    both = plan(ampere, load_model_spec("gpt2"), PlanRequest(seq_len=512, precisions=("bf16", "fp32")))
    assert {c.strategy.precision for c in both.candidates} == {"bf16", "fp32"}
    best = both.best
    assert best is not None and best.strategy.precision == "bf16"


def test_nvme_only_with_a_disk_and_libaio() -> None:
    m = load_model_spec("llama-7b")
    nvme_disk = DiskInfo("/nvme", "/dev/nvme0n1", "ext4", 4000 * GiB, 3000 * GiB, nvme=True)
    no_disk = _detected(memory_gib=24, libaio=True)
    no_aio = _detected(memory_gib=24, libaio=False, disks=(nvme_disk,))
    both = _detected(memory_gib=24, libaio=True, disks=(nvme_disk,))

    def nvme_used(hw: HardwareReport, **kw: object) -> bool:
        p = plan(hw, m, PlanRequest(**kw))  # type: ignore[arg-type]
        _check_invariants(p)
        return any("nvme" in (c.strategy.offload_optimizer, c.strategy.offload_param) for c in p.candidates)

    assert not nvme_used(no_disk)
    assert not nvme_used(no_aio)
    assert nvme_used(both)
    assert nvme_used(no_disk, nvme_bytes=2000 * GiB)  # a described NVMe size
    assert not nvme_used(both, allow_nvme=False)
    p = plan(no_aio, m, PlanRequest())
    assert any("libaio" in n and "libaio-dev" in n for n in p.notes)


def test_host_ram_limits_cpu_offload() -> None:
    m = load_model_spec("llama-7b")
    p = plan(
        _detected(memory_gib=24, ram_total_bytes=32 * GiB, ram_available_bytes=30 * GiB), m, PlanRequest()
    )
    _check_invariants(p)
    offloaded = [c for c in p.candidates if c.strategy.offload_optimizer == "cpu"]
    assert offloaded and all(not c.fits and "cpu" in c.limits for c in offloaded)
    assert any("host RAM" in r for r in offloaded[0].reasons)


def test_nothing_fits_gives_advice_with_numbers() -> None:
    hw = get_hardware("8xA100-80GB,ram=512GiB")
    p = plan(hw, load_model_spec("llama-70b"), PlanRequest(seq_len=4096))
    _check_invariants(p)
    assert p.best is None
    text = "\n".join(p.advice)
    assert "nodes x 8 GPUs" in text  # more GPUs, with how many
    assert "GiB" in text
    assert "host RAM" in text  # with the amount missing
    assert "NVMe" in text
    assert "shorter sequence alone would not help" in text


def test_advice_can_be_a_shorter_sequence() -> None:
    p = plan(
        A100x8,
        load_model_spec("llama-7b"),
        PlanRequest(seq_len=32768, allow_offload=False, allow_activation_checkpointing=False),
    )
    _check_invariants(p)
    assert p.best is None
    assert any(a.startswith("sequence length ") and "would fit" in a for a in p.advice)


def test_no_gpu_says_so_and_suggests_described_hardware() -> None:
    hw = HardwareReport(source="detected", no_gpu_reason="no NVIDIA driver")
    p = plan(hw, load_model_spec("gpt2"), PlanRequest())
    assert p.candidates == () and p.best is None
    assert "no NVIDIA driver" in p.advice[0] and "--hardware" in p.advice[0]


def test_max_micro_batch_is_the_edge_of_fitting() -> None:
    hw = _detected(memory_gib=40)
    m = load_model_spec("gpt2-medium")
    p = plan(hw, m, PlanRequest(seq_len=1024, safety_margin=0.0))
    for c in p.candidates[:6]:
        base = c.strategy.with_(micro_batch_size=1)
        n = max_micro_batch(hw, m, base, 1024, safety_margin=0.0)
        assert n == c.max_micro_batch
        if n:
            assert estimate_memory(m, base.with_(micro_batch_size=n), 1024).needed <= 40 * GiB
            assert estimate_memory(m, base.with_(micro_batch_size=n + 1), 1024).needed > 40 * GiB


def test_inference_plans_stage_3_without_optimizer() -> None:
    p = plan(A100x8, load_model_spec("llama-70b"), PlanRequest(mode="inference", seq_len=2048))
    _check_invariants(p)
    assert p.candidates and all(c.strategy.zero_stage == 3 for c in p.candidates)
    assert all(c.strategy.offload_optimizer == "none" for c in p.candidates)
    assert p.best is not None


def test_moe_at_stage_3_names_the_leaf_module() -> None:
    p = plan(get_hardware("8xH100,ram=2TiB"), load_model_spec("mixtral-8x7b"), PlanRequest(seq_len=2048))
    _check_invariants(p)
    stage3 = [c for c in p.candidates if c.strategy.zero_stage == 3]
    assert any("MixtralSparseMoeBlock" in r for r in stage3[0].reasons)


def test_zeropp_only_across_nodes() -> None:
    m = load_model_spec("llama-13b")
    one_node = plan(A100x8, m, PlanRequest())
    assert not any(c.strategy.zero_hpz_partition_size > 1 for c in one_node.candidates)
    two_nodes = plan(get_hardware("2x8xA100-80GB,ram=1TiB,net=100"), m, PlanRequest())
    _check_invariants(two_nodes)
    hpz = [c for c in two_nodes.candidates if c.strategy.zero_hpz_partition_size > 1]
    assert hpz and all(c.strategy.zero_hpz_partition_size == 8 and c.strategy.zero_stage == 3 for c in hpz)


def test_json_contract() -> None:
    p = plan(A100x8, load_model_spec("llama-7b"), PlanRequest(global_batch=64))
    doc = json.loads(json.dumps(plan_to_json(p)))
    assert {"hardware", "model", "candidates"} <= set(doc)
    assert doc["hardware"]["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert doc["model"]["total_params"] == load_model_spec("llama-7b").total_params
    assert len(doc["candidates"]) == len(p.candidates)
    types = {
        "zero_stage": int,
        "offload_optimizer": str,
        "offload_param": str,
        "precision": str,
        "micro_batch_size": int,
        "gradient_accumulation_steps": int,
        "activation_checkpointing": bool,
        "fits": bool,
        "predicted": dict,
        "reasons": list,
    }
    for c, cand in zip(doc["candidates"], p.candidates, strict=True):
        for key, tp in types.items():
            assert isinstance(c[key], tp), key
        assert c["offload_optimizer"] in ("none", "cpu", "nvme") and c["offload_param"] in (
            "none",
            "cpu",
            "nvme",
        )
        for key, tp in {
            "gpu_bytes": int,
            "cpu_bytes": int,
            "nvme_bytes": int,
            "tokens_per_sec": float,
        }.items():
            assert isinstance(c["predicted"][key], tp), key
        assert c["zero_stage"] == cand.strategy.zero_stage
        assert c["predicted"]["gpu_bytes"] == cand.predicted.gpu_bytes
        assert all(isinstance(r, str) for r in c["reasons"])
    assert doc["best"] == 0 and doc["candidates"][0]["fits"] is True


# ------------------------------------------------------------------------------------ properties


@st.composite
def hardware(draw: st.DrawFn) -> HardwareReport:
    cc = draw(st.sampled_from([(6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (9, 0)]))
    gpu = GPUInfo(
        index=0,
        name="GPU",
        memory_total_bytes=draw(st.integers(4, 192)) * GiB,
        compute_capability=cc,
        peak_tflops_bf16=draw(st.sampled_from([None, 100.0, 989.0])),
        nvlink_count=draw(st.sampled_from([None, 0, 12])),
    )
    disks = (
        DiskInfo("/nvme", "/dev/nvme0n1", "xfs", 8 * 1024 * GiB, draw(st.integers(0, 8192)) * GiB, nvme=True),
    )
    host = HostInfo(
        physical_cores=draw(st.sampled_from([None, 8, 64])),
        ram_total_bytes=draw(st.sampled_from([None, 16 * GiB, 512 * GiB, 2048 * GiB])),
        disks=draw(st.sampled_from([(), disks])),
        libaio=draw(st.sampled_from([None, True, False])),
    )
    gpn = draw(st.integers(1, 8))
    return HardwareReport(
        source=draw(st.sampled_from(["detected", "described"])),
        gpus=tuple(replace(gpu, index=i) for i in range(gpn)),
        host=host,
        nodes=draw(st.sampled_from([1, 1, 2, 4, 16])),
        inter_node_gbps=draw(st.sampled_from([None, 25.0, 400.0])),
    )


@st.composite
def models(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    if draw(st.booleans()):
        return load_model_spec(
            draw(
                st.sampled_from(
                    [
                        "tiny",
                        "gpt2",
                        "gpt2-xl",
                        "llama-7b",
                        "mixtral-8x7b",
                        "bert-large",
                        "deberta-v2-xlarge",
                        "qwen1.5-moe-a2.7b",
                    ]
                )
            )
        )
    heads = draw(st.sampled_from([1, 4, 16, 64]))
    hidden = heads * draw(st.sampled_from([32, 64, 128]))
    return spec_from_config(
        {
            "model_type": "llama",
            "num_hidden_layers": draw(st.integers(1, 120)),
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "intermediate_size": draw(st.integers(1, 6)) * hidden,
            "vocab_size": draw(st.integers(100, 260_000)),
        },
        name="h",
        source="hypothesis",
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hardware(), models(), st.data())
def test_plan_never_raises_and_keeps_its_promises(hw: HardwareReport, m, data: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    world = hw.total_gpus
    max_seq = m.max_positions or 8192
    request = PlanRequest(
        seq_len=data.draw(st.integers(1, min(max_seq, 16384))),
        global_batch=data.draw(st.sampled_from([None, world, world * 8, world * 96])),
        mode=data.draw(st.sampled_from(["train", "train", "inference"])),
        allow_offload=data.draw(st.booleans()),
        allow_activation_checkpointing=data.draw(st.booleans()),
        safety_margin=data.draw(st.sampled_from([0.0, cal.DEFAULT_SAFETY_MARGIN, 0.2])),
    )
    p = plan(hw, m, request)
    _check_invariants(p)


def test_a_slightly_faster_but_more_complex_strategy_does_not_win() -> None:
    # A GPT-2 of 32 layers of 768 on a 16 GiB V100: checkpointing buys a larger micro-batch for a gain (~3 %) within
    # the model's accuracy. (The instance moves with the calibration: it was gpt2-medium on a T4 before stage 0's
    # optimizer step was timed per tensor.)
    deep_small = spec_from_config(
        {"model_type": "gpt2", "n_layer": 32, "n_embd": 768, "n_head": 12, "vocab_size": 50257},
        name="gpt2-32x768",
        source="test",
    )
    p = plan(get_hardware("1xV100-16GB"), deep_small, PlanRequest(seq_len=1024))
    fastest = max((c for c in p.candidates if c.fits), key=lambda c: c.predicted.tokens_per_sec)
    assert fastest.strategy.activation_checkpointing  # the premise: the more complex one is predicted faster
    _check_invariants(p)
    best = p.best
    assert best is not None and not best.strategy.activation_checkpointing
    assert best.strategy.offload_optimizer == "none"
    assert any("within the model's accuracy" in r for r in best.reasons)


def test_a_cluster_without_its_network_says_which_bandwidth_the_tokens_per_second_assume() -> None:
    model = load_model_spec("llama-7b")
    unknown = plan(get_hardware("2x8xH100,ram=1TiB"), model, PlanRequest(seq_len=2048))
    said = [n for n in unknown.notes if n.startswith("network between nodes unknown")]
    assert said == [f"network between nodes unknown: {cal.DEFAULT_INTER_NODE_GBPS:g} Gbit/s assumed for the "
                    "tokens/s (describe it, e.g. 2x8xH100,net=400)"]  # fmt: skip
    for spec in ("2x8xH100,ram=1TiB,net=400", "8xH100,ram=1TiB"):  # described, or one node: nothing to say
        assert not any("between nodes" in n for n in plan(get_hardware(spec), model, PlanRequest()).notes)

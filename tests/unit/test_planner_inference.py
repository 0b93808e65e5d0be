"""ZeRO-3 inference planning: only stage 3, no optimizer or gradients, parameter offload to CPU or NVMe lets a model
larger than the GPUs run, and its throughput is bounded by the transfers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from wizard.hardware import get_hardware
from wizard.model import load_model_spec
from wizard.planner import PlanRequest, evaluate, max_batch_table, plan
from wizard.planner import calibration as cal
from wizard.planner.memory import estimate_memory, inference_layer_bytes_per_token, kv_cache_bytes_per_token
from wizard.planner.throughput import estimate_throughput, flops_per_token, pcie_bytes_per_s
from wizard.strategy import Strategy
from wizard.units import fmt_bytes

GiB = 1024**3
LLAMA_70B = load_model_spec("llama-70b")


def _inference(**changes: object) -> Strategy:
    return Strategy(**{"zero_stage": 3, "mode": "inference", **changes})  # type: ignore[arg-type]


def test_only_stage_3_and_parameter_offload_are_offered() -> None:
    hw = get_hardware("RTX4090,ram=512GiB")
    p = plan(hw, LLAMA_70B, PlanRequest(mode="inference", nvme_bytes=4096 * GiB))
    kinds = {
        (c.strategy.zero_stage, c.strategy.offload_optimizer, c.strategy.offload_param) for c in p.candidates
    }
    assert kinds == {(3, "none", "none"), (3, "none", "cpu"), (3, "none", "nvme")}
    assert all(not c.strategy.activation_checkpointing for c in p.candidates)
    assert all(c.strategy.gradient_accumulation_steps == 1 for c in p.candidates)


def test_a_model_larger_than_the_gpu_runs_with_its_weights_on_the_cpu() -> None:
    hw = get_hardware("A100-40GB,ram=512GiB")
    model_bytes = 2 * LLAMA_70B.total_params
    assert model_bytes > 3 * hw.gpus[0].memory_total_bytes
    p = plan(hw, LLAMA_70B, PlanRequest(mode="inference"))
    assert p.best is not None and p.best.strategy.offload_param == "cpu"
    # The weights live in host RAM: the host prediction covers them, the GPU holds none of them.
    assert p.best.predicted.cpu_bytes >= model_bytes
    assert dict(p.best.predicted.breakdown).get("parameters", 0) == 0
    assert not plan(hw, LLAMA_70B, PlanRequest(mode="inference", allow_offload=False)).best


def test_nvme_runs_a_model_larger_than_gpu_and_ram() -> None:
    hw = get_hardware("RTX4090,ram=64GiB")
    assert plan(hw, LLAMA_70B, PlanRequest(mode="inference")).best is None
    p = plan(hw, LLAMA_70B, PlanRequest(mode="inference", nvme_bytes=2048 * GiB))
    best = p.best
    assert best is not None and best.strategy.offload_param == "nvme"
    assert best.strategy.offload_optimizer == "none"  # ZeRO-Inference: NVMe parameters need no optimizer
    assert best.predicted.nvme_bytes >= 2 * LLAMA_70B.total_params
    assert best.predicted.cpu_bytes < 64 * GiB


def test_no_optimizer_states_or_gradients_and_weights_sharded() -> None:
    model = load_model_spec("llama-7b")
    one = estimate_memory(model, _inference(gpus_per_node=1, micro_batch_size=4), 2048)
    eight = estimate_memory(model, _inference(gpus_per_node=8, micro_batch_size=4), 2048)
    for est in (one, eight):
        names = dict(est.gpu_items)
        assert not any("optimizer" in k or "gradient" in k for k in names)
    assert dict(one.gpu_items)["parameters"] == 2 * model.total_params
    assert dict(eight.gpu_items)["parameters"] == 2 * model.total_params // 8


def test_activations_are_one_layer_not_the_whole_stack() -> None:
    model = load_model_spec("llama-7b")
    est = estimate_memory(model, _inference(micro_batch_size=1), 2048)
    layer = dict(est.phases)
    assert set(layer) == {"forward (layers)", "forward (logits)"}
    one_layer = inference_layer_bytes_per_token(model, 2048) * 2048
    # Training keeps every layer's activations; inference never more than one layer (or the head) at a time.
    trained = estimate_memory(model, Strategy(zero_stage=3, micro_batch_size=1), 2048)
    assert est.per_sample_device < trained.per_sample_device / 5
    assert est.per_sample_device >= one_layer


def test_throughput_uses_forward_flops_and_is_bounded_by_pcie() -> None:
    hw = get_hardware("A100-40GB,ram=512GiB")
    seq = 2048
    assert flops_per_token(LLAMA_70B, seq, mode="inference") < flops_per_token(LLAMA_70B, seq) / 2.9
    fetch = 2 * LLAMA_70B.total_params / pcie_bytes_per_s(hw.gpus[0])
    for mbs in (1, 4, 45):
        tp = estimate_throughput(hw, LLAMA_70B, _inference(offload_param="cpu", micro_batch_size=mbs), seq)
        assert tp.step_seconds >= fetch  # a forward cannot beat moving every weight across PCIe once
    # At micro-batch 1 the transfer dominates; at a large micro-batch compute hides most of it.
    small = estimate_throughput(hw, LLAMA_70B, _inference(offload_param="cpu", micro_batch_size=1), seq)
    large = estimate_throughput(hw, LLAMA_70B, _inference(offload_param="cpu", micro_batch_size=45), seq)
    assert small.bottleneck == "parameter fetch (PCIe)"
    assert large.tokens_per_sec > 5 * small.tokens_per_sec


def test_reasons_state_the_assumption_and_the_kv_cache() -> None:
    hw = get_hardware("8xA100-80GB,ram=1TiB")
    p = plan(hw, LLAMA_70B, PlanRequest(mode="inference", seq_len=2048))
    best = p.best
    assert best is not None
    text = "\n".join(best.reasons)
    kv_gib = kv_cache_bytes_per_token(LLAMA_70B) * 2048 / GiB
    assert "with the KV cache transformers keeps by default (use_cache=True)" in text
    assert f"{kv_gib * 1024:.1f} MiB" in text and "use_cache=False frees" in text
    # and the prediction counts it: the peak's parts name it, at micro-batch x that per sample
    parts = dict(best.predicted.breakdown)
    kv = kv_cache_bytes_per_token(LLAMA_70B) * 2048 * best.strategy.micro_batch_size
    assert parts["KV cache (use_cache)"] == kv
    # and the peak's reason names it apart from DeepSpeed's buffers
    peak = next(r for r in best.reasons if r.startswith("peak during"))
    assert f"KV cache {fmt_bytes(kv)}" in peak
    assert "per new token" in text
    assert "ZeRO-3 inference" in text


def test_a_target_batch_is_the_batch_per_forward() -> None:
    hw = get_hardware("8xA100-80GB,ram=1TiB")
    p = plan(hw, load_model_spec("llama-7b"), PlanRequest(mode="inference", global_batch=64))
    assert all(c.strategy.micro_batch_size == 8 for c in p.candidates)
    assert all(c.strategy.gradient_accumulation_steps == 1 for c in p.candidates)


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"zero_stage": 2}, "stage 3"),
        ({"offload_optimizer": "cpu"}, "no optimizer"),
        ({"activation_checkpointing": True}, "backward"),
        ({"gradient_accumulation_steps": 2}, "accumulation"),
        ({"zero_quantized_gradients": True}, "gradients"),
    ],
)
def test_training_only_choices_are_refused_in_inference(changes: dict[str, object], words: str) -> None:
    problems = _inference(**changes).problems()
    assert problems and words in " ".join(problems)
    hw = get_hardware("8xA100-80GB,ram=1TiB")
    c = evaluate(hw, load_model_spec("llama-7b"), _inference(**changes), PlanRequest(mode="inference"))
    assert not c.fits and "unsupported" in c.limits


def test_nvme_parameters_alone_are_valid_for_inference_only() -> None:
    assert not _inference(offload_param="nvme").problems()
    assert Strategy(zero_stage=3, offload_param="nvme").problems()


def test_max_batch_table_in_inference_mode() -> None:
    hw = get_hardware("A100-40GB,ram=512GiB")
    rows = max_batch_table(hw, LLAMA_70B, PlanRequest(mode="inference"))
    assert {r.strategy.offload_param for r in rows} == {"none", "cpu"}
    by = {r.strategy.offload_param: r for r in rows}
    assert by["none"].max_micro_batch == 0 and by["cpu"].max_micro_batch > 0
    assert cal.INFERENCE_LOGITS_BYTES_PER_VOCAB == 2.0  # the head counts 16-bit logits for every position


def test_moe_memory_counts_every_expert_and_compute_only_the_active_ones() -> None:
    mixtral = load_model_spec("mixtral-8x7b")
    assert mixtral.active_params < mixtral.total_params / 3
    est = estimate_memory(mixtral, Strategy(zero_stage=0, micro_batch_size=1), 2048)
    assert dict(est.gpu_items)["parameters"] == 2 * mixtral.total_params
    assert flops_per_token(mixtral, 2048) < 6 * mixtral.active_params * 1.1
    p = plan(get_hardware("8xH100,ram=2TiB"), mixtral, PlanRequest(mode="inference"))
    assert p.best is not None
    assert any("compute the" in r and "2 of 8 experts" in r for r in p.best.reasons)
    assert any("must be a ZeRO-3 leaf" in r for r in p.best.reasons)


def test_a_model_without_the_kv_cache_is_planned_and_explained_without_it() -> None:
    """A model whose config turns the cache off (ModelSpec.use_cache, from config.json or --model ...,use_cache=0):
    the pass holds no KV cache, fits a larger micro-batch on the same card, and the reasons say what generation
    would add instead."""
    hw = get_hardware("8xA100-80GB,ram=1TiB")
    request = PlanRequest(mode="inference", seq_len=2048)
    with_cache = plan(hw, LLAMA_70B, request).best
    without = plan(hw, replace(LLAMA_70B, use_cache=False), request).best
    assert with_cache is not None and without is not None
    assert "KV cache (use_cache)" not in dict(without.predicted.breakdown)
    assert without.max_micro_batch > with_cache.max_micro_batch
    text = "\n".join(without.reasons)
    assert "without a KV cache (use_cache=False); generation's adds" in text

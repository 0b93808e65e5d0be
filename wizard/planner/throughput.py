"""The throughput model (pure arithmetic): seconds per optimizer step, tokens/s and MFU for one strategy.

A step is GAS micro-steps of forward+backward (matmul time at a size-dependent efficiency, launch overhead, the
host's Python work where the GPU waits for it, stage 3's fetch hooks among it, exposed communication) plus one
optimizer update (on the GPU, or on the CPU behind PCIe when offloaded, or behind NVMe). FLOPs per token follow PaLM (arXiv:2204.02311, appendix B). Constants:
``wizard.planner.calibration``.

Inference (``Strategy.mode == "inference"``): a step is one forward over the micro-batch -- 2N + 4*L*h*s FLOPs per
token, no optimizer; stage 3 all-gathers the weights once per forward, and offloaded weights cross PCIe (and NVMe)
once per forward, partly hidden behind compute by the prefetch, so a forward never beats its transfer time.
"""

from __future__ import annotations

from dataclasses import dataclass

from wizard.hardware.report import GPUInfo, HardwareReport, cores_per_rank
from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.planner import finetune as ft
from wizard.planner.buffers import DEFAULT_BUFFERS, ZeroBuffers
from wizard.planner.memory import recipe_activation_bytes_per_token, sdpa_padded_head_dim, unfused_16bit_step
from wizard.planner.zero3 import nvme_parameters, stage3_training_gathers
from wizard.strategy import Strategy


@dataclass(frozen=True)
class ThroughputEstimate:
    tokens_per_sec: float  # whole job
    samples_per_sec: float
    mfu: float  # model FLOPs (no recomputation) / peak of all GPUs
    step_seconds: float
    flops_per_token: float  # model FLOPs, forward + backward
    peak_flops_per_gpu: float
    peak_source: str  # "catalog", "compute capability", "assumed"
    parts: tuple[tuple[str, float], ...]  # seconds per optimizer step, by cause
    bottleneck: str  # the largest part


def flop_params(model: ModelSpec) -> int:
    """Parameters a token multiplies through: active parameters minus pure lookups (input/position embeddings)."""
    lookups = max(0, model.embedding_params - model.vocab * model.hidden)
    return max(1, model.active_params - lookups)


def flops_per_token(model: ModelSpec, seq_len: int, *, recompute: bool = False, mode: str = "train") -> float:
    """Training ~ 6N + 12*L*h*s (PaLM, arXiv:2204.02311, appendix B); full recomputation runs the forward's third
    again, 8N + 16*L*h*s; inference is that forward alone, 2N + 4*L*h*s."""
    n = flop_params(model)
    attn = model.layers * model.heads * model.head_dim * seq_len
    if mode == "inference":
        return 2.0 * n + 4.0 * attn
    if model.finetune.uses_lora:  # a frozen base: no weight gradients (wizard.planner.finetune)
        return ft.lora_flops_per_token(model, n, attn, recompute)
    if recompute:
        return 8.0 * n + 16.0 * attn
    return 6.0 * n + 12.0 * attn


def peak_flops(gpu: GPUInfo | None, precision: str) -> tuple[float, str]:
    """Dense peak FLOP/s of one GPU: the catalog's figure, else by compute capability, else an assumption."""
    if gpu is not None:
        catalog = {
            "bf16": gpu.peak_tflops_bf16,
            "fp16": gpu.peak_tflops_fp16 or gpu.peak_tflops_bf16,
            "fp32": gpu.peak_tflops_fp32,
        }[precision]
        if catalog:
            return catalog * 1e12, "catalog"
        if gpu.compute_capability in cal.FALLBACK_PEAK_TFLOPS:
            tf = cal.FALLBACK_PEAK_TFLOPS[gpu.compute_capability]
            if precision == "fp32":
                tf *= cal.FP32_SHARE_OF_PEAK
            return tf * 1e12, "compute capability"
    tf = cal.FALLBACK_PEAK_TFLOPS_UNKNOWN * (cal.FP32_SHARE_OF_PEAK if precision == "fp32" else 1.0)
    return tf * 1e12, "assumed"


def activation_traffic_bytes_per_token(model: ModelSpec, seq_len: int, s: Strategy) -> float:
    """HBM bytes per token that the element-wise work (norms, GELU/SwiGLU, dropout, softmax, the loss head's fp32
    upcast) moves in forward + backward: a multiple of what forward saves for backward (both scale with the
    activation tensors), repeated for the forward part when checkpointing recomputes it."""
    # the recipe's bytes: a padded head dim's copies are in the attention's own rate (attention_share)
    saved = model.layers * recipe_activation_bytes_per_token(model, seq_len)
    traffic = cal.ACTIVATION_TRAFFIC_PER_SAVED_BYTE * (saved + cal.HEAD_BYTES_PER_HIDDEN * model.hidden)
    traffic += cal.LOSS_HEAD_TRAFFIC_BYTES_PER_VOCAB * model.vocab
    bias = zero3_bias_add_bytes_per_token(model, s)
    if s.mode == "inference":
        return traffic * cal.INFERENCE_TRAFFIC_SHARE + bias
    if s.activation_checkpointing:
        traffic += cal.ACTIVATION_TRAFFIC_PER_SAVED_BYTE * saved * cal.FORWARD_SHARE_OF_TRAFFIC
    return traffic * (2.0 if s.precision == "fp32" else 1.0) + bias


def zero3_bias_add_bytes_per_token(model: ModelSpec, s: Strategy) -> float:
    """HBM bytes per token of the bias adds that ZeRO-3's linear runs as kernels of their own. When the engine
    partitions a model it replaces torch.nn.functional.linear with LinearFunctionForZeroStage3
    (deepspeed/runtime/zero/linear.py, installed by zero.Init(module=...) while memory_efficient_linear is on, its
    default; DeepSpeed 0.19.8), whose forward of a 3-D input multiplies, then adds the bias in place: a read and a
    write of every biased output, which torch's own linear folds into the GEMM. Again in the forward that
    checkpointing recomputes; the backward's bias gradient is the same reduction either way."""
    if s.zero_stage != 3 or not model.linear_bias_outputs:
        return 0.0
    forwards = 2 if s.mode == "train" and s.activation_checkpointing else 1
    element = 4 if s.precision == "fp32" else 2
    return forwards * 2 * element * model.layers * model.linear_bias_outputs


def head_flops_per_token(model: ModelSpec, mode: str = "train") -> float:
    """The output head's matmuls per token: forward 2*V*h, in training the input gradient 2*V*h and, unless the base
    is frozen (LoRA), the weight gradient 2*V*h (checkpointing does not recompute the head)."""
    if mode == "inference":
        return 2.0 * model.vocab * model.hidden
    return (4.0 if model.finetune.uses_lora else 6.0) * model.vocab * model.hidden


def attention_flops_per_token(
    model: ModelSpec, seq_len: int, *, recompute: bool = False, mode: str = "train"
) -> float:
    """The attention score and value matmuls per token as ``flops_per_token`` counts them (PaLM: 4*L*h*s a forward,
    backward twice that, the forward again with recomputation)."""
    attn = model.layers * model.heads * model.head_dim * seq_len
    if mode == "inference":
        return 4.0 * attn
    return (16.0 if recompute else 12.0) * attn


def attention_share(model: ModelSpec) -> float:
    """Fused attention's speed on PaLM's FLOP count as a share of the matmuls': full speed at head dim 128, slower
    below (fewer FLOPs per byte of each tile) and above (measured: bench/attention_rate.py), slowest where the head
    dim SDPA pads before the fused kernel (memory.sdpa_padded_head_dim)."""
    aligned = sdpa_padded_head_dim(model) == model.head_dim
    if model.head_dim > 128 and aligned:
        return cal.ATTENTION_SHARE_LARGE_HEAD
    if model.head_dim in (0, 128):  # 0: not known
        return 1.0
    if aligned:
        return cal.ATTENTION_SHARE_SMALL_HEAD
    return cal.ATTENTION_SHARE_UNALIGNED_HEAD


def head_matmul_share(model: ModelSpec) -> float:
    """The output head's matmul speed as a share of the other matmuls': a vocabulary that is not a multiple of
    MATMUL_ALIGN_ELEMENTS leaves the head's GEMMs with unaligned leading dimensions (GPT-2's 50,257)."""
    return 1.0 if model.vocab % cal.MATMUL_ALIGN_ELEMENTS == 0 else cal.UNALIGNED_HEAD_MATMUL_SHARE


def compute_seconds_per_token(
    model: ModelSpec, s: Strategy, seq_len: int, peak: float, hbm_bytes_per_s: float
) -> tuple[float, float]:
    """(matmul seconds, element-wise seconds) per token of one micro-step on one GPU."""
    recompute = s.activation_checkpointing and s.mode == "train"
    f_exec = flops_per_token(model, seq_len, recompute=recompute, mode=s.mode)
    head = min(f_exec, head_flops_per_token(model, s.mode))
    attn = min(f_exec - head, attention_flops_per_token(model, seq_len, recompute=recompute, mode=s.mode))
    rest = f_exec - head - attn
    matmul = (rest + head / head_matmul_share(model) + attn / attention_share(model)) / (
        peak * cal.MATMUL_EFFICIENCY
    )
    return matmul, activation_traffic_bytes_per_token(model, seq_len, s) / hbm_bytes_per_s


def hbm_bytes_per_s(gpu: GPUInfo | None) -> float:
    gbs = (gpu.memory_bandwidth_gbs if gpu is not None else None) or cal.DEFAULT_MEMORY_GBS
    return gbs * 1e9


def _has_nvlink(gpu: GPUInfo | None, hardware: HardwareReport) -> bool:
    if gpu is None or hardware.gpus_per_node < 2:
        return False
    if gpu.nvlink_peers or gpu.nvlink_count is not None:  # NVML saw the links (or their absence)
        return bool(gpu.nvlink_peers) or bool(gpu.nvlink_count)
    return bool(gpu.nvlink_gbs)  # not seen: what the catalog says the board has


def _pcie_x16_bytes_per_s(gpu: GPUInfo | None) -> float:
    """Per direction, x16, at the GPU's PCIe generation; one outside the table counts as the nearest in it, so that
    a newer link is never predicted slower than an older one."""
    table = cal.PCIE_X16_BYTES_PER_SECOND
    gen = (gpu.pcie_gen if gpu is not None else None) or cal.DEFAULT_PCIE_GEN
    return table[min(max(gen, min(table)), max(table))]


def pcie_bytes_per_s(gpu: GPUInfo | None) -> float:
    return _pcie_x16_bytes_per_s(gpu) * cal.PCIE_EFFICIENCY


def intra_node_bus_bytes_per_s(gpu: GPUInfo | None, hardware: HardwareReport) -> float:
    if gpu is not None and _has_nvlink(gpu, hardware) and gpu.nvlink_gbs:
        return gpu.nvlink_gbs * 1e9 * cal.NVLINK_BUSBW_SHARE
    return _pcie_x16_bytes_per_s(gpu) * cal.PCIE_BUSBW_SHARE


def inter_node_bus_bytes_per_s(hardware: HardwareReport) -> float:
    gbps = hardware.inter_node_gbps or cal.DEFAULT_INTER_NODE_GBPS
    return gbps * 1e9 / 8 * cal.INTER_NODE_EFFICIENCY


def _world_bus_bytes_per_s(hardware: HardwareReport, s: Strategy, gpu: GPUInfo | None) -> float:
    intra = intra_node_bus_bytes_per_s(gpu, hardware)
    return min(intra, inter_node_bus_bytes_per_s(hardware)) if s.nodes > 1 else intra


@dataclass(frozen=True)
class CommunicationVolume:
    """Bytes one GPU sends in the collectives of one optimizer step (training) or one forward (inference)."""

    per_micro_step: float  # every micro-step, over the whole world's ring
    per_micro_step_in_node: float  # every micro-step, inside the node only (ZeRO++ hpZ's backward gathers)
    per_optimizer_step: float  # once per step, over the whole world's ring

    def per_step(self, gradient_accumulation_steps: int) -> float:
        micro = self.per_micro_step + self.per_micro_step_in_node
        return gradient_accumulation_steps * micro + self.per_optimizer_step


def communication_volume(
    model: ModelSpec, s: Strategy, buf: ZeroBuffers = DEFAULT_BUFFERS
) -> CommunicationVolume:
    """What each GPU sends, as DeepSpeed 0.19.8 runs it: ring collectives move (N-1)/N of the buffer per pass, an
    all-reduce two passes.
    - Stage 0 all-reduces the gradients once per step.
    - Stages 1-2 all-reduce each gradient bucket (``ZeroBuffers.gradient_all_reduce``; reduced to the owners instead,
      one pass) and all-gather the updated weights after the step: stage 1 at the accumulation boundary only,
      stage 2 in every micro-step's backward.
    - Stage 3 gathers the weights in every forward, again in backward all but what the forward left gathered (and a
      tied embedding twice more: ``zero3.stage3_training_gathers``), and reduce-scatters the gradients in every
      backward; nothing after the step (each rank updates its partition, and the next forward gathers it).
    Checked against DeepSpeed's own comms logger on two CPU ranks (bench/comm_volume.py)."""
    N, train = s.world_size, s.mode == "train"
    if N <= 1:
        return CommunicationVolume(0.0, 0.0, 0.0)
    # Weights are gathered as stored (4-bit for QLoRA); gradients exist for the trainable parameters only.
    w, P = s.weight_bytes, ft.trainable_params(model)
    P_stored = ft.stored_elements(model, w)
    ring = (N - 1) / N
    if s.zero_stage == 3:
        gather = ring * (1.0 if s.zero_quantized_weights else w) * P_stored
        if not train:
            return CommunicationVolume(gather, 0.0, 0.0)
        again = gather * (stage3_training_gathers(model, s, buf) - 1.0)
        grads = ring * w * P * (0.25 if s.zero_quantized_gradients else 1.0)
        if s.zero_hpz_partition_size > 1 and s.nodes > 1:  # hpZ: backward gathers from the node's copy
            return CommunicationVolume(gather + grads, again, 0.0)
        return CommunicationVolume(gather + again + grads, 0.0, 0.0)
    if not train:
        return CommunicationVolume(0.0, 0.0, 0.0)
    reduce = (2.0 if buf.gradient_all_reduce else 1.0) * ring * w * P
    if s.zero_stage == 2:
        return CommunicationVolume(reduce, 0.0, ring * w * P)
    if s.zero_stage == 1:
        return CommunicationVolume(0.0, 0.0, reduce + ring * w * P)
    return CommunicationVolume(0.0, 0.0, 2 * ring * w * P)


def _communication_seconds(
    hardware: HardwareReport, model: ModelSpec, s: Strategy, gpu: GPUInfo | None, buf: ZeroBuffers
) -> tuple[float, float]:
    """Communication per GPU, (per micro-step, per optimizer step): ``communication_volume`` over the buses."""
    v = communication_volume(model, s, buf)
    if not (v.per_micro_step or v.per_micro_step_in_node or v.per_optimizer_step):
        return 0.0, 0.0
    bus = _world_bus_bytes_per_s(hardware, s, gpu)
    micro = v.per_micro_step / bus + v.per_micro_step_in_node / intra_node_bus_bytes_per_s(gpu, hardware)
    return micro, v.per_optimizer_step / bus


def host_micro_step_seconds(model: ModelSpec, s: Strategy) -> dict[str, float]:
    """The host's own work in one micro-step, by cause: the framework's Python that issues every layer's kernels
    (HF's module calls, autograd, DeepSpeed's gradient hooks), again for the forward that checkpointing recomputes;
    at stage 3 also the fetch/release hooks of every submodule, forward and backward
    (partitioned_param_coordinator.py fetch_sub_module / release_sub_module, DeepSpeed 0.19.8), which the
    recomputed forward fires again (calibration.HOST_SECONDS_PER_LAYER, STAGE3_SECONDS_PER_LAYER)."""
    train = s.mode == "train"
    per_layer = cal.HOST_SECONDS_PER_LAYER.get(model.family, cal.HOST_SECONDS_PER_LAYER_DEFAULT)
    if train:
        share = 1.0 + (cal.HOST_RECOMPUTE_SHARE if s.activation_checkpointing else 0.0)
    else:
        share = cal.INFERENCE_LAUNCH_SHARE
    out = {FRAMEWORK_HOST_PART: per_layer * model.layers * share}
    if s.zero_stage == 3:
        if train:
            hook_share = 1.0 + (cal.STAGE3_RECOMPUTE_HOOK_SHARE if s.activation_checkpointing else 0.0)
        else:
            hook_share = cal.INFERENCE_STAGE3_HOOK_SHARE
        # STAGE3_SECONDS_PER_LAYER was fit on full models: it scales with the calls a layer makes beyond theirs
        calls = module_calls_per_layer(model) / _architecture_calls_per_layer(model)
        out[STAGE3_HOOKS_PART] = cal.STAGE3_SECONDS_PER_LAYER * model.layers * hook_share * calls
    return out


def _architecture_calls_per_layer(model: ModelSpec) -> int:
    return cal.MODULE_CALLS_PER_LAYER.get(model.model_type, cal.MODULE_CALLS_PER_LAYER_DEFAULT)


def module_calls_per_layer(model: ModelSpec) -> float:
    """Submodule forward calls per layer, each of which fires stage 3's fetch and release hooks: the architecture's
    own (calibration.MODULE_CALLS_PER_LAYER) and, per LoRA-wrapped linear layer, PEFT's base layer, dropout, A and
    B (calibration.LORA_MODULE_CALLS_PER_WRAPPER)."""
    wrapped = sum(layer.count for layer in ft.lora_layers(model))
    return _architecture_calls_per_layer(model) + cal.LORA_MODULE_CALLS_PER_WRAPPER * wrapped / max(
        1, model.layers
    )


def host_before_boundary(model: ModelSpec, s: Strategy, host: dict[str, float]) -> dict[str, float]:
    """The host's work in a micro-step before the accumulation boundary: at stages 0-1 the gradients are reduced at
    the boundary only, tensor by tensor in Python (calibration.BOUNDARY_REDUCE_HOST_SECONDS_PER_LAYER, part of the
    per-layer figure fit at one micro-step per step); the earlier micro-steps skip it. Stages 2-3 reduce in every
    backward."""
    if s.mode != "train" or s.zero_stage > 1:
        return host
    skipped = cal.BOUNDARY_REDUCE_HOST_SECONDS_PER_LAYER * model.layers
    return {**host, FRAMEWORK_HOST_PART: max(0.0, host[FRAMEWORK_HOST_PART] - skipped)}


def exposed_host_seconds(gpu_seconds: float, host: dict[str, float]) -> dict[str, float]:
    """What of the host's work a micro-step waits for, by cause. The host issues kernels while the GPU drains the
    ones already queued, so host time costs only where it catches up with the GPU's: the two overlap as a smooth
    maximum (a power mean), exposed = (gpu^p + host^p)^(1/p) - gpu, shared out in proportion to the causes. At a
    small micro-batch of a ~1B model the host sets the pace (micro-batch 1 of llama-1b: 0.157 s a step on an H200
    whose GPU work is ~0.1 s)."""
    total = sum(host.values())
    if total <= 0:
        return dict.fromkeys(host, 0.0)
    p = cal.HOST_OVERLAP_POWER
    exposed = total if gpu_seconds <= 0 else (gpu_seconds**p + total**p) ** (1.0 / p) - gpu_seconds
    return {k: max(0.0, exposed) * v / total for k, v in host.items()}


def stage3_copy_seconds(model: ModelSpec, s: Strategy, hbm: float) -> float:
    """Gather/partition copies per micro-step: memory-bound work per parameter that stages 1-2 do not do (the
    gathered weight buffer filled in every fetch, gradients copied into the reduce bucket, reduce-scattered,
    averaged and copied into their partition: stage3.py __reduce_and_partition_ipg_grads / partition_grads); scales
    with HBM bandwidth as the optimizer's per-parameter time does."""
    params = ft.stored_elements(model, s.weight_bytes)
    copies = cal.STAGE3_SECONDS_PER_PARAM * params * cal.CALIBRATION_MEMORY_GBS * 1e9 / hbm
    return copies * (1.0 if s.mode == "train" else cal.INFERENCE_STAGE3_HOOK_SHARE)


# The parts of a training step that run in DeepSpeed's step, once per optimizer step whatever the accumulation.
CPU_ADAM_PART = "CPU Adam"
PARAM_WRITE_BACK_PART = "16-bit weights to the host (pageable, converted there)"
NVME_SWAP_PART = "NVMe swaps"
NVME_PARAM_WRITE_PART = "16-bit weights to NVMe"
FRAMEWORK_HOST_PART = "host-bound (framework Python)"
STAGE0_PART = "16-bit optimizer wrapper (stage 0)"
STEP_PARTS = (
    "optimizer step",
    CPU_ADAM_PART,
    "16-bit weights back (pageable)",
    PARAM_WRITE_BACK_PART,
    NVME_SWAP_PART,
    NVME_PARAM_WRITE_PART,
)
STAGE3_HOOKS_PART = "ZeRO-3 fetch hooks"
LAUNCH_PART = "launch overhead"
# What of a step the host sets, beyond the GPU's work it waits on: the launches per layer, the framework's Python and
# the stage-3 hooks (host_micro_step_seconds's causes), and stage 0's 16-bit wrapper
HOST_PARTS = (LAUNCH_PART, FRAMEWORK_HOST_PART, STAGE3_HOOKS_PART, STAGE0_PART)


def host_share(tp: ThroughputEstimate) -> float:
    """The share of a predicted step that waits on the host's Python (HOST_PARTS): where it is large, the step is
    host-bound and runs as fast as the CPU and the process let it (calibration.HOST_BOUND_SPREAD)."""
    if tp.step_seconds <= 0:
        return 0.0
    return sum(v for k, v in tp.parts if k in HOST_PARTS) / tp.step_seconds


def host_bound(tp: ThroughputEstimate) -> bool:
    """Whether a predicted step waits on the host for calibration.HOST_BOUND_SHARE of it or more: its speed moves with
    the CPU and the process (the plan says so; the run history learns such a run only from its own host CPU)."""
    return host_share(tp) >= cal.HOST_BOUND_SHARE


def optimizer_kind(zero_stage: int) -> str:
    """Which DeepSpeed optimizer step a stage runs (calibration.OPTIMIZER_SECONDS_PER_PARAM's key): the 16-bit
    wrapper at stage 0 (FP16_UnfusedOptimizer, for bf16 too), stage_1_and_2.py's for stages 1 and 2, stage3.py's."""
    return "stage 0" if zero_stage == 0 else "stage 3" if zero_stage == 3 else "stage 1-2"


def offload_gradient_transfers(zero_stage: int, gradient_accumulation_steps: int) -> int:
    """How many times a step moves each 16-bit gradient over PCIe with the optimizer on the CPU (DeepSpeed 0.19.8):
    - ZeRO-1 reduces only at the accumulation boundary (engine.py allreduce_gradients): once, however many
      micro-steps accumulate on the GPU;
    - ZeRO-2 reduces in every backward. At one micro-step it copies the gradients out once. Accumulating, it keeps the
      running sum in pinned host buffers: every micro-step copies its gradients out, every one after the first first
      copies the sum back in to add to it (stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu), and the boundary
      copies the result into the fp32 gradients: 2 x steps;
    - ZeRO-3's gradient partitions live in host memory; every micro-step after the first copies them in and out to
      add (stage3.py partition_grads): 2 more per extra micro-step, on the reduce stream (see _optimizer_seconds)."""
    gas = gradient_accumulation_steps
    if gas <= 1 or zero_stage == 1:
        return 1
    return 2 * gas if zero_stage == 2 else 1 + 2 * (gas - 1)


def _optimizer_seconds(
    hardware: HardwareReport,
    model: ModelSpec,
    s: Strategy,
    hbm: float,
    pcie: float,
    hidden_behind: float,
    fused: bool = False,
) -> dict[str, float]:
    """The optimizer update per step: on the GPU, or CPU Adam behind PCIe copies (and NVMe swaps).
    ``fused``: the config makes DeepSpeed build its FusedAdam (buffers.ZeroBuffers.fused_optimizer): stage 0 in 16
    bits steps through FP16_Optimizer.
    ``hidden_behind``: seconds of each micro-step before the boundary the reduce stream has left after the
    collectives (estimate_throughput: the whole micro-step, less what the collectives take). Accumulating, ZeRO-3
    moves the running sum of every micro-step after the first on that stream (overlap_comm, its default); the copy
    to the host at the boundary, which the optimizer step waits for, stays in the step as at one micro-step.
    Measured: llama-1b ZeRO-3 + offload + checkpointing ran 4 micro-steps at 0.49 s each where 1 took 0.52 s, the 6
    more transfers nowhere to be seen (bench/results/plan_accuracy-2026-12-04-1gpu-accum-accum-offload.json)."""
    N, gas, w = s.world_size, s.gradient_accumulation_steps, s.weight_bytes
    shards = N if s.zero_stage >= 1 else 1
    local = ft.trainable_params(model) / shards
    # the host's work tensor by tensor, with the optimizer on the CPU too (it sums the gradient norms one .item() per
    # tensor there: stage_1_and_2.py complete_grad_norm_calculation_for_cpu_offload, DeepSpeed 0.19.8)
    parts = {"optimizer step": cal.OPTIMIZER_SECONDS_PER_LAYER * model.layers}
    per_param = cal.OPTIMIZER_SECONDS_PER_PARAM[optimizer_kind(s.zero_stage)]
    if unfused_16bit_step(s) and fused:
        # FP16_Optimizer over DeepSpeed's FusedAdam: casts and copies back tensor by tensor, the rest on one flat
        # buffer (calibration.STAGE0_FUSED_SECONDS_PER_TENSOR)
        parts["optimizer step"] = cal.STAGE0_FUSED_SECONDS_PER_TENSOR * ft.trainable_tensor_count(model)
        per_param = cal.STAGE0_FUSED_SECONDS_PER_PARAM
    elif unfused_16bit_step(s):
        # DeepSpeed's 16-bit wrapper (FP16_UnfusedOptimizer, for bf16 too) steps tensor by tensor: each its norm, its
        # fp32 gradient copy, its 16-bit weights written back (calibration.STAGE0_SECONDS_PER_TENSOR)
        parts["optimizer step"] = cal.STAGE0_SECONDS_PER_TENSOR * ft.trainable_tensor_count(model)
    elif s.zero_stage == 0:
        per_param = cal.STAGE0_FP32_SECONDS_PER_PARAM
    if not s.steps_on_host:
        per_param *= cal.CALIBRATION_MEMORY_GBS * 1e9 / hbm
        parts["optimizer step"] += per_param * local
        if s.zero_stage == 3 and s.offload_param != "none":
            # The updated fp32 partition (GPU) into the offloaded 16-bit one (pinned host) in one blocking copy_
            # (stage3.py _reassign_or_swap_out_partitioned_parameters, DeepSpeed 0.19.8): across devices and dtypes
            # PyTorch copies the fp32 to a pageable host temporary and converts it there
            # (calibration.STAGE3_PARAM_OFFLOAD_WRITE_BACK_BYTES_PER_SECOND).
            parts[PARAM_WRITE_BACK_PART] = w * local / cal.STAGE3_PARAM_OFFLOAD_WRITE_BACK_BYTES_PER_SECOND
        return parts
    cores = cores_per_rank(hardware.host.work_cores, s.gpus_per_node)
    parts[CPU_ADAM_PART] = local * (
        cal.CPU_ADAM_SECONDS_PER_PARAM + cal.CPU_ADAM_CORE_SECONDS_PER_PARAM / cores
    )
    # Gradients to the host every micro-step, updated 16-bit weights back once per step. Stage 3 writes the weights
    # back with one blocking fp32 (host) -> 16-bit copy_ (stage3.py _reassign_or_swap_out_partitioned_parameters,
    # DeepSpeed 0.19.8): into the GPU partition, PyTorch converts on the host into a pageable temporary and copies
    # that (aten/src/ATen/native/cuda/Copy.cu, copy_kernel_cuda: blocking copies convert on the CPU), at the host's
    # pageable rate; into offloaded (pinned host) parameters it is a host-side conversion, no PCIe at all. Stages
    # 1-2 convert into a pinned 16-bit buffer first and copy that without blocking (stage_1_and_2.py step).
    weights_back = w * local
    grads = offload_gradient_transfers(s.zero_stage, gas) * w * local
    if s.zero_stage == 3 and gas > 1:
        # the round trips of the micro-steps after the first, each behind its own micro-step's compute
        round_trips = grads - w * local
        hidden = (gas - 1) * hidden_behind * pcie
        grads = w * local + max(0.0, round_trips - hidden)
    if s.zero_stage == 3:
        if s.offload_param == "none":
            parts["16-bit weights back (pageable)"] = weights_back / cal.STAGE3_PAGEABLE_COPY_BYTES_PER_SECOND
        weights_back = 0.0
    parts["PCIe copies"] = (grads + weights_back) / pcie
    if s.offload_optimizer == "nvme":
        # each way 16 bytes a parameter, the node's ranks on one drive (calibration.NVME_READ_BYTES_PER_SECOND)
        read, write = nvme_rates(hardware)
        node_bytes = s.gpus_per_node * 16 * local
        parts[NVME_SWAP_PART] = node_bytes / read + node_bytes / write
    written = nvme_parameters(model, s).written
    if written:
        # the updated 16-bit weights of the trained parameters on NVMe written back to their swap files every step
        # (stage3.py _partitioned_params_swap_out, DeepSpeed 0.19.8); those kept in host memory update in place
        parts[NVME_PARAM_WRITE_PART] = s.gpus_per_node * w * written / nvme_rates(hardware)[1]
    return parts


def nvme_rates(hardware: HardwareReport) -> tuple[float, float]:
    """(read, write) bytes/s of the drive NVMe offload swaps to (HostInfo.swap_drive): its own where described,
    else calibration's assumption."""
    drive = hardware.host.swap_drive
    read = drive.read_bytes_per_s if drive is not None else None
    write = drive.write_bytes_per_s if drive is not None else None
    return read or cal.NVME_READ_BYTES_PER_SECOND, write or cal.NVME_WRITE_BYTES_PER_SECOND


def _parameter_fetch_seconds(
    model: ModelSpec, s: Strategy, pcie: float, busy: float, buf: ZeroBuffers, nvme_read: float
) -> dict[str, float]:
    """Offloaded parameters fetched over PCIe (and from NVMe) every forward, and in training's backward all but what
    the forward left gathered (zero3.stage3_training_gathers); ``busy`` is one micro-step's compute plus the host
    time the GPU waits for."""
    train, gas = s.mode == "train", s.gradient_accumulation_steps
    local_params = ft.stored_parameter_bytes(model, s.weight_bytes) / s.world_size
    passes = stage3_training_gathers(model, s, buf) if train else 1.0
    fetch = {"parameter fetch (PCIe)": gas * passes * local_params / pcie}
    fetched = nvme_parameters(model, s).fetched
    if fetched:  # what training keeps in host memory is fetched from there
        fetch["parameter fetch (NVMe)"] = (
            gas * passes * s.gpus_per_node * s.weight_bytes * fetched / nvme_read
        )
    # A micro-step is bounded by its transfers: the prefetch hides them behind its busy time only up to a share of
    # it, in training as in inference (calibration.OFFLOAD_FETCH_OVERLAP).
    hidden = cal.OFFLOAD_FETCH_OVERLAP * gas * busy
    total = sum(fetch.values())
    exposed = max(0.0, total - hidden)
    return {k: v * exposed / total for k, v in fetch.items()}


ALLOCATOR_REMAP_PART = "allocator remapping (expandable segments)"


def estimate_throughput(
    hardware: HardwareReport,
    model: ModelSpec,
    s: Strategy,
    seq_len: int,
    *,
    buffers: ZeroBuffers = DEFAULT_BUFFERS,
    allocator_remaps: bool = False,
) -> ThroughputEstimate:
    """Seconds per optimizer step (training) or per forward pass (inference) by cause, and what follows.
    ``buffers``: what the DeepSpeed config sets beyond the strategy (the optimizer it builds). ``allocator_remaps``:
    PyTorch's allocator runs with expandable segments on a card that cannot hold the cache it would keep with room,
    so it unmaps and maps pages every micro-step (calibration.EXPANDABLE_REMAP_SECONDS)."""
    gpu = hardware.gpus[0] if hardware.gpus else None
    peak, peak_source = peak_flops(gpu, s.precision)
    train = s.mode == "train"
    f_model = flops_per_token(model, seq_len, recompute=False, mode=s.mode)
    b, gas, N = s.micro_batch_size, s.gradient_accumulation_steps, s.world_size
    pcie = pcie_bytes_per_s(gpu)

    tokens_micro = b * seq_len
    hbm = hbm_bytes_per_s(gpu)
    matmul, elementwise = compute_seconds_per_token(model, s, seq_len, peak, hbm)
    compute = tokens_micro * (matmul + elementwise)
    launch = cal.MICRO_STEP_SECONDS_PER_LAYER * model.layers * (1.0 if train else cal.INFERENCE_LAUNCH_SHARE)
    parts: dict[str, float] = {}
    parts["matmuls"] = gas * tokens_micro * matmul
    parts["element-wise (memory-bound)"] = gas * tokens_micro * elementwise
    parts[LAUNCH_PART] = gas * launch

    comm_micro, comm_step = _communication_seconds(hardware, model, s, gpu, buffers)
    overlap = cal.COMM_OVERLAP if s.zero_stage == 3 else 0.0
    exposed_micro = max(0.0, comm_micro - overlap * compute)
    if comm_micro or comm_step:
        parts["communication"] = gas * exposed_micro + comm_step

    host = host_micro_step_seconds(model, s)
    at_boundary = exposed_host_seconds(compute + launch, host)
    before = exposed_host_seconds(compute + launch, host_before_boundary(model, s, host))
    for k, v in at_boundary.items():
        parts[k] = v + (gas - 1) * before[k]
    if s.zero_stage == 3:
        parts["ZeRO-3 gather/partition copies"] = gas * stage3_copy_seconds(model, s, hbm)
    if train and unfused_16bit_step(s):
        # DeepSpeed's 16-bit optimizer wrapper, once per optimizer step (calibration.STAGE0_STEP_SECONDS)
        parts[STAGE0_PART] = cal.STAGE0_STEP_SECONDS

    if train:
        # What of a micro-step before the boundary the reduce stream has left for ZeRO-3's running-sum round trips
        # once its collectives are done: the whole micro-step (compute, launches, the host time the GPU waits for).
        # The copies run on the copy engines, and nothing reads the sum before the next micro-step's backward
        # reaches the same parameters: unlike a prefetch, no compute waits for them. Measured: llama-5b at 4
        # micro-steps of 8 on two H100s, whose forward and backward took 0.91 / 0.83 s each before the boundary
        # where one micro-step's take 1.27 / 1.26 s with the fp32 copy-out (a share of the compute alone had put
        # 0.62 s of round trips in the step; bench/results/plan_accuracy-2026-12-06-1gpu-accum-llama5b-accum*.json).
        before_busy = compute + launch + sum(before.values())
        parts.update(
            _optimizer_seconds(
                hardware,
                model,
                s,
                hbm,
                pcie,
                max(0.0, before_busy - comm_micro),
                buffers.fused_optimizer,
            )
        )
        if model.finetune.quantized:
            parts["4-bit dequantization"] = ft.dequantization_seconds(model, s, hbm)
    if s.offload_param != "none":
        # The copies run on their own stream while the GPU computes and while the host runs the hooks: a
        # micro-step's busy time is its compute plus the host time the GPU waits for.
        busy = compute + sum(at_boundary.values())
        parts.update(_parameter_fetch_seconds(model, s, pcie, busy, buffers, nvme_rates(hardware)[0]))

    if allocator_remaps:
        parts[ALLOCATOR_REMAP_PART] = gas * cal.EXPANDABLE_REMAP_SECONDS
    step = sum(parts.values())
    samples = gas * b * N / step
    tokens = samples * seq_len
    mfu = tokens * f_model / (N * peak)
    ordered = tuple(sorted(parts.items(), key=lambda kv: -kv[1]))
    return ThroughputEstimate(
        tokens_per_sec=tokens,
        samples_per_sec=samples,
        mfu=mfu,
        step_seconds=step,
        flops_per_token=f_model,
        peak_flops_per_gpu=peak,
        peak_source=peak_source,
        parts=ordered,
        bottleneck=ordered[0][0],
    )

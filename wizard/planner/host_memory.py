"""Host RAM and NVMe a strategy needs (pure arithmetic): per node, each rank's process, the model while it loads,
and whatever ZeRO offloads there -- the optimizer's fp32 states and gradients, the offloaded parameters, the pinned
buffers DeepSpeed stages them through. ``memory.estimate_memory`` reports them beside the device's; the planner's
feasibility rejects what a node's RAM or swap folder cannot hold (docs/measurements.md, "Host RAM of CPU offload (ZeRO-3 family)").
Constants live in ``wizard.planner.calibration`` with their sources.
"""

from __future__ import annotations

from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.planner import finetune as ft
from wizard.planner.zero3 import nvme_parameters, stage3_sub_group
from wizard.strategy import Strategy


def host_bytes(model: ModelSpec, s: Strategy) -> tuple[int, tuple[tuple[str, int], ...]]:
    """Host RAM per node: each rank's process, the model while it loads, and whatever is offloaded."""
    w, P, N, ranks = s.weight_bytes, ft.trainable_params(model), s.world_size, s.gpus_per_node
    stored = ft.stored_parameter_bytes(model, w)
    items: list[tuple[str, int]] = [("processes", ranks * cal.HOST_BYTES_PER_RANK)]
    # Every rank materialises the 16-bit model before DeepSpeed moves it (stage 3 with zero.Init: a partition).
    load = ft.load_bytes(model, w) if s.zero_stage < 3 else stored // N
    if s.offload_param == "nvme":  # zero.Init with remote_device nvme swaps each module out as it is created
        load = w * model.largest_layer_params
    steady = 0
    if s.mode == "train":
        shards = N if s.zero_stage >= 1 else 1
        if s.offload_optimizer == "cpu":
            # fp32 master + Adam states + fp32 gradients, pinned; stage 1/2 also stage a 16-bit copy.
            steady += (cal.MASTER_BYTES + cal.ADAM_STATE_BYTES + 4) * P // shards
            if s.zero_stage in (1, 2):
                steady += w * P // shards
        elif s.offload_optimizer == "nvme":
            # Stage 3 swaps the fp32 gradients out to NVMe with the states (stage3.py
            # _swap_out_offload_fp32_gradients, DeepSpeed 0.19.8): what stays in RAM is the swapper's page-locked
            # buffers, buffer_count of them, each the largest sub-group in fp32 (optimizer_utils.py OptimizerSwapper,
            # utils.py SwapBufferManager).
            steady += cal.NVME_OPTIMIZER_BUFFER_COUNT * 4 * stage3_sub_group(P // shards)
            steady += 0 if s.zero_stage == 3 else 4 * P // shards
    if s.offload_param == "cpu":
        steady += stored // N
    elif s.offload_param == "nvme":
        # the swapper's pinned buffers; in training, the flat buffer for the parameters kept in host memory and,
        # where some are written back to NVMe, the buffer they go through (zero3.nvme_parameters)
        nv = nvme_parameters(model, s)
        steady += cal.NVME_PARAM_PINNED_BYTES + (pinned_bytes(w * nv.host_buffer) if nv.host_buffer else 0)
        steady += w * nv.write_buffer
    if steady:
        items.append(("offloaded states and pinned buffers", ranks * steady))
    setup = _offload_setup_peak(model, s) - steady
    if setup > 0:
        items.append(("offload set-up peak (pinned copies)", ranks * setup))
        steady += setup
    if s.mode == "train" and s.offload_optimizer == "nvme":
        # the first step: DeepSpeedCPUAdam creates a sub-group's two moments in ordinary host memory before they
        # are first swapped out (calibration.NVME_OPTIMIZER_SETUP_SUB_GROUPS)
        transient = cal.NVME_OPTIMIZER_SETUP_SUB_GROUPS * 4 * stage3_sub_group(P // N)  # NVMe: stage 3 only
        items.append(
            ("optimizer's first step (a sub-group's Adam moments before their swap-out)", ranks * transient)
        )
        steady += transient
    accumulation = offload_accumulation_bytes(model, s)
    if accumulation:
        items.append(("gradient accumulation buffers (pinned)", ranks * accumulation))
    extra = max(0, load - steady)
    if extra:
        items.append(("model copy while loading", ranks * extra))
    return sum(v for _, v in items), tuple(items)


def pinned_bytes(n: int) -> int:
    """What PyTorch's pinned-memory allocator takes for an n-byte request: the next power of two (CUDA's
    CachingHostAllocator rounds every block up to one)."""
    return 1 << max(0, n - 1).bit_length() if n > 0 else 0


def offload_accumulation_bytes(model: ModelSpec, s: Strategy) -> int:
    """Host RAM per rank that ZeRO-2 with the optimizer on the CPU adds when it accumulates gradients over more than
    one micro-step: one pinned 16-bit buffer per trainable tensor, each rounded up to a power of two
    (stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu, DeepSpeed 0.19.8; allocated at the first backward, on
    top of the running step's host memory). Measured: llama-1b and Qwen2-1.5B at 4 micro-steps pinned 2.70 and 3.62
    GiB more than at 1, as counted; ZeRO-1, which reduces once at the boundary, pinned nothing more (Pythia-1.4B;
    docs/measurements.md)."""
    if not (s.mode == "train" and s.offload_optimizer == "cpu" and s.zero_stage == 2):
        return 0
    if s.gradient_accumulation_steps <= 1:
        return 0
    w = s.weight_bytes
    tensors, rest = ft.trainable_tensors(model)
    return (sum(pinned_bytes(w * n) * count for n, count in tensors) + w * rest) // s.world_size


def _offload_setup_peak(model: ModelSpec, s: Strategy) -> int:
    """Host bytes per rank while CPU optimizer offload sets up (calibration.HOST_OFFLOAD_PEAK_BYTES_PER_PARAM).

    The figures were measured with every parameter trained. The optimizer's side (the fp32 partition and its pinned
    copies) belongs to the trained parameters only; with the parameters offloaded too, what the parameter side adds
    (the difference of the two ZeRO-3 figures) belongs to every stored parameter. LoRA trains a fraction of the model,
    so its set-up peak is mostly the parameter side; with every parameter trained the sum is the measured figure."""
    if s.mode != "train" or s.offload_optimizer != "cpu":
        return 0
    peaks = cal.HOST_OFFLOAD_PEAK_BYTES_PER_PARAM
    trained = ft.trainable_params(model)
    if s.zero_stage < 3:
        total = peaks["stage 1-2"] * trained
    else:
        total = peaks["stage 3"] * trained
        if s.offload_param == "cpu":
            w = s.weight_bytes
            stored = ft.stored_elements(model, w)  # in parameters of the training dtype
            total += (peaks["stage 3 + parameters"] - peaks["stage 3"]) * stored
    shards = s.world_size if s.zero_stage >= 1 else 1
    return int(total / shards)


def nvme_bytes(model: ModelSpec, s: Strategy) -> int:
    """NVMe bytes per node (one swap folder shared by the node's ranks)."""
    w, P, N, ranks = s.weight_bytes, ft.trainable_params(model), s.world_size, s.gpus_per_node
    out = 0
    if s.offload_optimizer == "nvme" and s.mode == "train":
        out += ranks * (cal.MASTER_BYTES + cal.ADAM_STATE_BYTES + 4) * P // N
    if s.offload_param == "nvme":
        out += ranks * ft.stored_parameter_bytes(model, w) // N
    return out

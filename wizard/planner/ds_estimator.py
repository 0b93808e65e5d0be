"""DeepSpeed's own memory estimator, reproduced to the byte: what its ``estimate_zero2_model_states_mem_needs`` and
``estimate_zero3_model_states_mem_needs`` say for a strategy. dswiz shows it beside its own estimate (and the bench
scores it), so that a user who knows DeepSpeed's figure sees what it leaves out: activations, the allocator's cache,
the CUDA context.
"""

from __future__ import annotations

from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.strategy import Strategy


def ds_estimate_zero2(
    total_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    additional_buffer_factor: float = cal.DS_ESTIMATOR_BUFFER_FACTOR,
) -> tuple[int, int]:
    """(cpu, gpu) bytes exactly as DeepSpeed's ``estimate_zero2_model_states_mem_needs``
    (deepspeed/runtime/zero/stage_1_and_2.py, DeepSpeed 0.19.8)."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu = 2 * total_params
        cpu = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu = 2 * total_params + int(18 * total_params / total_gpus)
        cpu = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu), int(gpu)


def ds_estimate_zero3(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = True,
    cpu_offload_params: bool = True,
    zero_init: bool = True,
    additional_buffer_factor: float = cal.DS_ESTIMATOR_BUFFER_FACTOR,
) -> tuple[int, int]:
    """(cpu, gpu) bytes exactly as DeepSpeed's ``estimate_zero3_model_states_mem_needs``
    (deepspeed/runtime/zero/stage3.py, DeepSpeed 0.19.8)."""
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        # DeepSpeed's two offload branches differ only here: host bytes per parameter 18 with the 16-bit weights
        # offloaded too, else 16 and those weights' shard stays on the GPU. Same operand order, same float result.
        per_param = 18 if cpu_offload_params else 16
        gpu = largest_layer_memory + (0 if cpu_offload_params else int(2 * total_params / total_gpus))
        if zero_init:
            cpu = total_params * per_param * gpus_factor * additional_buffer_factor
        else:
            cpu = (
                total_params * max(4 * num_gpus_per_node, per_param * gpus_factor) * additional_buffer_factor
            )
    else:
        gpu = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu), int(gpu)


def deepspeed_estimate(model: ModelSpec, s: Strategy) -> tuple[int, int] | None:
    """What DeepSpeed's estimator says for this strategy, (cpu, gpu) bytes; None where it has no formula (stage 0).

    Stage 1 uses the ZeRO-2 formula (DeepSpeed has none of its own); inference has none either."""
    if s.mode != "train":
        return None
    if s.zero_stage in (1, 2):
        return ds_estimate_zero2(model.total_params, s.gpus_per_node, s.nodes, s.offload_optimizer != "none")
    if s.zero_stage == 3:
        return ds_estimate_zero3(
            model.total_params,
            model.largest_layer_params,
            s.gpus_per_node,
            s.nodes,
            cpu_offload=s.offload_optimizer != "none",
            cpu_offload_params=s.offload_param != "none",
        )
    return None

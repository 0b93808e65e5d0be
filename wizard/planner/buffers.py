"""What a DeepSpeed config sets beyond the strategy that the memory and throughput models read: ZeRO's buffer and
bucket sizes and the optimizer DeepSpeed builds (its defaults unless a config says otherwise; a config is read into
this by wizard.service.prediction.buffers_of)."""

from __future__ import annotations

from dataclasses import dataclass

from wizard.planner import calibration as cal


@dataclass(frozen=True)
class ZeroBuffers:
    """DeepSpeed's buffer settings (its defaults unless a config says otherwise)."""

    reduce_bucket_elements: int = cal.REDUCE_BUCKET_ELEMENTS
    allgather_bucket_elements: int = cal.ALLGATHER_BUCKET_ELEMENTS
    prefetch_elements: int = cal.STAGE3_PREFETCH_ELEMENTS
    max_live_parameters: int = cal.STAGE3_MAX_LIVE_PARAMETERS
    max_reuse_distance: int = cal.STAGE3_MAX_REUSE_DISTANCE
    overlap_comm: bool | None = None  # None: DeepSpeed's default (on at stage 3 only)
    # Stages 1-2 all-reduce each whole gradient bucket and keep their partition of it (use_multi_rank_bucket_allreduce,
    # on by default; reduce_scatter off all-reduces too: stage_1_and_2.py average_tensor, DeepSpeed 0.19.8); False:
    # each slice is reduced to the rank that owns it (use_multi_rank_bucket_allreduce off)
    gradient_all_reduce: bool = True
    # DeepSpeed builds its FusedAdam from the config's optimizer section (Adam/AdamW without torch_adam, not
    # offloaded; wizard.config.optimizer_op): stage 0 in 16 bits then steps through FP16_Optimizer, not
    # FP16_UnfusedOptimizer (stage0_step_bytes)
    fused_optimizer: bool = False


DEFAULT_BUFFERS = ZeroBuffers()

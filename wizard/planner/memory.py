"""The memory model (pure arithmetic): what one training (or inference) step of a strategy needs on each GPU, with
the host RAM and NVMe that ``host_memory`` counts beside it.

A step has three moments that can be the peak, each linear in the micro-batch:
  forward/loss  all saved activations + the loss head's fp32 logits, on top of the persistent model states;
  backward      gradient buffers fill while activations drain (the larger end of that trade);
  optimizer     gradients converted to fp32 for the update.
The allocator keeps more than it hands out (reserved: ``fragmentation``), and the device also holds the CUDA context
and NCCL buffers: "fits" is judged on that device total (docs/measurements.md, "What each memory counter counts").
ZeRO-3's walk (what it gathers, keeps and flushes, and when) is ``zero3``'s; the DeepSpeed settings beyond the
strategy are ``buffers.ZeroBuffers``. Constants live in ``wizard.planner.calibration`` with their sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.planner import finetune as ft
from wizard.planner.buffers import DEFAULT_BUFFERS, ZeroBuffers
from wizard.planner.host_memory import host_bytes, nvme_bytes
from wizard.planner.zero3 import (
    FETCH_STREAM_ITEMS,
    GATHERED_ITEM,
    REDUCE_STREAM_ITEMS,
    largest_gradient_comes_last,
    stage3_elements,
    stage3_flushes,
    stage3_gathered_at,
    stage3_host_gradient_items,
    stage3_sub_group,
    stage3_working_set,
)
from wizard.strategy import Strategy


@dataclass(frozen=True)
class Phase:
    """One candidate peak moment: named byte amounts, each ``fixed + per_sample * micro_batch``."""

    name: str
    fixed: tuple[tuple[str, int], ...]
    per_sample: tuple[tuple[str, int], ...]
    holds_step_transient: bool = (
        False  # the optimizer step's large transient block is allocated at this moment
    )

    def fixed_total(self) -> int:
        return sum(v for _, v in self.fixed)

    def per_sample_total(self) -> int:
        return sum(v for _, v in self.per_sample)

    def at(self, micro_batch: int) -> int:
        return self.fixed_total() + micro_batch * self.per_sample_total()


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted bytes per GPU (and per node for host RAM and NVMe) for one strategy at one micro-batch."""

    allocated: int  # torch.cuda.max_memory_allocated
    reserved: int  # torch.cuda.max_memory_reserved
    cuda_context: int
    nccl: int
    device: int  # reserved + context + NCCL: what the card shows when it has room
    # What has to fit in the card (what fits are judged on): the peak allocation, the cache the allocator cannot give
    # back under pressure (fragmentation(under_pressure=True)), context and NCCL.
    needed: int
    peak_phase: str
    gpu_items: tuple[tuple[str, int], ...]  # the peak phase's parts (sum == allocated)
    per_sample_device: int  # device bytes one more sample in the micro-batch adds to what the card must hold
    cpu: int  # host RAM per node
    cpu_items: tuple[tuple[str, int], ...]
    nvme: int  # NVMe bytes per node
    phases: tuple[tuple[str, int], ...] = field(default=())  # allocated bytes at each moment
    history_correction: int = (
        0  # device bytes the run history adds (negative: removes); included in ``device`` and ``needed``
    )

    def breakdown(self) -> dict[str, int]:
        d = dict(self.gpu_items)
        d.update(
            fragmentation=self.reserved - self.allocated,
            cuda_context=self.cuda_context,
            nccl=self.nccl,
        )
        if self.history_correction:
            d["history_correction"] = self.history_correction
        return d


# --------------------------------------------------------------------------------------------- activations


def recipe_activation_bytes_per_token(model: ModelSpec, seq_len: int) -> float:
    """Saved-for-backward bytes per token of one transformer layer in 16-bit as the activation recipe counts them
    (ACTIVATION_RECIPES, counted on CPU; a padded head dim's copies come on top: sdpa_padding_bytes_per_token)."""
    r = cal.ACTIVATION_RECIPES.get(model.family, cal.ACTIVATION_RECIPES["llama"])
    h = model.hidden
    if model.is_moe:
        dense_ffn = 8 * model.shared_expert_ffn_hidden if model.shared_expert_ffn_hidden else 0
        ffn = (
            model.experts_per_token * (r.per_ffn * model.moe_ffn_hidden + r.per_routed_hidden * h) + dense_ffn
        )
        ffn += r.per_expert * model.num_experts
        if model.moe_layers < model.layers:  # dense layers between sparse ones
            dense = r.per_ffn * model.ffn_hidden
            ffn = (ffn * model.moe_layers + dense * (model.layers - model.moe_layers)) / model.layers
    else:
        ffn = r.per_ffn * model.ffn_hidden
    b = r.per_hidden * h + ffn + r.per_kv * model.kv_dim + ft.layer_activation_delta_per_token(model)
    if not model.use_cache:
        b += cal.USE_CACHE_OFF_BYTES_PER_HIDDEN.get(model.family, 0.0) * h
    if model.dropout > 0:
        b += r.dropout_masks * h
    if model.attention == "eager":
        b += r.per_score * model.heads * seq_len
    if model.rel_pos_span:
        b += r.per_rel_span * model.heads * 2 * model.rel_pos_span
        b += r.per_rel_table * model.rel_pos_span * h / max(1, seq_len)
    return b


def sdpa_padded_head_dim(model: ModelSpec) -> int:
    """The head dim SDPA's CUDA flash kernel runs at: padded up to a multiple of calibration.SDPA_HEAD_DIM_MULTIPLE
    (the model's own where it is one, or where the kernel is not flash: eager attention, head dims above its
    limit). The planner assumes the flash kernel runs: 16-bit training on an Ampere or newer GPU without an attention
    mask, as the HF Trainer's causal LMs run; in fp32, or on an older GPU, SDPA picks another kernel and pads
    nothing, so there it counts a little more than is kept."""
    hd, m = model.head_dim, cal.SDPA_HEAD_DIM_MULTIPLE
    if model.attention != "sdpa" or not 0 < hd <= cal.SDPA_FLASH_MAX_HEAD_DIM:
        return hd
    return -(-hd // m) * m


def sdpa_padding_bytes_per_token(model: ModelSpec) -> tuple[float, float]:
    """16-bit bytes per token per layer a training forward keeps beyond the activation recipe where SDPA pads the
    head dim (calibration.SDPA_HEAD_DIM_MULTIPLE): (saved for backward, held by the KV cache with use_cache on).

    Saved: the padded query, key and value replace the unpadded ones (a share r-1 more each), and the padded output
    (r times the unpadded one) is kept beside a contiguous copy of its slice, which the output projection reads.
    Cache: the unpadded keys and values, which the padded copies no longer share."""
    padded = sdpa_padded_head_dim(model)
    if padded == model.head_dim:
        return 0.0, 0.0
    r = padded / model.head_dim
    q = model.heads * model.head_dim
    saved = 2.0 * ((r - 1.0) * (q + 2 * model.kv_dim) + r * q)
    cache = 4.0 * model.kv_dim if model.use_cache and not model.encoder else 0.0
    return saved, cache


def _transient_layers(checkpointing: bool) -> float:
    """Layers' worth of activations live while one layer runs backward: its gradients, and with checkpointing its
    recomputed forward."""
    return cal.BACKWARD_TRANSIENT_LAYERS + (cal.CHECKPOINT_RECOMPUTE_LAYERS if checkpointing else 0)


def _padding_per_token(model: ModelSpec, checkpointing: bool) -> tuple[float, float]:
    """Per token, the padded head dim's bytes among the layers' saved tensors and in the backward transient: every
    layer's copies and cache entries without checkpointing (checkpointed layers build no KV cache: transformers'
    GradientCheckpointingLayer turns use_cache off), the transient layers' copies either way."""
    saved, cache = sdpa_padding_bytes_per_token(model)
    kept = 0.0 if checkpointing else model.layers * (saved + cache)
    return kept, _transient_layers(checkpointing) * saved


def sdpa_padding_bytes_per_sample(model: ModelSpec, seq_len: int, checkpointing: bool) -> tuple[int, int]:
    """The padded head dim's part of activation_bytes_per_sample's (layers' saved tensors, backward transient)."""
    kept, transient = _padding_per_token(model, checkpointing)
    return int(kept * seq_len), int(transient * seq_len)


def activation_bytes_per_sample(model: ModelSpec, seq_len: int, checkpointing: bool) -> tuple[int, int, int]:
    """Per sample, 16-bit training: (layers' saved tensors, loss head at its peak, one layer's backward transient).

    The forward/loss peak holds the first two; while the layers run backward the head's tensors are gone and one
    layer's transient (its gradients; with checkpointing also its recomputed activations) sits on top instead. A
    padded head dim adds its copies to both (_padding_per_token)."""
    per_layer = recipe_activation_bytes_per_token(model, seq_len)
    if checkpointing:
        saved = model.layers * cal.CHECKPOINT_BYTES_PER_HIDDEN_PER_LAYER * model.hidden
    else:
        saved = model.layers * per_layer
    padding_saved, padding_transient = _padding_per_token(model, checkpointing)
    saved += padding_saved
    transient = _transient_layers(checkpointing) * per_layer + padding_transient
    head = cal.LOSS_HEAD_BYTES_PER_VOCAB * model.vocab + cal.HEAD_BYTES_PER_HIDDEN * model.hidden
    return int(saved * seq_len), int(head * seq_len), int(transient * seq_len)


# --------------------------------------------------------------------------------------------- model states


def _params_on_gpu(model: ModelSpec, s: Strategy) -> int:
    w, N = s.weight_bytes, s.world_size
    stored, constants = ft.stored_parameter_bytes(model, w), ft.nf4_constant_bytes(model)  # w*P for full
    if s.zero_stage < 3:
        return stored + constants
    if s.offload_param != "none":
        return constants
    out = stored // N + constants
    if s.zero_hpz_partition_size > 1:  # ZeRO++ hpZ: a secondary 16-bit partition inside the node
        out += stored // s.zero_hpz_partition_size
    return out


def _optimizer_bytes_per_param(s: Strategy) -> int:
    # DeepSpeed keeps a separate fp32 master copy at every ZeRO stage; stage 0 in fp32 steps the weights directly.
    master = cal.MASTER_BYTES if (s.precision != "fp32" or s.zero_stage >= 1) else 0
    return master + cal.ADAM_STATE_BYTES


def _optimizer_on_gpu(model: ModelSpec, s: Strategy) -> int:
    if s.mode == "inference" or s.offload_optimizer != "none":
        return 0
    shards = s.world_size if s.zero_stage >= 1 else 1
    return _optimizer_bytes_per_param(s) * ft.trainable_params(model) // shards


def unfused_16bit_step(s: Strategy) -> bool:
    """Stage 0 in 16 bits steps through DeepSpeed's 16-bit wrapper, for bf16 too: FP16_UnfusedOptimizer with a torch
    optimizer, FP16_Optimizer with DeepSpeed's FusedAdam (ZeroBuffers.fused_optimizer: its memory in
    stage0_step_bytes, its time by figures of its own in planner.throughput). In 32 bits the optimizer is the plain
    torch one."""
    return s.zero_stage == 0 and s.weight_bytes == 2


def stage0_step_bytes(w: int, params: int, fused: bool = False) -> int:
    """What stage 0's optimizer step holds beyond the forward, the allocator's step block too. 16-bit: DeepSpeed wraps
    the optimizer in FP16_UnfusedOptimizer for fp16 and for bf16 alike (engine.py _do_optimizer_sanity_check: no
    separate gradient-accumulation dtype -> _configure_fp16_optimizer; DeepSpeed 0.19.8), whose step gives each fp32
    master an fp32 copy of its 16-bit gradient, tensor by tensor (fp16/unfused_optimizer.py): the 16-bit gradients
    and those copies, 6 bytes a parameter. Measured: Pythia-1B at micro-batch 1, whose peak is the step, 18.92 GiB at
    one micro-step and at eight (8 bytes were counted: 20.73 GiB); llama-3b, gpt2-xl, llama-7b held out within 2.3 %
    (bench/results/plan_accuracy-2026-12-04-1gpu-phases-phases-z0step.md). fp32: the gradients only.
    Those rows stepped with torch's AdamW (torch_adam), as does the script's own torch optimizer that dswiz's configs
    leave the step to without offload. ``fused``: DeepSpeed's FusedAdam (a config's optimizer section without
    torch_adam) makes the wrapper FP16_Optimizer (engine.py
    _configure_fp16_optimizer; fp16/fused_optimizer.py step), which builds an fp32 copy of every gradient and then
    flattens them into one block: the 16-bit gradients, the copies and the block at once, 10 bytes a parameter -- from
    the source, not measured; an upper bound (with several parameter groups the flat blocks are one group's each)."""
    if w != 2:
        return w * params
    return (w + 8) * params if fused else (w + 4) * params


def training_phases(
    model: ModelSpec, s: Strategy, seq_len: int, buf: ZeroBuffers = DEFAULT_BUFFERS
) -> list[Phase]:
    """The three candidate peaks of a training step (allocator bytes, without fragmentation). Gradients and
    optimizer states cover the trainable parameters only (``ft.trainable_params``: all of them, or LoRA's)."""
    w, P, N = s.weight_bytes, ft.trainable_params(model), s.world_size
    stage = s.zero_stage
    offload_opt = s.offload_optimizer != "none"
    accumulating = s.gradient_accumulation_steps > 1
    bucket = w * buf.reduce_bucket_elements
    if (buf.overlap_comm if buf.overlap_comm is not None else stage == 3) and stage in (1, 2):
        bucket *= 2  # double-buffered when overlapping communication

    persistent: list[tuple[str, int]] = [
        ("parameters", _params_on_gpu(model, s)),
        ("optimizer states", _optimizer_on_gpu(model, s)),
        ("4-bit dequantization buffer", ft.dequantization_buffer_bytes(model, w)),
        (CUBLAS_WORKSPACE_ITEM, cal.CUBLAS_WORKSPACE_BYTES),
    ]
    grads_full = 0  # gradient storage at the end of backward
    in_backward_buffers = 0  # buffers that exist only from the first gradient on
    if stage == 3:
        if offload_opt:  # the gradient partitions live on the host
            persistent.append(("ZeRO-3 reduce bucket", bucket))
        else:  # ipg bucket + gradient partition, from init
            persistent.append(("ZeRO-3 gradient partition + reduce bucket", bucket + w * P // N))
        working = stage3_working_set(model, s, buf)
        if working:
            persistent.append((GATHERED_ITEM, working))
        step_extra = 0 if offload_opt else 4 * stage3_sub_group(P // N)
    elif stage in (1, 2):
        if offload_opt:
            persistent.append(("offload gradient staging", w * model.largest_layer_params))
        # ZeRO-2 with the optimizer offloaded streams each reduced bucket to the host's fp32 gradients (and
        # accumulates there): no gradient partition stays on the GPU (stage_1_and_2.py copy_grads_in_partition,
        # cpu_offload branch, DeepSpeed 0.19.8). Stage 1 keeps its 16-bit gradients whole until the step.
        grads_full = 0 if (offload_opt and stage == 2) else (w * P // N if stage == 2 else w * P)
        in_backward_buffers = bucket
        step_extra = 0 if offload_opt else (2 * w + 4) * P // N
    else:  # stage 0: DeepSpeed's 16-bit optimizer wrapper over plain data parallelism
        grads_full = w * P
        in_backward_buffers = w * min(buf.allgather_bucket_elements, P) if N > 1 else 0
        step_extra = stage0_step_bytes(w, P, buf.fused_optimizer)
    # Gradients summed across micro-steps live from the first backward to the boundary, which hands them to the
    # update (stages 0-1) or steps the partition they sum in (stage 2): the step holds what it holds at one
    # micro-step (Pythia-1.4B, Qwen2-1.5B, llama-1b ZeRO-1 and Pythia-1B ZeRO-0 at micro-batch 1 peaked at the step
    # at eight micro-steps as at one: plan_accuracy-2026-12-04-1gpu-accum-accum-boundary.json).
    accumulated = (("accumulated gradients", grads_full),) if accumulating and grads_full else ()
    carried: tuple[tuple[str, int], ...] = ()
    if accumulating and stage == 1:
        # The first gradient of a step allocates the reduce bucket (stage_1_and_2.py process_gradients ->
        # setup_buckets); stage 2 frees it in each backward's epilogue, stage 1 only when it reduces at the
        # boundary (engine.py allreduce_gradients -> reduce_gradients, DeepSpeed 0.19.8), before the optimizer
        # step: the next micro-steps' forwards hold it. Measured: llama-1b at 8 micro-steps, Pythia-1.4B with the
        # optimizer offloaded at 4, 0.93-1.0 GiB above the same step at 1
        # (bench/results/plan_accuracy-2026-12-03-1gpu-accum-accum-b.json, -2026-12-04-1gpu-accum-accum-offload.json).
        carried = (("reduce bucket (kept across micro-steps)", in_backward_buffers),)

    layers, head, transient = activation_bytes_per_sample(model, seq_len, s.activation_checkpointing)
    fwd = Phase(
        "forward/loss",
        (*persistent, *accumulated, *carried),
        (("activations", layers), ("loss head (logits, fp32 upcast)", head)),
    )
    grads_now = 0 if accumulating else grads_full
    # Backward: activations drain while gradients fill, so the peak is at one end of that trade.
    bwd_start = Phase(
        "backward",
        (*persistent, *accumulated, ("gradient buckets", in_backward_buffers)),
        (("activations", layers), ("backward transient (one layer)", transient)),
    )
    bwd_end = Phase(
        "backward",
        (*persistent, *accumulated, ("gradient buckets", in_backward_buffers), ("gradients", grads_now)),
        (),
    )
    step = Phase(
        "optimizer step",
        (*persistent, ("gradients for the update", step_extra)),
        (),
        holds_step_transient=True,
    )
    phases = [fwd, bwd_start, bwd_end, step]
    if stage == 3 and offload_opt:
        phases += _stage3_host_gradients_phases(model, s, buf, persistent, layers, transient)
    return phases


CUBLAS_WORKSPACE_ITEM = "cuBLAS workspaces"


def _stage3_host_gradients_phases(
    model: ModelSpec,
    s: Strategy,
    buf: ZeroBuffers,
    persistent: list[tuple[str, int]],
    layers: int,
    transient: int,
) -> list[Phase]:
    """ZeRO-3 with the optimizer on the host: the backward while its gradients go to the host. Each full bucket is
    reduced on DeepSpeed's reduce stream, which then copies every gradient partition to the pinned host buffer, back
    to the GPU and, converted to fp32, to the optimizer's host gradients (stage3.py partition_grads and
    _offload_grad_partition_at_boundary, DeepSpeed 0.19.8): meanwhile the bucket's gradients are held once more on
    that stream (one flat block of the bucket's size, bench/_peak_anatomy.py), beside the largest gradient's copies
    where the bucket holds it (``stage3_host_gradient_items``). Two moments: the first full bucket (what the backward
    has walked by then still gathered ahead, ``stage3_gathered_at``), with the largest gradient unless it is the
    tied embedding's, which comes last; and the last bucket, with the embedding's gradient, little left gathered,
    the activations drained. Where the model's largest layer tensor travels in a later bucket (a matrix larger than
    the output head), that flush too (``stage3_flushes``). A tied embedding's gradient is held whole from the output
    head's backward on (autograd sums both uses before it is ready). At a flush the activations of the layers not
    yet walked are held, beside part of one layer's backward transient (a fit:
    calibration.STAGE3_HOST_GRADIENTS_TRANSIENT_SHARE). Measured on one GPU only (llama-3b
    with both offloads at micro-batch 1 at three bucket sizes, at 4, 8 and 16, and with the optimizer alone
    offloaded at 4 at two:
    bench/results/plan_accuracy-2026-12-06-1gpu-phases-bucket-*.json, -phases-3b{,-train}.json; where each peak is
    set and what holds it in llama-1b, llama-3b, qwen2-1.5b, gpt2-xl and llama-deep: -phases-anatomy{,-b}.json,
    -phases-deep.json); with several GPUs the reduce is a collective and the partitions 1/N, which is extrapolated,
    not measured."""
    elements = stage3_elements(model, s)
    # no full bucket before the input embedding's gradient: the backward's end is the only flush
    flushes = stage3_flushes(model, buf.reduce_bucket_elements)
    rest = [(name, b) for name, b in persistent if name != GATHERED_ITEM]
    out = []
    for flush in [*flushes, None]:
        last = flush is None
        held, left = (0.0, 1.0) if flush is None else (flush.held, flush.left)
        walked = elements if flush is None else int(elements * min(1.0, flush.walked))
        tied_later = not last and largest_gradient_comes_last(model) and walked < elements
        content = flush.content if flush is not None else None
        items = stage3_host_gradient_items(
            model, s, buf, last, largest_in_bucket=not tied_later, content=content
        )
        gathered = stage3_gathered_at(model, s, buf, walked)
        held_items = [
            *rest,
            *(((GATHERED_ITEM, gathered),) if gathered else ()),
            *items,
        ]
        out.append(
            Phase(
                "backward's end (the last gradients to the host)"
                if last
                else "backward (gradients to the host)",
                tuple(held_items),
                (
                    ("activations (partly drained)", 0 if last else int(layers * held)),
                    (
                        "backward transient (one layer)",
                        transient
                        if last
                        else int(transient * cal.STAGE3_HOST_GRADIENTS_TRANSIENT_SHARE * left),
                    ),
                ),
            )
        )
    return out


def inference_recipe(model: ModelSpec) -> cal.InferenceRecipe:
    recipes = cal.INFERENCE_RECIPES
    return recipes.get(model.model_type) or recipes.get(model.family) or recipes["llama"]


def inference_layer_bytes_per_token(model: ModelSpec, seq_len: int) -> float:
    """Peak live bytes per token inside one layer of a forward pass without autograd (INFERENCE_RECIPES)."""
    r, h = inference_recipe(model), model.hidden
    if model.is_moe:
        routed = r.per_hidden * h + model.experts_per_token * (
            r.per_ffn * model.moe_ffn_hidden + r.per_routed_hidden * h
        )
        # A shared expert or the dense layers between sparse ones run as a plain SwiGLU MLP: one phase or the other
        # is the layer's peak, never both.
        dense_ffn = max(
            model.shared_expert_ffn_hidden, model.ffn_hidden if model.moe_layers < model.layers else 0
        )
        dense = cal.INFERENCE_RECIPES["llama"]
        peak = max(routed, dense.per_hidden * h + dense.per_ffn * dense_ffn if dense_ffn else 0.0)
    else:
        peak = r.per_hidden * h + r.per_ffn * model.ffn_hidden
    return peak + r.per_score * model.heads * seq_len


def inference_head_bytes_per_token(model: ModelSpec) -> float:
    """The logits of every position in 16-bit, plus their fp32 upcast and log-softmax when scored (evaluation)."""
    per_vocab = cal.INFERENCE_LOGITS_BYTES_PER_VOCAB + cal.INFERENCE_SCORE_BYTES_PER_VOCAB
    return per_vocab * model.vocab + 2 * model.hidden  # + the final hidden states feeding the head


KV_CACHE_ITEM = "KV cache (use_cache)"  # the inference phases' name for it (explain.py shows it apart)


def kv_cache_bytes_per_token(model: ModelSpec) -> int:
    """What a KV cache keeps per token of context: K and V of every layer (an inference pass with use_cache and
    generation alike)."""
    return 2 * cal.KV_CACHE_BYTES_PER_ELEMENT * model.layers * model.kv_dim


def persistent_parameter_elements(model: ModelSpec) -> int:
    """Small parameters stage 3 keeps whole on every GPU (below stage3_param_persistence_threshold, 1e5 elements by
    default): the norms' weights (and biases) of every layer, about 4 x hidden each, when hidden is below it."""
    if model.hidden >= cal.STAGE3_PARAM_PERSISTENCE_ELEMENTS:
        return 0
    return (2 * model.layers + 1) * 2 * model.hidden


def inference_phases(
    model: ModelSpec, s: Strategy, seq_len: int, buf: ZeroBuffers = DEFAULT_BUFFERS
) -> list[Phase]:
    """A ZeRO-3 inference pass (assumption: one forward over micro-batch x seq tokens that scores every position,
    as evaluation does). No optimizer, no gradients: the GPU holds the 16-bit weight partition (none when
    offloaded), the layer being run plus the prefetch bucket gathered whole, the small persistent parameters, and
    one layer's transient activations -- the layers run one after another, so depth adds nothing but the KV cache:
    with transformers' default ``use_cache=True`` a forward in eval mode builds a cache and keeps every layer's K
    and V until its output is dropped (measured on the H200: GPT-2-medium/xl allocated +2.7/+7.7 GiB, K and V of
    every layer to within 3 %, bench/results/inference_accuracy-2026-12-02-1gpu-gpt2.json). The head's logits come
    after the last layer's tensors are freed: a second candidate peak."""
    w = s.weight_bytes
    fixed = [("parameters", _params_on_gpu(model, s)), (CUBLAS_WORKSPACE_ITEM, cal.CUBLAS_WORKSPACE_BYTES)]
    if s.zero_stage == 3 and (s.world_size > 1 or s.offload_param != "none"):
        fixed.append((GATHERED_ITEM, stage3_working_set(model, s, buf)))
        fixed.append(("persistent small parameters", w * persistent_parameter_elements(model)))
    layer = int(inference_layer_bytes_per_token(model, seq_len) * seq_len)
    head = int(inference_head_bytes_per_token(model) * seq_len)
    kv = ((KV_CACHE_ITEM, kv_cache_bytes_per_token(model) * seq_len),) if model.use_cache else ()
    return [
        Phase("forward (layers)", tuple(fixed), (("activations (one layer)", layer), *kv)),
        Phase("forward (logits)", tuple(fixed), (("logits (16-bit + fp32 scores)", head), *kv)),
    ]


def phases_for(
    model: ModelSpec, s: Strategy, seq_len: int, buf: ZeroBuffers = DEFAULT_BUFFERS
) -> list[Phase]:
    if s.mode == "inference":
        return inference_phases(model, s, seq_len, buf)
    return training_phases(model, s, seq_len, buf)


@dataclass(frozen=True)
class ModelStateBytes:
    """Parameters, gradients and optimizer states only (what DeepSpeed's estimator counts), in bytes."""

    gpu_params: int
    gpu_gradients: int  # 16-bit gradient partition + the fp32 copy the update uses
    gpu_optimizer: int
    cpu_per_node: (
        int  # offloaded fp32 master weights, Adam states, fp32 gradients (+ 16-bit params offloaded)
    )

    @property
    def gpu(self) -> int:
        return self.gpu_params + self.gpu_gradients + self.gpu_optimizer


def model_state_bytes(model: ModelSpec, s: Strategy) -> ModelStateBytes:
    """Per GPU (and per node on the host) at steady state, from the same parts the phases use."""
    w, P, N, g = s.weight_bytes, ft.trainable_params(model), s.world_size, s.gpus_per_node
    offload_opt = s.offload_optimizer != "none"
    if offload_opt or s.mode == "inference":
        grads = 0
    elif s.zero_stage == 1:  # 16-bit gradients stay whole, the fp32 copy is per partition
        grads = w * P + 4 * P // N
    else:
        grads = (w + 4) * P // (N if s.zero_stage >= 2 else 1)
    cpu = 0
    if offload_opt and s.mode == "train":
        cpu += g * (cal.MASTER_BYTES + cal.ADAM_STATE_BYTES + 4) * P // N
    if s.offload_param != "none":
        cpu += g * ft.stored_parameter_bytes(model, w) // N
    return ModelStateBytes(_params_on_gpu(model, s), grads, _optimizer_on_gpu(model, s), cpu)


# --------------------------------------------------------------------------------------------- device level


def nccl_bytes(s: Strategy) -> int:
    """NCCL's buffers: one communicator, one more for hpZ's intra-node group. At one rank only ZeRO-3 has them:
    stages 0-2 there run no collective but DeepSpeed's broadcast of the model (engine.py ``_broadcast_model``,
    DeepSpeed 0.19.8), and the device held no NCCL buffers (calibration.NCCL_BYTES_ONE_RANK)."""
    if s.world_size == 1:
        return cal.NCCL_BYTES_ONE_RANK if s.zero_stage == 3 else 0
    communicators = 1 + (1 if s.zero_hpz_partition_size > 1 else 0)
    return communicators * cal.NCCL_BYTES_PER_COMMUNICATOR


@dataclass(frozen=True)
class Fragmentation:
    """What the caching allocator holds beyond what is allocated (max_memory_reserved - max_memory_allocated), as
    two lines in the micro-batch: one on top of the forward/backward moments, one on top of the optimizer step's
    (see ``fragmentation``)."""

    fixed: int  # forward/backward moments
    per_sample: int
    step_fixed: int  # the optimizer step (the moment that holds the step's transient block)
    step_per_sample: int
    blocks_fixed: int  # the step's largest transient state block (bytes)
    # the block per sample the cache is a share of: training's fp32 logits, inference's one-layer transient (bytes)
    blocks_per_sample: int
    # ZeRO-3's side streams' pools (``stream_pools``): reserved whole at every moment, of which a phase's own items
    # on those streams are allocated (the rest is cache)
    pools: int = 0
    pooled: tuple[str, ...] = ()

    def fixed_for(self, phase: Phase) -> int:
        base = self.step_fixed if phase.holds_step_transient else self.fixed
        if not self.pools:
            return base
        return base + self.pools - sum(v for k, v in phase.fixed if k in self.pooled)

    def per_sample_for(self, phase: Phase) -> int:
        return self.step_per_sample if phase.holds_step_transient else self.per_sample

    def at(self, micro_batch: int, phase: Phase | None = None) -> int:
        if phase is None:
            return self.fixed + self.pools + micro_batch * self.per_sample
        return self.fixed_for(phase) + micro_batch * self.per_sample_for(phase)


def _step_transient_block(model: ModelSpec, s: Strategy, buf: ZeroBuffers = DEFAULT_BUFFERS) -> int:
    """The largest block a training step allocates and frees outside the forward/backward activations -- bounded
    by what DeepSpeed allocates at once, so that the allocator's cache never grows with the model beyond it: the
    fp32 gradient partition the update reads (stage 1-2), one optimizer sub-group's fp32 gradient (stage 3), what
    stage 0's step holds beyond the forward (in bf16 the 16-bit gradients and their fp32 copy, as training_phases
    counts it), or, with the optimizer offloaded, the reduce bucket the gradients leave through (stages 1-3)."""
    if s.mode != "train":
        return 0
    w, P, N = s.weight_bytes, ft.trainable_params(model), s.world_size
    if s.offload_optimizer != "none":
        # Gradients leave through the reduce bucket, one bucket at a time -- the configured one: DeepSpeed allocates
        # it at reduce_bucket_size elements (stage_1_and_2.py setup_buckets, at every backward's first gradient;
        # stage3.py's ipg bucket buffer; DeepSpeed 0.19.8), not at its default. Stage 1 sends its gradients through
        # the same bucket and CPU copy path, after the backward instead of during it (stage_1_and_2.py
        # reduce_gradients -> reduce_ready_partitions_and_remove_grads), and steps in the same CPU branch: on the
        # H200, eight ZeRO-1/ZeRO-2 pairs with CPU offload
        # (gpt2-xl, llama-1b/3b, Pythia-1.4B, Qwen2-1.5B; 24 GiB caps and the whole card) peaked at byte-identical
        # allocations, one pair running out of memory at the same bytes, and reserved the same or within 4 MiB
        # (docs/measurements.md).
        return w * min(buf.reduce_bucket_elements, P // N)
    if s.zero_stage == 0:
        return stage0_step_bytes(w, P, buf.fused_optimizer)
    if s.zero_stage == 3:
        return 4 * stage3_sub_group(P // N)
    return 4 * P // N


def fragmentation(
    model: ModelSpec,
    s: Strategy,
    seq_len: int,
    buf: ZeroBuffers = DEFAULT_BUFFERS,
    under_pressure: bool = False,
    expandable_segments: bool = False,
    phases: list[Phase] | None = None,
) -> Fragmentation:
    """Reserved minus allocated: what the caching allocator keeps of the large blocks a step frees, bounded by
    those blocks (so it never grows with the model beyond what DeepSpeed allocates at once).

    Why: PyTorch's caching allocator keeps freed blocks and splits them to serve smaller requests; a freed block
    that smaller tensors have landed in cannot take the next large request, so another segment is reserved. A
    training step frees two kinds of large blocks, each cached when the other is needed:
    - at the forward/backward peak, part of the optimizer step's block (``_step_transient_block``) freed by the
      last step, and of the fp32 logits, whose blocks the recomputed layers split further with checkpointing
      (calibration.STEP_BLOCK_SHARE*, LOGITS_SHARE*); at stage 3 with the parameters on the one GPU and the
      optimizer offloaded, at least the blocks the gradients waiting for the reduce stream leave
      (calibration.STAGE3_HOST_GRADIENTS_CACHE_BUCKETS reduce buckets, or every trained gradient if fewer);
    - at stage 3 with parameters to gather (several GPUs, or offloaded), the side streams' pools whole
      (``stream_pools``): what those streams allocate stays out of the default stream's reach, so each pool is
      reserved at its own peak whatever moment sets the default stream's;
    - at the optimizer step, part of the forward's activations and logits, freed by backward, which the step's
      single large block cannot reuse (calibration.FORWARD_TRANSIENT_SHARE_AT_STEP).
    Inference frees each layer's transient activations before the next layer's (and, with the parameters to
    gather, each layer's gathered weights between them): the cache holds a share of one layer's transient
    (calibration.FRAGMENTATION_SHARE_INFERENCE*), which the larger logits cannot reuse, and a share of the KV cache
    (calibration.FRAGMENTATION_SHARE_KV_CACHE), whose tensors land among each layer's transients.

    ``under_pressure``: only the part the allocator cannot give back when a request fails -- the free parts of
    segments that still hold live tensors (calibration.UNRECLAIMABLE_*; less of the logits with the optimizer
    offloaded; none of the waiting gradients' blocks, which it frees once their streams have passed them): what a
    card that only just fits must hold.

    ``phases``: the strategy's own (``phases_for``), where the caller has them already (the side pools read them).

    ``expandable_segments`` (PyTorch's allocator run with ``expandable_segments:True``): each pool is one segment
    that grows by mapping pages and unmaps the free ones when a request would fail, so no split block stays out of
    reach. Under pressure it keeps a small fixed amount (calibration.EXPANDABLE_UNRECLAIMABLE_BYTES) whatever the
    step; with room it caches about what the default allocator does (the same roomy shares).
    """
    if under_pressure and expandable_segments:
        kept = cal.EXPANDABLE_UNRECLAIMABLE_BYTES
        return Fragmentation(kept, 0, kept, 0, 0, 0)
    if s.mode == "inference":
        share = (
            cal.FRAGMENTATION_SHARE_INFERENCE_PARAM_OFFLOAD
            if s.offload_param != "none"
            else cal.FRAGMENTATION_SHARE_INFERENCE
        )
        layer = inference_layer_bytes_per_token(model, seq_len) * seq_len
        kv = kv_cache_bytes_per_token(model) * seq_len if model.use_cache else 0
        fixed = cal.RESERVED_FIXED_BYTES_INFERENCE
        per_sample = int(share * layer + cal.FRAGMENTATION_SHARE_KV_CACHE * kv)
        return Fragmentation(fixed, per_sample, fixed, per_sample, 0, int(layer))
    logits = 4 * model.vocab * seq_len  # the fp32 upcast of the logits the loss reads
    step = _step_transient_block(model, s, buf)
    pools = sum(stream_pools(model, s, seq_len, buf, phases))  # none unless the step gathers parameters
    pooled = (*FETCH_STREAM_ITEMS, *REDUCE_STREAM_ITEMS) if pools else ()
    # Checkpointing's recompute runs in training's backward only (transformers' GradientCheckpointingLayer checks
    # self.training), so only training has the checkpointing shares.
    ck = s.activation_checkpointing
    if under_pressure:
        step_share = cal.UNRECLAIMABLE_STEP_BLOCK_SHARE
        if not ck:
            logits_share = cal.UNRECLAIMABLE_LOGITS_SHARE
        elif s.offload_optimizer != "none":
            logits_share = cal.UNRECLAIMABLE_LOGITS_SHARE_CHECKPOINTING_OFFLOAD
        else:
            logits_share = cal.UNRECLAIMABLE_LOGITS_SHARE_CHECKPOINTING
        # stage 0's unfused 16-bit step takes blocks of one tensor's size, which the split segments hold
        unfused_stage0 = unfused_16bit_step(s) and not buf.fused_optimizer
        at_step_share = (
            cal.UNRECLAIMABLE_FORWARD_TRANSIENT_SHARE_AT_STEP_UNFUSED_STAGE0
            if unfused_stage0
            else cal.UNRECLAIMABLE_FORWARD_TRANSIENT_SHARE_AT_STEP
        )
    else:
        step_share = cal.STEP_BLOCK_SHARE_CHECKPOINTING if ck else cal.STEP_BLOCK_SHARE
        logits_share = cal.LOGITS_SHARE_CHECKPOINTING if ck else cal.LOGITS_SHARE
        at_step_share = cal.FORWARD_TRANSIENT_SHARE_AT_STEP

    cache = step_share * step
    if s.zero_stage == 3 and s.offload_optimizer != "none" and not under_pressure and not pools:
        # The blocks the gradients waiting for the reduce stream leave cached, in reduce buckets of whole (not
        # partitioned) gradients, or every trained gradient if fewer
        # (calibration.STAGE3_HOST_GRADIENTS_CACHE_BUCKETS). Under pressure the allocator waits for that stream and
        # gives them back. Fit with the optimizer on the CPU and the parameters on the GPU; NVMe (the same reduce
        # stream) is extrapolated. With parameters to gather the reduce stream's pool is counted whole instead.
        cache = max(cache, cal.STAGE3_HOST_GRADIENTS_CACHE_BUCKETS * whole_bucket_bytes(model, s, buf))

    layers, head, _ = activation_bytes_per_sample(model, seq_len, s.activation_checkpointing)
    return Fragmentation(
        fixed=cal.RESERVED_FIXED_BYTES + int(cache),
        per_sample=int(logits_share * logits),
        step_fixed=cal.RESERVED_FIXED_BYTES,
        step_per_sample=int(at_step_share * (layers + head)),
        blocks_fixed=step,
        blocks_per_sample=logits,
        pools=pools,
        pooled=pooled,
    )


def gathers_parameters(model: ModelSpec, s: Strategy, buf: ZeroBuffers = DEFAULT_BUFFERS) -> bool:
    """Whether a training step gathers parameters on ZeRO-3's all-gather stream: several GPUs, or offloaded.
    Inference's gathered layers are counted in its own cache share (``fragmentation``)."""
    return s.mode == "train" and s.zero_stage == 3 and stage3_working_set(model, s, buf) > 0


def stream_pools(
    model: ModelSpec,
    s: Strategy,
    seq_len: int,
    buf: ZeroBuffers = DEFAULT_BUFFERS,
    phases: list[Phase] | None = None,
) -> tuple[int, int]:
    """ZeRO-3's side streams' pools, (all-gather, reduce) bytes, where a training step gathers parameters (else
    none), from the items allocated in them (FETCH_STREAM_ITEMS, REDUCE_STREAM_ITEMS): each stream's own peak over
    the phases (the gathered parameters' on the all-gather stream, the flattened bucket and the partitions on their
    way to the host on the reduce stream), the reduce stream's at least one flattened bucket (reduce_bucket_size
    elements at the strategy's weight bytes, or every trained gradient if fewer): it flattens every bucket for the
    reduce-scatter with the optimizer on the GPU too (stage3.py __avg_scatter_grads; llama-1b with the parameters
    alone offloaded kept one 947 MiB segment there, bench/results/plan_accuracy-2026-12-07-1gpu-phases-heldout-pools
    .json), which these phases, whose gradients stay on the GPU, do not name.

    PyTorch's caching allocator serves a request from the blocks of the requesting stream's pool only, so what a side
    stream frees is never the default stream's, and the weights it fetches layer after layer, or the buckets it
    flushes, mostly fit the blocks it already has: its pool stops near its peak. Read per stream on one H100
    (bench/plan_accuracy.py --segment-growth; docs/measurements.md, "Where the allocator adds segments with both
    offloads: three streams" and "Stream by stream"), with both offloads: the all-gather stream reserved 2.0-3.1 GiB
    at stage3_max_live_parameters 1e9 over eight models (these phases' peak: 1.88-1.96; qwen2-1.5b 2.88, llama-3b
    at 8 3.08), 0.85 / 0.91 GiB at 3e8 (1.02); the reduce stream 1.65-3.73 GiB at reduce_bucket_size 5e8 (1.01-2.17:
    a later bucket a few MiB larger than every free segment takes one more, and the 3B shapes held two at once),
    1.12 / 1.43 at 2e8 (0.98 / 1.04). Counted whole under pressure too, which is on the safe side: under caps
    llama-3b's all-gather stream ended its warm-up at 1.32-1.45 GiB (2.40 on the roomy card), its segments given
    back and taken again each step, and the fit boundary held (plan_accuracy-2026-12-07-1gpu-phases-capped-*)."""
    if not gathers_parameters(model, s, buf):
        return 0, 0
    phases = phases or phases_for(model, s, seq_len, buf)
    fetch, reduce = (
        max((sum(v for k, v in p.fixed if k in stream) for p in phases), default=0)
        for stream in (FETCH_STREAM_ITEMS, REDUCE_STREAM_ITEMS)
    )
    return fetch, max(reduce, whole_bucket_bytes(model, s, buf))


def whole_bucket_bytes(model: ModelSpec, s: Strategy, buf: ZeroBuffers = DEFAULT_BUFFERS) -> int:
    """A ZeRO-3 reduce bucket of whole (not partitioned) gradients: reduce_bucket_size elements at the strategy's
    weight bytes, or every trained gradient if fewer -- the flattened bucket on the reduce stream, and the unit the
    waiting gradients' cache is counted in."""
    return s.weight_bytes * min(buf.reduce_bucket_elements, ft.trainable_params(model))


def device_overhead(s: Strategy) -> int:
    """Bytes on the device outside PyTorch's allocator."""
    return cal.CUDA_CONTEXT_BYTES + nccl_bytes(s)


def reserved_at(phases: list[Phase], frag: Fragmentation, micro_batch: int) -> tuple[Phase, int]:
    """The moment that sets torch.cuda.max_memory_reserved, and that reserved byte count."""
    return max(((p, p.at(micro_batch) + frag.at(micro_batch, p)) for p in phases), key=lambda x: x[1])


def allocator_remaps(mem: MemoryEstimate, budget: float | None, expandable_segments: bool) -> bool:
    """Whether a job on PyTorch's allocator with expandable segments unmaps and maps pages every micro-step: the
    cache a card with room would keep (``mem.device``) does not fit the ``budget`` (None: no card to fit). Measured
    under allocator caps (docs/measurements.md, "Expandable segments"); its time is
    calibration.EXPANDABLE_REMAP_SECONDS."""
    return bool(expandable_segments and budget and mem.device > budget)


def device_bytes_at(phases: list[Phase], frag: Fragmentation, s: Strategy, micro_batch: int) -> int:
    return reserved_at(phases, frag, micro_batch)[1] + device_overhead(s)


def max_micro_batch_for_capacity(
    phases: list[Phase], frag: Fragmentation, s: Strategy, capacity_bytes: int, limit: int = 1 << 20
) -> int:
    """The largest micro-batch whose device bytes stay within ``capacity_bytes`` (0 if not even 1 fits).

    Closed form: every phase and the fragmentation are linear in the micro-batch, so each phase gives its own bound.
    """
    budget = capacity_bytes - device_overhead(s)
    best = limit
    for p in phases:
        fixed, slope = p.fixed_total() + frag.fixed_for(p), p.per_sample_total() + frag.per_sample_for(p)
        if fixed > budget:
            best = 0
        elif slope > 0:
            best = min(best, int((budget - fixed) // slope))
    best = max(best, 0)
    # Guard the integer rounding of the closed form (it is off by at most one or two either way).
    while best > 0 and device_bytes_at(phases, frag, s, best) > capacity_bytes:
        best -= 1
    for _ in range(4):
        if best < limit and device_bytes_at(phases, frag, s, best + 1) <= capacity_bytes:
            best += 1
    return best


# --------------------------------------------------------------------------------------------- the estimate


def estimate_memory(
    model: ModelSpec,
    strategy: Strategy,
    seq_len: int,
    buffers: ZeroBuffers = DEFAULT_BUFFERS,
    expandable_segments: bool = False,
) -> MemoryEstimate:
    phases = phases_for(model, strategy, seq_len, buffers)
    b = strategy.micro_batch_size
    at = [(p, p.at(b)) for p in phases]
    peak, allocated = max(at, key=lambda x: x[1])
    frag = fragmentation(model, strategy, seq_len, buffers, phases=phases)
    # The allocator's peak may come at a moment of fewer allocated bytes (see fragmentation).
    reserved = reserved_at(phases, frag, b)[1]
    pressure = fragmentation(model, strategy, seq_len, buffers, True, expandable_segments, phases=phases)
    needed = device_bytes_at(phases, pressure, strategy, b)
    items = tuple((k, v) for k, v in peak.fixed if v) + tuple((k, v * b) for k, v in peak.per_sample if v)
    cpu, cpu_items = host_bytes(model, strategy)
    per_sample = device_bytes_at(phases, pressure, strategy, b + 1) - needed
    context, nccl = cal.CUDA_CONTEXT_BYTES, nccl_bytes(strategy)
    return MemoryEstimate(
        allocated=allocated,
        reserved=reserved,
        cuda_context=context,
        nccl=nccl,
        device=reserved + context + nccl,
        needed=needed,
        peak_phase=peak.name,
        gpu_items=items,
        per_sample_device=per_sample,
        cpu=cpu,
        cpu_items=cpu_items,
        nvme=nvme_bytes(model, strategy),
        phases=tuple((p.name, v) for p, v in at),
    )

"""ZeRO-3's walk (pure arithmetic): what it partitions and gathers, what a training step keeps gathered from its
forward for its backward, how often a micro-step gathers the model, and where the backward is when a reduce bucket
goes to the host, with what that flush holds. DeepSpeed 0.19.8's partitioned_param_coordinator.py and stage3.py,
read and measured (the docstrings say where). ``memory`` builds its phases and pools from these."""

from __future__ import annotations

from dataclasses import dataclass

from wizard.model import ModelSpec
from wizard.planner import calibration as cal
from wizard.planner import finetune as ft
from wizard.planner.buffers import DEFAULT_BUFFERS, ZeroBuffers
from wizard.strategy import Strategy


def stage3_elements(model: ModelSpec, s: Strategy) -> int:
    """The elements ZeRO-3 partitions and gathers, which its live and reuse limits count: every parameter, a QLoRA
    4-bit weight as the 16-bit elements its packed bytes fill (HF's QLoRA + ZeRO-3 recipe stores them in the compute
    dtype, bnb_4bit_quant_storage)."""
    return ft.stored_elements(model, s.weight_bytes)


def stage3_kept_for_backward(model: ModelSpec, s: Strategy, buf: ZeroBuffers = DEFAULT_BUFFERS) -> int:
    """Elements a ZeRO-3 training micro-step still holds gathered when its forward ends: backward uses them without
    gathering (or, offloaded, fetching) them again. The coordinator (partitioned_param_coordinator.py, DeepSpeed
    0.19.8) walks a recorded trace of every module use, forward then backward:
    - each fetch prefetches up to ``stage3_prefetch_bucket_size`` more elements from the trace while fewer than
      ``stage3_max_live_parameters`` are gathered (at least one parameter a fetch), and walks past the entries of
      parameters already gathered for free, marking them as wanted at that later use; so the walk runs ahead of the
      forward into the backward's first uses, and whatever it marked there stays gathered: up to
      ``max_live_parameters`` of the model's end;
    - releasing a module, it keeps any parameter used again within ``stage3_max_reuse_distance`` elements of the
      trace, which for a forward use is the rest of the forward and as much again of the backward: half of it.
    With the prefetch off only the reuse distance keeps anything, and so with the parameters on NVMe, where the walk
    stops at the first partition still on disk (``_is_currently_on_nvme``; read from the source, not measured).
    What no backward uses (LoRA's frozen embeddings and first projections, ``finetune.backward_free_bytes``) is
    released, never kept.
    Measured through DeepSpeed's comms logger on two CPU ranks (bench/comm_volume.py): LLaMA-shaped models scaled
    down with these settings kept what this says within 1 % of the model; on one H200 with the parameters offloaded,
    gpt2-xl (1.56e9 parameters) and llama-1b (1.1e9) held 1.05e9 and 1.07e9 gathered elements at the peak, this plus
    the prefetch bucket (bench/results/plan_accuracy-2026-12-01-1gpu-zero3-a.json)."""
    return _kept_for_backward(s, buf, stage3_elements(model, s), _backward_free_elements(model, s))


def _kept_for_backward(s: Strategy, buf: ZeroBuffers, elements: int, backward_free: int) -> int:
    """``stage3_kept_for_backward`` from the model's ``stage3_elements`` and its ``_backward_free_elements``, for
    callers that need those too and compute them once."""
    if buf.prefetch_elements > 0 and s.offload_param != "nvme":
        kept = max(buf.max_live_parameters, buf.max_reuse_distance // 2)
    else:
        kept = buf.max_reuse_distance // 2
    return min(elements - backward_free, kept)


def _recompute_regathers(model: ModelSpec, s: Strategy, buf: ZeroBuffers, kept: int) -> float:
    """Elements a LoRA / QLoRA backward with activation checkpointing gathers beyond what the forward did not keep:
    the frozen parameters each block's recompute gathers and DeepSpeed releases before the block's backward uses
    them (``finetune.recompute_released_bytes``). Backward walks the blocks from the last: in those holding the
    first half of the kept elements (``kept``) they stay gathered throughout, in the rest of the kept set they are
    gathered once, beyond it twice -- one block's worth more per block, once the model is larger than the kept set.
    Measured through DeepSpeed's comms logger on two CPU ranks (bench/comm_volume.py): LLaMA, TinyLlama and GPT-2
    shapes, 16-bit and 4-bit, PEFT's default targets and all-linear, max_live_parameters from 0.5e9 to 2e9 and the
    reuse distance at 1e9 and 2e9 (which changes nothing)."""
    if not (model.finetune.uses_lora and s.activation_checkpointing):
        return 0.0
    w = s.weight_bytes
    released, block = (b / w for b in ft.recompute_released_bytes(model, w))
    if block <= 0:
        return 0.0

    def blocks_beyond(reach: float) -> float:
        return max(0.0, model.layers - reach / block)

    return max(0.0, released * (2 * blocks_beyond(kept / 2) - blocks_beyond(kept)))


def _backward_free_elements(model: ModelSpec, s: Strategy) -> int:
    """Elements no backward uses (LoRA's frozen prefix, ``finetune.backward_free_bytes``): never kept, never
    gathered again."""
    w = s.weight_bytes
    return ft.backward_free_bytes(model, w, s.activation_checkpointing) // w


def stage3_training_gathers(model: ModelSpec, s: Strategy, buf: ZeroBuffers = DEFAULT_BUFFERS) -> float:
    """How many times a ZeRO-3 training micro-step gathers (offloaded: fetches) the model's parameters, in units of
    the whole model: once in forward; in backward again all but what the forward left gathered
    (``stage3_kept_for_backward``); and a tied embedding matrix twice more where the model is longer than the reuse
    distance -- the input embedding and the output head in forward, the head's backward and the embedding's in
    backward, each a whole model's trace apart, while the prefetch walk is only a bucket or two ahead of either
    (once more only, in forward, where LoRA freezes the embedding and nothing makes its output require a gradient:
    with checkpointing transformers does, ``finetune.backward_free_bytes``). Measured through
    DeepSpeed's comms logger on two CPU ranks (bench/comm_volume.py)."""
    elements = stage3_elements(model, s)
    if elements <= 0:
        return 1.0
    backward_free = _backward_free_elements(model, s)
    kept = _kept_for_backward(s, buf, elements, backward_free)
    again = elements - backward_free - kept + _recompute_regathers(model, s, buf, kept)
    gathers = 1.0 + again / elements
    if model.tied_embeddings and elements > buf.max_reuse_distance:
        twice = ft.embedding_runs_backward(model, s.activation_checkpointing)
        gathers += (2 if twice else 1) * model.vocab * model.hidden / elements
    return gathers


def stage3_working_set(model: ModelSpec, s: Strategy, buf: ZeroBuffers) -> int:
    """Gathered full parameters live during forward/backward: the module in use plus the prefetch bucket and, in
    training, what stays gathered at the end of forward for backward (``stage3_kept_for_backward``): what
    ``stage3_gathered_at`` holds before the backward has walked anything."""
    return stage3_gathered_at(model, s, buf, 0)


@dataclass(frozen=True)
class NvmeParameters:
    """A rank's 16-bit parameter elements with the parameters offloaded to NVMe (``nvme_parameters``)."""

    kept: int  # trained ones kept in host memory: fetched from there, updated in place
    fetched: int  # read from NVMe every fetch
    written: int  # trained ones written back to NVMe every step
    host_buffer: int  # elements of the pinned flat buffer for the kept ones (allocated even if none are kept)
    write_buffer: int  # elements of the pinned buffer the write-back goes through (0: none)


def nvme_parameters(model: ModelSpec, s: Strategy) -> NvmeParameters:
    """Where a rank's parameters live with offload_param on NVMe (DeepSpeed 0.19.8, stage3.py):
    training pins a flat host buffer of min(trained partition, max_in_cpu) elements
    (_create_param_groups_fp16_flat_cpu_memory) and keeps there the optimizer's sub-groups that fit whole, counted from
    the first (_create_fp16_partitions_with_defragmentation). A sub-group closes once it reaches sub_group_size
    (_create_fp16_sub_groups), which by default equals max_in_cpu (1e9): a rank that trains more than that keeps
    none, one that trains less keeps them all. The rest of the trained parameters is fetched from NVMe and written
    back every step (_partitioned_params_swap_out) through a pinned buffer sized by the full parameters of the
    largest sub-group (reserve_partitioned_swap_space sums ds_numel: about world_size x the sub-group). Frozen
    parameters (LoRA's base) are not the optimizer's: they stay on NVMe, read every fetch, never written. Inference
    (DeepSpeedZeRoOffload) swaps every parameter."""
    if s.offload_param != "nvme":
        return NvmeParameters(0, 0, 0, 0, 0)
    w, N = s.weight_bytes, s.world_size
    local = ft.stored_elements(model, w) // N
    if s.mode != "train":
        return NvmeParameters(0, local, 0, 0, 0)
    trained = min(local, ft.trainable_params(model) // N)
    kept = trained if trained <= cal.NVME_PARAM_MAX_IN_CPU else 0
    written = trained - kept
    write_buffer = min(N * stage3_sub_group(trained), ft.stored_elements(model, w)) if written else 0
    return NvmeParameters(kept, local - kept, written, min(trained, cal.NVME_PARAM_MAX_IN_CPU), write_buffer)


def stage3_sub_group(partition: int) -> int:
    """Elements of the largest stage-3 optimizer sub-group (calibration.STAGE3_SUB_GROUP_ELEMENTS)."""
    return min(partition, cal.STAGE3_SUB_GROUP_ELEMENTS)


GATHERED_ITEM = "gathered parameters"
FLAT_BUCKET_ITEM = "the bucket's gradients, flattened for the reduce-scatter"
IN_FLIGHT_ITEM = "the largest gradient's partition on its way to the host (copy, fp64 norm)"
TIED_ITEM = "the tied embedding's gradient (summed at the backward's end)"
# What ZeRO-3 allocates on its side streams, each stream a pool of its own in PyTorch's caching allocator (blocks go
# back to the pool of the stream that allocated them, c10/cuda/CUDACachingAllocator.cpp): the gathered parameters on
# the coordinator's all-gather stream (partitioned_param_coordinator.py __allgather_stream), the flattened bucket and
# the partitions on their way to the host on the reduce stream (stage3.py reduce_and_partition_stream; DeepSpeed
# 0.19.8). ``fragmentation`` reserves each stream's own peak (``stream_pools``).
FETCH_STREAM_ITEMS = (GATHERED_ITEM,)
REDUCE_STREAM_ITEMS = (FLAT_BUCKET_ITEM, IN_FLIGHT_ITEM)


def stage3_host_gradient_items(
    model: ModelSpec,
    s: Strategy,
    buf: ZeroBuffers,
    last: bool = False,
    largest_in_bucket: bool = True,
    content: tuple[int, int] | None = None,
) -> tuple[tuple[str, int], ...]:
    """What ZeRO-3 with the optimizer on the host holds besides the step's own state while a full reduce bucket goes
    to the host (``_stage3_host_gradients_phases``), from stage3.py and coalesced_collectives.py (DeepSpeed 0.19.8):
    - the bucket's gradients once more: reduce_scatter_coalesced concatenates them into one flat block, the
      bucket's size, on the reduce stream (a bucket of one tensor is reduced in place);
    - the largest trained tensor's partition of 1/N on its way to the host (partition_grads,
      _offload_grad_partition_at_boundary): its 16-bit copy back on the GPU, and the partition's norm taken in fp64
      (calibration.GRADIENT_NORM_BYTES, in chunks of GRADIENT_NORM_CHUNK_ELEMENTS) before its fp32 copy for the
      optimizer (none in fp32 training), the larger of the two. Its 16-bit gradient itself was copied into the
      reduce bucket (contiguous_gradients), counted with it, unless it is larger than the bucket: then it stays
      where autograd made it.
    With the optimizer on NVMe the fp32 copies of the bucket's partitions wait for the swap-out
    (_swap_out_offload_fp32_gradients), the largest's own made after its norm (in fp32 training they are the GPU
    copies themselves). ``last``: the backward's last bucket, which ends with the input embedding's
    gradient (the largest tensor of most models): with the gradients before it that no full bucket took, if the
    largest still fits beside them, else alone. ``largest_in_bucket`` False: a bucket before the tied embedding's
    gradient is ready -- autograd holds the output head's share of it (16 bits), the bucket's own largest member is on
    its way instead. ``content``: the bucket being flushed, (its elements, its largest member's), where the walk knows
    it (``stage3_flushes``); by default the model's largest tensor and a full bucket."""
    w, P, largest = s.weight_bytes, ft.trainable_params(model), ft.largest_trainable_tensor(model)
    N = max(1, s.world_size)
    bucket = buf.reduce_bucket_elements
    nvme = s.offload_optimizer == "nvme"
    fp32 = 4 if w != 4 else 0  # fp32 training: the copy is the GPU copy itself

    def on_its_way(part: int) -> int:
        """A partition's 16-bit copy, and the larger of its fp64 norm and its fp32 copy."""
        norm = cal.GRADIENT_NORM_BYTES * min(part, cal.GRADIENT_NORM_CHUNK_ELEMENTS)
        return w * part + max(norm, fp32 * part)

    if not largest_in_bucket:
        others = min(bucket, max(0, P - largest))
        member = max((n for n, _ in ft.trainable_tensors(model)[0] if n != largest), default=0)
        if content is not None:
            others, member = content
        # the bucket's own largest member is on its way like any other bucket's
        part = min(others, member) // N
        return (
            (FLAT_BUCKET_ITEM, w * others),
            (TIED_ITEM, w * largest),
            (IN_FLIGHT_ITEM, on_its_way(part) + (4 * others // N - 4 * part if nvme else 0)),
        )
    walked = 0  # what the walk put in the bucket, where it knows (llama-3b's first: 474M elements, read 904 MiB flat)
    if content is not None and not last:
        walked, largest = content  # largest: the bucket's own largest member
    # the bucket being reduced (elements) and whether it holds more than its largest gradient (then it is
    # concatenated once more; one tensor alone is reduced in place). A tensor alone in a bucket it fits is reduced in
    # place by the source, yet llama-3b's head alone at a quarter bucket held one more 16-bit block of the head's
    # own size on the reduce stream (--peak-anatomy, one H200: two 195 MiB blocks beside the 781 MiB norm;
    # bench/results/plan_accuracy-2026-12-06-1gpu-phases-3b-quarter.json), so it keeps a copy of its own size.
    alone = largest > bucket  # reduced on its own, never copied into the bucket
    full = max(walked, largest) if walked else min(bucket, P)
    fill, shared = (largest, False) if alone else (full, largest < P)
    if last and bucket > 0 and not alone:
        rest = max(0, P - largest) % bucket
        fill, shared = (rest + largest, rest > 0) if rest + largest <= bucket else (largest, False)
    part = largest // N
    # with the optimizer on NVMe the bucket's other fp32 partitions wait for the swap-out; the largest's own is made
    # after its norm
    waiting = 4 * fill // N - 4 * part if nvme else 0
    return (
        (FLAT_BUCKET_ITEM, w * fill if shared else 0),
        (IN_FLIGHT_ITEM, (w * largest if alone else 0) + on_its_way(part) + waiting),
    )


def largest_gradient_comes_last(model: ModelSpec) -> bool:
    """The largest trained tensor is the embedding matrix shared with the output head: autograd completes its
    gradient only when the backward reaches the input embedding, the last module -- so it is not in the first
    bucket. An untied output head is the backward's first gradient (the input embedding, as large, its last)."""
    return model.tied_embeddings and ft.largest_trainable_tensor(model) == model.vocab * model.hidden


def stage3_gathered_at(model: ModelSpec, s: Strategy, buf: ZeroBuffers, walked: int) -> int:
    """Gathered parameter bytes, in the elements DeepSpeed counts (``stage3_elements``), when a training backward has
    walked ``walked`` of them from the model's output end. Always the module in use plus the prefetch bucket (a
    module larger than max_live_parameters is still gathered whole); an inference pass is never reused within its
    trace, so that is all it holds. In training the coordinator (partitioned_param_coordinator.py, DeepSpeed
    0.19.8) keeps gathered, of what the backward has still to use, what the forward left
    (``stage3_kept_for_backward``), and with the prefetch on its walk refills it from the recorded trace up to
    ``max_live_parameters`` -- each fetch adds up to a prefetch bucket, and a layer's fetches add more than the
    layer -- so that share is min(kept + the prefetch bucket, elements still to walk): nothing is fetched past the
    model's end. Without the prefetch (NVMe) what the forward left is used up, never refilled, beside the prefetch
    bucket. What the backward has used it releases: it keeps a parameter only for a later use within the rest of
    this step's trace (``__params_to_release`` scans ``__submodule_order[step_id:]``), and the next forward is the
    next step's. At ``walked`` = 0 this is the gathered working set of the forward's end (``stage3_working_set``).
    Measured (bench/_peak_anatomy.py, one H100, bench/results/plan_accuracy-2026-12-06-1gpu-phases-anatomy.json):
    at the first full reduce bucket llama-1b (1.1e9 elements) held 1.12 GiB of parameters gathered, this says 1.12;
    llama-3b (3.4e9) 1.90, this says 1.96 (the coordinator caps each prefetch at max_live_parameters, which the
    kept set fills: not modelled)."""
    if s.world_size == 1 and s.offload_param == "none":
        return 0  # one rank: the partition is the whole parameter
    elements = stage3_elements(model, s)
    largest = model.largest_layer_params * elements // max(1, model.total_params)
    live = max(largest, min(buf.max_live_parameters, largest + buf.prefetch_elements))
    if s.mode == "train":
        kept = _kept_for_backward(s, buf, elements, _backward_free_elements(model, s))
        walked = max(0, min(elements, walked))
        if buf.prefetch_elements > 0 and s.offload_param != "nvme":
            ahead = min(kept + buf.prefetch_elements, elements - walked)  # no prefetch past the model's end
        else:
            ahead = max(0, kept - walked) + buf.prefetch_elements
        live = max(live, ahead)
    return s.weight_bytes * min(elements, live)


@dataclass(frozen=True)
class Flush:
    """A full reduce bucket going to the host during a ZeRO-3 backward (``stage3_flushes``)."""

    held: float  # share of the layers not yet walked, whose activations are held (the layer being walked among them)
    left: float  # share of that layer's parameters still to walk
    walked: float  # share of the trained parameters walked
    content: tuple[int, int]  # the bucket: its elements, its largest member's


def stage3_flushes(model: ModelSpec, bucket: int) -> list[Flush]:
    """Where the backward is when a reduce bucket goes to the host, at the moments that can set its peak: the first
    full bucket, and the one that carries the largest of the layers' tensors where that comes later (a tensor larger
    than the bucket travels alone). DeepSpeed flushes the bucket when a gradient arrives that does not fit beside what
    it holds (stage3.py ``reduce_independent_p_g_buckets_and_remove_grads``, DeepSpeed 0.19.8); the gradients arrive
    from the output end: an untied output head first, then each layer's tensors in the reverse of their forward order
    (the MLP before the attention). Empty: the bucket never fills before the input embedding's gradient (the
    backward's last)."""
    layers = max(1, model.layers)
    tensors, _ = ft.trainable_tensors(model)
    embedding = model.vocab * model.hidden
    # the layers' tensors (the input embedding and an untied head apart); a kind not in every layer (a MoE
    # model's expert stacks beside dense layers) is spread evenly over them, tensor by tensor
    inner = [(n, count) for n, count in tensors if not (count == 1 and n == embedding)]
    order = [n * count // layers for n, count in inner][::-1]
    total, trained = sum(order) or 1, max(1, ft.trainable_params(model))
    largest = max(order, default=0)
    head = embedding if not model.finetune.uses_lora and not model.tied_embeddings else 0
    filled, member, walked_all = head, head, head
    out: list[Flush] = []
    for walked_layers in range(layers):
        walked = 0
        for n in order:
            if filled > 0 and filled + n > bucket:
                flush = Flush(
                    (layers - walked_layers) / layers,
                    1 - walked / total,
                    walked_all / trained,
                    (filled, member),
                )
                if not out or member == largest > out[0].content[1]:
                    out.append(flush)
                if member >= max(largest, out[0].content[1]):
                    return out
                filled, member = 0, 0
            filled, member, walked, walked_all = filled + n, max(member, n), walked + n, walked_all + n
    return out

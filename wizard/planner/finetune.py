"""Fine-tuning accounting (pure arithmetic): what LoRA and QLoRA change in the memory and time of a step.

What trains. PEFT (peft 0.21.2, tuners/lora/layer.py ``LoraLayer.update_layer``) adds to every targeted linear layer
``lora_A`` (fan_in -> r) and ``lora_B`` (r -> fan_out), no biases: ``r * (fan_in + fan_out)`` trainable parameters;
every base parameter is frozen. Targets match by module-name suffix (peft/tuners/tuners_utils.py,
``check_target_module_exists``: ``key == target or key.endswith("." + target)``); "all-linear" is every linear layer
but the output head. The linear layers below are the ``nn.Linear`` / ``Conv1D`` modules transformers 5.24 builds for
each architecture (fused MoE experts are 3-D parameters, not linear layers: neither targeted nor 4-bit quantized).

How the frozen base is stored. DeepSpeed casts every floating-point parameter to the training dtype
(deepspeed/runtime/engine.py ``_cast_module_mixed_precision``, 0.19.8) -- the LoRA weights too, with fp32 masters in
its optimizer. QLoRA: transformers' bitsandbytes integration replaces every linear layer except the output head
(``get_keys_to_not_convert``) by ``Linear4bit``: 4-bit NF4 weights, two per byte, with one absmax per block of 64
weights -- fp32, or with double quantization an 8-bit code per block plus one fp32 absmax and offset per 256 blocks
(bitsandbytes ``quantize_4bit(compress_statistics=True)``; arXiv:2305.14314 section 3). The constants are tensor
attributes, not parameters: ZeRO-3 partitions the packed weights (stored as the compute dtype with
``bnb_4bit_quant_storage``) but every GPU keeps all the constants. Each forward (and backward) of a 4-bit layer
dequantizes its weight into a compute-dtype buffer.

What a frozen layer saves for backward. The weight gradient of ``y = x W`` needs ``x``; the input gradient needs
only ``W``. PyTorch saves ``x`` only when ``W`` requires grad (autograd's derivatives for mm/addmm), and
bitsandbytes' ``MatMul4Bit`` saves only the weight. So a linear input that no trainable layer reads is not saved:
measured on CPU (torch 2.13, a 4-layer LLaMA, bf16, saved_tensors_hooks) 11,672 saved bytes per token per layer
fully trained, 8,792 with LoRA on q/v, 10,760 on all linear layers; this model predicts 11,672 / 9,304 / 11,784
(a little high: the frozen norms' weight gradients, also not saved, are not subtracted).

FLOPs. Per parameter and token a forward is 2 FLOPs, the backward 4: 2 for the input gradient, 2 for the weight
gradient (Kaplan et al. 2020, arXiv:2001.08361 section 2.1; PaLM's 6N, arXiv:2204.02311 appendix B). Frozen weights
skip the weight gradient, but the input gradient still flows through every layer down to the first adapter: 4N
instead of 6N (+6 per LoRA parameter); attention's score and value products have no weights and keep all 12*L*h*s.
Activation checkpointing recomputes the forward: +2N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from wizard.errors import DswizError
from wizard.model import ModelSpec, parameter_tensor_count
from wizard.tuning import ALL_LINEAR, FineTune

if TYPE_CHECKING:
    from wizard.strategy import Strategy

# PEFT's default target modules per model_type (peft 0.21.2 utils/constants.py,
# TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING), for the architectures dswiz models.
PEFT_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "gpt2": ("c_attn",),
    "llama": ("q_proj", "v_proj"),
    "mistral": ("q_proj", "v_proj"),
    "qwen2": ("q_proj", "v_proj"),
    "mixtral": ("q_proj", "v_proj"),
    "gpt_neox": ("query_key_value",),
    "bert": ("query", "value"),
    "deberta-v2": ("query_proj", "value_proj"),
}
NF4_BLOCK = 64  # weights per absmax (bitsandbytes quantize_4bit blocksize)
DOUBLE_QUANT_BLOCK = 256  # absmax values per second-level block
DEQUANT_BYTES_PER_WEIGHT = (
    2.5  # dequantize_4bit reads the packed half byte and writes the compute dtype (2 bytes)
)


@dataclass(frozen=True)
class LinearLayer:
    """One linear module of the architecture, as transformers names it (the path inside its layer)."""

    path: str
    fan_in: int
    fan_out: int
    count: int  # how many the model has (one per layer, or one)
    reads: str  # the tensor it reads: layers reading the same one share a saved input
    head: bool = False  # the output head (never quantized, not in "all-linear")

    @property
    def weights(self) -> int:
        return self.fan_in * self.fan_out


def linear_layers(m: ModelSpec) -> tuple[LinearLayer, ...]:
    """Every linear module of the model (transformers 5.24's module names, shapes and counts)."""
    h, L, f, V = m.hidden, m.layers, m.ffn_hidden, m.vocab
    q, kv = m.heads * m.head_dim, m.kv_dim
    if m.model_type == "gpt2":
        return _fused_qkv(("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj", "lm_head"), h, f, L, V)
    if m.model_type == "gpt_neox":
        neox = ("attention.query_key_value", "attention.dense", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h")
        return _fused_qkv((*neox, "embed_out"), h, f, L, V)
    if m.encoder:  # BERT / DeBERTa-v2 masked LM
        names = (
            ("query_proj", "key_proj", "value_proj")
            if m.model_type == "deberta-v2"
            else ("query", "key", "value")
        )
        return (
            *(LinearLayer(f"attention.self.{n}", h, h, L, "attn_in") for n in names),
            LinearLayer("attention.output.dense", h, h, L, "attn_out"),
            LinearLayer("intermediate.dense", h, f, L, "mlp_in"),
            LinearLayer("output.dense", f, h, L, "mlp_mid"),
            LinearLayer("cls.predictions.transform.dense", h, h, 1, "final"),
            LinearLayer("cls.predictions.decoder", h, V, 1, "final", head=True),
        )
    attn = (
        LinearLayer("self_attn.q_proj", h, q, L, "attn_in"),
        LinearLayer("self_attn.k_proj", h, kv, L, "attn_in"),
        LinearLayer("self_attn.v_proj", h, kv, L, "attn_in"),
        LinearLayer("self_attn.o_proj", q, h, L, "attn_out"),
    )
    head = LinearLayer("lm_head", h, V, 1, "final", head=True)
    if m.model_type == "mixtral":
        return (*attn, head)  # experts and router: fused parameters, not nn.Linear
    if m.model_type == "qwen2_moe":
        fs, dense = m.shared_expert_ffn_hidden, L - m.moe_layers
        moe = (
            LinearLayer("mlp.shared_expert.gate_proj", h, fs, m.moe_layers, "mlp_in"),
            LinearLayer("mlp.shared_expert.up_proj", h, fs, m.moe_layers, "mlp_in"),
            LinearLayer("mlp.shared_expert.down_proj", fs, h, m.moe_layers, "shared_mid"),
            LinearLayer("mlp.shared_expert_gate", h, 1, m.moe_layers, "mlp_in"),
        )
        mlp = _swiglu(h, f, dense) if dense else ()
        return (*attn, *moe, *mlp, head)
    return (*attn, *_swiglu(h, f, L), head)


def _fused_qkv(
    names: tuple[str, str, str, str, str], h: int, f: int, L: int, V: int
) -> tuple[LinearLayer, ...]:
    """GPT-2 / GPT-NeoX: one fused q/k/v projection, the attention output, a two-layer MLP, the head."""
    qkv, out, up, down, head = names
    return (
        LinearLayer(qkv, h, 3 * h, L, "attn_in"),
        LinearLayer(out, h, h, L, "attn_out"),
        LinearLayer(up, h, f, L, "mlp_in"),
        LinearLayer(down, f, h, L, "mlp_mid"),
        LinearLayer(head, h, V, 1, "final", head=True),
    )


def _swiglu(h: int, f: int, count: int) -> tuple[LinearLayer, ...]:
    return (
        LinearLayer("mlp.gate_proj", h, f, count, "mlp_in"),
        LinearLayer("mlp.up_proj", h, f, count, "mlp_in"),
        LinearLayer("mlp.down_proj", f, h, count, "mlp_mid"),
    )


def _matches(path: str, target: str) -> bool:
    return path == target or path.endswith("." + target)


def lora_target_names(m: ModelSpec, ft: FineTune | None = None) -> tuple[str, ...]:
    """The target names LoRA uses: the given ones, else PEFT's default for the architecture."""
    ft = ft or m.finetune
    if ft.lora_targets:
        return ft.lora_targets
    default = PEFT_DEFAULT_TARGETS.get(m.model_type)
    if default is None:
        known = ", ".join(sorted({layer.path.rsplit(".", 1)[-1] for layer in linear_layers(m)}))
        raise DswizError(
            f"PEFT has no default LoRA target modules for model_type {m.model_type!r}",
            f"name them: --lora-targets with some of {known}, or all-linear",
        )
    return default


def lora_layers(m: ModelSpec, ft: FineTune | None = None) -> tuple[LinearLayer, ...]:
    """The linear layers LoRA adapts; DswizError for a target name that matches none (PEFT raises too)."""
    ft = ft or m.finetune
    if not ft.uses_lora:
        return ()
    layers = linear_layers(m)
    targets = lora_target_names(m, ft)
    if targets == (ALL_LINEAR,):
        return tuple(layer for layer in layers if not layer.head)
    unknown = [t for t in targets if not any(_matches(layer.path, t) for layer in layers)]
    if unknown:
        known = ", ".join(sorted({layer.path.rsplit(".", 1)[-1] for layer in layers}))
        raise DswizError(
            f"LoRA target module(s) {', '.join(unknown)} not found in {m.name} ({m.model_type})",
            f"use some of {known}, or all-linear",
        )
    return tuple(layer for layer in layers if any(_matches(layer.path, t) for t in targets))


def lora_params(m: ModelSpec, ft: FineTune | None = None) -> int:
    """Trainable LoRA parameters, as PEFT's get_nb_trainable_parameters() counts them."""
    r = (ft or m.finetune).lora_rank
    return sum(layer.count * r * (layer.fan_in + layer.fan_out) for layer in lora_layers(m, ft))


def trainable_params(m: ModelSpec) -> int:
    """Parameters with gradients and optimizer states: all of them for full fine-tuning, else LoRA's."""
    return lora_params(m) if m.finetune.uses_lora else m.total_params


def trainable_tensor_count(m: ModelSpec) -> int:
    """How many tensors the optimizer updates: LoRA's A and B of every adapted layer, else every parameter tensor
    (wizard.model.parameter_tensor_count)."""
    if m.finetune.uses_lora:
        return sum(count for _, count in trainable_tensors(m)[0])
    return parameter_tensor_count(m)


def trainable_tensors(m: ModelSpec) -> tuple[tuple[tuple[int, int], ...], int]:
    """The tensors that get gradients, as ((elements, how many), ...) and the elements of the small ones left over
    (norms, biases, position tables), which are not listed one by one. LoRA: A and B of every adapted layer. Full
    training: every linear weight, the input embedding (the head too where it is not tied to it), and the experts'
    fused weights and router of each MoE layer (transformers keeps an expert stack as two 3-D tensors)."""
    if m.finetune.uses_lora:
        r = m.finetune.lora_rank
        pairs = tuple((r * layer.fan_in, layer.count) for layer in lora_layers(m))
        return pairs + tuple((r * layer.fan_out, layer.count) for layer in lora_layers(m)), 0
    listed = [
        (layer.weights, layer.count) for layer in linear_layers(m) if not (layer.head and m.tied_embeddings)
    ]
    listed.append((m.vocab * m.hidden, 1))
    if m.is_moe and m.moe_layers:
        experts = m.num_experts * m.moe_ffn_hidden * m.hidden
        listed += [
            (2 * experts, m.moe_layers),
            (experts, m.moe_layers),
            (m.num_experts * m.hidden, m.moe_layers),
        ]
    return tuple(listed), max(0, m.total_params - sum(n * c for n, c in listed))


def largest_trainable_tensor(m: ModelSpec) -> int:
    """Elements of the largest tensor that gets a gradient (``trainable_tensors``)."""
    return max((n for n, _ in trainable_tensors(m)[0]), default=0)


def with_finetune(m: ModelSpec, ft: FineTune) -> ModelSpec:
    """The model trained this way; DswizError for targets the model does not have (checked here, once)."""
    if ft.uses_lora:  # PEFT's default targets written out: the label, the hints and the sidecar name them
        ft = replace(ft, lora_targets=lora_target_names(m, ft))
        lora_params(replace(m, finetune=ft))
    out = replace(m, finetune=ft)
    if ft.quantized and m.is_moe:
        note = "QLoRA: the fused MoE experts are not nn.Linear in transformers 5, so they stay 16-bit"
        out = replace(out, notes=(*out.notes, note))
    return out


# ------------------------------------------------------------------------------------------------ storage


def quantized_weights(m: ModelSpec) -> int:
    """Weights QLoRA stores in 4 bit: every linear layer's but the output head's (biases stay 16-bit)."""
    return (
        sum(layer.count * layer.weights for layer in linear_layers(m) if not layer.head)
        if m.finetune.quantized
        else 0
    )


def nf4_bytes(weights: int, double_quant: bool) -> int:
    """Bytes of one 4-bit tensor: packed weights + its quantization constants."""
    blocks = math.ceil(weights / NF4_BLOCK)
    constants = blocks + 4 * math.ceil(blocks / DOUBLE_QUANT_BLOCK) + 4 if double_quant else 4 * blocks
    return math.ceil(weights / 2) + constants


def nf4_constant_bytes(m: ModelSpec) -> int:
    """The quantization constants of the whole model (not parameters: never partitioned by ZeRO-3)."""
    dq = m.finetune.double_quant
    total = 0
    for layer in linear_layers(m):
        if not layer.head and m.finetune.quantized:
            total += layer.count * (nf4_bytes(layer.weights, dq) - math.ceil(layer.weights / 2))
    return total


def _stored_weight_bytes(m: ModelSpec, weights: float, w: int) -> float:
    """Bytes of ``weights`` elements of linear layers other than the output head, as stored: packed two per byte
    when QLoRA quantizes them to 4 bits, else ``w`` bytes each. Quantization constants excluded (every GPU keeps
    them, ``nf4_constant_bytes``). Not rounded: a packed tensor takes ``ceil(weights / 2)`` bytes, and each caller
    rounds (or not) where it needs to."""
    return weights / 2 if m.finetune.quantized else w * weights


def stored_parameter_bytes(m: ModelSpec, w: int) -> int:
    """All parameters as DeepSpeed holds them at ``w`` bytes each: 4-bit packed weights (QLoRA), the rest and the
    LoRA weights in the training dtype. Quantization constants excluded (``nf4_constant_bytes``)."""
    if not m.finetune.uses_lora:
        return w * m.total_params
    q = quantized_weights(m)  # rounded up once, over the whole model
    return math.ceil(_stored_weight_bytes(m, q, w)) + w * (m.total_params - q + lora_params(m))


def stored_elements(m: ModelSpec, w: int) -> int:
    """All parameters as elements of the training dtype (``w`` bytes each): what ZeRO-3 partitions, gathers and moves,
    a QLoRA 4-bit weight as the 16-bit elements its packed bytes fill (HF's QLoRA + ZeRO-3 recipe stores them in the
    compute dtype, bnb_4bit_quant_storage)."""
    return stored_parameter_bytes(m, w) // w


def stored_bytes_per_param(m: ModelSpec, w: int) -> float:
    """The average over the model, for what is sized in parameters (ZeRO-3's gathered working set)."""
    return stored_parameter_bytes(m, w) / max(1, m.total_params)


# The order a decoder block reads its tensors in (LinearLayer.reads): attention input, its output, the MLP's.
BLOCK_ORDER = ("attn_in", "attn_out", "mlp_in", "mlp_mid")


def embedding_runs_backward(m: ModelSpec, checkpointing: bool) -> bool:
    """Whether the input embedding runs a backward: trained, or its output made to require a gradient (transformers'
    ``gradient_checkpointing_enable`` calls ``enable_input_require_grads``, modeling_utils.py 5.24)."""
    return not m.finetune.uses_lora or checkpointing


def backward_free_bytes(m: ModelSpec, w: int, checkpointing: bool) -> int:
    """LoRA / QLoRA without activation checkpointing: bytes (as stored, ``w`` per 16-bit element) of the frozen
    parameters no backward uses, which ZeRO-3 therefore never gathers again after the forward. Autograd runs a
    module's backward only where its output requires a gradient, and DeepSpeed's pre-backward fetch hangs on that
    output (runtime/zero/parameter_offload.py, 0.19.8); nothing requires one before the first adapter: so the input
    embeddings and learned positions (not a table tied to the head, whose backward uses it), and in the first block
    every linear layer up to and including the first group that holds an adapted one (they read the block's input;
    an adapted layer's frozen base too). Measured through DeepSpeed's comms logger on two CPU ranks
    (bench/comm_volume.py). With checkpointing, transformers makes the embeddings' output require a gradient
    (``enable_input_require_grads`` from ``gradient_checkpointing_enable``, modeling_utils.py 5.24), and every module
    runs its backward. The first block's norms are left out (a few thousand elements). With a parallel residual
    (GPT-NeoX) the MLP reads the block's input too: attention and MLP are two such chains, each free up to and
    including its first adapted group, or whole where it has no adapter."""
    if embedding_runs_backward(m, checkpointing):
        return 0
    tables = w * max(0, m.embedding_params - m.vocab * m.hidden)
    block = [layer for layer in linear_layers(m) if layer.reads in BLOCK_ORDER]
    adapted = {layer.path for layer in lora_layers(m)}
    chains = [BLOCK_ORDER[:2], BLOCK_ORDER[2:]] if m.parallel_residual else [BLOCK_ORDER]
    frozen = []
    # a parallel chain without an adapter runs no backward at all; a serial block without one is left undefined
    untouched = 1 if m.parallel_residual else -1
    for chain in chains:
        ordered = [layer for layer in block if layer.reads in chain]
        first = min((chain.index(lay.reads) for lay in ordered if lay.path in adapted), default=untouched)
        frozen += [layer for layer in ordered if chain.index(layer.reads) <= first]
    # one of each (the first block's), each tensor rounded up to whole bytes
    return tables + sum(math.ceil(_stored_weight_bytes(m, layer.weights, w)) for layer in frozen)


def recompute_released_bytes(m: ModelSpec, w: int) -> tuple[float, float]:
    """LoRA / QLoRA with activation checkpointing: (bytes of one block's frozen parameters that ZeRO-3 releases
    right after the block's recomputed forward, bytes of the whole block), as stored, averaged over the blocks.
    DeepSpeed 0.19.8 ties the frozen parameters a checkpoint's recompute gathers to the module whose backward
    started it, and releases them when that module's backward ends (partitioned_param_coordinator.py,
    ``update_recompute_parameters``); a frozen parameter used later in the block's backward is gathered again. The
    first saved tensor the block's backward needs starts the recompute: a residual dropout's mask, or an adapter's
    saved input in the last linear layer (16-bit) or the MLP (4-bit) (every frozen parameter goes twice); else a
    16-bit frozen linear's weight, which autograd saves, so the block's last linear (all but its weight go twice);
    bitsandbytes' 4-bit matmul keeps its weight outside autograd's saved tensors, so there the MLP's activation
    product (the attention's parameters and the norms go twice). Measured through DeepSpeed's comms logger on two
    CPU ranks (bench/comm_volume.py).

    In an MoE model the sparse MLP block's backward starts the recompute (the first saved tensors the layer's
    backward needs are inside it: the routing product, Qwen's shared-expert gate), and DeepSpeed makes that block a
    ZeRO-3 leaf by default (runtime/zero/leaf_module_config.py; dswiz config writes it too): one module with all the
    experts' and the shared expert's parameters, released when its whole backward ends; so only what runs before
    it -- the norms, the attention and its biases -- goes twice (Qwen1.5-MoE and Mixtral shapes measured). Its
    dense layers, where it has any (Qwen2-MoE's ``mlp_only_layers``, ``decoder_sparse_step``: plain MLP modules, not
    leaves), follow the dense rule; the figure is averaged over both kinds."""
    if not m.finetune.uses_lora or m.layers <= 0:
        return 0.0, 0.0
    layers = [lay for lay in linear_layers(m) if not lay.head]
    adapted = {lay.path for lay in lora_layers(m)}
    # The linear layers the recompute starts at in a dense block: the MLP's (4-bit) or the last one (16-bit)
    last = BLOCK_ORDER[2:] if m.finetune.quantized else BLOCK_ORDER[-1:]
    linear = sum(lay.count * lay.weights for lay in layers) / m.layers
    params = max(0, m.total_params - m.embedding_params) / m.layers  # the final norm too: a few thousand
    # the norms and biases at w bytes each, the linear weights as stored
    frozen = w * (params - linear) + _stored_weight_bytes(m, linear, w)
    whole = frozen + w * lora_params(m) / m.layers
    if m.moe_layers <= 0:
        return frozen - _gathered_once(m, w, layers, last, adapted, m.layers), whole
    attention = _stored_weight_bytes(m, _weights(layers, BLOCK_ORDER[:2]) / m.layers, w)
    early = w * (2 * m.hidden + m.linear_bias_outputs) + attention  # the norms, the attention and its biases
    dense = m.layers - m.moe_layers
    if dense <= 0:
        return early, whole
    mlp = [
        lay for lay in layers if lay.reads in BLOCK_ORDER[2:] and not lay.path.startswith("mlp.shared_expert")
    ]
    released_dense = (
        early
        + _stored_weight_bytes(m, _weights(mlp, BLOCK_ORDER) / dense, w)
        - _gathered_once(m, w, mlp, last, adapted, dense)
    )
    return (m.moe_layers * early + dense * released_dense) / m.layers, whole


def _weights(layers: list[LinearLayer], reads: tuple[str, ...]) -> int:
    """Weight elements of ``layers`` (each times its count) that read one of ``reads``."""
    return sum(lay.count * lay.weights for lay in layers if lay.reads in reads)


def _gathered_once(
    m: ModelSpec, w: int, layers: list[LinearLayer], last: tuple[str, ...], adapted: set[str], blocks: int
) -> float:
    """A dense block's frozen weights its recompute does not release early, as stored, per block (over ``blocks``):
    those of the ``last`` linear layers, where the recompute starts; none under a residual dropout's mask or with an
    adapter among them (the recompute then starts before them)."""
    if m.dropout > 0 or any(lay.path in adapted for lay in layers if lay.reads in last):
        return 0.0
    return _stored_weight_bytes(m, _weights(layers, last) / blocks, w)


def dequantization_buffer_bytes(m: ModelSpec, w: int) -> int:
    """QLoRA: the largest 4-bit layer dequantized to the compute dtype while it runs (forward and backward)."""
    if not m.finetune.quantized:
        return 0
    return w * max((layer.weights for layer in linear_layers(m) if not layer.head), default=0)


def load_bytes(m: ModelSpec, w: int) -> int:
    """Host bytes per rank while the model loads: the 16-bit model (full, LoRA); QLoRA quantizes layer by layer
    as it moves to the GPU (transformers' bitsandbytes path loads with a device map): about one layer at a time."""
    if m.finetune.quantized:
        return w * m.largest_layer_params
    return stored_parameter_bytes(m, w)


# ------------------------------------------------------------------------------------------------ activations


def layer_activation_delta_per_token(m: ModelSpec) -> float:
    """Saved bytes per token per layer LoRA/QLoRA change against full training (16-bit): minus the inputs only
    frozen linear layers read, plus each adapter's r-wide intermediate."""
    if not m.finetune.uses_lora:
        return 0.0
    per_layer = [
        layer for layer in linear_layers(m) if layer.count == m.layers or layer.count == m.moe_layers
    ]
    per_layer = [
        layer for layer in per_layer if layer.count > 0 and not layer.head and layer.reads != "final"
    ]
    adapted = {layer.path for layer in lora_layers(m)}
    reads: dict[str, int] = {}
    trained: set[str] = set()
    for layer in per_layer:
        reads[layer.reads] = layer.fan_in
        if layer.path in adapted:
            trained.add(layer.reads)
    dropped = sum(dim for slot, dim in reads.items() if slot not in trained)
    adapters = sum(1 for layer in per_layer if layer.path in adapted)
    return -2.0 * dropped + 2.0 * adapters * m.finetune.lora_rank


# ------------------------------------------------------------------------------------------------ time


def lora_flops_per_token(m: ModelSpec, flop_params: int, attention: int, recompute: bool) -> float:
    """Training FLOPs per token with a frozen base (see the module docstring): 4N + 12*L*h*s + 6*T, and with
    recomputation one more forward, 2N + 4*L*h*s + 2*T. ``attention`` is L*heads*head_dim*s."""
    t = lora_params(m)
    out = 4.0 * flop_params + 12.0 * attention + 6.0 * t
    if recompute:
        out += 2.0 * flop_params + 4.0 * attention + 2.0 * t
    return out


def dequantization_seconds(m: ModelSpec, s: Strategy, hbm_bytes_per_s: float) -> float:
    """QLoRA: every 4-bit weight is dequantized in each forward, backward (and recomputed forward) of every
    micro-step, a memory-bound pass (DEQUANT_BYTES_PER_WEIGHT) on the GPU's HBM."""
    q = quantized_weights(m)
    if not q or s.mode != "train":
        return 0.0
    passes = 3 if s.activation_checkpointing else 2
    return s.gradient_accumulation_steps * passes * q * DEQUANT_BYTES_PER_WEIGHT / hbm_bytes_per_s


# ------------------------------------------------------------------------------------------------ DeepSpeed


def strategy_problems(m: ModelSpec, s: Strategy) -> list[str]:
    """What dswiz does not offer with this fine-tuning mode, in words (empty for full fine-tuning)."""
    ft = m.finetune
    if not ft.uses_lora or s.mode != "train":
        return []
    out = []
    if s.offload_optimizer != "none":
        mib = trainable_params(m) * 16 / 2**20
        out.append(
            f"optimizer offload is moot with {ft.label().split(' ')[0]}: the optimizer holds only the adapters' "
            f"states ({mib:,.0f} MiB)"
        )
    if ft.quantized and s.offload_param != "none":
        out.append(
            "QLoRA keeps its 4-bit base on the GPU: ZeRO-3 parameter offload of bitsandbytes weights is not "
            "supported (use --finetune lora with parameter offload instead)"
        )
    return out

"""What model is being trained: a frozen ``ModelSpec`` from a preset name, a local HF config.json, a checkpoint
folder, a hub id (``wizard.model_source``), or numbers; and how (``ModelSpec.finetune``: full, LoRA or QLoRA).

Parameter counts are computed from the architecture the way transformers builds it (tests build the real models
from config on CPU and compare ``num_parameters()``). Nothing here touches the network or imports torch.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from wizard import model_source
from wizard.errors import DswizError, quoted
from wizard.model_presets import ALIASES, PRESETS
from wizard.tuning import FULL, FineTune

if (
    TYPE_CHECKING
):  # typing_extensions only for the checker: Unpack of a TypedDict (PEP 692) is 3.11+ in typing
    from typing_extensions import Unpack

# model_type -> the MoE block ZeRO-3 must treat as a leaf (accelerate's deepspeed_moe_layer_cls_names).
MOE_LAYER_CLASSES = {"mixtral": "MixtralSparseMoeBlock", "qwen2_moe": "Qwen2MoeSparseMoeBlock"}

_LLAMA_LIKE = ("llama", "mistral", "qwen2")
# Families whose positions are learned embeddings: a longer sequence has no position to look up.
LEARNED_POSITION_FAMILIES = ("gpt2", "bert")


@dataclass(frozen=True)
class ModelSpec:
    """The numbers the planner needs about one model. Counts are parameters (elements), not bytes."""

    name: str
    model_type: str  # HF model_type ("gpt2", "llama", "mixtral", ...) or "custom"
    family: str  # activation recipe (planner.calibration.ACTIVATION_RECIPES): gpt2, llama, neox, bert, ...
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    max_positions: int | None
    tied_embeddings: bool
    total_params: int
    active_params: int  # parameters one token passes through (== total for dense models)
    largest_layer_params: int  # DeepSpeed's notion: the most parameters owned directly by one module
    embedding_params: int = 0  # input embeddings (+ an untied output head)
    head_dim: int = 0
    num_experts: int = 0  # 0 for dense models
    experts_per_token: int = 0
    moe_ffn_hidden: int = 0  # per-expert FFN width
    shared_expert_ffn_hidden: int = 0
    moe_layers: int = 0  # layers with experts
    moe_layer_cls_name: str | None = None
    activation: str = "silu"
    dropout: float = 0.0  # hidden/residual dropout in training mode (its masks cost activation memory)
    attention: str = "sdpa"  # "eager" where transformers only materialises attention scores (DeBERTa)
    rel_pos_span: int = 0  # DeBERTa relative-position buckets (its c2p/p2c scores scale with it)
    encoder: bool = False  # masked-LM encoder (BERT-like) rather than a causal LM
    # GPT-NeoX's use_parallel_residual (Pythia, GPT-NeoX-20B): attention and MLP both read the block's input, x +
    # attn(ln1(x)) + mlp(ln2(x)), instead of the MLP reading the attention's output
    parallel_residual: bool = False
    # Outputs per token of one layer's nn.Linear modules that have a bias (torch.nn.functional.linear; GPT-2's Conv1D
    # is not one): ZeRO-3's linear adds these biases in a kernel of its own (planner.throughput).
    linear_bias_outputs: int = 0
    # Parameter tensors (len(list(model.parameters())): weights, biases, norms, embeddings; a tied head once). DeepSpeed's
    # stage-0 16-bit optimizer works tensor by tensor (planner.throughput). 0: not known.
    parameter_tensors: int = 0
    # transformers' default; a config.json (or --model ...,use_cache=0) may turn it off. It changes what a training
    # forward keeps for backward (calibration.USE_CACHE_OFF_BYTES_PER_HIDDEN) and whether an inference pass keeps
    # every layer's K and V (memory.inference_phases).
    use_cache: bool = True
    source: str = "preset"  # "preset", the config.json path, or "numbers"
    exact: bool = True  # False when the shape was guessed from a parameter count
    notes: tuple[str, ...] = ()
    finetune: FineTune = FULL  # which parameters train (wizard.planner.finetune does the accounting)

    @property
    def learned_positions(self) -> int | None:
        """The longest sequence the model can take: GPT-2 and BERT learn one embedding per position (a longer
        sequence indexes past the table); rotary and ALiBi models have no such limit (None)."""
        return self.max_positions if self.family.startswith(LEARNED_POSITION_FAMILIES) else None

    def check_seq_len(self, seq: int) -> None:
        """DswizError for a --seq-len past the positions the model learned (`dswiz plan`, `dswiz check --model`)."""
        if self.learned_positions and seq > self.learned_positions:
            raise DswizError(
                f"--seq-len {seq} is longer than {self.name}'s {self.learned_positions} learned positions",
                f"use --seq-len {self.learned_positions} or less",
            )

    def __post_init__(self) -> None:
        if self.head_dim == 0 and self.heads:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["finetune"] = self.finetune.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelSpec:
        """Read ``to_dict`` back (unknown keys ignored: a newer writer may add fields)."""
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        kw["notes"] = tuple(kw.get("notes") or ())
        kw["finetune"] = FineTune.from_dict(kw.get("finetune"))
        if "parallel_residual" not in d and d.get("model_type") == "gpt_neox":
            # written before dswiz read it: GPT-NeoX's default (use_parallel_residual)
            kw["parallel_residual"] = True
        return cls(**kw)


# --------------------------------------------------------------------------------------------------- parsing


# Parameter tensors of one layer, and of the rest (embeddings, final norm), by model type: for a ModelSpec saved before
# dswiz counted them (ModelSpec.parameter_tensors 0 in an older plan file or run-history record). A LLaMA-style layer
# for the types not listed; an untied head adds one.
_TENSORS_BY_TYPE = {
    "gpt2": (12, 4),
    "gpt_neox": (12, 3),
    "qwen2": (12, 2),
    "qwen2_moe": (16, 2),
    "bert": (16, 10),
    "deberta-v2": (16, 10),
}


def parameter_tensor_count(m: ModelSpec) -> int:
    """``m.parameter_tensors``, or where a spec saved by an older dswiz lacks it, the count its model type gives."""
    if m.parameter_tensors:
        return m.parameter_tensors
    per_layer, rest = _TENSORS_BY_TYPE.get(m.model_type, (9, 2))
    return per_layer * m.layers + rest + (0 if m.tied_embeddings else 1)


def preset_names() -> list[str]:
    return sorted(PRESETS)


def load_model_spec(text: str) -> ModelSpec:
    """A preset name, a path to a config.json (or its directory), or numbers ("params=7e9",
    "layers=32,hidden=4096,heads=32,vocab=32000"). Raises DswizError with the fix for anything else."""
    raw = text.strip()
    if not raw:
        raise DswizError("no model given", _model_fix())
    key = raw.lower()
    if key in PRESETS or key in ALIASES:
        name = ALIASES.get(key, key)
        return spec_from_config(PRESETS[name], name=name, source="preset")
    if "=" in raw:
        return spec_from_numbers(raw)
    path = Path(raw).expanduser()
    if path.is_dir():
        return _spec_from_source(model_source.resolve_folder(path))
    if path.is_file():
        return _spec_from_file(path)
    if model_source.looks_like_hub_id(raw):
        return _spec_from_source(model_source.resolve_hub_id(raw))
    if "/" in raw or raw.endswith(".json"):
        raise DswizError(f"no such file: {raw}", _model_fix())
    close = difflib.get_close_matches(key, [*PRESETS, *ALIASES], n=3, cutoff=0.6)
    did_you_mean = f"did you mean {' or '.join(close)}? " if close else ""
    raise DswizError(f"unknown model {raw!r}", did_you_mean + _model_fix())


def _model_fix() -> str:
    return (
        f"use a preset ({', '.join(preset_names())}), a hub id (org/name), a checkpoint folder, a config.json, "
        "or numbers like params=7e9 or layers=32,hidden=4096,heads=32,vocab=32000"
    )


def _spec_from_file(path: Path) -> ModelSpec:
    data = model_source.read_config_json(path)
    return _spec_from_source(model_source.ResolvedModel(data, "", str(path)))


def _spec_from_source(found: model_source.ResolvedModel) -> ModelSpec:
    """A ModelSpec from a resolved config; where the checkpoint's own count differs, it wins (with a note)."""
    data, path = found.config, Path(found.source)
    if "text_config" in data and isinstance(data["text_config"], dict) and "hidden_size" not in data:
        data = {**data["text_config"], "_name_or_path": data.get("_name_or_path")}
    name = (found.name or str(data.get("_name_or_path") or _file_model_name(path, data)))[:200]
    spec = spec_from_config(data, name=name, source=found.source)
    facts = found.facts
    if facts is None or not facts.total_params or facts.total_params == spec.total_params:
        return spec
    ratio = facts.total_params / spec.total_params
    note = (
        f"the checkpoint's {facts.how} count {facts.total_params:,} parameters ({facts.dtype or 'dtype unknown'}); "
        f"the architecture gives {spec.total_params:,}: memory uses the checkpoint's count"
    )
    return replace(
        spec,
        total_params=facts.total_params,
        active_params=round(spec.active_params * ratio),
        notes=(*spec.notes, note),
    )


def _file_model_name(path: Path, data: dict[str, Any]) -> str:
    """An HF checkpoint's config.json is named by its folder ("Llama-2-7b-hf/config.json"); any other file by its
    own name ("models/llama.json" is "llama", not "models"); else the architecture it declares."""
    if path.name != "config.json" and path.stem:
        return path.stem
    architectures = data.get("architectures")
    arch = architectures[0] if isinstance(architectures, list) and architectures else data.get("model_type")
    return path.parent.name or str(arch or path.stem)


_NUMBER_KEYS = {
    "params": "params",
    "parameters": "params",
    "layers": "layers",
    "num_layers": "layers",
    "hidden": "hidden",
    "hidden_size": "hidden",
    "heads": "heads",
    "kv_heads": "kv_heads",
    "ffn": "ffn",
    "ffn_hidden": "ffn",
    "intermediate": "ffn",
    "intermediate_size": "ffn",
    "vocab": "vocab",
    "vocab_size": "vocab",
    "seq": "max_positions",
    "max_positions": "max_positions",
    "experts": "experts",
    "num_experts": "experts",
    "top_k": "top_k",
    "experts_per_token": "top_k",
    "type": "type",
    "model_type": "type",
    "tied": "tied",
    "use_cache": "use_cache",
    "name": "name",
}
_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def _parse_count(key: str, value: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbgt]?)\s*", value.lower())
    if not m:
        example = f"{key}=7e9 or {key}=7B" if key == "params" else f"{key}=32"
        if re.fullmatch(r"\s*-\s*0*[1-9].*", value):
            raise DswizError(
                f"{key}={value} is negative: {key} is a count from 1 to 1e15", f"write e.g. {example}"
            )
        raise DswizError(f"{key}={value!r} is not a number", f"write e.g. {example}")
    n = float(m.group(1)) * _SUFFIX[m.group(2)]
    if n < 1 or n > 1e15:
        raise DswizError(
            f"{key}={value} is out of range: {key} is a count from 1 to 1e15",
            f"give {key} as a positive count",
        )
    return round(n)


def _parse_flag(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise DswizError(f"{key}={value!r} is not a yes/no value", f"write {key}=1 or {key}=0")


def spec_from_numbers(text: str) -> ModelSpec:
    """ "params=7e9" (shape guessed, LLaMA-like) or an explicit shape "layers=..,hidden=..,heads=..,vocab=.."."""
    given: dict[str, str] = {}
    written: dict[str, str] = {}  # the key as the user wrote it, for the messages
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        if "=" not in part:
            raise DswizError(f"{part!r} in --model {text!r} is not key=value", _model_fix())
        k, v = part.split("=", 1)
        k = k.strip().lower()
        if k not in _NUMBER_KEYS:
            close = difflib.get_close_matches(k, list(_NUMBER_KEYS), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise DswizError(
                f"unknown key {k!r} in --model {text!r}",
                hint
                + "known keys: params, layers, hidden, heads, kv_heads, ffn, vocab, seq, experts, top_k, type, "
                "tied, use_cache",
            )
        key = _NUMBER_KEYS[k]
        if key in given:  # the later one once won unsaid
            raise DswizError(f"{key} is given twice in --model {text!r}", "give each key once")
        given[key], written[key] = v.strip(), k
    mtype = given.pop("type", "llama").lower()
    name = given.pop("name", "")
    tied = _parse_flag("tied", given.pop("tied", "0"))
    use_cache = _parse_flag("use_cache", given.pop("use_cache", "1"))
    counts = {k: _parse_count(written[k], v) for k, v in given.items()}
    shape = {"layers", "hidden", "heads", "vocab"}
    notes: list[str] = []
    exact = True
    if not shape <= counts.keys():
        if "params" not in counts:
            raise DswizError(
                f"--model {text!r} gives neither params= nor a full shape",
                "give params=7e9, or layers=, hidden=, heads= and vocab= (optionally kv_heads=, ffn=)",
            )
        vocab = counts.get("vocab", 32000)
        smallest = 2 * vocab * 128 + 12 * 128**2  # one layer at hidden 128, its embedding and head
        if counts["params"] < smallest:
            raise DswizError(
                f"params={given['params']} is below the smallest shape a parameter count is guessed into "
                f"({smallest / 1e6:.1f}M: one layer at hidden 128 with a {vocab:,}-token vocabulary)",
                "give the shape instead, e.g. layers=2,hidden=64,heads=4,vocab=1000 (or a smaller vocab=)",
            )
        guessed = _guess_shape(counts["params"], vocab)
        for k, v in guessed.items():
            counts.setdefault(k, v)
        exact = False
        notes.append(
            f"shape guessed from the parameter count (LLaMA-like: {counts['layers']} layers, hidden "
            f"{counts['hidden']}); give layers=, hidden=, heads=, vocab= for accurate activation memory"
        )
    h, heads = counts["hidden"], counts["heads"]
    if h % heads:
        raise DswizError(f"hidden={h} is not divisible by heads={heads}", "pick heads that divide hidden")
    kv_heads = counts.get("kv_heads", heads)
    if heads % kv_heads:  # grouped-query attention shares each K/V head among heads / kv_heads query heads
        raise DswizError(
            f"kv_heads={kv_heads} does not divide heads={heads}",
            "give kv_heads that divides heads (equal to heads without grouped-query attention)",
        )
    experts = counts.get("experts", 0)
    if "top_k" in counts and counts["top_k"] > max(experts, 1):
        raise DswizError(
            f"top_k={counts['top_k']} routes each token to more experts than experts={experts}",
            "give top_k at most experts (Mixtral: experts=8,top_k=2)",
        )
    if mtype == "gpt2":
        cfg: dict[str, Any] = {
            "model_type": "gpt2",
            "n_layer": counts["layers"],
            "n_embd": h,
            "n_head": heads,
            "vocab_size": counts["vocab"],
            "n_positions": counts.get("max_positions", 1024),
            "n_inner": counts.get("ffn"),
        }
    else:
        if mtype not in (*_LLAMA_LIKE, "mixtral"):
            notes.append(f"type={mtype} is not modelled on its own: counted as a LLaMA-style decoder")
        ffn = counts.get("ffn") or _llama_ffn(h)
        cfg = {
            "model_type": "mixtral" if experts else "llama",
            "num_hidden_layers": counts["layers"],
            "hidden_size": h,
            "num_attention_heads": heads,
            "num_key_value_heads": counts.get("kv_heads", heads),
            "intermediate_size": ffn,
            "vocab_size": counts["vocab"],
            "max_position_embeddings": counts.get("max_positions", 4096),
            "tie_word_embeddings": tied,
        }
        if experts:
            cfg["num_local_experts"] = experts
            cfg["num_experts_per_tok"] = counts.get("top_k", 2)
    spec = spec_from_config(cfg, name=name or _numbers_name(counts), source="numbers")
    if "params" in counts and counts["params"] != spec.total_params:
        if exact:
            notes.append(
                f"params={counts['params']:,} given; the shape alone gives {spec.total_params:,} "
                "(memory uses the given count)"
            )
        ratio = counts["params"] / spec.total_params
        spec = replace(spec, total_params=counts["params"], active_params=round(spec.active_params * ratio))
    return replace(spec, exact=exact and spec.exact, notes=spec.notes + tuple(notes), use_cache=use_cache)


def _numbers_name(counts: Mapping[str, int]) -> str:
    p = counts.get("params")
    return f"custom-{_short_count(p)}" if p else f"custom-{counts['layers']}x{counts['hidden']}"


def _short_count(n: int) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def _llama_ffn(h: int) -> int:
    """LLaMA's default: 2/3 of 4h rounded up to a multiple of 256 (4096 -> 11008)."""
    return int(math.ceil(8 * h / 3 / 256) * 256)


def _guess_shape(params: int, vocab: int) -> dict[str, int]:
    """A LLaMA-like shape for a bare parameter count: layers ~ hidden/128, 12h^2 per layer."""
    lo, hi = 64.0, 65536.0
    for _ in range(60):
        h = (lo + hi) / 2
        if 12 * h**2 * (h / 128) + 2 * vocab * h > params:
            hi = h
        else:
            lo = h
    hidden = max(128, round(lo / 128) * 128)
    layer_params = 12 * hidden**2
    layers = max(1, round((params - 2 * vocab * hidden) / layer_params))
    return {"hidden": hidden, "layers": layers, "heads": max(1, hidden // 128), "vocab": vocab}


# ------------------------------------------------------------------------------------------- from a config


def _get(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _need_int(cfg: Mapping[str, Any], source: str, *keys: str, default: int | None = None) -> int:
    v = _get(cfg, *keys, default=default)
    if v is None:
        raise DswizError(
            f"{source}: the config has no {keys[0]}",
            "pass a complete HF config.json, or describe the model with numbers (layers=,hidden=,heads=,vocab=)",
        )
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or int(v) != v:
        raise DswizError(
            f"{source}: {keys[0]}={v!r} is not a whole number", "fix the value in the config.json"
        )
    return int(v)


# ------------------------------------------------------------------------------ validating a config dict
# What each key the counters read must hold (a config.json is user input: "4096" in quotes, NaN, 1e308, "0x80",
# true, -3 and containers all occur). Bounds: a count is at most MAX_COUNT (torch's dimensions are C ints), layers
# at most MAX_LAYERS, and the model at most MAX_PARAMS parameters (docs/input-bounds.md).
MAX_COUNT = 2**31 - 1
MAX_LAYERS = 100_000
MAX_PARAMS = 10**15
_COUNTS = [
    "num_hidden_layers",
    "n_layer",
    "hidden_size",
    "n_embd",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "intermediate_size",
    "n_inner",
    "vocab_size",
    "max_position_embeddings",
    "n_positions",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
]
_COUNTS_OR_ZERO = (
    "head_dim num_experts decoder_sparse_step type_vocab_size conv_kernel_size embedding_size conv_groups"
)
_SIGNED = ("max_relative_positions", "position_buckets")  # -1 means "derive it"
_FLAGS = [
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "qkv_bias",
    "relative_attention",
    "share_att_key",
    "legacy",
    "position_biased_input",
]
_FRACTIONS = ("resid_pdrop", "hidden_dropout", "hidden_dropout_prob")
_TEXTS = ("hidden_act", "activation_function", "norm_rel_ebd")


def _count_value(key: str, value: Any, where: str, minimum: int) -> int:
    """An integer (an integral float such as 4096.0 too) within [minimum, its maximum], else DswizError."""
    maximum = MAX_LAYERS if key in ("num_hidden_layers", "n_layer") else MAX_COUNT
    if isinstance(value, str):
        try:
            as_number = int(value.strip(), 0) if len(value) < 40 else None
        except ValueError:
            as_number = None
        fix = (
            f'write it as a number without quotes: "{key}": {as_number}'
            if as_number is not None
            else f'write a whole number without quotes, e.g. "{key}": 8'
        )
        raise DswizError(f"{where}: {key} is the string {quoted(value)}, not a whole number", fix)
    ok_type = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        ok_type, value = True, int(value) if abs(value) <= 2**63 else value
    if not ok_type:
        raise DswizError(
            f"{where}: {key}={quoted(value)} is not a whole number", f'write a whole number, e.g. "{key}": 8'
        )
    if not minimum <= value <= maximum:
        raise DswizError(
            f"{where}: {key}={quoted(value)} is outside {minimum}..{maximum:,}",
            f"write the model's real {key} (a count between {minimum} and {maximum:,})",
        )
    return int(value)


def _checked_value(key: str, value: Any, where: str) -> Any:
    """``value`` as the counters read it, or DswizError naming the key and what to write."""
    if key in _COUNTS or key in _COUNTS_OR_ZERO.split():
        return _count_value(key, value, where, 1 if key in _COUNTS else 0)
    if key in _SIGNED:
        return _count_value(key, value, where, -1)
    if key in _FLAGS:
        if isinstance(value, bool) or (type(value) is int and value in (0, 1)):
            return bool(value)
        raise DswizError(
            f"{where}: {key}={quoted(value)} is not true or false", f'write "{key}": true or false'
        )
    if key in _FRACTIONS:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1:
            return float(value)
        raise DswizError(f"{where}: {key}={quoted(value)} is not a probability", f'write e.g. "{key}": 0.1')
    if key in _TEXTS and not isinstance(value, str):
        raise DswizError(f"{where}: {key}={quoted(value)} is not a name", f'write e.g. "{key}": "gelu"')
    if key == "mlp_only_layers":
        if not isinstance(value, list):
            raise DswizError(f"{where}: mlp_only_layers={quoted(value)} is not a list", "write e.g. [0, 1]")
        return [_count_value("mlp_only_layers[]", v, where, 0) for v in value]
    if key == "pos_att_type" and not (
        isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    ):
        raise DswizError(
            f"{where}: pos_att_type={quoted(value)} is not a list of names", 'write ["p2c", "c2p"]'
        )
    return value


def validated_config(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The config dict with every key the counters read checked and normalised (4096.0 -> 4096); raises DswizError
    naming the first bad key. Keys left out or null keep transformers' defaults."""
    if not isinstance(cfg, Mapping):
        raise DswizError(f"{where} is not a JSON object", "pass the model's HF config.json")
    # null is dropped, so that cfg.get(key, default) gives the default and not None
    return {k: _checked_value(str(k), v, where) for k, v in cfg.items() if v is not None}


def _bounded(spec: ModelSpec, where: str) -> ModelSpec:
    if spec.head_dim < 1:  # fewer hidden units than heads (e.g. a hidden_size that defaulted or was cut down)
        raise DswizError(
            f"{where}: hidden_size {spec.hidden} gives {spec.heads} attention heads less than one unit each",
            "check hidden_size and num_attention_heads in the config.json (hidden_size = heads x head size)",
        )
    if spec.total_params > MAX_PARAMS:
        raise DswizError(
            f"{where}: the config describes {spec.total_params:.3g} parameters, above {MAX_PARAMS:.0e}",
            "check the sizes in the config.json (hidden_size, intermediate_size, vocab_size, layers)",
        )
    return spec


def spec_from_config(cfg: Mapping[str, Any], *, name: str, source: str) -> ModelSpec:
    """A ModelSpec from an HF config dict (transformers' class defaults fill missing keys, as from_config does)."""
    where = source if source != "preset" else f"preset {name}"
    spec = _spec_from_checked(validated_config(cfg, where), name=name, source=source)
    if cfg.get("use_cache") is False:  # only an explicit false: transformers defaults it to true
        spec = replace(spec, use_cache=False)
    return _bounded(spec, where)


def _spec_from_checked(cfg: Mapping[str, Any], *, name: str, source: str) -> ModelSpec:
    mtype = str(cfg.get("model_type") or "").lower().replace("_", "-")
    where = source if source != "preset" else f"preset {name}"
    if mtype == "gpt2":
        return _gpt2(cfg, name, source, where)
    if mtype == "gpt-neox":
        return _neox(cfg, name, source, where)
    if mtype == "bert":
        return _bert(cfg, name, source, where)
    if mtype == "deberta-v2":
        return _deberta_v2(cfg, name, source, where)
    if mtype == "mixtral":
        return _mixtral(cfg, name, source, where)
    if mtype == "qwen2-moe":
        return _qwen2_moe(cfg, name, source, where)
    if mtype in _LLAMA_LIKE:
        return _llama(cfg, name, source, where, mtype)
    if "hidden_size" in cfg and "num_hidden_layers" in cfg:
        spec = _llama(cfg, name, source, where, "llama")
        label = mtype or "missing"
        return replace(
            spec,
            model_type=mtype or "custom",
            exact=False,
            notes=(f"model_type {label!r} is not modelled on its own: counted as a LLaMA-style decoder",),
        )
    raise DswizError(
        f"{where}: unsupported model_type {quoted(cfg.get('model_type'))}",
        "supported: gpt2, llama, mistral, qwen2, mixtral, qwen2_moe, gpt_neox, bert, deberta-v2; "
        "or describe the model with numbers (layers=,hidden=,heads=,vocab=)",
    )


class _Extras(TypedDict, total=False):
    """The ModelSpec fields only some architectures set (the rest keep their defaults)."""

    head_dim: int
    num_experts: int
    experts_per_token: int
    moe_ffn_hidden: int
    shared_expert_ffn_hidden: int
    moe_layers: int
    moe_layer_cls_name: str
    activation: str
    dropout: float
    attention: str
    rel_pos_span: int
    encoder: bool
    parallel_residual: bool
    linear_bias_outputs: int
    parameter_tensors: int


def _spec(
    names: tuple[str, str, str, str],
    dims: tuple[int, int, int, int, int, int],
    max_positions: int | None,
    tied: bool,
    total: int,
    largest_layer: int,
    *,
    active: int | None = None,
    embedding: int | None = None,
    **extras: Unpack[_Extras],
) -> ModelSpec:
    """One architecture's counts as a ModelSpec. ``names``: (name, source, model_type, family); ``dims``: (layers,
    hidden, heads, kv_heads, ffn_hidden, vocab). ``active`` defaults to ``total`` (dense), ``embedding`` to the word
    embeddings plus an untied output head."""
    name, source, model_type, family = names
    layers, hidden, heads, kv_heads, ffn_hidden, vocab = dims
    return ModelSpec(
        name=name,
        model_type=model_type,
        family=family,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn_hidden=ffn_hidden,
        vocab=vocab,
        max_positions=max_positions,
        tied_embeddings=tied,
        total_params=total,
        active_params=total if active is None else active,
        largest_layer_params=largest_layer,
        embedding_params=vocab * hidden * (1 if tied else 2) if embedding is None else embedding,
        source=source,
        **extras,
    )


def _moe(
    model_type: str,
    head_dim: int,
    experts: tuple[int, int, int],
    moe_layers: int,
    *,
    shared_ffn: int = 0,
    linear_bias_outputs: int = 0,
    parameter_tensors: int = 0,
) -> _Extras:
    """The mixture-of-experts fields: ``experts`` is (experts, experts per token, per-expert FFN width); the block
    class ZeRO-3 must treat as a leaf comes from the model type."""
    n, per_token, expert_ffn = experts
    return {
        "head_dim": head_dim,
        "shared_expert_ffn_hidden": shared_ffn,
        "num_experts": n,
        "experts_per_token": per_token,
        "moe_ffn_hidden": expert_ffn,
        "moe_layers": moe_layers,
        "moe_layer_cls_name": MOE_LAYER_CLASSES[model_type],
        "linear_bias_outputs": linear_bias_outputs,
        "parameter_tensors": parameter_tensors,
    }


def _gpt2(cfg: Mapping[str, Any], name: str, source: str, where: str) -> ModelSpec:
    L = _need_int(cfg, where, "n_layer", "num_hidden_layers")
    h = _need_int(cfg, where, "n_embd", "hidden_size")
    a = _need_int(cfg, where, "n_head", "num_attention_heads")
    if h % a:  # transformers' GPT2Attention refuses it too
        raise DswizError(f"{where}: n_embd {h} is not divisible by {a} heads", "fix the config.json")
    V = _need_int(cfg, where, "vocab_size")
    npos = _need_int(cfg, where, "n_positions", "max_position_embeddings", default=1024)
    f = _get(cfg, "n_inner", default=None) or 4 * h
    tied = bool(cfg.get("tie_word_embeddings", True))
    layer = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (h * f + f) + (f * h + h)
    emb = V * h + npos * h
    total = emb + L * layer + 2 * h + (0 if tied else V * h)
    act = str(cfg.get("activation_function", "gelu_new"))
    family = "gpt2" if act == "gelu_new" else "gpt2-fused-gelu"
    return _spec(
        (name, source, "gpt2", family),
        (L, h, a, a, f, V),
        npos,
        tied,
        total,
        max(V * h, h * f + f, 3 * h * h + 3 * h),
        embedding=emb + (0 if tied else V * h),
        activation=act,
        dropout=float(cfg.get("resid_pdrop", 0.1)),
        # wte, wpe; per layer two LayerNorms and four Conv1D, each a weight and a bias; ln_f; an untied head
        parameter_tensors=2 + 12 * L + 2 + (0 if tied else 1),
    )


def _attention_dims(
    cfg: Mapping[str, Any], where: str, default_kv: int | None = None
) -> tuple[int, int, int, int]:
    h = _need_int(cfg, where, "hidden_size")
    a = _need_int(cfg, where, "num_attention_heads")
    if a == 0 or (not cfg.get("head_dim") and h % a):  # head_dim 0 or null: derived from hidden / heads
        raise DswizError(f"{where}: hidden_size {h} is not divisible by {a} heads", "fix the config.json")
    kv = _need_int(cfg, where, "num_key_value_heads", default=a if default_kv is None else default_kv)
    if kv == 0 or a % kv:  # each K/V head serves a whole group of query heads (transformers' repeat_kv)
        raise DswizError(
            f"{where}: num_key_value_heads {kv} does not divide num_attention_heads {a}",
            "fix the config.json: num_key_value_heads divides the heads (equal to them without grouped-query "
            "attention)",
        )
    hd = int(cfg.get("head_dim") or h // a)
    return h, a, kv, hd


def _llama(cfg: Mapping[str, Any], name: str, source: str, where: str, mtype: str) -> ModelSpec:
    L = _need_int(cfg, where, "num_hidden_layers")
    defaults_kv = {"mistral": 8, "qwen2": 32}.get(mtype)
    h, a, kv, hd = _attention_dims(cfg, where, defaults_kv)
    V = _need_int(cfg, where, "vocab_size")
    f = _need_int(cfg, where, "intermediate_size", default=_llama_ffn(h))
    q, kvd = a * hd, kv * hd
    q_bias = mtype == "qwen2" or (mtype == "llama" and bool(cfg.get("attention_bias")))
    # bias elements, one per output of a biased linear: Qwen2's q/k/v; LLaMA's attention_bias adds o_proj's
    attn_biases = q + 2 * kvd if mtype == "qwen2" else q + 2 * kvd + h if q_bias else 0
    attn = h * q + 2 * h * kvd + q * h + attn_biases
    mlp_bias = mtype == "llama" and bool(cfg.get("mlp_bias"))
    mlp_biases = (2 * f + h) if mlp_bias else 0
    mlp = 3 * h * f + mlp_biases
    tied = bool(cfg.get("tie_word_embeddings", False))
    total = V * h + L * (attn + mlp + 2 * h) + h + (0 if tied else V * h)
    return _spec(
        (name, source, mtype, "llama"),
        (L, h, a, kv, f, V),
        _get(cfg, "max_position_embeddings"),
        tied,
        total,
        max(V * h, h * f + (f if mlp_bias else 0), h * q + (q if q_bias else 0)),
        head_dim=hd,
        activation=str(cfg.get("hidden_act", "silu")),
        linear_bias_outputs=attn_biases + mlp_biases,
        # embeddings; per layer q/k/v/o and gate/up/down weights, their biases, two RMSNorms; the final norm; a head
        parameter_tensors=2 + L * (9 + (3 if mtype == "qwen2" else 4 * q_bias) + 3 * mlp_bias) + (not tied),
    )


def _mixtral(cfg: Mapping[str, Any], name: str, source: str, where: str) -> ModelSpec:
    L = _need_int(cfg, where, "num_hidden_layers")
    h, a, kv, hd = _attention_dims(cfg, where, 8)
    V = _need_int(cfg, where, "vocab_size")
    f = _need_int(cfg, where, "intermediate_size", default=14336)
    E = _need_int(cfg, where, "num_local_experts", default=8)
    k = _need_int(cfg, where, "num_experts_per_tok", default=2)
    q, kvd = a * hd, kv * hd
    attn = h * q + 2 * h * kvd + q * h
    experts = E * 3 * h * f
    tied = bool(cfg.get("tie_word_embeddings", False))
    total = V * h + L * (attn + E * h + experts + 2 * h) + h + (0 if tied else V * h)
    active = total - L * (E - min(k, E)) * 3 * h * f
    return _spec(
        (name, source, "mixtral", "moe"),
        (L, h, a, kv, f, V),
        _get(cfg, "max_position_embeddings"),
        tied,
        total,
        max(V * h, experts),  # the fused experts module owns all expert weights
        active=active,
        # per layer q/k/v/o, the router, the experts' two fused stacks, two norms
        **_moe("mixtral", hd, (E, k, f), L, parameter_tensors=1 + L * 9 + 1 + (0 if tied else 1)),
    )


def _qwen2_moe(cfg: Mapping[str, Any], name: str, source: str, where: str) -> ModelSpec:
    L = _need_int(cfg, where, "num_hidden_layers")
    h, a, kv, hd = _attention_dims(cfg, where, 16)
    V = _need_int(cfg, where, "vocab_size")
    f = _need_int(cfg, where, "intermediate_size", default=5632)
    fm = _need_int(cfg, where, "moe_intermediate_size", default=1408)
    fs = _need_int(cfg, where, "shared_expert_intermediate_size", default=5632)
    E = _need_int(cfg, where, "num_experts", default=60)
    k = _need_int(cfg, where, "num_experts_per_tok", default=4)
    step = max(1, _need_int(cfg, where, "decoder_sparse_step", default=1))
    mlp_only = set(cfg.get("mlp_only_layers") or [])  # validated: whole numbers
    q, kvd = a * hd, kv * hd
    qkv_bias = (q + 2 * kvd) if cfg.get("qkv_bias", True) else 0
    attn = h * q + 2 * h * kvd + q * h + qkv_bias
    # layers i with (i + 1) % step == 0 have experts, except mlp_only ones (counted without a loop over L)
    dense_listed = sum(1 for i in mlp_only if i < L and (i + 1) % step == 0)
    sparse_layers = L // step - dense_listed if E > 0 else 0
    sparse = E * h + E * 3 * h * fm + 3 * h * fs + h
    dense = 3 * h * f
    tied = bool(cfg.get("tie_word_embeddings", False))
    body = L * (attn + 2 * h) + sparse_layers * sparse + (L - sparse_layers) * dense
    total = V * h + body + h + (0 if tied else V * h)
    active = total - sparse_layers * (E - min(k, E)) * 3 * h * fm
    tensors = 2 + L * (6 + 3 * bool(qkv_bias)) + 7 * sparse_layers + 3 * (L - sparse_layers) + (not tied)
    return _spec(
        (name, source, "qwen2_moe", "moe"),
        (L, h, a, kv, fs, V),
        _get(cfg, "max_position_embeddings"),
        tied,
        total,
        max(V * h, E * 3 * h * fm, dense),
        active=active,
        # per layer q/k/v/o (+ q/k/v biases), two norms; a sparse MLP: router, two expert stacks, the shared
        # expert's gate/up/down and its gate; a dense one: gate/up/down
        **_moe(
            "qwen2_moe",
            hd,
            (E, k, fm),
            sparse_layers,
            shared_ffn=fs,
            linear_bias_outputs=qkv_bias,
            parameter_tensors=tensors,
        ),
    )


def _neox(cfg: Mapping[str, Any], name: str, source: str, where: str) -> ModelSpec:
    L = _need_int(cfg, where, "num_hidden_layers")
    h, a, _, _ = _attention_dims(cfg, where)
    V = _need_int(cfg, where, "vocab_size")
    f = _need_int(cfg, where, "intermediate_size", default=4 * h)
    # bias elements, one per output of a biased linear: QKV and dense (attention_bias), MLP in and out
    biases = (4 * h if cfg.get("attention_bias", True) else 0) + f + h
    layer = 4 * h + 3 * h * h + h * h + h * f + f * h + biases
    tied = bool(cfg.get("tie_word_embeddings", False))
    total = V * h + L * layer + 2 * h + (0 if tied else V * h)
    return _spec(
        (name, source, "gpt_neox", "neox"),
        (L, h, a, a, f, V),
        _get(cfg, "max_position_embeddings"),
        tied,
        total,
        max(V * h, h * f + f, 3 * h * h + 3 * h),
        activation=str(cfg.get("hidden_act", "gelu")),
        dropout=float(cfg.get("hidden_dropout", 0.0)),
        parallel_residual=bool(cfg.get("use_parallel_residual", True)),
        linear_bias_outputs=biases,
        # embed_in; per layer two LayerNorms (weight, bias), QKV and dense (+ biases), MLP in and out with biases;
        # the final LayerNorm; embed_out
        parameter_tensors=3 + L * (10 + 2 * bool(cfg.get("attention_bias", True))) + (not tied),
    )


def _bert(cfg: Mapping[str, Any], name: str, source: str, where: str) -> ModelSpec:
    """BertForMaskedLM: encoder + MLM head (decoder tied to the word embeddings)."""
    L = _need_int(cfg, where, "num_hidden_layers")
    h, a, _, _ = _attention_dims(cfg, where)
    V = _need_int(cfg, where, "vocab_size")
    f = _need_int(cfg, where, "intermediate_size", default=4 * h)
    npos = _need_int(cfg, where, "max_position_embeddings", default=512)
    T = _need_int(cfg, where, "type_vocab_size", default=2)
    tied = bool(cfg.get("tie_word_embeddings", True))
    emb = V * h + npos * h + T * h + 2 * h
    biases = (
        5 * h + f
    )  # one per output of a biased linear: query, key, value, attention output; intermediate, output
    layer = 4 * h * h + 2 * h * f + biases + 4 * h  # + two LayerNorms
    head = h * h + h + 2 * h + V + (0 if tied else V * h)
    total = emb + L * layer + head
    return _spec(
        (name, source, "bert", "bert"),
        (L, h, a, a, f, V),
        npos,
        tied,
        total,
        max(V * h, h * f + f),
        embedding=emb,
        activation=str(cfg.get("hidden_act", "gelu")),
        dropout=float(cfg.get("hidden_dropout_prob", 0.1)),
        encoder=True,
        linear_bias_outputs=biases,
        # word/position/token type embeddings (a 0-row table too) and their LayerNorm; per layer Q/K/V, attention output, intermediate
        # and output (weight and bias each) and two LayerNorms; the head's transform, LayerNorm and bias
        parameter_tensors=5 + 16 * L + 5 + (0 if tied else 1),
    )


def _deberta_v2(cfg: Mapping[str, Any], name: str, source: str, where: str) -> ModelSpec:
    """DebertaV2ForMaskedLM (legacy head by default, as transformers builds it)."""
    L = _need_int(cfg, where, "num_hidden_layers")
    h, a, _, _ = _attention_dims(cfg, where)
    V = _need_int(cfg, where, "vocab_size")
    f = _need_int(cfg, where, "intermediate_size", default=4 * h)
    npos = _need_int(cfg, where, "max_position_embeddings", default=512)
    E = int(cfg.get("embedding_size") or h)
    T = int(cfg.get("type_vocab_size", 0) or 0)
    emb = (
        V * E + (npos * E if cfg.get("position_biased_input", True) else 0) + T * E + (E * h if h != E else 0)
    )
    emb += 2 * h
    rel = bool(cfg.get("relative_attention", False))
    pos_types = cfg.get("pos_att_type") or []
    if isinstance(pos_types, str):
        pos_types = [x.strip() for x in pos_types.lower().split("|")]
    attn = 3 * (h * h + h) + (h * h + h) + 2 * h
    if rel and not cfg.get("share_att_key", False):
        attn += (h * h + h) * (("c2p" in pos_types) + ("p2c" in pos_types))
    layer = attn + (h * f + f) + (f * h + h) + 2 * h
    enc = 0
    span = 0
    if rel:
        max_rel = int(cfg.get("max_relative_positions", -1))
        max_rel = npos if max_rel < 1 else max_rel
        buckets = int(cfg.get("position_buckets", -1))
        span = buckets if buckets > 0 else max_rel
        enc += 2 * span * h
    if "layer_norm" in str(cfg.get("norm_rel_ebd", "none")).lower():
        enc += 2 * h
    k = int(cfg.get("conv_kernel_size", 0) or 0)
    if k > 0:
        groups = int(cfg.get("conv_groups", 1) or 1)
        enc += h * (h // groups) * k + h + 2 * h
    tied = bool(cfg.get("tie_word_embeddings", True))
    if cfg.get("legacy", True):
        head = h * E + E + 2 * E + V + (0 if tied else V * E)
    else:
        head = h * h + h + 2 * h + V
    total = emb + L * layer + enc + head
    # parameter tensors: the embeddings (word, position, token type, projection) and their LayerNorm; per layer
    # Q/K/V, attention output, intermediate and output, each a weight and a bias, two LayerNorms, and the position
    # projections where keys are not shared; the encoder's relative embeddings, their LayerNorm, the conv layer and
    # its LayerNorm; the head's transform, LayerNorm and bias (and an untied decoder)
    pos_proj = (
        2 * (("c2p" in pos_types) + ("p2c" in pos_types)) if rel and not cfg.get("share_att_key") else 0
    )
    embeddings = 3 + bool(cfg.get("position_biased_input", True)) + bool(T) + (h != E)
    encoder = bool(rel) + 2 * ("layer_norm" in str(cfg.get("norm_rel_ebd", "none")).lower()) + 4 * (k > 0)
    tensors = embeddings + L * (16 + pos_proj) + encoder + 5 + (not tied and bool(cfg.get("legacy", True)))
    return _spec(
        (name, source, "deberta-v2", "deberta-v2"),
        (L, h, a, a, f, V),
        npos,
        tied,
        total,
        max(V * E, h * f + f),
        embedding=emb,
        activation=str(cfg.get("hidden_act", "gelu")),
        dropout=float(cfg.get("hidden_dropout_prob", 0.1)),
        attention="eager",
        rel_pos_span=span,
        encoder=True,
        linear_bias_outputs=5 * h + f,  # query, key, value, attention output; intermediate, output
        parameter_tensors=tensors,
    )

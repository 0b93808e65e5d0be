"""ModelSpec: presets, HF config.json files and numbers; parameter counts against real transformers models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wizard.errors import DswizError
from wizard.model import ModelSpec, load_model_spec, parameter_tensor_count, preset_names, spec_from_config
from wizard.model_presets import ALIASES, PRESETS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Small configs of every supported family (transformers builds them in well under a second on CPU).
SMALL_CONFIGS: dict[str, tuple[dict[str, Any], str]] = {
    "gpt2": (
        {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 32},
        "causal",
    ),
    "gpt2-untied-inner": (
        {
            "model_type": "gpt2",
            "n_layer": 2,
            "n_embd": 64,
            "n_head": 4,
            "vocab_size": 100,
            "n_positions": 32,
            "tie_word_embeddings": False,
            "n_inner": 100,
        },
        "causal",
    ),
    "llama-gqa": (
        {
            "model_type": "llama",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 172,
            "vocab_size": 100,
        },
        "causal",
    ),
    "llama-biases-tied-headdim": (
        {
            "model_type": "llama",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "intermediate_size": 172,
            "vocab_size": 100,
            "attention_bias": True,
            "mlp_bias": True,
            "tie_word_embeddings": True,
            "head_dim": 32,
        },
        "causal",
    ),
    "mistral": (
        {
            "model_type": "mistral",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 172,
            "vocab_size": 100,
        },
        "causal",
    ),
    "qwen2": (
        {
            "model_type": "qwen2",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 172,
            "vocab_size": 100,
        },
        "causal",
    ),
    "gpt_neox": (
        {
            "model_type": "gpt_neox",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "intermediate_size": 256,
            "vocab_size": 100,
        },
        "causal",
    ),
    "mixtral": (
        {
            "model_type": "mixtral",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 96,
            "vocab_size": 100,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
        },
        "causal",
    ),
    "qwen2_moe": (
        {
            "model_type": "qwen2_moe",
            "num_hidden_layers": 3,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 96,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 48,
            "num_experts": 6,
            "num_experts_per_tok": 2,
            "vocab_size": 100,
            "mlp_only_layers": [1],
        },
        "causal",
    ),
    "bert": (
        {
            "model_type": "bert",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "intermediate_size": 256,
            "vocab_size": 100,
            "max_position_embeddings": 64,
        },
        "masked",
    ),
    "deberta-v2-v3style": (
        {
            "model_type": "deberta-v2",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "intermediate_size": 256,
            "vocab_size": 100,
            "max_position_embeddings": 64,
            "relative_attention": True,
            "position_buckets": 16,
            "pos_att_type": ["p2c", "c2p"],
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "position_biased_input": False,
            "conv_kernel_size": 3,
            "conv_act": "gelu",
            "type_vocab_size": 0,
        },
        "masked",
    ),
    "deberta-v2-unshared": (
        {
            "model_type": "deberta-v2",
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "intermediate_size": 256,
            "vocab_size": 100,
            "max_position_embeddings": 64,
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "share_att_key": False,
            "type_vocab_size": 2,
        },
        "masked",
    ),
}


def _build(cfg: dict[str, Any], kind: str) -> Any:
    cfg = dict(cfg)
    config = transformers.CONFIG_MAPPING[cfg.pop("model_type")](**cfg)
    auto = transformers.AutoModelForMaskedLM if kind == "masked" else transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    return auto.from_config(config)


@pytest.mark.parametrize("key", sorted(SMALL_CONFIGS))
def test_parameter_count_matches_transformers(key: str) -> None:
    cfg, kind = SMALL_CONFIGS[key]
    model = _build(cfg, kind)
    spec = spec_from_config(cfg, name=key, source="test")
    assert spec.total_params == model.num_parameters()


@pytest.mark.parametrize("key", sorted(SMALL_CONFIGS))
def test_parameter_tensors_match_transformers(key: str) -> None:
    """DeepSpeed's stage-0 16-bit optimizer steps tensor by tensor: the count is the model's own."""
    cfg, kind = SMALL_CONFIGS[key]
    spec = spec_from_config(cfg, name=key, source="test")
    built = len(list(_build(cfg, kind).parameters()))
    assert spec.parameter_tensors == built


@pytest.mark.parametrize("name", preset_names())
def test_a_spec_saved_without_its_tensor_count_gets_its_model_types(name: str) -> None:
    """A spec saved before dswiz counted tensors (an older plan file or run-history record, re-predicted when the
    physics changes) is counted by its model type, within 5 % of the real count, not as a LLaMA-style model."""
    spec = load_model_spec(name)
    older = {k: v for k, v in spec.to_dict().items() if k != "parameter_tensors"}
    estimated = parameter_tensor_count(ModelSpec.from_dict(older))
    assert abs(estimated - spec.parameter_tensors) <= 0.05 * spec.parameter_tensors, (
        estimated,
        spec.parameter_tensors,
    )


def test_bert_without_token_types_still_has_their_table() -> None:
    cfg = {**SMALL_CONFIGS["bert"][0], "type_vocab_size": 0}
    assert spec_from_config(cfg, name="b", source="test").parameter_tensors == len(
        list(_build(cfg, "masked").parameters())
    )


@pytest.mark.parametrize("key", sorted(SMALL_CONFIGS))
def test_largest_layer_matches_deepspeed_definition(key: str) -> None:
    # DeepSpeed's stage-3 estimator takes the most parameters any one module owns directly (model_to_params).
    from deepspeed.runtime.zero.stage3 import model_to_params

    cfg, kind = SMALL_CONFIGS[key]
    _, largest = model_to_params(_build(cfg, kind))
    assert spec_from_config(cfg, name=key, source="test").largest_layer_params == largest


def test_moe_active_parameters_count_only_the_chosen_experts() -> None:
    cfg, _ = SMALL_CONFIGS["mixtral"]
    spec = spec_from_config(cfg, name="m", source="test")
    # 2 layers x (4 - 2) unused experts x 3 matrices of 64x96.
    assert spec.total_params - spec.active_params == 2 * 2 * 3 * 64 * 96
    assert spec.moe_layer_cls_name == "MixtralSparseMoeBlock"
    assert (spec.num_experts, spec.experts_per_token) == (4, 2)
    q = spec_from_config(SMALL_CONFIGS["qwen2_moe"][0], name="q", source="test")
    assert q.moe_layer_cls_name == "Qwen2MoeSparseMoeBlock"
    assert q.moe_layers == 2  # layer 1 is in mlp_only_layers


@pytest.mark.parametrize(
    ("name", "billions"),
    [
        ("gpt2", 0.1244),
        ("gpt2-medium", 0.355),
        ("gpt2-large", 0.774),
        ("gpt2-xl", 1.558),
        ("llama-7b", 6.738),
        ("llama-13b", 13.016),
        ("llama-70b", 68.977),
        ("llama3-8b", 8.030),
        ("mistral-7b", 7.242),
        ("qwen2-7b", 7.616),
        ("mixtral-8x7b", 46.703),
        ("bert-large", 0.3352),  # BertForMaskedLM: no pooler
    ],
)
def test_presets_have_the_published_sizes(name: str, billions: float) -> None:
    assert load_model_spec(name).total_params / 1e9 == pytest.approx(billions, rel=0.002)


def test_mixtral_active_parameters_are_the_published_12_9b() -> None:
    assert load_model_spec("mixtral-8x7b").active_params / 1e9 == pytest.approx(12.88, rel=0.005)


def test_tiny_preset_is_about_a_million_parameters() -> None:
    assert 0.5e6 < load_model_spec("tiny").total_params < 1.5e6


def test_every_preset_and_alias_loads() -> None:
    for name in [*PRESETS, *ALIASES]:
        spec = load_model_spec(name)
        assert spec.total_params > 0 and spec.layers > 0
    assert load_model_spec("LLaMA2-7B").name == "llama-7b"


def test_config_json_file_and_directory(tmp_path: Path) -> None:
    cfg = {**SMALL_CONFIGS["llama-gqa"][0], "_name_or_path": "my-llama"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    by_file = load_model_spec(str(tmp_path / "config.json"))
    by_dir = load_model_spec(str(tmp_path))
    assert by_file == by_dir
    assert by_file.name == "my-llama"
    assert by_file.total_params == _build(SMALL_CONFIGS["llama-gqa"][0], "causal").num_parameters()


def test_unknown_model_type_with_standard_keys_is_counted_llama_style_and_says_so(tmp_path: Path) -> None:
    cfg = {**SMALL_CONFIGS["llama-gqa"][0], "model_type": "frobnet"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = load_model_spec(str(path))
    assert not spec.exact
    assert "frobnet" in spec.notes[0]


def test_numbers_with_a_full_shape_equal_the_same_llama_config() -> None:
    spec = load_model_spec("layers=32,hidden=4096,heads=32,vocab=32000")
    assert spec.total_params == load_model_spec("llama-7b").total_params  # ffn defaults to LLaMA's 11008
    assert spec.exact


def test_numbers_with_only_params_guess_a_shape_and_keep_the_count() -> None:
    spec = load_model_spec("params=7e9")
    assert spec.total_params == 7_000_000_000
    assert not spec.exact and "guessed" in spec.notes[0]
    assert 3000 <= spec.hidden <= 6000 and 20 <= spec.layers <= 50
    assert load_model_spec("params=70B").total_params == 70_000_000_000


def test_numbers_moe() -> None:
    spec = load_model_spec("layers=4,hidden=256,heads=4,vocab=1000,experts=8,top_k=2,ffn=512")
    assert spec.is_moe and spec.num_experts == 8 and spec.active_params < spec.total_params


@pytest.mark.parametrize(
    ("text", "problem", "fix"),
    [
        ("lama-7b", "unknown model 'lama-7b'", "did you mean llama-7b"),
        ("", "no model given", "preset"),
        ("./no/such/config.json", "no such file", "hub id"),
        ("params=abc", "is not a number", "params=7e9"),
        ("params=-7e9", "params=-7e9 is negative", "params=7e9"),
        ("layerz=3,hidden=64,heads=4,vocab=10", "unknown key 'layerz'", "did you mean layers"),
        ("layers=3", "neither params= nor a full shape", "layers="),
        ("layers=2,hidden=65,heads=4,vocab=10", "not divisible", "heads"),
        ("params=0", "out of range", "positive"),
        (
            "params=1e6",
            "below the smallest shape a parameter count is guessed into (8.4M",
            "layers=2,hidden=64",
        ),
        ("params=1e20", "from 1 to 1e15", "positive"),
        ("params=7e9,seq=0", "seq=0 is out of range", "positive"),  # the key as written, not max_positions
        ("params=7e9,params=1e9", "params is given twice", "once"),
        ("layers=2,hidden=64,heads=4,kv_heads=3,vocab=10", "kv_heads=3 does not divide heads=4", "divides"),
        ("params=7e9,experts=8,top_k=9", "more experts than experts=8", "at most"),
        ("params=7e9,tied=maybe", "not a yes/no value", "tied=1"),
    ],
)
def test_bad_model_text_names_the_problem_and_the_fix(text: str, problem: str, fix: str) -> None:
    with pytest.raises(DswizError) as e:
        load_model_spec(text)
    assert problem in e.value.problem
    assert e.value.fix is not None and fix in e.value.fix


def test_bad_config_files(tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    with pytest.raises(DswizError, match="not valid JSON"):
        load_model_spec(str(bad_json))
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(DswizError, match="no num_hidden_layers"):
        load_model_spec(str(missing))
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({**SMALL_CONFIGS["llama-gqa"][0], "num_hidden_layers": "two"}))
    with pytest.raises(DswizError, match="not a whole number"):
        load_model_spec(str(wrong))
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    with pytest.raises(DswizError, match="unsupported model_type 't5'"):
        load_model_spec(str(unknown))
    groups = tmp_path / "groups.json"  # transformers' repeat_kv needs whole groups: 32 heads cannot share 5
    groups.write_text(json.dumps({**SMALL_CONFIGS["llama-gqa"][0], "num_attention_heads": 32,
                                  "num_key_value_heads": 5, "hidden_size": 4096}))  # fmt: skip
    with pytest.raises(DswizError, match="num_key_value_heads 5 does not divide num_attention_heads 32"):
        load_model_spec(str(groups))
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(DswizError, match=r"without a config\.json"):
        load_model_spec(str(empty_dir))


def test_preset_names_are_sorted_and_listed_in_the_fix() -> None:
    names = preset_names()
    assert names == sorted(names)
    with pytest.raises(DswizError) as e:
        load_model_spec("nonsense-model")
    assert all(n in (e.value.fix or "") for n in names)


def test_use_cache_is_read_from_the_config_and_the_numbers(tmp_path: Path) -> None:
    """transformers defaults use_cache to true; a config.json that says false, or --model ...,use_cache=0, gives a
    spec without it (its training activations and its inference pass differ: wizard.planner.memory), and
    anything else in the numbers is an error that names the fix."""
    cfg = SMALL_CONFIGS["llama-gqa"][0]
    for value, expected in ((None, True), (True, True), (False, False)):
        given = dict(cfg) if value is None else {**cfg, "use_cache": value}
        (tmp_path / "config.json").write_text(json.dumps(given))
        assert load_model_spec(str(tmp_path)).use_cache is expected
    assert load_model_spec("layers=4,hidden=256,heads=4,vocab=1000").use_cache
    assert not load_model_spec("layers=4,hidden=256,heads=4,vocab=1000,use_cache=0").use_cache
    with pytest.raises(DswizError) as e:
        load_model_spec("layers=4,hidden=256,heads=4,vocab=1000,use_cache=maybe")
    assert "use_cache=1 or use_cache=0" in str(e.value.fix)
    # the spec round-trips through the history's JSON; an older record without the field reads as the default
    spec = load_model_spec("gpt2")
    off = spec_from_config({**cfg, "use_cache": False}, name="g", source="t")
    assert type(spec).from_dict(off.to_dict()).use_cache is False
    old = {k: v for k, v in spec.to_dict().items() if k != "use_cache"}
    assert type(spec).from_dict(old).use_cache is True


def _linear_bias_outputs_per_layer(model: Any, layers: int) -> float:
    """What ZeRO-3's linear adds a bias to, per token of one layer: the outputs of every torch.nn.Linear with a bias
    inside the repeated layers (GPT-2's Conv1D is not a Linear: it calls addmm itself). DeBERTa's pos_key_proj /
    pos_query_proj project the relative-position table once a forward, not the tokens."""
    import torch

    total = 0
    for name, module in model.named_modules():
        parts = name.split(".")
        in_layer = any(p in ("h", "layers", "layer") and i + 1 < len(parts) and parts[i + 1].isdigit()
                       for i, p in enumerate(parts))  # fmt: skip
        per_token = not parts[-1].startswith("pos_")
        if in_layer and per_token and isinstance(module, torch.nn.Linear) and module.bias is not None:
            total += module.out_features
    return total / layers


@pytest.mark.parametrize("key", sorted(SMALL_CONFIGS))
def test_linear_bias_outputs_match_the_transformers_layers(key: str) -> None:
    cfg, kind = SMALL_CONFIGS[key]
    model = _build(cfg, kind)
    spec = spec_from_config(cfg, name=key, source="test")
    assert spec.linear_bias_outputs == _linear_bias_outputs_per_layer(model, spec.layers)

"""A model's config.json, fuzzed: every preset (the same dicts a user's config.json holds) with values replaced by
strings, NaN, 1e308, "0x80", bools, negatives, containers; and config.json texts with huge numbers, NaN literals
and deep nesting. Each gives a ModelSpec with sane counts or a DswizError naming the key and the fix."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from wizard.model import ModelSpec, load_model_spec, spec_from_config
from wizard.model_presets import PRESETS

from . import fuzz_support as fz

MODEL_KEYS = [
    "model_type",
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "n_layer",
    "n_embd",
    "n_head",
    "n_inner",
    "n_positions",
    "resid_pdrop",
    "hidden_dropout",
    "hidden_dropout_prob",
    "num_local_experts",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
    "qkv_bias",
    "attention_bias",
    "mlp_bias",
    "embedding_size",
    "type_vocab_size",
    "relative_attention",
    "pos_att_type",
    "share_att_key",
    "max_relative_positions",
    "position_buckets",
    "norm_rel_ebd",
    "conv_kernel_size",
    "conv_groups",
    "legacy",
    "position_biased_input",
    "activation_function",
    "hidden_act",
    "text_config",
    "_name_or_path",
]
MODEL_TYPES = ["gpt2", "llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "gpt_neox", "bert", "deberta-v2"]
bases = st.sampled_from(sorted(PRESETS)).map(lambda name: PRESETS[name])
model_values = fz.json_like | st.sampled_from(MODEL_TYPES) | st.integers(0, 70000)


def check_spec(spec: ModelSpec | None) -> None:
    if spec is None:
        return
    counts = (
        spec.layers,
        spec.hidden,
        spec.heads,
        spec.kv_heads,
        spec.vocab,
        spec.head_dim,
        spec.total_params,
    )
    fz.holds(all(type(n) is int and n >= 1 for n in counts), f"counts are positive ints: {counts}")
    fz.holds(spec.total_params <= 10**15, f"total_params {spec.total_params} is bounded")
    fz.holds(type(spec.ffn_hidden) is int and spec.ffn_hidden >= 0, f"ffn {spec.ffn_hidden!r}")
    fz.holds(
        spec.max_positions is None or (type(spec.max_positions) is int and spec.max_positions >= 1),
        f"max_positions {spec.max_positions!r}",
    )
    fz.holds(isinstance(spec.dropout, float) and 0 <= spec.dropout <= 1, f"dropout {spec.dropout!r}")
    fz.holds(0 <= spec.active_params <= spec.total_params, "active params within total")
    fz.holds(isinstance(spec.activation, str) and isinstance(spec.model_type, str), "names are strings")
    fz.total(ModelSpec.from_dict, json.loads(json.dumps(spec.to_dict())))


@fz.fuzz_settings(1000)
@given(cfgs=fz.batch(bases.flatmap(lambda b: fz.mutated(b, MODEL_KEYS, model_values))))
def test_config_dict_gives_a_spec_or_a_finding(cfgs: list[Any]) -> None:
    for cfg in fz.cases(cfgs):
        check_spec(
            fz.total(
                spec_from_config,
                cfg if isinstance(cfg, dict) else {"model_type": cfg},
                name="x",
                source="config.json",
            )
        )


RAW_NUMBERS = [
    fz.HUGE_DIGITS,
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-0",
    "1.5",
    "1e308",
    '"4096"',
    "true",
]


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    """A preset as config.json text, then one raw change: a number spelt as JSON can spell it, a deep nest."""
    text = json.dumps(draw(bases))
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return fz.with_a_number_replaced(draw, text, RAW_NUMBERS)
    if choice == 1:
        depth = draw(st.sampled_from([10, 999, 2000, 100_000]))
        return text[:-1] + ', "nested": ' + "[" * depth + "]" * depth + "}"
    if choice == 2:
        return '{"text_config": ' + text + ', "model_type": "llava"}'
    return text[: draw(st.integers(0, len(text)))]


@fz.fuzz_settings(250)
@given(texts=fz.batch(config_texts()))
def test_config_json_text_gives_a_spec_or_a_finding(texts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.json"
        for text in fz.cases(texts):
            path.write_text(text, encoding="utf-8")
            check_spec(fz.total(load_model_spec, str(path)))


def test_the_issue_examples_are_findings_naming_the_key() -> None:
    base = PRESETS["llama-7b"]
    for key, value in (
        ("max_position_embeddings", "4096"),
        ("num_attention_heads", math.nan),
        ("max_position_embeddings", 1e308),
        ("head_dim", "0x80"),
        ("hidden_size", True),
        ("num_hidden_layers", -3),
    ):
        try:
            spec_from_config({**base, key: value}, name="x", source="config.json")
        except Exception as e:
            assert type(e).__name__ == "DswizError", repr(e)
            assert key in e.problem and e.fix, (e.problem, e.fix)
        else:
            raise AssertionError(f"{key}={value!r} was accepted")

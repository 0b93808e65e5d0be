"""The activation recipes (wizard.planner.calibration.ACTIVATION_RECIPES) against what the installed transformers really keeps
for backward: run one forward of a real HF model on CPU in bf16 and add up the tensors autograd saves (parameters
excluded). One layer = the 2-layer model minus the 1-layer model, so embeddings and the loss head cancel out.

Dropout is off here because CPU kernels store dropout masks differently from CUDA (the recipe adds CUDA's 1 byte).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from wizard.model import spec_from_config
from wizard.planner.memory import recipe_activation_bytes_per_token

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import _common  # noqa: E402  (the bench's count, which bench/attention_memory.py runs on the GPU)

SEQ = 128


def _saved_bytes(cfg: dict[str, Any], masked: bool, seq: int) -> int:
    cfg = dict(cfg)
    config = transformers.CONFIG_MAPPING[cfg.pop("model_type")](**cfg)
    auto = transformers.AutoModelForMaskedLM if masked else transformers.AutoModelForCausalLM
    attn = "eager" if config.model_type == "deberta-v2" else "sdpa"
    torch.manual_seed(0)
    model = auto.from_config(config, attn_implementation=attn).to(torch.bfloat16).train()
    ids = torch.randint(0, config.vocab_size, (1, seq))
    return int(_common.saved_tensor_bytes(model.parameters(), lambda: model(input_ids=ids, labels=ids)))


def _per_layer_measured(cfg: dict[str, Any], masked: bool, seq: int) -> float:
    one = _saved_bytes(
        {**cfg, "num_hidden_layers": 1} if "n_layer" not in cfg else {**cfg, "n_layer": 1}, masked, seq
    )
    two = _saved_bytes(
        {**cfg, "num_hidden_layers": 2} if "n_layer" not in cfg else {**cfg, "n_layer": 2}, masked, seq
    )
    return (two - one) / seq


CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "gpt2": (
        {
            "model_type": "gpt2",
            "n_layer": 1,
            "n_embd": 256,
            "n_head": 4,
            "vocab_size": 512,
            "n_positions": SEQ,
            "attn_pdrop": 0.0,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
        },
        False,
    ),
    "llama-mha": (
        {
            "model_type": "llama",
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "intermediate_size": 688,
            "vocab_size": 512,
        },
        False,
    ),
    "mistral-gqa": (
        {
            "model_type": "mistral",
            "hidden_size": 256,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "intermediate_size": 512,
            "vocab_size": 512,
        },
        False,
    ),
    "neox": (
        {
            "model_type": "gpt_neox",
            "hidden_size": 256,
            "num_attention_heads": 4,
            "intermediate_size": 1024,
            "vocab_size": 512,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
        },
        False,
    ),
    "bert": (
        {
            "model_type": "bert",
            "hidden_size": 256,
            "num_attention_heads": 4,
            "intermediate_size": 1024,
            "vocab_size": 512,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
        },
        True,
    ),
    "mixtral": (
        {
            "model_type": "mixtral",
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "intermediate_size": 512,
            "vocab_size": 512,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
        },
        False,
    ),
    "deberta-v2": (
        {
            "model_type": "deberta-v2",
            "hidden_size": 256,
            "num_attention_heads": 4,
            "intermediate_size": 1024,
            "vocab_size": 512,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
            "relative_attention": True,
            "position_buckets": 64,
            "pos_att_type": ["p2c", "c2p"],
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "position_biased_input": False,
        },
        True,
    ),
}


@pytest.mark.parametrize("key", sorted(CASES))
def test_layer_activation_recipe_matches_saved_tensors(key: str) -> None:
    cfg, masked = CASES[key]
    measured = _per_layer_measured(cfg, masked, SEQ)
    spec = spec_from_config({**cfg, "num_hidden_layers": 2, "n_layer": 2}, name=key, source="test")
    predicted = recipe_activation_bytes_per_token(spec, SEQ)
    # DeBERTa's recipe is a least-squares fit (max error 7 % over its grid); the others are exact counts.
    tolerance = 0.08 if key == "deberta-v2" else 0.03
    ratio = predicted / measured
    assert abs(ratio - 1) <= tolerance, (
        f"{key}: {predicted / spec.hidden:.1f}h vs {measured / spec.hidden:.1f}h"
    )


@pytest.mark.parametrize("seq", [64, 256])
def test_eager_attention_follows_the_sequence_length(seq: int) -> None:
    # DeBERTa materialises its attention scores, so per-token bytes depend on the sequence length.
    cfg, masked = CASES["deberta-v2"]
    spec = spec_from_config({**cfg, "num_hidden_layers": 2}, name="d", source="test")
    measured = _per_layer_measured(cfg, masked, seq)
    assert recipe_activation_bytes_per_token(spec, seq) == pytest.approx(measured, rel=0.08)

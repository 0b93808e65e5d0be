"""Named models users can plan for without a config.json: each is the relevant part of the real HF config.json.

Keeping them in config.json form means a preset and a user's file go through the same code
(``wizard.model.spec_from_config``), so there is one parameter counter to test against transformers.
"""

from __future__ import annotations

from typing import Any

_GPT2 = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024}
_LLAMA2 = {"model_type": "llama", "vocab_size": 32000, "max_position_embeddings": 4096}
_LLAMA3 = {"model_type": "llama", "vocab_size": 128256, "max_position_embeddings": 8192}
# Mistral 7B's shape; Mixtral 8x7B is the same decoder with 8 experts per FFN (arXiv:2401.04088, table 1).
_MISTRAL_7B = {
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
}

PRESETS: dict[str, dict[str, Any]] = {
    # ~1M parameters: small enough to train on 2 CPU ranks in the demo.
    "tiny": {
        "model_type": "gpt2",
        "n_layer": 2,
        "n_embd": 128,
        "n_head": 4,
        "vocab_size": 4096,
        "n_positions": 256,
    },
    "gpt2": {**_GPT2, "n_layer": 12, "n_embd": 768, "n_head": 12},
    "gpt2-medium": {**_GPT2, "n_layer": 24, "n_embd": 1024, "n_head": 16},
    "gpt2-large": {**_GPT2, "n_layer": 36, "n_embd": 1280, "n_head": 20},
    "gpt2-xl": {**_GPT2, "n_layer": 48, "n_embd": 1600, "n_head": 25},
    "llama-7b": {
        **_LLAMA2,
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "intermediate_size": 11008,
    },
    "llama-13b": {
        **_LLAMA2,
        "num_hidden_layers": 40,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "num_key_value_heads": 40,
        "intermediate_size": 13824,
    },
    "llama-70b": {
        **_LLAMA2,
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
    },
    "llama3-8b": {
        **_LLAMA3,
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
    },
    "llama3-70b": {
        **_LLAMA3,
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
    },
    "mistral-7b": {"model_type": "mistral", **_MISTRAL_7B},
    "qwen2-7b": {
        "model_type": "qwen2",
        "num_hidden_layers": 28,
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
    },
    "mixtral-8x7b": {
        "model_type": "mixtral",
        **_MISTRAL_7B,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    },
    "qwen1.5-moe-a2.7b": {
        "model_type": "qwen2_moe",
        "num_hidden_layers": 24,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "vocab_size": 151936,
        "max_position_embeddings": 8192,
    },
    "gpt-neox-20b": {
        "model_type": "gpt_neox",
        "num_hidden_layers": 44,
        "hidden_size": 6144,
        "num_attention_heads": 64,
        "intermediate_size": 24576,
        "vocab_size": 50432,
        "max_position_embeddings": 2048,
    },
    "bert-large": {
        "model_type": "bert",
        "num_hidden_layers": 24,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
    },
    "deberta-v2-xlarge": {
        "model_type": "deberta-v2",
        "num_hidden_layers": 24,
        "hidden_size": 1536,
        "num_attention_heads": 24,
        "intermediate_size": 6144,
        "vocab_size": 128100,
        "max_position_embeddings": 512,
        "relative_attention": True,
        "position_buckets": 256,
        "pos_att_type": ["p2c", "c2p"],
        "norm_rel_ebd": "layer_norm",
        "share_att_key": True,
        "position_biased_input": False,
        "conv_kernel_size": 3,
        "conv_act": "gelu",
        "type_vocab_size": 0,
    },
}

ALIASES: dict[str, str] = {
    "llama2-7b": "llama-7b",
    "llama-2-7b": "llama-7b",
    "llama2-13b": "llama-13b",
    "llama-2-13b": "llama-13b",
    "llama2-70b": "llama-70b",
    "llama-2-70b": "llama-70b",
    "llama-3-8b": "llama3-8b",
    "llama3.1-8b": "llama3-8b",
    "llama-3-70b": "llama3-70b",
    "llama3.1-70b": "llama3-70b",
    "mistral": "mistral-7b",
    "mixtral": "mixtral-8x7b",
    "gpt2-small": "gpt2",
    "bert": "bert-large",
}

"""The inference recipes (wizard.planner.calibration.INFERENCE_RECIPES) against what the installed transformers really holds
during a forward pass without autograd: run one forward of a real HF model on CPU in bf16 under ``torch.no_grad``
and track every storage that is allocated and freed (a TorchDispatchMode; parameters and buffers excluded). The
peak of the live bytes is the activation peak of an inference pass.

With a small vocabulary the layers set the peak (one layer at a time: it does not grow with depth); with a large one
and labels (evaluation) the head's logits and their fp32 scores set it.
"""

from __future__ import annotations

import weakref
from typing import Any

import pytest

from wizard.model import spec_from_config
from wizard.planner.memory import inference_head_bytes_per_token, inference_layer_bytes_per_token

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
dispatch = pytest.importorskip("torch.utils._python_dispatch")
pytree = pytest.importorskip("torch.utils._pytree")

SEQ = 128


class _PeakLiveBytes(dispatch.TorchDispatchMode):  # type: ignore[misc]
    """The most bytes of non-excluded storages alive at once while the mode is active."""

    def __init__(self, exclude: set[int]) -> None:
        super().__init__()
        self.exclude, self.live, self.now, self.peak = exclude, set(), 0, 0

    def _track(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor):
            return
        storage = t.untyped_storage()
        ptr, size = storage.data_ptr(), storage.nbytes()
        if ptr in self.exclude or ptr in self.live or size == 0:
            return
        self.live.add(ptr)
        self.now += size
        self.peak = max(self.peak, self.now)

        def freed(ptr: int = ptr, size: int = size) -> None:
            if ptr in self.live:
                self.live.discard(ptr)
                self.now -= size

        weakref.finalize(storage, freed)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        pytree.tree_map(self._track, out)
        return out


def _peak_per_token(cfg: dict[str, Any], *, seq: int = SEQ, labels: bool = False) -> float:
    cfg = dict(cfg)
    config = transformers.CONFIG_MAPPING[cfg.pop("model_type")](**cfg)
    masked = config.model_type in ("bert", "deberta-v2")
    auto = transformers.AutoModelForMaskedLM if masked else transformers.AutoModelForCausalLM
    attn = "eager" if config.model_type == "deberta-v2" else "sdpa"
    torch.manual_seed(0)
    model = auto.from_config(config, attn_implementation=attn).to(torch.bfloat16).eval()
    owned = [*model.parameters(), *model.buffers()]
    mode = _PeakLiveBytes({t.untyped_storage().data_ptr() for t in owned})
    ids = torch.randint(0, config.vocab_size, (1, seq))
    extra = {} if masked else {"use_cache": False}
    with torch.no_grad(), mode:
        model(input_ids=ids, labels=ids if labels else None, **extra)
    return mode.peak / seq


def _spec(cfg: dict[str, Any]) -> Any:
    return spec_from_config(cfg, name="t", source="numbers")


LAYERS: dict[str, tuple[dict[str, Any], float]] = {
    "llama": (
        {
            "model_type": "llama",
            "num_hidden_layers": 3,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "intermediate_size": 1376,
            "vocab_size": 512,
        },
        0.03,
    ),
    "gpt2": (
        {
            "model_type": "gpt2",
            "n_layer": 3,
            "n_embd": 256,
            "n_head": 4,
            "vocab_size": 512,
            "n_positions": SEQ,
            "attn_pdrop": 0.0,
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
        },
        0.03,
    ),
    "neox": (
        {
            "model_type": "gpt_neox",
            "num_hidden_layers": 3,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "intermediate_size": 2048,
            "vocab_size": 512,
        },
        0.03,
    ),
    "mixtral": (
        {
            "model_type": "mixtral",
            "num_hidden_layers": 3,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "intermediate_size": 688,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 512,
        },
        0.05,
    ),
    "qwen2_moe": (
        {
            "model_type": "qwen2_moe",
            "num_hidden_layers": 3,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "intermediate_size": 688,
            "moe_intermediate_size": 256,
            "shared_expert_intermediate_size": 344,
            "num_experts": 8,
            "num_experts_per_tok": 4,
            "vocab_size": 512,
        },
        0.06,
    ),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_recipe_matches_a_real_forward(name: str) -> None:
    cfg, tolerance = LAYERS[name]
    measured = _peak_per_token(cfg)
    predicted = inference_layer_bytes_per_token(_spec(cfg), SEQ)
    assert predicted == pytest.approx(measured, rel=tolerance), (name, measured, predicted)


def test_the_layer_peak_does_not_grow_with_depth() -> None:
    cfg = LAYERS["llama"][0]
    assert _peak_per_token({**cfg, "num_hidden_layers": 6}) == _peak_per_token(cfg)


def test_deberta_scores_grow_with_the_sequence() -> None:
    cfg = {
        "model_type": "deberta-v2",
        "num_hidden_layers": 3,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 1024,
        "vocab_size": 512,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "relative_attention": True,
        "pos_att_type": ["p2c", "c2p"],
        "position_buckets": 64,
        "max_relative_positions": 128,
    }
    for seq in (128, 256):
        measured = _peak_per_token(cfg, seq=seq)
        assert inference_layer_bytes_per_token(_spec(cfg), seq) == pytest.approx(measured, rel=0.05)


def test_head_recipe_matches_an_evaluation_forward() -> None:
    """A large vocabulary with labels: the 16-bit logits, their fp32 upcast and the log-softmax set the peak."""
    cfg = {**LAYERS["llama"][0], "vocab_size": 8192}
    measured = _peak_per_token(cfg, labels=True)
    assert inference_head_bytes_per_token(_spec(cfg)) == pytest.approx(measured, rel=0.03)

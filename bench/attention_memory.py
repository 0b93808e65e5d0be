"""What one transformer layer keeps on the GPU per token through a training forward, by attention head dim: the
bytes autograd saves for backward and the bytes that stay allocated across the layer (the saved tensors plus the KV
cache entry transformers builds when ``use_cache`` is on), against the planner's per-layer activation bytes
(wizard.planner.memory.activation_bytes_per_sample without checkpointing, per layer and token).

Why: on CUDA, SDPA's flash kernel wants a head dim that is a multiple of 8. PyTorch pads query, key and value to the
next multiple before the kernel and slices the output back, so the kernel saves padded copies for backward, and the
sliced output needs a copy of its own before the output projection. The activation recipes are counted on CPU,
where SDPA does not pad. A LLaMA-style 3B with head dim 100 (OpenLLaMA-3B's shape) allocated 7.3 GiB more than the
planner said at 16,384 tokens on one H200 (bench/plan_accuracy.py, ZeRO-3 at micro-batch 16, seq 1024).

    python3 bench/attention_memory.py                 # GPU: LLaMA-style layers, head dims 64 ... 128
    python3 bench/attention_memory.py --smoke         # CPU, tiny shapes: checks the script
    python3 bench/attention_memory.py --out DIR       # JSON + markdown (default bench/results/)
    python3 bench/attention_memory.py --analyze bench/results/attention_memory-2026-12-04-b16.json
                                                      # the markdown again, with the planner as it is now

The raw file keeps the measurements only; the planner's figures are computed when the markdown is written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import itertools
import json
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

from _common import md_heading, md_table, result_stem, saved_tensor_bytes, write_result  # noqa: E402

from wizard.model import spec_from_config  # noqa: E402
from wizard.planner.memory import activation_bytes_per_sample  # noqa: E402

LAYERS = 4  # the retained bytes are the median of the three steps between four layers' ends
# (head dim, heads, key/value heads): aligned controls (64, 128), OpenLLaMA-3B's 100 with and without GQA, and head
# dims 4 and 2 short of a multiple of 8.
SHAPES = ((64, 32, 32), (128, 16, 16), (100, 32, 32), (100, 32, 4), (92, 16, 16), (90, 16, 16), (80, 32, 32))


def llama_config(head_dim: int, heads: int, kv_heads: int, layers: int, use_cache: bool) -> dict[str, Any]:
    hidden = head_dim * heads
    return {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "intermediate_size": int(2.7 * hidden) // 8 * 8,
        "num_hidden_layers": layers,
        "vocab_size": 1024,
        "max_position_embeddings": 4096,
        "use_cache": use_cache,
    }


def _one_forward(
    cfg: dict[str, Any], batch: int, seq: int, device: Any, dtype: Any
) -> tuple[int, float | None]:
    """One forward with the loss, as the HF Trainer runs it: (bytes autograd saved, median bytes that stayed
    allocated across one decoder layer's forward -- what the layer leaves for backward, its KV cache entry and its
    output, read between consecutive layers, so that no transient and no loss head enters; None off CUDA)."""
    import torch
    import transformers

    cfg = dict(cfg)
    config = transformers.CONFIG_MAPPING[cfg.pop("model_type")](**cfg)
    torch.manual_seed(0)
    with device:
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="sdpa", dtype=dtype
        ).train()
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    cuda = device.type == "cuda"
    ends: list[int] = []
    hooks = (
        [
            layer.register_forward_hook(lambda *_: ends.append(torch.cuda.memory_allocated()))
            for layer in model.model.layers
        ]
        if cuda
        else []
    )
    saved = saved_tensor_bytes(model.parameters(), lambda: model(input_ids=ids, labels=ids).loss)
    for h in hooks:
        h.remove()
    steps = sorted(b - a for a, b in itertools.pairwise(ends))
    return saved, float(steps[len(steps) // 2]) if steps else None


def _measure(cfg: dict[str, Any], batch: int, seq: int, device: Any, dtype: Any) -> tuple[int, float | None]:
    """``_one_forward``, then its model's memory given back before the next one is built."""
    import torch

    result = _one_forward(cfg, batch, seq, device, dtype)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16
    batch, seq = (args.batch, args.seq) if cuda else (1, 32)
    shapes = SHAPES if cuda else ((8, 4, 4), (10, 4, 2))
    rows = []
    for head_dim, heads, kv_heads in shapes:
        for use_cache in (True, False):
            one = _measure(llama_config(head_dim, heads, kv_heads, 1, use_cache), batch, seq, device, dtype)
            many = _measure(
                llama_config(head_dim, heads, kv_heads, LAYERS, use_cache), batch, seq, device, dtype
            )
            tokens = batch * seq
            h = head_dim * heads
            row = {
                "head_dim": head_dim,
                "heads": heads,
                "kv_heads": kv_heads,
                "hidden": h,
                "use_cache": use_cache,
                "saved_per_token": (many[0] - one[0]) / (LAYERS - 1) / tokens,
                # what a layer leaves allocated: saved tensors, the KV cache's entry, and its output (h 16-bit
                # values, the next layer's input, which the planner counts among the saved tensors)
                "retained_per_token": None if many[1] is None else many[1] / tokens,
            }
            rows.append(row)
            retained = row["retained_per_token"]
            print(
                f"head dim {head_dim:3d} heads {heads}/{kv_heads} cache {int(use_cache)}: saved "
                f"{row['saved_per_token'] / h:5.2f}*h, retained {'-' if retained is None else f'{retained / h:5.2f}*h'}, "
                f"planner {planner_per_token(row, seq) / h:5.2f}*h"
            )
    return {
        "date": dt.date.today().isoformat(),
        "host": platform.node(),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "smoke": not cuda,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "batch": batch,
        "seq": seq,
        "rows": rows,
    }


def planner_per_token(row: dict[str, Any], seq: int) -> float:
    """The planner's bytes per token for one layer of ``row``'s shape in training without checkpointing."""
    cfg = llama_config(row["head_dim"], row["heads"], row["kv_heads"], LAYERS, row["use_cache"])
    spec = spec_from_config(cfg, name="layer", source="bench")
    return activation_bytes_per_sample(spec, seq, checkpointing=False)[0] / LAYERS / seq


def markdown(doc: dict[str, Any]) -> str:
    lines = md_heading(
        "A training layer's bytes per token on the GPU, by attention head dim",
        f"{doc['device']} ({doc['date']}, torch {doc['torch']}, transformers {doc['transformers']}): LLaMA-style "
        f"layers (SDPA, bf16), batch {doc['batch']} x seq {doc['seq']}. Saved: the tensors autograd keeps for "
        f"backward, one layer = (the {LAYERS}-layer model - the 1-layer model) / {LAYERS - 1}. Retained: what stays "
        "allocated across one layer's forward (saved tensors, the KV cache's entry with use_cache on, and the "
        "layer's output), the median over consecutive layers. Multiples of the hidden size h.",
    )

    def h(r: dict[str, Any], v: float | None) -> str:
        return "-" if v is None else f"{v / r['hidden']:.2f}"

    def ratio(r: dict[str, Any]) -> str:
        return (
            "-"
            if not r["retained_per_token"]
            else f"{planner_per_token(r, doc['seq']) / r['retained_per_token']:.3f}"
        )

    lines += md_table(
        ("head dim", "heads / kv heads", "use_cache", "saved", "retained", "planner", "planner / retained"),
        (
            (
                r["head_dim"],
                f"{r['heads']} / {r['kv_heads']}",
                "on" if r["use_cache"] else "off",
                h(r, r["saved_per_token"]),
                h(r, r["retained_per_token"]),
                h(r, planner_per_token(r, doc["seq"])),
                ratio(r),
            )
            for r in doc["rows"]
        ),
    )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes: check that the script works")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--label", default="", help="appended to the result files' names")
    ap.add_argument("--batch", type=int, default=4, help="micro-batch (default 4)")
    ap.add_argument("--seq", type=int, default=1024, help="sequence length (default 1024)")
    ap.add_argument(
        "--analyze", type=Path, nargs="+", help="raw JSON files: write their markdown again, no GPU"
    )
    args = ap.parse_args()
    if args.analyze:
        for path in args.analyze:
            path.with_suffix(".md").write_text(markdown(json.loads(path.read_text())))
            print(f"wrote {path.with_suffix('.md')}")
        return 0
    doc = run(args)
    write_result(args.out, result_stem("attention_memory", doc, args.label), doc, markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

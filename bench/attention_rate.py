"""How fast fused attention runs against the layer matmuls, by head dim: the planner counts attention on PaLM's FLOP
count (12 * s * head_dim per head per token in training, causal or not) and divides it by the matmul rate times a
share per head dim (wizard.planner.throughput.attention_share). This script measures that share on this GPU:
SDPA (torch.nn.functional.scaled_dot_product_attention, causal, bf16, forward + backward, the kernel transformers'
"sdpa" attention runs) and a layer's matmul ([tokens, hidden] x [hidden, 4 hidden], forward + backward), on the same
number of tokens, and writes attention rate / matmul rate per (seq, head dim).

    python3 bench/attention_rate.py                       # GPU: seq 1024 and 2048, head dims 64 ... 256
    python3 bench/attention_rate.py --smoke               # CPU, tiny shapes: checks the script
    python3 bench/attention_rate.py --out DIR             # JSON + markdown (default bench/results/)

Each timing is the median of --repeats runs of --iters iterations after a warm-up, on CUDA events; the heads are
hidden / head dim (rounded down), so every row does about the same work per token.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # _common, also when this file is loaded by a test

from _common import md_heading, md_table, positive_ints, result_stem, write_result  # noqa: E402

HEAD_DIMS = (64, 80, 96, 100, 128, 192, 256)
SEQS = (1024, 2048)


def palm_attention_flops(batch: int, heads: int, seq: int, head_dim: int) -> float:
    """Training FLOPs of one attention call on PaLM's count: forward 4 * B * s^2 * H * d (scores and values, the
    causal half not subtracted), backward twice that."""
    return 3 * 4.0 * batch * seq * seq * heads * head_dim


def matmul_flops(tokens: int, hidden: int) -> float:
    """Forward + backward of [tokens, hidden] x [hidden, 4 hidden]: 3 x 2 * tokens * hidden * 4 hidden."""
    return 3 * 2.0 * tokens * hidden * 4 * hidden


def _seconds_per_call(fn: Any, device: Any, iters: int) -> float:
    """Mean seconds of ``iters`` calls of ``fn``: on CUDA events for a GPU (the kernels, not their launch), else the
    wall clock."""
    import torch

    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def measure(fn: Any, device: Any, iters: int, repeats: int, warmup: int) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` runs of ``iters`` calls, after ``warmup`` calls."""
    _seconds_per_call(fn, device, warmup)
    return statistics.median(_seconds_per_call(fn, device, iters) for _ in range(repeats))


def attention_seconds(
    device: Any, dtype: Any, batch: int, heads: int, seq: int, head_dim: int, **kw: int
) -> float:
    import torch
    import torch.nn.functional as F

    shape = (batch, heads, seq, head_dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=dtype)

    def step() -> None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)
        q.grad = k.grad = v.grad = None

    return measure(step, device, **kw)


def matmul_seconds(device: Any, dtype: Any, tokens: int, hidden: int, **kw: int) -> float:
    import torch

    x = torch.randn(tokens, hidden, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(hidden, 4 * hidden, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn(tokens, 4 * hidden, device=device, dtype=dtype)

    def step() -> None:
        (x @ w).backward(grad)
        x.grad = w.grad = None

    return measure(step, device, **kw)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    hidden, tokens = (args.hidden, args.tokens) if cuda else (128, 256)
    seqs = args.seqs if cuda else (64,)
    head_dims = args.head_dims if cuda else (32, 64)
    kw = {
        "iters": args.iters if cuda else 2,
        "repeats": args.repeats if cuda else 2,
        "warmup": 3 if cuda else 1,
    }
    mm = matmul_seconds(device, dtype, tokens, hidden, **kw)
    mm_rate = matmul_flops(tokens, hidden) / mm
    rows = []
    for seq in seqs:
        for hd in head_dims:
            heads, batch = max(1, hidden // hd), max(1, tokens // seq)
            t = attention_seconds(device, dtype, batch, heads, seq, hd, **kw)
            rate = palm_attention_flops(batch, heads, seq, hd) / t
            rows.append(
                {
                    "seq": seq,
                    "head_dim": hd,
                    "heads": heads,
                    "batch": batch,
                    "seconds": t,
                    "tflops_palm": rate / 1e12,
                    "share_of_matmul": rate / mm_rate,
                }
            )
            print(
                f"seq {seq} head dim {hd:4d}: {rate / 1e12:7.1f} TFLOP/s (PaLM count), {rate / mm_rate:.3f} of the matmul"
            )
    return {
        "date": dt.date.today().isoformat(),
        "host": platform.node(),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "smoke": args.smoke or not cuda,
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "hidden": hidden,
        "tokens": tokens,
        "matmul": {"seconds": mm, "tflops": mm_rate / 1e12},
        "rows": rows,
    }


def markdown(doc: dict[str, Any]) -> str:
    lines = md_heading(
        "Fused attention vs the layer matmuls, by head dim",
        f"{doc['device']} ({doc['date']}, torch {doc['torch']}, {doc['dtype']}): SDPA causal forward + backward vs "
        f"[tokens, hidden] x [hidden, 4 hidden] forward + backward, {doc['tokens']} tokens, hidden {doc['hidden']} "
        f"(heads = hidden / head dim). The matmul ran {doc['matmul']['tflops']:.1f} TFLOP/s. Attention on PaLM's "
        "count (the causal half not subtracted), as the planner counts it.",
    )
    lines += md_table(
        ("seq", "head dim", "heads x batch", "TFLOP/s (PaLM count)", "share of the matmul rate"),
        (
            (
                r["seq"],
                r["head_dim"],
                f"{r['heads']} x {r['batch']}",
                f"{r['tflops_palm']:.1f}",
                f"{r['share_of_matmul']:.3f}",
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
    ap.add_argument(
        "--hidden", type=int, default=2048, help="model width: heads = hidden / head dim (default 2048)"
    )
    ap.add_argument(
        "--tokens", type=int, default=16384, help="tokens per call: batch = tokens / seq (default 16384)"
    )
    ap.add_argument("--iters", type=int, default=10, help="calls per timed run (default 10)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs; the median is kept (default 5)")
    ap.add_argument("--seqs", type=positive_ints, default=SEQS, help="e.g. 1024,2048")
    ap.add_argument("--head-dims", type=positive_ints, default=HEAD_DIMS, help="e.g. 64,128,256")
    args = ap.parse_args()
    doc = run(args)
    write_result(args.out, result_stem("attention_rate", doc, args.label), doc, markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

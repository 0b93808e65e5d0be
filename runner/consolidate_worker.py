"""The torch side of `dswiz consolidate`: runs in the *training environment's* python and converts a ZeRO
checkpoint into full fp32 weights with DeepSpeed's own code (``deepspeed.utils.zero_to_fp32``).

It imports nothing from dswiz (that python may not have dswiz installed): dswiz runs this file and reads its
progress, one JSON object per line, from stdout. Everything else that would print to stdout (DeepSpeed's own
messages, torch warnings) is moved to stderr first, so the event stream stays clean::

    {"event": "versions", "torch": "2.13.0", "deepspeed": "0.19.8"}
    {"event": "phase", "name": "reading the model states"}
    {"event": "log", "message": "Detected checkpoint of type zero stage 3, world_size: 2"}
    {"event": "progress", "desc": "Loading checkpoint shards", "done": 1, "total": 2}
    {"event": "done", "files": [{"name": "pytorch_model.bin", "bytes": 61695}]}
    {"event": "error", "kind": "ImportError", "message": "..."}          (then exit code 1)

Usage: python consolidate_worker.py CHECKPOINT_DIR OUTPUT_DIR --tag TAG [--safe-serialization]
       [--max-shard-size BYTES] [--exclude-frozen-parameters]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sized
from typing import IO, Any

_events: IO[str] | None = None
_current: dict[str, str] = {}  # the loop zero_to_fp32 is in and its item, to say which shard failed


def open_event_stream() -> IO[str]:
    """Keep the real stdout for events; point file descriptor 1 (and sys.stdout) at stderr."""
    stream = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stream


def emit(event: str, **fields: Any) -> None:
    if _events is not None:
        _events.write(json.dumps({"event": event, **fields}, default=str) + "\n")
        _events.flush()


def progress(iterable: Iterable[Any], desc: str = "", total: int | None = None, **_: Any) -> Iterator[Any]:
    """Stands in for tqdm inside zero_to_fp32: the same loop, reported as events (at most ~10 per second)."""
    if total is None and isinstance(iterable, Sized):
        total = len(iterable)
    emit("progress", desc=desc, done=0, total=total)
    last = time.monotonic()
    for done, item in enumerate(iterable, start=1):
        _current.update(desc=desc, item=str(item) if isinstance(item, (str, os.PathLike)) else "")
        yield item
        now = time.monotonic()
        if now - last >= 0.1 or done == total:
            emit("progress", desc=desc, done=done, total=total)
            last = now
    _current.clear()  # the loop is over: a later failure is not this loop's item's fault


def log(*parts: Any, **_: Any) -> None:
    """Stands in for print inside zero_to_fp32."""
    emit("log", message=" ".join(str(p) for p in parts))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Consolidate a ZeRO checkpoint with DeepSpeed's zero_to_fp32.")
    p.add_argument("checkpoint_dir")
    p.add_argument("output_dir")
    p.add_argument("--tag", required=True)
    p.add_argument("--safe-serialization", action="store_true")
    p.add_argument("--max-shard-size", type=int, default=5 * 10**9, help="bytes per output file")
    p.add_argument("--exclude-frozen-parameters", action="store_true")
    return p.parse_args(argv)


def tied_parameters(tag_dir: str) -> list[list[str]]:
    """Pairs of tied parameter names (e.g. lm_head.weight / embed_tokens.weight) recorded in the checkpoint.

    safetensors refuses tensors that share memory, and zero_to_fp32 keeps tied weights shared (DeepSpeed PR
    #8376), so --safe-serialization fails on them at the very end; checking first saves the user that wait.
    """
    import torch

    names = sorted(n for n in os.listdir(tag_dir) if n.endswith("_model_states.pt"))
    if not names:
        return []
    path = os.path.join(tag_dir, names[0])
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except RuntimeError:  # saved in torch's legacy (non-zip) format, which cannot be memory-mapped
        state = torch.load(path, map_location="cpu", weights_only=False)
    shared = state.get("shared_params") or {}
    return [[k, v] for k, v in sorted(shared.items())]


def convert(args: argparse.Namespace) -> int:
    try:
        import deepspeed
        import torch
        from deepspeed.utils import zero_to_fp32
    except ImportError as e:
        emit("error", kind="ImportError", message=str(e))
        return 1
    emit("versions", torch=torch.__version__, deepspeed=deepspeed.__version__, python=sys.executable)

    if args.safe_serialization:
        try:
            import safetensors  # noqa: F401
        except ImportError:
            emit("error", kind="MissingSafetensors", message="safetensors is not installed")
            return 1
        tied = tied_parameters(os.path.join(args.checkpoint_dir, args.tag))
        if tied:
            emit("error", kind="TiedWeights", message=json.dumps(tied))
            return 1
    max_shard_size = args.max_shard_size
    try:
        import huggingface_hub  # noqa: F401  (zero_to_fp32 needs it to split large outputs into shards)
    except ImportError:
        emit("log", message="huggingface_hub is not installed: writing one unsharded file")
        max_shard_size = None

    emit("phase", name="reading the model states")
    # DeepSpeed's converter reports through tqdm and print; route both to the event stream.
    zero_to_fp32.tqdm = progress
    zero_to_fp32.print = log
    zero_to_fp32.convert_zero_checkpoint_to_fp32_state_dict(
        args.checkpoint_dir,
        args.output_dir,
        max_shard_size=max_shard_size,
        safe_serialization=args.safe_serialization,
        tag=args.tag,
        exclude_frozen_parameters=args.exclude_frozen_parameters,
    )
    files = [
        {"name": n, "bytes": os.path.getsize(os.path.join(args.output_dir, n))}
        for n in sorted(os.listdir(args.output_dir))
    ]
    emit("done", files=files)
    return 0


def main(argv: list[str] | None = None) -> int:
    global _events
    args = parse_args(argv)
    _events = open_event_stream()
    try:
        return convert(args)
    except MemoryError:
        emit("error", kind="MemoryError", message="out of memory while consolidating")
        return 1
    except Exception as e:  # reported to dswiz, which names the problem and the fix
        emit("error", kind=type(e).__name__, message=str(e), **_current)
        import traceback

        traceback.print_exc()  # to stderr: dswiz keeps its tail for the report
        return 1


if __name__ == "__main__":
    sys.exit(main())

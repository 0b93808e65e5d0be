"""What holds the allocator's peak of one training step: PyTorch's allocation history replayed to the peak.

``record()`` keeps each live block's Python stack from before the model is built (PyTorch's memory history in
"state" mode: no history, only the stack each live block was allocated from), then records every allocation and
free of one chosen step ("all" mode). ``anatomy()`` replays that step's events from the blocks live at its start
(torch.cuda.memory._snapshot(): "segments" holds the live blocks, "device_traces" the events) to the event that
set its allocated peak, and groups what is live there by where it was allocated: the first frame outside torch
(DeepSpeed's stage3.py, transformers' modelling code, this bench), or "autograd (no Python frame)" for what the
autograd engine's own threads allocate (gradients, the backward's intermediates).

Bytes are the allocator's (each block rounded up to 512 bytes), and allocated means what
torch.cuda.memory_allocated counts: a block leaves it at its free request, even when a stream it was recorded on
(record_stream) still holds it from reuse -- such blocks are cached, not allocated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NO_FRAME = "autograd (no Python frame)"
# Frames of these are how an allocation was reached, not who asked for it.
_PLUMBING = ("/torch/", "/contextlib.py", "/functools.py", "/threading.py", "<frozen")
TOP_SITES = 30


def site(frames: Sequence[Mapping[str, Any]] | None) -> str:
    """The innermost frame that is not torch's own plumbing, as ``path-tail:line function``."""
    for f in frames or ():
        filename = str(f.get("filename", ""))
        if not filename or any(p in filename for p in _PLUMBING):
            continue
        tail = "/".join(filename.split("/")[-2:])
        return f"{tail}:{f.get('line')} {f.get('name')}"
    return NO_FRAME


def live_blocks(snapshot: Mapping[str, Any], device: int) -> dict[int, tuple[int, str]]:
    """address -> (bytes, site) of the blocks allocated when ``snapshot`` was taken, on ``device``."""
    out: dict[int, tuple[int, str]] = {}
    for seg in snapshot.get("segments", ()):
        if seg.get("device", device) != device:
            continue
        addr = int(seg["address"])  # a segment's blocks lie one after another from its start
        for block in seg.get("blocks", ()):
            if block.get("state") == "active_allocated":
                out[addr] = (int(block["size"]), site(block.get("frames")))
            addr += int(block["size"])
    return out


def anatomy(
    start: Mapping[int, tuple[int, str]], events: Iterable[Mapping[str, Any]], baseline: int = 0
) -> dict[str, Any]:
    """The live blocks at the step's allocated peak, grouped by site (largest first), from the blocks live at its
    start and its events in order. ``baseline``: bytes allocated before the config began (the peak is reported
    above it, as Row.max_allocated is)."""
    events = [e for e in events if e.get("action") in ("alloc", "free_requested")]
    total = sum(size for size, _ in start.values())
    at_start = total
    peak, peak_index = total, -1
    for i, e in enumerate(events):
        total += int(e["size"]) if e["action"] == "alloc" else -int(e["size"])
        if total > peak:
            peak, peak_index = total, i
    live = dict(start)
    for e in events[: peak_index + 1]:
        addr = int(e["addr"])
        if e["action"] == "alloc":
            live[addr] = (int(e["size"]), site(e.get("frames")))
        else:
            live.pop(addr, None)
    groups: dict[str, list[int]] = {}
    for size, where in live.values():
        g = groups.setdefault(where, [0, 0])
        g[0] += size
        g[1] += 1
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][0])
    setter = events[peak_index] if peak_index >= 0 else None
    return {
        "allocated_at_start": at_start - baseline,
        "peak": peak - baseline,
        "peak_event": peak_index,
        "events": len(events),
        "peak_set_by": site(setter.get("frames")) if setter is not None else "the step's start",
        "live": [[where, b, n] for where, (b, n) in ranked[:TOP_SITES]],
        "live_elsewhere": sum(b for _, (b, _) in ranked[TOP_SITES:]),
    }


def record(enabled: str | None, max_entries: int = 2_000_000) -> None:
    """PyTorch's memory history: "state" (each live block's stack), "all" (and every event), None (off)."""
    import torch

    torch.cuda.memory._record_memory_history(enabled, stacks="python", max_entries=max_entries)  # type: ignore[arg-type]


def step_anatomy(device: Any, start: Mapping[str, Any], baseline: int) -> dict[str, Any]:
    """At the end of the recorded step (``start``: the snapshot taken at its start): its anatomy."""
    import torch

    torch.cuda.synchronize(device)
    end = torch.cuda.memory._snapshot()
    index = device.index if device.index is not None else torch.cuda.current_device()
    traces = end.get("device_traces") or []
    events = traces[index] if index < len(traces) else []
    return anatomy(live_blocks(start, index), events, baseline)

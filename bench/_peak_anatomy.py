"""What holds the allocator's peak of one training step: PyTorch's allocation history replayed to the peak.

``record()`` records every allocation and free of one chosen step (PyTorch's memory history, "all" mode, without
stacks: gathering Python stacks made DeepSpeed's ZeRO-3 backward fail with "SystemError: ... returned NULL without
setting an exception" on torch 2.x of the GPU image, 2026-12-06). ``anatomy()`` replays that step's events from the
blocks live at its start (torch.cuda.memory._snapshot(): "segments" holds the live blocks, "device_traces" the
events) to the event that set its allocated peak, and groups what is live there by block size and stream ("the
step's, stream 1: 952 MiB blocks"; streams numbered in the order the step first used them). It also keeps the
step's allocated bytes at 100 points of its events, and where its forward ended.

Bytes are the allocator's (each block rounded up to 512 bytes), and allocated means what
torch.cuda.memory_allocated counts: a block leaves it at its free request, even when a stream it was recorded on
(record_stream) still holds it from reuse -- such blocks are cached, not allocated.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

TOP_GROUPS = 30
TIMELINE_POINTS = 100
MiB = 1024**2


def _label(size: int, origin: str) -> str:
    """A live block's group: where it comes from and its size."""
    return f"{origin}: {size / MiB:.0f} MiB blocks"


def _segments(snapshot: Mapping[str, Any], device: int) -> list[Mapping[str, Any]]:
    """``device``'s segments in a snapshot."""
    return [seg for seg in snapshot.get("segments", ()) if seg.get("device", device) == device]


def _blocks(segment: Mapping[str, Any]) -> Iterator[tuple[int, int, str]]:
    """(address, bytes, state) of a segment's blocks, which lie one after another from its start."""
    addr = int(segment["address"])
    for block in segment.get("blocks", ()):
        size = int(block["size"])
        yield addr, size, block.get("state", "")
        addr += size


def live_blocks(snapshot: Mapping[str, Any], device: int) -> dict[int, tuple[int, str]]:
    """address -> (bytes, group) of the blocks allocated when ``snapshot`` was taken, on ``device``."""
    return {
        addr: (size, _label(size, "live at the step's start"))
        for seg in _segments(snapshot, device)
        for addr, size, state in _blocks(seg)
        if state == "active_allocated"
    }


def anatomy(
    start: Mapping[int, tuple[int, str]],
    events: Iterable[Mapping[str, Any]],
    baseline: int = 0,
    forward_events: int | None = None,
) -> dict[str, Any]:
    """The live blocks at the step's allocated peak, grouped (largest first), from the blocks live at its start and
    its events in order. ``baseline``: bytes allocated before the config began (every figure is above it, as
    Row.max_allocated is); ``forward_events``: how many of the events the forward made."""
    every = list(events)
    kept = [i for i, e in enumerate(every) if e.get("action") in ("alloc", "free_requested")]
    streams: dict[Any, int] = {}
    total = sum(size for size, _ in start.values())
    at_start = total
    peak, peak_index = total, -1
    totals = []
    for n, i in enumerate(kept):
        e = every[i]
        total += int(e["size"]) if e["action"] == "alloc" else -int(e["size"])
        totals.append(total)
        if total > peak:
            peak, peak_index = total, n
    live = dict(start)
    for i in kept[: peak_index + 1]:
        e = every[i]
        addr = int(e["addr"])
        if e["action"] == "alloc":
            stream = streams.setdefault(e.get("stream"), len(streams))
            size = int(e["size"])
            live[addr] = (size, _label(size, f"the step's, stream {stream}"))
        else:
            live.pop(addr, None)
    groups: dict[str, list[int]] = {}
    for size, where in live.values():
        g = groups.setdefault(where, [0, 0])
        g[0] += size
        g[1] += 1
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][0])
    setter = every[kept[peak_index]] if peak_index >= 0 else None
    step = max(1, len(totals) // TIMELINE_POINTS)
    return {
        "allocated_at_start": at_start - baseline,
        "peak": peak - baseline,
        "peak_event": peak_index,
        "events": len(kept),
        "forward_events": (None if forward_events is None else sum(1 for i in kept if i < forward_events)),
        "peak_set_by": _label(int(setter["size"]), "a block of")
        if setter is not None
        else "the step's start",
        "live": [[where, b, n] for where, (b, n) in ranked[:TOP_GROUPS]],
        "live_elsewhere": sum(b for _, (b, _) in ranked[TOP_GROUPS:]),
        "timeline": [[n, totals[n] - baseline] for n in range(0, len(totals), step)],
    }


def record(enabled: str | None, max_entries: int = 2_000_000) -> None:
    """PyTorch's memory history without stacks: "all" (every event), None (off)."""
    import torch

    torch.cuda.memory._record_memory_history(enabled, context=None, max_entries=max_entries)  # type: ignore[arg-type]


def _device_events(snapshot: Mapping[str, Any], device: Any) -> tuple[int, list[Any]]:
    """(index, recorded events) of ``device`` in a snapshot."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    traces = snapshot.get("device_traces") or []
    return index, (traces[index] if index < len(traces) else [])


def trace_length(device: Any) -> int:
    """Events recorded so far on ``device`` (a snapshot: call it once or twice a step, not per event)."""
    import torch

    return len(_device_events(torch.cuda.memory._snapshot(), device)[1])


def events_now(device: Any) -> tuple[int, list[Any]]:
    """(device index, the events recorded on it) once its queued work has run."""
    import torch

    torch.cuda.synchronize(device)
    return _device_events(torch.cuda.memory._snapshot(), device)


def step_anatomy(
    device: Any, start: Mapping[str, Any], baseline: int, forward_events: int | None = None
) -> dict[str, Any]:
    """At the end of the recorded step (``start``: the snapshot taken at its start): its anatomy."""
    index, events = events_now(device)
    return anatomy(live_blocks(start, index), events, baseline, forward_events)


def _segment_blocks(
    snapshot: Mapping[str, Any], device: int
) -> tuple[dict[Any, int], dict[Any, int], dict[int, tuple[int, Any]]]:
    """(reserved bytes by stream, held bytes by stream, address -> (bytes, stream) of the held blocks) in a
    snapshot: held means allocated or freed but still in use by a stream it was recorded on."""
    reserved: dict[Any, int] = {}
    held: dict[Any, int] = {}
    blocks: dict[int, tuple[int, Any]] = {}
    for seg in _segments(snapshot, device):
        stream = seg.get("stream")
        reserved[stream] = reserved.get(stream, 0) + int(seg.get("total_size", 0))
        for addr, size, state in _blocks(seg):
            if state in ("active_allocated", "active_pending_free"):
                held[stream] = held.get(stream, 0) + size
                blocks[addr] = (size, stream)
    return reserved, held, blocks


def _add(
    groups: dict[tuple[str, int, str], list[int]], key: tuple[str, int, str], size: int, free: int
) -> None:
    g = groups.setdefault(key, [0, 0, 0])
    g[0], g[1], g[2] = g[0] + 1, g[1] + size, max(g[2], free)


def segment_growth(
    start: Mapping[str, Any], events: list[Mapping[str, Any]], marks: list[tuple[int, str]], device: int = 0
) -> dict[str, Any]:
    """Where the allocator reserved memory after ``start`` (a snapshot): every segment it added (cudaMalloc) or gave
    back, replayed from the recorded ``events``, with the moment (``marks``: (events recorded by then, label) at the
    end of each labelled span, in order), the stream, the request it was added for (the first allocation that landed
    in it), and the bytes that stream already had reserved but not held then (free in its cache, yet not in one
    piece the request fit). Groups by (moment, stream, request size), largest first."""
    reserved, held, blocks = _segment_blocks(start, device)
    streams: dict[Any, int] = {}
    for s in reserved:
        streams.setdefault(s, len(streams))
    at_start = sum(reserved.values())
    total, peak = at_start, at_start
    groups: dict[tuple[str, int, str], list[int]] = {}
    freed = 0
    pending: dict[
        int, tuple[str, int, int, int]
    ] = {}  # segment address -> (moment, bytes, free then, stream)

    def moment(i: int) -> str:
        return next((label for n, label in marks if i < n), "after")

    for i, e in enumerate(events):
        action = e.get("action")
        size, addr, stream = int(e.get("size", 0)), int(e.get("addr", 0)), e.get("stream")
        if action == "segment_alloc":
            number = streams.setdefault(stream, len(streams))
            free_then = reserved.get(stream, 0) - held.get(stream, 0)
            reserved[stream] = reserved.get(stream, 0) + size
            total += size
            peak = max(peak, total)
            pending[addr] = (moment(i), size, free_then, number)
        elif action == "segment_free":
            reserved[stream] = reserved.get(stream, 0) - size
            total -= size
            freed += size
        elif action == "alloc":
            blocks[addr] = (size, stream)
            held[stream] = held.get(stream, 0) + size
            for seg_addr, (when, seg_size, free_then, number) in list(pending.items()):
                if seg_addr <= addr < seg_addr + seg_size:
                    _add(groups, (when, number, f"{size / MiB:.0f} MiB"), seg_size, free_then)
                    del pending[seg_addr]
        elif action == "free_completed":
            size, stream = blocks.pop(addr, (size, stream))
            held[stream] = held.get(stream, 0) - size
    for when, seg_size, free_then, number in pending.values():  # a segment no request landed in
        _add(groups, (when, number, "no request"), seg_size, free_then)
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][1])
    return {
        "reserved_at_start": at_start,
        "reserved_at_end": total,
        "peak_reserved": peak,
        "segments_freed": freed,
        "by_stream_at_end": [
            [streams.setdefault(s, len(streams)), reserved[s], held.get(s, 0)] for s in reserved
        ],
        # [moment, stream, request, segments, bytes, the most that stream had free when one was added]
        "added": [[m, n, req, count, b, free] for (m, n, req), (count, b, free) in ranked],
    }

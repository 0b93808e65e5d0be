"""How much of one training step the GPU computes: PyTorch's profiler trace (Kineto's Chrome-trace JSON, CUDA
activity only, so that the host pays about a microsecond per launch and no more) of one step, read back into busy
time.

``busy(trace, phases)`` merges the intervals of every kernel, memory copy and memset the trace holds: busy is the
length of their union (two streams at work at once count once), ``span`` the time from the first to the last. It
splits busy by kind (matrix multiplications, attention, other kernels, copies host-to-device / device-to-host /
within the device, memsets) and by stream, and by phase: ``phases`` are the step's phase durations in order (the
CUDA events bench/plan_accuracy.py records at the forward / backward / step boundaries on the current stream), laid
end to end from the first GPU event. The GPU's idle time in a phase is its duration less its busy time: time the
GPU waited on the host (Python, hooks, a synchronising copy, CPU Adam).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
_GEMM = re.compile(r"gemm|nvjet|cutlass|xmma|cublas|matmul", re.IGNORECASE)
_ATTENTION = re.compile(r"flash|fmha|attention|attn|sdpa", re.IGNORECASE)
_COPY = {"HtoD": "copy host-to-device", "DtoH": "copy device-to-host", "DtoD": "copy within the device"}


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals in microseconds, in seconds."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total / 1e6


def kind(event: Mapping[str, Any]) -> str:
    """What a GPU event of the trace does, by its category and name."""
    name = str(event.get("name", ""))
    if event.get("cat") == "gpu_memset":
        return "memset"
    if event.get("cat") == "gpu_memcpy":
        for key, label in _COPY.items():
            if key in name:
                return label
        return "copy (other)"
    if _ATTENTION.search(name):
        return "attention"
    if _GEMM.search(name):
        return "matrix multiplications"
    return "other kernels"


def _events(trace: Mapping[str, Any], categories: Sequence[str]) -> list[Mapping[str, Any]]:
    """The complete ("X") events of a Chrome trace in ``categories`` that have a start and a duration."""
    out = []
    for e in trace.get("traceEvents", ()):
        if not isinstance(e, Mapping) or e.get("ph") != "X" or e.get("cat") not in categories:
            continue
        try:
            float(e["ts"]), float(e["dur"])
        except (KeyError, TypeError, ValueError):
            continue
        out.append(e)
    return out


def gpu_events(trace: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The kernel, copy and memset events of a Chrome trace."""
    return _events(trace, GPU_CATEGORIES)


def _named_spans(events: Iterable[Mapping[str, Any]]) -> list[tuple[float, float, str]]:
    return [(*_interval(e), str(e.get("name", ""))) for e in events]


def _interval(e: Mapping[str, Any]) -> tuple[float, float]:
    start = float(e["ts"])
    return start, start + max(0.0, float(e["dur"]))


def _clip(spans: Iterable[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]


def busy(trace: Mapping[str, Any], phases: Sequence[tuple[str, float]] = ()) -> dict[str, Any]:
    """GPU busy time of a one-step trace (seconds): in all, by kind, by stream, and by phase (``phases``: (name,
    seconds) in the order they ran; a name that recurs, as in an accumulating step, adds up)."""
    events = gpu_events(trace)
    spans = [_interval(e) for e in events]
    by_kind: dict[str, list[tuple[float, float]]] = {}
    by_stream: dict[str, list[tuple[float, float]]] = {}
    for e, span in zip(events, spans, strict=True):
        by_kind.setdefault(kind(e), []).append(span)
        stream = (e.get("args") or {}).get("stream", "?")
        by_stream.setdefault(str(stream), []).append(span)
    first = min((a for a, _ in spans), default=0.0)
    last = max((b for _, b in spans), default=0.0)
    out: dict[str, Any] = {
        "events": len(events),
        "span_s": round((last - first) / 1e6, 6),
        "busy_s": round(union_seconds(spans), 6),
        "by_kind": {k: round(union_seconds(v), 6) for k, v in sorted(by_kind.items())},
        "by_stream": {k: round(union_seconds(v), 6) for k, v in sorted(by_stream.items())},
        "phases": {},
    }
    at = first
    for name, seconds in phases:
        lo, hi = at, at + max(0.0, seconds) * 1e6
        phase = out["phases"].setdefault(name, {"seconds": 0.0, "busy_s": 0.0})
        phase["seconds"] = round(phase["seconds"] + seconds, 6)
        phase["busy_s"] = round(phase["busy_s"] + union_seconds(_clip(spans, lo, hi)), 6)
        at = hi
    return out


def idle_gaps(trace: Mapping[str, Any], min_us: float = 200.0) -> list[tuple[float, float]]:
    """The spans (microseconds) between the first and the last GPU event where the GPU ran nothing, ``min_us`` or
    longer."""
    spans = sorted(_interval(e) for e in gpu_events(trace))
    gaps, end = [], None
    for a, b in spans:
        if end is not None and a - end >= min_us:
            gaps.append((end, a))
        end = b if end is None else max(end, b)
    return gaps


def _innermost_at(frames: Sequence[tuple[float, float, str]], samples: Sequence[float]) -> list[str | None]:
    """For each time in ``samples`` (ascending), the name of the latest-started frame spanning it (the innermost of
    nested frames): one sweep over the frames' starts and ends."""
    edges = sorted(
        [(a, 1, i) for i, (a, _, _) in enumerate(frames)] + [(b, 0, i) for i, (_, b, _) in enumerate(frames)]
    )
    active: list[int] = []
    out: list[str | None] = []
    k = 0
    for t in samples:
        while k < len(edges) and edges[k][0] <= t:
            _, starts, i = edges[k]
            if starts:
                active.append(i)
            elif i in active:
                active.remove(i)
            k += 1
        out.append(frames[active[-1]][2] if active else None)
    return out


def host_while_idle(trace: Mapping[str, Any], min_us: float = 200.0, top: int = 15) -> dict[str, Any]:
    """What the host was running while the GPU waited: a trace recorded with CPU activity and Python stacks
    (``with_stack=True``: its "python_function" events). Each idle gap of ``min_us`` or more is sampled every 100
    microseconds and each sample goes to the innermost Python frame then running -- and apart to the innermost of
    DeepSpeed's own (a path with ``deepspeed/``), and to the CUDA runtime call then blocking, if any. Seconds per frame, the
    ``top`` largest; and the runtime calls of a millisecond or more (a synchronize, a pageable copy) by name."""
    python = _events(trace, ("python_function",))
    threads: dict[Any, int] = {}
    for e in python:
        threads[e.get("tid")] = threads.get(e.get("tid"), 0) + 1
    main = max(threads, key=lambda t: threads[t]) if threads else None  # the thread that ran the step
    frames = _named_spans(e for e in python if e.get("tid") == main)
    runtime = _named_spans(_events(trace, ("cuda_runtime", "cuda_driver")))
    step_us = 100.0
    gaps = idle_gaps(trace, min_us)
    samples: list[float] = []
    weights: list[float] = []
    for a, b in gaps:
        t = a + step_us / 2
        while t < b:
            samples.append(t)
            weights.append(min(step_us, b - t + step_us / 2) / 1e6)
            t += step_us
    tables: list[dict[str, float]] = []
    for chosen in (frames, [f for f in frames if "deepspeed/" in f[2]], runtime):
        table: dict[str, float] = {}
        for name, w in zip(_innermost_at(chosen, samples), weights, strict=True):
            key = name or "(none)"
            table[key] = table.get(key, 0.0) + w
        tables.append(table)
    by_frame, by_deepspeed, by_call = tables

    def largest(table: dict[str, float]) -> dict[str, float]:
        return {k: round(v, 4) for k, v in sorted(table.items(), key=lambda kv: -kv[1])[:top]}

    long_calls: dict[str, list[float]] = {}
    for a, b, name in runtime:
        if b - a >= 1000:
            entry = long_calls.setdefault(name, [0, 0.0])
            entry[0] += 1
            entry[1] += (b - a) / 1e6
    return {
        "idle_s": round(sum(b - a for a, b in gaps) / 1e6, 4),
        "gaps": len(gaps),
        "by_frame": largest(by_frame),
        "by_deepspeed_frame": largest(by_deepspeed),
        "by_runtime_call": largest(by_call),
        "long_runtime_calls": {
            k: [int(n), round(s, 4)]
            for k, (n, s) in sorted(long_calls.items(), key=lambda kv: -kv[1][1])[:top]
        },
    }

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


def gpu_events(trace: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The complete ("X") kernel, copy and memset events of a Chrome trace that have a start and a duration."""
    out = []
    for e in trace.get("traceEvents", ()):
        if not isinstance(e, Mapping) or e.get("ph") != "X" or e.get("cat") not in GPU_CATEGORIES:
            continue
        try:
            float(e["ts"]), float(e["dur"])
        except (KeyError, TypeError, ValueError):
            continue
        out.append(e)
    return out


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

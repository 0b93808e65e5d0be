"""bench/_gpu_busy.py without a GPU: a step's GPU busy time read from a Chrome trace as PyTorch's profiler exports it
(Kineto's complete events: ts and dur in microseconds, kernels / copies / memsets by category, the stream in args)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


@pytest.fixture(scope="module")
def gb(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("_gpu_busy")


def ev(name: str, ts: float, dur: float, cat: str = "kernel", stream: int = 7) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}


def test_busy_is_the_union_of_what_the_streams_run_and_idle_lies_between(gb: ModuleType) -> None:
    trace = {
        "traceEvents": [
            ev("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", 1000, 400),  # a matmul, 1000-1400
            ev("Memcpy DtoH (Device -> Pinned)", 1200, 600, "gpu_memcpy", stream=13),  # beside it, 1200-1800
            ev("void at::native::vectorized_elementwise_kernel<4>", 2000, 100),  # after 200 us idle
            ev("Memset (Device)", 2100, 50, "gpu_memset"),
            ev("pytorch_flash::flash_fwd_kernel", 2150, 250),
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "ts": 0,
                "dur": 5000,
            },  # the host's: not the GPU's
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 990, "dur": 5},
            {"ph": "i", "cat": "kernel", "name": "an instant", "ts": 3000},  # no duration: skipped
            {"ph": "X", "cat": "kernel", "name": "no start", "dur": 10},
        ]
    }
    out = gb.busy(trace)
    assert out["events"] == 5
    assert out["span_s"] == pytest.approx(1400e-6)  # 1000 -> 2400
    assert out["busy_s"] == pytest.approx(1200e-6)  # 1000-1800 and 2000-2400: the copy beside the matmul once
    assert out["by_kind"] == pytest.approx(
        {
            "matrix multiplications": 400e-6,
            "copy device-to-host": 600e-6,
            "other kernels": 100e-6,
            "memset": 50e-6,
            "attention": 250e-6,
        }
    )
    assert out["by_stream"] == pytest.approx({"7": 800e-6, "13": 600e-6})


def test_phases_lie_end_to_end_from_the_first_gpu_event_and_a_recurring_phase_adds_up(gb: ModuleType) -> None:
    # two micro-steps (forward 300 us, backward 500 us each) and the optimizer step (400 us), the GPU busy
    # 100 us of each forward, 400 us of each backward and 100 us of the step
    events = []
    t = 0.0
    for phase, seconds, busy in [
        ("forward", 300, 100),
        ("backward", 500, 400),
        ("forward", 300, 100),
        ("backward", 500, 400),
        ("step", 400, 100),
    ]:
        events.append(ev(f"{phase} kernel", 5000 + t, busy))
        t += seconds
    phases = [
        ("forward", 300e-6),
        ("backward", 500e-6),
        ("forward", 300e-6),
        ("backward", 500e-6),
        ("step", 400e-6),
    ]
    out = gb.busy({"traceEvents": events}, phases)
    assert out["phases"]["forward"] == pytest.approx({"seconds": 600e-6, "busy_s": 200e-6})
    assert out["phases"]["backward"] == pytest.approx({"seconds": 1000e-6, "busy_s": 800e-6})
    assert out["phases"]["step"] == pytest.approx({"seconds": 400e-6, "busy_s": 100e-6})
    # a kernel that runs across a boundary counts in each phase for its part there
    across = gb.busy({"traceEvents": [ev("k", 0, 200)]}, [("forward", 100e-6), ("backward", 100e-6)])
    assert across["phases"]["forward"]["busy_s"] == pytest.approx(100e-6)
    assert across["phases"]["backward"]["busy_s"] == pytest.approx(100e-6)


def test_a_real_profiler_trace_without_a_gpu_reads_as_no_gpu_work(gb: ModuleType, tmp_path: Path) -> None:
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(64, 64) @ torch.ones(64, 64)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    assert any(e.get("cat") == "cpu_op" for e in trace["traceEvents"])  # the host's operators are there
    out = gb.busy(trace, [("forward", 0.001)])
    assert out["events"] == 0 and out["busy_s"] == 0.0
    assert out["phases"]["forward"] == {"seconds": 0.001, "busy_s": 0.0}


def test_garbage_in_a_trace_is_skipped_not_fatal(gb: ModuleType) -> None:
    trace = {"traceEvents": [None, 3, "x", {"ph": "X", "cat": "kernel", "ts": "a", "dur": 1}, ev("k", 0, -5)]}
    out = gb.busy(trace)
    assert out["events"] == 1 and out["busy_s"] == 0.0  # a negative duration counts as none
    assert gb.busy({})["events"] == 0
    frames = [
        {"ph": "X", "cat": "python_function", "ts": "a", "dur": 1},
        {"ph": "X", "cat": "cuda_runtime", "ts": 1},
    ]
    assert gb.host_while_idle({"traceEvents": [*trace["traceEvents"], *frames]})["gaps"] == 0


def py(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "python_function", "name": name, "ts": ts, "dur": dur, "tid": tid}


def test_the_host_while_the_gpu_waits_is_the_innermost_frame_and_call_then(gb: ModuleType) -> None:
    # the GPU runs 0-1000 and 3000-4000 us: one 2 ms gap, in which the step's thread runs a DeepSpeed hook for its
    # first half (blocked in a synchronize for 600 us of it) and the model's own code for its second
    trace = {
        "traceEvents": [
            ev("gemm", 0, 1000),
            ev("gemm", 3000, 1000),
            ev(
                "tiny", 1010, 50
            ),  # a 10 us gap after the first kernel is below the threshold, then 1060-3000 idle
            py("bench/plan_accuracy.py(1): run_config", 0, 5000),
            py("transformers/models/gpt2/modeling_gpt2.py(9): forward", 1900, 1200),
            py("deepspeed/runtime/zero/stage3.py(2006): partition_grads", 900, 1000),
            py("torch/nn/modules/module.py(5): _call_impl", 950, 900),  # inside partition_grads
            py("some other thread's frame", 0, 5000, tid=2),
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 1100, "dur": 600},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2000, "dur": 5},
        ]
    }
    out = gb.host_while_idle(trace)
    assert out["gaps"] == 1 and out["idle_s"] == pytest.approx(1940e-6, abs=1e-4)
    frames = out["by_frame"]
    assert frames["torch/nn/modules/module.py(5): _call_impl"] == pytest.approx(
        790e-6, abs=101e-6
    )  # 1060-1850
    assert frames["transformers/models/gpt2/modeling_gpt2.py(9): forward"] == pytest.approx(
        1100e-6, abs=101e-6
    )
    assert "some other thread's frame" not in frames
    ds = out["by_deepspeed_frame"]
    assert ds["deepspeed/runtime/zero/stage3.py(2006): partition_grads"] == pytest.approx(840e-6, abs=101e-6)
    assert ds["(none)"] == pytest.approx(1100e-6, abs=101e-6)
    assert out["by_runtime_call"]["cudaStreamSynchronize"] == pytest.approx(600e-6, abs=101e-6)
    assert out["long_runtime_calls"] == {}  # none of a millisecond
    trace["traceEvents"].append(
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpy", "ts": 4100, "dur": 2500}
    )
    assert gb.host_while_idle(trace)["long_runtime_calls"] == {"cudaMemcpy": [1, 0.0025]}
    assert gb.host_while_idle({})["gaps"] == 0

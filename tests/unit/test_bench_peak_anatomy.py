"""bench/_peak_anatomy.py without a GPU: the replay of PyTorch's allocation history to a step's allocated peak, on
snapshots shaped as torch.cuda.memory._snapshot() returns them (segments of consecutive blocks; trace events)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

MiB = 1024**2


@pytest.fixture(scope="module")
def pk(bench_script: Callable[[str], ModuleType]) -> ModuleType:
    return bench_script("_peak_anatomy")


def event(action: str, addr: int, size: int, stream: int = 7) -> dict[str, Any]:
    return {"action": action, "addr": addr, "size": size, "frames": [], "stream": stream}


def test_live_blocks_lie_one_after_another_from_their_segment(pk: ModuleType) -> None:
    snap = {
        "segments": [
            {
                "device": 0,
                "address": 1000,
                "blocks": [
                    {"size": 100 * MiB, "state": "active_allocated", "frames": []},
                    {"size": 50, "state": "inactive"},
                    {
                        "size": 30,
                        "state": "active_pending_free",
                    },  # freed, held by a recorded stream: not allocated
                    {"size": 2 * MiB, "state": "active_allocated", "frames": []},
                ],
            },
            {"device": 1, "address": 5000, "blocks": [{"size": 7, "state": "active_allocated"}]},
        ]
    }
    assert pk.live_blocks(snap, 0) == {
        1000: (100 * MiB, "live at the step's start: 100 MiB blocks"),
        1000 + 100 * MiB + 80: (2 * MiB, "live at the step's start: 2 MiB blocks"),
    }


def test_the_peak_is_replayed_from_the_step_s_start_and_grouped(pk: ModuleType) -> None:
    start = {1: (10 * MiB, "resident"), 2: (4 * MiB, "gone before the peak")}
    events = [
        event("alloc", 10, 8 * MiB, 7),
        event("segment_alloc", 99, 64 * MiB),  # the allocator's own: not allocated bytes
        event("free_requested", 2, 4 * MiB),  # a block from before the step, freed
        event("alloc", 11, 3 * MiB, 9),  # grouped by size and stream (9: the second the step used)
        event("alloc", 12, 3 * MiB, 9),
        event("alloc", 13, 2 * MiB, 7),  # the peak: 10 + 8 + 3 + 3 + 2 = 26 MiB
        event("free_completed", 2, 4 * MiB),
        event("free_requested", 10, 8 * MiB),
        event("alloc", 14, 5 * MiB, 7),  # after the peak: 23 MiB
    ]
    a = pk.anatomy(start, events, baseline=1 * MiB, forward_events=3)
    assert a["allocated_at_start"] == 13 * MiB and a["peak"] == 25 * MiB
    assert a["events"] == 7 and a["peak_event"] == 4 and a["forward_events"] == 2
    assert a["peak_set_by"] == "a block of: 2 MiB blocks"
    assert a["live"] == [
        ["resident", 10 * MiB, 1],
        ["the step's, stream 0: 8 MiB blocks", 8 * MiB, 1],
        ["the step's, stream 1: 3 MiB blocks", 6 * MiB, 2],
        ["the step's, stream 0: 2 MiB blocks", 2 * MiB, 1],
    ]
    assert sum(b for _, b, _ in a["live"]) == a["peak"] + 1 * MiB and a["live_elsewhere"] == 0
    # allocated (above the baseline) after each kept event
    assert a["timeline"] == [[n, t * MiB] for n, t in enumerate([21, 17, 20, 23, 25, 17, 22])]


def test_a_step_that_never_rises_above_its_start_peaks_at_its_start(pk: ModuleType) -> None:
    a = pk.anatomy({1: (MiB, "resident")}, [event("free_requested", 1, MiB), event("alloc", 2, MiB)])
    assert a["peak"] == MiB and a["peak_set_by"] == "the step's start" and a["live"] == [["resident", MiB, 1]]


def test_segment_growth_names_each_added_segment_s_moment_stream_and_request(pk: ModuleType) -> None:
    """Replayed from a snapshot's segments: the free bytes a stream had when it still needed a segment are its
    reserved bytes less the blocks it holds, a block freed while a recorded stream still used it among them until
    that stream passed it (free_completed)."""
    start = {
        "segments": [
            {
                "device": 0,
                "address": 0,
                "total_size": 20 * MiB,
                "stream": 7,
                "blocks": [
                    {"size": 12 * MiB, "state": "active_allocated"},
                    {"size": 8 * MiB, "state": "inactive"},
                ],
            },
            {"device": 1, "address": 0, "total_size": 99 * MiB, "stream": 7, "blocks": []},
        ]
    }
    events = [
        event("alloc", 12 * MiB, 6 * MiB, 7),  # fits the start segment's free 8 MiB
        event("segment_alloc", 100 * MiB, 20 * MiB, 7),  # 2 MiB free on stream 7 then
        event("alloc", 100 * MiB, 10 * MiB, 7),
        event("alloc", 110 * MiB, 10 * MiB, 7),
        event("free_requested", 100 * MiB, 10 * MiB, 7),  # recorded on a side stream: still held
        event("segment_alloc", 200 * MiB, 20 * MiB, 9),  # the side stream's first segment
        event("alloc", 200 * MiB, 16 * MiB, 9),
        event(
            "free_completed", 100 * MiB, 10 * MiB, 7
        ),  # passed: 12 MiB free on stream 7, none 18 in one piece
        event("segment_alloc", 300 * MiB, 20 * MiB, 7),
        event("alloc", 300 * MiB, 18 * MiB, 7),
        event("free_requested", 200 * MiB, 16 * MiB, 9),
        event("free_completed", 200 * MiB, 16 * MiB, 9),
        event("segment_free", 200 * MiB, 20 * MiB, 9),  # handed back (an empty_cache)
    ]
    marks = [(5, "forward"), (10, "backward")]
    g = pk.segment_growth(start, events, marks, device=0)
    assert g["reserved_at_start"] == 20 * MiB and g["peak_reserved"] == 80 * MiB
    assert g["reserved_at_end"] == 60 * MiB and g["segments_freed"] == 20 * MiB
    assert g["by_stream_at_end"] == [[0, 60 * MiB, 46 * MiB], [1, 0, 0]]
    assert g["added"] == [
        ["forward", 0, "10 MiB", 1, 20 * MiB, 2 * MiB],
        ["backward", 1, "16 MiB", 1, 20 * MiB, 0],
        ["backward", 0, "18 MiB", 1, 20 * MiB, 12 * MiB],
    ]

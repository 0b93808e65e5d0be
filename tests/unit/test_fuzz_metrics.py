"""metrics.jsonl, fuzzed: a real snapshot line with values of the wrong type ("notes": 1, "host_ram_used_bytes":
"5", NaN, 1e308, containers), and raw lines (torn, huge numbers, deep nesting). Reading gives snapshots whose every
field has its declared type; the history, the summary and the --json writer take them."""

from __future__ import annotations

import json
import tempfile
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runner.metrics.history import Downsampler, iter_metrics, load_history
from runner.metrics.snapshot import Alert, GpuState, Snapshot
from runner.metrics.summary import Summary

from . import fuzz_support as fz

BASE = Snapshot(
    time=1700000000.0,
    step=12,
    samples_per_sec=3.5,
    loss=2.5,
    lr=1e-3,
    total_steps=100,
    world_size=2,
    gpus=(GpuState(0, "H200", 10, 100, 50.0, 300.0, 700.0, 60.0, 5, 90),),
    host_ram_used_bytes=5,
    host_ram_total_bytes=10,
    job_state="running",
    alerts=(Alert("stall", "warning", "no step for 60 s", rank=0, gpu=None),),
    source="run x",
    notes=("a note",),
).to_json()
SNAPSHOT_KEYS = sorted(BASE)


def _allowed(hint: Any) -> tuple[type, ...]:
    """The classes a field's annotation admits (``float`` admits ``int``, as in typing)."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    out = tuple(typing.get_origin(a) or a for a in args)
    return (*out, int) if float in out else out


def check_typed(obj: Any) -> None:
    hints = typing.get_type_hints(type(obj))
    for f in fields(obj):
        value = getattr(obj, f.name)
        allowed = _allowed(hints[f.name])
        if f.name in ("log_tail", "history"):  # in memory only, never read from a file
            continue
        fz.holds(isinstance(value, allowed), f"{type(obj).__name__}.{f.name}={value!r} is {allowed}")
        fz.holds(not (isinstance(value, bool) and bool not in allowed), f"{f.name}={value!r} is not a bool")


def check_snapshot(snap: Snapshot) -> None:
    check_typed(snap)
    for g in snap.gpus:
        check_typed(g)
    for a in snap.alerts:
        check_typed(a)
    fz.holds(all(isinstance(n, str) for n in snap.notes), "notes are strings")
    json.dumps(snap.to_json(), allow_nan=False)
    snap.history_point()


@fz.fuzz_settings(1000)
@given(objects=fz.batch(fz.mutated(BASE, SNAPSHOT_KEYS)))
def test_any_snapshot_object_reads_as_a_typed_snapshot(objects: list[Any]) -> None:
    for data in fz.cases(objects):
        if isinstance(data, dict):
            check_object(data)


def check_object(data: dict[str, Any]) -> None:
    snap = fz.total(Snapshot.from_json, data)
    if snap is None:
        return
    fz.total(check_snapshot, snap)
    summary = Summary()
    fz.total(summary.add, snap)
    fz.total(summary.add, Snapshot.from_json(BASE))
    fz.total(json.dumps, summary.to_json(), allow_nan=False)
    history = Downsampler(4)
    for _ in range(5):
        fz.total(lambda: history.add(snap.history_point()))
    fz.total(history.points)


def _line(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


raw_lines = st.one_of(
    fz.mutated(BASE, SNAPSHOT_KEYS).map(_line),
    st.sampled_from(
        [
            "",
            "{",
            "[]",
            "null",
            '{"time": ' + fz.HUGE_DIGITS + "}",
            '{"step": ' + fz.HUGE_DIGITS + "}",
            '{"time": NaN, "step": Infinity}',
            '{"x": ' + "[" * 5000 + "]" * 5000 + "}",
            '{"gpus": [{"index": 0, "memory_used_bytes": "5"}]}',
        ]
    ),
)


@fz.fuzz_settings(250)
@given(files=fz.batch(st.lists(raw_lines, min_size=1, max_size=3)))
def test_any_metrics_file_reads_as_typed_snapshots(files: list[list[str]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "metrics.jsonl"
        for lines in fz.cases(files):
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            for snap in fz.total(list, iter_metrics(path)) or []:
                fz.total(check_snapshot, snap)
            last = fz.total(load_history, path, Downsampler(8))
            if last is not None:
                fz.total(check_snapshot, last)


def test_the_issue_examples_read_as_none_or_defaults() -> None:
    snap = Snapshot.from_json({**BASE, "notes": 1, "host_ram_used_bytes": "5", "step": True, "time": "x"})
    assert snap.notes == () and snap.host_ram_used_bytes is None and snap.step is None and snap.time == 0.0
    Summary().add(snap)

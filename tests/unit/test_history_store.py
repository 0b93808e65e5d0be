"""The run history's SQLite store: real files, real concurrent processes, real kills."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wizard.errors import DswizError
from wizard.history.record import Figures, Hardware, Measurement
from wizard.history.store import SCHEMA_VERSION, HistoryStore

H200 = Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=141 * 1024**3, gpus_per_node=1, nodes=1)


def _record(i: int = 0, *, hw: Hardware = H200, outcome: str = "success", **kw: object) -> Measurement:
    return Measurement(
        hardware=hw,
        model={"name": f"m{i}", "parameters": 1e9},
        strategy={"stage": 2, "offload_optimizer": "none", "micro_batch": 4},
        predicted=Figures(tokens_per_sec=1000.0 + i, peak_gpu_bytes=10 * 1024**3),
        measured=Figures(tokens_per_sec=900.0 + i, peak_gpu_bytes=11 * 1024**3),
        seq_len=2048,
        outcome=outcome,
        started_at=1_700_000_000.0 + i,
        **kw,  # type: ignore[arg-type]
    )


def test_put_get_and_newest_first(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite3")
    a, b = _record(1), _record(2, hw=Hardware(gpu_name="T4", gpus_per_node=1))
    store.put(a)
    store.put(b)
    assert store.get(a.id) == a
    assert [r.id for r in store.runs()] == [b.id, a.id]
    assert [r.id for r in store.runs(hardware_key=H200.key)] == [a.id]
    # a launch updates its record when it ends: same id, one row
    store.put(a.ended("oom", Figures(peak_gpu_bytes=5), at=1.0))
    assert len(store.runs()) == 2 and store.get(a.id).outcome == "oom"  # type: ignore[union-attr]


def _writer(path: str, worker: int, n: int) -> None:
    store = HistoryStore(path)
    for i in range(n):
        store.put(_record(worker * 1000 + i))


def test_concurrent_processes_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "h.sqlite3")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 25)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(HistoryStore(path).runs()) == 100


def test_a_record_survives_the_writer_being_killed(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    code = (
        "import os, signal, sys; sys.path.insert(0, sys.argv[2]);"
        "from wizard.history.store import HistoryStore;"
        "from wizard.history.record import Measurement, Hardware;"
        "s = HistoryStore(sys.argv[1]); s.put(Measurement(hardware=Hardware(gpu_name='X'), model={}, strategy={},"
        " id='killed-run'));"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path), os.getcwd()], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    rec = HistoryStore(path).get("killed-run")
    assert rec is not None and rec.outcome == "running"


def test_unreadable_and_newer_files_are_refused_with_a_fix(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(DswizError) as e:
        HistoryStore(junk)
    assert "not a readable SQLite file" in e.value.problem and "mv " in (e.value.fix or "")
    newer = tmp_path / "newer.sqlite3"
    con = sqlite3.connect(newer)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.close()
    with pytest.raises(DswizError, match="newer dswiz"):
        HistoryStore(newer)


def test_export_import_merges_by_id_and_keeps_the_later_end(tmp_path: Path) -> None:
    src = HistoryStore(tmp_path / "a.sqlite3")
    dst = HistoryStore(tmp_path / "b.sqlite3")
    running = _record(1, outcome="running")
    src.put(running.ended("success", Figures(tokens_per_sec=5.0), at=2e9))
    src.put(_record(2))
    dst.put(running)  # our copy is still "running": the export's ended copy wins
    dst.put(_record(3))
    out = tmp_path / "export.jsonl"
    assert src.export(out) == 2
    lines = [*out.read_text().splitlines(), "not json", '{"no": "id"}', ""]
    res = dst.import_lines(lines)
    assert (res.added, res.updated, res.kept) == (1, 1, 0)
    assert res.unreadable == (
        4,
        5,
    )  # the header is line 1, the two records lines 2-3; the blank line is no record
    assert {r.model["name"] for r in dst.runs()} == {"m1", "m2", "m3"}
    assert dst.get(running.id).outcome == "success"  # type: ignore[union-attr]
    again = dst.import_lines(out.read_text().splitlines())
    assert (again.added, again.updated, again.kept, again.unreadable) == (0, 0, 2, ())


def test_import_refuses_a_file_that_is_not_an_export(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.sqlite3")
    for first in ("", "[]", '{"format": "other"}', '{"format": "dswiz-history", "schema": 99}'):
        with pytest.raises(DswizError):
            store.import_lines([first, json.dumps(_record().to_json())])
    assert store.runs() == []


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=6),
    max_leaves=8,
)
_fields = st.sampled_from(
    [
        "id",
        "started_at",
        "ended_at",
        "outcome",
        "source",
        "hardware",
        "model",
        "strategy",
        "seq_len",
        "predicted",
        "measured",
        "run_dir",
    ]
)


@settings(max_examples=400, derandomize=True, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(base=st.just(_record().to_json()), edits=st.dictionaries(_fields, _json, max_size=5))
def test_a_record_reads_back_from_any_json(base: dict, edits: dict) -> None:
    data = {**base, **edits}
    rec = Measurement.from_json(data)
    if rec is not None:
        assert Measurement.from_json(rec.to_json()) == rec  # what we read we can write and read again
        json.dumps(rec.to_json(), allow_nan=False)

"""`dswiz history` at the command line: list, JSON, export/import, and bad files as clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from wizard.history.record import Figures, Hardware, Measurement
from wizard.history.store import HistoryStore


def _dswiz(*args: str, env_db: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = {**os.environ, "DSWIZ_HISTORY": str(env_db)}
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args], capture_output=True, text=True, env=env, timeout=60
    )


def _seed(db: Path) -> Measurement:
    rec = Measurement(
        hardware=Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=141 << 30, gpus_per_node=1),
        model={"name": "llama-7b"},
        strategy={"stage": 3, "offload_optimizer": "cpu"},
        predicted=Figures(tokens_per_sec=1200.0, peak_gpu_bytes=60 << 30),
        measured=Figures(tokens_per_sec=1000.0, peak_gpu_bytes=62 << 30),
        outcome="success",
    )
    HistoryStore(db).put(rec)
    return rec


def test_lists_predicted_against_measured(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite3"
    empty = _dswiz("history", env_db=db)
    assert empty.returncode == 0 and "no runs recorded yet" in empty.stdout
    rec = _seed(db)
    out = _dswiz("history", env_db=db)
    assert out.returncode == 0, out.stderr
    assert (
        f"  {rec.id}  " in out.stdout
        and "predicted 1,200, measured 1,000 (prediction +20% off)" in out.stdout
    )
    data = json.loads(_dswiz("history", "--json", env_db=db).stdout)
    assert data["runs"][0]["id"] == rec.id and data["runs"][0]["measured"]["tokens_per_sec"] == 1000.0


def test_export_then_import_on_another_machine(tmp_path: Path) -> None:
    a, b = tmp_path / "a.sqlite3", tmp_path / "b.sqlite3"
    rec = _seed(a)
    file = tmp_path / "team.jsonl"
    assert "exported 1 run" in _dswiz("history", "--export", str(file), env_db=a).stdout
    imp = _dswiz("history", "--import", str(file), env_db=b)
    assert imp.returncode == 0 and "1 added" in imp.stdout
    assert HistoryStore(b).get(rec.id) == rec
    # a damaged copy: the readable records still come in, and the lines that did not are named
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(file.read_text() + '{"id": \n' + "garbage\n")
    again = _dswiz("history", "--import", str(damaged), env_db=b)
    assert again.returncode == 0 and "0 added, 0 updated, 1 already here" in again.stdout
    assert "2 lines of" in again.stderr and "(line 3, 4)" in again.stderr and "--export" in again.stderr


def test_export_keeps_an_existing_file_and_db_is_not_created_to_list(tmp_path: Path) -> None:
    """--export once overwrote a file unasked; --db naming no file once created its folders and an empty database."""
    a = tmp_path / "a.sqlite3"
    _seed(a)
    file = tmp_path / "mine.txt"
    file.write_text("my notes\n")
    kept = _dswiz("history", "--export", str(file), env_db=a)
    assert kept.returncode == 2 and "already exists" in kept.stderr and "--force" in kept.stderr
    assert file.read_text() == "my notes\n"
    assert "exported 1 run" in _dswiz("history", "--export", str(file), "--force", env_db=a).stdout
    missing = tmp_path / "no" / "such" / "h.db"
    listed = _dswiz("history", "--db", str(missing), env_db=a)
    assert listed.returncode == 2 and "does not exist: no run history there" in listed.stderr
    assert not (tmp_path / "no").exists()


def test_bad_inputs_are_messages_not_tracebacks(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite3"
    junk = tmp_path / "junk.jsonl"
    junk.write_text("hello\n")
    for args, db_path in (
        (("history", "--import", str(junk)), db),
        (("history", "--import", str(tmp_path / "missing.jsonl")), db),
        (("history",), tmp_path / "junk.jsonl"),  # the history file itself is not SQLite
    ):
        r = _dswiz(*args, env_db=db_path)
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert "error:" in r.stderr and "fix:" in r.stderr, r.stderr
    off = _dswiz("history", env_db=Path("off"))
    assert off.returncode != 0 and "turned off" in off.stderr


def test_a_watched_job_without_a_plan_lists_what_was_measured(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite3"
    HistoryStore(db).put(
        Measurement(
            hardware=Hardware(gpu_name="NVIDIA H200", gpu_memory_bytes=141 << 30, gpus_per_node=1),
            model={},
            strategy={},
            measured=Figures(steps=40, step_time_s=0.25, peak_gpu_bytes=3 << 30),
            outcome="ended",
            source="monitor",
        )
    )
    listed = _dswiz("history", env_db=db)
    assert listed.returncode == 0, listed.stderr
    assert "ended       a job dswiz monitor watched on NVIDIA H200" in listed.stdout
    assert "measured: steps 40, step 0.25 s, peak GPU memory 3.0 GiB; no prediction" in listed.stdout


def test_a_history_path_that_is_a_folder_is_refused_with_a_file_to_use(tmp_path: Path) -> None:
    proc = _dswiz("history", env_db=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert (
        "is a folder, not a history file" in proc.stderr and str(tmp_path / "history.sqlite3") in proc.stderr
    )
    assert "mv " not in proc.stderr  # never the advice to move the folder aside

"""`dswiz monitor` without a target watches the run started last, wherever it was made: under the runs root or
with --run-dir elsewhere (which `rundir.make_run_dir` remembers in the root's index)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runner import rundir
from runner.metrics.attach import latest_run_dir, resolve_target
from runner.rundir import STATUS_RUNNING, RunRecord
from wizard.errors import DswizError


def _started(run_dir: Path, at: float) -> Path:
    made = rundir.make_run_dir(run_dir)
    record = RunRecord(
        run_id=run_dir.name, run_dir=str(run_dir), status=STATUS_RUNNING, started_at=at,
        command=("deepspeed", "train.py"), command_line="deepspeed train.py", script="train.py",
    )  # fmt: skip
    rundir.write_run_record(made, record)
    return made


def test_the_latest_run_may_live_outside_the_runs_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = rundir.runs_root()
    older = _started(root / "20261201-100000", 1000.0)
    elsewhere = _started(tmp_path / "scratch" / "my-run", 2000.0)
    assert (root / rundir.ELSEWHERE_INDEX).read_text().splitlines() == [str(elsewhere.resolve())]
    assert latest_run_dir(root) == elsewhere.resolve()
    assert resolve_target(None).run_dir == elsewhere.resolve()
    newer = _started(root / "20261201-110000", 3000.0)  # a later run in the root wins again
    assert latest_run_dir(root) == newer
    for d in (newer, elsewhere):  # a removed run is no candidate
        for p in sorted(d.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        d.rmdir()
    assert latest_run_dir(root) == older


def test_a_damaged_index_is_no_reason_to_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = rundir.runs_root()
    root.mkdir(parents=True)
    (root / rundir.ELSEWHERE_INDEX).write_bytes(b"\xff\xfe not a path\n/nonexistent/run\n\x00\n")
    with pytest.raises(DswizError, match="no runs under"):
        latest_run_dir(root)
    run = _started(root / "20261201-100000", 1.0)
    assert latest_run_dir(root) == run


def test_a_run_whose_record_cannot_be_read_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A newer run directory with a binary run.json (a crash, a stray folder) does not hide the newest run that
    reads; alone, it is still the one chosen (and monitoring it says what is wrong)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = rundir.runs_root()
    good = _started(tmp_path / "runs" / "good", 2000.0)
    broken = rundir.make_run_dir(tmp_path / "runs" / "broken")
    (broken / rundir.RUN_JSON).write_bytes(b"\x89PNG\r\n\x1a\n")
    assert latest_run_dir(root) == good.resolve()
    shutil.rmtree(good)
    assert latest_run_dir(root) == broken.resolve()


def test_the_index_of_runs_made_elsewhere_stays_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    index = rundir.runs_root() / rundir.ELSEWHERE_INDEX
    made = [rundir.make_run_dir(tmp_path / "runs" / f"r{i:03d}") for i in range(450)]
    lines = index.read_text().splitlines()
    assert len(lines) <= 400 and lines[-1] == str(made[-1].resolve())
    assert latest_run_dir(rundir.runs_root()) == made[-1].resolve()  # the newest are kept

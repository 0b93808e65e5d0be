"""`dswiz monitor` as a user runs it: bad targets are clear errors; --json on a finished run prints its last
snapshot and the summary, exit 0."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "logs" / "cpu_fail_rank1"


def dswiz(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(state)}
    return subprocess.run(
        [sys.executable, "-m", "wizard", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ((), "no runs under"),
        (("999999999",), "no process with PID 999999999"),
        (("20990101-000000",), "no run 20990101-000000"),
        (("not-a-run",), "neither a run directory"),
        (("--interval", "-1"), "--interval -1.0 is out of range"),
    ],
)
def test_bad_targets_are_errors_with_a_fix(tmp_path: Path, args: tuple[str, ...], problem: str) -> None:
    proc = dswiz("monitor", *args, "--json", state=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert problem in proc.stderr and "fix: " in proc.stderr
    error = json.loads(proc.stdout)  # --json: the error as an object on stdout too, nothing else there
    assert problem in error["error"] and error["fix"] and error["exit_code"] == 2


def test_json_on_a_failed_run_ends_with_the_summary(tmp_path: Path) -> None:
    run = tmp_path / "dswiz" / "runs" / "20261130-014405"
    (run / "logs").mkdir(parents=True)
    shutil.copy(FIXTURE / "combined.log", run / "logs" / "combined.log")
    (run / "run.json").write_text(json.dumps({"run_id": run.name, "status": "finished", "exit_code": 1}))
    proc = dswiz("monitor", "--json", state=tmp_path)  # the latest run
    assert proc.returncode == 0, proc.stderr
    snap, summary = (json.loads(line) for line in proc.stdout.splitlines())
    assert (
        snap["event"] == "snapshot"
        and snap["source"] == "run 20261130-014405"
        and snap["job_state"] == "failed"
    )
    assert summary["event"] == "summary" and summary["exit_code"] == 1
    assert [a["code"] for a in summary["alerts"]] == ["exception", "exit"] and summary["alerts"][0][
        "rank"
    ] == 1

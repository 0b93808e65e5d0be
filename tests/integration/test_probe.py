"""`dswiz probe` end to end: the planner's top 2 strategies, each run through the real launcher (DeepSpeed on CPU,
gloo, 2 ranks) until it has its timed steps, stopped cleanly, measured, recorded in the history; the faster one is
written. Nothing is left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner import rundir
from runner.job.session import session_processes
from wizard.config.sidecar import read_sidecar
from wizard.history.store import HistoryStore

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "runner" / "examples" / "train_tiny.py"
TINY = "layers=2,hidden=128,heads=4,vocab=512"  # what train_tiny.py builds by default


@pytest.mark.timeout(1500)  # two launches to their timed steps on a 2-core machine
def test_probe_top_two_measures_both_and_writes_the_faster(tmp_path: Path, private_run_history: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "wizard",
            "probe",
            "--model",
            TINY,
            "--hardware",
            "2xA100-80GB",
            "--seq-len",
            "64",
            "--global-batch",
            "8",
            "--precision",
            "fp32",
            "--top",
            "2",
            "--steps",
            "3",
            "--warmup-steps",
            "1",
            "--nproc",
            "2",
            "--no-local-rank",  # passed on to each launch (train_tiny.py takes its rank from LOCAL_RANK then)
            "--timeout",
            "400",
            "--work-dir",
            str(tmp_path / "work"),
            "--out",
            str(tmp_path / "best"),
            "--json",
            str(TRAIN),
            "--steps",
            "200",
            "--seq-len",
            "64",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    out = json.loads(proc.stdout)
    cands = out["candidates"]
    assert len(cands) == 2 and all(c["status"] == "ok" for c in cands), cands
    speeds = [c["measured"]["tokens_per_sec"] for c in cands]
    assert out["chosen"] == speeds.index(max(speeds))
    kinds = {
        tuple(
            c["strategy"][k]
            for k in ("zero_stage", "offload_optimizer", "offload_param", "activation_checkpointing")
        )
        for c in cands
    }
    assert len(kinds) == 2  # two different strategies, not two batch sizes of one

    # each run was stopped after its timed steps (200 were asked for), cleanly, with nothing left behind
    sids: set[int] = set()
    for i in range(2):
        record = rundir.read_run_record(tmp_path / "work" / f"run-{i}")
        assert record.status == rundir.STATUS_INTERRUPTED and record.verdict is not None
        assert "--no_local_rank" in record.command
        sids |= {p.pgid for p in record.launchers}
    assert session_processes(sids) == []

    # the winner's config set is the chosen strategy, written by dswiz config's writers
    best = read_sidecar(tmp_path / "best")
    chosen = cands[out["chosen"]]["strategy"]
    assert best is not None and best.strategy.zero_stage == chosen["zero_stage"]
    assert "--no_local_rank" in (tmp_path / "best" / "launch.sh").read_text()  # as it was measured
    ds = json.loads((tmp_path / "best" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == chosen["zero_stage"] and ds["train_batch_size"] == 8

    # both runs are in the run history, as probe runs with what they measured
    entries = HistoryStore(private_run_history).runs()
    assert {e.source for e in entries} == {"probe"} and len(entries) == 2
    assert all(e.measured.tokens_per_sec for e in entries)

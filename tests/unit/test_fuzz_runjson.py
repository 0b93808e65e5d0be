"""run.json, fuzzed: a real record with values of the wrong type ("launchers": 5, "rank_pids": [1], a 5,000-digit
pid, NaN times, markup in strings). The record reader gives a RunRecord with its declared types or a DswizError
naming the key; what the monitor reads from run.json (pids, the plan, the target) never raises."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runner import rundir
from runner.metrics.plan import PlanInfo
from runner.metrics.target import read_run_json, run_pids, target_from_run_dir

from . import fuzz_support as fz

BASE = rundir.RunRecord(
    run_id="20261130-014135",
    run_dir="/tmp/run",
    status="finished",
    started_at=1700000000.0,
    command=("deepspeed", "train.py"),
    command_line="deepspeed train.py",
    env_changes={"A": "1", "B": None},
    script="train.py",
    script_args=("--steps", "10"),
    configs={"ds.json": "config/ds.json"},
    launchers=(rundir.LauncherProcess(("deepspeed",), 4242, 4242, 0),),
    rank_pids={0: 4243, 1: 4244},
    world_size=2,
    ended_at=1700000100.0,
    exit_code=0,
    launcher_exit_codes=(0,),
    verdict=rundir.RunVerdict("success", "finished", advice=("none",), evidence=("line",)),
    plan={"seq_len": 16, "total_steps": 10},
    hosts=("gpu01", "gpu02"),
    scheduler_job="slurm 42",
).to_dict()
RUN_KEYS = sorted(BASE)


def check_record(record: rundir.RunRecord | None) -> None:
    if record is None:
        return
    fz.holds(isinstance(record.run_id, str) and isinstance(record.status, str), "names are strings")
    fz.holds(isinstance(record.started_at, float), f"started_at {record.started_at!r}")
    fz.holds(all(isinstance(a, str) for a in record.command), "command is strings")
    fz.holds(all(isinstance(h, str) for h in record.hosts), "hosts are strings")
    rundir.placement_words(record)  # what the monitor shows of them never raises
    for p in record.launchers:
        fz.holds(type(p.pid) is int and type(p.pgid) is int and p.pid > 0, f"launcher {p!r}")
    fz.holds(
        all(type(k) is int and type(v) is int for k, v in record.rank_pids.items()), "rank pids are ints"
    )
    fz.holds(record.exit_code is None or type(record.exit_code) is int, "exit code is an int")
    if record.verdict is not None:
        fz.holds(all(isinstance(a, str) for a in record.verdict.advice), "advice is strings")
    json.dumps(record.to_dict())  # writable back (the free-form "plan" may hold NaN, as written)


@fz.fuzz_settings(1125)
@given(objects=fz.batch(fz.mutated(BASE, RUN_KEYS)))
def test_any_run_json_object_reads_as_a_record_or_a_finding(objects: list[Any]) -> None:
    for data in fz.cases(objects):
        check_object(data)


def check_object(data: Any) -> None:
    check_record(fz.total(rundir.RunRecord.from_dict, data))
    if isinstance(data, dict):
        pids = fz.total(run_pids, data) or []
        fz.holds(all(type(p) is int and p > 0 for p in pids), "pids are positive ints")
        fz.total(PlanInfo.from_run_json, data)


def _text(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


RAW_RUN_JSON = [
    "",
    "{",
    "[]",
    '{"launchers": ' + "[" * 3000 + "]" * 3000 + "}",
    '{"pid": 9' + "9" * 5000 + "}",
]


@fz.fuzz_settings(250)
@given(texts=fz.batch(fz.mutated(BASE, RUN_KEYS).map(_text) | st.sampled_from(RAW_RUN_JSON), 4))
def test_any_run_json_file_is_read_or_refused_with_a_finding(texts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as d:
        for text in fz.cases(texts):
            check_file(Path(d), text)


def check_file(run_dir: Path, text: str) -> None:
    (run_dir / rundir.RUN_JSON).write_text(text, encoding="utf-8")
    check_record(fz.total(rundir.read_run_record, run_dir))
    fz.total(run_pids, read_run_json(run_dir))
    fz.total(target_from_run_dir, run_dir)


def test_launchers_five_is_a_finding_naming_the_key() -> None:
    try:
        rundir.RunRecord.from_dict({**BASE, "launchers": 5})
    except Exception as e:
        assert type(e).__name__ == "DswizError" and "launchers" in e.problem and e.fix
    else:
        raise AssertionError("launchers: 5 was accepted")
    assert run_pids({**BASE, "launchers": 5, "rank_pids": [1]}) == []


def test_the_monitor_header_says_which_node_of_which_scheduler_job(tmp_path: Path) -> None:
    record = rundir.RunRecord.from_dict({**BASE, "run_dir": str(tmp_path)})
    rundir.write_run_record(tmp_path, record)
    assert target_from_run_dir(tmp_path).source == (
        "run 20261130-014135, node 0 of 2 (gpu01, gpu02), slurm job 42"
    )
    one_machine = {**BASE, "hosts": [], "scheduler_job": None}
    rundir.write_run_record(tmp_path, rundir.RunRecord.from_dict(one_machine))
    assert target_from_run_dir(tmp_path).source == "run 20261130-014135"

"""metrics.jsonl stays bounded through many rotations and merges of the real MetricsLog, and what the dashboard
reads back (iter_metrics, load_history) still covers the whole run, evenly in time; a kill at any step of a
rotation or merge loses nothing but thinned lines and duplicates nothing."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

from runner.metrics import rotation
from runner.metrics.history import Downsampler, MetricsLog, iter_metrics, load_history
from runner.metrics.snapshot import Snapshot
from tests.unit.test_fsio_kill import run_killed_at

WRITES = (
    "open",
    "fsync",
    "replace",
    "rename",
    "unlink",
)  # every file-system change on the metrics writer's path
ROTATE, ARCHIVE = 4 * 1024, 64 * 1024  # small limits: many rotations and merges in a short test


def metrics_bytes(run: Path) -> int:
    return sum(p.stat().st_size for p in run.iterdir() if p.name.startswith("metrics"))


def snap(i: int) -> Snapshot:
    return Snapshot(time=1000.0 + i, step=i, loss=1.0 / (i + 1), job_state="running")


def write_run(run: Path, start: int, stop: int) -> MetricsLog:
    log = MetricsLog(run / "metrics.jsonl", rotate_bytes=ROTATE, archive_bytes=ARCHIVE)
    for i in range(start, stop):
        log.append(snap(i))
    log.close()
    return log


def test_a_long_run_stays_bounded_and_reads_back_whole_and_even(tmp_path: Path) -> None:
    live = tmp_path / "metrics.jsonl"
    log = MetricsLog(live, rotate_bytes=ROTATE, archive_bytes=ARCHIVE)
    line_bytes = 0  # measured after the first line
    most = 0
    total = 12_000
    for i in range(total):
        log.append(snap(i))
        if i == 0:
            line_bytes = live.stat().st_size
        if i % 250 == 0:
            most = max(most, metrics_bytes(tmp_path))
    log.close()
    unbounded = total * line_bytes
    assert unbounded > 40 * (ARCHIVE + 2 * ROTATE)  # without rotation: ~40x the bound
    assert most <= ARCHIVE + 2 * ROTATE + line_bytes
    stride = max(p.stride for p in rotation.parts(live))
    assert stride >= 16  # many merges happened
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left

    steps = [s.step for s in iter_metrics(live)]
    assert steps[0] == 0 and steps[-1] == total - 1  # the whole timeline: its start and its end
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    assert min(gaps) > 0  # in order, no duplicates
    assert max(gaps) <= stride and len(steps) >= total // stride  # even: one line per `stride` snapshots

    history = Downsampler(64)
    last = load_history(live, history)
    assert last is not None and last.step == total - 1
    points = history.points()
    assert points[0].step is not None and points[0].step < total // 16
    # the chart's time axis stays even: about half the points are in the first half of the run
    first_half = sum(1 for p in points if p.step is not None and p.step < total // 2)
    assert 0.4 <= first_half / len(points) <= 0.6


def test_a_later_writer_continues_the_same_history(tmp_path: Path) -> None:
    write_run(tmp_path, 0, 3000)  # `dswiz launch`, then `dswiz monitor` attaching and writing on
    write_run(tmp_path, 3000, 6000)
    steps = [s.step for s in iter_metrics(tmp_path / "metrics.jsonl")]
    assert steps[0] == 0 and steps[-1] == 5999 and steps == sorted(set(steps))


def test_a_kill_at_any_step_of_a_rotation_and_merge_keeps_the_history(tmp_path: Path) -> None:
    before = tmp_path / "before"
    before.mkdir()
    write_run(before, 0, 1)
    n = 1
    while True:  # grow until the next appended line rotates and merges
        trial = tmp_path / "trial"
        shutil.rmtree(trial, ignore_errors=True)
        shutil.copytree(before, trial)
        parts_before = len(rotation.parts(trial / "metrics.jsonl"))
        write_run(trial, n, n + 1)
        if len(rotation.parts(trial / "metrics.jsonl")) < parts_before:
            break
        write_run(before, n, n + 1)
        n += 1
    kills = 0
    for step in range(1, 200):
        run = tmp_path / f"kill{step}"
        shutil.copytree(before, run)
        if not run_killed_at(step, lambda run=run: write_run(run, n, n + 1)):
            break
        kills += 1
        steps = [s.step for s in iter_metrics(run / "metrics.jsonl")]
        assert steps[0] == 0 and steps[-1] in (n - 1, n), f"kill at step {step}"
        assert steps == sorted(set(steps)), f"kill at step {step}: duplicates or disorder"
        write_run(run, n + 1, n + 2)  # the next writer tidies what the kill left
        names = {p.name for p in run.iterdir()}
        assert not [x for x in names if x.startswith(".")], f"kill at step {step}: {names}"
        assert {p.path.name for p in rotation.parts(run / "metrics.jsonl")} | {"metrics.jsonl"} >= names
        assert [s.step for s in iter_metrics(run / "metrics.jsonl")][-1] == n + 1
    assert kills >= 5

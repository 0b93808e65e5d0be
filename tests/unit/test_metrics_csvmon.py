"""DeepSpeed csv monitor files: recorded from real runs (header repeated after a restart), parsed incrementally."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.metrics.csvmon import (
    CsvParseState,
    latest_segment,
    metric_from_filename,
    parse_csv_lines,
    read_csv_monitor_dir,
    read_csv_monitor_file,
)

CSV_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "cpu_zero2_ok" / "csv" / "dswiz"


def test_restart_repeats_the_header_and_opens_a_new_segment() -> None:
    points = read_csv_monitor_file(CSV_DIR / "Train_Samples_lr.csv")
    assert {p.metric for p in points} == {"lr"}
    first = [p for p in points if p.segment == 0]
    second = [p for p in points if p.segment == 1]
    # Run 1: 20 steps x 8 samples (4 per rank x 2 ranks); the restarted run counts samples from 8 again.
    assert [p.samples for p in first] == list(range(8, 161, 8))
    assert second[0].samples == 8 and len(second) >= 10
    assert latest_segment(points) == second
    assert all(p.value == 0.001 for p in points)


def test_wall_clock_files_give_step_time_in_ms() -> None:
    series = read_csv_monitor_dir(CSV_DIR)
    assert {"lr", "elapsed_time_ms_step", "elapsed_time_ms_forward", "elapsed_time_ms_backward"} <= set(
        series
    )
    first = series["elapsed_time_ms_forward"][0]
    assert (
        first.samples == 8 and round(first.value, 2) == 437.54
    )  # the same number the "fwd: 437.54" line printed


def test_incremental_parsing_matches_whole_file_parsing() -> None:
    lines = (CSV_DIR / "Train_Samples_lr.csv").read_text().splitlines()
    state = CsvParseState()
    pieces = []
    for i in range(0, len(lines), 7):
        got, state = parse_csv_lines(lines[i : i + 7], state)
        pieces.extend(got)
    whole, _ = parse_csv_lines(lines)
    assert pieces == whole


def test_torn_and_bad_rows_are_counted_not_raised() -> None:
    points, state = parse_csv_lines(["step,loss_scale", "8,65536", "16,655", "24,x", "1,2,3", "32,inf"])
    assert [(p.samples, p.value) for p in points] == [(8, 65536.0), (16, 655.0)]
    assert state.bad_rows == 3 and state.metric == "loss_scale"


def test_metric_name_from_file_name() -> None:
    assert metric_from_filename("Train_Samples_elapsed_time_ms_step.csv") == "elapsed_time_ms_step"
    assert metric_from_filename("Train_Samples_train_loss.csv") == "train_loss"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=30))
def test_fuzz_never_raises(lines: list[str]) -> None:
    points, state = parse_csv_lines(lines)
    assert len(points) + state.bad_rows <= len(lines)

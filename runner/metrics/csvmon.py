"""DeepSpeed's csv monitor files (``deepspeed/monitor/csv_monitor.py``, rank 0), parsed purely.

One file per metric, ``{output_path}/{job_name}/Train_Samples_lr.csv``, header ``step,lr``; the "step" column is
the engine's ``global_samples`` (samples, not optimizer steps); the file is opened in append mode, so a restarted
job writes the header again and its sample count starts over. Each repeat of the header opens a new *segment*.
With ``wall_clock_breakdown`` the engine also writes ``Train_Samples_elapsed_time_ms_{forward,backward,step,…}``
(per optimizer step, milliseconds) — the step time without parsing any log.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CSV_SUFFIX = ".csv"


@dataclass(frozen=True)
class CsvPoint:
    """One row: ``metric`` is the header's value column (``lr``, ``loss_scale``, ``elapsed_time_ms_step``…)."""

    metric: str
    samples: int
    value: float
    segment: int = 0


@dataclass
class CsvParseState:
    """What parsing a file so far has learnt: the metric name and the current segment (restarts seen)."""

    metric: str | None = None
    segment: int = -1
    bad_rows: int = 0


def metric_from_filename(name: str) -> str:
    """``Train_Samples_elapsed_time_ms_step.csv`` -> ``elapsed_time_ms_step`` (for files whose header is lost)."""
    stem = name[: -len(CSV_SUFFIX)] if name.endswith(CSV_SUFFIX) else name
    for prefix in ("Train_Samples_", "Train_Eigenvalues_", "Train_"):
        if stem.startswith(prefix):
            return stem[len(prefix) :]
    return stem


def parse_csv_lines(
    lines: Iterable[str], state: CsvParseState | None = None
) -> tuple[list[CsvPoint], CsvParseState]:
    """Parse complete lines of one csv monitor file. Pass the returned state back in to continue incrementally.

    Never raises: malformed rows (a torn last line, text in a number column, inf/nan, a sample count outside
    0..MAX_SAMPLES) are counted in ``state.bad_rows``.
    """
    state = state if state is not None else CsvParseState()
    points: list[CsvPoint] = []
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        cells = line.split(",")
        if len(cells) != 2:
            state.bad_rows += 1
            continue
        first, second = cells[0].strip(), cells[1].strip()
        if first == "step":
            state.metric = second or state.metric
            state.segment += 1
            continue
        samples, value = _samples(first), _finite(second)
        if samples is None or value is None:
            state.bad_rows += 1
            continue
        if state.segment < 0:  # rows before any header: the file was cut; count them as the first run
            state.segment = 0
        points.append(CsvPoint(state.metric or "value", samples, value, state.segment))
    return points, state


MAX_SAMPLES = 10**15  # the "step" column counts samples: beyond this a row is noise, not a count


def _samples(text: str) -> int | None:
    """DeepSpeed writes the sample count as an int (sometimes as a float: ``8.0``); None for anything else."""
    number = _finite(text) if len(text) < 32 else None
    return int(number) if number is not None and 0 <= number <= MAX_SAMPLES else None


def _finite(text: str) -> float | None:
    try:
        number = float(text) if len(text) < 64 else math.inf
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def read_csv_monitor_file(path: Path) -> list[CsvPoint]:
    """Read one whole csv monitor file (for tests and summaries; the live path follows files incrementally)."""
    state = CsvParseState(metric=metric_from_filename(path.name))
    text = path.read_text(encoding="utf-8", errors="replace")
    points, _ = parse_csv_lines(text.splitlines(), state)
    return points


def read_csv_monitor_dir(directory: Path) -> dict[str, list[CsvPoint]]:
    """Every ``*.csv`` in a csv monitor job directory, by metric name, sorted by file name."""
    out: dict[str, list[CsvPoint]] = {}
    for path in sorted(directory.glob(f"*{CSV_SUFFIX}")):
        points = read_csv_monitor_file(path)
        metric = points[0].metric if points else metric_from_filename(path.name)
        out[metric] = points
    return out


def latest_segment(points: list[CsvPoint]) -> list[CsvPoint]:
    """Only the rows of the last run (after the last restart)."""
    if not points:
        return []
    last = points[-1].segment
    return [p for p in points if p.segment == last]

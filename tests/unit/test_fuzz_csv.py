"""DeepSpeed csv monitor rows, fuzzed: inf, nan, 1e400, 5,000-digit numbers, negative samples, text, headers
repeated. Parsing gives finite points (the rest counted as bad rows); the aggregator takes them."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from runner.metrics.aggregate import Aggregator
from runner.metrics.csvmon import CsvParseState, parse_csv_lines
from runner.metrics.plan import PlanInfo

from . import fuzz_support as fz

cells = (
    st.sampled_from(
        [
            "inf",
            "-inf",
            "nan",
            "1e400",
            "-1e400",
            fz.HUGE_DIGITS,
            "0",
            "8",
            "-8",
            "0.001",
            "1e-3",
            "step",
            "lr",
            "",
            "x",
        ]
    )
    | st.integers(-(10**20), 10**20).map(str)
    | st.floats().map(repr)
    | st.text(max_size=5)
)
rows = st.lists(cells, min_size=1, max_size=3).map(",".join)


@fz.fuzz_settings(1250)
@given(files=fz.batch(st.lists(rows, max_size=6)), metric=st.sampled_from(["lr", "loss", "loss_scale", None]))
def test_csv_rows_give_finite_points(files: list[list[str]], metric: str | None) -> None:
    for lines in fz.cases(files):
        check_rows(lines, metric)


def check_rows(lines: list[str], metric: str | None) -> None:
    points, _ = fz.total(parse_csv_lines, lines, CsvParseState(metric=metric)) or ([], None)
    for p in points:
        fz.holds(math.isfinite(p.value) and type(p.samples) is int and p.samples >= 0, f"point {p!r}")
    agg = Aggregator(PlanInfo(global_batch_size=8))
    fz.total(agg.add_csv, points, 1.0)
    fz.total(agg.snapshot, 2.0)

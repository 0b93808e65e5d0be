"""The dashboard's drawing helpers: bars with markers, sparklines, block charts, number formats."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.monitor.render import bar, block_chart, fmt_duration, fmt_num, resample, sparkline


def test_bar_fill_and_marker() -> None:
    assert bar(0.5, 10).plain == "█████░░░░░"
    assert bar(0.5, 10, marker=0.8).plain == "█████░░░│░"  # predicted peak beyond usage
    assert bar(0.9, 10, marker=0.3).plain == "███┃█████░"  # usage beyond the marker: drawn over the fill
    assert bar(None, 4).plain == "····"
    assert bar(1.7, 5).plain == "█████"


def test_sparkline_scales() -> None:
    assert sparkline([0, 50, 100], 3, lo=0, hi=100) == "▁▅█"
    assert sparkline([None, 10, 10], 3) == " ▅▅"
    assert sparkline([1, 2], 5) == "   ▁█"


def test_block_chart_rows_and_scale() -> None:
    rows, lo, hi = block_chart([0, 1, 2, 3], 4, 2)
    assert (lo, hi) == (0, 3)
    assert rows == ["  ▃█", " ▅██"]  # 1/3 of 16 eighths = 5 (▅); 2/3 = 11 = 8 + 3 (▃ above █)
    flat, flo, fhi = block_chart([0.001] * 3, 3, 2)
    assert flat == ["   ", "███"] and flo is not None and fhi is not None and flo < 0.001 < fhi  # mid-height


@given(
    st.lists(st.one_of(st.none(), st.floats(-1e9, 1e9)), max_size=300), st.integers(1, 80), st.integers(1, 8)
)
def test_block_chart_shape(values: list[float | None], width: int, height: int) -> None:
    rows, _, _ = block_chart(values, width, height)
    assert len(rows) == height and all(len(r) == width for r in rows)


def test_resample_averages_buckets() -> None:
    assert resample([1, 3, 5, 7], 2) == [2, 6]
    assert resample([1, None, None, None], 2) == [1, None]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "–"),
        (0, "0.00"),
        (3.14159, "3.14"),
        (1234, "1.23k"),
        (56_789_000, "56.8M"),
        (0.0004, "4.0e-04"),
    ],
)
def test_fmt_num(value: float | None, text: str) -> None:
    assert fmt_num(value) == text


def test_fmt_duration() -> None:
    assert [fmt_duration(s) for s in (None, 5, 75, 3725, 200_000)] == ["–", "5s", "1m15s", "1h02m", "2d07h"]


def test_the_host_panel_says_unknown_sizes_without_a_unit() -> None:
    """A finished or unreachable job has no RSS: "job RSS –", not "–G"; known sizes keep theirs."""
    from runner.metrics.snapshot import Snapshot
    from runner.monitor.widgets.host import HostPanel

    text = HostPanel().draw(Snapshot(time=0.0), 40, 4).plain  # type: ignore[union-attr]
    assert "job RSS –  CPU –" in text and "swap –" in text and "–G" not in text
    known = HostPanel().draw(Snapshot(time=0.0, job_rss_bytes=3 * 2**30, host_swap_used_bytes=0), 40, 4)
    assert "job RSS 3.0G" in known.plain and "swap 0.0G" in known.plain  # type: ignore[union-attr]

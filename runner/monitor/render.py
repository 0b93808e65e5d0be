"""Text drawing for the dashboard: bars, sparklines, block charts and number formats. Pure functions (strings and
Rich Text in, out), so the widgets stay thin and these are unit-tested without a terminal."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text

SPARK = "▁▂▃▄▅▆▇█"
BLOCKS = " ▁▂▃▄▅▆▇█"


def fmt_num(value: float | None, digits: int = 3) -> str:
    """3 significant digits with k/M/G suffixes: 1234 -> '1.23k'; None -> '–'."""
    if value is None or not math.isfinite(value):
        return "–"
    sign = "-" if value < 0 else ""
    v = abs(value)
    for suffix, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= size:
            return f"{sign}{_sig(v / size, digits)}{suffix}"
    if v != 0 and v < 0.01:
        return f"{sign}{v:.1e}"
    return f"{sign}{_sig(v, digits)}"


def _sig(v: float, digits: int) -> str:
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.{max(0, digits - 2)}f}"
    return f"{v:.{max(0, digits - 1)}f}"


def fmt_gib(n: int | float | None) -> str:
    if n is None:
        return "–"
    gib = n / 1024**3
    return f"{gib:.1f}" if gib < 100 else f"{gib:.0f}"


def fmt_gib_unit(n: int | float | None) -> str:
    """``fmt_gib`` with its unit ("12.3G"); nothing known is "–", without one."""
    return "–" if n is None else f"{fmt_gib(n)}G"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "–"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def fmt_rate(bytes_per_sec: float | None) -> str:
    if bytes_per_sec is None:
        return "–"
    for unit, size in (("GiB/s", 1024**3), ("MiB/s", 1024**2), ("KiB/s", 1024)):
        if bytes_per_sec >= size:
            return f"{bytes_per_sec / size:.1f} {unit}"
    return f"{bytes_per_sec:.0f} B/s"


def usage_style(fraction: float | None) -> str:
    if fraction is None:
        return "dim"
    if fraction >= 0.95:
        return "bold red"
    if fraction >= 0.85:
        return "yellow"
    return "green"


def bar(fraction: float | None, width: int, *, marker: float | None = None, style: str | None = None) -> Text:
    """A horizontal bar ``width`` cells wide, filled to ``fraction``; ``marker`` (0-1) draws a '│' there (the
    predicted peak, or the pinned-memory estimate)."""
    width = max(1, width)
    text = Text()
    if fraction is None:
        return Text("·" * width, style="dim")
    fraction = min(1.0, max(0.0, fraction))
    filled = fraction * width
    full = int(filled)
    partial = filled - full
    cells = ["█"] * full
    if full < width:
        cells.append(" ▏▎▍▌▋▊▉"[int(partial * 8)] if partial > 0 else "░")
        cells += ["░"] * (width - len(cells))
    mark_at = None
    if marker is not None and 0 <= marker <= 1:
        mark_at = min(width - 1, int(marker * width))
    fill_style = style or usage_style(fraction)
    for i, ch in enumerate(cells):
        if i == mark_at:
            text.append("│" if ch in "░ " else "┃", style="bold magenta")
        elif ch == "░":
            text.append(ch, style="grey35")
        else:
            text.append(ch, style=fill_style)
    return text


def sparkline(
    values: Sequence[float | None], width: int, *, lo: float | None = None, hi: float | None = None
) -> str:
    """The last ``width`` values as ▁…█ (gaps as spaces). Fixed ``lo``/``hi`` (e.g. 0-100 %) or the data's range."""
    vals = list(values)[-width:]
    known = [v for v in vals if v is not None]
    if not known:
        return " " * width
    lo = min(known) if lo is None else lo
    hi = max(known) if hi is None else hi
    span = hi - lo
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
        elif span <= 0:
            out.append(SPARK[len(SPARK) // 2])
        else:
            level = int((min(hi, max(lo, v)) - lo) / span * (len(SPARK) - 1) + 0.5)
            out.append(SPARK[level])
    return "".join(out).rjust(width)


def resample(values: Sequence[float | None], width: int) -> list[float | None]:
    """Fit a series to ``width`` columns: average buckets when longer, keep as is when shorter."""
    n = len(values)
    if n <= width:
        return list(values)
    out: list[float | None] = []
    for c in range(width):
        a, b = c * n // width, (c + 1) * n // width
        bucket = [v for v in values[a:b] if v is not None]
        out.append(sum(bucket) / len(bucket) if bucket else None)
    return out


def block_chart(
    values: Sequence[float | None], width: int, height: int
) -> tuple[list[str], float | None, float | None]:
    """A column chart ``height`` rows tall (eighth-block resolution), newest on the right.
    Returns (rows top to bottom, low, high) so the caller can label the scale."""
    cols = resample(values, width)
    known = [v for v in cols if v is not None]
    if not known:
        return [" " * width for _ in range(height)], None, None
    lo, hi = min(known), max(known)
    if hi - lo <= 1e-9 * max(abs(hi), abs(lo)):  # flat (up to float noise from averaging)
        hi = lo = max(known)
    if hi == lo:  # a flat series sits mid-height, not on the floor or at the ceiling
        d = abs(hi) * 0.5 or 1.0
        lo, hi = hi - d, hi + d
    span = hi - lo
    levels = [None if v is None else (v - lo) / span * height * 8 for v in cols]
    rows = []
    for r in range(height - 1, -1, -1):
        line = []
        for lvl in levels:
            if lvl is None:
                line.append(" ")
                continue
            eighths = round(lvl) - r * 8
            line.append("█" if eighths >= 8 else BLOCKS[max(0, eighths)])
        rows.append("".join(line).rjust(width))
    return rows, lo, hi

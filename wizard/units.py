"""Byte sizes: parsing what users type and formatting what we show. Binary units (GiB) throughout."""

from __future__ import annotations

import re

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": KiB,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": MiB,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": GiB,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": TiB,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """'80GB' -> 80e9, '80GiB' -> 80*2**30, '512' -> 512. Raises ValueError with the accepted forms."""
    m = _SIZE_RE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size; write e.g. 80GiB, 80GB, 512MiB or a number of bytes")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def fmt_bytes(n: int | float | None, *, precision: int = 1) -> str:
    """1.5 * 2**30 -> '1.5 GiB'; None -> 'unknown'."""
    if n is None:
        return "unknown"
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size:
            return f"{sign}{value / size:.{precision}f} {unit}"
    return f"{sign}{int(value)} B"


def fmt_percent(share: float) -> str:
    """0.05 -> '5 %': a share of something (a margin, MFU, a speed-up), to the whole percent."""
    return f"{share * 100:.0f} %"

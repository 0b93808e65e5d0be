"""Byte sizes and counts: parsing what users and files say, formatting what we show. Binary units (GiB)
throughout. Every parser here is total on its input type: a bounded value, or ValueError / None, never an
OverflowError (a 5,000-digit number is refused: Python's own int() raises past 4,300 digits)."""

from __future__ import annotations

import math
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
    "p": 1000**5,
    "pb": 1000**5,
    "pib": 1024**5,
    "e": 1000**6,
    "eb": 1000**6,
    "eib": 1024**6,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
MAX_SIZE = 2**60  # 1 EiB: above any memory or disk dswiz plans for
_SIGNED_DIGITS_RE = re.compile(r"[-+]?\d+")


def parse_size(text: str) -> int:
    """'80GB' -> 80e9, '80GiB' -> 80*2**30, '512' -> 512 (at most MAX_SIZE). Raises ValueError with the forms."""
    size = _size_or_none(text)
    if size is None:
        raise ValueError(f"{text!r:.80} is not a size; write e.g. 80GiB, 80GB, 512MiB or a number of bytes")
    if size > MAX_SIZE:
        raise ValueError(f"{text.strip()} is above 1 EiB; write the size in GiB or TiB, e.g. 80GiB")
    return int(size)


def _size_or_none(text: str) -> float | None:
    m = _SIZE_RE.match(text) if len(text) < 64 else None
    if not m or m.group(2).lower() not in _UNITS:
        return None
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


# The largest share of each card a plan may keep free (--margin 50, the wizard's field, a dswiz-plan.json's
# safety_margin): more kept free than used is a typo.
MAX_SAFETY_MARGIN = 0.5


def parse_card_size(text: str) -> int:
    """A memory or disk size a user plans for (--gpu-memory, --nvme, the wizard's field): ``parse_size``, at least
    1 MiB, and with a unit where a bare number would be under it (`24` once planned for a 24-byte card). Raises
    ValueError saying what to write."""
    if _size_or_none(text) is None:
        raise ValueError(f"{text.strip()!r:.80} is not a size; write e.g. 24GiB, 80GB or 512MiB")
    size = parse_size(text)  # above 1 EiB: its own message
    if size <= 0:  # 0 once fell back to the card's whole memory unsaid
        raise ValueError(f"{text.strip()!r} is no memory: give a size above 0, e.g. 24GiB")
    if size < MiB and text.strip().replace(".", "", 1).isdigit():
        raise ValueError(
            f"{text.strip()} has no unit, so it is {size} bytes: give one, e.g. {text.strip()}GiB"
        )
    if size < MiB:  # `1B` planned for a card nothing fits on
        raise ValueError(f"{text.strip()} is less than 1 MiB: give the memory in MiB or GiB, e.g. 24GiB")
    return size


def whole_number(text: str, *, limit: int = 10**18) -> int | None:
    """Decimal digits with an optional sign as an int when ``abs(value) < limit``; None for anything else (text,
    a float, a 5,000-digit string). For numbers read from logs and files, where an absurd value means noise."""
    if not _SIGNED_DIGITS_RE.fullmatch(text):
        return None
    if len(text.lstrip("+-").lstrip("0")) > len(str(limit)):
        return None
    value = int(text)
    return value if abs(value) < limit else None


def fmt_bytes(n: int | float | None, *, precision: int = 1, up: bool = False) -> str:
    """1.5 * 2**30 -> '1.5 GiB'; None -> 'unknown'. ``up``: rounded up, for a size that must be at least ``n`` (24.01
    GiB reads '24.1 GiB', never the '24.0 GiB' of a card it does not fit)."""
    if n is None:
        return "unknown"
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size:
            shown = value / size
            if up:
                shown = math.ceil(round(shown * 10**precision, 6)) / 10**precision
            return f"{sign}{shown:.{precision}f} {unit}"
    return f"{sign}{int(value)} B"


def fmt_percent(share: float) -> str:
    """0.05 -> '5 %': a share of something (a margin, MFU, a speed-up), to the whole percent."""
    return f"{share * 100:.0f} %"

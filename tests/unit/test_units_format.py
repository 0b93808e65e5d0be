"""How sizes are shown: to one decimal, and rounded up where the size is one a card must have at least."""

from __future__ import annotations

import pytest

from wizard.units import GiB, MiB, TiB, fmt_bytes


@pytest.mark.parametrize(
    ("n", "plain", "at_least"),
    [
        (24 * GiB, "24.0 GiB", "24.0 GiB"),
        (24 * GiB + 10 * MiB, "24.0 GiB", "24.1 GiB"),  # a card of 24.0 GiB does not hold it
        (int(23.96 * GiB), "24.0 GiB", "24.0 GiB"),
        (int(1.5 * TiB) + GiB, "1.5 TiB", "1.6 TiB"),
        (512, "512 B", "512 B"),
    ],
)
def test_a_size_shown_at_least_never_reads_below_itself(n: int, plain: str, at_least: str) -> None:
    assert fmt_bytes(n) == plain and fmt_bytes(n, up=True) == at_least
    value, unit = at_least.split()
    assert float(value) * {"GiB": GiB, "TiB": TiB, "B": 1}[unit] >= n

"""What the process tests ask of the OS, race-free."""

from __future__ import annotations

import psutil


def living(pids: list[int]) -> list[int]:
    """The processes of ``pids`` still running (a zombie has ended; one that ends while it is looked at too)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:  # gone, between the listing and the look
            continue
    return out

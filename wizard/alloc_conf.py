"""PyTorch's CUDA allocator settings in a job's environment: whether it runs with expandable segments, and the
variable that turns them on while keeping the user's other settings. Pure: an environment mapping in, strings out.

PyTorch reads ``PYTORCH_ALLOC_CONF`` and, where that is unset, ``PYTORCH_CUDA_ALLOC_CONF`` (the older name, still
read, with a deprecation warning: c10/core/AllocatorConfig.cpp, PyTorch 2.9 on): comma-separated ``key:value`` pairs
such as ``expandable_segments:True,max_split_size_mb:512``. Expandable segments exist since PyTorch 2.1; the older
variable is the one every such version reads.
"""

from __future__ import annotations

from collections.abc import Mapping

ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")  # in the order PyTorch looks
EXPANDABLE = "expandable_segments"


def alloc_conf(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(variable, value) of the allocator settings PyTorch would read from ``environ``; None when there are none."""
    for name in ALLOC_CONF_VARS:
        value = environ.get(name)
        if value:
            return name, value
    return None


def _pairs(value: str) -> list[tuple[str, str]]:
    out = []
    for item in value.split(","):
        key, _, val = item.partition(":")
        if key.strip():
            out.append((key.strip(), val.strip()))
    return out


def expandable_segments(environ: Mapping[str, str]) -> bool:
    """Whether a job started with ``environ`` runs PyTorch's allocator with expandable segments."""
    found = alloc_conf(environ)
    if found is None:
        return False
    values = [v for k, v in _pairs(found[1]) if k == EXPANDABLE]
    return bool(values) and values[-1].lower() == "true"  # the last setting of a key wins


def with_expandable_segments(environ: Mapping[str, str]) -> tuple[str, str]:
    """The variable and value that turn expandable segments on for a job started from ``environ``, keeping the
    user's other allocator settings (and a setting of expandable segments to False becomes True)."""
    name, value = alloc_conf(environ) or ("PYTORCH_CUDA_ALLOC_CONF", "")
    kept = [f"{k}:{v}" for k, v in _pairs(value) if k != EXPANDABLE]
    return name, ",".join([*kept, f"{EXPANDABLE}:True"])

"""PyTorch's CUDA allocator settings in a job's environment: whether it runs with expandable segments, and the
variables that turn them on while keeping the user's other settings. Pure: an environment mapping in, strings out.

Two variables carry the settings, comma-separated ``key:value`` pairs such as
``expandable_segments:True,max_split_size_mb:512``: ``PYTORCH_CUDA_ALLOC_CONF``, which every PyTorch with expandable
segments (2.1 on) reads, and ``PYTORCH_ALLOC_CONF``, its newer name (2.9 on). Which one wins where both are set
differs between PyTorch's allocator configs and versions (c10/core/AllocatorConfig.cpp reads the newer name first,
c10/cuda/CUDAAllocatorConfig.h the older one), so dswiz counts expandable segments as on only when every variable
that is set turns them on, and turning them on sets both where both are set. PyTorch accepts only ``True`` and
``False`` as the value (anything else stops the job at its first allocation), so only ``True`` counts.
"""

from __future__ import annotations

from collections.abc import Mapping

ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
EXPANDABLE = "expandable_segments"


def _items(value: str) -> list[tuple[str, str, str]]:
    """(key, value, the item as written less its outer whitespace) of each comma-separated ``key:value`` item whose
    key is not empty."""
    out = []
    for item in value.split(","):
        key, _, val = item.partition(":")
        if key.strip():
            out.append((key.strip(), val.strip(), item.strip()))
    return out


def _turns_on(value: str) -> bool:
    values = [v for k, v, _ in _items(value) if k == EXPANDABLE]
    return bool(values) and values[-1] == "True"  # the last setting of a key wins


def expandable_segments(environ: Mapping[str, str]) -> bool:
    """Whether a job started with ``environ`` runs PyTorch's allocator with expandable segments, whichever of the
    two variables its PyTorch reads. A variable set to nothing counts as set: PyTorch reads it (no setting at all)
    instead of the other one (c10/core/AllocatorConfig.cpp checks the variable for null, not for empty)."""
    confs = [environ[name] for name in ALLOC_CONF_VARS if name in environ]
    return bool(confs) and all(_turns_on(c) for c in confs)


def planned_expandable_segments(flag: bool | None, environ: Mapping[str, str]) -> bool:
    """--expandable-segments / --no-expandable-segments, else what ``environ``'s allocator settings say."""
    return flag if flag is not None else expandable_segments(environ)


def with_expandable_segments(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that turn expandable segments on for a job started from ``environ``: the older one always, the
    newer one where it is set (even to nothing), each keeping the user's other settings as written (a setting of False
    becomes True). wizard.config.job_env writes the same rule in bash for launch.sh and job.sbatch."""
    out = {}
    for name in ALLOC_CONF_VARS:
        if name in environ or name == "PYTORCH_CUDA_ALLOC_CONF":
            kept = [text for k, _, text in _items(environ.get(name, "")) if k != EXPANDABLE]
            out[name] = ",".join([*kept, f"{EXPANDABLE}:True"])
    return out


def refused_settings(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """(variable, value) of each expandable-segments setting PyTorch refuses: it parses only True and False
    (c10/core/AllocatorConfig.h ``ConfigTokenizer::toBool``) and stops the job at its first allocation otherwise."""
    return [
        (name, value)
        for name in ALLOC_CONF_VARS
        for key, value, _ in _items(environ.get(name, ""))
        if key == EXPANDABLE and value not in ("True", "False")
    ]

"""Which GPUs a CUDA process will see under CUDA_VISIBLE_DEVICES, decided the way CUDA decides it.

Mirrors ``torch.cuda._parse_visible_devices`` (torch's model of the CUDA runtime): entries are comma-separated
indices (strtoul-like: "1gpu" is 1) or UUIDs ("GPU-…", a unique prefix is enough); the first entry that names no
GPU ends the list (everything after it is ignored); a repeated entry hides *all* GPUs; an empty value hides all.
Indices count in CUDA_DEVICE_ORDER order -- equal to NVML's PCI order only with CUDA_DEVICE_ORDER=PCI_BUS_ID or
identical GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wizard.hardware.report import GPUInfo


@dataclass(frozen=True)
class Visibility:
    visible: tuple[GPUInfo, ...]  # in CUDA's order
    hidden: tuple[GPUInfo, ...]
    problems: tuple[str, ...] = ()  # entries CUDA will not use, each in words
    uses_indices: bool = False  # the value numbers GPUs (so CUDA_DEVICE_ORDER matters)


def _strtoul(text: str) -> int:
    """Leading integer of ``text`` like C's strtoul as torch models it; -1 when there is none."""
    end = 0
    for i, c in enumerate(text):
        if not (c.isdigit() or (i == 0 and c in "+-")):
            break
        end = i + 1
    try:
        return int(text[:end]) if end else -1
    except ValueError:  # a lone sign
        return -1


def apply_visible_devices(value: str | None, gpus: Sequence[GPUInfo]) -> Visibility:
    """The GPUs (of ``gpus``, all NVML sees, in NVML order) that CUDA_VISIBLE_DEVICES=``value`` leaves visible."""
    if value is None:
        return Visibility(tuple(gpus), ())
    chosen: list[GPUInfo] = []
    problems: list[str] = []
    entries = value.split(",")
    uses_indices = not value.strip().startswith(("GPU-", "MIG-"))
    if value.strip() == "":
        problems.append("it is empty, which hides every GPU")
        entries = []
    if value.strip().startswith("MIG-"):
        # MIG instance UUIDs are not GPU UUIDs: the GPUs in MIG mode are the ones that can serve them.
        mig = tuple(g for g in gpus if g.mig_mode)
        return Visibility(mig, tuple(g for g in gpus if g not in mig))
    for position, raw in enumerate(entries):
        entry = raw.strip()
        rest = ",".join(e.strip() for e in entries[position + 1 :])
        ignored = f" (CUDA also ignores what follows: {rest!r})" if rest else ""
        gpu: GPUInfo | None
        if uses_indices:
            index = _strtoul(entry)
            if index < 0:
                problems.append(f"entry {entry!r} is not a GPU index{ignored}")
                break
            gpu = gpus[index] if index < len(gpus) else None
            if gpu is None:
                have = f"0-{len(gpus) - 1}" if gpus else "none"
                problems.append(f"entry {entry!r} names GPU {index}, but the GPUs here are {have}{ignored}")
                break
        else:
            matches = [g for g in gpus if g.uuid and g.uuid.startswith(entry)] if entry else []
            if len(matches) != 1:
                why = "matches no GPU's UUID" if not matches else "matches several GPUs' UUIDs"
                problems.append(f"entry {entry!r} {why}{ignored}")
                break
            gpu = matches[0]
        if any(g is gpu for g in chosen):
            problems.append(f"entry {entry!r} repeats a GPU, so CUDA shows no GPU at all")
            chosen = []
            break
        chosen.append(gpu)
    hidden = tuple(g for g in gpus if not any(g is c for c in chosen))
    return Visibility(tuple(chosen), hidden, tuple(problems), uses_indices)

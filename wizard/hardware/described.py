"""Described hardware: plan on a laptop or a login node for a machine that is not this one.

Three ways to say what the target is:
  * a spec string: ``8xA100-80GB``, ``A100-80GB`` (one GPU), ``2x8xH100`` (nodes x GPUs per node), with optional
    ``,key=value`` options: ``8xH100,ram=1TiB,nvme=3.5TB,net=400``;
  * a YAML profile (``describe_profile``), the same facts as named keys, for a cluster described once;
  * a ``dswiz detect --json`` file written on the target machine (loaded by ``wizard.hardware.get_hardware``).
Every mistake is a ``DswizError`` that names the problem and lists the valid forms.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from wizard.errors import DswizError, quoted, read_user_text
from wizard.hardware.catalog import described_gpu, find_model, known_names
from wizard.hardware.report import DiskInfo, GPUInfo, HardwareReport, HostInfo
from wizard.units import parse_card_size, whole_number

SPEC_FORMS = "8xA100-80GB, A100-80GB (one GPU), 2x8xH100 (nodes x GPUs per node), 8xH100,ram=1TiB,nvme=3.5TB"
DEFAULT_NVME_PATH = "/local_nvme"  # where a described NVMe drive is assumed mounted (DeepSpeed docs' example)
MAX_GPUS_PER_NODE = 64
MAX_PROFILE_CHARS = 1024 * 1024

_SPEC_RE = re.compile(r"^\s*(?:(\d+)\s*[xX×*]\s*)?(?:(\d+)\s*[xX×*]\s*)?([A-Za-z0-9].*?)\s*$")

# spec option -> profile key it stands for
_OPTION_KEYS = {
    "ram": "ram",
    "mem": "gpu_memory",
    "gpu_mem": "gpu_memory",
    "gpu_memory": "gpu_memory",
    "nvme": "nvme",
    "nvme_path": "nvme_path",
    "nvme_read": "nvme_read",
    "nvme_write": "nvme_write",
    "shm": "shm",
    "cores": "cpu_cores",
    "cpus": "cpu_cores",
    "cpu_cores": "cpu_cores",
    "net": "inter_node_gbps",
    "inter_node_gbps": "inter_node_gbps",
    "libaio": "libaio",
}

PROFILE_KEYS: dict[str, str] = {
    "gpu": "GPU model from the catalog, e.g. A100-80GB (or any name, with gpu_memory set)",
    "gpus_per_node": "GPUs in each node (default 1)",
    "nodes": "number of nodes (default 1)",
    "gpu_memory": "memory per GPU, e.g. 80GiB (overrides the catalog)",
    "compute_capability": "for a GPU the catalog lacks, e.g. '8.9'",
    "tflops_bf16": "dense bf16 peak TFLOP/s, for a GPU the catalog lacks",
    "ram": "host RAM per node, e.g. 1TiB",
    "cpu_cores": "CPU cores per node",
    "shm": "/dev/shm size per node, e.g. 64GiB",
    "nvme": "local NVMe capacity per node, e.g. 3.5TB",
    "nvme_path": f"where that NVMe is mounted (default {DEFAULT_NVME_PATH})",
    "nvme_read": "what DeepSpeed's async_io reads from that NVMe, the node's ranks together, in GB/s (or with MB/s "
    "after it), e.g. 6.5 (DeepSpeed's ds_io measures it; default: 3 GB/s assumed)",
    "nvme_write": "what it writes to that NVMe, the node's total, in GB/s (or MB/s), e.g. 4 (default: 3 GB/s assumed)",
    "libaio": "whether libaio is installed on the nodes (true/false)",
    "inter_node_gbps": "network bandwidth between nodes in Gbit/s, e.g. 400",
    "name": "a label for this profile",
}


def describe(spec: str) -> HardwareReport:
    """Parse a hardware spec string (see ``SPEC_FORMS``) into a described ``HardwareReport``."""
    head, *options = [part.strip() for part in spec.split(",")]
    m = _SPEC_RE.match(head)
    if not head or not m:
        raise DswizError(f"cannot read the hardware spec {spec!r}", f"write it like {SPEC_FORMS}")
    first, second, model_text = m.groups()
    if second is not None:
        nodes, gpus = first, second
    else:
        nodes, gpus = "1", first if first is not None else "1"
    # the counts stay text here: _count checks them (a 5,000-digit count is a finding, not a ValueError)
    profile: dict[str, Any] = {"gpu": model_text, "gpus_per_node": gpus, "nodes": nodes}
    for option in options:
        key, sep, value = option.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise DswizError(
                f"option {option!r} in hardware spec {spec!r} is not key=value",
                f"options are {', '.join(sorted(_OPTION_KEYS))}, e.g. 8xH100,ram=1TiB,nvme=3.5TB",
            )
        if key not in _OPTION_KEYS:
            raise DswizError(
                f"unknown option {key!r} in hardware spec {spec!r}{_did_you_mean(key, _OPTION_KEYS)}",
                f"options are {', '.join(sorted(_OPTION_KEYS))}",
            )
        if _OPTION_KEYS[key] in profile:  # the later one once won unsaid
            raise DswizError(f"{key} is given twice in hardware spec {spec!r}", "give each option once")
        profile[_OPTION_KEYS[key]] = value.strip()
    return _build(profile, description=spec.strip(), where=f"hardware spec {spec!r}")


# How a spec (not a YAML profile) writes each value, for the fixes: "write e.g. gpus_per_node=8" is no spec.
_SPEC_EXAMPLES = {
    "gpus_per_node": "8xH100 (GPUs per node before the GPU name)",
    "nodes": "2x8xH100 (nodes x GPUs per node)",
    "inter_node_gbps": "2x8xH100,net=400 (Gbit/s between nodes)",
    "gpu_memory": "1xH100,mem=80GiB",
    "cpu_cores": "8xH100,cores=64",
    "nvme_read": "8xH100,nvme=3.5TB,nvme_read=6.5 (GB/s)",
    "nvme_write": "8xH100,nvme=3.5TB,nvme_write=4 (GB/s)",
    "tflops_bf16": "a YAML profile with tflops_bf16: 400",
}


def _write_e_g(key: str, where: str, profile_example: str) -> str:
    spec = where.startswith("hardware spec") and key in _SPEC_EXAMPLES
    return f"write e.g. {_SPEC_EXAMPLES[key] if spec else profile_example}"


def describe_profile(path: Path) -> HardwareReport:
    """Read a YAML hardware profile (keys: ``PROFILE_KEYS``) into a described ``HardwareReport``."""
    import yaml  # only profiles need it; keeps `dswiz detect` fast

    if not path.exists():
        raise DswizError(
            f"hardware profile {str(path)!r} not found", f"check the path, or give a spec like {SPEC_FORMS}"
        )
    text = read_user_text(
        path,
        "a hardware profile",
        f"pass a YAML profile (keys: {', '.join(PROFILE_KEYS)}) or a spec like {SPEC_FORMS}",
    )
    if len(text) > MAX_PROFILE_CHARS:
        raise DswizError(
            f"hardware profile {str(path)!r} is {len(text):,} characters: not a profile (those are a few lines)",
            "pass the YAML profile itself (keys: " + ", ".join(PROFILE_KEYS) + ")",
        )
    try:
        data = yaml.safe_load(text)
    except (
        ValueError,
        RecursionError,
    ):  # a 4,300+-digit number (int() refuses it); nesting Python cannot recurse
        raise DswizError(
            f"hardware profile {str(path)!r} holds a number too long or nesting too deep to read",
            "write each key as a plain value: 'gpus_per_node: 8'",
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise DswizError(
            f"hardware profile {str(path)!r} is not valid YAML{where}",
            "fix the YAML syntax (key: value lines)",
        ) from None
    if not isinstance(data, Mapping):
        raise DswizError(
            f"hardware profile {str(path)!r} must be a mapping of keys to values",
            f"write e.g. 'gpu: A100-80GB' and 'gpus_per_node: 8' (known keys: {', '.join(PROFILE_KEYS)})",
        )
    where = f"hardware profile {str(path)!r}"
    for key in data:
        if key not in PROFILE_KEYS:
            raise DswizError(
                f"unknown key {key!r} in {where}{_did_you_mean(str(key), PROFILE_KEYS)}",
                "known keys: " + "; ".join(f"{k}: {v}" for k, v in PROFILE_KEYS.items()),
            )
    if "gpu" not in data:
        raise DswizError(f"{where} does not say which GPU", "add e.g. 'gpu: A100-80GB'")
    description = str(data.get("name") or path)
    return _build(dict(data), description=description, where=where)


def _did_you_mean(word: str, choices: Mapping[str, object]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _size(profile: Mapping[str, Any], key: str, where: str) -> int | None:
    value = profile.get(key)
    if value is None:
        return None
    if isinstance(value, (bool, int, float)):
        raise DswizError(
            f"{key}: {value} in {where} has no unit",
            f"write it with a unit, e.g. {key}={value}GiB (or {value}GB)",
        )
    try:
        return parse_card_size(str(value))  # a bare number is bytes: `ram=64` is refused, not 64 B of RAM
    except ValueError as e:
        raise DswizError(f"{key} in {where}: {e}", f"write it like {key}=80GiB") from None


def _count(profile: Mapping[str, Any], key: str, where: str, default: int, maximum: int) -> int:
    value = profile.get(key, default)
    n = None if isinstance(value, (bool, float)) else whole_number(str(value).strip(), limit=10**12)
    if n is None:
        raise DswizError(
            f"{key} in {where} must be a whole number, not {quoted(value)}",
            _write_e_g(key, where, f"{key}: 8"),
        ) from None
    if not 1 <= n <= maximum:
        raise DswizError(
            f"{key} in {where} must be between 1 and {maximum}, not {n}", _write_e_g(key, where, f"{key}: 8")
        )
    return n


def _number(profile: Mapping[str, Any], key: str, where: str) -> float | None:
    value = profile.get(key)
    if value is None:
        return None
    text = str(value).strip()
    m = re.fullmatch(r"(\d{1,15}(?:\.\d{1,15})?)\s*(?:(?i:gbps|gbit/s)|Gb/s|(GB/s))?", text)
    if isinstance(value, bool) or not m or float(m.group(1)) <= 0:  # 0 once read as "unknown"
        raise DswizError(
            f"{key} in {where} must be a number above 0 (at most 15 digits), not {quoted(value)}",
            _write_e_g(key, where, f"{key}: 400"),
        )
    return float(m.group(1)) * (8 if m.group(2) else 1)  # GB/s is bytes: 8 bits each


def _drive_rate(profile: Mapping[str, Any], key: str, where: str) -> float | None:
    """A drive's rate in bytes/s from GB/s (a bare number, or with GB/s or MB/s after it)."""
    value = profile.get(key)
    if value is None:
        return None
    m = re.fullmatch(r"(\d{1,6}(?:\.\d{1,6})?)\s*(GB/s|MB/s)?", str(value).strip(), re.IGNORECASE)
    rate = float(m.group(1)) * (1e6 if (m.group(2) or "").lower() == "mb/s" else 1e9) if m else 0.0
    if isinstance(value, bool) or not 1e6 <= rate <= 1e12:
        raise DswizError(
            f"{key} in {where} must be a drive's rate in GB/s or MB/s (0.001 to 1000 GB/s), not {quoted(value)}",
            _write_e_g(key, where, f"{key}: 6.5"),
        )
    if profile.get("nvme") is None:
        raise DswizError(
            f"{key} in {where} is the rate of the NVMe drive, which it does not describe",
            "describe the drive too: " + _write_e_g(key, where, "nvme: 3.5TB beside it"),
        )
    return rate


def _flag(profile: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = profile.get(key)
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    raise DswizError(
        f"{key} in {where} must be true or false, not {value!r}", f"write {key}=true or {key}=false"
    )


def _gpu(profile: Mapping[str, Any], where: str, memory: int | None) -> GPUInfo:
    name = str(profile["gpu"]).strip()
    custom = "compute_capability" in profile or "tflops_bf16" in profile
    try:
        model = find_model(name, memory_bytes=memory)
    except DswizError as e:
        if memory is None or not custom:
            raise DswizError(f"{e.problem} in {where}", e.fix) from None
        model = None
    if model is not None and not custom:
        return described_gpu(model, 0, memory_bytes=memory)
    # A GPU the catalog lacks (or whose figures the profile overrides): take what the profile says.
    cc_text = str(profile.get("compute_capability", "")).strip()
    cc_match = re.fullmatch(r"(\d{1,3})\.(\d{1,3})", cc_text)
    if cc_text and not cc_match:
        raise DswizError(
            f"compute_capability in {where} must look like 8.0, not {cc_text!r}", "write e.g. '8.9'"
        )
    cc = (int(cc_match.group(1)), int(cc_match.group(2))) if cc_match else None
    base = described_gpu(model, 0, memory_bytes=memory) if model is not None else GPUInfo(index=0, name=name)
    return replace(
        base,
        memory_total_bytes=memory if memory is not None else base.memory_total_bytes,
        memory_free_bytes=memory if memory is not None else base.memory_free_bytes,
        compute_capability=cc or base.compute_capability,
        peak_tflops_bf16=_number(profile, "tflops_bf16", where) or base.peak_tflops_bf16,
    )


def _build(profile: Mapping[str, Any], *, description: str, where: str) -> HardwareReport:
    gpus_per_node = _count(profile, "gpus_per_node", where, 1, MAX_GPUS_PER_NODE)
    nodes = _count(profile, "nodes", where, 1, 100_000)
    gpu = _gpu(profile, where, _size(profile, "gpu_memory", where))
    nvme = _size(profile, "nvme", where)
    read, write = _drive_rate(profile, "nvme_read", where), _drive_rate(profile, "nvme_write", where)
    disks: tuple[DiskInfo, ...] = ()
    if nvme is not None:
        path = str(profile.get("nvme_path") or DEFAULT_NVME_PATH)
        disks = (
            DiskInfo(
                path,
                "described",
                "unknown",
                nvme,
                nvme,
                nvme=True,
                rotational=False,
                read_bytes_per_s=read,
                write_bytes_per_s=write,
            ),
        )
    cores = profile.get("cpu_cores")
    host = HostInfo(
        cpu_model=None,
        logical_cores=_count(profile, "cpu_cores", where, 1, 100_000) if cores is not None else None,
        ram_total_bytes=_size(profile, "ram", where),
        ram_available_bytes=_size(profile, "ram", where),
        shm_bytes=_size(profile, "shm", where),
        disks=disks,
        libaio=_flag(profile, "libaio", where),
    )
    return HardwareReport(
        source="described",
        gpus=tuple(replace(gpu, index=i) for i in range(gpus_per_node)),
        host=host,
        nodes=nodes,
        description=description,
        inter_node_gbps=_number(profile, "inter_node_gbps", where),
    )


def looks_like_profile_path(spec: str) -> bool:
    """A file path rather than a spec string: a path separator before any option (a spec's options may hold one:
    nvme_path=/mnt/nvme, nvme_read=6GB/s), a YAML/JSON suffix, or a file that exists."""
    head = spec if "=" not in spec else spec.split(",", 1)[0]
    return "/" in head or spec.lower().endswith((".yaml", ".yml", ".json")) or Path(spec).is_file()


__all__ = [
    "PROFILE_KEYS",
    "SPEC_FORMS",
    "describe",
    "describe_profile",
    "known_names",
    "looks_like_profile_path",
]

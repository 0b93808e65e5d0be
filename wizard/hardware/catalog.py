"""A small built-in catalog of NVIDIA GPUs: memory, compute capability, dense peak TFLOP/s, bandwidths.

Used twice: to fill the peak figures of a *detected* GPU (NVML knows the name, not the TFLOP/s), and to build a
*described* GPU ("8xA100-80GB") on a machine that has none. Figures are the vendor's datasheet numbers for dense
math (the sparse figures NVIDIA quotes first are exactly 2x these); bf16/fp16 are tensor-core figures with FP32
accumulation (what training uses), fp32 is the non-tensor FP32 rate. ``memory_bytes`` is the total as NVML /
nvidia-smi reports it (a little under the marketing figure on some cards), because that is what a process can use.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace

from wizard.errors import DswizError
from wizard.hardware.report import GPUInfo
from wizard.units import MiB


@dataclass(frozen=True)
class GPUModel:
    key: str  # what users type: "A100-80GB" (matched case-insensitively, separators optional)
    nvml_name: str  # what NVML reports for this card, e.g. "NVIDIA A100-SXM4-80GB"
    family: str  # "A100"
    form: str  # "SXM", "PCIe", "NVL" or "card" (single-form boards)
    memory_gb: int  # the marketing figure ("80" GB)
    memory_bytes: int  # total as NVML reports it
    compute_capability: tuple[int, int]
    tflops_bf16: float | None  # None: no bf16 tensor cores (pre-Ampere)
    tflops_fp16: float
    tflops_fp32: float
    memory_bandwidth_gbs: float  # GB/s
    nvlink_gbs: float  # NVLink GB/s per GPU (bidirectional, as NVIDIA quotes it); 0: none built in
    pcie_gen: int
    nvlink_bridge_gbs: float = 0.0  # optional NVLink bridge between PCIe boards, when one exists
    source: str = ""  # the datasheet the figures come from


# Order matters within a family: the first form listed is what a bare family name means ("H100" -> SXM).
# fmt: off
CATALOG: tuple[GPUModel, ...] = (
    # NVIDIA Tesla V100 datasheet (2020): SXM2 125 TF tensor, 15.7 TF FP32, 900 GB/s, NVLink 300 GB/s;
    # PCIe 112 / 14 TF. No bf16.
    GPUModel("V100-16GB", "Tesla V100-SXM2-16GB", "V100", "SXM", 16, 16160 * MiB, (7, 0), None, 125.0, 15.7,
             900.0, 300.0, 3, source="NVIDIA Tesla V100 datasheet"),
    GPUModel("V100-32GB", "Tesla V100-SXM2-32GB", "V100", "SXM", 32, 32510 * MiB, (7, 0), None, 125.0, 15.7,
             900.0, 300.0, 3, source="NVIDIA Tesla V100 datasheet"),
    GPUModel("V100-PCIE-16GB", "Tesla V100-PCIE-16GB", "V100", "PCIe", 16, 16160 * MiB, (7, 0), None, 112.0,
             14.0, 900.0, 0.0, 3, source="NVIDIA Tesla V100 datasheet"),
    GPUModel("V100-PCIE-32GB", "Tesla V100-PCIE-32GB", "V100", "PCIe", 32, 32510 * MiB, (7, 0), None, 112.0,
             14.0, 900.0, 0.0, 3, source="NVIDIA Tesla V100 datasheet"),
    # NVIDIA T4 datasheet: 65 TF mixed-precision tensor, 8.1 TF FP32, 320 GB/s, PCIe Gen3.
    GPUModel("T4", "Tesla T4", "T4", "card", 16, 15360 * MiB, (7, 5), None, 65.0, 8.1, 320.0, 0.0, 3,
             source="NVIDIA T4 datasheet"),
    # NVIDIA A10 datasheet: 125 TF bf16/fp16 tensor (250 sparse), 31.2 TF FP32, 600 GB/s, PCIe Gen4.
    GPUModel("A10", "NVIDIA A10", "A10", "card", 24, 23028 * MiB, (8, 6), 125.0, 125.0, 31.2, 600.0, 0.0, 4,
             source="NVIDIA A10 datasheet"),
    # AWS G5 A10G (AWS-only variant of GA102): 70 TF tensor, 35 TF FP32, 600 GB/s (AWS EC2 G5 page; Baseten,
    # "NVIDIA A10 vs A10G for ML model inference"). NVIDIA publishes no datasheet for it.
    GPUModel("A10G", "NVIDIA A10G", "A10G", "card", 24, 23028 * MiB, (8, 6), 70.0, 70.0, 35.0, 600.0, 0.0, 4,
             source="AWS EC2 G5 / Baseten A10 vs A10G"),
    # NVIDIA L4 datasheet: 242 TF fp16/bf16 with sparsity (121 dense), 30.3 TF FP32, 300 GB/s, PCIe Gen4.
    GPUModel("L4", "NVIDIA L4", "L4", "card", 24, 23034 * MiB, (8, 9), 121.0, 121.0, 30.3, 300.0, 0.0, 4,
             source="NVIDIA L4 datasheet"),
    # NVIDIA L40S datasheet: 733 TF bf16/fp16 sparse (362.05 dense), 91.6 TF FP32, 864 GB/s, PCIe Gen4.
    GPUModel("L40S", "NVIDIA L40S", "L40S", "card", 48, 46068 * MiB, (8, 9), 362.05, 362.05, 91.6, 864.0, 0.0,
             4, source="NVIDIA L40S datasheet"),
    # NVIDIA Turing architecture whitepaper (TU102, Appendix A): TITAN RTX 130.5 TF fp16 tensor with FP32
    # accumulate (full rate on TITAN), 16.3 TF FP32, 672 GB/s, 24 GB, NVLink bridge 100 GB/s (2 x 50).
    # https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf
    GPUModel("TITAN-RTX", "NVIDIA TITAN RTX", "TITANRTX", "card", 24, 24220 * MiB, (7, 5), None, 130.5, 16.3,
             672.0, 0.0, 3, nvlink_bridge_gbs=100.0, source="NVIDIA Turing architecture whitepaper (TITAN RTX)"),
    # Same whitepaper: RTX 2080 Ti (Founders Edition) 56.9 TF fp16 tensor with FP32 accumulate (GeForce: half
    # the FP16-accumulate 113.8), 14.2 TF FP32, 616 GB/s, 11 GB, NVLink bridge 100 GB/s.
    GPUModel("RTX2080TI", "NVIDIA GeForce RTX 2080 Ti", "RTX2080TI", "card", 11, 11019 * MiB, (7, 5), None, 56.9,
             14.2, 616.0, 0.0, 3, nvlink_bridge_gbs=100.0,
             source="NVIDIA Turing architecture whitepaper (RTX 2080 Ti)"),
    # NVIDIA Ampere GA102 GPU architecture whitepaper, Appendix A: RTX 3080 59.5 TF fp16/bf16 tensor with FP32
    # accumulate (119 with FP16 accumulate), 29.8 TF FP32, 760 GB/s, 10 GB, no NVLink.
    # https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf
    GPUModel("RTX3080", "NVIDIA GeForce RTX 3080", "RTX3080", "card", 10, 10240 * MiB, (8, 6), 59.5, 59.5, 29.8,
             760.0, 0.0, 4, source="NVIDIA Ampere GA102 whitepaper (RTX 3080)"),
    # Same whitepaper: RTX A6000 154.8 TF fp16/bf16 tensor (309.7 sparse), 38.7 TF FP32, 768 GB/s, 48 GB,
    # NVLink bridge 112.5 GB/s; NVIDIA RTX A6000 datasheet agrees.
    GPUModel("RTX-A6000", "NVIDIA RTX A6000", "RTXA6000", "card", 48, 49140 * MiB, (8, 6), 154.8, 154.8, 38.7,
             768.0, 0.0, 4, nvlink_bridge_gbs=112.5, source="NVIDIA RTX A6000 datasheet / GA102 whitepaper"),
    # NVIDIA A40 datasheet: 149.7 TF bf16/fp16 tensor (299.4 sparse), 37.4 TF FP32, 696 GB/s, 48 GB, NVLink
    # bridge 112.5 GB/s, PCIe Gen4.
    # https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf
    GPUModel("A40", "NVIDIA A40", "A40", "card", 48, 46068 * MiB, (8, 6), 149.7, 149.7, 37.4, 696.0, 0.0, 4,
             nvlink_bridge_gbs=112.5, source="NVIDIA A40 datasheet"),
    # NVIDIA L40 datasheet: 181.05 TF bf16/fp16 tensor (362.1 sparse), 90.5 TF FP32, 864 GB/s, 48 GB, PCIe
    # Gen4, no NVLink.  https://www.nvidia.com/en-us/data-center/l40/
    GPUModel("L40", "NVIDIA L40", "L40", "card", 48, 46068 * MiB, (8, 9), 181.05, 181.05, 90.5, 864.0, 0.0, 4,
             source="NVIDIA L40 datasheet"),
    # NVIDIA Ada Lovelace architecture whitepaper, Appendix: RTX 6000 Ada 364.2 TF fp16/bf16 tensor with FP32
    # accumulate (728.5 sparse), 91.1 TF FP32, 960 GB/s, 48 GB, no NVLink; RTX 6000 Ada datasheet agrees.
    # https://images.nvidia.com/aem-dam/Solutions/Data-Center/l4/nvidia-ada-gpu-architecture-whitepaper-v2.1.pdf
    GPUModel("RTX6000-ADA", "NVIDIA RTX 6000 Ada Generation", "RTX6000ADA", "card", 48, 49140 * MiB, (8, 9),
             364.2, 364.2, 91.1, 960.0, 0.0, 4, source="NVIDIA Ada Lovelace whitepaper (RTX 6000 Ada)"),
    # Same whitepaper: RTX 4080 97.5 TF fp16/bf16 tensor with FP32 accumulate (GeForce: half the FP16-accumulate
    # 194.9), 48.7 TF FP32, 716.8 GB/s, 16 GB, no NVLink.
    GPUModel("RTX4080", "NVIDIA GeForce RTX 4080", "RTX4080", "card", 16, 16376 * MiB, (8, 9), 97.5, 97.5, 48.7,
             716.8, 0.0, 4, source="NVIDIA Ada Lovelace whitepaper (RTX 4080)"),
    # NVIDIA Ampere GA102 whitepaper (RTX 3090): 71 TF fp16/bf16 tensor with FP32 accumulate (142 with FP16
    # accumulate), 35.6 TF FP32, 936 GB/s, NVLink bridge 112.5 GB/s.
    GPUModel("RTX3090", "NVIDIA GeForce RTX 3090", "RTX3090", "card", 24, 24576 * MiB, (8, 6), 71.0, 71.0, 35.6,
             936.0, 0.0, 4, nvlink_bridge_gbs=112.5, source="NVIDIA Ampere GA102 whitepaper"),
    # NVIDIA Ada Lovelace architecture whitepaper (RTX 4090): 165.2 TF fp16/bf16 tensor with FP32 accumulate,
    # 82.6 TF FP32, 1008 GB/s, no NVLink.
    GPUModel("RTX4090", "NVIDIA GeForce RTX 4090", "RTX4090", "card", 24, 24564 * MiB, (8, 9), 165.2, 165.2,
             82.6, 1008.0, 0.0, 4, source="NVIDIA Ada Lovelace whitepaper"),
    # NVIDIA A100 datasheet: 312 TF bf16/fp16 (624 sparse), 19.5 TF FP32; SXM 40GB 1555 GB/s, 80GB 2039 GB/s,
    # NVLink 600 GB/s; PCIe 40GB 1555 GB/s, 80GB 1935 GB/s, optional NVLink bridge 600 GB/s.
    GPUModel("A100-40GB", "NVIDIA A100-SXM4-40GB", "A100", "SXM", 40, 40960 * MiB, (8, 0), 312.0, 312.0, 19.5,
             1555.0, 600.0, 4, source="NVIDIA A100 datasheet"),
    GPUModel("A100-80GB", "NVIDIA A100-SXM4-80GB", "A100", "SXM", 80, 81920 * MiB, (8, 0), 312.0, 312.0, 19.5,
             2039.0, 600.0, 4, source="NVIDIA A100 datasheet"),
    GPUModel("A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB", "A100", "PCIe", 40, 40960 * MiB, (8, 0), 312.0, 312.0,
             19.5, 1555.0, 0.0, 4, nvlink_bridge_gbs=600.0, source="NVIDIA A100 datasheet"),
    GPUModel("A100-PCIE-80GB", "NVIDIA A100 80GB PCIe", "A100", "PCIe", 80, 81920 * MiB, (8, 0), 312.0, 312.0,
             19.5, 1935.0, 0.0, 4, nvlink_bridge_gbs=600.0, source="NVIDIA A100 datasheet"),
    # NVIDIA H100 datasheet: SXM 1979 TF bf16/fp16 sparse (989.4 dense), 67 TF FP32, 3.35 TB/s, NVLink 900 GB/s;
    # PCIe 1513 sparse (756 dense), 51 TF FP32, 2 TB/s, bridge 600 GB/s; NVL 94GB 1671 sparse (835.5 dense),
    # 60 TF FP32, 3.9 TB/s, bridge 600 GB/s. PCIe Gen5.
    GPUModel("H100", "NVIDIA H100 80GB HBM3", "H100", "SXM", 80, 81559 * MiB, (9, 0), 989.4, 989.4, 67.0,
             3350.0, 900.0, 5, source="NVIDIA H100 datasheet"),
    GPUModel("H100-PCIE", "NVIDIA H100 PCIe", "H100", "PCIe", 80, 81559 * MiB, (9, 0), 756.0, 756.0, 51.0,
             2000.0, 0.0, 5, nvlink_bridge_gbs=600.0, source="NVIDIA H100 datasheet"),
    GPUModel("H100-NVL", "NVIDIA H100 NVL", "H100", "NVL", 94, 95830 * MiB, (9, 0), 835.5, 835.5, 60.0, 3900.0,
             0.0, 5, nvlink_bridge_gbs=600.0, source="NVIDIA H100 datasheet"),
    # NVIDIA H200 datasheet: SXM 141 GB, 1979 TF bf16/fp16 sparse (989.4 dense), 67 TF FP32, 4.8 TB/s, NVLink
    # 900 GB/s; NVL 1671 sparse (835.5 dense), 60 TF FP32, 4.8 TB/s, 2/4-way bridge 900 GB/s. PCIe Gen5.
    GPUModel("H200", "NVIDIA H200", "H200", "SXM", 141, 143771 * MiB, (9, 0), 989.4, 989.4, 67.0, 4800.0, 900.0,
             5, source="NVIDIA H200 datasheet"),
    GPUModel("H200-NVL", "NVIDIA H200 NVL", "H200", "NVL", 141, 143771 * MiB, (9, 0), 835.5, 835.5, 60.0,
             4800.0, 0.0, 5, nvlink_bridge_gbs=900.0, source="NVIDIA H200 datasheet"),
    # NVIDIA HGX B200 datasheet, per GPU: 180 GB HBM3e, 7.7 TB/s, 4.5 PF bf16/fp16 sparse (2250 TF dense),
    # 75 TF FP32, NVLink 5 1.8 TB/s, PCIe Gen5 host link.
    GPUModel("B200", "NVIDIA B200", "B200", "SXM", 180, 183359 * MiB, (10, 0), 2250.0, 2250.0, 75.0, 7700.0,
             1800.0, 5, source="NVIDIA HGX B200 datasheet"),
)
# fmt: on

# (family, pattern) in the order they are tried: longer names before their prefixes (A10G before A10).
_FAMILY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fam, re.compile(pat))
    for fam, pat in (
        ("RTX4090", r"(?<!\d)4090(?!\d)(?!\s*-?TI)"),
        ("RTX4080", r"(?<!\d)4080(?!\d)(?!\s*-?(?:TI|SUPER))"),
        ("RTX3080", r"(?<!\d)3080(?!\d)(?!\s*-?TI)"),
        ("RTX2080TI", r"(?<!\d)2080\s*-?\s*TI(?![A-Z])"),
        ("TITANRTX", r"TITAN\s*-?\s*RTX"),
        ("RTX6000ADA", r"(?<![A0-9])6000\s*-?\s*ADA"),
        ("RTXA6000", r"(?<![0-9])A6000(?!\d)"),
        ("A40", r"(?<![A-Z0-9])A40(?![0-9])"),
        ("L40", r"(?<![A-Z0-9])L40(?![0-9S])"),
        ("RTX3090", r"(?<!\d)3090(?!\d)(?!\s*-?TI)"),
        ("H200", r"(?<![A-Z0-9])H200(?!\d)"),
        ("H100", r"(?<![A-Z0-9])H100(?!\d)"),
        ("B200", r"(?<![A-Z0-9])B200(?!\d)"),
        ("A100", r"(?<![A-Z0-9])A100(?!\d)"),
        ("A10G", r"(?<![A-Z0-9])A10G(?![A-Z0-9])"),
        ("A10", r"(?<![A-Z0-9])A10(?![0-9G])"),
        ("L40S", r"(?<![A-Z0-9])L40S(?![A-Z0-9])"),
        ("L4", r"(?<![A-Z0-9])L4(?![0-9])"),
        ("T4", r"(?<![A-Z0-9])T4(?![0-9])"),
        ("V100", r"(?<![A-Z0-9])V100(?![0-9S])"),
    )
)
_MEMORY_RE = re.compile(r"(?<![A-Z0-9])(\d{2,3})\s*G(?:I?B)?(?![A-Z0-9])")


@dataclass(frozen=True)
class _ParsedName:
    family: str | None
    form: str | None
    memory_gb: int | None


def _parse_name(text: str) -> _ParsedName:
    t = text.upper().replace("_", "-")
    family = next((fam for fam, pat in _FAMILY_PATTERNS if pat.search(t)), None)
    if re.search(r"PCI-?E", t):
        form: str | None = "PCIe"
    elif re.search(r"(?<![A-Z])NVL(?![A-Z])", t):
        form = "NVL"
    elif "SXM" in t:
        form = "SXM"
    else:
        form = None
    m = _MEMORY_RE.search(t)
    return _ParsedName(family, form, int(m.group(1)) if m else None)


def _family_models(family: str) -> list[GPUModel]:
    return [m for m in CATALOG if m.family == family]


def _narrow(parsed: _ParsedName) -> list[GPUModel]:
    """Catalog entries consistent with what the name says, preferring the family's default form."""
    assert parsed.family is not None
    found = _family_models(parsed.family)
    if parsed.form is not None:
        found = [m for m in found if m.form == parsed.form or m.form == "card"]
    if parsed.memory_gb is not None:
        found = [m for m in found if m.memory_gb == parsed.memory_gb]
    if parsed.form is None and len(found) > 1:
        default_form = _family_models(parsed.family)[0].form
        found = [m for m in found if m.form == default_form] or found
    return found


def _closest_by_memory(models: list[GPUModel], memory_bytes: int) -> GPUModel:
    return min(models, key=lambda m: abs(m.memory_bytes - memory_bytes))


def match_nvml_name(name: str, memory_total_bytes: int | None = None) -> GPUModel | None:
    """The catalog entry for a GPU as NVML names it ("NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB"), or None.

    Lenient: where the name leaves a choice (an A100 without its memory in the name), the memory NVML reports
    decides; a card the catalog does not know gives None (its peak figures stay unknown).
    """
    parsed = _parse_name(name)
    if parsed.family is None:
        return None
    found = _narrow(parsed)
    if not found:  # e.g. a memory size the catalog lacks: fall back to the family, closest memory
        found = _family_models(parsed.family)
        if parsed.form is not None:
            found = [m for m in found if m.form == parsed.form] or found
    if len(found) > 1 and memory_total_bytes is not None:
        return _closest_by_memory(found, memory_total_bytes)
    return found[0]


def known_names() -> list[str]:
    """What a user may type, in catalog order."""
    return [m.key for m in CATALOG]


def find_model(text: str, *, memory_bytes: int | None = None) -> GPUModel:
    """The catalog entry a user means by ``text`` ("A100-80GB", "h100", "RTX 4090"); strict.

    Raises DswizError naming the problem, the known names and the closest ones when the name is unknown, or
    ambiguous (a bare "A100" is 40 or 80 GB) unless ``memory_bytes`` (a memory override) settles it.
    """
    parsed = _parse_name(text)
    if parsed.family is None:
        close = difflib.get_close_matches(
            text.upper().replace(" ", ""), [k.upper() for k in known_names()], 3, 0.5
        )
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise DswizError(
            f"unknown GPU model {text!r}{hint}",
            # the way out for a card the catalog lacks first: a short status line (the wizard at 80x24) cuts the list
            f"describe a card the catalog lacks in a YAML profile with gpu_memory set, or use one of: "
            f"{', '.join(known_names())}",
        )
    found = _narrow(parsed)
    family = _family_models(parsed.family)
    if not found:
        raise DswizError(
            f"no {parsed.family} matches {text!r}",
            f"the {parsed.family} variants are: {', '.join(m.key for m in family)}",
        )
    if len(found) > 1:
        if memory_bytes is not None:
            return _closest_by_memory(found, memory_bytes)
        raise DswizError(
            f"{text!r} is ambiguous: {' or '.join(m.key for m in found)}",
            f"name the memory size, e.g. {found[-1].key}",
        )
    return found[0]


def described_gpu(model: GPUModel, index: int, *, memory_bytes: int | None = None) -> GPUInfo:
    """A GPU that is described, not detected: everything from the catalog (memory may be overridden)."""
    total = memory_bytes if memory_bytes is not None else model.memory_bytes
    return GPUInfo(
        index=index,
        name=model.nvml_name,
        memory_total_bytes=total,
        memory_free_bytes=total,
        compute_capability=model.compute_capability,
        mig_mode=False,  # a described GPU is a whole GPU
        peak_tflops_bf16=model.tflops_bf16,
        peak_tflops_fp16=model.tflops_fp16,
        peak_tflops_fp32=model.tflops_fp32,
        memory_bandwidth_gbs=model.memory_bandwidth_gbs,
        nvlink_gbs=model.nvlink_gbs,
        pcie_gen=model.pcie_gen,
        catalog_key=model.key,
    )


def with_catalog_figures(gpu: GPUInfo) -> GPUInfo:
    """A detected GPU with the figures NVML cannot give (peak TFLOP/s, bandwidths) filled from the catalog.

    NVLink bandwidth follows what NVML saw: no active link -> 0.0; active links on a board whose NVLink is an
    optional bridge -> the bridge's figure; links unknown -> the catalog's built-in figure.
    """
    model = match_nvml_name(gpu.name, gpu.memory_total_bytes)
    if model is None:
        return gpu
    if gpu.nvlink_count is None:
        nvlink = model.nvlink_gbs
    elif gpu.nvlink_count == 0:
        nvlink = 0.0
    else:
        nvlink = model.nvlink_gbs or model.nvlink_bridge_gbs
    return replace(
        gpu,
        compute_capability=gpu.compute_capability or model.compute_capability,
        peak_tflops_bf16=model.tflops_bf16,
        peak_tflops_fp16=model.tflops_fp16,
        peak_tflops_fp32=model.tflops_fp32,
        memory_bandwidth_gbs=model.memory_bandwidth_gbs,
        nvlink_gbs=nvlink,
        pcie_gen=gpu.pcie_gen or model.pcie_gen,
        catalog_key=model.key,
    )

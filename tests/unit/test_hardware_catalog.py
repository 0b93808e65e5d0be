"""The GPU catalog: every entry is found by its own NVML name and by what users type; figures are consistent."""

from __future__ import annotations

import pytest

from wizard.errors import DswizError
from wizard.hardware.catalog import (
    CATALOG,
    described_gpu,
    find_model,
    match_nvml_name,
    with_catalog_figures,
)
from wizard.hardware.report import GPUInfo
from wizard.units import GiB


@pytest.mark.parametrize("model", CATALOG, ids=lambda m: m.key)
def test_every_entry_is_found_by_its_nvml_name_and_its_key(model) -> None:
    assert match_nvml_name(model.nvml_name, model.memory_bytes) is model
    assert find_model(model.key) is model
    assert find_model(model.key.lower()) is model


@pytest.mark.parametrize("model", CATALOG, ids=lambda m: m.key)
def test_figures_are_consistent(model) -> None:
    # bf16 tensor cores arrive with Ampere (8.0); datasheets give bf16 == fp16 from then on.
    assert (model.tflops_bf16 is not None) == (model.compute_capability >= (8, 0))
    if model.tflops_bf16 is not None:
        assert model.tflops_bf16 == model.tflops_fp16
    assert model.tflops_fp16 > model.tflops_fp32 > 0
    # NVML's total is a little under the marketing figure, never above it by more than rounding.
    assert 0.9 * model.memory_gb * 1e9 < model.memory_bytes < 1.1 * model.memory_gb * GiB
    assert model.memory_bandwidth_gbs > 0 and model.pcie_gen in (3, 4, 5)
    assert model.source


def test_keys_are_unique() -> None:
    keys = [m.key for m in CATALOG]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    ("nvml_name", "memory", "key"),
    [
        ("NVIDIA H200", None, "H200"),
        ("NVIDIA A100-SXM4-80GB", None, "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", None, "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", None, "A100-PCIE-40GB"),
        ("NVIDIA A100 80GB PCIe", None, "A100-PCIE-80GB"),
        ("Tesla V100-SXM2-32GB", None, "V100-32GB"),
        ("Tesla V100-SXM2-16GB", None, "V100-16GB"),
        ("NVIDIA GeForce RTX 4090", None, "RTX4090"),
        ("NVIDIA GeForce RTX 3090", None, "RTX3090"),
        ("NVIDIA H100 80GB HBM3", None, "H100"),
        ("NVIDIA H100 PCIe", None, "H100-PCIE"),
        ("NVIDIA H100 NVL", None, "H100-NVL"),
        ("Tesla T4", None, "T4"),
        ("NVIDIA A10G", None, "A10G"),
        ("NVIDIA L4", None, "L4"),
        ("NVIDIA L40S", None, "L40S"),
        ("NVIDIA L40", None, "L40"),
        ("NVIDIA A40", None, "A40"),
        ("NVIDIA RTX A6000", None, "RTX-A6000"),
        ("NVIDIA RTX 6000 Ada Generation", None, "RTX6000-ADA"),
        ("NVIDIA TITAN RTX", None, "TITAN-RTX"),
        ("NVIDIA GeForce RTX 2080 Ti", None, "RTX2080TI"),
        ("NVIDIA GeForce RTX 3080", None, "RTX3080"),
        ("NVIDIA GeForce RTX 4080", None, "RTX4080"),
        ("NVIDIA B200", None, "B200"),
        # A name without its memory: the memory NVML reports decides.
        ("NVIDIA A100-SXM4", 80 * GiB, "A100-80GB"),
        ("NVIDIA A100-SXM4", 40 * GiB, "A100-40GB"),
        ("Tesla V100-SXM2", 32 * GiB, "V100-32GB"),
    ],
)
def test_nvml_names(nvml_name: str, memory: int | None, key: str) -> None:
    model = match_nvml_name(nvml_name, memory)
    assert model is not None and model.key == key


@pytest.mark.parametrize(
    "name", ["NVIDIA RTX A4000", "NVIDIA GeForce RTX 3090 Ti", "NVIDIA RTX A5000", "Tesla V100S-PCIE-32GB"]
)
def test_unknown_cards_are_not_guessed(name: str) -> None:
    assert match_nvml_name(name, 48 * GiB) is None


@pytest.mark.parametrize(
    ("typed", "key"),
    [
        ("h100", "H100"),
        ("H100 SXM", "H100"),
        ("H100-80GB", "H100"),
        ("H100-94GB", "H100-NVL"),
        ("h100-pcie", "H100-PCIE"),
        ("rtx 4090", "RTX4090"),
        ("4090", "RTX4090"),
        ("a100-80g", "A100-80GB"),
        ("A100_80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("l40s", "L40S"),
    ],
)
def test_what_users_type(typed: str, key: str) -> None:
    assert find_model(typed).key == key


def test_bare_a100_is_ambiguous_and_says_how_to_choose() -> None:
    with pytest.raises(DswizError) as err:
        find_model("A100")
    assert "ambiguous" in err.value.problem
    assert "A100-40GB" in err.value.problem and "A100-80GB" in err.value.problem
    assert err.value.fix and "memory" in err.value.fix


def test_a_memory_override_settles_the_ambiguity() -> None:
    assert find_model("A100", memory_bytes=80 * GiB).key == "A100-80GB"


def test_unknown_model_suggests_close_names_and_lists_all() -> None:
    with pytest.raises(DswizError) as err:
        find_model("B300")
    assert "did you mean" in err.value.problem and "B200" in err.value.problem
    assert err.value.fix and all(m.key in err.value.fix for m in CATALOG)


def test_memory_size_the_family_lacks() -> None:
    with pytest.raises(DswizError) as err:
        find_model("A100-50GB")
    assert "A100-80GB" in (err.value.fix or "")


def test_described_gpu_carries_catalog_figures() -> None:
    model = find_model("A100-80GB")
    gpu = described_gpu(model, 3)
    assert gpu.index == 3 and gpu.name == "NVIDIA A100-SXM4-80GB"
    assert gpu.memory_total_bytes == model.memory_bytes
    assert gpu.peak_tflops_bf16 == 312.0 and gpu.supports_bf16 is True
    assert gpu.memory_bandwidth_gbs == 2039.0 and gpu.nvlink_gbs == 600.0 and gpu.pcie_gen == 4


def test_detected_gpu_gets_figures_and_nvlink_follows_nvml() -> None:
    base = GPUInfo(index=0, name="NVIDIA H100 PCIe", memory_total_bytes=80 * GiB, compute_capability=(9, 0))
    assert with_catalog_figures(base).peak_tflops_bf16 == 756.0
    assert with_catalog_figures(base).nvlink_gbs == 0.0  # PCIe board, links unknown: no built-in NVLink
    bridged = with_catalog_figures(GPUInfo(**{**base.__dict__, "nvlink_count": 12}))
    assert bridged.nvlink_gbs == 600.0  # active links on a PCIe board: its bridge
    sxm = GPUInfo(index=0, name="NVIDIA H100 80GB HBM3", nvlink_count=0)
    assert with_catalog_figures(sxm).nvlink_gbs == 0.0  # NVML saw no active link
    unknown = GPUInfo(index=0, name="NVIDIA RTX A5000")
    assert with_catalog_figures(unknown) == unknown


@pytest.mark.parametrize("model", CATALOG, ids=lambda m: m.key)
def test_every_row_names_its_vendor_document(model) -> None:
    assert any(word in model.source for word in ("datasheet", "whitepaper", "AWS")), model.source


def test_the_seed_blogs_titan_rtx_is_known() -> None:
    # The DeepSpeed/HF seed blog's machine: 2 x TITAN RTX, 24 GB, Turing (7.5): fp16, no bf16, an NVLink bridge.
    titan = find_model("titan rtx")
    assert (titan.memory_gb, titan.compute_capability, titan.tflops_bf16) == (24, (7, 5), None)
    assert titan.nvlink_bridge_gbs > 0

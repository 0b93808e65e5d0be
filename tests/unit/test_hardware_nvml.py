"""GPU detection through the NVML seam, with a fake pynvml module (no driver exists here) and with the real one."""

from __future__ import annotations

import pytest

from tests.fakes.fake_nvml import (
    FakeGPU,
    FakeNvml,
    NVMLError_DriverNotLoaded,
    NVMLError_GpuIsLost,
    NVMLError_LibraryNotFound,
    NVMLError_NoPermission,
    NVMLError_NotSupported,
    NVMLError_Unknown,
    bridged_pair,
    hgx_h200,
)
from wizard.hardware.detect import detect
from wizard.hardware.nvml import Nvml, read_gpus
from wizard.units import GiB

CLEAN_ENV: dict[str, str] = {}


def codes(report) -> set[str]:
    return {h.code for h in report.hazards}


def test_zero_gpus() -> None:
    fake = FakeNvml([])
    r = detect(nvml=fake, env=CLEAN_ENV)
    assert r.gpus == () and r.physical_gpu_count == 0
    assert r.no_gpu_reason == "the NVIDIA driver is loaded but reports no GPUs"
    assert r.software.nvidia_driver == "580.95.05" and r.software.cuda_driver == "13.0"
    assert "no-gpu" in codes(r)
    assert fake.initialized == 0  # every nvmlInit was matched by nvmlShutdown


def test_one_gpu() -> None:
    fake = FakeNvml([FakeGPU(memory_used=512 * 1024**2, nvlinks=None, mig=None)])
    r = detect(nvml=fake, env=CLEAN_ENV)
    (g,) = r.gpus
    assert g.index == 0 and g.name == "NVIDIA H200" and g.uuid.startswith("GPU-")
    assert g.memory_total_bytes == 143771 * 1024**2
    assert g.memory_free_bytes == g.memory_total_bytes - 512 * 1024**2
    assert g.compute_capability == (9, 0) and g.supports_bf16 and g.supports_fp16
    assert g.mig_mode is False and g.pci_bus_id == "00000000:18:00.0"
    assert g.nvlink_count == 0 and g.nvlink_peers == () and g.nvlink_gbs == 0.0
    assert g.catalog_key == "H200" and g.peak_tflops_bf16 == 989.4 and g.memory_bandwidth_gbs == 4800.0
    assert g.pcie_gen == 5
    assert r.no_gpu_reason is None and "no-gpu" not in codes(r)
    assert fake.initialized == 0


def test_eight_gpus_on_nvswitches() -> None:
    r = detect(nvml=FakeNvml(hgx_h200(8)), env=CLEAN_ENV)
    assert r.gpus_per_node == 8 and [g.index for g in r.gpus] == list(range(8))
    assert len({g.uuid for g in r.gpus}) == 8
    for g in r.gpus:
        assert g.nvlink_count == 18 and g.nvlink_gbs == 900.0
        # The remote ends are NVSwitches, not GPUs: they keep their PCI bus ids.
        assert g.nvlink_peers == (
            "00000000:A0:00.0",
            "00000000:A1:00.0",
            "00000000:A2:00.0",
            "00000000:A3:00.0",
        )
    assert not {"mixed-gpus", "mig-enabled", "gpu-busy"} & codes(r)


def test_nvlink_peers_that_are_gpus_are_named_by_index() -> None:
    r = detect(nvml=FakeNvml(bridged_pair()), env=CLEAN_ENV)
    assert [g.nvlink_peers for g in r.gpus] == [("gpu1",), ("gpu0",)]
    assert all(g.nvlink_count == 4 and g.nvlink_gbs == 112.5 for g in r.gpus)  # the 3090's bridge


def test_mig() -> None:
    gpus = hgx_h200(2)
    gpus[1].mig = (1, 1)
    r = detect(nvml=FakeNvml(gpus), env=CLEAN_ENV)
    assert [g.mig_mode for g in r.gpus] == [False, True]
    (mig,) = [h for h in r.hazards if h.code == "mig-enabled"]
    assert "GPU 1" in mig.what and "-mig 0" in mig.fix


@pytest.mark.parametrize(
    ("error", "reason_has"),
    [
        (NVMLError_LibraryNotFound, "libnvidia-ml.so.1"),
        (NVMLError_DriverNotLoaded, "kernel driver is not loaded"),
        (NVMLError_NoPermission, "no permission"),
        (NVMLError_Unknown, "NVML could not start"),
    ],
)
def test_nvml_missing_or_broken(error, reason_has: str) -> None:
    r = detect(nvml=FakeNvml(hgx_h200(2), init_error=error), env=CLEAN_ENV)
    assert r.gpus == () and reason_has in (r.no_gpu_reason or "")
    (no_gpu,) = [h for h in r.hazards if h.code == "no-gpu"]
    assert no_gpu.what.startswith("no NVIDIA GPU found: ") and "--hardware" in no_gpu.fix


def test_real_pynvml_on_this_machine_says_why_there_is_no_gpu() -> None:
    # This machine (and CI) has no NVIDIA driver: the real module must not raise.
    reading = read_gpus()
    if reading.gpus:
        pytest.skip("this machine has an NVIDIA GPU")
    assert reading.reason


@pytest.mark.parametrize(
    ("func", "field", "expected"),
    [
        ("nvmlDeviceGetUUID", "uuid", None),
        ("nvmlDeviceGetMemoryInfo", "memory_total_bytes", None),
        ("nvmlDeviceGetCudaComputeCapability", "compute_capability", (9, 0)),  # the catalog knows an H200's
        ("nvmlDeviceGetPciInfo", "pci_bus_id", None),
        ("nvmlDeviceGetMaxPcieLinkGeneration", "pcie_gen", 5),  # the catalog's figure
        ("nvmlDeviceGetMigMode", "mig_mode", False),  # NotSupported: this GPU cannot do MIG
        ("nvmlDeviceGetNvLinkState", "nvlink_count", 0),  # NotSupported: no NVLink
    ],
)
def test_a_query_raising_not_supported_leaves_that_field_unknown(func: str, field: str, expected) -> None:
    gpus = hgx_h200(2)
    gpus[0].fail[func] = NVMLError_NotSupported
    r = detect(nvml=FakeNvml(gpus), env=CLEAN_ENV)
    assert getattr(r.gpus[0], field) == expected
    assert r.gpus[1].uuid and r.gpus[1].nvlink_count == 18  # detection went on


def test_a_failing_query_becomes_none_not_an_exception() -> None:
    gpus = hgx_h200(2)
    gpus[0].fail["nvmlDeviceGetMigMode"] = NVMLError_Unknown
    gpus[0].fail["nvmlDeviceGetNvLinkRemotePciInfo"] = NVMLError_Unknown
    r = detect(nvml=FakeNvml(gpus), env=CLEAN_ENV)
    assert r.gpus[0].mig_mode is None  # failed (not "unsupported"): unknown
    assert r.gpus[0].nvlink_count == 18 and r.gpus[0].nvlink_peers == ()


def test_a_lost_gpu_is_listed_as_unknown_and_the_others_read() -> None:
    gpus = hgx_h200(3)
    gpus[1].fail["nvmlDeviceGetHandleByIndex"] = NVMLError_GpuIsLost
    r = detect(nvml=FakeNvml(gpus), env=CLEAN_ENV)
    assert [g.name.startswith("unknown") for g in r.gpus] == [False, True, False]
    assert r.gpus[1].memory_total_bytes is None and r.gpus[2].memory_total_bytes is not None


def test_old_pynvml_with_bytes_and_without_newer_calls() -> None:
    fake = FakeNvml(hgx_h200(1), names_as_bytes=True)
    fake.nvmlSystemGetCudaDriverVersion = lambda: 12080  # type: ignore[attr-defined]
    fake.nvmlSystemGetCudaDriverVersion_v2 = None  # type: ignore[assignment,method-assign]
    r = detect(nvml=fake, env=CLEAN_ENV)
    assert r.gpus[0].name == "NVIDIA H200" and r.gpus[0].pci_bus_id == "00000000:18:00.0"
    assert r.software.nvidia_driver == "580.95.05" and r.software.cuda_driver == "12.8"


def test_seam_is_lazy_and_never_raises() -> None:
    fake = FakeNvml(hgx_h200(1))
    nv = Nvml(fake)
    assert fake.initialized == 0  # nothing happens until the first query
    assert nv.query("nvmlDeviceGetCount") == 1 and fake.initialized == 1
    assert nv.query("nvmlNoSuchFunction") is None
    assert nv.query("nvmlDeviceGetHandleByIndex", 7) is None  # InvalidArgument
    nv.shutdown()
    assert fake.initialized == 0
    broken = Nvml(FakeNvml(init_error=NVMLError_LibraryNotFound))
    assert broken.query("nvmlDeviceGetCount") is None and not broken.available and broken.reason


def test_mixed_and_busy_gpus() -> None:
    gpus = [
        FakeGPU(name="NVIDIA A100-SXM4-80GB", memory_total=80 * GiB, uuid="GPU-a", bus_id="00000000:01:00.0"),
        FakeGPU(name="NVIDIA A100-SXM4-80GB", memory_total=80 * GiB, uuid="GPU-b", bus_id="00000000:02:00.0"),
        FakeGPU(name="NVIDIA A100-SXM4-40GB", memory_total=40 * GiB, uuid="GPU-c", bus_id="00000000:03:00.0",
                memory_used=30 * GiB),
    ]  # fmt: skip
    r = detect(nvml=FakeNvml(gpus), env=CLEAN_ENV)
    assert [g.catalog_key for g in r.gpus] == ["A100-80GB", "A100-80GB", "A100-40GB"]
    assert r.min_gpu_memory_bytes == 40 * GiB
    (mixed,) = [h for h in r.hazards if h.code == "mixed-gpus"]
    assert "CUDA_VISIBLE_DEVICES=0,1" in mixed.fix and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in mixed.fix
    (busy,) = [h for h in r.hazards if h.code == "gpu-busy"]
    assert "GPU 2" in busy.what and "30.0 GiB" in busy.what

"""Live GPU sampling through the NVML seam, with the hardware tests' fake pynvml (no driver here)."""

from __future__ import annotations

from tests.fakes.fake_nvml import (
    FakeGPU,
    FakeNvml,
    NVMLError_LibraryNotFound,
    NVMLError_NotSupported,
    hgx_h200,
)
from wizard.hardware.gpu_sampler import GpuProcess, GpuSampler
from wizard.units import GiB


def test_samples_memory_util_power_temperature_and_processes() -> None:
    gpus = hgx_h200(2)
    gpus[0].memory_used = 70 * GiB
    gpus[0].utilization = 97
    gpus[0].power_mw = 612_000
    gpus[0].temperature = 61
    gpus[0].processes = [(4243, 68 * GiB), (4242, GiB)]
    fake = FakeNvml(gpus)
    sampler = GpuSampler(fake)
    reading = sampler.sample()
    assert reading.reason is None and len(reading.gpus) == 2
    g0 = reading.gpus[0]
    assert (g0.index, g0.name, g0.memory_used_bytes, g0.memory_total_bytes) == (
        0,
        "NVIDIA H200",
        70 * GiB,
        143771 * 1024**2,
    )
    assert (g0.utilization, g0.power_watts, g0.power_limit_watts, g0.temperature_c) == (97, 612.0, 700.0, 61)
    assert g0.processes == (GpuProcess(4242, GiB), GpuProcess(4243, 68 * GiB))  # pid order
    assert reading.gpus[1].processes == ()
    gpus[0].utilization = 12  # the session and handles stay open: the next sample sees new numbers
    assert sampler.sample().gpus[0].utilization == 12
    assert fake.initialized == 1
    sampler.close()
    assert fake.initialized == 0


def test_unsupported_fields_are_none_not_errors() -> None:
    gpu = FakeGPU(
        fail={
            "nvmlDeviceGetPowerUsage": NVMLError_NotSupported,
            "nvmlDeviceGetUtilizationRates": NVMLError_NotSupported,
        }
    )
    gpu.processes = [(7, None)]  # MIG: NVML cannot say per-process memory
    g = GpuSampler(FakeNvml([gpu])).sample().gpus[0]
    assert g.power_watts is None and g.utilization is None and g.memory_total_bytes is not None
    assert g.processes == (GpuProcess(7, None),)


def test_no_driver_is_a_reason() -> None:
    reading = GpuSampler(FakeNvml(init_error=NVMLError_LibraryNotFound)).sample()
    assert reading.gpus == () and "libnvidia-ml" in (reading.reason or "")


def test_driver_without_gpus() -> None:
    reading = GpuSampler(FakeNvml([])).sample()
    assert reading.gpus == () and "no GPUs" in (reading.reason or "")


def test_real_pynvml_here_reports_no_gpu_without_raising() -> None:
    reading = GpuSampler().sample()  # this machine has no NVIDIA driver
    assert reading.gpus == () and reading.reason

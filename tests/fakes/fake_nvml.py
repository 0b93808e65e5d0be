"""A stand-in for the ``pynvml`` module (nvidia-ml-py) with the API surface dswiz uses -- the only mock in the
hardware tests, because no NVIDIA driver exists on CI machines. Error classes are named and nested like
pynvml's (``NVMLError_NotSupported`` is a subclass of ``NVMLError``); byte strings come back as ``str`` like
nvidia-ml-py >= 12 (``names_as_bytes=True`` mimics older releases).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_FEATURE_ENABLED = 1
NVML_FEATURE_DISABLED = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_NVLINK_MAX_LINKS = 18
GiB = 1024**3


class NVMLError(Exception):
    value = 999

    def __str__(self) -> str:
        return type(self).__name__.removeprefix("NVMLError_")


# Class names follow pynvml (NVMLError_<Name>), as dswiz matches on them.
class NVMLError_Uninitialized(NVMLError):
    value = 1


class NVMLError_InvalidArgument(NVMLError):
    value = 2


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_NoPermission(NVMLError):
    value = 4


class NVMLError_DriverNotLoaded(NVMLError):
    value = 9


class NVMLError_LibraryNotFound(NVMLError):
    value = 12


class NVMLError_GpuIsLost(NVMLError):
    value = 15


class NVMLError_Unknown(NVMLError):
    value = 999


@dataclass
class FakeGPU:
    name: str = "NVIDIA H200"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total: int = 143771 * 1024**2
    memory_used: int = 0
    compute_capability: tuple[int, int] = (9, 0)
    mig: tuple[int, int] | None = (0, 0)  # (current, pending); None: MIG not supported on this GPU
    bus_id: str = "00000000:18:00.0"
    nvlinks: list[str] | None = None  # remote PCI bus id per active link; None: GPU has no NVLink
    pcie_gen: int = 5
    fail: dict[str, type[NVMLError]] = field(default_factory=dict)  # function name -> error it raises
    # Live numbers (the monitor's sampler): percent, milliwatts, degrees C, (pid, used bytes or None) per process.
    utilization: int = 0
    power_mw: int = 75_000
    power_limit_mw: int = 700_000
    temperature: int = 35
    processes: list[tuple[int, int | None]] = field(default_factory=list)


class FakeNvml:
    """Use an instance where the pynvml module is expected: ``detect(nvml=FakeNvml([...]))``."""

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS

    def __init__(
        self,
        gpus: list[FakeGPU] | None = None,
        *,
        init_error: type[NVMLError] | None = None,
        driver: str = "580.95.05",
        cuda_driver: int = 13000,
        names_as_bytes: bool = False,
    ) -> None:
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.names_as_bytes = names_as_bytes
        self.initialized = 0  # nvmlInit calls minus nvmlShutdown calls

    # -- library -------------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error()
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.initialized -= 1

    def _check(self) -> None:
        if self.initialized <= 0:
            raise NVMLError_Uninitialized()

    def _text(self, s: str) -> Any:
        return s.encode() if self.names_as_bytes else s

    def _gpu(self, handle: FakeGPU, func: str) -> FakeGPU:
        self._check()
        if func in handle.fail:
            raise handle.fail[func]()
        return handle

    def nvmlSystemGetDriverVersion(self) -> Any:
        self._check()
        return self._text(self.driver)

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._check()
        return self.cuda_driver

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise NVMLError_InvalidArgument()
        gpu = self.gpus[index]
        if "nvmlDeviceGetHandleByIndex" in gpu.fail:
            raise gpu.fail["nvmlDeviceGetHandleByIndex"]()
        return gpu

    # -- per GPU -------------------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, h: FakeGPU) -> Any:
        return self._text(self._gpu(h, "nvmlDeviceGetName").name)

    def nvmlDeviceGetUUID(self, h: FakeGPU) -> Any:
        return self._text(self._gpu(h, "nvmlDeviceGetUUID").uuid)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGPU) -> SimpleNamespace:
        g = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used)

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGPU) -> tuple[int, int]:
        return self._gpu(h, "nvmlDeviceGetCudaComputeCapability").compute_capability

    def nvmlDeviceGetMigMode(self, h: FakeGPU) -> list[int]:
        g = self._gpu(h, "nvmlDeviceGetMigMode")
        if g.mig is None:
            raise NVMLError_NotSupported()
        return list(g.mig)

    def nvmlDeviceGetPciInfo(self, h: FakeGPU) -> SimpleNamespace:
        g = self._gpu(h, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=self._text(g.bus_id), busIdLegacy=self._text(g.bus_id[4:]))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: FakeGPU) -> int:
        return self._gpu(h, "nvmlDeviceGetMaxPcieLinkGeneration").pcie_gen

    def nvmlDeviceGetNvLinkState(self, h: FakeGPU, link: int) -> int:
        g = self._gpu(h, "nvmlDeviceGetNvLinkState")
        if g.nvlinks is None:
            raise NVMLError_NotSupported()
        if not 0 <= link < NVML_NVLINK_MAX_LINKS:
            raise NVMLError_InvalidArgument()
        return NVML_FEATURE_ENABLED if link < len(g.nvlinks) else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: FakeGPU, link: int) -> SimpleNamespace:
        g = self._gpu(h, "nvmlDeviceGetNvLinkRemotePciInfo")
        if g.nvlinks is None or link >= len(g.nvlinks):
            raise NVMLError_InvalidArgument()
        return SimpleNamespace(busId=self._text(g.nvlinks[link]))

    # -- live numbers (wizard/hardware/gpu_sampler.py) -------------------------------------------------------
    NVML_TEMPERATURE_GPU = 0

    def nvmlDeviceGetUtilizationRates(self, h: FakeGPU) -> SimpleNamespace:
        g = self._gpu(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=g.utilization, memory=0)

    def nvmlDeviceGetPowerUsage(self, h: FakeGPU) -> int:
        return self._gpu(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGPU) -> int:
        return self._gpu(h, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetTemperature(self, h: FakeGPU, sensor: int) -> int:
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise NVMLError_InvalidArgument()
        return self._gpu(h, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGPU) -> list[SimpleNamespace]:
        g = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in g.processes]


# -- ready-made machines ------------------------------------------------------------------------------------
def hgx_h200(count: int = 8) -> list[FakeGPU]:
    """An HGX board: every GPU has 18 NVLinks into NVSwitches (remote ends are switches, not GPUs)."""
    return [
        FakeGPU(
            uuid=f"GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd",
            bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            nvlinks=[f"00000000:{0xA0 + (link % 4):02X}:00.0" for link in range(18)],
        )
        for i in range(count)
    ]


def bridged_pair(name: str = "NVIDIA GeForce RTX 3090") -> list[FakeGPU]:
    """Two PCIe boards joined by an NVLink bridge: each link's remote end is the other GPU."""
    a, b = "00000000:01:00.0", "00000000:02:00.0"
    common: dict[str, Any] = {"name": name, "memory_total": 24576 * 1024**2, "compute_capability": (8, 6)}
    return [
        FakeGPU(uuid="GPU-aaaa", bus_id=a, nvlinks=[b, b, b, b], mig=None, pcie_gen=4, **common),
        FakeGPU(uuid="GPU-bbbb", bus_id=b, nvlinks=[a, a, a, a], mig=None, pcie_gen=4, **common),
    ]

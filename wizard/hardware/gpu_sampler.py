"""Live per-GPU numbers for the monitor, read through the NVML seam (``wizard.hardware.nvml.Nvml``).

One ``GpuSampler`` holds one NVML session for the monitor's lifetime (nvmlInit once, handles cached); every field
that NVML cannot give (no driver, NotSupported, MIG's per-process memory) is None, never an exception. Power is in
watts (NVML gives milliwatts); per-process memory is keyed by host PID (NVML sees host PIDs, even inside a
container: docs/measurements.md, "Reading GPUs through NVML").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wizard.hardware.nvml import Nvml, nvml_text


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None  # None: NVML cannot say (MIG, some containers)


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization: float | None = None  # percent of the last sample period with a kernel running
    power_watts: float | None = None
    power_limit_watts: float | None = None
    temperature_c: float | None = None
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class GpuReading:
    gpus: tuple[GpuSample, ...] = ()
    reason: str | None = None  # why there are no GPUs, in words


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class GpuSampler:
    """``sample()`` -> ``GpuReading``. ``nvml``: the pynvml module or a stand-in with the same API (tests)."""

    def __init__(self, nvml: Any = None) -> None:
        self._nv = Nvml(nvml)
        self._handles: dict[int, Any] = {}
        self._names: dict[int, str | None] = {}
        self._count: int | None = None

    def sample(self) -> GpuReading:
        nv = self._nv
        if not nv.available:
            return GpuReading(reason=nv.reason)
        if self._count is None:
            count = nv.query("nvmlDeviceGetCount")
            if not isinstance(count, int) or count <= 0:
                return GpuReading(reason="the NVIDIA driver is loaded but reports no GPUs")
            self._count = count
        return GpuReading(gpus=tuple(self._sample_gpu(i) for i in range(self._count)))

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            handle = self._nv.query("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                return None
            self._handles[index] = handle
            self._names[index] = nvml_text(self._nv.query("nvmlDeviceGetName", handle))
        return self._handles[index]

    def _sample_gpu(self, index: int) -> GpuSample:
        nv = self._nv
        handle = self._handle(index)
        if handle is None:
            return GpuSample(index=index)
        memory = nv.query("nvmlDeviceGetMemoryInfo", handle)
        util = nv.query("nvmlDeviceGetUtilizationRates", handle)
        power = _number(nv.query("nvmlDeviceGetPowerUsage", handle))
        limit = _number(nv.query("nvmlDeviceGetEnforcedPowerLimit", handle))
        temp = _number(nv.query("nvmlDeviceGetTemperature", handle, nv.constant("NVML_TEMPERATURE_GPU", 0)))
        return GpuSample(
            index=index,
            name=self._names.get(index),
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            utilization=_number(getattr(util, "gpu", None)) if util is not None else None,
            power_watts=power / 1000 if power is not None else None,
            power_limit_watts=limit / 1000 if limit is not None else None,
            temperature_c=temp,
            processes=self._processes(handle),
        )

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        procs = self._nv.query("nvmlDeviceGetComputeRunningProcesses", handle) or []
        out = []
        for p in procs:
            pid = getattr(p, "pid", None)
            if not isinstance(pid, int):
                continue
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(pid, int(used) if isinstance(used, int) and used >= 0 else None))
        return tuple(sorted(out, key=lambda g: g.pid))

    def close(self) -> None:
        self._nv.shutdown()

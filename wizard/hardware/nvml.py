"""The one seam around NVML (the ``pynvml`` module of the nvidia-ml-py distribution), in nvitop's manner.

``Nvml`` initialises lazily; every query goes through ``query(name, *args)``, which turns a failed or unsupported
call into ``None`` for that field -- never an exception into the caller. No driver (``NVMLError_LibraryNotFound``,
any machine without an NVIDIA GPU) or no ``pynvml`` module becomes ``read_gpus(...).reason`` in words.

The module is injectable (``read_gpus(nvml=...)``): tests pass one fake module with the same API surface.
NVML numbers GPUs in PCI bus order; CUDA does the same only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (see
docs/measurements.md, "Reading GPUs through NVML").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wizard.hardware.report import GPUInfo

_NOT_SUPPORTED = object()  # marks "NVML says this GPU cannot do that", as opposed to a failure


@dataclass(frozen=True)
class NvmlReading:
    """All GPUs NVML sees (not yet narrowed by CUDA_VISIBLE_DEVICES), or why there are none."""

    gpus: tuple[GPUInfo, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "13.0"
    reason: str | None = None  # set when no GPU could be read


def nvml_text(value: Any) -> str | None:
    """An NVML string (bytes with trailing NULs in older bindings, str in newer ones) as clean text."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").strip("\x00").strip()
    return str(value).strip()


def _init_failure_reason(nvml: Any, error: Exception) -> str:
    name = type(error).__name__
    if name == "NVMLError_LibraryNotFound":
        return "the NVIDIA driver library (libnvidia-ml.so.1) is not installed on this machine"
    if name == "NVMLError_DriverNotLoaded":
        return "the NVIDIA kernel driver is not loaded (nvidia-smi would fail too)"
    if name == "NVMLError_NoPermission":
        return "no permission to open the NVIDIA devices (/dev/nvidia*)"
    return f"NVML could not start: {error}"


class Nvml:
    """Lazy NVML session. ``query`` never raises; ``available`` / ``reason`` say whether NVML works."""

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._started = False
        self.reason: str | None = None

    def _start(self) -> bool:
        if self._started:
            return self.reason is None
        self._started = True
        if self._module is None:
            try:
                import pynvml
            except ImportError:
                self.reason = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
                return False
            self._module = pynvml
        try:
            self._module.nvmlInit()
        except self._module.NVMLError as e:
            self.reason = _init_failure_reason(self._module, e)
        except OSError as e:  # a broken driver install can fail below pynvml's own error handling
            self.reason = f"NVML could not start: {e}"
        return self.reason is None

    @property
    def available(self) -> bool:
        return self._start()

    def constant(self, name: str, default: Any) -> Any:
        return getattr(self._module, name, default) if self._module is not None else default

    def query(self, func: str, *args: Any, not_supported: Any = None) -> Any:
        """``pynvml.<func>(*args)``, or None when it fails (``not_supported`` when NVML says NotSupported)."""
        if not self._start():
            return None
        fn = getattr(self._module, func, None)
        if fn is None:  # an older nvidia-ml-py without this call
            return None
        try:
            return fn(*args)
        except self._module.NVMLError as e:
            if type(e).__name__ == "NVMLError_NotSupported":
                return not_supported
            return None
        except (UnicodeDecodeError, OSError, ValueError):
            return None

    def shutdown(self) -> None:
        if self._started and self.reason is None:
            self.query("nvmlShutdown")


def _cuda_version(raw: Any) -> str | None:
    if not isinstance(raw, int) or raw <= 0:
        return None
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def _bus_id(pci: Any) -> str | None:
    if pci is None:
        return None
    return nvml_text(getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None))


def _read_nvlinks(nv: Nvml, handle: Any) -> tuple[int | None, list[str]]:
    """(active link count, remote PCI bus ids). A GPU without NVLink answers NotSupported: 0 links."""
    max_links = int(nv.constant("NVML_NVLINK_MAX_LINKS", 18))
    enabled = nv.constant("NVML_FEATURE_ENABLED", 1)
    active, peers, answered = 0, [], False
    for link in range(max_links):
        state = nv.query("nvmlDeviceGetNvLinkState", handle, link, not_supported=_NOT_SUPPORTED)
        if state is _NOT_SUPPORTED:
            if link == 0:
                return 0, []
            continue
        if state is None:  # links past this GPU's count answer InvalidArgument
            continue
        answered = True
        if state == enabled:
            active += 1
            remote = _bus_id(nv.query("nvmlDeviceGetNvLinkRemotePciInfo", handle, link))
            if remote:
                peers.append(remote)
    return (active if answered else None), peers


def _normal_bus_id(bus_id: str) -> str:
    # NVML writes "00000000:1B:00.0"; compare without the domain width and case.
    return bus_id.upper().split(":", 1)[-1] if bus_id.count(":") >= 2 else bus_id.upper()


def _read_gpu(nv: Nvml, index: int) -> tuple[GPUInfo, list[str]]:
    handle = nv.query("nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return GPUInfo(index=index, name="unknown (NVML could not open this GPU)"), []
    memory = nv.query("nvmlDeviceGetMemoryInfo", handle)
    cc = nv.query("nvmlDeviceGetCudaComputeCapability", handle)
    mig = nv.query("nvmlDeviceGetMigMode", handle, not_supported=_NOT_SUPPORTED)
    if mig is _NOT_SUPPORTED:
        mig_mode: bool | None = False  # this GPU cannot do MIG at all
    elif mig is None:
        mig_mode = None
    else:
        mig_mode = mig[0] == nv.constant("NVML_DEVICE_MIG_ENABLE", 1)
    pcie_gen = nv.query("nvmlDeviceGetMaxPcieLinkGeneration", handle)
    nvlink_count, peers = _read_nvlinks(nv, handle)
    gpu = GPUInfo(
        index=index,
        name=nvml_text(nv.query("nvmlDeviceGetName", handle)) or "unknown",
        uuid=nvml_text(nv.query("nvmlDeviceGetUUID", handle)),
        memory_total_bytes=int(memory.total) if memory is not None else None,
        memory_free_bytes=int(memory.free) if memory is not None else None,
        compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
        mig_mode=mig_mode,
        pci_bus_id=_bus_id(nv.query("nvmlDeviceGetPciInfo", handle)),
        nvlink_count=nvlink_count,
        pcie_gen=int(pcie_gen) if isinstance(pcie_gen, int) and pcie_gen > 0 else None,
    )
    return gpu, peers


def read_gpus(nvml: Any = None) -> NvmlReading:
    """Every GPU NVML sees, in NVML (PCI) order. ``nvml``: the pynvml module or a stand-in (tests)."""
    from dataclasses import replace

    nv = Nvml(nvml)
    if not nv.available:
        return NvmlReading(reason=nv.reason)
    try:
        count = nv.query("nvmlDeviceGetCount")
        driver = nvml_text(nv.query("nvmlSystemGetDriverVersion"))
        cuda = _cuda_version(nv.query("nvmlSystemGetCudaDriverVersion_v2"))
        if cuda is None:
            cuda = _cuda_version(nv.query("nvmlSystemGetCudaDriverVersion"))
        if not count:
            reason = (
                "the NVIDIA driver is loaded but reports no GPUs"
                if count == 0
                else "NVML could not count the GPUs"
            )
            return NvmlReading(driver_version=driver, cuda_driver_version=cuda, reason=reason)
        read = [_read_gpu(nv, i) for i in range(int(count))]
    finally:
        nv.shutdown()
    # Name NVLink peers that are GPUs of this machine "gpu<N>"; others (NVSwitches) keep their PCI bus id.
    by_bus = {_normal_bus_id(g.pci_bus_id): g.index for g, _ in read if g.pci_bus_id}
    gpus = []
    for gpu, peers in read:
        named = {f"gpu{by_bus[_normal_bus_id(p)]}" if _normal_bus_id(p) in by_bus else p for p in peers}
        gpus.append(replace(gpu, nvlink_peers=tuple(sorted(named))))
    return NvmlReading(gpus=tuple(gpus), driver_version=driver, cuda_driver_version=cuda)

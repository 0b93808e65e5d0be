"""What the machine is: a frozen ``HardwareReport``, detected (``wizard.hardware.detect``) or described
(``wizard.hardware.described``). Unknown values are ``None``, never an exception."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from wizard.findings import Finding

Source = Literal["detected", "described"]


@dataclass(frozen=True)
class GPUInfo:
    index: int
    name: str
    uuid: str | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    mig_mode: bool | None = None
    pci_bus_id: str | None = None
    nvlink_peers: tuple[str, ...] = ()  # PCI bus ids (or "gpu<N>") of active NVLink peers
    nvlink_count: int | None = None  # active NVLink links, None when NVML does not say
    peak_tflops_bf16: float | None = None  # dense, from the catalog
    peak_tflops_fp16: float | None = None
    peak_tflops_fp32: float | None = None
    memory_bandwidth_gbs: float | None = None  # GB/s, from the catalog
    nvlink_gbs: float | None = None  # NVLink GB/s per GPU; 0.0 when the GPU has no active NVLink
    pcie_gen: int | None = None  # PCIe generation of the link (NVML), else the catalog's
    catalog_key: str | None = None  # the catalog entry this GPU matched ("A100-80GB"), None if unknown

    @property
    def supports_bf16(self) -> bool | None:
        """From the compute capability (>= 8.0), not from torch: DeepSpeed's check (deepspeed/runtime/engine.py,
        ``DeepSpeedEngine._do_sanity_check``, 0.19.8) asks ``torch.cuda.is_bf16_supported()``, which says True on
        V100/T4 too because it counts emulation (docs/deepspeed-rules.md, "Precision")."""
        return None if self.compute_capability is None else self.compute_capability >= (8, 0)

    @property
    def supports_fp16(self) -> bool | None:
        """Compute capability >= 7.0, DeepSpeed's own rule (deepspeed/accelerator/cuda_accelerator.py,
        ``CUDA_Accelerator.is_fp16_supported``, 0.19.8; 6.x only with DS_ALLOW_DEPRECATED_FP16=1)."""
        return None if self.compute_capability is None else self.compute_capability >= (7, 0)


# Filesystems a swap folder must not be on: NVMe offload's O_DIRECT I/O there crosses the network.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "glusterfs",
        "afs",
        "9p",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
    }
)


@dataclass(frozen=True)
class DiskInfo:
    mountpoint: str
    device: str
    fstype: str
    total_bytes: int
    free_bytes: int
    nvme: bool
    rotational: bool | None = None
    # What DeepSpeed's async_io moves through the drive (bytes/s), where a description gives it (nvme_read /
    # nvme_write); None: unknown, the planner takes calibration.NVME_*_BYTES_PER_SECOND
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None


# The cores a rank is taken to have where neither detection nor the description says how many the host has: the
# 16-core slice a cloud VM of one GPU gives (the machines the planner's CPU offload was measured on); 8-GPU servers
# give 12-28 a GPU (DGX A100: 128 cores, DGX H100: 112).
DEFAULT_HOST_CORES_PER_GPU = 16


def cores_per_rank(work_cores: int | None, ranks_per_node: int) -> float:
    """The host cores each rank's CPU work gets (an offloaded optimizer's CPU Adam, the pinned copies): the node's
    cores (``HostInfo.work_cores``) shared by its ranks, at least one; DEFAULT_HOST_CORES_PER_GPU when unknown."""
    if not work_cores:
        return float(DEFAULT_HOST_CORES_PER_GPU)
    return max(1.0, work_cores / max(1, ranks_per_node))


@dataclass(frozen=True)
class HostInfo:
    hostname: str | None = None
    cpu_model: str | None = None
    physical_cores: int | None = None
    logical_cores: int | None = None
    # cores this process may run on: the distinct cores of its affinity mask (taskset, a Slurm allocation, a
    # container's cpuset) lowered to a cgroup CPU quota (docker --cpus, a Kubernetes limit); None where not detected
    usable_cores: int | None = None
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    shm_bytes: int | None = None  # /dev/shm size
    memlock_limit_bytes: int | None = None  # RLIMIT_MEMLOCK soft limit; -1 means unlimited
    disks: tuple[DiskInfo, ...] = ()
    libaio: bool | None = None  # needed by DeepSpeed's async_io op (NVMe offload)
    libaio_detail: str | None = None  # what was found or missing, in words

    @property
    def cores(self) -> int | None:
        """The host's cores: physical where known, else logical."""
        return self.physical_cores or self.logical_cores

    @property
    def restricted(self) -> bool:
        """This process may use fewer cores than the host has."""
        return bool(self.usable_cores and self.cores and self.usable_cores < self.cores)

    @property
    def work_cores(self) -> int | None:
        """The cores the training's host work gets (CPU Adam, the data loader): the host's, or the fewer this
        process may use."""
        return self.usable_cores if self.restricted or not self.cores else self.cores

    @property
    def local_nvme_disks(self) -> tuple[DiskInfo, ...]:
        """The NVMe drives on local filesystems, most free space first (then by mount point)."""
        disks = [d for d in self.disks if d.nvme and d.fstype not in NETWORK_FILESYSTEMS]
        return tuple(sorted(disks, key=lambda d: (-d.free_bytes, d.mountpoint)))

    @property
    def swap_drive(self) -> DiskInfo | None:
        """The NVMe drive the planner takes offload to swap to: the first of ``local_nvme_disks``, where `dswiz
        config` suggests the swap folder (its room and rates are the plan's)."""
        return next(iter(self.local_nvme_disks), None)

    @property
    def threads_per_core(self) -> int:
        """Logical CPUs a core (2 with hyperthreads): what Slurm's CPU counts are in on such nodes."""
        if self.physical_cores and self.logical_cores and self.logical_cores > self.physical_cores:
            return max(1, round(self.logical_cores / self.physical_cores))
        return 1


@dataclass(frozen=True)
class SoftwareInfo:
    python: str | None = None
    torch: str | None = None
    torch_cuda: str | None = None  # CUDA version torch was built with, found without importing torch
    deepspeed: str | None = None
    accelerate: str | None = None
    transformers: str | None = None
    cuda_driver: str | None = None  # from NVML, e.g. "13.0"
    nvidia_driver: str | None = None
    nvcc: str | None = None


@dataclass(frozen=True)
class HardwareReport:
    """GPUs of *one* node (all nodes are alike) plus the host; ``nodes`` > 1 for a described cluster."""

    source: Source
    gpus: tuple[GPUInfo, ...] = ()
    host: HostInfo = field(default_factory=HostInfo)
    software: SoftwareInfo = field(default_factory=SoftwareInfo)
    nodes: int = 1
    no_gpu_reason: str | None = None  # why no NVIDIA GPU is listed, in words
    hazards: tuple[Finding, ...] = ()
    description: str | None = None  # the profile text for a described report ("2x8xH100")
    inter_node_gbps: float | None = None  # network bandwidth between nodes, Gbit/s, when known or described
    physical_gpu_count: int | None = None  # GPUs NVML sees before CUDA_VISIBLE_DEVICES narrows them
    visible_devices: str | None = None  # the CUDA_VISIBLE_DEVICES value that applied, if set

    @property
    def gpus_per_node(self) -> int:
        return len(self.gpus)

    @property
    def total_gpus(self) -> int:
        return self.nodes * len(self.gpus)

    @property
    def min_gpu_memory_bytes(self) -> int | None:
        """The smallest card bounds what fits (ranks are symmetric)."""
        totals = [g.memory_total_bytes for g in self.gpus if g.memory_total_bytes is not None]
        return min(totals) if totals else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (tuples become lists, findings dicts); ``from_dict`` reads it back."""
        d = asdict(self)
        d["hazards"] = [h.to_dict() for h in self.hazards]
        for g, gd in zip(self.gpus, d["gpus"], strict=True):
            gd["supports_bf16"] = g.supports_bf16
            gd["supports_fp16"] = g.supports_fp16
        d["gpus_per_node"] = self.gpus_per_node
        d["total_gpus"] = self.total_gpus
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareReport:
        def pick(tp: type, data: dict[str, Any]) -> dict[str, Any]:
            names = {f.name for f in fields(tp)}
            return {k: v for k, v in data.items() if k in names}

        gpus = []
        for gd in d.get("gpus", []):
            g = pick(GPUInfo, gd)
            if g.get("compute_capability") is not None:
                g["compute_capability"] = tuple(g["compute_capability"])
            g["nvlink_peers"] = tuple(g.get("nvlink_peers") or ())
            gpus.append(GPUInfo(**g))
        hd = pick(HostInfo, d.get("host", {}))
        hd["disks"] = tuple(DiskInfo(**pick(DiskInfo, x)) for x in hd.get("disks", ()))
        top = pick(cls, d)
        top["gpus"] = tuple(gpus)
        top["host"] = HostInfo(**hd)
        top["software"] = SoftwareInfo(**pick(SoftwareInfo, d.get("software", {})))
        top["hazards"] = tuple(Finding.from_dict(h) for h in d.get("hazards", ()))
        return cls(**top)

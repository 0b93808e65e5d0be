"""The host around the GPUs: CPU, RAM, /dev/shm, the locked-memory limit, disks, libaio. Linux /proc and /sys.

Every reader returns None for what it cannot find out, never raises: a container may hide /sys, a mount may vanish
between listing and stat.
"""

from __future__ import annotations

import math
import os
import platform
import re
import resource
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

from wizard.hardware.report import DiskInfo, HostInfo

# Filesystems that hold no user data: skipped when listing disks.
PSEUDO_FS = frozenset(
    [
        "autofs",
        "binfmt_misc",
        "bpf",
        "cgroup",
        "cgroup2",
        "configfs",
        "debugfs",
        "devpts",
        "devtmpfs",
        "efivarfs",
        "fusectl",
        "hugetlbfs",
        "mqueue",
        "nsfs",
        "proc",
        "pstore",
        "ramfs",
        "rpc_pipefs",
        "securityfs",
        "selinuxfs",
        "squashfs",
        "sysfs",
        "tmpfs",
        "tracefs",
        "nfsd",
        "fuse.lxcfs",
        "fuse.gvfsd-fuse",
        "fuse.portal",
        "iso9660",
        "udf",
    ]
)


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):  # ValueError: a NUL in the path (a name read from a file)
        return None


def cpu_model() -> str | None:
    text = _read("/proc/cpuinfo") or ""
    for key in ("model name", "Model", "cpu model", "Hardware"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, flags=re.MULTILINE)
        if m:
            return m.group(1).strip()
    return platform.processor() or None


def physical_cores() -> int | None:
    try:
        import psutil
    except ImportError:  # a dswiz dependency, but detection must not die without it: read /proc
        return _physical_cores_from_cpuinfo(_read("/proc/cpuinfo") or "")
    try:
        return psutil.cpu_count(logical=False)
    except (OSError, RuntimeError):
        return None


def _physical_cores_from_cpuinfo(text: str) -> int | None:
    cores = set(re.findall(r"^physical id\s*:\s*(\d+)\s*$.*?^core id\s*:\s*(\d+)\s*$", text, re.M | re.S))
    return len(cores) or None


def usable_cores(
    cgroup_root: str | Path = "/sys/fs/cgroup",
    proc_cgroup: str | Path = "/proc/self/cgroup",
    sys_cpu: str | Path = "/sys/devices/system/cpu",
) -> int | None:
    """Cores this process may use: the distinct cores of its affinity mask (taskset, a Slurm job's or a container's
    cpuset; two hyperthreads of one core count once, where /sys says which are siblings), lowered to a cgroup CPU
    quota rounded up (docker --cpus=2.5 gives 3: a quota is time on any core). Children inherit both: the ranks the
    launcher starts run on these."""
    try:
        cpus: set[int] | None = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = None
    n = cores_of(cpus, sys_cpu) if cpus else os.cpu_count()
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        limit = max(1, math.ceil(quota - 1e-9))
        n = min(n, limit) if n else limit
    return n or None


def cores_of(cpus: set[int], sys_cpu: str | Path = "/sys/devices/system/cpu") -> int:
    """How many distinct cores the logical CPUs ``cpus`` sit on (package and core id from /sys topology); a CPU whose
    topology cannot be read counts as a core of its own."""
    cores = set()
    for cpu in cpus:
        topology = Path(sys_cpu) / f"cpu{cpu}" / "topology"
        package, core = _read(topology / "physical_package_id"), _read(topology / "core_id")
        cores.add((package.strip(), core.strip()) if package and core else ("cpu", str(cpu)))
    return len(cores)


def cgroup_cpu_quota(cgroup_root: str | Path, proc_cgroup: str | Path) -> float | None:
    """The tightest CPU quota, in CPUs, on this process's cgroup and its parents: cgroup v2 ``cpu.max`` ("200000
    100000" is 2 CPUs, "max ..." none), cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1: none). None when
    there is none or it cannot be read (kernel docs: admin-guide/cgroup-v2.rst, scheduler/sched-bwc.rst)."""
    root = Path(cgroup_root)
    found: list[float] = []
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        hierarchy, controllers, path = parts
        files: tuple[str, ...]
        base: Path | None
        if hierarchy == "0" and controllers == "":  # v2: one tree
            base, files = root, ("cpu.max",)
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own tree
            base = next(
                (root / d for d in (controllers, "cpu", "cpu,cpuacct") if os.path.isdir(root / d)), None
            )
            files = ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        if base is None:
            continue
        rel = Path(path.lstrip("/"))
        for d in [rel, *rel.parents]:
            q = _cpu_quota_at(base / d, files)
            if q is not None:
                found.append(q)
    return min(found) if found else None


def _cpu_quota_at(directory: Path, files: tuple[str, ...]) -> float | None:
    texts = [_read(directory / f) for f in files]
    if any(t is None for t in texts):
        return None
    try:
        if len(files) == 1:  # "quota period" or "max period"
            quota, _, period = (texts[0] or "").strip().partition(" ")
            if quota == "max":
                return None
            q, p = int(quota), int(period or "100000")
        else:
            q, p = int((texts[0] or "").strip()), int((texts[1] or "").strip())
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def memory() -> tuple[int | None, int | None]:
    """(total, available) bytes of RAM."""
    try:
        import psutil
    except ImportError:
        info = dict(re.findall(r"^(\w+):\s+(\d+) kB$", _read("/proc/meminfo") or "", re.M))
        total, available = info.get("MemTotal"), info.get("MemAvailable")
        return (int(total) * 1024 if total else None), (int(available) * 1024 if available else None)
    try:
        vm = psutil.virtual_memory()
    except (OSError, RuntimeError):
        return None, None
    return int(vm.total), int(vm.available)


def filesystem_size(path: str) -> tuple[int, int] | None:
    """(total, free-for-unprivileged-users) bytes of the filesystem holding ``path``."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def memlock_limit() -> int | None:
    """RLIMIT_MEMLOCK soft limit in bytes; -1 when unlimited."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    except (OSError, ValueError):
        return None
    return -1 if soft == resource.RLIM_INFINITY else int(soft)


def _block_device_name(device: str) -> str | None:
    """ "/dev/nvme0n1p2" -> "nvme0n1p2" (following /dev/mapper and /dev/disk/by-* links)."""
    if not device.startswith("/dev/"):
        return None
    return os.path.basename(os.path.realpath(device))


def _disk_of(name: str, sys_block: Path) -> str:
    """The whole-disk name of a block device or partition ("nvme0n1p2" -> "nvme0n1")."""
    entry = sys_block.parent / "class" / "block" / name
    try:
        real = entry.resolve()
    except OSError:
        return name
    if (real / "partition").exists():
        return real.parent.name
    return name


def _underlying_disks(name: str, sys_block: Path) -> list[str]:
    """The disks a device-mapper/md device is built on (itself for a plain disk)."""
    disk = _disk_of(name, sys_block)
    slaves = sys_block / disk / "slaves"
    try:
        below = sorted(p.name for p in slaves.iterdir())
    except OSError:
        return [disk]
    return [d for s in below for d in _underlying_disks(s, sys_block)] or [disk]


def classify_device(device: str, sys_block: Path = Path("/sys/block")) -> tuple[bool, bool | None]:
    """(is NVMe, is rotational) for a device path from /proc/mounts; (False, None) when unknown."""
    name = _block_device_name(device)
    if name is None:
        return False, None
    disks = _underlying_disks(name, sys_block)
    nvme = bool(disks) and all(d.startswith("nvme") for d in disks)
    flags = [_read(sys_block / d / "queue" / "rotational") for d in disks]
    known = [f.strip() == "1" for f in flags if f is not None and f.strip() in ("0", "1")]
    rotational = any(known) if known else None
    return nvme, rotational


def parse_mounts(text: str) -> list[tuple[str, str, str]]:
    """(device, mountpoint, fstype) of real filesystems in /proc/mounts text, first mount of each point."""
    seen: set[str] = set()
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        device, mountpoint, fstype = parts[0], _unescape(parts[1]), parts[2]
        if fstype in PSEUDO_FS or mountpoint in seen:
            continue
        seen.add(mountpoint)
        out.append((device, mountpoint, fstype))
    return out


def _unescape(field: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def disks(mounts_text: str | None = None) -> tuple[DiskInfo, ...]:
    """Mounted real filesystems (directories only: containers bind-mount single files like /etc/hosts)."""
    text = mounts_text if mounts_text is not None else (_read("/proc/mounts") or _mounts_from_psutil())
    out = []
    for device, mountpoint, fstype in parse_mounts(text):
        if not os.path.isdir(mountpoint):
            continue
        size = filesystem_size(mountpoint)
        if size is None or size[0] == 0:
            continue
        nvme, rotational = classify_device(device)
        out.append(DiskInfo(mountpoint, device, fstype, size[0], size[1], nvme=nvme, rotational=rotational))
    return tuple(sorted(out, key=lambda d: d.mountpoint))


def _mounts_from_psutil() -> str:
    """/proc/mounts-like text where there is no /proc (macOS)."""
    try:
        import psutil

        parts = psutil.disk_partitions(all=False)
    except (ImportError, OSError, RuntimeError):
        return ""
    return "".join(
        f"{p.device} {p.mountpoint.replace(' ', chr(92) + '040')} {p.fstype} rw 0 0\n" for p in parts
    )


def _flag_dirs(flags: str, prefix: str) -> list[str]:
    return [tok[len(prefix) :] for tok in flags.split() if tok.startswith(prefix) and len(tok) > len(prefix)]


def _env_dirs(env: Mapping[str, str], *names: str) -> list[str]:
    return [d for n in names for d in env.get(n, "").split(os.pathsep) if d]


def libaio_status(env: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Whether DeepSpeed's async_io op can be built here, and what was found or missing.

    DeepSpeed's ``AsyncIOBuilder.is_compatible`` compiles and links a one-line C program calling ``io_submit``
    with ``-laio`` (CFLAGS/LDFLAGS honoured); building the op then includes ``<libaio.h>``. Compiling is slow, so
    this looks for what that link and build need instead: ``libaio.so`` (or ``.a``) on the linker's search path
    (plus LDFLAGS ``-L`` and LIBRARY_PATH) and ``libaio.h`` on the include path (plus CFLAGS ``-I``, CPATH).
    The Debian/Ubuntu package with both is ``libaio-dev``; RHEL's is ``libaio-devel``.
    """
    env = os.environ if env is None else env
    arch = platform.machine()
    lib_dirs = [
        *_flag_dirs(env.get("LDFLAGS", ""), "-L"),
        *_env_dirs(env, "LIBRARY_PATH"),
        f"/usr/lib/{arch}-linux-gnu",
        f"/lib/{arch}-linux-gnu",
        "/usr/local/lib",
        "/usr/local/lib64",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
    ]
    include_dirs = [
        *_flag_dirs(env.get("CFLAGS", ""), "-I"),
        *_env_dirs(env, "CPATH", "C_INCLUDE_PATH"),
        "/usr/local/include",
        f"/usr/include/{arch}-linux-gnu",
        "/usr/include",
    ]
    lib = _first_existing(os.path.join(d, n) for d in lib_dirs for n in ("libaio.so", "libaio.a"))
    header = _first_existing(os.path.join(d, "libaio.h") for d in include_dirs)
    if lib and header:
        return True, f"found {lib} and {header}"
    missing = [what for what, found in (("libaio.so", lib), ("libaio.h", header)) if not found]
    return False, f"{' and '.join(missing)} not found"


def _first_existing(paths: Iterable[str]) -> str | None:
    return next((p for p in paths if os.path.exists(p)), None)


def read_host(env: Mapping[str, str] | None = None) -> HostInfo:
    total, available = memory()
    shm = filesystem_size("/dev/shm")
    libaio, libaio_detail = libaio_status(env)
    return HostInfo(
        hostname=socket.gethostname() or None,
        cpu_model=cpu_model(),
        physical_cores=physical_cores(),
        logical_cores=os.cpu_count(),
        usable_cores=usable_cores(),
        ram_total_bytes=total,
        ram_available_bytes=available,
        shm_bytes=shm[0] if shm else None,
        memlock_limit_bytes=memlock_limit(),
        disks=disks(),
        libaio=libaio,
        libaio_detail=libaio_detail,
    )

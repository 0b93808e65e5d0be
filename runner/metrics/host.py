"""Host-side samples through psutil: RAM and swap, the job's process tree (RSS, CPU), and the disk I/O of the
device that holds an NVMe offload path. Never raises: a vanished process or an unreadable counter is None."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

PidsProvider = Callable[[], Iterable[int]]

# What the launchers' own processes run, as opposed to the ranks they start: a program (or the script python runs)
# of these names, or python -m one of these modules. The MPI and Slurm launchers DeepSpeed's runner hands a multi-node
# job to (deepspeed/launcher/multinode_runner.py) are launchers too: their own environment may carry a local rank
# (SLURM_LOCALID inside an allocation) that is no rank's.
LAUNCHER_PROGRAMS = frozenset(
    {"deepspeed", "torchrun", "accelerate", "mpirun", "mpiexec", "mpiexec.hydra", "mpirun_rsh", "srun"}
)
LAUNCHER_MODULES = frozenset(
    {
        "deepspeed.launcher.launch",
        "deepspeed.launcher.runner",
        "torch.distributed.run",
        "accelerate.commands.launch",
    }
)


def is_launcher(cmdline: Sequence[str]) -> bool:
    """By what the process runs -- its program, python's -m module or script -- never by a word elsewhere on its
    command line (a rank's ``--output_dir runs/torchrun-test`` is no launcher)."""
    if not cmdline:
        return False
    if Path(cmdline[0]).name in LAUNCHER_PROGRAMS:
        return True
    args = iter(cmdline[1:])
    for arg in args:
        if arg == "-m":
            return next(args, "") in LAUNCHER_MODULES
        if arg.startswith("-m"):
            return arg[2:] in LAUNCHER_MODULES
        if arg in ("-c", "-"):  # python -c CODE, or a script from stdin
            return False
        if arg.startswith("-"):
            continue  # python's own switches (-u, -O, -X opt is not used by launchers)
        return Path(arg).name in LAUNCHER_PROGRAMS  # python /path/bin/deepspeed ...
    return False


# Where a rank's launcher puts its local rank in the environment, first found first: LOCAL_RANK (DeepSpeed's own
# launcher, with --no_local_rank too, torchrun, accelerate: deepspeed/launcher/launch.py, torch/distributed/run.py;
# DeepSpeed's Intel MPI runner passes it with -env), then what the MPI and Slurm backends of DeepSpeed's runner
# (deepspeed/launcher/multinode_runner.py, 0.19.8) start the script under without it: Open MPI's
# OMPI_COMM_WORLD_LOCAL_RANK (DeepSpeed's own mpi_discovery reads it, deepspeed/comm/comm.py, and sets LOCAL_RANK
# only inside the process, where /proc/PID/environ never shows it), MVAPICH's MV2_COMM_WORLD_LOCAL_RANK, MPICH
# Hydra's MPI_LOCALRANKID and srun's SLURM_LOCALID. Those four are set for everything the MPI launcher or srun
# starts and everything inside a Slurm allocation (the batch script's shell, `srun bash -c ...`, the MPI daemons), so
# they name a rank only in a Python process: DeepSpeed's runner starts the script as `python -u script.py`.
LOCAL_RANK_VARIABLES = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
)


def local_rank_of(cmdline: Sequence[str], environ: Mapping[str, str] | None = None) -> int | None:
    """A rank's local rank: its --local_rank argument (DeepSpeed's launcher passes it), else, for a process that is
    no launcher, the first of LOCAL_RANK_VARIABLES its launcher set to a number (past LOCAL_RANK, only in a Python
    process). The processes a rank starts (data loader workers) inherit both and count with it. ``environ``: None
    when not read (or not readable)."""
    return _local_rank(cmdline, None if environ is None else lambda: environ)


def _local_rank(cmdline: Sequence[str], read_environ: Callable[[], Mapping[str, str]] | None) -> int | None:
    """``local_rank_of``, the environment read (``read_environ``; None: not readable) only where the command line
    names no rank and the process may be one (not a launcher)."""
    rank = _argument_local_rank(cmdline)
    if rank is not None or read_environ is None or not cmdline or is_launcher(cmdline):
        return rank
    return _environment_local_rank(cmdline, read_environ())


def _argument_local_rank(cmdline: Sequence[str]) -> int | None:
    for i, arg in enumerate(cmdline):
        for flag in ("--local_rank", "--local-rank"):
            if arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            elif arg == flag and i + 1 < len(cmdline):
                value = cmdline[i + 1]
            else:
                continue
            if value.isdigit():
                return int(value)
    return None


def _environment_local_rank(cmdline: Sequence[str], environ: Mapping[str, str]) -> int | None:
    """The local rank a (non-launcher) process's environment names, as ``local_rank_of`` reads it."""
    python = Path(cmdline[0]).name.startswith("python")
    for name in LOCAL_RANK_VARIABLES if python else LOCAL_RANK_VARIABLES[:1]:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return None


def process_local_rank(proc: psutil.Process) -> int | None:
    """``local_rank_of`` a live process (None when it cannot be read: gone, another user's). Its environment is
    read only for a process that may be a rank (not for a launcher); its command line is read and parsed once."""
    try:
        return _local_rank(proc.cmdline(), proc.environ)
    except (psutil.Error, OSError):
        return None


@dataclass(frozen=True)
class ProcessSample:
    pid: int
    rss_bytes: int
    cpu_percent: float  # of one core (can exceed 100 with several threads)
    local_rank: int | None = None  # its rank's (local_rank_of), when readable


@dataclass(frozen=True)
class HostSample:
    time: float
    ram_total_bytes: int
    ram_used_bytes: int  # total - available: what the kernel could not hand out now
    swap_total_bytes: int
    swap_used_bytes: int
    job_alive: bool  # any of the job's processes still exists
    job_rss_bytes: int | None = None
    job_cpu_percent: float | None = None
    processes: tuple[ProcessSample, ...] = ()  # the tree's members, pid order
    disk_device: str | None = None
    disk_read_bytes_per_sec: float | None = None
    disk_write_bytes_per_sec: float | None = None


def process_tree(roots: Iterable[int]) -> list[psutil.Process]:
    """The roots and all their descendants that still exist, each once, pid order."""
    seen: dict[int, psutil.Process] = {}
    for pid in roots:
        try:
            proc = psutil.Process(pid)
            seen.setdefault(proc.pid, proc)
            for child in proc.children(recursive=True):
                seen.setdefault(child.pid, child)
        except (psutil.Error, ValueError):
            continue
    return [seen[p] for p in sorted(seen)]


def device_of_path(path: Path) -> str | None:
    """The block device name (``nvme0n1p1``) of the mount holding ``path``, as psutil's disk counters name it."""
    try:
        target = os.path.realpath(path)
        best = None
        for part in psutil.disk_partitions(all=False):
            mount = part.mountpoint
            if (target == mount or target.startswith(mount.rstrip("/") + "/")) and (
                best is None or len(mount) > len(best.mountpoint)
            ):
                best = part
        if best is None or not best.device.startswith("/dev/"):
            return None
        return os.path.basename(os.path.realpath(best.device))
    except (OSError, psutil.Error):
        return None


class HostSampler:
    """Keeps psutil Process objects between samples (CPU percent needs two readings) and the disk counters."""

    def __init__(self, pids_provider: PidsProvider | None = None, nvme_path: Path | None = None) -> None:
        self._pids_provider = pids_provider
        self._procs: dict[int, psutil.Process] = {}
        # a process's local rank, once known (read again until it is: a rank caught between fork and exec shows
        # its launcher's command line)
        self._local_ranks: dict[int, int] = {}
        self._disk = device_of_path(nvme_path) if nvme_path is not None else None
        self._last_disk: tuple[float, int, int] | None = None

    def sample(self, now: float | None = None) -> HostSample:
        now = time.time() if now is None else now
        vm = psutil.virtual_memory()
        try:
            sw = psutil.swap_memory()
            swap_total, swap_used = int(sw.total), int(sw.used)
        except (OSError, RuntimeError):
            swap_total, swap_used = 0, 0
        procs, alive = self._sample_processes()
        read_rate, write_rate = self._disk_rates(now)
        return HostSample(
            time=now,
            ram_total_bytes=int(vm.total),
            ram_used_bytes=int(vm.total - vm.available),
            swap_total_bytes=swap_total,
            swap_used_bytes=swap_used,
            job_alive=alive,
            job_rss_bytes=sum(p.rss_bytes for p in procs) if procs else None,
            job_cpu_percent=round(sum(p.cpu_percent for p in procs), 1) if procs else None,
            processes=tuple(procs),
            disk_device=self._disk,
            disk_read_bytes_per_sec=read_rate,
            disk_write_bytes_per_sec=write_rate,
        )

    def _sample_processes(self) -> tuple[list[ProcessSample], bool]:
        if self._pids_provider is None:
            return [], False
        try:
            roots = list(self._pids_provider())
        except Exception:  # a provider reading a file being rewritten must not take the monitor down
            roots = []
        tree = process_tree(roots)
        live = {p.pid for p in tree}
        for pid in list(self._procs):
            if pid not in live:
                del self._procs[pid]
                self._local_ranks.pop(pid, None)
        out: list[ProcessSample] = []
        for proc in tree:
            cached = self._procs.setdefault(proc.pid, proc)
            try:
                with cached.oneshot():
                    rss = int(cached.memory_info().rss)
                    cpu = float(cached.cpu_percent(interval=None))  # 0.0 on the first call, then since last
                    local_rank = self._local_ranks.get(proc.pid)
                    if local_rank is None:
                        local_rank = process_local_rank(cached)
                        if local_rank is not None:
                            self._local_ranks[proc.pid] = local_rank
            except psutil.Error:
                continue
            out.append(ProcessSample(proc.pid, rss, cpu, local_rank))
        return out, bool(out)

    def _disk_rates(self, now: float) -> tuple[float | None, float | None]:
        if self._disk is None:
            return None, None
        try:
            counters = psutil.disk_io_counters(perdisk=True) or {}
        except (OSError, RuntimeError):
            return None, None
        c = counters.get(self._disk)
        if c is None:
            return None, None
        previous, self._last_disk = self._last_disk, (now, int(c.read_bytes), int(c.write_bytes))
        if previous is None or now <= previous[0]:
            return None, None
        dt = now - previous[0]
        return (c.read_bytes - previous[1]) / dt, (c.write_bytes - previous[2]) / dt

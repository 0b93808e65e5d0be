"""Checks before a launch. Each returns Findings (what, why, the exact fix); an ERROR stops the launch.

The checks look at this machine (files, ports, the training environment's python, ssh to the other nodes), so
this module sits at the edge; the decisions they feed (``wizard.launch_command``) stay pure. ``preflight`` runs
them all for one ``LaunchSpec``; the config's own rules come from the linter (``wizard.config.check``, told it
runs for a launch), the hostfile's from ``wizard.config.hostfile`` and NVMe offload's from ``wizard.config.nvme``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from runner import rundir
from wizard.config.check import lint_path
from wizard.config.hostfile import launch_hosts
from wizard.config.launchers import NOSSH_MIN_DEEPSPEED
from wizard.config.nvme import launch_nvme_findings, offload_sections
from wizard.config.schema import Consumer
from wizard.errors import DswizError
from wizard.findings import Finding, Severity
from wizard.hardware.hazards import fixed_arch_list, unparsable_arch_entries
from wizard.hardware.report import HardwareReport
from wizard.launch_command import LaunchSpec, effective_config_arg
from wizard.units import fmt_bytes

SSH_LAUNCHERS = ("pdsh", "openmpi", "mpich", "impi", "mvapich")  # reach the other nodes by ssh

# Printed by the training environment's python: what it is and what it has, without importing torch (fast).
_PROBE = (
    "import importlib.metadata as m, json, sys; "
    "d = {(x.metadata['Name'] or '').lower(): x.version for x in list(m.distributions())[::-1]}; "
    "print(json.dumps({'executable': sys.executable, 'python': sys.version.split()[0], "
    "'deepspeed': d.get('deepspeed'), 'torch': d.get('torch'), 'accelerate': d.get('accelerate')}))"
)  # one line: it travels through ssh as a shell word


@dataclass(frozen=True)
class TrainingEnv:
    """What the training environment's python reports about itself."""

    executable: str
    python: str
    deepspeed: str | None
    torch: str | None
    accelerate: str | None


@dataclass(frozen=True)
class PreflightResult:
    findings: tuple[Finding, ...]
    env_fixes: tuple[tuple[str, str | None], ...] = ()  # environment changes the job needs (reported)
    training_env: TrainingEnv | None = None
    hosts: tuple[tuple[str, int], ...] = ()  # from the hostfile

    @property
    def ok(self) -> bool:
        return not any(f.severity is Severity.ERROR for f in self.findings)


# --------------------------------------------------------------------------------------------- the script


def check_script(script: str) -> list[Finding]:
    path = Path(script)
    if not path.exists():
        return [
            Finding(
                Severity.ERROR,
                "script-missing",
                f"the training script {script} does not exist",
                "every rank would fail at once with 'No such file or directory'",
                "check the path (it is relative to the current directory)",
                script,
            )
        ]
    if not path.is_file():
        return [
            Finding(
                Severity.ERROR,
                "script-not-a-file",
                f"{script} is not a file",
                "the launcher runs it with python",
                "pass the training script's path",
                script,
            )
        ]
    if not os.access(path, os.R_OK):
        return [
            Finding(
                Severity.ERROR,
                "script-unreadable",
                f"{script} cannot be read",
                "python cannot run a file it cannot read",
                f"chmod u+r {shlex.quote(script)}",
                script,
            )
        ]
    return []


def check_script_code(spec: LaunchSpec, ds_config: Mapping[str, Any]) -> list[Finding]:
    """The code-change hints' errors and warnings for this script with this config and consumer (wizard.hints):
    e.g. the optimizer from the config while the script builds its own LR scheduler under accelerate."""
    from dataclasses import replace

    from wizard.hints import script_findings

    try:
        text = Path(spec.script).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []  # check_script reports it
    consumer = config_consumer(spec.launcher, effective_config_arg(spec))
    return [
        replace(f, location=f"{spec.script} ({f.location})")
        for f in script_findings(consumer, ds_config, text)
    ]


# ------------------------------------------------------------------------------------ the training python


def probe_python(python: str, *, timeout: float = 30.0) -> TrainingEnv | None:
    """Ask ``python`` what it is (None when it cannot run)."""
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _parse_probe(proc.stdout) if proc.returncode == 0 else None


def _parse_probe(stdout: str) -> TrainingEnv | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and "python" in d:
            return TrainingEnv(
                executable=str(d.get("executable") or ""),
                python=str(d["python"]),
                deepspeed=d.get("deepspeed"),
                torch=d.get("torch"),
                accelerate=d.get("accelerate"),
            )
    return None


def check_training_python(python: str, launcher: str) -> tuple[list[Finding], TrainingEnv | None]:
    env = probe_python(python)
    if env is None:
        return [
            Finding(
                Severity.ERROR,
                "python-unusable",
                f"the training python {python!r} cannot be run",
                "the launcher and every rank run with this interpreter",
                "pass --python /path/to/the/training/env/bin/python",
                "--python",
            )
        ], None
    needed = {"deepspeed": ("deepspeed", "torch"), "accelerate": ("accelerate", "deepspeed", "torch")}
    needed_here = needed.get(launcher, ("torch",))
    missing = [pkg for pkg in needed_here if getattr(env, pkg) is None]
    if missing:
        return [
            Finding(
                Severity.ERROR,
                "python-missing-packages",
                f"{env.executable} has no {', '.join(missing)}",
                f"the {launcher} launcher runs the job with this python",
                f"pass --python pointing at the training environment, or `{python} -m pip install {' '.join(missing)}`",
                "--python",
            )
        ], env
    return [], env


def _version_tuple(version: str | None) -> tuple[int, ...]:
    parts = re.findall(r"\d+", (version or "").split("+")[0])[:3]
    return tuple(int(p) for p in parts)


def check_nossh_support(env: TrainingEnv | None) -> list[Finding]:
    if env is None or env.deepspeed is None or _version_tuple(env.deepspeed) >= NOSSH_MIN_DEEPSPEED:
        return []
    return [
        Finding(
            Severity.ERROR,
            "nossh-too-old",
            f"DeepSpeed {env.deepspeed} has no one-launcher-per-node mode (--no_ssh)",
            "it arrived in DeepSpeed 0.14.5; older launchers reject the flag",
            "upgrade DeepSpeed on every node (pip install -U deepspeed), or use --launcher-mode pdsh",
            "--launcher-mode",
        )
    ]


# ------------------------------------------------------------------------------------------- the config


def lint_config(
    path: str, *, consumer: Consumer, world_size: int | None, hardware: HardwareReport | None
) -> list[Finding]:
    """`dswiz check` on the config (a DeepSpeed JSON, or an accelerate YAML with its JSON): the one call site of
    the config linter, told it runs for a launch (the rules the launch takes care of itself stay quiet)."""
    return lint_path(path, consumer=consumer, world_size=world_size, hardware=hardware, at_launch=True)


def config_consumer(launcher: str, config_arg: str) -> Consumer:
    """Who reads the config, in `dswiz check --for` terms (decides e.g. whether "auto" is allowed)."""
    if launcher == "accelerate":
        return "accelerate"
    return "trainer" if config_arg == "deepspeed" else "deepspeed"


# -------------------------------------------------------------------------------------------------- GPUs


def visible_gpu_count(hardware: HardwareReport, visible_devices: str | None) -> int:
    if visible_devices is not None:
        ids = [d for d in visible_devices.split(",") if d.strip()]
        return min(len(ids), len(hardware.gpus)) if hardware.gpus else len(ids)
    return len(hardware.gpus)


def check_gpu_count(
    hardware: HardwareReport | None, *, requested: int | None, visible_devices: str | None = None
) -> list[Finding]:
    """``requested``: processes this node will start (None: one per visible GPU)."""
    if hardware is None:
        return [
            Finding(
                Severity.INFO,
                "gpu-count-unchecked",
                "the GPU count was not checked",
                "hardware detection is not part of this build of dswiz",
                "update dswiz; `nvidia-smi -L` lists the GPUs meanwhile",
            )
        ]
    if not hardware.gpus:
        reason = f" ({hardware.no_gpu_reason})" if hardware.no_gpu_reason else ""
        return [
            Finding(
                Severity.WARNING,
                "no-gpu",
                f"no NVIDIA GPU was found{reason}: DeepSpeed will run the ranks on the CPU (gloo)",
                "fine for trying a script or a config; far too slow for real training",
                "run on a machine with GPUs, or describe them for planning: dswiz plan --hardware 8xA100-80GB",
            )
        ]
    visible = visible_gpu_count(hardware, visible_devices)
    if requested is not None and requested > visible:
        where = " (CUDA_VISIBLE_DEVICES)" if visible_devices is not None else ""
        return [
            Finding(
                Severity.ERROR,
                "gpu-count",
                f"{requested} processes per node were asked for, but {visible} GPU(s) are visible{where}",
                "DeepSpeed would fail to place the extra ranks (or put two on one GPU and run out of memory)",
                f"pass --nproc {visible}, or make more GPUs visible",
                "--nproc",
            )
        ]
    if requested is not None and requested < visible:
        return [
            Finding(
                Severity.INFO,
                "gpu-count-partial",
                f"using {requested} of the {visible} visible GPUs",
                "the others stay idle",
                f"pass --nproc {visible} to use them all",
                "--nproc",
            )
        ]
    return []


# -------------------------------------------------------------------------------------------------- port


def port_is_free(port: int, host: str = "") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


@dataclass
class PortReservation:
    """A rendezvous port this dswiz holds for the whole launch: an flock on ``<ports dir>/<port>.lock`` that every
    other dswiz on this machine respects, held until ``release()`` or until this process ends, however it ends
    (the kernel drops the lock). The port being free when checked is not enough: the ranks bind it seconds later
    (~10 s on CPU), and a second launch in between would pick the same one."""

    port: int
    _lock: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def ports_dir() -> Path:
    """Where the port locks live: the user's runtime folder when there is one (tmpfs, per boot), else dswiz's state
    folder."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "dswiz" if runtime and os.path.isdir(runtime) else rundir.state_dir()
    return base / "ports"


def _lock_port(port: int, folder: Path, *, create: bool = True) -> IO[str] | None:
    """The lock of ``port``, or None when another dswiz holds it (or locks cannot be taken here). ``create=False``
    writes nothing: a port without a lock file is free of other launches (the caller gets a lock on nothing)."""
    import fcntl

    path = folder / f"{port}.lock"
    if not create and not path.exists():
        return open(os.devnull, encoding="ascii")  # closed by the caller
    try:
        if create:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fh = open(path, "a" if create else "r", encoding="ascii")  # noqa: SIM115 - held for the whole launch
    except OSError:
        return None
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        return None
    return fh


def reserve_port(
    preferred: int, *, folder: Path | None = None, tries: int = 20, hold: bool = True
) -> PortReservation:
    """``preferred`` when it is free and no other dswiz holds it, else a free port the system hands out; reserved
    either way (``PortReservation``). Without a usable lock folder the port is only checked free. ``hold=False``
    (a dry run) chooses the same way but writes and holds nothing."""
    folder = folder or ports_dir()
    candidates = itertools.chain([preferred], (free_port() for _ in range(tries)))
    for port in candidates:
        lock = _lock_port(port, folder, create=hold)
        if lock is not None and not hold:
            lock.close()
            lock = None
            if port_is_free(port):
                return PortReservation(port)
            continue
        if lock is None and folder.is_dir() and os.access(folder, os.W_OK):
            continue  # another dswiz launch holds it
        if port_is_free(port):
            return PortReservation(port, lock)
        if lock is not None:
            lock.close()
    return PortReservation(free_port())


def check_port(port: int) -> list[Finding]:
    if port_is_free(port):
        return []
    return [
        Finding(
            Severity.ERROR,
            "port-in-use",
            f"the rendezvous port {port} is already in use on this machine",
            "rank 0 could not listen on it and every rank would wait, then time out",
            f"pass --master-port {free_port()} (free now), or stop the job that holds {port}",
            "--master-port",
        )
    ]


# -------------------------------------------------------------------- host RAM (NVMe: wizard.config.nvme)


def check_host_ram(
    ds_config: Mapping[str, Any], hardware: HardwareReport | None, *, need_bytes: int | None
) -> list[Finding]:
    """Host RAM against the predicted CPU-offload need (``need_bytes`` from the planner; None: not predicted)."""
    cpu = [
        loc for loc, s in offload_sections(ds_config) if str(s.get("device", "")).lower() in ("cpu", "nvme")
    ]
    if hardware is None:
        return []
    available = hardware.host.ram_available_bytes or hardware.host.ram_total_bytes
    if not cpu or need_bytes is None or available is None:
        return []
    if need_bytes > available:
        return [
            Finding(
                Severity.ERROR,
                "host-ram",
                f"CPU offload needs about {fmt_bytes(need_bytes)} of host RAM; {fmt_bytes(available)} is available",
                "the host OOM killer would end a rank (exit -9) once the offloaded states are allocated",
                "offload less (optimizer only), use ZeRO-3 across more nodes, or free host memory",
                cpu[0],
            )
        ]
    if need_bytes > 0.85 * available:
        return [
            Finding(
                Severity.WARNING,
                "host-ram-tight",
                f"CPU offload needs about {fmt_bytes(need_bytes)} of the {fmt_bytes(available)} host RAM available",
                "pinned buffers and the data loader come on top; little room is left",
                "close other jobs on this host, or offload less",
                cpu[0],
            )
        ]
    return []


# ------------------------------------------------------------------------------ TORCH_CUDA_ARCH_LIST


def check_arch_list(environ: Mapping[str, str]) -> tuple[list[Finding], dict[str, str | None]]:
    """TORCH_CUDA_ARCH_LIST entries DeepSpeed's op builder cannot parse ("9.0a") are fixed for the job:
    DeepSpeed 0.19.8 ``deepspeed/ops/op_builder/builder.py`` ``compute_capability_args`` sorts them with int().

    The repair is the hardware module's (``wizard.hardware.hazards.fixed_arch_list``); "" there means unset.
    """
    value = environ.get("TORCH_CUDA_ARCH_LIST")
    fixed = fixed_arch_list(value)
    if value is None or fixed is None:
        return [], {}
    bad = ", ".join(unparsable_arch_entries(value))
    shown = repr(fixed) if fixed else "unset (DeepSpeed builds for the GPUs it sees)"
    yours = f"export TORCH_CUDA_ARCH_LIST='{fixed}'" if fixed else "unset TORCH_CUDA_ARCH_LIST"
    return [
        Finding(
            Severity.WARNING,
            "arch-list-unparsable",
            f"TORCH_CUDA_ARCH_LIST={value!r} has entries DeepSpeed cannot parse ({bad}); {shown} for this job",
            "DeepSpeed's JIT op builder fails on them (ValueError: invalid literal for int())",
            f"nothing to do for this job: dswiz fixed it; to fix your shell too: {yours}",
            "TORCH_CUDA_ARCH_LIST",
        )
    ], {"TORCH_CUDA_ARCH_LIST": fixed or None}


def check_alloc_conf(environ: Mapping[str, str]) -> list[Finding]:
    """An expandable-segments setting PyTorch cannot parse stops the job at its first CUDA allocation."""
    from wizard.alloc_conf import refused_settings

    return [
        Finding(
            Severity.ERROR,
            "alloc-conf-unparsable",
            f"{name} sets expandable_segments:{value}; PyTorch takes only True or False",
            "the job would stop at its first CUDA allocation (Expected 'True' or 'False' ... in ConfigTokenizer)",
            f"write expandable_segments:True (or False) in {name}",
            name,
        )
        for name, value in refused_settings(environ)
    ]


def check_build_locks(environ: Mapping[str, str], home: Path) -> list[Finding]:
    """A JIT-build lock no process holds makes the job hang before its first step (runner.build_locks)."""
    from runner.build_locks import find_build_locks

    out = []
    for lock in find_build_locks(environ, home):
        pids = ", ".join(map(str, lock.held_by))
        if lock.stuck:
            minutes = (lock.age_s or 0) / 60
            out.append(
                Finding(
                    Severity.WARNING,
                    "op-build-stuck",
                    f"process {pids} has held the build lock of DeepSpeed's {lock.op} op for {minutes:.0f} min",
                    "a build takes a few minutes at most: this one is stuck (waiting on a pipe nobody reads, "
                    "stopped, or starved of memory), and a job that needs the op waits behind it for ever",
                    f"see what it does: ps -o pid,stat,etime,args -p {pids.replace(' ', '')}; if it is stuck, "
                    f"kill {' '.join(map(str, lock.held_by))}, then rm {shlex.quote(str(lock.path))}",
                    str(lock.path),
                )
            )
        elif lock.held_by:
            out.append(
                Finding(
                    Severity.INFO,
                    "op-build-running",
                    f"another process (PID {pids}) is building DeepSpeed's {lock.op} op now",
                    "a job that needs the same op waits until that build ends (usually a minute or two)",
                    "nothing to do; the job starts once the build is done",
                    str(lock.path),
                )
            )
        else:
            out.append(
                Finding(
                    Severity.WARNING,
                    "op-build-lock-stale",
                    f"a killed build of DeepSpeed's {lock.op} op left its lock file, and no process holds it",
                    "torch's JIT build waits for that file to go away (torch.utils.file_baton.FileBaton.wait): a "
                    f"job that needs {lock.op} hangs before its first step, with no error",
                    f"rm {'-r ' if lock.path.is_dir() else ''}{shlex.quote(str(lock.path))}  (the op is rebuilt, "
                    "about a minute)",
                    str(lock.path),
                )
            )
    return out


def check_shm_buffers(shm_dir: str | None = None) -> list[Finding]:
    """DeepSpeed's CPU all-reduce files that no process holds: memory that ended jobs left (runner.reaper)."""
    from runner import reaper

    shm_dir = shm_dir or reaper.SHM_DIR
    orphans = reaper.orphaned_shm_buffers(shm_dir)
    if not orphans:
        return []
    total = sum(size for _, size in orphans)
    if len(orphans) <= 4:
        fix = "rm " + " ".join(shlex.quote(path) for path, _ in orphans)
    else:  # exactly those no process holds: a pattern would take a running job's too
        fix = shlex.join([sys.executable, "-I", "-S", reaper.__file__, "--remove-orphaned-shm"])
    return [
        Finding(
            Severity.WARNING,
            "shm-buffers-left",
            f"{len(orphans)} DeepSpeed all-reduce file(s) in {shm_dir} hold {fmt_bytes(total)} of memory, and no "
            "process uses them",
            "DeepSpeed's CPU all-reduce creates one per rank (about 66 MB) and never removes it "
            "(deepspeed/ops/csrc/cpu/comm/shm.cpp, 0.19.8); dswiz removes its own jobs' files, but jobs started "
            f"otherwise leave theirs, and {shm_dir} is memory: enough of them slow builds and jobs down or make "
            "them fail",
            fix,
            shm_dir,
        )
    ]


# ---------------------------------------------------------------------------------------------- multi-node


def check_hostfile(path: str) -> tuple[list[Finding], list[tuple[str, int]]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        return [
            Finding(
                Severity.ERROR,
                "hostfile-unreadable",
                f"the hostfile {path} cannot be read ({e.strerror})",
                "without it DeepSpeed silently runs on this machine only",
                "pass the path of a hostfile with one '<host> slots=<gpus>' line per node",
                path,
            )
        ], []
    try:
        return [], launch_hosts(text, source=path)
    except DswizError as e:
        return [
            Finding(Severity.ERROR, "hostfile-invalid", e.problem, "DeepSpeed refuses it", e.fix or "", path)
        ], []


def ssh_probe_command(host: str, python: str, *, timeout_s: int, ssh: str = "ssh") -> list[str]:
    """Batch mode (never a password prompt) and a connect timeout: a dead host fails fast."""
    remote = shlex.join([python, "-c", _PROBE])
    return [ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={timeout_s}", host, remote]


def check_hosts(
    hosts: Sequence[str], python: str, local: TrainingEnv | None, *, timeout_s: int = 10, ssh: str = "ssh"
) -> list[Finding]:
    """Every host: reachable by ssh in batch mode, the same python path, the same DeepSpeed version as here."""

    def one(host: str) -> list[Finding]:
        cmd = ssh_probe_command(host, python, timeout_s=timeout_s, ssh=ssh)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 20, check=False)
        except subprocess.TimeoutExpired:
            proc = None
        except OSError as e:
            return [
                Finding(
                    Severity.ERROR,
                    "ssh-missing",
                    f"ssh cannot be run ({e.strerror})",
                    "the launcher reaches the other nodes with ssh",
                    "install an ssh client, or use --launcher-mode nossh and start one dswiz launch per node",
                )
            ]
        if proc is None or proc.returncode == 255:
            detail = "timed out" if proc is None else (proc.stderr.strip().splitlines() or ["failed"])[-1]
            return [
                Finding(
                    Severity.ERROR,
                    "host-unreachable",
                    f"{host} is not reachable by ssh in batch mode ({detail})",
                    "the launcher starts the ranks on every host over passwordless ssh",
                    f"set up key-based ssh (ssh-copy-id {host}) and check `ssh -o BatchMode=yes {host} true`; "
                    "or use --launcher-mode nossh with one dswiz launch per node",
                    host,
                )
            ]
        remote = _parse_probe(proc.stdout) if proc.returncode == 0 else None
        if remote is None:
            return [
                Finding(
                    Severity.ERROR,
                    "host-python-missing",
                    f"{python} does not run on {host}",
                    "pdsh runs the same python path on every node",
                    f"install the training environment at {python} on {host} too (same path on every node)",
                    host,
                )
            ]
        return _remote_deepspeed_findings(host, python, local, remote)

    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
        results = list(pool.map(one, hosts))
    return [f for r in results for f in r]


def _remote_deepspeed_findings(
    host: str, python: str, local: TrainingEnv | None, remote: TrainingEnv
) -> list[Finding]:
    """DeepSpeed on another node: installed, and the version this node has."""
    if remote.deepspeed is None:
        return [
            Finding(
                Severity.ERROR,
                "host-deepspeed-missing",
                f"{python} on {host} has no DeepSpeed",
                "the ranks on that node could not import it",
                f"install DeepSpeed {local.deepspeed if local else ''} into {python} on {host}".rstrip(),
                host,
            )
        ]
    if local is not None and local.deepspeed and remote.deepspeed != local.deepspeed:
        return [
            Finding(
                Severity.ERROR,
                "host-deepspeed-version",
                f"{host} has DeepSpeed {remote.deepspeed}, this node {local.deepspeed}",
                "ranks of different versions may disagree on the ZeRO partitioning and hang or crash",
                f"pip install deepspeed=={local.deepspeed} on {host}",
                host,
            )
        ]
    return []


# ------------------------------------------------------------------------------------------------ all of it


def requested_procs_here(spec: LaunchSpec, hosts: Sequence[tuple[str, int]]) -> int | None:
    """How many ranks this node will start (None: one per visible GPU)."""
    if spec.nproc is not None:
        return spec.nproc
    if spec.include:
        local = [part for part in spec.include.split("@") if part.split(":")[0] in ("localhost", "127.0.0.1")]
        if local and ":" in local[0]:
            return len(local[0].split(":")[1].split(","))
    if hosts and spec.node_rank is not None and spec.node_rank < len(hosts):
        return hosts[spec.node_rank][1]
    return None


def preflight(
    spec: LaunchSpec,
    *,
    hardware: HardwareReport | None,
    ds_config: Mapping[str, Any] | None,
    environ: Mapping[str, str],
    config_path: str | None = None,
    cpu_offload_need_bytes: int | None = None,
    nvme_need_bytes: int | None = None,
    ssh_timeout_s: int = 10,
    check_port_here: bool = True,
    probe_hosts: bool = True,
) -> PreflightResult:
    """All checks for one launch, errors first. ``config_path`` is the file the linter reads (the original)."""
    findings: list[Finding] = list(check_script(spec.script))
    py_findings, env = check_training_python(spec.python, spec.launcher)
    findings += py_findings
    hosts: list[tuple[str, int]] = []
    if spec.hostfile:
        hf_findings, hosts = check_hostfile(spec.hostfile)
        findings += hf_findings
        if spec.node_rank is not None and hosts and spec.node_rank >= len(hosts):
            findings.append(
                Finding(
                    Severity.ERROR,
                    "node-rank-range",
                    f"--node-rank {spec.node_rank} but the hostfile lists {len(hosts)} node(s)",
                    "node ranks count from 0 to nodes-1",
                    f"pass --node-rank between 0 and {len(hosts) - 1}",
                    "--node-rank",
                )
            )
        if spec.launcher == "deepspeed" and spec.multinode_launcher == "nossh":
            findings += check_nossh_support(env)
        if probe_hosts and spec.ssh_multinode and spec.multinode_launcher in SSH_LAUNCHERS and hosts:
            findings += check_hosts([h for h, _ in hosts], spec.python, env, timeout_s=ssh_timeout_s)
    findings += check_gpu_count(
        hardware, requested=requested_procs_here(spec, hosts), visible_devices=spec.visible_devices
    )
    if check_port_here and spec.master_port is not None:
        findings += check_port(spec.master_port)
    if config_path is not None:
        # The world size when it is known: the ranks per node times the nodes (on CPU without --nproc, unknown).
        procs = requested_procs_here(spec, hosts) or (
            len(hardware.gpus) if hardware and hardware.gpus else None
        )
        nodes = spec.num_nodes or (len(hosts) if hosts else 1)
        findings += lint_config(
            config_path,
            consumer=config_consumer(spec.launcher, spec.config_arg or ""),
            world_size=procs * nodes if procs else None,
            hardware=hardware,
        )
    if ds_config is not None:
        findings += check_script_code(spec, ds_config)
        findings += launch_nvme_findings(ds_config, hardware, need_bytes=nvme_need_bytes)
        findings += check_host_ram(ds_config, hardware, need_bytes=cpu_offload_need_bytes)
    arch_findings, arch_fix = check_arch_list(environ)
    findings += arch_findings
    findings += check_alloc_conf(environ)
    findings += check_build_locks(environ, Path(environ.get("HOME") or Path.home()))
    findings += check_shm_buffers()
    ordered = sorted(findings, key=lambda f: f.severity.rank)
    return PreflightResult(
        findings=tuple(ordered), env_fixes=tuple(arch_fix.items()), training_env=env, hosts=tuple(hosts)
    )

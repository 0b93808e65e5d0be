"""NVMe offload's swap directory (``nvme_path``): every rule a path must pass, for each surface that checks one.

The rules: the path is given and absolute; on a local (not network) filesystem; on an NVMe drive; with room for
what the planner predicts; a directory the user can write to; and DeepSpeed's async_io op has libaio. DeepSpeed
itself refuses only a missing path (0.19.8 ``deepspeed/runtime/zero/partition_parameters.py``,
``Init._validate_remote_device``: "nvme_path ... cannot be None if remote device is nvme"); the others fail later,
at the first swap, or make each step slow (docs/deepspeed-rules.md).

Three surfaces, each asking at its own moment:
- ``nvme_path_findings``: the wizard, for the path typed before a config is written (the directory may be
  created later, and the machine may be described rather than this one);
- ``offload_nvme_findings``: the linter, for an offload section of a written config;
- ``launch_nvme_findings``: ``dswiz launch``'s preflight, on this machine, just before the job starts (the
  directory must exist now, a write is tried, the free space is measured).
"""

from __future__ import annotations

import ctypes.util
import os
import shlex
import shutil
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wizard.config.lint.base import ERROR, INFO, WARNING, finding
from wizard.findings import Finding
from wizard.hardware.report import NETWORK_FILESYSTEMS, DiskInfo, HardwareReport
from wizard.units import fmt_bytes

OFFLOAD_DIR_NAME = "dswiz-offload"
# A directory on the root filesystem that survives reboots and that every user may create entries in (/tmp is
# often tmpfs: host RAM, the very thing NVMe offload is meant to spare).
ROOT_FS_DIR = "/var/tmp"


def describes_this_machine(hardware: HardwareReport) -> bool:
    """The report was detected on the machine dswiz runs on (not a described cluster, not another machine's
    saved report): only then can a path be checked on this filesystem."""
    return hardware.source == "detected" and hardware.host.hostname == socket.gethostname()


def suggest_nvme_path(hardware: HardwareReport | None) -> str | None:
    """A directory for the swap files on the NVMe drive with the most free space (None: no NVMe drive known)."""
    drive = hardware.host.swap_drive if hardware is not None else None
    if drive is None:
        return None
    mount = drive.mountpoint.rstrip("/")
    return f"{mount or ROOT_FS_DIR}/{OFFLOAD_DIR_NAME}"


def nvme_path_findings(
    path: str,
    hardware: HardwareReport | None,
    *,
    need_bytes: int | None = None,
    on_this_machine: bool | None = None,
) -> list[Finding]:
    """What is wrong with ``path`` as ``nvme_path`` (ERROR: it cannot work; WARNING: it works, slowly).
    ``need_bytes``: the planner's predicted NVMe use per node. ``on_this_machine`` None: decided from the report."""
    where = "nvme_path"
    path = path.strip()
    if not path:
        return [
            finding(
                ERROR,
                "nvme-path-missing",
                "NVMe offload needs a directory for its swap files",
                'DeepSpeed stops: "nvme_path" cannot be None if remote device is nvme',
                f"type a directory on a local NVMe drive, e.g. {suggest_nvme_path(hardware) or '/local_nvme/dswiz'}",
                where,
            )
        ]
    if not os.path.isabs(os.path.expanduser(path)):
        return [
            finding(
                ERROR,
                "nvme-path-relative",
                f"nvme_path {path} is relative",
                "every rank (on every node) opens it from its own working directory",
                "write an absolute path, e.g. " + (suggest_nvme_path(hardware) or "/local_nvme/dswiz"),
                where,
            )
        ]
    out: list[Finding] = []
    disk = disk_for(path, hardware.host.disks) if hardware is not None else None
    if hardware is not None and disk is None and hardware.host.disks:
        mounts = ", ".join(d.mountpoint for d in hardware.host.local_nvme_disks) or "none known"
        out.append(
            finding(
                WARNING,
                "nvme-path-unknown-disk",
                f"nvme_path {path} is on none of the drives the hardware lists (NVMe: {mounts})",
                "its speed and free space cannot be checked",
                f"put it under an NVMe mount ({suggest_nvme_path(hardware) or 'see dswiz detect'})",
                where,
            )
        )
    if disk is not None and disk.fstype in NETWORK_FILESYSTEMS:
        out.append(
            finding(
                ERROR,
                "nvme-path-network",
                f"nvme_path {path} is on {disk.mountpoint}, a network filesystem ({disk.fstype})",
                "every rank streams optimizer state through it each step; shared by all nodes it is slow and "
                "the swap files of different nodes collide",
                "use a directory on a drive local to each node",
                where,
            )
        )
    elif disk is not None and not disk.nvme:
        out.append(
            finding(
                WARNING,
                "nvme-not-on-nvme",
                f"nvme_path {path} is on {disk.device} ({disk.mountpoint}), not an NVMe drive",
                "offload streams optimizer state every step: a SATA or virtual disk makes each step many times "
                "slower",
                f"use a directory on an NVMe drive ({suggest_nvme_path(hardware) or 'none is listed'})",
                where,
            )
        )
    if disk is not None and need_bytes is not None and need_bytes > disk.free_bytes:
        out.append(
            finding(
                ERROR,
                "nvme-path-space",
                f"NVMe offload needs {fmt_bytes(need_bytes)} per node; {disk.mountpoint} has "
                f"{fmt_bytes(disk.free_bytes)} free",
                "DeepSpeed writes the offloaded states there and the job fails when the drive fills up",
                "free space there, choose a larger drive, or offload less (optimizer only, or CPU)",
                where,
            )
        )
    local = (
        describes_this_machine(hardware) if on_this_machine is None and hardware else bool(on_this_machine)
    )
    if local:
        out += writable_findings(path, where)
    return out


# ---------------------------------------------------------------------------------------------- the linter


def offload_nvme_findings(
    offload: Mapping[str, Any],
    where: str,
    hardware: HardwareReport | None,
    *,
    check_local_paths: bool,
    at_launch: bool,
) -> list[Finding]:
    """One offload section of a written config with ``device: nvme`` (``where``: its key path). ``at_launch``: the
    launch checks the path and libaio on this machine itself (``launch_nvme_findings``); only the drive is judged."""
    path = offload.get("nvme_path")
    if not isinstance(path, str) or not path.strip():
        if at_launch:
            return []  # the launch reports it with its own check
        return [
            finding(
                ERROR,
                "nvme-path-missing",
                f"{where} offloads to nvme without an nvme_path",
                'DeepSpeed stops: "nvme_path" in DeepSpeed Config cannot be None if remote device is nvme',
                f'add "nvme_path": "/local_nvme/dswiz" to {where.split(".")[-1]} (a directory on a local NVMe drive)',
                f"{where}.device",
            )
        ]
    out: list[Finding] = []
    if check_local_paths and not at_launch:
        out += writable_findings(path, f"{where}.nvme_path")
    out += _lint_drive(path, where, hardware)
    if at_launch:
        return out
    libaio = hardware.host.libaio if hardware is not None else None
    if libaio is False:
        out.append(
            finding(
                ERROR,
                "no-libaio",
                "NVMe offload needs libaio, which this machine lacks",
                "DeepSpeed's async_io op (ds_report: async_io [NO]) cannot build without it, so the job fails",
                "install libaio (Debian/Ubuntu: apt install libaio-dev), or offload to cpu instead",
                f"{where}.device",
            )
        )
    elif libaio is None:
        out.append(
            finding(
                INFO,
                "libaio-unknown",
                "NVMe offload needs DeepSpeed's async_io op (libaio); not checked here",
                "without libaio the op cannot build and the job fails at start",
                "run `ds_report` on the training machine and look for async_io [OKAY] (or pass --hardware)",
                f"{where}.device",
            )
        )
    return out


def _lint_drive(path: str, where: str, hardware: HardwareReport | None) -> list[Finding]:
    disk = disk_for(path, hardware.host.disks) if hardware is not None else None
    if disk is None or disk.nvme:
        return []
    return [
        finding(
            WARNING,
            "nvme-not-on-nvme",
            f"nvme_path {path} is on {disk.device} ({disk.fstype}), not an NVMe drive",
            "offload streams optimizer state every step: a SATA/network disk makes each step many times slower",
            "point nvme_path at a directory on a local NVMe drive (dswiz detect lists them)",
            f"{where}.nvme_path",
        )
    ]


def writable_findings(path: str, where: str) -> list[Finding]:
    """The directory exists or can be created (its nearest existing parent is a directory), and is writable."""
    target = Path(os.path.expanduser(path))
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        return [
            finding(
                ERROR,
                "nvme-path-not-writable",
                f"nvme_path {path}: {probe} is a file, not a directory",
                "DeepSpeed creates its swap directory there and fails",
                "point nvme_path at a directory",
                where,
            )
        ]
    if not os.access(probe, os.W_OK | os.X_OK):
        return [
            finding(
                ERROR,
                "nvme-path-not-writable",
                f"nvme_path {path} is not writable here ({probe} is not writable by you)",
                "DeepSpeed creates swap files under nvme_path and fails at the first optimizer step",
                f"create it and make it yours (sudo mkdir -p {path} && sudo chown $USER {path}), or choose another",
                where,
            )
        ]
    return []


def disk_for(path: str, disks: tuple[DiskInfo, ...]) -> DiskInfo | None:
    """The drive ``path`` is on: the disk with the longest mount point that contains it."""
    absolute = os.path.abspath(os.path.expanduser(path))
    best: DiskInfo | None = None
    for disk in disks:
        mount = disk.mountpoint.rstrip("/") or "/"
        inside = absolute == mount or absolute.startswith(mount + "/") or mount == "/"
        if inside and (best is None or len(mount) > len(best.mountpoint.rstrip("/") or "/")):
            best = disk
    return best


# ------------------------------------------------------------------------------------------------ the launch


def offload_sections(ds_config: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(key path, section)`` for the config's offload_optimizer and offload_param sections that are mappings."""
    zero = ds_config.get("zero_optimization")
    if not isinstance(zero, Mapping):
        return []
    out = []
    for key in ("offload_optimizer", "offload_param"):
        section = zero.get(key)
        if isinstance(section, Mapping):
            out.append((f"zero_optimization.{key}", section))
    return out


def libaio_present(hardware: HardwareReport | None) -> bool:
    if hardware is not None and hardware.host.libaio is not None:
        return hardware.host.libaio
    return ctypes.util.find_library("aio") is not None


def launch_nvme_findings(
    ds_config: Mapping[str, Any], hardware: HardwareReport | None, *, need_bytes: int | None = None
) -> list[Finding]:
    """NVMe offload on this machine, now: the path is set, exists, takes a file, has room (``need_bytes`` when
    predicted), and libaio is present."""
    findings: list[Finding] = []
    nvme = [(loc, s) for loc, s in offload_sections(ds_config) if str(s.get("device", "")).lower() == "nvme"]
    for loc, section in nvme:
        findings += _launch_path_findings(section.get("nvme_path"), loc, need_bytes)
    if nvme and not libaio_present(hardware):
        findings.append(
            finding(
                ERROR,
                "libaio-missing",
                "NVMe offload needs DeepSpeed's async_io op, and libaio is not installed",
                "the op cannot build, so the job fails at start (ds_report shows async_io [NO])",
                "install libaio (Debian/Ubuntu: sudo apt install libaio-dev), or offload to cpu instead",
                nvme[0][0] + ".device",
            )
        )
    return findings


def _launch_path_findings(raw: Any, loc: str, need_bytes: int | None) -> list[Finding]:
    where = f"{loc}.nvme_path"
    if not raw:
        return [
            finding(
                ERROR,
                "nvme-path-missing",
                f"{loc}.device is nvme but nvme_path is not set",
                "DeepSpeed refuses it: 'nvme_path … cannot be None if remote device is nvme'",
                f'set {loc}.nvme_path to a folder on a local NVMe disk, e.g. "/local_nvme"',
                where,
            )
        ]
    path = Path(str(raw))
    if not path.is_dir():
        return [
            finding(
                ERROR,
                "nvme-path-absent",
                f"the NVMe offload folder {path} does not exist",
                "DeepSpeed creates its swap files there and fails when it cannot",
                f"mkdir -p {shlex.quote(str(path))} (on a local NVMe disk), or change {loc}.nvme_path",
                where,
            )
        ]
    if not _takes_a_file(path):
        return [
            finding(
                ERROR,
                "nvme-path-readonly",
                f"the NVMe offload folder {path} is not writable",
                "DeepSpeed writes the offloaded tensors there",
                f"choose a writable folder for {loc}.nvme_path, or fix its permissions",
                where,
            )
        ]
    free = shutil.disk_usage(path).free
    if need_bytes is not None and free < need_bytes:
        return [
            finding(
                ERROR,
                "nvme-no-room",
                f"{path} has {fmt_bytes(free)} free but the offload needs about {fmt_bytes(need_bytes)}",
                "the swap files would fill the disk mid-training",
                "free space there, or point nvme_path at a bigger disk",
                where,
            )
        ]
    return []


def _takes_a_file(path: Path) -> bool:
    """A real write, not os.access: root-squashed and read-only mounts answer access() wrongly."""
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".dswiz-preflight-"):
            return True
    except OSError:
        return False

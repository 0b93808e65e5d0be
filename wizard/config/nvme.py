"""Where NVMe offload writes its swap files (``nvme_path``, FACTS §3 rule 5): a default on the machine's NVMe
drive, and the checks a path must pass before it is written into a config -- absolute, on a local (not network)
filesystem, on an NVMe drive, with room for what the planner predicts, and, when the hardware report describes
the machine dswiz runs on, an existing or creatable directory the user can write to."""

from __future__ import annotations

import os
import socket

from wizard.config.lint.base import ERROR, WARNING, finding
from wizard.config.lint.zero import disk_for, writable_findings
from wizard.findings import Finding
from wizard.hardware.report import DiskInfo, HardwareReport
from wizard.units import fmt_bytes

OFFLOAD_DIR_NAME = "dswiz-offload"
# A directory on the root filesystem that survives reboots and that every user may create entries in (/tmp is
# often tmpfs: host RAM, the very thing NVMe offload is meant to spare).
ROOT_FS_DIR = "/var/tmp"
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


def describes_this_machine(hardware: HardwareReport) -> bool:
    """The report was detected on the machine dswiz runs on (not a described cluster, not another machine's
    saved report): only then can a path be checked on this filesystem."""
    return hardware.source == "detected" and hardware.host.hostname == socket.gethostname()


def nvme_disks(hardware: HardwareReport) -> list[DiskInfo]:
    """The report's NVMe drives on local filesystems, most free space first."""
    disks = [d for d in hardware.host.disks if d.nvme and d.fstype not in NETWORK_FILESYSTEMS]
    return sorted(disks, key=lambda d: (-d.free_bytes, d.mountpoint))


def suggest_nvme_path(hardware: HardwareReport | None) -> str | None:
    """A directory for the swap files on the NVMe drive with the most free space (None: no NVMe drive known)."""
    disks = nvme_disks(hardware) if hardware is not None else []
    if not disks:
        return None
    mount = disks[0].mountpoint.rstrip("/")
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
        mounts = ", ".join(d.mountpoint for d in nvme_disks(hardware)) or "none known"
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

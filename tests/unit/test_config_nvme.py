"""nvme_path: the default on the machine's NVMe drive and the checks a typed path must pass."""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from wizard.config.nvme import describes_this_machine, nvme_path_findings, suggest_nvme_path
from wizard.hardware import get_hardware
from wizard.hardware.report import DiskInfo, HardwareReport, HostInfo
from wizard.units import GiB

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hardware"


def codes(findings: list) -> list[str]:
    return [f.code for f in findings]


def machine(*disks: DiskInfo, source: str = "detected", hostname: str | None = None) -> HardwareReport:
    host = HostInfo(hostname=hostname or socket.gethostname(), disks=disks, libaio=True)
    return HardwareReport(source=source, host=host)  # type: ignore[arg-type]


def disk(mount: str, *, nvme: bool = True, free: int = 500 * GiB, fstype: str = "ext4") -> DiskInfo:
    return DiskInfo(mount, f"/dev/{mount.strip('/') or 'root'}", fstype, 2 * free, free, nvme=nvme)


def test_default_is_on_the_nvme_drive_with_most_room() -> None:
    hw = machine(disk("/", nvme=False), disk("/scratch", free=100 * GiB), disk("/nvme1", free=900 * GiB))
    assert suggest_nvme_path(hw) == "/nvme1/dswiz-offload"
    assert suggest_nvme_path(machine(disk("/", nvme=True))) == "/var/tmp/dswiz-offload"
    assert suggest_nvme_path(machine(disk("/", nvme=False))) is None
    assert suggest_nvme_path(machine(disk("/shared", fstype="nfs4"))) is None
    described = get_hardware("8xA100-80GB,nvme=3.5TB,libaio=true")
    assert suggest_nvme_path(described) == "/local_nvme/dswiz-offload"


def test_the_real_h200_report_has_no_nvme_drive() -> None:
    h200 = get_hardware(str(FIXTURES / "h200-detected.json"))
    assert suggest_nvme_path(h200) is None
    assert not describes_this_machine(h200) or h200.host.hostname == socket.gethostname()
    found = nvme_path_findings("/var/tmp/x", h200, on_this_machine=False)
    assert codes(found) == ["nvme-not-on-nvme"] and "/dev/vda" in found[0].what


def test_empty_and_relative_paths_are_refused() -> None:
    hw = machine(disk("/nvme1"))
    assert codes(nvme_path_findings(" ", hw)) == ["nvme-path-missing"]
    relative = nvme_path_findings("offload", hw)
    assert codes(relative) == ["nvme-path-relative"] and "/nvme1/dswiz-offload" in relative[0].fix


def test_free_space_is_checked_against_the_predicted_bytes() -> None:
    hw = machine(disk("/nvme1", free=100 * GiB))
    assert nvme_path_findings("/nvme1/x", hw, need_bytes=99 * GiB, on_this_machine=False) == []
    short = nvme_path_findings("/nvme1/x", hw, need_bytes=120 * GiB, on_this_machine=False)
    assert codes(short) == ["nvme-path-space"]
    assert "120.0 GiB" in short[0].what and "100.0 GiB" in short[0].what


def test_network_and_unknown_drives() -> None:
    hw = machine(disk("/", nvme=False), disk("/shared", fstype="nfs4"), disk("/nvme1"))
    assert codes(nvme_path_findings("/shared/me", hw, on_this_machine=False)) == ["nvme-path-network"]
    described = get_hardware("8xA100-80GB,nvme=3.5TB,libaio=true")
    assert nvme_path_findings("/local_nvme/dswiz", described) == []
    elsewhere = nvme_path_findings("/data/dswiz", described)
    assert codes(elsewhere) == ["nvme-path-unknown-disk"] and "/local_nvme" in elsewhere[0].what


def test_on_this_machine_the_directory_must_be_creatable(tmp_path: Path) -> None:
    hw = machine(disk("/", nvme=True, free=10_000 * GiB))
    assert describes_this_machine(hw)
    assert nvme_path_findings(str(tmp_path / "new" / "dir"), hw) == []  # creatable: its parent is writable
    a_file = tmp_path / "file"
    a_file.write_text("")
    blocked = nvme_path_findings(str(a_file / "x"), hw)
    assert codes(blocked) == ["nvme-path-not-writable"] and "is a file" in blocked[0].what
    # another machine's report (or a described one): this filesystem says nothing about that machine
    other = replace(hw, host=replace(hw.host, hostname="elsewhere"))
    assert not describes_this_machine(other)
    assert nvme_path_findings(str(a_file / "x"), other) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_on_this_machine_the_directory_must_be_writable(tmp_path: Path) -> None:
    hw = machine(disk("/", nvme=True, free=10_000 * GiB))
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert codes(nvme_path_findings(str(locked / "x"), hw)) == ["nvme-path-not-writable"]


def test_for_a_launch_the_linter_leaves_the_path_and_libaio_to_the_launchs_own_check(tmp_path: Path) -> None:
    from wizard.config.check import lint_config
    from wizard.config.nvme import launch_nvme_findings

    cfg = {
        "train_micro_batch_size_per_gpu": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}},
    }
    quiet = {"nvme-path-missing", "nvme-path-not-writable", "no-libaio", "libaio-unknown"}
    quiet |= {"no-steps-per-print", "no-log-level"}  # the launch adds both to the copy it starts
    assert quiet & {f.code for f in lint_config(cfg)} >= {"nvme-path-missing", "no-steps-per-print"}
    assert not quiet & {f.code for f in lint_config(cfg, at_launch=True)}
    assert codes(launch_nvme_findings(cfg, machine(disk("/")))) == ["nvme-path-missing"]

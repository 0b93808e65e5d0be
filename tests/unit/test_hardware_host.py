"""Host detection, run for real on this machine (its invariants), plus the parsers on given /proc text."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

import pytest

from wizard.hardware.host import classify_device, libaio_status, parse_mounts, read_host


@pytest.fixture(scope="module")
def host():
    return read_host()


def test_cpu_and_memory(host) -> None:
    assert host.cpu_model
    assert host.logical_cores == os.cpu_count()
    assert host.physical_cores is None or 1 <= host.physical_cores <= host.logical_cores
    assert 0 < host.ram_available_bytes <= host.ram_total_bytes


def test_shm_and_memlock(host) -> None:
    if Path("/dev/shm").is_dir():
        assert host.shm_bytes and host.shm_bytes > 0
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    assert host.memlock_limit_bytes == (-1 if soft == resource.RLIM_INFINITY else soft)


def test_root_filesystem_is_listed_with_sane_sizes(host) -> None:
    mounts = {d.mountpoint: d for d in host.disks}
    assert "/" in mounts
    st = os.statvfs("/")
    root = mounts["/"]
    assert root.total_bytes == st.f_blocks * st.f_frsize
    for d in host.disks:
        assert 0 <= d.free_bytes <= d.total_bytes
        assert d.fstype not in ("proc", "sysfs", "tmpfs", "cgroup", "devpts")
    assert [d.mountpoint for d in host.disks] == sorted(mounts)


def test_libaio_matches_the_files_on_this_machine(host) -> None:
    found, detail = libaio_status()
    assert host.libaio is found and detail
    lib_here = any(
        Path(d, "libaio.so").exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
    )
    if not lib_here:
        assert found is False and "libaio.so" in detail


def test_libaio_found_through_ldflags_and_cflags(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "inc").mkdir()
    (tmp_path / "lib" / "libaio.so").write_bytes(b"")
    (tmp_path / "inc" / "libaio.h").write_text("")
    env = {"LDFLAGS": f"-L{tmp_path}/lib", "CFLAGS": f"-O2 -I{tmp_path}/inc"}
    found, detail = libaio_status(env)
    assert found and str(tmp_path / "lib" / "libaio.so") in detail


def test_parse_mounts_skips_pseudo_filesystems_and_repeats() -> None:
    text = (
        "proc /proc proc rw 0 0\n"
        "/dev/nvme0n1p2 / ext4 rw 0 0\n"
        "tmpfs /dev/shm tmpfs rw 0 0\n"
        "/dev/nvme1n1 /local\\040nvme xfs rw 0 0\n"
        "overlay /var/lib/docker/x overlay rw 0 0\n"
        "/dev/sda1 / ext4 rw 0 0\n"
        "server:/export /home nfs4 rw 0 0\n"
    )
    assert parse_mounts(text) == [
        ("/dev/nvme0n1p2", "/", "ext4"),
        ("/dev/nvme1n1", "/local nvme", "xfs"),
        ("overlay", "/var/lib/docker/x", "overlay"),
        ("server:/export", "/home", "nfs4"),
    ]


def make_sys(tmp_path: Path) -> Path:
    """A /sys tree: nvme0n1 (SSD) with partition nvme0n1p2, sda (rotational), dm-0 on top of nvme0n1p2."""
    sys_root = tmp_path / "sys"
    block = sys_root / "block"
    for disk, rot in (("nvme0n1", "0"), ("sda", "1"), ("dm-0", "0")):
        (block / disk / "queue").mkdir(parents=True)
        (block / disk / "queue" / "rotational").write_text(rot + "\n")
    part = block / "nvme0n1" / "nvme0n1p2"
    part.mkdir()
    (part / "partition").write_text("2\n")
    (block / "dm-0" / "slaves").mkdir()
    (block / "dm-0" / "slaves" / "nvme0n1p2").symlink_to(part)
    cls = sys_root / "class" / "block"
    cls.mkdir(parents=True)
    for name, target in (("nvme0n1", block / "nvme0n1"), ("nvme0n1p2", part), ("sda", block / "sda"),
                         ("dm-0", block / "dm-0")):  # fmt: skip
        (cls / name).symlink_to(target)
    return block


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("/dev/nvme0n1p2", (True, False)),
        ("/dev/nvme0n1", (True, False)),
        ("/dev/sda", (False, True)),
        ("/dev/dm-0", (True, False)),  # LVM on NVMe
        ("overlay", (False, None)),
        ("server:/export", (False, None)),
    ],
)
def test_classify_device(tmp_path: Path, device: str, expected) -> None:
    assert classify_device(device, make_sys(tmp_path)) == expected


def test_without_psutil_proc_is_read_directly(monkeypatch) -> None:
    import psutil

    from wizard.hardware import host as host_module

    expected_total = psutil.virtual_memory().total
    expected_cores = psutil.cpu_count(logical=False)
    monkeypatch.setitem(sys.modules, "psutil", None)  # `import psutil` now raises ImportError
    total, available = host_module.memory()
    assert total == expected_total and 0 < available <= total
    assert host_module.physical_cores() == expected_cores


def test_physical_cores_from_cpuinfo() -> None:
    from wizard.hardware.host import _physical_cores_from_cpuinfo

    # 2 sockets x 2 cores x 2 hyper-threads = 8 logical CPUs, 4 physical cores.
    blocks = [
        f"processor\t: {i}\nphysical id\t: {i // 4}\nsiblings\t: 4\ncore id\t\t: {(i // 2) % 2}\n"
        for i in range(8)
    ]
    assert _physical_cores_from_cpuinfo("\n".join(blocks)) == 4
    assert _physical_cores_from_cpuinfo("processor : 0\n") is None

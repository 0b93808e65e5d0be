"""The CPUs a training may use: the affinity mask and cgroup CPU quotas (hardware.host.usable_cores), what the
planner counts from them (HostInfo.work_cores) and where they show. Real processes with a narrowed affinity; cgroup
trees written as the kernel lays them out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from wizard.hardware.described import describe
from wizard.hardware.host import cgroup_cpu_quota, cores_of, read_host, usable_cores
from wizard.hardware.report import HardwareReport, HostInfo
from wizard.model import load_model_spec
from wizard.planner import calibration as cal
from wizard.planner.throughput import CPU_ADAM_PART, estimate_throughput
from wizard.strategy import Strategy

ROOT = Path(__file__).resolve().parents[2]
AFFINITY = sorted(os.sched_getaffinity(0))
NARROW = f"import json, os; os.sched_setaffinity(0, {{{AFFINITY[0]}}}); "  # a child's first line: one CPU


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_this_process_counts_its_affinity_mask() -> None:
    host = read_host()
    assert host.usable_cores is not None
    assert 1 <= host.usable_cores <= len(AFFINITY) <= (host.logical_cores or 0)


def test_a_process_pinned_to_one_cpu_plans_with_one_core() -> None:
    # a real child whose mask is one CPU (what taskset -c 0 or a one-CPU Slurm task gives)
    code = NARROW + (
        "from wizard.hardware.host import read_host; h = read_host(); "
        "print(json.dumps([h.usable_cores, h.cores, h.restricted, h.work_cores]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, timeout=60
    )
    usable, cores, restricted, work = json.loads(out.stdout)
    assert usable == 1 and work == 1
    assert restricted == (cores > 1)


def test_cgroup_v2_quota_takes_the_tightest_ancestor(tmp_path: Path) -> None:
    proc = tmp_path / "proc-cgroup"
    _write(proc, "0::/user.slice/job\n")
    _write(tmp_path / "cg" / "user.slice" / "job" / "cpu.max", "max 100000\n")
    _write(tmp_path / "cg" / "user.slice" / "cpu.max", "250000 100000\n")
    _write(tmp_path / "cg" / "cpu.max", "400000 100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) == pytest.approx(2.5)
    _write(tmp_path / "cg" / "user.slice" / "job" / "cpu.max", "150000 100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) == pytest.approx(1.5)
    _write(tmp_path / "cg" / "user.slice" / "job" / "cpu.max", "250000 100000\n")
    # docker --cpus=2.5 gives three CPUs' worth of threads, never more than the mask allows
    assert usable_cores(tmp_path / "cg", proc) == min(3, len(AFFINITY))


def test_a_container_sees_its_own_quota_at_the_root(tmp_path: Path) -> None:
    # inside a container the cgroup path names the host's tree, absent under the container's mount: the walk up ends
    # at the mount's root, where the container's own cpu.max is
    proc = tmp_path / "proc-cgroup"
    _write(proc, "0::/kubepods/pod1/abc\n")
    _write(tmp_path / "cg" / "cpu.max", "200000 100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) == pytest.approx(2.0)


def test_hyperthreads_of_one_core_count_once(tmp_path: Path) -> None:
    # 4 logical CPUs: 0/2 and 1/3 are siblings of cores 0 and 1; CPU 5 has no topology: a core of its own
    for cpu, core in ((0, 0), (1, 1), (2, 0), (3, 1)):
        _write(tmp_path / f"cpu{cpu}" / "topology" / "physical_package_id", "0\n")
        _write(tmp_path / f"cpu{cpu}" / "topology" / "core_id", f"{core}\n")
    assert cores_of({0, 2}, tmp_path) == 1
    assert cores_of({0, 1, 2, 3}, tmp_path) == 2
    assert cores_of({0, 1, 5}, tmp_path) == 3
    # a second package's core 0 is another core
    _write(tmp_path / "cpu4" / "topology" / "physical_package_id", "1\n")
    _write(tmp_path / "cpu4" / "topology" / "core_id", "0\n")
    assert cores_of({0, 4}, tmp_path) == 2


def test_cgroup_v1_quota_and_its_absence(tmp_path: Path) -> None:
    proc = tmp_path / "proc-cgroup"
    _write(proc, "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n")
    job = tmp_path / "cg" / "cpu,cpuacct" / "docker" / "abc"
    _write(job / "cpu.cfs_quota_us", "150000\n")
    _write(job / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) == pytest.approx(1.5)
    _write(job / "cpu.cfs_quota_us", "-1\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) is None
    assert usable_cores(tmp_path / "cg", proc) == len(AFFINITY)


@pytest.mark.parametrize(
    "cgroup, cpu_max",
    [
        ("", ""),
        ("garbage", "1 2 3"),
        ("0::/", "abc def"),
        ("0::/", "0 100000"),
        ("0::/", "100000 0"),
        ("0::relative", "100000 100000"),
        ("0::/\n1:cpu:/", "-5 100000"),
        ("\x00\xff::/", "\x00"),
        ("0::/a\x00b", "max 100000"),
    ],
)
def test_unreadable_quotas_are_no_quota(tmp_path: Path, cgroup: str, cpu_max: str) -> None:
    proc = tmp_path / "proc-cgroup"
    _write(proc, cgroup)
    _write(tmp_path / "cg" / "cpu.max", cpu_max)
    assert cgroup_cpu_quota(tmp_path / "cg", proc) is None
    assert cgroup_cpu_quota(tmp_path / "missing", tmp_path / "missing-file") is None


@pytest.mark.parametrize(
    "host, work",
    [
        (HostInfo(physical_cores=8, logical_cores=16), 8),
        (HostInfo(physical_cores=8, logical_cores=16, usable_cores=8), 8),  # the whole mask: 8 distinct cores
        (HostInfo(physical_cores=8, logical_cores=16, usable_cores=2), 2),  # a mask on two cores
        (HostInfo(logical_cores=16, usable_cores=4), 4),
        (HostInfo(usable_cores=4), 4),
        (HostInfo(), None),
    ],
)
def test_work_cores(host: HostInfo, work: int | None) -> None:
    assert host.work_cores == work


def test_the_planner_gives_cpu_adam_the_cores_the_process_may_use() -> None:
    hw = describe("1xH200")
    spec = load_model_spec("llama-7b")
    s = Strategy(zero_stage=2, offload_optimizer="cpu", micro_batch_size=4, activation_checkpointing=True)

    def adam(host: HostInfo) -> float:
        return dict(estimate_throughput(replace(hw, host=host), spec, s, 1024).parts)[CPU_ADAM_PART]

    whole = adam(HostInfo(physical_cores=16, logical_cores=16, usable_cores=16))
    quarter = adam(HostInfo(physical_cores=16, logical_cores=16, usable_cores=4))
    params = 1 / (cal.CPU_ADAM_SECONDS_PER_PARAM + cal.CPU_ADAM_CORE_SECONDS_PER_PARAM / 16)
    at_four = 1 / (cal.CPU_ADAM_SECONDS_PER_PARAM + cal.CPU_ADAM_CORE_SECONDS_PER_PARAM / 4)
    assert quarter / whole == pytest.approx(params / at_four)  # the step of a 4-core host, not a 16-core one
    # a report saved before usable_cores existed reads back as unrestricted
    d = replace(hw, host=HostInfo(physical_cores=16, logical_cores=16)).to_dict()
    d["host"].pop("usable_cores")
    assert HardwareReport.from_dict(d).host.work_cores == 16


def test_detect_says_when_the_process_is_narrowed() -> None:
    code = NARROW + "from wizard.cli import main; main(['detect'])"
    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    if (read_host().cores or 1) > 1:
        assert "this process may use 1 (affinity or cgroup quota): plans count those" in out.stdout


def test_the_hardware_screen_says_when_the_process_is_narrowed() -> None:
    from wizard.tui.screens.hardware import cores_text

    assert cores_text(HostInfo(physical_cores=16, logical_cores=32, usable_cores=16)) == "16 cores"
    assert (
        cores_text(HostInfo(physical_cores=16, logical_cores=32, usable_cores=4)) == "16 cores, 4 usable here"
    )
    assert cores_text(HostInfo(logical_cores=8, usable_cores=2)) == "8 cores, 2 usable here"
    assert cores_text(HostInfo()) == "? cores"
